//! Click and close events (`POST /v1/popup/event`, JSON): a checked user id and action, or an
//! error that names the field; never more than the body's size limit read.
#![no_main]

use hotpath_fuzz as _;
use hotpath_popups::api::{Event, MAX_EVENT_BYTES, MAX_USER_BYTES};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match Event::parse(data) {
        Ok(e) => {
            assert!(data.len() <= MAX_EVENT_BYTES);
            assert!(!e.user.is_empty() && e.user.len() <= MAX_USER_BYTES);
        }
        Err(message) => assert!(!message.is_empty() && message.len() <= 256, "{message}"),
    }
});
