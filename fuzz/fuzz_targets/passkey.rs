//! Passkeys in paths, queries and BEP 41 URL data: whatever the bytes, a key found is 1 to
//! MAX_LEN ASCII letters and digits taken from the input, and a path is matched or not. A key
//! checked as an XBT derived passkey names a user only when it is the one derived for them.
#![no_main]

use std::sync::OnceLock;

use hotpath_fuzz as _;
use hotpath_tracker::private::xbt::{self, Derived, Versioned};
use hotpath_tracker::private::User;
use hotpath_wire::passkey::{find, from_url_data, route, MAX_LEN};
use libfuzzer_sys::fuzz_target;

const SECRET: &[u8] = b"fuzz-secret";
const HASH: [u8; 20] = [7; 20];

/// Users 1 to 16 at version 3, for derived passkeys.
fn derived() -> &'static Derived {
    static D: OnceLock<Derived> = OnceLock::new();
    D.get_or_init(|| {
        let d = Derived::new(16);
        for id in 1..=16u32 {
            let user = User {
                id,
                can_leech: true,
            };
            let v = Versioned {
                user,
                version: 3,
                wait_time: 0,
                peers_limit: 0,
            };
            d.users.put(&id.to_be_bytes(), v).unwrap();
        }
        d.set_secret(Some(SECRET));
        d
    })
}

fn good(key: &[u8]) {
    assert!(!key.is_empty() && key.len() <= MAX_LEN);
    assert!(key.iter().all(u8::is_ascii_alphanumeric));
    if let Some(user) = derived().user(key, &HASH) {
        let made = xbt::passkey(SECRET, 3, user.id, &HASH);
        assert!(made.eq_ignore_ascii_case(std::str::from_utf8(key).unwrap()));
    }
}

fuzz_target!(|data: &[u8]| {
    let (param, data) = match data.split_first() {
        Some((&n, rest)) => rest.split_at(usize::from(n % 8).min(rest.len())),
        None => return,
    };
    if let Ok(key) = from_url_data(data, param) {
        good(key);
    }
    let (path, query) = match data.iter().position(|&b| b == b'?') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &b""[..]),
    };
    if let Some((_, Some(segment))) = route(path) {
        assert!(segment.len() < path.len());
    }
    if let Ok(Some((_, key))) = find(path, query, param) {
        good(key);
    }
});
