//! Memory of a private tracker: registers U users (32-character passkeys) and T torrents, then
//! sends P distinct peers through what a private announce does in memory, without sockets:
//! the passkey and torrent checks ([`Private::check`]), the accounting ledger
//! ([`Private::account`]) and the swarm table's announce. Prints the process's RSS, all-in and
//! per part (registries, then peers), as JSON.
//!
//! What it leaves out: the journal and the store's merge buffer, which hold what is not yet
//! written (bounded by `store.max_pending` and flushed every few seconds), not one entry per
//! peer.
//!
//! `cargo run --release -p hotpath-tracker --example private_memory -- [PEERS] [TORRENTS]
//! [USERS]` (defaults: 10,000,000 peers, 1,000,000 torrents, 1,000,000 users).

mod common;

use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

use hotpath_config::{PrivateConfig, TrackerConfig};
use hotpath_tracker::private::{Accounted, Ask, Private, Torrent, User};
use hotpath_tracker::table::{Caps, Selection, SwarmTable, Table};

fn arg(i: usize, default: u64, name: &str) -> u64 {
    std::env::args()
        .nth(i)
        .map_or(default, |s| s.parse().expect(name))
}

/// Torrent `t`'s info hash: fixed, spread over the hash space.
fn info_hash(t: u64) -> [u8; 20] {
    let h = (t + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut ih = [0; 20];
    ih[..8].copy_from_slice(&h.to_le_bytes());
    ih[12..20].copy_from_slice(&h.rotate_left(17).to_le_bytes());
    ih
}

/// User `u`'s passkey: 32 hex digits.
fn passkey(u: u64) -> [u8; 32] {
    let mut k = [0; 32];
    let v = u128::from(u + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835);
    k.copy_from_slice(format!("{v:032x}").as_bytes());
    k
}

fn main() {
    let peers = arg(1, 10_000_000, "PEERS");
    let torrents = arg(2, 1_000_000, "TORRENTS");
    let users = arg(3, 1_000_000, "USERS");
    let config = PrivateConfig::default();
    let tracker = TrackerConfig::default();
    let base = common::rss_bytes();
    let private = Private::new(&config, usize::MAX, tracker.peer_timeout_secs);
    for u in 0..users {
        let user = User {
            id: u as u32 + 1,
            can_leech: true,
        };
        private
            .users
            .put(&passkey(u), user)
            .expect("room for every user");
    }
    for t in 0..torrents {
        let torrent = Torrent {
            id: t as u32 + 1,
            download_pct: 100,
            upload_pct: 100,
            poster: 0,
            tor_type: 0,
        };
        private
            .torrents
            .put(&info_hash(t), torrent)
            .expect("room for every torrent");
    }
    let registered = common::rss_bytes();
    // The swarm table a private tracker runs by default (no peer ids kept).
    let swarms: Box<dyn SwarmTable> = Box::new(Table::<0>::new(tracker.shards, Caps::LARGE));
    let mut rng = fastrand::Rng::with_seed(7);
    let mut sel = Selection::default();
    let mut a = common::started();
    let started = Instant::now();
    for i in 0..peers {
        // Peer i is on torrent i % T, of a user that has no other peer on that torrent.
        let t = i % torrents;
        let u = (i + (i / torrents) * 99_991) % users;
        a.info_hash = info_hash(t);
        a.peer_id[..8].copy_from_slice(b"-lt2000-");
        a.peer_id[8..16].copy_from_slice(&i.to_le_bytes());
        let ip = (i as u32).wrapping_mul(2_654_435_761);
        let port = 6881 + (i >> 32) as u16;
        let mut addr = [0u8; 6];
        addr[..4].copy_from_slice(&ip.to_be_bytes());
        addr[4..].copy_from_slice(&port.to_be_bytes());
        a.v4 = Some(addr);
        let left = if rng.u8(..4) == 0 { 0 } else { 1 << 20 };
        a.seeder = left == 0;
        let key = passkey(u);
        let (user, torrent) = private
            .check(Ask {
                passkey: Ok(&key),
                from: [192, 0, 2, 1].into(),
                info_hash: &a.info_hash,
                peer_id: &a.peer_id,
                port,
                leeching: left > 0,
                at: 1_800_000_000,
            })
            .expect("a registered user and torrent");
        private
            .account(
                user,
                torrent,
                &Accounted {
                    peer_id: &a.peer_id,
                    ip: IpAddr::V4(Ipv4Addr::from(ip)),
                    port,
                    uploaded: i,
                    downloaded: i,
                    left,
                    stopped: false,
                    regular: false,
                    now: 1,
                    at: 1_800_000_000,
                },
                tracker.min_interval_secs,
            )
            .expect("one peer per user per torrent");
        sel.clear();
        swarms
            .announce(&a, 1, &mut rng, &mut sel)
            .expect("no caps are set");
    }
    let elapsed = started.elapsed();
    let rss = common::rss_bytes();
    let totals = swarms.totals();
    assert_eq!(totals.peers as u64, peers);
    assert_eq!(private.ledger.len() as u64, peers);
    println!(
        "{{\"peers\":{peers},\"torrents\":{torrents},\"users\":{users},\"rss_bytes\":{rss},\"baseline_rss_bytes\":{base},\"registries_bytes\":{},\"peers_bytes\":{},\"bytes_per_peer_all_in\":{:.1},\"bytes_per_peer_ledger_and_swarm\":{:.1},\"bytes_per_user_and_torrent\":{:.1},\"announces_per_sec\":{:.0}}}",
        registered - base,
        rss - registered,
        rss as f64 / peers as f64,
        (rss - registered) as f64 / peers as f64,
        (registered - base) as f64 / (users + torrents) as f64,
        peers as f64 / elapsed.as_secs_f64(),
    );
}
