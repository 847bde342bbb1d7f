//! Journal segments as a restart replays them: the record framing (length, CRC, sequence) over
//! the whole input, and, since anyone who can write the file can also compute a CRC, the
//! services' change decoders over the whole input as one payload. Every change they yield
//! merges into its service's queue and encodes back to bytes that decode to the same change.
//! The input is also read as the journal's floor file: what parses writes back to text that
//! parses the same.
#![no_main]

use hotpath_fuzz::{AnyChange, SERVICES};
use hotpath_store::journal::{parse_floor, scan_bytes};
use hotpath_store::queue::{decode_all, Queues};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut payloads = 0u64;
    let end = scan_bytes(data, &mut |_, payload| {
        assert!(payload.len() < data.len());
        payloads += 1;
    });
    assert_eq!(end.records, payloads);
    assert!(end.valid_bytes <= end.file_bytes);

    // Every change up to the first that is not one (all of them when the whole input is).
    let mut changes = Vec::new();
    let mut rest = data;
    while let Some((c, len)) = AnyChange::decode(rest) {
        changes.push(c);
        rest = &rest[len..];
    }
    let whole = rest.is_empty();
    let mut again = Vec::new();
    for c in &changes {
        let before = again.len();
        c.encoded().encode(&mut again);
        assert_eq!(again.len() - before, c.encoded().encoded_len());
    }
    let back = decode_all(&again, AnyChange::decode).expect("encoded changes decode");
    assert_eq!(changes, back);
    if whole {
        assert_eq!(again, data, "a whole payload encodes back to itself");
    }
    // The services' queues read what the decoder reads, and as much of it.
    let mut raw = Queues::new(&SERVICES).unwrap();
    assert_eq!(raw.apply(data).is_some(), whole);
    let mut pending = Queues::new(&SERVICES).unwrap();
    pending.apply(&again).expect("encoded changes merge");
    let batch = pending.take();
    let n = changes.len() as u64;
    assert_eq!(batch.changes, n);
    assert!(batch.rows() as u64 <= 3 * n);
    if whole {
        assert_eq!(raw.take(), batch);
    }
    // So do the queues writing a site's tables (XBT's, TorrentPier's, Gazelle's: a user's
    // totals, a torrent's stats, a client's row, a snatch and a token, five at most).
    for services in hotpath_fuzz::site_services() {
        let mut q = Queues::new(&services).unwrap();
        q.apply(&again).expect("encoded changes merge");
        let b = q.take();
        assert_eq!(b.changes, n);
        assert!(b.rows() as u64 <= 5 * n);
    }

    if let Ok(floor) = parse_floor(data) {
        let mut entries: Vec<_> = floor.iter().collect();
        entries.sort_unstable();
        let text: String = entries.iter().map(|(w, s)| format!("w{w} {s}\n")).collect();
        assert_eq!(parse_floor(text.as_bytes()), Ok(floor));
    }
});
