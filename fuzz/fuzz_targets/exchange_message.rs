//! A cluster exchange message as a node receives it from Redis: whatever the bytes, refused
//! whole or read delta by delta into a swarm table whose caps hold, never a panic. The
//! fuzzer's bytes are taken as they are (nearly all refused by the MAC) and once more
//! signed with the node's key, so the delta parser and the merge see everything too.
#![no_main]

use hotpath_fuzz as _;
use hotpath_tracker::exchange::{apply, Applied};
use hotpath_tracker::table::{Caps, SwarmTable, Table};
use hotpath_wire::exchange::{self, Delta};
use libfuzzer_sys::fuzz_target;

/// The key the seeds are signed with (`fuzz_seeds` in the hotpath crate's tests).
const KEY: [u8; 16] = *b"hotpath-fuzz-key";

const CAPS: Caps = Caps {
    max_torrents: 64,
    max_peers: 256,
    max_peers_per_torrent: 32,
    ..Caps::LARGE
};

fn read(msg: &[u8], table: &Table<20, 1>) {
    let Ok(m) = exchange::open(msg, &KEY) else {
        return;
    };
    let mut applied = Applied::default();
    let mut again = Vec::new();
    let start = exchange::begin(&mut again, m.origin, m.sent_ms);
    for d in m.deltas() {
        let Ok(d): Result<Delta, _> = d else {
            break;
        };
        exchange::put(&mut again, &d);
        apply(
            table,
            &d,
            m.origin,
            (1_000, 1_800_000_000),
            1_800,
            5,
            &mut applied,
        );
    }
    exchange::seal(&mut again, start, &KEY);
    // Every delta read writes back to the bytes it came from.
    assert!(msg.starts_with(&again[..again.len() - exchange::MAC]));
    let t = table.totals();
    assert!(t.peers <= CAPS.max_peers && t.torrents <= CAPS.max_torrents);
}

fuzz_target!(|data: &[u8]| {
    let table = Table::<20, 1>::new(4, CAPS).with_origin(1);
    read(data, &table);
    let mut signed = data.to_vec();
    exchange::seal(&mut signed, 0, &KEY);
    read(&signed, &table);
});
