//! Scrape queries: at most the asked number of info hashes, each exactly 20 bytes, whatever the
//! percent-encoding.
#![no_main]

use hotpath_fuzz as _;
use hotpath_wire::query::{decode_id20, pairs, parse_scrape, percent_decode};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&max, data)) = data.split_first() else {
        return;
    };
    let max = usize::from(max % 80);
    let mut out = Vec::new();
    if parse_scrape(data, max, &mut out).is_ok() {
        assert!(out.len() <= max);
    }
    let mut buf = [0u8; 64];
    for (k, v) in pairs(data) {
        assert!(k.len() + v.len() <= data.len());
        if let Some(n) = percent_decode(v, &mut buf) {
            assert!(n <= v.len() && n <= buf.len());
        }
        let _ = decode_id20(v);
    }
});
