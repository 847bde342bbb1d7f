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

/// Announces `a` as the IPv4 peer `ip:port` (as a seeder one time in four) to `table`.
#[allow(dead_code)] // private_memory announces through its own path
pub fn announce_v4(
    table: &dyn hotpath_tracker::table::SwarmTable,
    a: &mut PeerAnnounce,
    ip: u32,
    port: u16,
    rng: &mut fastrand::Rng,
    sel: &mut hotpath_tracker::table::Selection,
) {
    let mut addr = [0u8; 6];
    addr[..4].copy_from_slice(&ip.to_be_bytes());
    addr[4..].copy_from_slice(&port.to_be_bytes());
    a.v4 = Some(addr);
    a.seeder = rng.u8(..4) == 0;
    sel.clear();
    table.announce(a, 0, rng, sel).expect("no caps are set");
}
