//! Announce queries (HTTP, and the URL data of BEP 41 over UDP): whatever parses must write
//! back as a query that parses to the same announce, and a client-given address is taken only
//! when it is global unicast (the tracker's check, applied to what the parser returns).
#![no_main]

use hotpath_fuzz as _;
use hotpath_wire::query::{is_global_unicast, parse_announce, write_announce};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(a) = parse_announce(data) else {
        return;
    };
    assert!(a.port != 0);
    if let Some(ip) = a.ip {
        let _ = is_global_unicast(ip);
    }
    if let Some((v6, _)) = a.ipv6 {
        let _ = is_global_unicast(v6.into());
    }
    let mut again = Vec::new();
    write_announce(&mut again, &a);
    let b = parse_announce(&again).expect("a written announce parses");
    assert_eq!(a, b, "{}", String::from_utf8_lossy(&again));
});
