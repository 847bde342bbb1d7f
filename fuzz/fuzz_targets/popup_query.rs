//! Popup decision queries (`GET /v1/popup?user=..&segment=..`): a user id of 1 to 255 bytes of
//! UTF-8, at most 16 segments, and a reused query buffer that holds no more than its input.
#![no_main]

use hotpath_fuzz as _;
use hotpath_popups::api::{Query, MAX_SEGMENTS, MAX_USER_BYTES};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut q = Query::default();
    // Twice through the same buffer, as a worker reuses it.
    for _ in 0..2 {
        if q.parse(data).is_err() {
            continue;
        }
        let mut slots = [""; MAX_SEGMENTS];
        let v = q.viewer(&mut slots);
        assert!(!v.user.is_empty() && v.user.len() <= MAX_USER_BYTES);
        assert!(v.segments.len() <= MAX_SEGMENTS);
        let text: usize = v.segments.iter().map(|s| s.len()).sum::<usize>()
            + v.user.len()
            + v.platform.map_or(0, str::len)
            + v.country.map_or(0, str::len);
        assert!(text <= data.len());
    }
});
