//! UNIT3D-Announce's API as a UNIT3D site calls it: a request (first byte: the method; then the
//! path below `/announce/<key>` up to a NUL; the rest the JSON body) decodes to a checked call
//! or to an error with a 4xx status; the call applies to a UNIT3D private tracker with small
//! caps, which answers an empty body, a JSON object or an error status, and never holds more
//! than its caps.
#![no_main]

use std::sync::OnceLock;

use hotpath_fuzz as _;
use hotpath_tracker::private::unit3d::{decode, MAX_GROUPS};
use hotpath_tracker::private::Private;
use libfuzzer_sys::fuzz_target;

const METHODS: [&str; 4] = ["PUT", "DELETE", "GET", "POST"];

fn tracker() -> &'static Private {
    static P: OnceLock<Private> = OnceLock::new();
    P.get_or_init(|| {
        let c = hotpath_config::PrivateConfig {
            schema: hotpath_config::PrivateSchema::Unit3d,
            max_users: 64,
            max_torrents: 64,
            max_tokens: 8,
            max_personal_freeleech: 4,
            ..Default::default()
        };
        Private::new(&c, 1_000, 3_600)
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&m, rest)) = data.split_first() else {
        return;
    };
    let method = METHODS[usize::from(m) % METHODS.len()];
    let split = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
    let Ok(path) = std::str::from_utf8(&rest[..split]) else {
        return;
    };
    let body = rest.get(split + 1..).unwrap_or_default();
    let call = match decode(method, path, body) {
        Ok(c) => c,
        Err(e) => {
            assert!((400..500).contains(&e.status), "{e:?}");
            assert!(!e.message.is_empty());
            return;
        }
    };
    let p = tracker();
    match p.unit3d_call(call, 1_000) {
        Ok(body) => assert!(body.is_empty() || body.starts_with(b"{")),
        Err(e) => assert!((400..600).contains(&e.status), "{e:?}"),
    }
    let u = p.unit3d.as_ref().expect("the UNIT3D preset");
    assert!(u.tokens.read().len() <= 8 && u.personal.read().len() <= 4);
    assert!(u.featured.read().len() <= 64 && u.user_groups.read().len() <= 64);
    assert!(u.groups.read().len() <= MAX_GROUPS);
    assert!(p.users.len() <= 64 && p.torrents.len() <= 64);
});
