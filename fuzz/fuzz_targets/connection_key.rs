//! The UDP connection ids' key file (`connection-ids.key`) as a start reads it: whatever the
//! bytes, an error or a key, never a panic; a key only from a whole file within an id's
//! lifetime of its save.
#![no_main]

use hotpath_fuzz as _;
use hotpath_tracker::persist::parse_connection_key;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let now = 1_800_000_060;
    if let Ok(Some(_)) = parse_connection_key(data, now) {
        assert_eq!(data.len(), 36);
        let saved = i64::from_le_bytes(data[8..16].try_into().unwrap());
        assert!((0..=120).contains(&(now - saved)));
    }
});
