//! Access list files (one hex info hash per line, `#` comments): the set, or the first bad
//! line named.
#![no_main]

use hotpath_fuzz as _;
use hotpath_tracker::access::parse_list;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match parse_list(text) {
        Ok(set) => assert!(set.len() * 40 <= text.len()),
        Err(e) => assert!(e.line >= 1 && e.got.len() <= 80 && e.to_string().starts_with("line ")),
    }
});
