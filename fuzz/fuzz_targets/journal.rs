//! Journal segments as a restart replays them: the record framing (length, CRC, sequence) over
//! the whole input, and, since anyone who can write the file can also compute a CRC, the
//! change decoder over the whole input as one payload. Every change it yields merges into the
//! flush queue and encodes back to bytes that decode to the same change. The input is also
//! read as the journal's floor file: what parses writes back to text that parses the same.
#![no_main]

use hotpath_fuzz as _;
use hotpath_store::journal::{parse_floor, scan_bytes};
use hotpath_store::merge::{Change, Pending};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut payloads = 0u64;
    let end = scan_bytes(data, &mut |_, payload| {
        assert!(payload.len() < data.len());
        payloads += 1;
    });
    assert_eq!(end.records, payloads);
    assert!(end.valid_bytes <= end.file_bytes);

    let mut changes = Vec::new();
    let whole = Change::decode_all(data, &mut |c| changes.push(c)).is_some();
    let mut again = Vec::new();
    for c in &changes {
        let before = again.len();
        c.encode(&mut again);
        assert_eq!(again.len() - before, c.encoded_len());
    }
    let mut back = Vec::new();
    Change::decode_all(&again, &mut |c| back.push(c)).expect("encoded changes decode");
    assert_eq!(changes, back);
    if whole {
        assert_eq!(again, data, "a whole payload encodes back to itself");
    }
    let mut pending = Pending::default();
    let n = changes.len() as u64;
    for c in changes {
        pending.apply(c);
    }
    let batch = pending.into_batch();
    assert_eq!(batch.changes, n);
    assert!(batch.rows() as u64 <= 3 * n);

    if let Ok(floor) = parse_floor(data) {
        let mut entries: Vec<_> = floor.iter().collect();
        entries.sort_unstable();
        let text: String = entries.iter().map(|(w, s)| format!("w{w} {s}\n")).collect();
        assert_eq!(parse_floor(text.as_bytes()), Ok(floor));
    }
});
