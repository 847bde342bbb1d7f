//! Popup definitions (the admin API's PUT body, and every row the catalog poller reads back
//! from the database): parsed and checked, or refused with a message; a checked popup written
//! out as JSON parses back to the same rules.
#![no_main]

use hotpath_fuzz as _;
use hotpath_popups::Popup;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut p = match Popup::from_json(data) {
        Ok(p) => p,
        Err(e) => {
            assert!(!e.is_empty() && e.len() <= 256, "{e}");
            return;
        }
    };
    let text = serde_json::to_vec(&p).expect("a checked popup serializes");
    let mut again = Popup::from_json(&text).expect("a serialized popup parses");
    // The payload is the site's own JSON, passed through; floats in it may move by an ulp.
    p.payload = serde_json::Value::Null;
    again.payload = serde_json::Value::Null;
    assert_eq!(p, again);
});
