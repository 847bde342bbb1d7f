//! Passkeys in paths, queries and BEP 41 URL data: whatever the bytes, a key found is 1 to
//! MAX_LEN ASCII letters and digits taken from the input, and a path is matched or not.
#![no_main]

use hotpath_fuzz as _;
use hotpath_wire::passkey::{find, from_url_data, route, MAX_LEN};
use libfuzzer_sys::fuzz_target;

fn good(key: &[u8]) {
    assert!(!key.is_empty() && key.len() <= MAX_LEN);
    assert!(key.iter().all(u8::is_ascii_alphanumeric));
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
