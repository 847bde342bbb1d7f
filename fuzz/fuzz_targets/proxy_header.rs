//! The PROXY protocol header a balancer's connection starts with: whatever the bytes, an
//! error, "incomplete" (only while shorter than the longest header read) or a header that
//! ends within them, never a panic.
#![no_main]

use hotpath_fuzz as _;
use hotpath_wire::proxy::{parse, Header, MAX_V2};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match parse(data) {
        Ok(Header::Incomplete) => assert!(data.len() < MAX_V2),
        Ok(Header::Complete { used, .. }) => assert!(used <= data.len() && used <= MAX_V2),
        Err(_) => {}
    }
});
