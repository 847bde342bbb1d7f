//! Operations on the swarm table, behind one object-safe trait so the tracker can pick the
//! record layout (with or without peer ids) at start-up and the handlers stay non-generic.

use hotpath_metrics::Counter;
use std::sync::atomic::{AtomicUsize, Ordering};

use hashbrown::hash_map::Entry;

use hotpath_wire::exchange::Delta;
use hotpath_wire::query::{Event, Id20};

use crate::owners::{self, Owners, Spread};
use crate::swarm::{Change, PeerSet, Record, Room, Shard, Swarms, Torrent};

/// The counts a tracker reports for a torrent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Seeders (`complete`).
    pub seeders: u32,
    /// Leechers (`incomplete`).
    pub leechers: u32,
    /// Completed downloads (`downloaded`).
    pub completed: u32,
}

/// One announce, after parsing and address resolution.
#[derive(Debug, Clone)]
pub struct PeerAnnounce {
    /// The torrent.
    pub info_hash: Id20,
    /// The peer id.
    pub peer_id: Id20,
    /// The announcing address: IPv4 (6 bytes) ...
    pub v4: Option<[u8; 6]>,
    /// ... or IPv6 (18 bytes).
    pub v6: Option<[u8; 18]>,
    /// An IPv6 address an IPv4 peer also listens on (BEP 7's `ipv6=`, when accepted): handed
    /// to IPv6 peers, not counted as another peer.
    pub alias6: Option<[u8; 18]>,
    /// Seeder (left=0, or a BEP 21 partial seed).
    pub seeder: bool,
    /// The download is complete (left=0).
    pub complete: bool,
    /// The event.
    pub event: Event,
    /// Peers wanted (already capped).
    pub want: usize,
    /// Whether IPv4 peers are wanted.
    pub want_v4: bool,
    /// Whether IPv6 peers are wanted.
    pub want_v6: bool,
}

/// The peers picked for an answer, as compact bytes, with their ids when kept and wanted.
#[derive(Debug, Default)]
pub struct Selection {
    /// IPv4 peers, 6 bytes each.
    pub v4: Vec<u8>,
    /// IPv6 peers, 18 bytes each.
    pub v6: Vec<u8>,
    /// Peer ids in the order of `v4` then `v6`; empty when ids are not kept or not wanted.
    pub ids: Vec<Id20>,
    /// Whether to fill `ids`.
    pub with_ids: bool,
}

impl Selection {
    /// Empties the selection for the next request.
    pub fn clear(&mut self) {
        self.v4.clear();
        self.v6.clear();
        self.ids.clear();
    }
}

/// Caps applied on announce (all finite).
#[derive(Debug, Clone, Copy)]
pub struct Caps {
    /// Most torrents with peers.
    pub max_torrents: usize,
    /// Most peers in the whole table.
    pub max_peers: usize,
    /// Most peers per torrent.
    pub max_peers_per_torrent: usize,
    /// Most peers one client address (IPv6: one /64) may have in one torrent.
    pub max_peers_per_ip: usize,
    /// Most peers the /64s of one IPv6 /48 may have in one torrent together.
    pub max_peers_per_ip_48: usize,
    /// Most completed counts kept for torrents without peers.
    pub max_idle_torrents: usize,
    /// Most torrents one address (IPv6: one /64) holds alone (see [`crate::owners`]).
    pub max_torrents_per_address: usize,
    /// Most torrents the /64s of one IPv6 /48 hold alone together.
    pub max_torrents_per_48: usize,
    /// Most peers one address (IPv6: one /64) has in all torrents together.
    pub max_peers_per_address: usize,
    /// Most peers the /64s of one IPv6 /48 have in all torrents together.
    pub max_peers_per_48: usize,
}

/// The caps a reload may change in place (`Service::reconfigure`), read per announce with
/// plain loads.
#[derive(Debug)]
struct LiveCaps {
    max_torrents: AtomicUsize,
    max_peers: AtomicUsize,
    max_peers_per_torrent: AtomicUsize,
    max_peers_per_ip: AtomicUsize,
    max_peers_per_ip_48: AtomicUsize,
}

impl LiveCaps {
    fn new(c: &Caps) -> LiveCaps {
        LiveCaps {
            max_torrents: AtomicUsize::new(c.max_torrents),
            max_peers: AtomicUsize::new(c.max_peers),
            max_peers_per_torrent: AtomicUsize::new(c.max_peers_per_torrent),
            max_peers_per_ip: AtomicUsize::new(c.max_peers_per_ip),
            max_peers_per_ip_48: AtomicUsize::new(c.max_peers_per_ip_48),
        }
    }

    fn set(&self, c: &Caps) {
        self.max_torrents.store(c.max_torrents, Ordering::Relaxed);
        self.max_peers.store(c.max_peers, Ordering::Relaxed);
        self.max_peers_per_torrent
            .store(c.max_peers_per_torrent, Ordering::Relaxed);
        self.max_peers_per_ip
            .store(c.max_peers_per_ip, Ordering::Relaxed);
        self.max_peers_per_ip_48
            .store(c.max_peers_per_ip_48, Ordering::Relaxed);
    }
}

impl Caps {
    /// Caps high enough that tests of other things never meet them.
    pub const LARGE: Caps = Caps {
        max_torrents: 1 << 30,
        max_peers: 1 << 30,
        max_peers_per_torrent: 1 << 30,
        max_peers_per_ip: 1 << 30,
        max_peers_per_ip_48: 1 << 30,
        max_idle_torrents: 1 << 30,
        max_torrents_per_address: 1 << 30,
        max_torrents_per_48: 1 << 30,
        max_peers_per_address: 1 << 30,
        max_peers_per_48: 1 << 30,
    };
}

/// How often each cap was met.
#[derive(Debug, Default)]
pub struct CapHits {
    /// Announces for a new torrent refused at `max_torrents`.
    pub torrents: Counter,
    /// New peers not added because the table held `max_peers`.
    pub peers: Counter,
    /// New peers not added because their torrent held `max_peers_per_torrent`.
    pub swarm: Counter,
    /// Announces refused because their address held `max_peers_per_ip` in the torrent.
    pub address: Counter,
    /// Completed counts of idle torrents dropped at `max_idle_torrents`.
    pub idle_evicted: Counter,
    /// Completions not counted: the same client address completed the same torrent within
    /// the peer timeout (a client flipping `left` between 0 and 1, or cycling its port).
    pub snatch_repeats: Counter,
    /// Recent snatches forgotten early to keep the shard's share of `max_peers`.
    pub snatch_evicted: Counter,
    /// New torrents refused because their address held `max_torrents_per_address` (or its
    /// /48 `max_torrents_per_48`) torrents alone.
    pub owned: Counter,
    /// Torrents of the address holding the most alone, dropped to make room for another
    /// address's new torrent when the table held `max_torrents`.
    pub evicted: Counter,
    /// New peers refused because their address held `max_peers_per_address` (or its /48
    /// `max_peers_per_48`) peers in all torrents.
    pub spread: Counter,
}

/// Totals over all shards.
#[derive(Debug, Clone, Copy, Default)]
pub struct Totals {
    /// Torrents.
    pub torrents: usize,
    /// Peers.
    pub peers: usize,
    /// Seeders.
    pub seeders: usize,
    /// Torrents without peers whose completed counts are kept.
    pub idle: usize,
}

/// What applying another node's delta did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merged {
    /// A peer this node did not know was added.
    Added,
    /// A known peer was updated.
    Updated,
    /// A known peer was removed (a tombstone).
    Removed,
    /// Nothing changed: the record held is newer, the peer already expired, or a tombstone
    /// of an unknown peer.
    Stale,
    /// Not added: a cap (torrents, peers, peers per swarm or per address) holds.
    Full,
}

/// The swarm table, whatever its record layout.
pub trait SwarmTable: Send + Sync {
    /// Applies an announce and fills `sel`; returns the torrent's counts and whether this
    /// announce completed a download (a snatch). The error is a failure reason.
    fn announce(
        &self,
        a: &PeerAnnounce,
        now: u16,
        rng: &mut fastrand::Rng,
        sel: &mut Selection,
    ) -> Result<(Counts, bool), &'static str>;

    /// Applies a delta another node (`origin`) published, its peer last seen at `seen`
    /// (process seconds, at or before `now`): the newer record wins; a snatch adds to the
    /// completed count whatever the record. The caps hold as for announces.
    fn merge(&self, d: &Delta, origin: u8, seen: u16, now: u16) -> Merged;

    /// Peers by the node they announced to, as of each shard's last sweep (empty when the
    /// table keeps no origins).
    fn peers_by_origin(&self) -> Vec<(u8, usize)>;

    /// Calls `each` with a delta for every peer (IPv4 and IPv6; not the IPv6 addresses IPv4
    /// peers gave) that announced to node `origin`, stamped with when it was last seen
    /// (unix seconds, from `now` and `unix_now`); one shard locked at a time.
    fn export(&self, origin: u8, now: u16, unix_now: u32, each: &mut dyn FnMut(&Delta));

    /// Raises a torrent's completed count to `completed` if it is lower (what the database
    /// holds, read again after a cluster node missed other nodes' deltas: counts only grow,
    /// so the larger is right whatever this node counted meanwhile); kept as an idle
    /// torrent's count when it has no peers, within `max_idle_torrents`.
    fn raise_completed(&self, info_hash: &Id20, completed: u32);

    /// Adds to a torrent's completed count (what the database held, read at start or once
    /// it is reached); kept as an idle torrent's count until a peer comes, within
    /// `max_idle_torrents`.
    fn add_completed(&self, info_hash: &Id20, completed: u32);

    /// How often each cap was met.
    fn cap_hits(&self) -> &CapHits;

    /// Applies `caps`' max_torrents, max_peers, max_peers_per_torrent, max_peers_per_ip and
    /// max_peers_per_ip_48 from the next announce on (a reload); the others stay as built.
    fn set_caps(&self, caps: &Caps);

    /// The counts of one torrent (zeros when unknown).
    fn scrape(&self, info_hash: &Id20) -> Counts;

    /// Calls `each` for every torrent, one shard locked at a time.
    fn for_each(&self, each: &mut dyn FnMut(&Id20, Counts));

    /// Expires peers older than `timeout` in shard `i`; returns (peers dropped, torrents freed).
    fn sweep(&self, i: usize, now: u16, timeout: u16) -> (usize, usize);

    /// Number of shards.
    fn shards(&self) -> usize;

    /// Totals over all shards.
    fn totals(&self) -> Totals;

    /// Bytes of peer id each saved peer carries (0 or 20).
    fn id_len(&self) -> usize;

    /// Appends every swarm with peers to `out` in the snapshot format of [`crate::persist`],
    /// one shard locked at a time; returns (torrents, peers) saved.
    fn save(&self, now: u16, out: &mut Vec<u8>) -> (usize, usize);

    /// Adds the swarms of a snapshot body whose peers carry `id_len` id bytes (and, with
    /// `aliases`, a third count per torrent: the IPv6 addresses IPv4 peers gave), each peer
    /// aged by `downtime` more seconds; peers older than `timeout` are left out, and the caps
    /// hold as for announces. Takes time linear in the peers. Returns (torrents, peers)
    /// restored, or what is wrong with the body.
    fn load(
        &self,
        body: &[u8],
        id_len: usize,
        aliases: bool,
        now: u16,
        downtime: u32,
        timeout: u16,
    ) -> Result<(usize, usize), &'static str>;
}

/// Appends one peer set's records: address, age in seconds, seeder flag, peer id if kept.
fn put_records<const A: usize, const I: usize, const O: usize>(
    out: &mut Vec<u8>,
    (records, seeders): (&[Record<A, I, O>], u32),
    now: u16,
) {
    for (i, r) in records.iter().enumerate() {
        out.extend_from_slice(r.addr());
        out.extend_from_slice(&now.wrapping_sub(r.seen()).to_le_bytes());
        out.push(u8::from((i as u32) < seeders));
        if let Some(id) = r.peer_id() {
            out.extend_from_slice(id);
        }
    }
}

/// Reads a snapshot body front to back.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], &'static str> {
        if self.0.len() < n {
            return Err("the swarm snapshot is cut short");
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u32(&mut self) -> Result<u32, &'static str> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
}

/// One saved peer: its address, whether it seeds, its id (zeros when not saved) and its age.
struct SavedPeer<const A: usize> {
    addr: [u8; A],
    seeder: bool,
    id: Id20,
    age: u16,
}

impl<const A: usize> SavedPeer<A> {
    /// Puts the peer back into the set `set` picks, unless `when` (given its age and
    /// address) says it has expired; else `when` gives its last-seen time and the room the
    /// table has. Returns whether it was added.
    fn restore<const I: usize, const O: usize>(
        &self,
        t: &mut Torrent<I, O>,
        set: fn(&mut Torrent<I, O>) -> PeerSet<'_, A, I, O>,
        when: &mut impl FnMut(&mut Torrent<I, O>, u16, &[u8]) -> Option<(u16, Room)>,
        origin: u8,
    ) -> bool {
        match when(t, self.age, &self.addr) {
            Some((seen, room)) => {
                let (change, _) =
                    set(t).announce(self.addr, &self.id, self.seeder, false, seen, room, origin);
                t.tidy();
                change == Change::Added
            }
            None => false,
        }
    }
}

fn read_peer<const A: usize>(
    r: &mut Reader<'_>,
    id_len: usize,
) -> Result<SavedPeer<A>, &'static str> {
    let addr: [u8; A] = r.take(A)?.try_into().expect("A bytes");
    let age = u16::from_le_bytes(r.take(2)?.try_into().expect("2 bytes"));
    let seeder = r.take(1)?[0] != 0;
    let mut id = [0u8; 20];
    id[..id_len].copy_from_slice(r.take(id_len)?);
    Ok(SavedPeer {
        addr,
        seeder,
        id,
        age,
    })
}

/// The compact address (IP and port) the announcing peer is counted under: its IPv4 one, else
/// its IPv6 one; empty for neither.
fn announcer(a: &PeerAnnounce) -> &[u8] {
    match (&a.v4, &a.v6) {
        (Some(addr), _) => addr,
        (None, Some(addr)) => addr,
        (None, None) => &[],
    }
}

/// The address a remote delta's peer announced from (what [`announcer`] is for a local one).
fn delta_announcer(d: &Delta) -> &[u8] {
    if d.v6 {
        &d.addr[..]
    } else {
        &d.addr[..6]
    }
}

/// The address of a torrent's only peer, if it has exactly one (see [`crate::owners`]).
fn sole<const I: usize, const O: usize>(t: &Torrent<I, O>) -> Option<owners::Key> {
    if t.peers() != 1 {
        return None;
    }
    match (t.records_v4().0.first(), t.records_v6().0.first()) {
        (Some(r), _) => Some(owners::key(r.addr())),
        (None, Some(r)) => Some(owners::key(r.addr())),
        (None, None) => None,
    }
}

/// [`Swarms`] with the global torrent and peer counts the caps use.
pub struct Table<const I: usize, const O: usize = 0> {
    swarms: Swarms<I, O>,
    /// The node this table's own announces are recorded as coming from (cluster mode).
    origin: u8,
    torrents: AtomicUsize,
    peers: AtomicUsize,
    live: LiveCaps,
    hits: CapHits,
    /// Idle torrents' counts one shard keeps.
    idle_per_shard: usize,
    /// Recent snatches one shard keeps.
    snatched_per_shard: usize,
    /// The SipHash key of recent snatches' (torrent, address) (random: no client can line
    /// up its keys with another's).
    snatch_key: [u64; 2],
    /// Torrents each address holds alone.
    owners: Owners,
    /// Peers each address has in all torrents.
    spread: Spread,
    /// Where the next eviction starts looking (see `make_room`).
    evict_from: AtomicUsize,
    /// The process second of the latest sweep (an eviction's idea of now).
    last_now: AtomicUsize,
}

/// Torrents an eviction looks at, at most, for one of the heaviest address's.
const EVICT_LOOK: usize = 4096;

impl<const I: usize, const O: usize> Table<I, O> {
    /// An empty table.
    pub fn new(shards: usize, caps: Caps) -> Self {
        Self {
            swarms: Swarms::new(shards),
            origin: 0,
            torrents: AtomicUsize::new(0),
            peers: AtomicUsize::new(0),
            idle_per_shard: caps.max_idle_torrents.div_ceil(shards).max(1),
            snatched_per_shard: caps.max_peers.div_ceil(shards).max(1),
            snatch_key: {
                let mut b = [0u8; 16];
                getrandom::fill(&mut b).expect("the OS's random numbers");
                let k = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
                [k(0), k(8)]
            },
            owners: Owners::new(caps.max_torrents_per_address, caps.max_torrents_per_48),
            spread: Spread::new(caps.max_peers_per_address, caps.max_peers_per_48),
            evict_from: AtomicUsize::new(0),
            last_now: AtomicUsize::new(0),
            live: LiveCaps::new(&caps),
            hits: CapHits::default(),
        }
    }

    /// The same table recording its own announces as node `origin`'s.
    pub fn with_origin(mut self, origin: u8) -> Self {
        self.origin = origin;
        self
    }

    /// What a new peer at `addr` (compact) may take in `t` now.
    fn room(&self, t: &Torrent<I, O>, addr: &[u8]) -> Room {
        self.room_at(t, self.peers.load(Ordering::Relaxed), addr)
    }

    /// What a new peer at `addr` may take in `t` when the table holds `table_peers`.
    fn room_at(&self, t: &Torrent<I, O>, table_peers: usize, addr: &[u8]) -> Room {
        let swarm = (t.peers() as usize) < self.live.max_peers_per_torrent.load(Ordering::Relaxed);
        let table = table_peers < self.live.max_peers.load(Ordering::Relaxed);
        Room {
            swarm: swarm && table,
            per_ip: self.live.max_peers_per_ip.load(Ordering::Relaxed),
            per_48: self.live.max_peers_per_ip_48.load(Ordering::Relaxed),
            address: self.spread.may_add(owners::key(addr)),
        }
    }

    /// Counts a new peer that did not fit.
    fn count_full(&self, t: &Torrent<I, O>) {
        if (t.peers() as usize) < self.live.max_peers_per_torrent.load(Ordering::Relaxed) {
            self.hits.peers.add(1);
        } else {
            self.hits.swarm.add(1);
        }
    }

    /// Whether a completion of `info_hash` by the client at `addr` (compact: address and
    /// port) counts: not when the same client completed it within the peer timeout (the sweep
    /// forgets older ones), whatever its peer id and however its `left` went up and down in
    /// between. Either way its last completion is now. Past the shard's share of `max_peers`,
    /// an arbitrary recent snatch is forgotten (counted).
    fn first_snatch(
        &self,
        snatched: &mut hashbrown::HashMap<u64, u16>,
        info_hash: &Id20,
        addr: &[u8],
        now: u16,
    ) -> bool {
        use std::hash::Hasher as _;
        let [k0, k1] = self.snatch_key;
        let mut h = siphasher::sip::SipHasher13::new_with_keys(k0, k1);
        h.write(info_hash);
        h.write(addr);
        let key = h.finish();
        if let Some(at) = snatched.get_mut(&key) {
            *at = now;
            self.hits.snatch_repeats.add(1);
            return false;
        }
        if snatched.len() >= self.snatched_per_shard {
            if let Some(k) = snatched.keys().next().copied() {
                snatched.remove(&k);
                self.hits.snatch_evicted.add(1);
            }
        }
        snatched.insert(key, now);
        true
    }

    /// The table is full and `a` may be for a new torrent: when it is, and its address holds
    /// fewer torrents alone than the address holding the most, one of that address's
    /// torrents goes (the one whose peer was seen longest ago among the first few found), so
    /// that a flood from a few places cannot keep everyone else out. Locks one shard at a
    /// time, never two; a torrent made meanwhile by another announce may still fill the room
    /// (then this announce is refused as before).
    fn make_room(&self, a: &PeerAnnounce, now: u16) {
        if self
            .swarms
            .shard(&a.info_hash)
            .lock()
            .torrents
            .contains_key(&a.info_hash)
        {
            return;
        }
        let addr = announcer(a);
        if addr.is_empty() {
            return;
        }
        let own = owners::key(addr);
        let Some((heaviest, held)) = self.owners.heaviest_at(now) else {
            return;
        };
        if heaviest == own || self.owners.held(own) + 1 >= held {
            return;
        }
        // Shards from a place that moves on, so evictions spread over the table.
        let shards = self.swarms.shard_count();
        let start = self.evict_from.fetch_add(1, Ordering::Relaxed);
        let mut looked = 0;
        for i in 0..shards {
            let mut guard = self.swarms.shard_at((start + i) % shards).lock();
            let shard = &mut *guard;
            // The stalest of the first few of its torrents in this shard.
            let mut pick: Option<(Id20, u16)> = None;
            let now_ish = self.last_now.load(Ordering::Relaxed) as u16;
            for (hash, t) in shard.torrents.iter() {
                looked += 1;
                if sole(t) != Some(heaviest) {
                    continue;
                }
                let seen = t
                    .records_v4()
                    .0
                    .first()
                    .map(|r| r.seen())
                    .or_else(|| t.records_v6().0.first().map(|r| r.seen()))
                    .unwrap_or(0);
                let age = now_ish.wrapping_sub(seen);
                if pick.is_none_or(|(_, best)| age > best) {
                    pick = Some((*hash, age));
                }
                if looked >= EVICT_LOOK || pick.is_some() && looked % 8 == 0 {
                    break;
                }
            }
            if let Some((hash, _)) = pick {
                if let Some(t) = shard.torrents.remove(&hash) {
                    self.forget_peers(&t);
                    let (p, s) = (t.peers() as usize, t.seeders() as usize);
                    shard.peers -= p;
                    shard.seeders -= s;
                    self.count_peers(p, 0);
                    self.torrents.fetch_sub(1, Ordering::Relaxed);
                    self.owners.moved(Some(heaviest), None);
                    let completed = t.completed;
                    self.keep_idle(shard, hash, completed);
                    self.hits.evicted.add(1);
                }
                return;
            }
            if looked >= EVICT_LOOK {
                return;
            }
        }
    }

    /// Keeps the completed count of a torrent whose swarm was freed, within the shard's share
    /// of `max_idle_torrents` (past it, an arbitrary one is dropped: its count stays in the
    /// database, scrapes report 0 until a peer returns).
    fn keep_idle(&self, shard: &mut Shard<I, O>, hash: Id20, completed: u32) {
        if completed == 0 {
            return;
        }
        if shard.idle.len() >= self.idle_per_shard && !shard.idle.contains_key(&hash) {
            if let Some(k) = shard.idle.keys().next().copied() {
                shard.idle.remove(&k);
                self.hits.idle_evicted.add(1);
            }
        }
        shard.idle.insert(hash, completed);
    }

    /// Takes the peers of a torrent dropped whole off their addresses' counts.
    fn forget_peers(&self, t: &Torrent<I, O>) {
        for r in t.records_v4().0 {
            self.spread.moved(r.addr(), false);
        }
        for r in t.records_v6().0 {
            self.spread.moved(r.addr(), false);
        }
    }

    /// Moves the peer count by a change from `before` to `after` peers.
    fn count_peers(&self, before: usize, after: usize) {
        if after > before {
            self.peers.fetch_add(after - before, Ordering::Relaxed);
        } else if before > after {
            self.peers.fetch_sub(before - after, Ordering::Relaxed);
        }
    }
}

fn counts<const I: usize, const O: usize>(t: &Torrent<I, O>) -> Counts {
    Counts {
        seeders: t.seeders(),
        leechers: t.leechers(),
        completed: t.completed,
    }
}

impl<const I: usize, const O: usize> SwarmTable for Table<I, O> {
    fn announce(
        &self,
        a: &PeerAnnounce,
        now: u16,
        rng: &mut fastrand::Rng,
        sel: &mut Selection,
    ) -> Result<(Counts, bool), &'static str> {
        let stopped = a.event == Event::Stopped;
        if !stopped
            && self.torrents.load(Ordering::Relaxed)
                >= self.live.max_torrents.load(Ordering::Relaxed)
        {
            self.make_room(a, now);
        }
        let mut guard = self.swarms.shard(&a.info_hash).lock();
        let shard = &mut *guard;
        // One hash lookup whether the torrent is known or new.
        let t = match shard.torrents.entry(a.info_hash) {
            Entry::Occupied(o) => o.into_mut(),
            Entry::Vacant(v) => {
                let completed = shard.idle.get(&a.info_hash).copied().unwrap_or(0);
                if stopped {
                    return Ok((
                        Counts {
                            completed,
                            ..Counts::default()
                        },
                        false,
                    ));
                }
                if self.torrents.load(Ordering::Relaxed)
                    >= self.live.max_torrents.load(Ordering::Relaxed)
                {
                    self.hits.torrents.add(1);
                    return Err("tracker is full: it tracks as many torrents as it may");
                }
                if !self.owners.may_create(owners::key(announcer(a))) {
                    self.hits.owned.add(1);
                    return Err("too many torrents from your address that no one else is in");
                }
                self.torrents.fetch_add(1, Ordering::Relaxed);
                shard.idle.remove(&a.info_hash);
                let t = v.insert(Torrent::default());
                t.completed = completed;
                t
            }
        };
        let (s0, p0) = (t.seeders(), t.peers());
        let sole0 = sole(t);
        // A snatch is counted once per download, as XBT does: when a peer this swarm knows as
        // a leecher reports left=0 (whatever its event: some clients go straight to
        // `stopped`). A peer the swarm does not know counts nothing, whatever it says, so
        // replayed or forged `completed` events cannot inflate the count.
        let snatch = |change: Change, was_seeder: bool| {
            matches!(change, Change::Updated | Change::Removed) && a.complete && !was_seeder
        };
        let room = self.room(t, announcer(a));
        let (change, was) = match (a.v4, a.v6) {
            (Some(addr), _) => {
                t.v4()
                    .announce(addr, &a.peer_id, a.seeder, stopped, now, room, self.origin)
            }
            (None, Some(addr)) => {
                t.v6()
                    .announce(addr, &a.peer_id, a.seeder, stopped, now, room, self.origin)
            }
            (None, None) => (Change::None, false),
        };
        let mut refused = None;
        match change {
            Change::SwarmFull => self.count_full(t),
            Change::AddressFull => {
                self.hits.address.add(1);
                refused = Some("too many peers from your address in this torrent");
            }
            Change::AddressSpent => {
                self.hits.spread.add(1);
                refused = Some("too many peers from your address in all torrents");
            }
            Change::Added => self.spread.moved(announcer(a), true),
            Change::Removed => self.spread.moved(announcer(a), false),
            Change::Updated | Change::None => {}
        }
        if let (Some(addr), None) = (a.alias6, refused) {
            // Goes and comes with its IPv4 record; never counted.
            let room = Room {
                swarm: room.swarm || change == Change::Updated,
                per_ip: self.live.max_peers_per_ip.load(Ordering::Relaxed),
                per_48: self.live.max_peers_per_ip_48.load(Ordering::Relaxed),
                address: true,
            };
            t.alias6()
                .announce(addr, &a.peer_id, a.seeder, stopped, now, room, self.origin);
        }
        t.tidy();
        let snatched = snatch(change, was)
            && self.first_snatch(&mut shard.snatched, &a.info_hash, announcer(a), now);
        if snatched {
            t.completed = t.completed.saturating_add(1);
        }
        if !stopped && refused.is_none() {
            let own4 = a.v4.unwrap_or([0; 6]);
            let own6 = a.v6.or(a.alias6).unwrap_or([0; 18]);
            let mut left = a.want;
            let with_ids = sel.with_ids;
            if a.want_v4 {
                left -= t.select_v4(&own4, a.seeder, left, rng, |p| {
                    sel.v4.extend_from_slice(p.addr());
                    if let (true, Some(id)) = (with_ids, p.peer_id()) {
                        sel.ids.push(id.try_into().expect("20-byte id"));
                    }
                });
            }
            if a.want_v6 {
                t.select_v6(&own6, a.seeder, left, rng, |p| {
                    sel.v6.extend_from_slice(p.addr());
                    if let (true, Some(id)) = (with_ids, p.peer_id()) {
                        sel.ids.push(id.try_into().expect("20-byte id"));
                    }
                });
            }
        }
        let c = counts(t);
        let p1 = t.peers();
        self.owners.moved(sole0, sole(t));
        shard.seeders = shard.seeders + c.seeders as usize - s0 as usize;
        shard.peers = shard.peers + p1 as usize - p0 as usize;
        self.count_peers(p0 as usize, p1 as usize);
        if t.is_empty() {
            // Its swarm is freed; its count, if any, is kept compactly for scrapes.
            let completed = t.completed;
            shard.torrents.remove(&a.info_hash);
            self.torrents.fetch_sub(1, Ordering::Relaxed);
            self.keep_idle(shard, a.info_hash, completed);
        }
        match refused {
            Some(reason) => Err(reason),
            None => Ok((c, snatched)),
        }
    }

    fn merge(&self, d: &Delta, origin: u8, seen: u16, now: u16) -> Merged {
        let mut guard = self.swarms.shard(&d.info_hash).lock();
        let shard = &mut *guard;
        let t = match shard.torrents.entry(d.info_hash) {
            Entry::Occupied(o) => o.into_mut(),
            Entry::Vacant(v) => {
                if d.stopped {
                    let who = delta_announcer(d);
                    if d.snatched && self.first_snatch(&mut shard.snatched, &d.info_hash, who, now)
                    {
                        let before = shard.idle.get(&d.info_hash).copied().unwrap_or(0);
                        self.keep_idle(shard, d.info_hash, before.saturating_add(1));
                    }
                    return Merged::Stale;
                }
                if self.torrents.load(Ordering::Relaxed)
                    >= self.live.max_torrents.load(Ordering::Relaxed)
                {
                    self.hits.torrents.add(1);
                    return Merged::Full;
                }
                self.torrents.fetch_add(1, Ordering::Relaxed);
                let completed = shard.idle.remove(&d.info_hash).unwrap_or(0);
                let t = v.insert(Torrent::default());
                t.completed = completed;
                t
            }
        };
        let (s0, p0) = (t.seeders(), t.peers());
        let sole0 = sole(t);
        let addr = d.address();
        let room = self.room(t, addr);
        let id = d.peer_id.unwrap_or([0; 20]);
        let (change, _) = if d.v6 {
            t.v6()
                .merge(d.addr, &id, d.seeder, d.stopped, seen, now, room, origin)
        } else {
            let a4: [u8; 6] = d.addr[..6].try_into().expect("6 bytes");
            t.v4()
                .merge(a4, &id, d.seeder, d.stopped, seen, now, room, origin)
        };
        let merged = match change {
            Change::Added => {
                self.spread.moved(addr, true);
                Merged::Added
            }
            Change::Removed => {
                self.spread.moved(addr, false);
                Merged::Removed
            }
            Change::Updated => Merged::Updated,
            Change::None => Merged::Stale,
            Change::SwarmFull | Change::AddressFull | Change::AddressSpent => {
                if change == Change::SwarmFull {
                    self.count_full(t);
                }
                Merged::Full
            }
        };
        t.tidy();
        // A snatch counts once per client and torrent within the peer timeout, as a local
        // one does: a delta Redis delivers twice (a subscription on a shard's master and on
        // its replica, after a failover) or late adds nothing more.
        if d.snatched
            && self.first_snatch(&mut shard.snatched, &d.info_hash, delta_announcer(d), now)
        {
            t.completed = t.completed.saturating_add(1);
        }
        let (s1, p1) = (t.seeders(), t.peers());
        self.owners.moved(sole0, sole(t));
        shard.seeders = shard.seeders + s1 as usize - s0 as usize;
        shard.peers = shard.peers + p1 as usize - p0 as usize;
        self.count_peers(p0 as usize, p1 as usize);
        if t.is_empty() {
            let completed = t.completed;
            shard.torrents.remove(&d.info_hash);
            self.torrents.fetch_sub(1, Ordering::Relaxed);
            self.keep_idle(shard, d.info_hash, completed);
        }
        merged
    }

    fn peers_by_origin(&self) -> Vec<(u8, usize)> {
        let mut tally = [0usize; 256];
        for i in 0..self.swarms.shard_count() {
            for &(o, n) in &self.swarms.shard_at(i).lock().origins {
                tally[usize::from(o)] += n as usize;
            }
        }
        (0..=255u8).zip(tally).filter(|&(_, n)| n > 0).collect()
    }

    fn export(&self, origin: u8, now: u16, unix_now: u32, each: &mut dyn FnMut(&Delta)) {
        fn put<const A: usize, const I: usize, const O: usize>(
            (records, seeders): (&[Record<A, I, O>], u32),
            mut d: Delta,
            origin: u8,
            (now, unix_now): (u16, u32),
            each: &mut dyn FnMut(&Delta),
        ) {
            for (i, r) in records.iter().enumerate() {
                if r.origin() != origin {
                    continue;
                }
                d.addr[..A].copy_from_slice(r.addr());
                d.seeder = (i as u32) < seeders;
                d.peer_id = r.peer_id().map(|id| id.try_into().expect("20-byte id"));
                d.at = unix_now.saturating_sub(u32::from(now.wrapping_sub(r.seen())));
                each(&d);
            }
        }
        for i in 0..self.swarms.shard_count() {
            let shard = self.swarms.shard_at(i).lock();
            for (hash, t) in &shard.torrents {
                let clock = (now, unix_now);
                put(
                    t.records_v4(),
                    Delta::v4(*hash, [0; 6], 0),
                    origin,
                    clock,
                    each,
                );
                put(
                    t.records_v6(),
                    Delta::v6(*hash, [0; 18], 0),
                    origin,
                    clock,
                    each,
                );
            }
        }
    }

    fn raise_completed(&self, info_hash: &Id20, completed: u32) {
        let mut guard = self.swarms.shard(info_hash).lock();
        let shard = &mut *guard;
        match shard.torrents.get_mut(info_hash) {
            Some(t) => t.completed = t.completed.max(completed),
            None => {
                let before = shard.idle.get(info_hash).copied().unwrap_or(0);
                if completed > before {
                    self.keep_idle(shard, *info_hash, completed);
                }
            }
        }
    }

    fn add_completed(&self, info_hash: &Id20, completed: u32) {
        let mut guard = self.swarms.shard(info_hash).lock();
        let shard = &mut *guard;
        match shard.torrents.get_mut(info_hash) {
            Some(t) => t.completed = t.completed.saturating_add(completed),
            None => {
                let before = shard.idle.get(info_hash).copied().unwrap_or(0);
                self.keep_idle(shard, *info_hash, before.saturating_add(completed));
            }
        }
    }

    fn cap_hits(&self) -> &CapHits {
        &self.hits
    }

    fn set_caps(&self, caps: &Caps) {
        self.live.set(caps);
    }

    fn scrape(&self, info_hash: &Id20) -> Counts {
        let shard = self.swarms.shard(info_hash).lock();
        match shard.torrents.get(info_hash) {
            Some(t) => counts(t),
            None => Counts {
                completed: shard.idle.get(info_hash).copied().unwrap_or(0),
                ..Counts::default()
            },
        }
    }

    fn for_each(&self, each: &mut dyn FnMut(&Id20, Counts)) {
        for i in 0..self.swarms.shard_count() {
            let shard = self.swarms.shard_at(i).lock();
            for (hash, t) in &shard.torrents {
                each(hash, counts(t));
            }
            for (hash, &completed) in &shard.idle {
                let c = Counts {
                    completed,
                    ..Counts::default()
                };
                each(hash, c);
            }
        }
    }

    fn sweep(&self, i: usize, now: u16, timeout: u16) -> (usize, usize) {
        self.last_now.store(usize::from(now), Ordering::Relaxed);
        let mut guard = self.swarms.shard_at(i).lock();
        let shard = &mut *guard;
        let (mut dropped, mut seeders, mut peers) = (0, 0, 0);
        let before = shard.torrents.len();
        let mut emptied = Vec::new();
        shard.torrents.retain(|hash, t| {
            let sole0 = sole(t);
            dropped += t.expire(now, timeout, &mut |addr| self.spread.moved(addr, false));
            self.owners.moved(sole0, sole(t));
            seeders += t.seeders() as usize;
            peers += t.peers() as usize;
            if t.is_empty() && t.completed > 0 {
                emptied.push((*hash, t.completed));
            }
            !t.is_empty()
        });
        for (hash, completed) in emptied {
            self.keep_idle(shard, hash, completed);
        }
        shard
            .snatched
            .retain(|_, at| now.wrapping_sub(*at) <= timeout);
        if shard.snatched.capacity() > 4 * shard.snatched.len() + 64 {
            shard.snatched.shrink_to_fit();
        }
        let freed = before - shard.torrents.len();
        if shard.torrents.capacity() > 4 * shard.torrents.len() + 64 {
            shard.torrents.shrink_to_fit();
        }
        self.count_peers(shard.peers, peers);
        shard.seeders = seeders;
        shard.peers = peers;
        if O > 0 {
            let mut tally = [0u32; 256];
            for t in shard.torrents.values_mut() {
                t.v4().tally_origins(&mut tally);
                if !t.records_v6().0.is_empty() {
                    t.v6().tally_origins(&mut tally);
                }
            }
            shard.origins = (0..=255u8).zip(tally).filter(|&(_, n)| n > 0).collect();
        }
        self.torrents.fetch_sub(freed, Ordering::Relaxed);
        (dropped, freed)
    }

    fn shards(&self) -> usize {
        self.swarms.shard_count()
    }

    fn id_len(&self) -> usize {
        I
    }

    fn save(&self, now: u16, out: &mut Vec<u8>) -> (usize, usize) {
        let (mut torrents, mut peers) = (0, 0);
        for i in 0..self.swarms.shard_count() {
            let shard = self.swarms.shard_at(i).lock();
            for (hash, t) in &shard.torrents {
                if t.is_empty() {
                    continue;
                }
                let (v4, v6, a6) = (t.records_v4(), t.records_v6(), t.records_alias6());
                out.extend_from_slice(hash);
                out.extend_from_slice(&(v4.0.len() as u32).to_le_bytes());
                out.extend_from_slice(&(v6.0.len() as u32).to_le_bytes());
                out.extend_from_slice(&(a6.0.len() as u32).to_le_bytes());
                put_records(out, v4, now);
                put_records(out, v6, now);
                put_records(out, a6, now);
                torrents += 1;
                peers += v4.0.len() + v6.0.len();
            }
        }
        (torrents, peers)
    }

    fn load(
        &self,
        body: &[u8],
        id_len: usize,
        aliases: bool,
        now: u16,
        downtime: u32,
        timeout: u16,
    ) -> Result<(usize, usize), &'static str> {
        if id_len != 0 && id_len != 20 {
            return Err("the swarm snapshot has an unknown peer id size");
        }
        let (mut torrents, mut peers) = (0, 0);
        let mut r = Reader(body);
        // A peer's last-seen time, if it is still alive after the downtime.
        let seen = |age: u16| {
            let age = u32::from(age) + downtime;
            (age < u32::from(timeout)).then(|| now.wrapping_sub(age as u16))
        };
        while !r.0.is_empty() {
            let hash: Id20 = r.take(20)?.try_into().expect("20 bytes");
            let (n4, n6) = (r.u32()?, r.u32()?);
            let na = if aliases { r.u32()? } else { 0 };
            let mut guard = self.swarms.shard(&hash).lock();
            let shard = &mut *guard;
            let fresh = !shard.torrents.contains_key(&hash);
            if fresh
                && self.torrents.load(Ordering::Relaxed)
                    >= self.live.max_torrents.load(Ordering::Relaxed)
            {
                self.hits.torrents.add(1);
                // Left out whole, but read through to keep the place in the body.
                for _ in 0..n4 {
                    read_peer::<6>(&mut r, id_len)?;
                }
                for _ in 0..u64::from(n6) + u64::from(na) {
                    read_peer::<18>(&mut r, id_len)?;
                }
                continue;
            }
            let t = shard.torrents.entry(hash).or_default();
            let (s0, p0) = (t.seeders(), t.peers());
            let sole0 = sole(t);
            // The table's peers before this torrent; its own new peers count against
            // `max_peers` as they come.
            let base = self.peers.load(Ordering::Relaxed);
            // `tidy` after each peer builds a large set's index as soon as it is due, so every
            // later peer is found through it: linear in the peers, as for announces (it was
            // quadratic: 400k peers in one torrent took 52 s). A body cut short inside the
            // torrent still counts the peers read before the cut (below), then fails.
            let mut read = || -> Result<(), &'static str> {
                let mut restore = |t: &mut Torrent<I, O>, age: u16, addr: &[u8]| {
                    let peers = base + (t.peers() - p0) as usize;
                    seen(age).map(|seen| (seen, self.room_at(t, peers, addr)))
                };
                for _ in 0..n4 {
                    let p = read_peer::<6>(&mut r, id_len)?;
                    if p.restore(t, Torrent::v4, &mut restore, self.origin) {
                        self.spread.moved(&p.addr, true);
                    }
                }
                for _ in 0..n6 {
                    let p = read_peer::<18>(&mut r, id_len)?;
                    if p.restore(t, Torrent::v6, &mut restore, self.origin) {
                        self.spread.moved(&p.addr, true);
                    }
                }
                for _ in 0..na {
                    let p = read_peer::<18>(&mut r, id_len)?;
                    p.restore(t, Torrent::alias6, &mut restore, self.origin);
                }
                Ok(())
            };
            let read = read();
            t.tidy();
            self.owners.moved(sole0, sole(t));
            let (s1, p1) = (t.seeders(), t.peers());
            shard.seeders = shard.seeders + s1 as usize - s0 as usize;
            shard.peers = shard.peers + p1 as usize - p0 as usize;
            self.count_peers(p0 as usize, p1 as usize);
            if t.is_empty() {
                shard.torrents.remove(&hash);
            } else {
                if fresh {
                    self.torrents.fetch_add(1, Ordering::Relaxed);
                    let completed = shard.idle.remove(&hash).unwrap_or(0);
                    if let Some(t) = shard.torrents.get_mut(&hash) {
                        t.completed = completed;
                    }
                }
                torrents += 1;
                peers += (p1 - p0) as usize;
            }
            read?;
        }
        Ok((torrents, peers))
    }

    fn totals(&self) -> Totals {
        let mut t = Totals::default();
        for i in 0..self.swarms.shard_count() {
            let shard = self.swarms.shard_at(i).lock();
            t.torrents += shard.torrents.len();
            t.peers += shard.peers;
            t.seeders += shard.seeders;
            t.idle += shard.idle.len();
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table<const I: usize>(shards: usize, max_torrents: usize) -> Table<I> {
        let caps = Caps {
            max_torrents: if max_torrents == 0 {
                Caps::LARGE.max_torrents
            } else {
                max_torrents
            },
            ..Caps::LARGE
        };
        Table::new(shards, caps)
    }

    fn announce(n: u8, seeder: bool, event: Event) -> PeerAnnounce {
        PeerAnnounce {
            info_hash: [1; 20],
            peer_id: [n; 20],
            v4: Some([127, 0, 0, 1, 0, n]),
            v6: None,
            alias6: None,
            seeder,
            complete: seeder,
            event,
            want: 50,
            want_v4: true,
            want_v6: false,
        }
    }

    /// A table with the random generator and selection buffer a worker passes it.
    struct Fixture<const I: usize, const O: usize = 0> {
        table: Table<I, O>,
        rng: fastrand::Rng,
        sel: Selection,
    }

    impl<const I: usize, const O: usize> Fixture<I, O> {
        fn new(table: Table<I, O>, with_ids: bool) -> Self {
            Self {
                table,
                rng: fastrand::Rng::with_seed(1),
                sel: Selection {
                    with_ids,
                    ..Default::default()
                },
            }
        }

        /// Peer `n` announces torrent [1; 20] at second `now`; the swarm's counts.
        fn peer(&mut self, n: u8, seeder: bool, event: Event, now: u16) -> Counts {
            self.table
                .announce(
                    &announce(n, seeder, event),
                    now,
                    &mut self.rng,
                    &mut self.sel,
                )
                .unwrap()
                .0
        }
    }

    #[test]
    fn completed_counts_once_and_totals_follow() {
        let mut f = Fixture::new(table::<20>(4, 0), true);
        f.peer(1, true, Event::Started, 0);
        f.peer(2, false, Event::Started, 0);
        f.sel.clear();
        let c = f.peer(2, true, Event::Completed, 1);
        assert_eq!(
            c,
            Counts {
                seeders: 2,
                leechers: 0,
                completed: 1
            }
        );
        // A seeder is sent no seeders.
        assert!(f.sel.v4.is_empty());
        // A repeated completed event from a seeder does not count again.
        let c = f.peer(2, true, Event::Completed, 2);
        assert_eq!(c.completed, 1);
        let t = f.table.totals();
        assert_eq!((t.torrents, t.peers, t.seeders), (1, 2, 2));
        f.peer(1, true, Event::Stopped, 3);
        f.peer(2, true, Event::Stopped, 3);
        // The empty torrent is freed; its completed count is kept and still scraped.
        let t = f.table.totals();
        assert_eq!((t.torrents, t.peers, t.seeders, t.idle), (0, 0, 0, 1));
        assert_eq!(f.table.scrape(&[1; 20]).completed, 1);
        // A peer coming back finds the count where it was.
        let c = f.peer(3, false, Event::Started, 4);
        assert_eq!((c.completed, f.table.totals().idle), (1, 0));
    }

    #[test]
    fn announces_say_when_they_snatch_and_restored_counts_continue() {
        let mut f = Fixture::new(table::<0>(2, 0), false);
        f.table.add_completed(&[1; 20], 41);
        assert_eq!(f.table.totals().idle, 1);
        assert_eq!(f.table.scrape(&[1; 20]).completed, 41);
        let mut a = announce(1, false, Event::Started);
        let (c, snatched) = f.table.announce(&a, 0, &mut f.rng, &mut f.sel).unwrap();
        assert_eq!((c.completed, snatched), (41, false));
        a.seeder = true;
        a.complete = true;
        a.event = Event::Completed;
        let (c, snatched) = f.table.announce(&a, 1, &mut f.rng, &mut f.sel).unwrap();
        assert_eq!((c.completed, snatched), (42, true));
        let (_, again) = f.table.announce(&a, 2, &mut f.rng, &mut f.sel).unwrap();
        assert!(!again);
        // Sweeping frees peers, not the record of downloads.
        for i in 0..f.table.shards() {
            f.table.sweep(i, 5000, 100);
        }
        assert_eq!(f.table.scrape(&[1; 20]).completed, 42);
    }

    /// The database's count, read once it answers after a start without it, adds to what
    /// this run counted, on a live torrent and on an idle one, saturating.
    #[test]
    fn stored_counts_add_to_this_runs() {
        let mut f = Fixture::new(table::<0>(2, 0), false);
        let mut a = announce(1, false, Event::Started);
        f.table.announce(&a, 0, &mut f.rng, &mut f.sel).unwrap();
        a.complete = true;
        a.event = Event::Completed;
        let (c, _) = f.table.announce(&a, 1, &mut f.rng, &mut f.sel).unwrap();
        assert_eq!(c.completed, 1);
        f.table.add_completed(&[1; 20], 100);
        assert_eq!(f.table.scrape(&[1; 20]).completed, 101);
        f.table.add_completed(&[7; 20], 2);
        f.table.add_completed(&[7; 20], 3);
        assert_eq!(f.table.scrape(&[7; 20]).completed, 5);
        f.table.add_completed(&[1; 20], u32::MAX);
        assert_eq!(f.table.scrape(&[1; 20]).completed, u32::MAX);
    }

    #[test]
    fn a_leecher_stopping_complete_is_a_snatch() {
        let mut f = Fixture::new(table::<0>(1, 0), false);
        f.peer(1, true, Event::Started, 0);
        f.peer(2, false, Event::Started, 0);
        let c = f.peer(2, true, Event::Stopped, 1);
        assert_eq!(
            c,
            Counts {
                seeders: 1,
                leechers: 0,
                completed: 1
            }
        );
        // A seeder restarting (new to the tracker, left=0, started) is no new snatch.
        let c = f.peer(3, true, Event::Started, 2);
        assert_eq!(c.completed, 1);
        // Nor is a peer the swarm never knew as a leecher announcing completed.
        let c = f.peer(4, true, Event::Completed, 2);
        assert_eq!(c.completed, 1);
    }

    /// Regression: alternating completed/stopped from one address raised a torrent's
    /// `downloaded` by one per pair (100,000 in 0.9 s).
    #[test]
    fn replayed_completions_count_nothing() {
        let mut f = Fixture::new(table::<0>(1, 0), false);
        f.peer(1, false, Event::Started, 0);
        f.peer(1, true, Event::Completed, 1);
        for i in 0..1000 {
            f.peer(1, true, Event::Completed, 2 + i);
            f.peer(1, true, Event::Stopped, 2 + i);
        }
        assert_eq!(f.table.scrape(&[1; 20]).completed, 1);
    }

    /// Regression: 2M made-up torrents from 127.0.0.1 filled `max_torrents`, and every other
    /// address got `tracker is full` for a new torrent. An address now holds at most its share
    /// of torrents alone: past it only its own new torrents are refused; a torrent another
    /// client joins, or one it leaves, is no longer its; and the sweep gives back what expired.
    #[test]
    fn one_address_cannot_fill_the_table_for_others() {
        let caps = Caps {
            max_torrents: 100,
            max_torrents_per_address: 10,
            max_torrents_per_48: 20,
            ..Caps::LARGE
        };
        let mut f = Fixture::new(Table::<0>::new(4, caps), false);
        let new = |f: &mut Fixture<0>, hash: u8, ip: [u8; 4], port: u8, now: u16| {
            let mut a = announce(port, false, Event::Started);
            a.info_hash = [hash; 20];
            a.v4 = Some([ip[0], ip[1], ip[2], ip[3], 0, port]);
            f.table
                .announce(&a, now, &mut f.rng, &mut f.sel)
                .map(|_| ())
        };
        let flood = [127, 0, 0, 1];
        for h in 0..10 {
            assert_eq!(new(&mut f, h, flood, 1, 0), Ok(()));
        }
        let e = new(&mut f, 10, flood, 2, 0).unwrap_err();
        assert!(e.starts_with("too many torrents from your address"), "{e}");
        assert_eq!(f.table.cap_hits().owned.get(), 1);
        // Another address is served, and may join the flood's torrents.
        assert_eq!(new(&mut f, 50, [192, 0, 2, 7], 1, 0), Ok(()));
        assert_eq!(new(&mut f, 0, [192, 0, 2, 7], 1, 0), Ok(()));
        // That torrent is no longer the flood's alone: it may make one more.
        assert_eq!(new(&mut f, 11, flood, 1, 0), Ok(()));
        assert!(new(&mut f, 12, flood, 1, 0).is_err());
        // Its peers expire: the sweep gives its share back.
        for i in 0..f.table.shards() {
            f.table.sweep(i, 500, 100);
        }
        assert_eq!(new(&mut f, 12, flood, 1, 500), Ok(()));
    }

    /// One address joining every torrent with made-up ports (64 per torrent, each a new
    /// peer) filled `max_peers`, after which no one else's new peer was added anywhere. An
    /// address now has at most its share of peers in all torrents together (an IPv6 /48 its
    /// own): past it, only its own new peers are refused; another address is served; and its
    /// count follows every way a peer leaves (stopped, expired, evicted with its torrent) and
    /// comes back (a snapshot).
    #[test]
    fn one_address_cannot_fill_max_peers_for_others() {
        let caps = Caps {
            max_peers: 100,
            max_peers_per_address: 30,
            max_peers_per_48: 40,
            ..Caps::LARGE
        };
        let mut f = Fixture::new(Table::<0>::new(4, caps), false);
        let join = |f: &mut Fixture<0>, hash: u8, addr: &[u8], port: u8, now: u16| {
            let mut a = announce(port, false, Event::Started);
            a.info_hash = [hash; 20];
            match addr.len() {
                4 => a.v4 = Some([addr[0], addr[1], addr[2], addr[3], 0, port]),
                _ => {
                    let mut v6 = [0u8; 18];
                    v6[..16].copy_from_slice(addr);
                    v6[17] = port;
                    a.v4 = None;
                    a.v6 = Some(v6);
                }
            }
            f.table
                .announce(&a, now, &mut f.rng, &mut f.sel)
                .map(|_| ())
        };
        let flood = [127, 0, 0, 1];
        // Three ports in each of ten torrents.
        for hash in 0..10 {
            for port in 1..=3 {
                assert_eq!(join(&mut f, hash, &flood, port, 0), Ok(()));
            }
        }
        let e = join(&mut f, 11, &flood, 1, 0).unwrap_err();
        assert_eq!(e, "too many peers from your address in all torrents");
        assert_eq!(f.table.cap_hits().spread.get(), 1);
        // Its known peers still re-announce; another address is served.
        assert_eq!(join(&mut f, 0, &flood, 1, 5), Ok(()));
        assert_eq!(join(&mut f, 11, &[192, 0, 2, 7], 1, 0), Ok(()));
        // Leaving gives back its share.
        let mut a = announce(1, false, Event::Stopped);
        a.info_hash = [3; 20];
        f.table.announce(&a, 0, &mut f.rng, &mut f.sel).unwrap();
        assert_eq!(join(&mut f, 12, &flood, 1, 0), Ok(()));
        assert!(join(&mut f, 13, &flood, 1, 0).is_err());
        // Forty peers from many /64s of one /48 spend the /48's budget.
        let mut net = [0x20, 1, 0x0d, 0xb8, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        for i in 0..40u8 {
            net[7] = i;
            assert_eq!(join(&mut f, 20 + i % 5, &net, 1, 0), Ok(()));
        }
        net[7] = 200;
        let e = join(&mut f, 20, &net, 1, 0).unwrap_err();
        assert!(e.starts_with("too many peers from your address"), "{e}");
        net[5] = 10;
        assert_eq!(join(&mut f, 20, &net, 1, 0), Ok(()), "another /48");
        // Every peer is counted once (IPv6 twice: its /64 and its /48), whatever happened.
        let v6_peers = 41;
        let counted = |f: &Fixture<0>| f.table.spread.total() - v6_peers;
        assert_eq!(counted(&f), f.table.totals().peers as i64);
        // A snapshot restores the counts with the peers.
        let mut body = Vec::new();
        f.table.save(10, &mut body);
        let copy = Table::<0>::new(4, caps);
        copy.load(&body, 0, true, 10, 0, 100).unwrap();
        assert_eq!(copy.spread.total(), f.table.spread.total());
        assert_eq!(copy.spread.peers(owners::key(&[127, 0, 0, 1, 0, 0])), 30);
        // The flood's peers expire (the one it re-announced at 5 stays until later).
        for i in 0..f.table.shards() {
            f.table.sweep(i, 104, 100);
        }
        assert_eq!(f.table.spread.peers(owners::key(&[127, 0, 0, 1, 0, 0])), 1);
        for i in 0..f.table.shards() {
            f.table.sweep(i, 500, 100);
        }
        assert_eq!(f.table.spread.total(), 0);
        assert_eq!(f.table.totals().peers, 0);
    }

    /// A full table makes room for another address's new torrent by dropping one of the
    /// torrents held alone by the address holding the most; that address itself is refused.
    #[test]
    fn a_full_table_drops_the_heaviest_addresss_lone_torrents_first() {
        let caps = Caps {
            max_torrents: 20,
            max_torrents_per_address: 15,
            ..Caps::LARGE
        };
        let mut f = Fixture::new(Table::<0>::new(4, caps), false);
        let new = |f: &mut Fixture<0>, hash: u8, ip: [u8; 4]| {
            let mut a = announce(1, false, Event::Started);
            a.info_hash = [hash; 20];
            a.v4 = Some([ip[0], ip[1], ip[2], ip[3], 0, 1]);
            f.table.announce(&a, 0, &mut f.rng, &mut f.sel).map(|_| ())
        };
        let (heavy, light, late) = ([10, 0, 0, 1], [10, 0, 0, 2], [10, 0, 0, 3]);
        for h in 0..15 {
            new(&mut f, h, heavy).unwrap();
        }
        for h in 100..105 {
            new(&mut f, h, light).unwrap();
        }
        assert_eq!(f.table.totals().torrents, 20);
        // Another address gets in: one of the heavy address's torrents made room.
        assert_eq!(new(&mut f, 200, late), Ok(()));
        assert_eq!(f.table.totals().torrents, 20);
        assert_eq!(f.table.cap_hits().evicted.get(), 1);
        assert_eq!(f.table.owners.held(owners::key(&[10, 0, 0, 1, 0, 1])), 14);
        // The heavy address itself is refused: the table is full.
        let e = new(&mut f, 16, heavy).unwrap_err();
        assert!(e.starts_with("tracker is full"), "{e}");
        // The light one's new torrent evicts again (it holds fewer than the heaviest).
        assert_eq!(new(&mut f, 106, light), Ok(()));
        assert_eq!(f.table.cap_hits().evicted.get(), 2);
        // Evicted peers left their address's count.
        assert_eq!(f.table.spread.peers(owners::key(&[10, 0, 0, 1, 0, 1])), 13);
        assert_eq!(f.table.spread.total(), 20);
    }

    /// Regression: one peer flipping `left` between 1 and 0 added a completion per pair
    /// (6-7k a second per connection), and so did changing its peer id between flips. Now
    /// the client counts once while it keeps completing within the peer timeout; another
    /// client still counts, and the same client again once the sweep forgot its completion.
    #[test]
    fn a_client_flipping_left_completes_once() {
        let mut f = Fixture::new(table::<20>(1, 0), false);
        f.peer(1, false, Event::Started, 0);
        for i in 0..1000u16 {
            let mut a = announce(1, true, Event::None);
            a.peer_id = [(i % 200) as u8; 20];
            f.table
                .announce(&a, 1 + i / 100, &mut f.rng, &mut f.sel)
                .unwrap();
            f.peer(1, false, Event::None, 1 + i / 100);
        }
        assert_eq!(f.table.scrape(&[1; 20]).completed, 1);
        assert_eq!(f.table.cap_hits().snatch_repeats.get(), 999);
        // Another client on another port completes: counted.
        f.peer(2, false, Event::Started, 20);
        f.peer(2, true, Event::Completed, 21);
        assert_eq!(f.table.scrape(&[1; 20]).completed, 2);
        // Past the peer timeout since its last completion, the sweep forgets it.
        f.peer(1, false, Event::None, 100);
        f.table.sweep(0, 150, 100);
        f.peer(1, false, Event::None, 150);
        f.peer(1, true, Event::None, 151);
        assert_eq!(f.table.scrape(&[1; 20]).completed, 3);
    }

    /// Regression: 300k peers in one torrent from one address; a new torrent per random
    /// hash forever.
    #[test]
    fn caps_hold_and_are_counted() {
        let caps = Caps {
            max_torrents: 3,
            max_peers: 10,
            max_peers_per_torrent: 6,
            max_peers_per_ip: 4,
            max_idle_torrents: 2,
            ..Caps::LARGE
        };
        let mut f = Fixture::new(Table::<0>::new(1, caps), false);
        let from = |f: &mut Fixture<0>, hash: u8, ip: u8, port: u8| {
            let mut a = announce(port, false, Event::Started);
            a.info_hash = [hash; 20];
            a.v4 = Some([10, 0, 0, ip, 0, port]);
            f.sel.clear();
            f.table.announce(&a, 0, &mut f.rng, &mut f.sel)
        };
        // One address: 4 peers in a torrent, then a failure reason.
        for port in 0..4 {
            assert!(from(&mut f, 1, 1, port).is_ok());
        }
        assert!(from(&mut f, 1, 1, 9).unwrap_err().contains("your address"));
        // Others fill the torrent to 6; the 7th gets peers but is not added.
        from(&mut f, 1, 2, 0).unwrap();
        from(&mut f, 1, 3, 0).unwrap();
        let (c, _) = from(&mut f, 1, 4, 0).unwrap();
        assert_eq!(c.leechers, 6);
        assert_eq!(f.sel.v4.len(), 6 * 6);
        // The table holds 10 peers at most.
        for ip in 0..4 {
            from(&mut f, 2, ip, 0).unwrap();
        }
        let (c, _) = from(&mut f, 2, 9, 0).unwrap();
        assert_eq!((c.leechers, f.table.totals().peers), (4, 10));
        // A new torrent whose first peer does not fit is not kept.
        from(&mut f, 4, 1, 0).unwrap();
        assert_eq!(f.table.totals().torrents, 2);
        let h = f.table.cap_hits();
        assert_eq!(h.address.get(), 1);
        assert_eq!(h.swarm.get(), 1);
        assert_eq!(h.peers.get(), 2);
        // Idle counts: at most 2 kept, the rest dropped and counted.
        for n in 10..15u8 {
            f.table.add_completed(&[n; 20], 5);
        }
        assert_eq!(f.table.totals().idle, 2);
        assert_eq!(h.idle_evicted.get(), 3);
        // Torrents: at most 3 with peers; the next new one gets a failure reason.
        let mut g = Fixture::new(table::<0>(1, 3), false);
        for hash in 0..3 {
            let mut a = announce(1, false, Event::Started);
            a.info_hash = [hash; 20];
            g.table.announce(&a, 0, &mut g.rng, &mut g.sel).unwrap();
        }
        let mut a = announce(1, false, Event::Started);
        a.info_hash = [3; 20];
        let e = g.table.announce(&a, 0, &mut g.rng, &mut g.sel).unwrap_err();
        assert!(e.contains("full"), "{e}");
        assert_eq!(g.table.cap_hits().torrents.get(), 1);
    }

    /// A dual-stack announce (an IPv4 client giving `ipv6=`) is one peer: counted once, and
    /// its IPv6 address is handed to IPv6 peers.
    #[test]
    fn an_ipv6_address_given_by_an_ipv4_peer_is_not_another_peer() {
        let mut f = Fixture::new(table::<0>(1, 0), false);
        let mut dual = announce(1, true, Event::Started);
        dual.alias6 = Some([0x2a; 18]);
        let (c, _) = f.table.announce(&dual, 0, &mut f.rng, &mut f.sel).unwrap();
        assert_eq!((c.seeders, c.leechers), (1, 0));
        let mut six = announce(2, false, Event::Started);
        six.v4 = None;
        six.v6 = Some([0x20; 18]);
        six.want_v4 = false;
        six.want_v6 = true;
        f.sel.clear();
        let (c, _) = f.table.announce(&six, 0, &mut f.rng, &mut f.sel).unwrap();
        assert_eq!((c.seeders, c.leechers), (1, 1));
        assert_eq!(f.sel.v6, vec![0x2a; 18]);
        // Stopping removes both.
        dual.event = Event::Stopped;
        f.table.announce(&dual, 1, &mut f.rng, &mut f.sel).unwrap();
        f.sel.clear();
        f.table.announce(&six, 1, &mut f.rng, &mut f.sel).unwrap();
        assert!(f.sel.v6.is_empty());
    }

    /// Regression: loading searched a torrent's peers linearly (quadratic: 400k peers in one
    /// torrent took 52 s); the index is now built as the set grows, so duplicates in a
    /// snapshot are still found and the index stays right.
    #[test]
    fn a_large_swarm_loads_with_its_index_and_without_duplicates() {
        let mut f = Fixture::new(table::<0>(1, 0), false);
        for n in 0..200u8 {
            let mut a = announce(n, n % 3 == 0, Event::Started);
            a.v4 = Some([10, 1, n, 1, 0, 1]);
            f.table.announce(&a, 0, &mut f.rng, &mut f.sel).unwrap();
        }
        let mut body = Vec::new();
        f.table.save(0, &mut body);
        // The same torrent twice in one body: the second copy adds nobody.
        let twice = [body.clone(), body].concat();
        let g = Fixture::new(table::<0>(1, 0), false);
        assert_eq!(g.table.load(&twice, 0, true, 0, 0, 100), Ok((2, 200)));
        let t = g.table.totals();
        assert_eq!((t.torrents, t.peers), (1, 200));
    }

    /// Found by the snapshot fuzz target: a body cut short inside a torrent left the peers
    /// read before the cut in the swarm but out of the table's counts (and the torrent out of
    /// `max_torrents`), so totals, caps and later sweeps went wrong; and a torrent's own new
    /// peers did not count against `max_peers` until it was read whole.
    #[test]
    fn a_body_cut_inside_a_torrent_counts_what_it_loaded_and_max_peers_holds_within_one() {
        let mut f = Fixture::new(table::<0>(1, 0), false);
        for n in 0..10u8 {
            f.peer(n, n < 4, Event::Started, 0);
        }
        let mut body = Vec::new();
        f.table.save(0, &mut body);
        let cut = &body[..body.len() - 4];
        let g = Fixture::new(table::<0>(1, 0), false);
        assert!(g.table.load(cut, 0, true, 0, 0, 100).is_err());
        let t = g.table.totals();
        let c = g.table.scrape(&[1; 20]);
        assert_eq!((t.torrents, t.peers, t.seeders), (1, 9, 4));
        assert_eq!((c.seeders, c.leechers), (4, 5));
        let mut saved = Vec::new();
        assert_eq!(g.table.save(0, &mut saved), (1, 9));

        let small = Table::<0>::new(
            1,
            Caps {
                max_peers: 6,
                ..Caps::LARGE
            },
        );
        assert_eq!(small.load(&body, 0, true, 0, 0, 100), Ok((1, 6)));
        assert_eq!(small.totals().peers, 6);
    }

    #[test]
    fn leecher_gets_peers_with_ids() {
        let mut f = Fixture::new(table::<20>(1, 0), true);
        f.peer(1, true, Event::None, 0);
        f.sel.clear();
        f.peer(2, false, Event::None, 0);
        assert_eq!(f.sel.v4, vec![127, 0, 0, 1, 0, 1]);
        assert_eq!(f.sel.ids, vec![[1; 20]]);
    }

    #[test]
    fn swarms_saved_and_loaded_keep_peers_roles_and_remaining_lifetimes() {
        let mut f = Fixture::new(table::<20>(4, 0), true);
        f.peer(1, true, Event::Started, 100);
        f.peer(2, false, Event::Started, 150);
        let mut six = announce(3, false, Event::Started);
        six.v4 = None;
        six.v6 = Some([7; 18]);
        f.table.announce(&six, 190, &mut f.rng, &mut f.sel).unwrap();
        let mut body = Vec::new();
        assert_eq!(f.table.save(200, &mut body), (1, 3));

        // Loaded 30 s later into a new table whose clock reads 5: ages are 130, 80 and 40.
        let mut g = Fixture::new(table::<20>(4, 0), true);
        assert_eq!(g.table.load(&body, 20, true, 5, 30, 1000), Ok((1, 3)));
        let c = g.table.scrape(&[1; 20]);
        assert_eq!((c.seeders, c.leechers), (1, 2));
        let t = g.table.totals();
        assert_eq!((t.torrents, t.peers, t.seeders), (1, 3, 1));
        g.sel.clear();
        g.peer(9, false, Event::Started, 5);
        // A new IPv4 leecher is sent the IPv4 seeder and leecher, with their ids.
        g.sel.ids.sort_unstable();
        assert_eq!(g.sel.ids, vec![[1; 20], [2; 20]]);
        // Each peer keeps what was left of its lifetime: at a timeout of 100 s the seeder
        // (130 s old) is gone on load, the others go when their time is up.
        let h = Fixture::new(table::<0>(4, 0), false);
        assert_eq!(h.table.load(&body, 20, true, 5, 30, 100), Ok((1, 2)));
        for i in 0..h.table.shards() {
            h.table.sweep(i, 5 + 30, 100);
        }
        assert_eq!(h.table.totals().peers, 1);
        // Damage is reported, not loaded as garbage.
        assert!(h
            .table
            .load(&body[..body.len() - 3], 20, true, 5, 0, 100)
            .is_err());
        assert!(h.table.load(&body, 7, true, 5, 0, 100).is_err());
    }

    #[test]
    fn caps_and_sweeps() {
        let mut f = Fixture::new(table::<0>(2, 1), false);
        f.peer(1, false, Event::None, 0);
        let mut other = announce(1, false, Event::None);
        other.info_hash = [2; 20];
        assert!(f.table.announce(&other, 0, &mut f.rng, &mut f.sel).is_err());
        let mut freed = 0;
        for i in 0..f.table.shards() {
            freed += f.table.sweep(i, 500, 100).1;
        }
        assert_eq!(freed, 1);
        assert!(f
            .table
            .announce(&other, 500, &mut f.rng, &mut f.sel)
            .is_ok());
    }

    fn delta(n: u8, at: u32) -> Delta {
        Delta::v4([1; 20], [127, 0, 0, 2, 0, n], at)
    }

    #[test]
    fn merge_keeps_the_newest_and_tombstones_remove() {
        let t = Table::<0, 1>::new(2, Caps::LARGE).with_origin(1);
        assert_eq!(t.merge(&delta(1, 0), 2, 100, 100), Merged::Added);
        // An older delta (seen at 90) changes nothing; a newer one updates.
        let seeder = Delta {
            seeder: true,
            ..delta(1, 0)
        };
        assert_eq!(t.merge(&seeder, 2, 90, 100), Merged::Stale);
        assert_eq!(t.scrape(&[1; 20]).seeders, 0);
        assert_eq!(t.merge(&seeder, 2, 100, 100), Merged::Updated);
        assert_eq!(t.scrape(&[1; 20]).seeders, 1);
        // The leecher's delta of the same second, late: the seeder stays.
        assert_eq!(t.merge(&delta(1, 0), 2, 100, 100), Merged::Stale);
        assert_eq!(t.scrape(&[1; 20]).seeders, 1);
        // A tombstone older than the record is stale; a newer one removes it.
        let gone = Delta {
            stopped: true,
            ..delta(1, 0)
        };
        assert_eq!(t.merge(&gone, 2, 99, 101), Merged::Stale);
        assert_eq!(t.merge(&gone, 2, 101, 101), Merged::Removed);
        assert_eq!(t.totals().torrents, 0);
        assert_eq!(t.merge(&gone, 2, 101, 101), Merged::Stale);
        // A snatch counts whatever the record, and the count stays when the swarm is freed.
        let snatch = Delta {
            stopped: true,
            snatched: true,
            ..delta(1, 0)
        };
        t.merge(&snatch, 3, 101, 101);
        assert_eq!(t.scrape(&[1; 20]).completed, 1);
    }

    #[test]
    fn merged_peers_are_handed_out_counted_and_tallied_by_origin() {
        let t = Table::<0, 1>::new(1, Caps::LARGE).with_origin(1);
        for n in 1..=3 {
            t.merge(&delta(n, 0), 2, 10, 10);
        }
        t.merge(&delta(9, 0), 3, 10, 10);
        let mut f = Fixture::new(t, false);
        let (c, _) = f
            .table
            .announce(
                &announce(200, false, Event::Started),
                10,
                &mut f.rng,
                &mut f.sel,
            )
            .unwrap();
        assert_eq!(c.leechers, 5);
        assert_eq!(f.sel.v4.len(), 4 * 6);
        f.table.sweep(0, 10, 100);
        assert_eq!(f.table.peers_by_origin(), vec![(1, 1), (2, 3), (3, 1)]);
        // Remote peers expire on the normal timeout, as local ones do.
        f.table.sweep(0, 200, 100);
        assert_eq!(f.table.totals().peers, 0);
    }

    #[test]
    fn merge_holds_the_caps() {
        let caps = Caps {
            max_peers: 2,
            max_torrents: 1,
            ..Caps::LARGE
        };
        let t = Table::<0, 1>::new(1, caps);
        assert_eq!(t.merge(&delta(1, 0), 2, 0, 0), Merged::Added);
        assert_eq!(t.merge(&delta(2, 0), 2, 0, 0), Merged::Added);
        assert_eq!(t.merge(&delta(3, 0), 2, 0, 0), Merged::Full);
        let other = Delta::v4([2; 20], [127, 0, 0, 2, 0, 4], 0);
        assert_eq!(t.merge(&other, 2, 0, 0), Merged::Full);
        assert_eq!(t.totals().peers, 2);
    }

    #[test]
    fn export_gives_one_nodes_peers_as_they_were_last_seen() {
        let t = Table::<20, 1>::new(2, Caps::LARGE).with_origin(1);
        let mut f = Fixture::new(t, true);
        f.table
            .announce(
                &announce(7, true, Event::Started),
                95,
                &mut f.rng,
                &mut f.sel,
            )
            .unwrap();
        let mut remote = Delta::v6([1; 20], [0x20; 18], 0);
        remote.peer_id = Some([9; 20]);
        f.table.merge(&remote, 2, 90, 100);
        let mut got = Vec::new();
        f.table.export(1, 100, 10_000, &mut |d| got.push(*d));
        assert_eq!(got.len(), 1);
        let d = got[0];
        assert_eq!(
            (d.address(), d.seeder, d.at),
            (&[127, 0, 0, 1, 0, 7][..], true, 9_995)
        );
        assert_eq!(d.peer_id, Some([7; 20]));
        got.clear();
        f.table.export(2, 100, 10_000, &mut |d| got.push(*d));
        assert_eq!(
            got,
            [Delta {
                at: 9_990,
                ..remote
            }]
        );
    }

    #[test]
    fn raised_completed_counts_only_grow() {
        let t = Table::<0, 1>::new(1, Caps::LARGE);
        t.merge(&delta(1, 0), 2, 0, 0);
        t.add_completed(&[1; 20], 5);
        t.raise_completed(&[1; 20], 3);
        assert_eq!(t.scrape(&[1; 20]).completed, 5);
        t.raise_completed(&[1; 20], 7);
        assert_eq!(t.scrape(&[1; 20]).completed, 7);
        // A torrent without peers keeps the larger count too.
        t.raise_completed(&[2; 20], 4);
        t.raise_completed(&[2; 20], 2);
        assert_eq!(t.scrape(&[2; 20]).completed, 4);
    }
}
