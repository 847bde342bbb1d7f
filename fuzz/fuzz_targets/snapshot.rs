//! Swarm snapshots as a restart loads them. The first input byte picks the table (peer ids
//! kept or not), the format (with or without the IPv6 alias count) and small caps; the rest is
//! the body after the header, since anyone who can write the file can also compute its CRC.
//! What loads must respect the caps, save, and load again into a fresh table to the same
//! counts. The whole input also goes through the header check.
#![no_main]

use hotpath_fuzz as _;
use hotpath_tracker::persist::parse_snapshot;
use hotpath_tracker::table::{Caps, Counts, SwarmTable, Table};
use libfuzzer_sys::fuzz_target;

const CAPS: Caps = Caps {
    max_torrents: 64,
    max_peers: 512,
    max_peers_per_torrent: 128,
    max_peers_per_ip: 4,
    max_peers_per_ip_48: 8,
    max_idle_torrents: 64,
    max_torrents_per_address: 16,
    max_torrents_per_48: 32,
    max_peers_per_address: 128,
    max_peers_per_48: 256,
};
const NOW: u16 = 40_000;
const TIMEOUT: u16 = 1_800;

fn table(ids: bool) -> Box<dyn SwarmTable> {
    if ids {
        Box::new(Table::<20>::new(4, CAPS))
    } else {
        Box::new(Table::<0>::new(4, CAPS))
    }
}

fn counts(t: &dyn SwarmTable) -> Vec<([u8; 20], Counts)> {
    let mut all = Vec::new();
    t.for_each(&mut |h, c| all.push((*h, c)));
    all.sort_unstable_by_key(|e| e.0);
    all
}

fuzz_target!(|data: &[u8]| {
    if let Ok(head) = parse_snapshot(data) {
        assert!(head.body.len() + 21 == data.len());
    }
    let Some((&flags, body)) = data.split_first() else {
        return;
    };
    let ids = flags & 1 != 0;
    let aliases = flags & 2 != 0;
    let id_len = if flags & 4 != 0 { 20 } else { 0 };
    let downtime = u32::from(flags >> 3) * 100;
    let a = table(ids);
    let _ = a.load(body, id_len, aliases, NOW, downtime, TIMEOUT);
    let totals = a.totals();
    assert!(totals.torrents <= CAPS.max_torrents);
    assert!(totals.peers <= CAPS.max_peers);
    assert!(totals.seeders <= totals.peers);
    let before = counts(&*a);
    for (_, c) in &before {
        assert!((c.seeders + c.leechers) as usize <= CAPS.max_peers_per_torrent);
    }

    let mut saved = Vec::new();
    let (torrents, peers) = a.save(NOW, &mut saved);
    assert_eq!((torrents, peers), (totals.torrents, totals.peers));
    let b = table(ids);
    let loaded = b
        .load(&saved, a.id_len(), true, NOW, 0, TIMEOUT)
        .expect("a saved table loads");
    assert_eq!(loaded, (torrents, peers));
    assert_eq!(counts(&*b), before);
});
