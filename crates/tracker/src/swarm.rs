//! The in-memory swarm state: a sharded table of torrents, each with compact peer sets.
//!
//! A peer is identified by its address (IP and port), as opentracker does: a client's
//! re-announce from the same address updates its record in place, and no peer id needs to be
//! kept unless non-compact answers should carry it (`keep_peer_ids`). A record is the address,
//! a 16-bit "last seen" in seconds (ages are taken with wrapping arithmetic; the peer timeout is
//! capped at 12 h so they never wrap), and optionally the peer id: 8 bytes for an IPv4 peer.
//!
//! In each peer set the seeders come first and the leechers after them, so seeder and leecher
//! counts are O(1) and "send a seeder only leechers" is a range. Sets of more than
//! [`INDEX_AT`] peers also keep an address index so an announce never scans a big swarm.
//! Peer selection takes a window at a random offset of the eligible range (wrapping), so it
//! costs O(numwant) whatever the swarm's size; removals move the last peer into the gap, which
//! keeps reshuffling the order over time.

use hashbrown::HashMap;
use parking_lot::Mutex;

use hotpath_wire::query::Id20;

/// Peer sets this large or larger keep an address index.
pub const INDEX_AT: usize = 32;

/// One peer: `A` address bytes (4 or 16 IP bytes then 2 port bytes, network order), when it was
/// last seen, and `I` bytes of peer id (0 or 20).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct Record<const A: usize, const I: usize> {
    addr: [u8; A],
    seen: [u8; 2],
    id: [u8; I],
}

impl<const A: usize, const I: usize> Record<A, I> {
    fn seen(&self) -> u16 {
        u16::from_ne_bytes(self.seen)
    }

    /// The compact address (IP then port, network order).
    pub fn addr(&self) -> &[u8; A] {
        &self.addr
    }

    /// The peer id, when ids are kept.
    pub fn peer_id(&self) -> Option<&[u8]> {
        (I > 0).then_some(&self.id[..])
    }
}

/// The peers of one address family of one torrent.
#[derive(Debug)]
pub struct PeerSet<const A: usize, const I: usize> {
    /// Seeders in `[0, seeders)`, leechers after.
    peers: Vec<Record<A, I>>,
    seeders: u32,
    /// Address -> position, only for sets of at least [`INDEX_AT`] peers.
    index: Option<Box<HashMap<[u8; A], u32>>>,
}

impl<const A: usize, const I: usize> Default for PeerSet<A, I> {
    fn default() -> Self {
        Self {
            peers: Vec::new(),
            seeders: 0,
            index: None,
        }
    }
}

/// What an announce did to a peer set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// A new peer was added.
    Added,
    /// A known peer was updated.
    Updated,
    /// The peer was removed (event=stopped).
    Removed,
    /// Nothing changed (a stopped peer that was not known, or a full swarm).
    None,
}

impl<const A: usize, const I: usize> PeerSet<A, I> {
    /// Seeders in the set.
    pub fn seeders(&self) -> u32 {
        self.seeders
    }

    /// Leechers in the set.
    pub fn leechers(&self) -> u32 {
        self.peers.len() as u32 - self.seeders
    }

    /// Peers in the set.
    pub fn len(&self) -> usize {
        self.peers.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.peers.is_empty()
    }

    fn find(&self, addr: &[u8; A]) -> Option<usize> {
        match &self.index {
            Some(index) => index.get(addr).map(|&i| i as usize),
            None => self.peers.iter().position(|p| &p.addr == addr),
        }
    }

    fn swap(&mut self, i: usize, j: usize) {
        if i == j {
            return;
        }
        self.peers.swap(i, j);
        if let Some(index) = &mut self.index {
            index.insert(self.peers[i].addr, i as u32);
            index.insert(self.peers[j].addr, j as u32);
        }
    }

    fn remove_at(&mut self, mut i: usize) {
        let seeders = self.seeders as usize;
        if i < seeders {
            // Keep seeders contiguous: move the gap to the seeder/leecher boundary first.
            self.swap(i, seeders - 1);
            i = seeders - 1;
            self.seeders -= 1;
        }
        let last = self.peers.len() - 1;
        self.swap(i, last);
        let gone = self.peers.pop().expect("set is not empty");
        if let Some(index) = &mut self.index {
            index.remove(&gone.addr);
            if self.peers.len() < INDEX_AT / 2 {
                self.index = None;
            }
        }
        if self.peers.capacity() > 2 * self.peers.len() + 4 {
            self.peers.shrink_to_fit();
        }
    }

    fn set_seeder(&mut self, i: usize, seeder: bool) -> usize {
        let boundary = self.seeders as usize;
        match (i < boundary, seeder) {
            (false, true) => {
                self.swap(i, boundary);
                self.seeders += 1;
                boundary
            }
            (true, false) => {
                self.swap(i, boundary - 1);
                self.seeders -= 1;
                boundary - 1
            }
            _ => i,
        }
    }

    /// Applies an announce; `max_peers` 0 means no cap.
    pub fn announce(
        &mut self,
        addr: [u8; A],
        id: &Id20,
        seeder: bool,
        stopped: bool,
        now: u16,
        max_peers: usize,
    ) -> (Change, bool) {
        let found = self.find(&addr);
        let was_seeder = found.is_some_and(|i| i < self.seeders as usize);
        let change = match found {
            Some(i) if stopped => {
                self.remove_at(i);
                Change::Removed
            }
            None if stopped => Change::None,
            Some(i) => {
                let i = self.set_seeder(i, seeder);
                let record = &mut self.peers[i];
                record.seen = now.to_ne_bytes();
                record.id.copy_from_slice(&id[..I]);
                Change::Updated
            }
            None if max_peers != 0 && self.peers.len() >= max_peers => Change::None,
            None => {
                let mut record = Record {
                    addr,
                    seen: now.to_ne_bytes(),
                    id: [0; I],
                };
                record.id.copy_from_slice(&id[..I]);
                if self.peers.len() < INDEX_AT {
                    // Small sets grow one record at a time: memory per peer is the headline.
                    self.peers.reserve_exact(1);
                }
                self.peers.push(record);
                let i = self.peers.len() - 1;
                if let Some(index) = &mut self.index {
                    index.insert(addr, i as u32);
                } else if self.peers.len() >= INDEX_AT {
                    let index = self
                        .peers
                        .iter()
                        .enumerate()
                        .map(|(i, p)| (p.addr, i as u32))
                        .collect();
                    self.index = Some(Box::new(index));
                }
                if seeder {
                    self.set_seeder(i, true);
                }
                Change::Added
            }
        };
        (change, was_seeder)
    }

    /// Calls `each` with up to `want` peers for a client at `own` address: only leechers when
    /// the client is a seeder, never the client itself, starting at a random offset.
    pub fn select(
        &self,
        own: &[u8; A],
        seeder: bool,
        want: usize,
        rng: &mut fastrand::Rng,
        mut each: impl FnMut(&Record<A, I>),
    ) -> usize {
        let range = if seeder {
            &self.peers[self.seeders as usize..]
        } else {
            &self.peers[..]
        };
        if range.is_empty() || want == 0 {
            return 0;
        }
        let start = rng.usize(..range.len());
        let mut sent = 0;
        for p in range[start..].iter().chain(&range[..start]) {
            if sent == want {
                break;
            }
            if &p.addr != own {
                each(p);
                sent += 1;
            }
        }
        sent
    }

    /// Drops peers not seen for more than `timeout` seconds; returns how many were dropped.
    pub fn expire(&mut self, now: u16, timeout: u16) -> usize {
        let mut dropped = 0;
        let mut i = 0;
        while i < self.peers.len() {
            if now.wrapping_sub(self.peers[i].seen()) > timeout {
                self.remove_at(i);
                dropped += 1;
            } else {
                i += 1;
            }
        }
        dropped
    }

    /// Heap bytes this set holds (records and index), for the memory report.
    pub fn heap_bytes(&self) -> usize {
        self.peers.capacity() * std::mem::size_of::<Record<A, I>>()
            + self.index.as_ref().map_or(0, |ix| {
                ix.capacity() * (A + 4 + 1) + std::mem::size_of::<HashMap<[u8; A], u32>>()
            })
    }
}

/// One torrent: its IPv4 peers inline, its IPv6 peers behind a pointer (most swarms have none),
/// and its snatch count.
#[derive(Debug, Default)]
pub struct Torrent<const I: usize> {
    /// IPv4 peers.
    pub v4: PeerSet<6, I>,
    /// IPv6 peers, allocated on the first one.
    pub v6: Option<Box<PeerSet<18, I>>>,
    /// Completed downloads seen (event=completed).
    pub completed: u32,
}

impl<const I: usize> Torrent<I> {
    /// Seeders of both families.
    pub fn seeders(&self) -> u32 {
        self.v4.seeders() + self.v6.as_ref().map_or(0, |s| s.seeders())
    }

    /// Leechers of both families.
    pub fn leechers(&self) -> u32 {
        self.v4.leechers() + self.v6.as_ref().map_or(0, |s| s.leechers())
    }

    /// Whether no peer is left.
    pub fn is_empty(&self) -> bool {
        self.v4.is_empty() && self.v6.as_ref().is_none_or(|s| s.is_empty())
    }
}

/// One shard: its torrents and its share of the global counts, all under one short lock.
#[derive(Debug, Default)]
pub struct Shard<const I: usize> {
    /// The torrents.
    pub torrents: HashMap<Id20, Torrent<I>>,
    /// Peers in this shard (both families).
    pub peers: usize,
    /// Seeders in this shard.
    pub seeders: usize,
}

/// All torrents, sharded by info hash. Each operation locks one shard for a short,
/// allocation-light critical section and never across a syscall.
#[derive(Debug)]
pub struct Swarms<const I: usize> {
    shards: Box<[Mutex<Shard<I>>]>,
    mask: usize,
}

impl<const I: usize> Swarms<I> {
    /// An empty table of `shards` shards (a power of two).
    pub fn new(shards: usize) -> Self {
        assert!(shards.is_power_of_two());
        Self {
            shards: (0..shards).map(|_| Mutex::default()).collect(),
            mask: shards - 1,
        }
    }

    /// Number of shards.
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// The shard holding `info_hash`.
    pub fn shard(&self, info_hash: &Id20) -> &Mutex<Shard<I>> {
        let n = u32::from_le_bytes([info_hash[16], info_hash[17], info_hash[18], info_hash[19]]);
        &self.shards[n as usize & self.mask]
    }

    /// Shard `i`.
    pub fn shard_at(&self, i: usize) -> &Mutex<Shard<I>> {
        &self.shards[i]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(n: u32) -> [u8; 6] {
        let mut a = [0u8; 6];
        a[..4].copy_from_slice(&n.to_be_bytes());
        a[4..].copy_from_slice(&6881u16.to_be_bytes());
        a
    }

    fn check_invariants<const A: usize, const I: usize>(s: &PeerSet<A, I>) {
        if let Some(index) = &s.index {
            assert_eq!(index.len(), s.peers.len());
            for (i, p) in s.peers.iter().enumerate() {
                assert_eq!(index[&p.addr] as usize, i);
            }
        } else {
            assert!(s.peers.len() < INDEX_AT);
        }
        assert!(s.seeders as usize <= s.peers.len());
    }

    #[test]
    fn record_sizes() {
        assert_eq!(std::mem::size_of::<Record<6, 0>>(), 8);
        assert_eq!(std::mem::size_of::<Record<18, 0>>(), 20);
        assert_eq!(std::mem::size_of::<Record<6, 20>>(), 28);
    }

    #[test]
    fn announce_update_stop() {
        let mut s = PeerSet::<6, 0>::default();
        let id = [0; 20];
        assert_eq!(
            s.announce(addr(1), &id, false, false, 0, 0).0,
            Change::Added
        );
        assert_eq!(s.announce(addr(2), &id, true, false, 0, 0).0, Change::Added);
        assert_eq!((s.seeders(), s.leechers()), (1, 1));
        // The leecher completes: updated in place, now a seeder.
        assert_eq!(
            s.announce(addr(1), &id, true, false, 5, 0),
            (Change::Updated, false)
        );
        assert_eq!((s.seeders(), s.leechers()), (2, 0));
        assert_eq!(
            s.announce(addr(2), &id, true, true, 5, 0),
            (Change::Removed, true)
        );
        assert_eq!((s.seeders(), s.leechers()), (1, 0));
        assert_eq!(s.announce(addr(9), &id, true, true, 5, 0).0, Change::None);
        // A cap of one peer refuses a second one.
        assert_eq!(s.announce(addr(3), &id, false, false, 5, 1).0, Change::None);
    }

    #[test]
    fn selection_excludes_self_and_seeders_for_seeders() {
        let mut s = PeerSet::<6, 0>::default();
        let id = [0; 20];
        for n in 0..10 {
            s.announce(addr(n), &id, n < 5, false, 0, 0);
        }
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..50 {
            let mut got = Vec::new();
            s.select(&addr(0), true, 100, &mut rng, |p| got.push(p.addr));
            assert_eq!(got.len(), 5);
            assert!(
                got.iter().all(|a| a[3] >= 5),
                "a seeder got a seeder: {got:?}"
            );
            let mut got = Vec::new();
            s.select(&addr(7), false, 3, &mut rng, |p| got.push(p.addr));
            assert_eq!(got.len(), 3);
            assert!(!got.contains(&addr(7)));
        }
    }

    #[test]
    fn selection_is_fair() {
        let mut s = PeerSet::<6, 0>::default();
        let id = [0; 20];
        for n in 0..100 {
            s.announce(addr(n), &id, false, false, 0, 0);
        }
        let mut rng = fastrand::Rng::with_seed(1);
        let mut hits = [0u32; 100];
        for _ in 0..10_000 {
            s.select(&addr(1000), false, 10, &mut rng, |p| {
                hits[p.addr[3] as usize] += 1
            });
        }
        // Each peer is expected 1,000 times.
        assert!(hits.iter().all(|&h| (700..1300).contains(&h)), "{hits:?}");
    }

    #[test]
    fn index_stays_consistent_under_churn() {
        let mut s = PeerSet::<6, 20>::default();
        let mut rng = fastrand::Rng::with_seed(3);
        for step in 0..20_000u32 {
            let n = rng.u32(..200);
            let id = [n as u8; 20];
            let stopped = rng.u8(..4) == 0;
            s.announce(addr(n), &id, rng.bool(), stopped, step as u16, 0);
            if step % 997 == 0 {
                check_invariants(&s);
            }
        }
        check_invariants(&s);
        let before = s.len();
        let dropped = s.expire(20_000u32 as u16, 100);
        check_invariants(&s);
        assert_eq!(before - dropped, s.len());
        assert!(s
            .peers
            .iter()
            .all(|p| p.peer_id() == Some(&[p.addr[3]; 20][..])));
    }

    #[test]
    fn expiry_wraps() {
        let mut s = PeerSet::<6, 0>::default();
        s.announce(addr(1), &[0; 20], false, false, 65_530, 0);
        s.announce(addr(2), &[0; 20], false, false, 100, 0);
        // At 200 (wrapped), peer 1 is 206 s old and peer 2 is 100 s old.
        assert_eq!(s.expire(200, 150), 1);
        assert_eq!(s.len(), 1);
    }
}
