//! Memory per peer: loads N distinct IPv4 peers over M torrents through the swarm API (the same
//! `Store::announce` the handlers call, without sockets) and prints the process's RSS per peer.
//!
//! Then it saves every swarm as a graceful stop does and loads them into a new table as the
//! next start does, and prints both times (a restart's cost).
//!
//! `cargo run --release -p hotpath-tracker --example peer_memory -- [PEERS] [TORRENTS] [ids|node]`
//! (defaults: 10,000,000 peers over 2,000,000 torrents; `ids` keeps peer ids; `node` is a
//! cluster node's table, each peer with its origin; `1000000 1` is one torrent of a million
//! peers).

mod common;

use std::time::Instant;

use hotpath_tracker::table::{Caps, Selection, SwarmTable, Table};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let peers: u64 = args
        .get(1)
        .map_or(10_000_000, |s| s.parse().expect("PEERS"));
    let torrents: u64 = args
        .get(2)
        .map_or(2_000_000, |s| s.parse().expect("TORRENTS"));
    let ids = args.get(3).is_some_and(|s| s == "ids");
    let node = args.get(3).is_some_and(|s| s == "node");
    let caps = Caps::LARGE;
    let base = common::rss_bytes();
    // The shard count users get by default.
    let shards = hotpath_config::TrackerConfig::default().shards;
    let store: Box<dyn SwarmTable> = if ids {
        Box::new(Table::<20>::new(shards, caps))
    } else if node {
        Box::new(Table::<0, 1>::new(shards, caps).with_origin(1))
    } else {
        Box::new(Table::<0>::new(shards, caps))
    };
    let mut rng = fastrand::Rng::with_seed(7);
    let mut sel = Selection::default();
    let started = Instant::now();
    let mut a = common::started();
    for i in 0..peers {
        // Torrent i % M with a pseudo-random but fixed hash; peer i gets a distinct address.
        let t = i % torrents;
        let h = t.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        a.info_hash[..8].copy_from_slice(&h.to_le_bytes());
        a.info_hash[12..20].copy_from_slice(&h.rotate_left(17).to_le_bytes());
        a.peer_id[..8].copy_from_slice(&i.to_le_bytes());
        let ip = (i as u32).wrapping_mul(2_654_435_761);
        let port = 6881 + (i >> 32) as u16;
        common::announce_v4(&*store, &mut a, ip, port, &mut rng, &mut sel);
    }
    let elapsed = started.elapsed();
    let totals = store.totals();
    let rss = common::rss_bytes();
    // What a restart does with these swarms: save them, then load them into a new table.
    let t = Instant::now();
    let mut snapshot = Vec::new();
    store.save(0, &mut snapshot);
    let save_secs = t.elapsed().as_secs_f64();
    drop(store);
    let fresh: Box<dyn SwarmTable> = if ids {
        Box::new(Table::<20>::new(shards, caps))
    } else if node {
        Box::new(Table::<0, 1>::new(shards, caps).with_origin(1))
    } else {
        Box::new(Table::<0>::new(shards, caps))
    };
    let t = Instant::now();
    let (_, loaded) = fresh
        .load(&snapshot, if ids { 20 } else { 0 }, true, 0, 0, 3600)
        .expect("the snapshot just saved");
    let load_secs = t.elapsed().as_secs_f64();
    assert_eq!(loaded, totals.peers);
    println!(
        "{{\"peers\":{},\"torrents\":{},\"peer_ids\":{ids},\"rss_bytes\":{rss},\"baseline_rss_bytes\":{base},\"bytes_per_peer_all_in\":{:.1},\"bytes_per_peer_table\":{:.1},\"announces_per_sec\":{:.0},\"snapshot_bytes\":{},\"save_secs\":{save_secs:.2},\"load_secs\":{load_secs:.2}}}",
        totals.peers,
        totals.torrents,
        rss as f64 / totals.peers as f64,
        (rss - base) as f64 / totals.peers as f64,
        peers as f64 / elapsed.as_secs_f64(),
        snapshot.len()
    );
}
