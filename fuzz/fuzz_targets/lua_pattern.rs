//! The Lua pattern matcher that `string.find`, `match`, `gmatch` and `gsub` use on request
//! bodies: any pattern over any subject ends in a match, no match, a pattern error or the
//! budget's stop; never a panic, an out-of-bounds read or unbounded work.
#![no_main]

use hotpath_fuzz as _;
use hotpath_lua::pattern::{Matcher, Stop};
use libfuzzer_sys::fuzz_target;

/// Steps one input may take (the budget stops the matcher past it).
const MAX_STEPS: u64 = 1 << 16;

fuzz_target!(|data: &[u8]| {
    // The pattern, then a 0xff byte, then the subject.
    let (pat, src) = match data.iter().position(|&b| b == 0xff) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &b""[..]),
    };
    let (anchor, pat) = match pat.strip_prefix(b"^") {
        Some(p) => (true, p),
        None => (false, pat),
    };
    let mut steps = 0u64;
    let mut tick = |n: u64| {
        steps += n;
        if steps > MAX_STEPS {
            Err(())
        } else {
            Ok(())
        }
    };
    let mut m = Matcher::new(src, pat, &mut tick);
    for s in 0..=src.len() {
        match m.find_at(s) {
            Ok(Some(e)) => {
                assert!(s <= e && e <= src.len());
                if let Ok(caps) = m.captures(s, e, true) {
                    assert!(caps.len() <= hotpath_lua::pattern::MAX_CAPTURES);
                }
                break;
            }
            Ok(None) if !anchor => {}
            Ok(None) | Err(Stop::Pattern(_)) | Err(Stop::Budget(())) => break,
        }
    }
});
