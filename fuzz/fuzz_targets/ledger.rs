//! Private-tracker ledger files as a restart loads them. The first input byte picks the
//! downtime since the save; the rest is the file after its magic, with the checksum
//! computed here (anyone who can write the file can also compute it). What loads respects
//! the caps, saves, and loads again into a fresh ledger to the same peers and the same leech
//! slots taken.
#![no_main]

use hotpath_fuzz as _;
use hotpath_tracker::private::ledger::{parse_ledger, Ledger, MAGIC};
use libfuzzer_sys::fuzz_target;

const MAX: usize = 32;
const PER_USER: u16 = 2;
const TIMEOUT: u32 = 1_800;

fn file(body: &[u8]) -> Vec<u8> {
    let mut f = [MAGIC.as_slice(), body].concat();
    let crc = crc32fast::hash(&f);
    f.extend_from_slice(&crc.to_le_bytes());
    f
}

fuzz_target!(|data: &[u8]| {
    let _ = parse_ledger(data);
    let Some((&d, body)) = data.split_first() else {
        return;
    };
    let f = file(body);
    let Ok(head) = parse_ledger(&f) else {
        return;
    };
    let l = Ledger::new(PER_USER, MAX, true);
    let n = l
        .load(&head, 100, u32::from(d) * 10, TIMEOUT)
        .expect("a fresh ledger loads");
    assert!(n <= MAX && l.len() == n);
    let mut saved = Vec::new();
    assert_eq!(l.save(100, head.saved_at, &mut saved), n);
    let crc = crc32fast::hash(&saved);
    saved.extend_from_slice(&crc.to_le_bytes());
    let again = parse_ledger(&saved).expect("a saved ledger parses");
    assert_eq!(again.key, head.key);
    let m = Ledger::new(PER_USER, MAX, true);
    assert_eq!(m.load(&again, 100, 0, TIMEOUT), Ok(n));
    for user in head
        .body
        .chunks_exact(36)
        .map(|e| u32::from_le_bytes([e[4], e[5], e[6], e[7]]))
    {
        assert_eq!(l.leeching(user), m.leeching(user));
    }
});
