//! The in-memory swarm state: a sharded table of torrents, each with compact peer sets.
//!
//! A peer is identified by its address (IP and port), as opentracker does: a client's
//! re-announce from the same address updates its record in place, and no peer id needs to be
//! kept unless non-compact answers should carry it (`keep_peer_ids`). A record is the address,
//! a 16-bit "last seen" in seconds (ages are taken with wrapping arithmetic; the peer timeout is
//! capped at 12 h so they never wrap), and optionally the peer id: 8 bytes for an IPv4 peer.
//!
//! In each peer set the seeders come first and the leechers after them, so seeder and leecher
//! counts are O(1) and "send a seeder only leechers" is a range. Sets of [`INDEX_AT`] peers or
//! more also keep an address index so an announce never scans a big swarm. A torrent is 40
//! bytes in the table (64 with its key); the index and IPv6 peers, which few torrents have,
//! live behind one pointer.
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
pub struct Record<const A: usize, const I: usize, const O: usize = 0> {
    addr: [u8; A],
    seen: [u8; 2],
    id: [u8; I],
    origin: [u8; O],
}

impl<const A: usize, const I: usize, const O: usize> Record<A, I, O> {
    /// The process second it was last seen (16 bits, wrapping).
    pub fn seen(&self) -> u16 {
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

    /// The node the peer announced to, when the table keeps origins (0 when it does not).
    pub fn origin(&self) -> u8 {
        self.origin.first().copied().unwrap_or(0)
    }

    fn set_origin(&mut self, origin: u8) {
        if let Some(o) = self.origin.first_mut() {
            *o = origin;
        }
    }
}

/// The index of a large peer set: address -> position in the records, and how many peers
/// each client address has in the set (IPv6 by /64, and by /48), for the per-address caps.
#[derive(Debug, Default)]
pub struct Index<const A: usize> {
    pos: HashMap<[u8; A], u32>,
    per_ip: HashMap<u64, u32>,
    /// IPv6 sets only (empty, allocating nothing, in IPv4 ones).
    per_48: HashMap<u64, u32>,
}

impl<const A: usize> Index<A> {
    /// Counts a peer at `addr` in (`true`) or out.
    fn count(&mut self, addr: &[u8; A], into: bool) {
        fn bump(map: &mut HashMap<u64, u32>, k: u64, into: bool) {
            if into {
                *map.entry(k).or_insert(0) += 1;
            } else if let Some(n) = map.get_mut(&k) {
                *n -= 1;
                if *n == 0 {
                    map.remove(&k);
                }
            }
        }
        bump(&mut self.per_ip, ip_key(addr), into);
        if let Some(k) = net48_key(addr) {
            bump(&mut self.per_48, k, into);
        }
    }
}

/// The key a peer's client address is counted under: its IPv4 address, or its IPv6 /64.
pub(crate) fn ip_key<const A: usize>(addr: &[u8; A]) -> u64 {
    let n = (A - 2).min(8);
    let mut k = [0u8; 8];
    k[..n].copy_from_slice(&addr[..n]);
    u64::from_ne_bytes(k)
}

/// The key of an IPv6 peer's /48 (none for IPv4).
fn net48_key<const A: usize>(addr: &[u8; A]) -> Option<u64> {
    (A == 18).then(|| {
        let mut k = [0u8; 8];
        k[..6].copy_from_slice(&addr[..6]);
        u64::from_ne_bytes(k)
    })
}

/// What a new peer may take: whether the swarm (and the whole table) has room for one more
/// peer, and how many peers one client address may have in this set.
#[derive(Debug, Clone, Copy)]
pub struct Room {
    /// One more peer fits in the swarm and the table.
    pub swarm: bool,
    /// Peers one address (IPv6: one /64) may have in this set.
    pub per_ip: usize,
    /// Peers the /64s of one IPv6 /48 may have in this set together.
    pub per_48: usize,
    /// The peer's address may add one more peer to the table (its budget across torrents).
    pub address: bool,
}

impl Room {
    /// No limit (for tests and tools).
    pub const ANY: Room = Room {
        swarm: true,
        per_ip: usize::MAX,
        per_48: usize::MAX,
        address: true,
    };
}

/// The peers of one address family of one torrent, borrowed from wherever the torrent keeps
/// them: the records (seeders in `[0, seeders)`, leechers after), the seeder count, and the
/// address index when the set is large enough to have one.
pub struct PeerSet<'a, const A: usize, const I: usize, const O: usize = 0> {
    peers: &'a mut Vec<Record<A, I, O>>,
    seeders: &'a mut u32,
    index: Option<&'a mut Index<A>>,
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
    /// Nothing changed (a stopped peer that was not known).
    None,
    /// Not added: the swarm or the table holds as many peers as it may.
    SwarmFull,
    /// Not added: the peer's address holds as many peers in this swarm as it may.
    AddressFull,
    /// Not added: the peer's address holds as many peers in all torrents as it may.
    AddressSpent,
}

impl<const A: usize, const I: usize, const O: usize> PeerSet<'_, A, I, O> {
    fn find(&self, addr: &[u8; A]) -> Option<usize> {
        match &self.index {
            Some(index) => index.pos.get(addr).map(|&i| i as usize),
            None => self.peers.iter().position(|p| &p.addr == addr),
        }
    }

    /// Peers in this set from the client address of `addr`.
    fn at_ip(&self, addr: &[u8; A]) -> usize {
        let k = ip_key(addr);
        match &self.index {
            Some(index) => index.per_ip.get(&k).map_or(0, |&n| n as usize),
            None => self.peers.iter().filter(|p| ip_key(&p.addr) == k).count(),
        }
    }

    /// Peers in this set from the IPv6 /48 of `addr` (0 for IPv4).
    fn at_48(&self, addr: &[u8; A]) -> usize {
        let Some(k) = net48_key(addr) else {
            return 0;
        };
        match &self.index {
            Some(index) => index.per_48.get(&k).map_or(0, |&n| n as usize),
            None => self
                .peers
                .iter()
                .filter(|p| net48_key(&p.addr) == Some(k))
                .count(),
        }
    }

    /// Whether the client address of `addr` (or its /48) holds all `room` allows it here.
    fn address_full(&self, addr: &[u8; A], room: Room) -> bool {
        self.at_ip(addr) >= room.per_ip || A == 18 && self.at_48(addr) >= room.per_48
    }

    fn swap(&mut self, i: usize, j: usize) {
        if i == j {
            return;
        }
        self.peers.swap(i, j);
        if let Some(index) = &mut self.index {
            index.pos.insert(self.peers[i].addr, i as u32);
            index.pos.insert(self.peers[j].addr, j as u32);
        }
    }

    fn remove_at(&mut self, mut i: usize) {
        let seeders = *self.seeders as usize;
        if i < seeders {
            // Keep seeders contiguous: move the gap to the seeder/leecher boundary first.
            self.swap(i, seeders - 1);
            i = seeders - 1;
            *self.seeders -= 1;
        }
        let last = self.peers.len() - 1;
        self.swap(i, last);
        let gone = self.peers.pop().expect("set is not empty");
        if let Some(index) = &mut self.index {
            index.pos.remove(&gone.addr);
            index.count(&gone.addr, false);
        }
        if self.peers.capacity() > 2 * self.peers.len() + 4 {
            self.peers.shrink_to_fit();
        }
    }

    fn set_seeder(&mut self, i: usize, seeder: bool) -> usize {
        let boundary = *self.seeders as usize;
        match (i < boundary, seeder) {
            (false, true) => {
                self.swap(i, boundary);
                *self.seeders += 1;
                boundary
            }
            (true, false) => {
                self.swap(i, boundary - 1);
                *self.seeders -= 1;
                boundary - 1
            }
            _ => i,
        }
    }

    /// Applies an announce; a new peer is added only if `room` allows. Returns what changed
    /// and whether the peer was a seeder before. `origin` is the node it announced to (kept
    /// only by tables that keep origins).
    #[allow(clippy::too_many_arguments)]
    pub fn announce(
        &mut self,
        addr: [u8; A],
        id: &Id20,
        seeder: bool,
        stopped: bool,
        now: u16,
        room: Room,
        origin: u8,
    ) -> (Change, bool) {
        // An announce is the newest news of its peer, whatever it says.
        self.apply(addr, id, seeder, stopped, (now, now), room, origin, false)
    }

    /// Adds a peer the set does not hold, if `room` allows.
    fn add(
        &mut self,
        addr: [u8; A],
        id: &Id20,
        seeder: bool,
        seen: u16,
        room: Room,
        origin: u8,
    ) -> Change {
        if !room.swarm {
            return Change::SwarmFull;
        }
        if self.address_full(&addr, room) {
            return Change::AddressFull;
        }
        if !room.address {
            return Change::AddressSpent;
        }
        let mut record = Record {
            addr,
            seen: seen.to_ne_bytes(),
            id: [0; I],
            origin: [0; O],
        };
        record.id.copy_from_slice(&id[..I]);
        record.set_origin(origin);
        if self.peers.len() < INDEX_AT {
            // Small sets grow one record at a time: memory per peer is the headline.
            self.peers.reserve_exact(1);
        }
        self.peers.push(record);
        let i = self.peers.len() - 1;
        if let Some(index) = &mut self.index {
            index.pos.insert(addr, i as u32);
            index.count(&addr, true);
        }
        if seeder {
            self.set_seeder(i, true);
        }
        Change::Added
    }

    /// Applies what another node saw of a peer, last seen at `seen` (process seconds, at or
    /// before `now`): the newer of it and the record held wins, so deltas that arrive out of
    /// order or twice change nothing. A tombstone (`stopped`) removes a record seen no later
    /// than it. Returns what changed ([`Change::None`] for a stale delta or a tombstone of an
    /// unknown peer) and whether the peer was a seeder before.
    #[allow(clippy::too_many_arguments)]
    pub fn merge(
        &mut self,
        addr: [u8; A],
        id: &Id20,
        seeder: bool,
        stopped: bool,
        seen: u16,
        now: u16,
        room: Room,
        origin: u8,
    ) -> (Change, bool) {
        self.apply(addr, id, seeder, stopped, (seen, now), room, origin, true)
    }

    /// An announce (`remote` false) or another node's delta (`remote` true, where a
    /// leecher's delta of the second a seeder's record holds is late news).
    #[allow(clippy::too_many_arguments)]
    fn apply(
        &mut self,
        addr: [u8; A],
        id: &Id20,
        seeder: bool,
        stopped: bool,
        (seen, now): (u16, u16),
        room: Room,
        origin: u8,
        remote: bool,
    ) -> (Change, bool) {
        let found = self.find(&addr);
        let was_seeder = found.is_some_and(|i| i < *self.seeders as usize);
        let change = match found {
            Some(i) if now.wrapping_sub(self.peers[i].seen()) < now.wrapping_sub(seen) => {
                Change::None
            }
            // Within one second, a seeder is newer than a leecher (a download completes; it
            // does not come undone): a leecher's delta arriving late changes nothing.
            Some(i)
                if remote
                    && self.peers[i].seen() == seen
                    && i < *self.seeders as usize
                    && !seeder
                    && !stopped =>
            {
                Change::None
            }
            Some(i) if stopped => {
                self.remove_at(i);
                Change::Removed
            }
            None if stopped => Change::None,
            Some(i) => {
                let i = self.set_seeder(i, seeder);
                let record = &mut self.peers[i];
                record.seen = seen.to_ne_bytes();
                record.id.copy_from_slice(&id[..I]);
                record.set_origin(origin);
                Change::Updated
            }
            None => self.add(addr, id, seeder, seen, room, origin),
        };
        (change, was_seeder)
    }

    /// Adds one to `tally[origin]` for each peer of the set.
    pub fn tally_origins(&self, tally: &mut [u32; 256]) {
        for p in self.peers.iter() {
            tally[usize::from(p.origin())] += 1;
        }
    }

    /// Drops peers not seen for more than `timeout` seconds, telling `gone` each one's
    /// address; returns how many were dropped.
    pub fn expire(&mut self, now: u16, timeout: u16, gone: &mut impl FnMut(&[u8])) -> usize {
        let mut dropped = 0;
        let mut i = 0;
        while i < self.peers.len() {
            if now.wrapping_sub(self.peers[i].seen()) > timeout {
                gone(&self.peers[i].addr);
                self.remove_at(i);
                dropped += 1;
            } else {
                i += 1;
            }
        }
        dropped
    }
}

/// Calls `each` with up to `want` of `peers` (seeders first, `seeders` of them) for a client at
/// `own`: only leechers when the client is a seeder, never the client itself, starting at a
/// random offset. Returns how many were given.
pub fn select<const A: usize, const I: usize, const O: usize>(
    peers: &[Record<A, I, O>],
    seeders: u32,
    own: &[u8; A],
    seeder: bool,
    want: usize,
    rng: &mut fastrand::Rng,
    mut each: impl FnMut(&Record<A, I, O>),
) -> usize {
    let range = if seeder {
        &peers[seeders as usize..]
    } else {
        peers
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

/// Builds or drops an index so that sets of [`INDEX_AT`] peers or more have one and sets of
/// fewer than half that do not (the gap keeps a set at the edge from flapping).
fn fit_index<const A: usize, const I: usize, const O: usize>(
    peers: &[Record<A, I, O>],
    index: &mut Option<Index<A>>,
) {
    if peers.len() >= INDEX_AT && index.is_none() {
        let mut built = Index::<A> {
            pos: HashMap::with_capacity(peers.len()),
            ..Index::default()
        };
        for (i, p) in peers.iter().enumerate() {
            built.pos.insert(p.addr, i as u32);
            built.count(&p.addr, true);
        }
        *index = Some(built);
    } else if peers.len() < INDEX_AT / 2 && index.is_some() {
        *index = None;
    }
}

/// What few torrents need: the IPv4 index of a large swarm, IPv6 peers, and the IPv6
/// addresses IPv4 peers also gave (BEP 7's `ipv6=`, when accepted): those are handed to IPv6
/// peers but not counted, as they are peers counted already.
#[derive(Debug)]
struct Extra<const I: usize, const O: usize> {
    index4: Option<Index<6>>,
    v6: Vec<Record<18, I, O>>,
    seeders6: u32,
    index6: Option<Index<18>>,
    alias6: Vec<Record<18, I, O>>,
    alias_seeders6: u32,
    alias_index6: Option<Index<18>>,
}

impl<const I: usize, const O: usize> Default for Extra<I, O> {
    fn default() -> Self {
        Self {
            index4: None,
            v6: Vec::new(),
            seeders6: 0,
            index6: None,
            alias6: Vec::new(),
            alias_seeders6: 0,
            alias_index6: None,
        }
    }
}

/// One torrent: 40 bytes in the table (so a table entry with its key is 64), its IPv4 records
/// behind one pointer, and what few torrents need behind another.
#[derive(Debug)]
pub struct Torrent<const I: usize, const O: usize = 0> {
    v4: Vec<Record<6, I, O>>,
    seeders4: u32,
    /// Completed downloads seen (snatches).
    pub completed: u32,
    extra: Option<Box<Extra<I, O>>>,
}

impl<const I: usize, const O: usize> Default for Torrent<I, O> {
    fn default() -> Self {
        Self {
            v4: Vec::new(),
            seeders4: 0,
            completed: 0,
            extra: None,
        }
    }
}

impl<const I: usize, const O: usize> Torrent<I, O> {
    /// The IPv4 peer set.
    pub fn v4(&mut self) -> PeerSet<'_, 6, I, O> {
        PeerSet {
            peers: &mut self.v4,
            seeders: &mut self.seeders4,
            index: self.extra.as_mut().and_then(|e| e.index4.as_mut()),
        }
    }

    /// The IPv6 peer set (allocating the extra part on first use).
    pub fn v6(&mut self) -> PeerSet<'_, 18, I, O> {
        let e = self.extra.get_or_insert_with(Default::default);
        PeerSet {
            peers: &mut e.v6,
            seeders: &mut e.seeders6,
            index: e.index6.as_mut(),
        }
    }

    /// The IPv6 addresses IPv4 peers also gave (allocating the extra part on first use).
    pub fn alias6(&mut self) -> PeerSet<'_, 18, I, O> {
        let e = self.extra.get_or_insert_with(Default::default);
        PeerSet {
            peers: &mut e.alias6,
            seeders: &mut e.alias_seeders6,
            index: e.alias_index6.as_mut(),
        }
    }

    /// Builds or drops indexes and the extra part after a change.
    pub fn tidy(&mut self) {
        if self.v4.len() >= INDEX_AT && self.extra.is_none() {
            self.extra = Some(Box::default());
        }
        if let Some(e) = &mut self.extra {
            fit_index(&self.v4, &mut e.index4);
            fit_index(&e.v6, &mut e.index6);
            fit_index(&e.alias6, &mut e.alias_index6);
            if e.index4.is_none()
                && e.v6.is_empty()
                && e.index6.is_none()
                && e.alias6.is_empty()
                && e.alias_index6.is_none()
            {
                self.extra = None;
            }
        }
    }

    /// Up to `want` IPv4 peers for a client at `own` (see [`select`]).
    pub fn select_v4(
        &self,
        own: &[u8; 6],
        seeder: bool,
        want: usize,
        rng: &mut fastrand::Rng,
        each: impl FnMut(&Record<6, I, O>),
    ) -> usize {
        select(&self.v4, self.seeders4, own, seeder, want, rng, each)
    }

    /// Up to `want` IPv6 peers for a client at `own` (see [`select`]): IPv6 peers first,
    /// then the IPv6 addresses IPv4 peers gave.
    pub fn select_v6(
        &self,
        own: &[u8; 18],
        seeder: bool,
        want: usize,
        rng: &mut fastrand::Rng,
        mut each: impl FnMut(&Record<18, I, O>),
    ) -> usize {
        match &self.extra {
            Some(e) => {
                let n = select(&e.v6, e.seeders6, own, seeder, want, rng, &mut each);
                n + select(
                    &e.alias6,
                    e.alias_seeders6,
                    own,
                    seeder,
                    want - n,
                    rng,
                    each,
                )
            }
            None => 0,
        }
    }

    /// Drops peers older than `timeout`, telling `gone` each one's address (IPv4 and IPv6
    /// peers; not the IPv6 addresses IPv4 peers gave); returns how many.
    pub fn expire(&mut self, now: u16, timeout: u16, gone: &mut impl FnMut(&[u8])) -> usize {
        let mut dropped = self.v4().expire(now, timeout, gone);
        if self.extra.is_some() {
            dropped += self.v6().expire(now, timeout, gone);
            // Not counted: they are peers counted in the IPv4 set.
            self.alias6().expire(now, timeout, &mut |_| {});
        }
        self.tidy();
        dropped
    }

    /// The IPv4 records (seeders first) and how many are seeders.
    pub fn records_v4(&self) -> (&[Record<6, I, O>], u32) {
        (&self.v4, self.seeders4)
    }

    /// The IPv6 records (seeders first) and how many are seeders.
    pub fn records_v6(&self) -> (&[Record<18, I, O>], u32) {
        self.extra
            .as_ref()
            .map_or((&[][..], 0), |e| (&e.v6[..], e.seeders6))
    }

    /// The IPv6 addresses IPv4 peers gave (seeders first) and how many are seeders.
    pub fn records_alias6(&self) -> (&[Record<18, I, O>], u32) {
        self.extra
            .as_ref()
            .map_or((&[][..], 0), |e| (&e.alias6[..], e.alias_seeders6))
    }

    /// Peers of both families (IPv6 addresses given by IPv4 peers not counted).
    pub fn peers(&self) -> u32 {
        self.v4.len() as u32 + self.extra.as_ref().map_or(0, |e| e.v6.len() as u32)
    }

    /// Seeders of both families.
    pub fn seeders(&self) -> u32 {
        self.seeders4 + self.extra.as_ref().map_or(0, |e| e.seeders6)
    }

    /// Leechers of both families.
    pub fn leechers(&self) -> u32 {
        let v6 = self
            .extra
            .as_ref()
            .map_or(0, |e| e.v6.len() as u32 - e.seeders6);
        self.v4.len() as u32 - self.seeders4 + v6
    }

    /// Whether no peer is left (an IPv6 address given by an IPv4 peer goes with that peer).
    pub fn is_empty(&self) -> bool {
        self.v4.is_empty() && self.extra.as_ref().is_none_or(|e| e.v6.is_empty())
    }
}

/// One shard: its torrents and its share of the global counts, all under one short lock.
#[derive(Debug, Default)]
pub struct Shard<const I: usize, const O: usize = 0> {
    /// The torrents with peers.
    pub torrents: HashMap<Id20, Torrent<I, O>>,
    /// Completed counts of torrents without peers (their swarms freed), so scrapes still
    /// report them; bounded (see `tracker.max_idle_torrents`).
    pub idle: HashMap<Id20, u32>,
    /// Recent snatches: a keyed hash of (torrent, client address; IPv6 by /64) and the
    /// process second of its last completion, kept while that is within the peer timeout
    /// (the sweep drops older ones), so one client completing over and over counts once;
    /// bounded (a share of `tracker.max_peers`).
    pub snatched: HashMap<u64, u16>,
    /// Peers in this shard (both families).
    pub peers: usize,
    /// Seeders in this shard.
    pub seeders: usize,
    /// Peers by the node they announced to, as of the shard's last sweep (empty in a table
    /// that keeps no origins).
    pub origins: Vec<(u8, u32)>,
}

/// All torrents, sharded by info hash. Each operation locks one shard for a short,
/// allocation-light critical section and never across a syscall.
#[derive(Debug)]
pub struct Swarms<const I: usize, const O: usize = 0> {
    shards: Box<[Mutex<Shard<I, O>>]>,
    mask: usize,
}

impl<const I: usize, const O: usize> Swarms<I, O> {
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
    pub fn shard(&self, info_hash: &Id20) -> &Mutex<Shard<I, O>> {
        let n = u32::from_le_bytes([info_hash[16], info_hash[17], info_hash[18], info_hash[19]]);
        &self.shards[n as usize & self.mask]
    }

    /// Shard `i`.
    pub fn shard_at(&self, i: usize) -> &Mutex<Shard<I, O>> {
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

    fn check_invariants<const I: usize>(t: &Torrent<I>) {
        let index = t.extra.as_ref().and_then(|e| e.index4.as_ref());
        match index {
            Some(index) => {
                assert_eq!(index.pos.len(), t.v4.len());
                for (i, p) in t.v4.iter().enumerate() {
                    assert_eq!(index.pos[&p.addr] as usize, i);
                }
                let counted: u32 = index.per_ip.values().sum();
                assert_eq!(counted as usize, t.v4.len());
                assert!(t.v4.len() >= INDEX_AT / 2);
            }
            None => assert!(t.v4.len() < INDEX_AT),
        }
        assert!(t.seeders4 as usize <= t.v4.len());
    }

    fn announce<const I: usize>(
        t: &mut Torrent<I>,
        n: u32,
        seeder: bool,
        stopped: bool,
        now: u16,
        max: usize,
    ) -> (Change, bool) {
        let room = Room {
            swarm: max == 0 || (t.peers() as usize) < max,
            per_ip: usize::MAX,
            per_48: usize::MAX,
            address: true,
        };
        let r = t
            .v4()
            .announce(addr(n), &[n as u8; 20], seeder, stopped, now, room, 0);
        t.tidy();
        r
    }

    #[test]
    fn sizes() {
        assert_eq!(std::mem::size_of::<Record<6, 0>>(), 8);
        assert_eq!(std::mem::size_of::<Record<18, 0>>(), 20);
        assert_eq!(std::mem::size_of::<Record<6, 20>>(), 28);
        assert_eq!(std::mem::size_of::<Torrent<0>>(), 40);
        assert_eq!(std::mem::size_of::<(Id20, Torrent<0>)>(), 64);
    }

    #[test]
    fn announce_update_stop() {
        let mut t = Torrent::<0>::default();
        assert_eq!(announce(&mut t, 1, false, false, 0, 0).0, Change::Added);
        assert_eq!(announce(&mut t, 2, true, false, 0, 0).0, Change::Added);
        assert_eq!((t.seeders(), t.leechers()), (1, 1));
        // The leecher completes: updated in place, now a seeder.
        assert_eq!(
            announce(&mut t, 1, true, false, 5, 0),
            (Change::Updated, false)
        );
        assert_eq!((t.seeders(), t.leechers()), (2, 0));
        assert_eq!(
            announce(&mut t, 2, true, true, 5, 0),
            (Change::Removed, true)
        );
        assert_eq!((t.seeders(), t.leechers()), (1, 0));
        assert_eq!(announce(&mut t, 9, true, true, 5, 0).0, Change::None);
        // A cap of one peer refuses a second one.
        assert_eq!(announce(&mut t, 3, false, false, 5, 1).0, Change::SwarmFull);
    }

    #[test]
    fn selection_excludes_self_and_seeders_for_seeders() {
        let mut t = Torrent::<0>::default();
        for n in 0..10 {
            announce(&mut t, n, n < 5, false, 0, 0);
        }
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..50 {
            let mut got = Vec::new();
            t.select_v4(&addr(0), true, 100, &mut rng, |p| got.push(p.addr));
            assert_eq!(got.len(), 5);
            assert!(
                got.iter().all(|a| a[3] >= 5),
                "a seeder got a seeder: {got:?}"
            );
            let mut got = Vec::new();
            t.select_v4(&addr(7), false, 3, &mut rng, |p| got.push(p.addr));
            assert_eq!(got.len(), 3);
            assert!(!got.contains(&addr(7)));
        }
    }

    #[test]
    fn selection_is_fair() {
        let mut t = Torrent::<0>::default();
        for n in 0..100 {
            announce(&mut t, n, false, false, 0, 0);
        }
        let mut rng = fastrand::Rng::with_seed(1);
        let mut hits = [0u32; 100];
        for _ in 0..10_000 {
            t.select_v4(&addr(1000), false, 10, &mut rng, |p| {
                hits[p.addr[3] as usize] += 1
            });
        }
        // Each peer is expected 1,000 times.
        assert!(hits.iter().all(|&h| (700..1300).contains(&h)), "{hits:?}");
    }

    #[test]
    fn index_stays_consistent_under_churn() {
        let mut t = Torrent::<20>::default();
        let mut rng = fastrand::Rng::with_seed(3);
        for step in 0..20_000u32 {
            let n = rng.u32(..200);
            let stopped = rng.u8(..4) == 0;
            announce(&mut t, n, rng.bool(), stopped, step as u16, 0);
            if step % 997 == 0 {
                check_invariants(&t);
            }
        }
        check_invariants(&t);
        let before = t.v4.len();
        let mut told = 0;
        let dropped = t.expire(20_000u32 as u16, 100, &mut |_| told += 1);
        check_invariants(&t);
        assert_eq!(before - dropped, t.v4.len());
        assert_eq!(told, dropped);
        assert!(t
            .v4
            .iter()
            .all(|p| p.peer_id() == Some(&[p.addr[3]; 20][..])));
        // Shrinking below the threshold drops the index and the extra part.
        for n in 0..200 {
            announce(&mut t, n, false, true, 0, 0);
        }
        assert!(t.is_empty() && t.extra.is_none());
    }

    #[test]
    fn ipv6_lives_in_the_extra_part() {
        let mut t = Torrent::<0>::default();
        let mut a6 = [0u8; 18];
        a6[0] = 0x20;
        t.v6().announce(a6, &[0; 20], true, false, 0, Room::ANY, 0);
        t.tidy();
        assert_eq!((t.seeders(), t.leechers()), (1, 0));
        let mut rng = fastrand::Rng::with_seed(1);
        let mut got = 0;
        t.select_v6(&[0; 18], false, 10, &mut rng, |_| got += 1);
        assert_eq!(got, 1);
        t.v6().announce(a6, &[0; 20], true, true, 0, Room::ANY, 0);
        t.tidy();
        assert!(t.is_empty() && t.extra.is_none());
    }

    #[test]
    fn one_address_has_at_most_its_share_of_a_swarm_small_or_large() {
        let mut t = Torrent::<0>::default();
        let room = Room {
            swarm: true,
            per_ip: 3,
            per_48: usize::MAX,
            address: true,
        };
        let one_ip = |t: &mut Torrent<0>, port: u16| {
            let mut a = addr(7);
            a[4..].copy_from_slice(&port.to_be_bytes());
            let r = t.v4().announce(a, &[0; 20], false, false, 0, room, 0).0;
            t.tidy();
            r
        };
        for port in 1..=3 {
            assert_eq!(one_ip(&mut t, port), Change::Added);
        }
        assert_eq!(one_ip(&mut t, 4), Change::AddressFull);
        // A known peer of that address is still updated.
        assert_eq!(one_ip(&mut t, 2), Change::Updated);
        // The same holds once the set is large enough to be indexed.
        for n in 100..200 {
            announce(&mut t, n, false, false, 0, 0);
        }
        assert!(t.extra.as_ref().unwrap().index4.is_some());
        assert_eq!(one_ip(&mut t, 5), Change::AddressFull);
        check_invariants(&t);
        // A departure makes room again.
        let mut a = addr(7);
        a[4..].copy_from_slice(&1u16.to_be_bytes());
        t.v4().announce(a, &[0; 20], false, true, 0, room, 0);
        assert_eq!(one_ip(&mut t, 5), Change::Added);
        check_invariants(&t);
        // An address out of budget across torrents adds nothing, and is still updated.
        let spent = Room {
            address: false,
            ..Room::ANY
        };
        let mut a = addr(9);
        assert_eq!(
            t.v4().announce(a, &[0; 20], false, false, 0, spent, 0).0,
            Change::AddressSpent
        );
        a = addr(7);
        a[4..].copy_from_slice(&5u16.to_be_bytes());
        assert_eq!(
            t.v4().announce(a, &[0; 20], true, false, 0, spent, 0).0,
            Change::Updated
        );
    }

    /// One IPv6 /48 spread over many /64s is held to its own share of a swarm, whether the
    /// set is small or indexed; another /48 is not; leaving gives the share back.
    #[test]
    fn one_48_has_at_most_its_share_of_a_swarm_whatever_its_64s() {
        let mut t = Torrent::<0>::default();
        let room = Room {
            per_ip: 2,
            per_48: 40,
            ..Room::ANY
        };
        let peer = |net48: u8, net64: u16, port: u8| {
            let mut a = [0u8; 18];
            a[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
            a[5] = net48;
            a[6..8].copy_from_slice(&net64.to_be_bytes());
            a[15] = 1;
            a[17] = port;
            a
        };
        let join = |t: &mut Torrent<0>, a: [u8; 18], stopped: bool| {
            let r = t.v6().announce(a, &[0; 20], false, stopped, 0, room, 0).0;
            t.tidy();
            r
        };
        // Two per /64, up to forty per /48: through the index's threshold.
        for n in 0..20 {
            assert_eq!(join(&mut t, peer(1, n, 1), false), Change::Added);
            assert_eq!(join(&mut t, peer(1, n, 2), false), Change::Added);
        }
        assert!(t.extra.as_ref().unwrap().index6.is_some());
        assert_eq!(join(&mut t, peer(1, 20, 3), false), Change::AddressFull);
        assert_eq!(
            join(&mut t, peer(2, 20, 3), false),
            Change::Added,
            "another /48"
        );
        assert_eq!(join(&mut t, peer(1, 3, 1), true), Change::Removed);
        assert_eq!(join(&mut t, peer(1, 20, 3), false), Change::Added);
        let index = t.extra.as_ref().unwrap().index6.as_ref().unwrap();
        assert_eq!(index.per_48.values().sum::<u32>(), 41);
        // A small set counts by scanning.
        let mut small = Torrent::<0>::default();
        let room = Room { per_48: 3, ..room };
        for n in 0..3 {
            let a = peer(7, n, 1);
            assert_eq!(
                small.v6().announce(a, &[0; 20], false, false, 0, room, 0).0,
                Change::Added
            );
        }
        let a = peer(7, 9, 1);
        assert_eq!(
            small.v6().announce(a, &[0; 20], false, false, 0, room, 0).0,
            Change::AddressFull
        );
    }

    #[test]
    fn expiry_wraps() {
        let mut t = Torrent::<0>::default();
        announce(&mut t, 1, false, false, 65_530, 0);
        announce(&mut t, 2, false, false, 100, 0);
        // At 200 (wrapped), peer 1 is 206 s old and peer 2 is 100 s old.
        assert_eq!(t.expire(200, 150, &mut |_| {}), 1);
        assert_eq!(t.v4.len(), 1);
    }
}
