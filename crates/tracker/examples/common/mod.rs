//! What the memory examples share.

use hotpath_tracker::table::PeerAnnounce;
use hotpath_wire::query::Event;

/// The process's resident set, in bytes.
pub fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kb * 1024
}

/// A started IPv4 announce wanting no peers, its torrent, id and address to fill in.
pub fn started() -> PeerAnnounce {
    PeerAnnounce {
        info_hash: [0; 20],
        peer_id: [0; 20],
        v4: None,
        v6: None,
        alias6: None,
        seeder: false,
        complete: false,
        event: Event::Started,
        want: 0,
        want_v4: true,
        want_v6: false,
    }
}
