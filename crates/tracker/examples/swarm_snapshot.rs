//! Writes the swarm snapshot a tracker loads when it starts (`swarms.snapshot` in
//! `store.data_dir`), holding PEERS IPv4 peers spread evenly over TORRENTS torrents, torrent
//! `t` (1 to TORRENTS) having the info hash `hotpath bench`'s UDP load announces for its torrent
//! of rank `t`. The cost-growth benchmarks (bench/compare, `kind = "sweep"`) start the tracker
//! on it, so a swarm of a million peers or ten million torrents is there from the first request
//! instead of being built by the load.
//!
//! The table is filled through the announce path the handlers use, then saved as a graceful
//! stop saves it; every peer has its own address (so no per-address cap is met) and one in four
//! is a seeder.
//!
//! `cargo run --release -p hotpath-tracker --example swarm_snapshot -- DIR PEERS TORRENTS`

// `rss_bytes`, of what the memory examples share, is not used here.
#[allow(dead_code)]
mod common;

use std::path::Path;

use hotpath_tracker::table::{Caps, Selection, Table};

/// `hotpath bench`'s seed for the info hashes of its UDP load (crates/bench/src/udp.rs).
const HASH_SEED: u64 = 0x6861_7368;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(dir), Some(peers), Some(torrents)) = (
        args.get(1),
        args.get(2).and_then(|s| s.parse::<u64>().ok()),
        args.get(3).and_then(|s| s.parse::<u64>().ok()),
    ) else {
        eprintln!("usage: swarm_snapshot DIR PEERS TORRENTS (PEERS >= TORRENTS >= 1)");
        std::process::exit(2);
    };
    if torrents == 0 || peers < torrents || peers > u64::from(u32::MAX) {
        eprintln!("swarm_snapshot: PEERS must be at least TORRENTS (>= 1) and below 2^32");
        std::process::exit(2);
    }
    let shards = hotpath_config::TrackerConfig::default().shards;
    let table = Table::<0>::new(shards, Caps::LARGE);
    let mut rng = fastrand::Rng::with_seed(7);
    let mut sel = Selection::default();
    let mut a = common::started();
    for i in 0..peers {
        a.info_hash = hotpath_bench::template::value20(HASH_SEED, i % torrents + 1);
        // A distinct address per peer: 10.0.0.0/8 and up, port 6881.
        let ip = 0x0A00_0000u32.wrapping_add(i as u32);
        common::announce_v4(&table, &mut a, ip, 6881, &mut rng, &mut sel);
    }
    std::fs::create_dir_all(dir).expect("DIR");
    let (t, p) = hotpath_tracker::persist::write_swarms(&table, 0, Path::new(dir))
        .expect("writing the snapshot");
    println!("{{\"torrents\":{t},\"peers\":{p}}}");
}
