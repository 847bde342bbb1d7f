//! The ledger: what each peer of each user on each torrent last reported (its `uploaded` and
//! `downloaded` counters), so an announce is credited only with what it adds.
//!
//! A peer is found by (torrent id, user id, keyed hash of its peer id): a client that
//! changes address keeps its counters; another client, or the same one restarted with a new
//! peer id, is a new peer. A new peer credits nothing (its counters may hold traffic counted
//! elsewhere or made up), nor does one whose counters went down (a restarted client); only a
//! known peer whose counters grew credits the difference, and at most what a fast line moves
//! in the seconds since its last announce ([`CreditBound`]): a client that claims more, or
//! plays its counters down and up again, is credited no more than that, and what is cut is
//! reported with the delta. The peers a user may have on one
//! torrent are capped, as UNIT3D does (`private.max_peers_per_user_torrent`).
//!
//! With leech slots on (`private.leech_slots`, `private.ratio_tiers`) it also counts, per
//! user, the torrents on which they run a downloading peer: a peer that would start one more
//! past the user's slots is refused, and a slot is freed when the torrent's last downloading
//! peer of the user completes, stops or times out.
//!
//! At a graceful stop the ledger is saved ([`Ledger::save`]) and at the next start loaded
//! ([`parse_ledger`], [`Ledger::load`]), so a restart credits each client's traffic since its
//! last announce before it, instead of nothing. Peer ids are kept only as a keyed hash; the key
//! is random and travels with the file.
//!
//! Owns: [`Ledger`] and its file format. Must not: do I/O.

use std::hash::Hasher;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use hashbrown::HashMap;
use parking_lot::Mutex;

use hotpath_wire::query::Id20;

use crate::dense::Dense;

/// Shards of the ledger (a power of two).
pub const SHARDS: usize = 64;

/// What a peer last reported, and where it is: 28 bytes, stored densely (with the 4-byte
/// position its shard's hash table keeps, ~36 bytes per peer at 10M).
///
/// A user's peers on one torrent share a hash (of the torrent and user ids), so finding them
/// all, to count them against the user's cap, is one probe sequence: no second map of counts
/// per user and torrent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Slot {
    torrent: u32,
    user: u32,
    /// The low 32 bits of the keyed hash of its peer id: it tells apart the few peers one
    /// user runs on one torrent.
    peer: u32,
    /// Process second of its last announce ([`AGE`] bits), the part of that second's credit
    /// it spent ([`SPENT`] bits, in [`CreditBound::unit`]s), and [`LEECHING`] set while it
    /// has something left to download.
    stamp: u32,
    /// The low 32 bits of its `uploaded` and `downloaded` counters ...
    lo: [u32; 2],
    /// ... and the next 16: counters are held to 48 bits ([`MAX_COUNTER`]).
    hi: [u16; 2],
}

/// The largest counter a peer is held at: 256 TiB in one client session (a larger report is
/// taken as this).
pub const MAX_COUNTER: u64 = (1 << 48) - 1;

impl Slot {
    /// Its `uploaded` and `downloaded` counters.
    fn counters(&self) -> (u64, u64) {
        let at = |i: usize| u64::from(self.hi[i]) << 32 | u64::from(self.lo[i]);
        (at(0), at(1))
    }

    /// Sets its counters (each at most [`MAX_COUNTER`]).
    fn set_counters(&mut self, uploaded: u64, downloaded: u64) {
        for (i, v) in [uploaded, downloaded].into_iter().enumerate() {
            let v = v.min(MAX_COUNTER);
            self.lo[i] = v as u32;
            self.hi[i] = (v >> 32) as u16;
        }
    }

    /// A peer's slot.
    fn new(torrent: u32, user: u32, peer: u32, stamp: u32, counters: (u64, u64)) -> Slot {
        let mut s = Slot {
            torrent,
            user,
            peer,
            stamp,
            lo: [0; 2],
            hi: [0; 2],
        };
        s.set_counters(counters.0, counters.1);
        s
    }

    fn leeching(&self) -> bool {
        self.stamp & LEECHING != 0
    }

    /// Units of its last announce's second's credit already spent.
    fn spent(&self) -> u32 {
        (self.stamp & SPENT) >> SPENT_SHIFT
    }

    /// Seconds from its last announce to process second `now`.
    fn age(&self, now: u32) -> u32 {
        now.wrapping_sub(self.stamp) & AGE
    }

    fn of(&self, torrent: u32, user: u32) -> bool {
        self.torrent == torrent && self.user == user
    }
}

/// The stamp of an announce at process second `now` that left `spent` units of that second's
/// credit spent.
fn stamp(now: u32, leeching: bool, spent: u32) -> u32 {
    (now & AGE) | (spent.min(MAX_SPENT) << SPENT_SHIFT) | if leeching { LEECHING } else { 0 }
}

type Shard = Dense<Slot>;

/// What one announce adds, raw (before a torrent's factors).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Delta {
    /// Bytes uploaded since the peer's last announce.
    pub uploaded: u64,
    /// Bytes downloaded since.
    pub downloaded: u64,
    /// Whether the peer was known (it had announced before and had not stopped).
    pub known: bool,
    /// Seconds since its last announce (0 for a new peer).
    pub since: u32,
    /// Bytes its counters claim uploaded past [`CreditBound`], not credited.
    pub cut_uploaded: u64,
    /// Bytes they claim downloaded past it.
    pub cut_downloaded: u64,
}

impl Delta {
    /// Whether its counters claimed more than the bound lets an announce credit.
    pub fn cut(&self) -> bool {
        self.cut_uploaded > 0 || self.cut_downloaded > 0
    }
}

/// The most a client is credited each way: `rate` bytes for each second it was seen, at most
/// `per_announce` in one announce (`private.max_rate_bytes_per_sec`,
/// `private.max_credit_per_announce_bytes`). Seconds are whole process seconds: an announce
/// may credit `rate` for each second since the client's last announce and what is left of the
/// last announce's own second (several announces in one second share that second's `rate`).
/// So however often a client announces and however its counters jump (down and up again),
/// it is credited at most `rate` times the seconds from its first announce to its last, plus
/// one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreditBound {
    /// Bytes a second.
    pub rate: u64,
    /// Bytes an announce.
    pub per_announce: u64,
}

impl Default for CreditBound {
    /// The config's defaults: 10 Gbit/s, 4 TiB an announce.
    fn default() -> CreditBound {
        CreditBound {
            rate: 1_250_000_000,
            per_announce: 4 << 40,
        }
    }
}

impl CreditBound {
    /// The slice of a second's credit that a slot counts in (it keeps [`MAX_SPENT`] of them
    /// per second, rounded up: a spent part is never counted short).
    pub fn unit(&self) -> u64 {
        self.rate.div_ceil(u64::from(MAX_SPENT)).max(1)
    }

    /// The most an announce `since` seconds after the client's last credits each way, when
    /// `spent` units of the last announce's second were spent already.
    pub fn most(&self, since: u32, spent: u32) -> u64 {
        let left = self
            .rate
            .saturating_sub(u64::from(spent).saturating_mul(self.unit()));
        left.saturating_add(self.rate.saturating_mul(u64::from(since)))
            .min(self.per_announce)
    }

    /// Units of this second's credit spent once an announce whose allowance was `most`
    /// credited `used`: what it left, up to a second's worth, is this second's.
    fn spent_after(&self, most: u64, used: u64) -> u32 {
        let spent = self.rate - (most - used).min(self.rate);
        spent.div_ceil(self.unit()).min(u64::from(MAX_SPENT)) as u32
    }
}

/// Why a new peer was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TooManyPeers {
    /// The user holds as many peers on the torrent as they may.
    User,
    /// The ledger holds as many peers as it may (`tracker.max_peers`).
    Ledger,
    /// The user downloads as many torrents as their leech slots allow.
    LeechSlots,
}

/// One announce, as the ledger sees it.
#[derive(Clone, Copy)]
pub struct Report<'a> {
    /// The torrent's id.
    pub torrent: u32,
    /// The user's id.
    pub user: u32,
    /// The client's peer id.
    pub peer_id: &'a Id20,
    /// Its `uploaded` counter.
    pub uploaded: u64,
    /// Its `downloaded` counter.
    pub downloaded: u64,
    /// It stops (the peer is forgotten after this).
    pub stopped: bool,
    /// It has something left to download.
    pub leeching: bool,
    /// How many of the user's clients may download one torrent at once (XBT's
    /// `peers_limit`; 0: no limit of their own), asked only for a new downloading client: one
    /// past it is refused.
    pub leech_limit: &'a dyn Fn(u32) -> u16,
    /// The user's leech slots (0: no limit), asked only when the announce would start one
    /// more torrent downloading.
    pub slots: &'a dyn Fn(u32) -> u16,
    /// Process second now.
    pub now: u32,
}

/// Torrents downloaded, by user id.
type UserShard = Mutex<HashMap<u32, u16>>;

/// Every peer's last report, sharded by torrent.
pub struct Ledger {
    shards: Box<[Mutex<Shard>]>,
    /// The SipHash key of peer ids: random, or the loaded file's.
    key: OnceLock<[u64; 2]>,
    /// Random seed of the hash of (torrent, user), so no one can line up a shard's probes.
    seed: u64,
    max_per_user: u16,
    /// The most an announce credits: bytes a second, bytes an announce (a reload may change
    /// them).
    bound: [std::sync::atomic::AtomicU64; 2],
    /// Torrents each user downloads, sharded by user id; `None` without leech slots.
    leeching: Option<Box<[UserShard]>>,
    /// Peers held, and the most it may hold.
    len: AtomicUsize,
    max: usize,
}

impl Ledger {
    /// An empty ledger of at most `max` peers, `max_per_user` per user per torrent; with
    /// `slots`, one that counts the torrents each user downloads.
    pub fn new(max_per_user: u16, max: usize, slots: bool) -> Ledger {
        Ledger {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            key: OnceLock::new(),
            seed: {
                let mut b = [0u8; 8];
                getrandom::fill(&mut b).expect("the OS's random numbers");
                u64::from_le_bytes(b)
            },
            max_per_user: max_per_user.max(1),
            bound: {
                let b = CreditBound::default();
                [b.rate.into(), b.per_announce.into()]
            },
            leeching: slots.then(|| (0..SHARDS).map(|_| Mutex::default()).collect()),
            len: AtomicUsize::new(0),
            max,
        }
    }

    /// This ledger, crediting at most `bound` an announce.
    pub fn bounded(self, bound: CreditBound) -> Ledger {
        self.set_bound(bound);
        self
    }

    /// Credits at most `bound` from the next announce on.
    pub fn set_bound(&self, bound: CreditBound) {
        self.bound[0].store(bound.rate, Ordering::Relaxed);
        self.bound[1].store(bound.per_announce, Ordering::Relaxed);
    }

    /// The bound in force.
    pub fn bound(&self) -> CreditBound {
        CreditBound {
            rate: self.bound[0].load(Ordering::Relaxed),
            per_announce: self.bound[1].load(Ordering::Relaxed),
        }
    }

    /// The hash a user's peers on a torrent share.
    fn pair_hash(&self, torrent: u32, user: u32) -> u64 {
        let mut x = (u64::from(torrent) << 32 | u64::from(user)) ^ self.seed;
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^ (x >> 31)
    }

    /// The keyed hash a peer id is kept as (its low 32 bits in memory, [`Slot::peer`]).
    fn peer_hash(&self, peer_id: &Id20) -> u64 {
        let [k0, k1] = *self.key.get_or_init(super::random_key);
        let mut h = siphasher::sip::SipHasher13::new_with_keys(k0, k1);
        h.write(peer_id);
        h.finish()
    }

    fn shard(&self, torrent: u32) -> &Mutex<Shard> {
        // Torrent ids are dense; a multiplicative hash spreads neighbours over the shards.
        let h = torrent.wrapping_mul(0x9e37_79b9) >> 26;
        &self.shards[h as usize & (SHARDS - 1)]
    }

    fn user_shard(&self, user: u32) -> Option<&UserShard> {
        let h = user.wrapping_mul(0x9e37_79b9) >> 26;
        Some(&self.leeching.as_ref()?[h as usize & (SHARDS - 1)])
    }

    /// Takes one of `user`'s leech slots (`slots`; 0: no limit), or says there is none.
    fn take_slot(&self, user: u32, slots: &dyn Fn(u32) -> u16) -> Result<(), TooManyPeers> {
        let Some(shard) = self.user_shard(user) else {
            return Ok(());
        };
        let limit = slots(user);
        let mut map = shard.lock();
        let n = map.entry(user).or_insert(0);
        if limit > 0 && *n >= limit {
            if *n == 0 {
                map.remove(&user);
            }
            return Err(TooManyPeers::LeechSlots);
        }
        *n = n.saturating_add(1);
        Ok(())
    }

    /// Gives back one of `user`'s leech slots.
    fn free_slot(&self, user: u32) {
        if let Some(shard) = self.user_shard(user) {
            let mut map = shard.lock();
            if let Some(n) = map.get_mut(&user) {
                *n -= 1;
                if *n == 0 {
                    map.remove(&user);
                }
            }
        }
    }

    /// Torrents `user` downloads now (0 without leech slots).
    pub fn leeching(&self, user: u32) -> u16 {
        self.user_shard(user)
            .and_then(|s| s.lock().get(&user).copied())
            .unwrap_or(0)
    }

    /// `user`'s peers heard from within `timeout` seconds of process second `now`:
    /// (downloading, seeding). A scan of every shard, one lock at a time, for an operator's
    /// rare question (Ocelot's user report), never on an announce's path.
    pub fn user_peers(&self, user: u32, now: u32, timeout: u32) -> (u32, u32) {
        let (mut leeching, mut seeding) = (0, 0);
        for shard in self.shards.iter() {
            for s in shard.lock().iter() {
                if s.user == user && s.age(now) <= timeout {
                    if s.leeching() {
                        leeching += 1;
                    } else {
                        seeding += 1;
                    }
                }
            }
        }
        (leeching, seeding)
    }

    /// Records an announce and returns what it adds; a new peer past the user's cap on this
    /// torrent, or one that would start a torrent downloading past the user's leech slots, is
    /// refused and changes nothing.
    pub fn report(&self, r: Report<'_>) -> Result<Delta, TooManyPeers> {
        let r = Report {
            uploaded: r.uploaded.min(MAX_COUNTER),
            downloaded: r.downloaded.min(MAX_COUNTER),
            ..r
        };
        let h = self.pair_hash(r.torrent, r.user);
        let peer = self.peer_hash(r.peer_id) as u32;
        let leeching = r.leeching && !r.stopped;
        let is = |s: &Slot| s.of(r.torrent, r.user) && s.peer == peer;
        let mut shard = self.shard(r.torrent).lock();
        let last = match shard.find_mut(h, is) {
            // The common case, a known peer announcing again as it did: one lookup.
            Some(last) if !r.stopped && last.leeching() == leeching => {
                let (d, spent) = delta(last, &r, &self.bound());
                last.set_counters(r.uploaded, r.downloaded);
                last.stamp = stamp(r.now, leeching, spent);
                return Ok(d);
            }
            Some(last) => Some(*last),
            None if r.stopped => return Ok(Delta::default()),
            None => None,
        };
        let (peers, downloading, _) = census(&shard, h, r.torrent, r.user, peer);
        if last.is_none() {
            if self.len.load(Ordering::Relaxed) >= self.max {
                return Err(TooManyPeers::Ledger);
            }
            if peers >= u32::from(self.max_per_user) {
                return Err(TooManyPeers::User);
            }
            if leeching {
                let limit = (r.leech_limit)(r.user);
                if limit > 0 && downloading >= u32::from(limit) {
                    return Err(TooManyPeers::User);
                }
            }
        }
        let was = last.is_some_and(|s| s.leeching());
        let after = downloading - u32::from(was) + u32::from(leeching);
        if downloading == 0 && after > 0 {
            self.take_slot(r.user, r.slots)?;
        }
        let (delta, spent) = match last {
            Some(last) => delta(&last, &r, &self.bound()),
            None => (Delta::default(), 0),
        };
        let now = Slot::new(
            r.torrent,
            r.user,
            peer,
            stamp(r.now, leeching, spent),
            (r.uploaded, r.downloaded),
        );
        match (last.is_some(), r.stopped) {
            (true, true) => {
                shard.remove(h, is, |s| self.pair_hash(s.torrent, s.user));
                self.len.fetch_sub(1, Ordering::Relaxed);
            }
            (true, false) => {
                if let Some(s) = shard.find_mut(h, is) {
                    *s = now;
                }
            }
            (false, _) => {
                shard.insert_unique(h, now, |s| self.pair_hash(s.torrent, s.user));
                self.len.fetch_add(1, Ordering::Relaxed);
            }
        }
        drop(shard);
        if downloading > 0 && after == 0 {
            self.free_slot(r.user);
        }
        Ok(delta)
    }

    /// Forgets the peers of shard `i` whose last announce is more than `timeout` seconds
    /// before `now`; returns how many.
    pub fn sweep(&self, i: usize, now: u32, timeout: u32) -> usize {
        let mut shard = self.shards[i % SHARDS].lock();
        let before = shard.len();
        // Users and torrents of the downloading peers forgotten.
        let mut stopped = Vec::new();
        shard.retain(
            |s| {
                let keep = s.age(now) <= timeout;
                if !keep && s.leeching() {
                    stopped.push((s.torrent, s.user));
                }
                keep
            },
            |s| self.pair_hash(s.torrent, s.user),
        );
        stopped.sort_unstable();
        stopped.dedup();
        // A slot is free where none of the user's peers on the torrent still downloads.
        let freed: Vec<u32> = stopped
            .into_iter()
            .filter(|&(t, u)| {
                let h = self.pair_hash(t, u);
                !shard.iter_hash(h).any(|s| s.of(t, u) && s.leeching())
            })
            .map(|(_, u)| u)
            .collect();
        if shard.capacity() > 4 * shard.len().max(64) {
            shard.shrink_to_fit(|s| self.pair_hash(s.torrent, s.user));
        }
        let gone = before - shard.len();
        drop(shard);
        for user in freed {
            self.free_slot(user);
        }
        self.len.fetch_sub(gone, Ordering::Relaxed);
        gone
    }

    /// Appends the ledger file's bytes to `out` (the caller adds the checksum): [`MAGIC`],
    /// the unix second of the save (i64 LE), the hash key (two u64 LE), then per peer its
    /// torrent id and user id (u32 LE), peer id hash, uploaded and downloaded (u64 LE), and
    /// seconds since its last announce at process second `now` (u32 LE: the low 24 bits; the
    /// next 7 the units of that announce's second's credit spent; the top bit set for a
    /// downloading peer). Returns the peers.
    pub fn save(&self, now: u32, saved_at: i64, out: &mut Vec<u8>) -> usize {
        let [k0, k1] = *self.key.get_or_init(|| [0, 0]);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&saved_at.to_le_bytes());
        out.extend_from_slice(&k0.to_le_bytes());
        out.extend_from_slice(&k1.to_le_bytes());
        let mut n = 0;
        for shard in self.shards.iter() {
            let shard = shard.lock();
            out.reserve(shard.len() * ENTRY);
            for s in shard.iter() {
                out.extend_from_slice(&s.torrent.to_le_bytes());
                out.extend_from_slice(&s.user.to_le_bytes());
                out.extend_from_slice(&u64::from(s.peer).to_le_bytes());
                let (up, down) = s.counters();
                out.extend_from_slice(&up.to_le_bytes());
                out.extend_from_slice(&down.to_le_bytes());
                let flag = if s.leeching() { LEECHING } else { 0 };
                let spent = s.stamp & SPENT;
                out.extend_from_slice(&(s.age(now) | spent | flag).to_le_bytes());
                n += 1;
            }
        }
        n
    }

    /// Loads a saved ledger (checked by [`parse_ledger`]) into this one, which must not have
    /// hashed a peer id yet: each peer aged by `downtime`, those past `timeout` seconds
    /// since their last announce left out, as are peers past the caps and repeats. Returns
    /// the peers loaded.
    pub fn load(
        &self,
        head: &LedgerHead<'_>,
        now: u32,
        downtime: u32,
        timeout: u32,
    ) -> Result<usize, &'static str> {
        if self.key.set(head.key).is_err() && self.key.get() != Some(&head.key) {
            return Err("the ledger is in use already");
        }
        let mut n = 0;
        for e in head.body.chunks_exact(ENTRY) {
            let u32_at = |i: usize| u32::from_le_bytes(e[i..i + 4].try_into().expect("4 bytes"));
            let u64_at = |i: usize| u64::from_le_bytes(e[i..i + 8].try_into().expect("8 bytes"));
            // Files of older versions hold 64 bits of the hash; memory keeps the low 32.
            let (torrent, user, peer) = (u32_at(0), u32_at(4), u64_at(8) as u32);
            let leeching = u32_at(32) & LEECHING != 0;
            let spent = (u32_at(32) & SPENT) >> SPENT_SHIFT;
            let age = (u32_at(32) & AGE).saturating_add(downtime);
            if age > timeout || self.len() >= self.max {
                continue;
            }
            let h = self.pair_hash(torrent, user);
            let mut shard = self.shard(torrent).lock();
            let (peers, downloading, repeat) = census(&shard, h, torrent, user, peer);
            if repeat || peers >= u32::from(self.max_per_user) {
                continue;
            }
            // A downloading peer keeps its user's slot, whatever the slots are now.
            if leeching && downloading == 0 {
                let _ = self.take_slot(user, &|_| 0);
            }
            let slot = Slot::new(
                torrent,
                user,
                peer,
                stamp(now.wrapping_sub(age), leeching, spent),
                (u64_at(16), u64_at(24)),
            );
            shard.insert_unique(h, slot, |s| self.pair_hash(s.torrent, s.user));
            self.len.fetch_add(1, Ordering::Relaxed);
            n += 1;
        }
        Ok(n)
    }

    /// The largest file [`Ledger::save`] can write for a ledger of this cap (a larger one
    /// is not ours, and is not read).
    pub fn max_file_bytes(&self) -> u64 {
        (HEAD + 4) as u64 + self.max as u64 * ENTRY as u64
    }

    /// Peers known.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// Whether it knows no peer.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The ledger file's first bytes.
pub const MAGIC: &[u8; 8] = b"HPLEDGR1";
/// The flag of a downloading peer, in a stamp and in the file.
const LEECHING: u32 = 1 << 31;
/// A stamp's bits of the process second (194 days: far past any peer timeout, as ages are
/// taken with wrapping arithmetic; the file keeps the age in them), ...
const AGE: u32 = 0x00ff_ffff;
/// ... and above them the units of that second's credit spent (see [`CreditBound`]).
const SPENT_SHIFT: u32 = 24;
const MAX_SPENT: u32 = 0x7f;
const SPENT: u32 = MAX_SPENT << SPENT_SHIFT;
/// Bytes of one saved peer.
const ENTRY: usize = 4 + 4 + 8 + 8 + 8 + 4;
/// Bytes before the peers: magic, save time, key.
const HEAD: usize = 8 + 8 + 16;

/// A ledger file's header, checked, and the peers that follow it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LedgerHead<'a> {
    /// Unix second of the save.
    pub saved_at: i64,
    /// The peer id hash key.
    pub key: [u64; 2],
    /// The saved peers, a whole number of entries.
    pub body: &'a [u8],
}

impl LedgerHead<'_> {
    /// Peers the file holds.
    pub fn peers(&self) -> usize {
        self.body.len() / ENTRY
    }
}

/// Checks a ledger file's magic, checksum (CRC-32 of the rest, u32 LE at the end) and length,
/// and splits it into header and peers (no I/O: the decoder the fuzz target drives, with
/// [`Ledger::load`]).
pub fn parse_ledger(data: &[u8]) -> Result<LedgerHead<'_>, &'static str> {
    if data.len() < HEAD + 4 || &data[..8] != MAGIC {
        return Err("not a ledger file");
    }
    let (rest, crc) = data.split_at(data.len() - 4);
    if crc32fast::hash(rest).to_le_bytes() != crc {
        return Err("the ledger file is damaged (checksum)");
    }
    if !(rest.len() - HEAD).is_multiple_of(ENTRY) {
        return Err("the ledger file is damaged (length)");
    }
    let u64_at = |i: usize| u64::from_le_bytes(rest[i..i + 8].try_into().expect("8 bytes"));
    Ok(LedgerHead {
        saved_at: u64_at(8) as i64,
        key: [u64_at(16), u64_at(24)],
        body: &rest[HEAD..],
    })
}

/// A user's peers on a torrent (whose pair hash is `h`) in `shard`: how many, how many
/// download, and whether `peer` is among them.
fn census(shard: &Shard, h: u64, torrent: u32, user: u32, peer: u32) -> (u32, u32, bool) {
    let (mut peers, mut downloading, mut has) = (0u32, 0u32, false);
    for s in shard.iter_hash(h).filter(|s| s.of(torrent, user)) {
        peers += 1;
        downloading += u32::from(s.leeching());
        has |= s.peer == peer;
    }
    (peers, downloading, has)
}

/// What a known peer's announce `r` adds to its `last` one: only counters that grew credit.
/// What `r` adds to the peer's `last` report: the growth of its counters, each held to
/// `bound` for the seconds since; nothing when either went down (a restarted client, or one
/// that plays its counters down to claim the rise again). With it, the units of this
/// second's credit spent.
fn delta(last: &Slot, r: &Report<'_>, bound: &CreditBound) -> (Delta, u32) {
    let (up, down) = last.counters();
    let grew = r.uploaded >= up && r.downloaded >= down;
    let since = last.age(r.now);
    let most = bound.most(since, last.spent());
    let (claim_up, claim_down) = if grew {
        (r.uploaded - up, r.downloaded - down)
    } else {
        (0, 0)
    };
    let d = Delta {
        uploaded: claim_up.min(most),
        downloaded: claim_down.min(most),
        known: true,
        since,
        cut_uploaded: claim_up.saturating_sub(most),
        cut_downloaded: claim_down.saturating_sub(most),
    };
    (d, bound.spent_after(most, d.uploaded.max(d.downloaded)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rep(peer: u8, up: u64, down: u64, now: u32) -> Report<'static> {
        let id: &'static Id20 = Box::leak(Box::new([peer; 20]));
        Report {
            torrent: 1,
            user: 7,
            peer_id: id,
            uploaded: up,
            downloaded: down,
            stopped: false,
            leeching: false,
            leech_limit: &|_| 0,
            slots: &|_| 0,
            now,
        }
    }

    #[test]
    fn only_a_known_peer_whose_counters_grew_is_credited() {
        let l = Ledger::new(3, 100, false);
        // First announce: nothing credited, whatever it claims.
        assert_eq!(l.report(rep(1, 5000, 9000, 10)), Ok(Delta::default()));
        let d = l.report(rep(1, 6000, 9500, 40)).unwrap();
        assert_eq!(
            (d.uploaded, d.downloaded, d.known, d.since),
            (1000, 500, true, 30)
        );
        // A restarted client: counters went down, nothing credited, the new values kept.
        let d = l.report(rep(1, 10, 20, 50)).unwrap();
        assert_eq!((d.uploaded, d.downloaded, d.known), (0, 0, true));
        let d = l.report(rep(1, 110, 20, 60)).unwrap();
        assert_eq!((d.uploaded, d.downloaded), (100, 0));
        // Stopping credits its last delta and forgets the peer.
        let d = l
            .report(Report {
                stopped: true,
                ..rep(1, 210, 20, 70)
            })
            .unwrap();
        assert_eq!(d.uploaded, 100);
        assert!(l.is_empty());
        assert_eq!(l.report(rep(1, 1000, 0, 80)), Ok(Delta::default()));
    }

    #[test]
    fn a_users_live_peers_are_counted_across_torrents() {
        let l = Ledger::new(3, 100, false);
        for (torrent, peer, leeching, now) in
            [(1, 1, true, 10), (2, 2, false, 10), (3, 3, true, 50)]
        {
            l.report(Report {
                torrent,
                leeching,
                ..rep(peer, 0, 0, now)
            })
            .unwrap();
        }
        // Another user's peer is not theirs.
        l.report(Report {
            user: 8,
            ..rep(4, 0, 0, 50)
        })
        .unwrap();
        assert_eq!(l.user_peers(7, 50, 100), (2, 1));
        // Silent past the timeout: not counted (the sweeper has not run yet).
        assert_eq!(l.user_peers(7, 150, 100), (1, 0));
        assert_eq!(l.user_peers(9, 50, 100), (0, 0));
    }

    #[test]
    fn counters_are_held_to_48_bits_and_a_larger_report_credits_no_more() {
        assert_eq!(std::mem::size_of::<Slot>(), 28);
        // No rate bound here: the counters' own bound alone.
        let l = Ledger::new(3, 100, false).bounded(CreditBound {
            rate: u64::MAX,
            per_announce: u64::MAX,
        });
        let big = (1u64 << 40) + 12_345;
        l.report(rep(1, big, 7, 1)).unwrap();
        let d = l.report(rep(1, big + 10, 9, 2)).unwrap();
        assert_eq!((d.uploaded, d.downloaded, d.known), (10, 2, true));
        // A hostile counter past 2^48 is taken as 2^48 - 1: it credits up to there once.
        let d = l.report(rep(1, u64::MAX, 9, 3)).unwrap();
        assert_eq!(d.uploaded, MAX_COUNTER - big - 10);
        let d = l.report(rep(1, u64::MAX, 9, 4)).unwrap();
        assert_eq!((d.uploaded, d.downloaded), (0, 0));
        let mut out = Vec::new();
        l.save(4, 0, &mut out);
        let up = u64::from_le_bytes(out[HEAD + 16..HEAD + 24].try_into().unwrap());
        assert_eq!(up, MAX_COUNTER, "saved as held");
    }

    #[test]
    fn credit_is_held_to_the_rate_whatever_the_counters_claim() {
        let bound = CreditBound {
            rate: 1000,
            per_announce: 50_000,
        };
        let l = Ledger::new(3, 100, false).bounded(bound);
        l.report(rep(1, 0, 0, 100)).unwrap();
        // 10 s later (with the first announce's own second), 11,000 bytes each way are
        // plausible; 2^64 - 1 is not.
        let d = l.report(rep(1, u64::MAX, 5_000, 110)).unwrap();
        assert_eq!((d.uploaded, d.downloaded), (11_000, 5_000));
        assert_eq!(
            (d.cut_uploaded, d.cut_downloaded),
            (MAX_COUNTER - 11_000, 0)
        );
        assert!(d.cut());
        // The flip attack: down to 0 credits nothing, up again credits the bound for the
        // seconds since; more flips in the same second share that second's bound.
        let mut credited = 0;
        for i in 0..20 {
            let now = 111 + 2 * i;
            assert_eq!(l.report(rep(1, 0, 0, now)).unwrap().uploaded, 0);
            credited += l.report(rep(1, MAX_COUNTER, 0, now + 1)).unwrap().uploaded;
            for _ in 0..100 {
                l.report(rep(1, 0, 0, now + 1)).unwrap();
                credited += l.report(rep(1, MAX_COUNTER, 0, now + 1)).unwrap().uploaded;
            }
        }
        // Seconds 111 to 150: never past the rate.
        assert_eq!(credited, 40 * 1000);
        // A client silent for a day is credited at most one announce's cap.
        let d = l.report(rep(1, MAX_COUNTER, 0, 200_000)).unwrap();
        assert_eq!(d.uploaded, 0, "no growth");
        let d = l.report(rep(1, 0, 0, 200_001)).unwrap();
        assert_eq!(d.uploaded, 0);
        let d = l.report(rep(1, 10_000_000, 0, 300_000)).unwrap();
        assert_eq!((d.uploaded, d.cut_uploaded), (50_000, 10_000_000 - 50_000));
        // An honest client under the bound loses nothing.
        let d = l.report(rep(1, 10_000_000 + 900, 400, 300_001)).unwrap();
        assert_eq!((d.uploaded, d.downloaded, d.cut()), (900, 400, false));
        // Small honest reports in one second share it: each is credited while it lasts.
        let l = Ledger::new(3, 100, false).bounded(bound);
        l.report(rep(2, 0, 0, 7)).unwrap();
        let mut credited = 0;
        for i in 1..=20 {
            credited += l.report(rep(2, 100 * i, 0, 7)).unwrap().uploaded;
        }
        // 20 reports of 100 bytes: the second's 1,000 bytes are shared by the first ten or
        // so (what each spent is counted in units of 8 bytes, rounded up).
        assert!((900..=1000).contains(&credited), "{credited}");
    }

    #[test]
    fn a_user_may_hold_only_so_many_peers_on_a_torrent() {
        let l = Ledger::new(2, 100, false);
        l.report(rep(1, 0, 0, 1)).unwrap();
        l.report(rep(2, 0, 0, 1)).unwrap();
        assert_eq!(l.report(rep(3, 0, 0, 1)), Err(TooManyPeers::User));
        // Known peers still announce; another user or torrent is not affected.
        assert!(l.report(rep(2, 1, 0, 2)).is_ok());
        assert!(l
            .report(Report {
                user: 8,
                ..rep(3, 0, 0, 1)
            })
            .is_ok());
        // A stopped peer frees its place.
        l.report(Report {
            stopped: true,
            ..rep(1, 0, 0, 3)
        })
        .unwrap();
        assert!(l.report(rep(3, 0, 0, 4)).is_ok());
    }

    /// XBT's `peers_limit`: a user's own cap on clients downloading one torrent at once.
    /// Seeders do not count, a known client announces on, and 0 is no cap of their own.
    #[test]
    fn a_users_own_limit_caps_their_downloading_clients() {
        let l = Ledger::new(5, 100, false);
        let (two, none): (&'static dyn Fn(u32) -> u16, &'static dyn Fn(u32) -> u16) =
            (&|_| 2, &|_| 0);
        let leech = |peer, limit: &'static dyn Fn(u32) -> u16| Report {
            leeching: true,
            leech_limit: limit,
            ..rep(peer, 0, 0, 1)
        };
        l.report(rep(1, 0, 0, 1)).unwrap();
        l.report(leech(2, two)).unwrap();
        l.report(leech(3, two)).unwrap();
        assert_eq!(l.report(leech(4, two)), Err(TooManyPeers::User));
        assert!(
            l.report(leech(3, two)).is_ok(),
            "a known client announces on"
        );
        assert!(
            l.report(rep(4, 0, 0, 1)).is_ok(),
            "a seeder is not capped by it"
        );
        assert!(l.report(leech(5, none)).is_ok(), "0: no cap of their own");
    }

    #[test]
    fn the_sweep_forgets_silent_peers_and_frees_their_places() {
        let l = Ledger::new(1, 100, false);
        l.report(rep(1, 0, 0, 100)).unwrap();
        let swept: usize = (0..SHARDS).map(|i| l.sweep(i, 200, 500)).sum();
        assert_eq!(swept, 0);
        let swept: usize = (0..SHARDS).map(|i| l.sweep(i, 1000, 500)).sum();
        assert_eq!(swept, 1);
        assert!(l.report(rep(2, 0, 0, 1000)).is_ok(), "its place is free");
    }

    /// A saved ledger with its checksum.
    fn file(l: &Ledger, now: u32) -> Vec<u8> {
        let mut out = Vec::new();
        l.save(now, 1_000_000, &mut out);
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    #[test]
    fn a_saved_ledger_credits_after_a_restart_what_it_would_have() {
        let l = Ledger::new(3, 100, false);
        l.report(rep(1, 1000, 2000, 10)).unwrap();
        l.report(rep(2, 0, 0, 10)).unwrap();
        l.report(Report {
            torrent: 2,
            ..rep(1, 5, 5, 10)
        })
        .unwrap();
        let data = file(&l, 100);
        let head = parse_ledger(&data).unwrap();
        assert_eq!(head.saved_at, 1_000_000);
        // Restarted: process seconds start again.
        let m = Ledger::new(3, 100, false);
        assert_eq!(m.load(&head, 3, 60, 1800), Ok(3));
        let d = m.report(rep(1, 1500, 2100, 5)).unwrap();
        assert_eq!((d.uploaded, d.downloaded, d.known), (500, 100, true));
        assert_eq!(d.since, 90 + 60 + 2, "aged by the downtime");
        // Aged past the timeout: left out.
        let old = Ledger::new(3, 100, false);
        assert_eq!(old.load(&head, 3, 1800, 1800), Ok(0));
        // Caps hold on load.
        let small = Ledger::new(1, 2, false);
        assert_eq!(small.load(&head, 3, 0, 1800), Ok(2));
        assert_eq!(small.len(), 2);
        // A ledger that has hashed with another key refuses.
        let used = Ledger::new(3, 100, false);
        used.report(rep(9, 0, 0, 1)).unwrap();
        assert!(used.load(&head, 3, 0, 1800).is_err());
        // Damage is refused whole.
        let mut bad = data.clone();
        bad[40] ^= 1;
        assert!(parse_ledger(&bad).is_err());
        assert!(parse_ledger(&data[..data.len() - 1]).is_err());
        let mut cut = data[..data.len() - 4 - 5].to_vec();
        let crc = crc32fast::hash(&cut);
        cut.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(
            parse_ledger(&cut),
            Err("the ledger file is damaged (length)")
        );
    }

    #[test]
    fn the_whole_ledger_is_capped() {
        // One passkey on many torrents cannot grow it past its cap.
        let l = Ledger::new(3, 5, false);
        for t in 0..5 {
            l.report(Report {
                torrent: t,
                ..rep(1, 0, 0, 1)
            })
            .unwrap();
        }
        let more = Report {
            torrent: 9,
            ..rep(1, 0, 0, 1)
        };
        assert_eq!(l.report(more), Err(TooManyPeers::Ledger));
        assert_eq!(l.len(), 5);
        // Known peers still announce, and a stop makes room.
        assert!(l.report(rep(1, 5, 0, 2)).is_ok());
        l.report(Report {
            stopped: true,
            ..rep(1, 5, 0, 3)
        })
        .unwrap();
        assert!(l.report(more).is_ok());
    }

    #[test]
    fn leech_slots_count_torrents_not_peers_and_free_on_complete_stop_and_timeout() {
        let l = Ledger::new(3, 100, true);
        let two = |_: u32| 2;
        let leech = |torrent: u32, peer: u8, now: u32| Report {
            torrent,
            leeching: true,
            leech_limit: &|_| 0,
            slots: &two,
            ..rep(peer, 0, 0, now)
        };
        l.report(leech(1, 1, 1)).unwrap();
        // A second client on the same torrent takes no slot.
        l.report(leech(1, 2, 1)).unwrap();
        l.report(leech(2, 1, 1)).unwrap();
        assert_eq!(l.leeching(7), 2);
        assert_eq!(l.report(leech(3, 1, 1)), Err(TooManyPeers::LeechSlots));
        assert_eq!(l.len(), 3, "a refusal changes nothing");
        // Seeding is never limited.
        assert!(l
            .report(Report {
                torrent: 3,
                slots: &two,
                ..rep(1, 0, 0, 1)
            })
            .is_ok());
        // Torrent 1 completes on one client: the other still downloads it.
        l.report(Report {
            leeching: false,
            ..leech(1, 1, 2)
        })
        .unwrap();
        assert_eq!(l.leeching(7), 2);
        l.report(Report {
            stopped: true,
            ..leech(1, 2, 2)
        })
        .unwrap();
        assert_eq!(l.leeching(7), 1);
        // A seeder that starts downloading again takes a slot, as a new torrent would.
        l.report(leech(3, 1, 3)).unwrap();
        assert_eq!(l.report(leech(4, 1, 3)), Err(TooManyPeers::LeechSlots));
        // Another user has slots of their own.
        assert!(l
            .report(Report {
                user: 8,
                ..leech(4, 1, 3)
            })
            .is_ok());
        // Saved and loaded, downloading peers keep their slots.
        let data = file(&l, 10);
        let m = Ledger::new(3, 100, true);
        m.load(&parse_ledger(&data).unwrap(), 1, 0, 1800).unwrap();
        assert_eq!((m.leeching(7), m.leeching(8)), (2, 1));
        // Timed out, every slot is free again.
        let swept: usize = (0..SHARDS).map(|i| m.sweep(i, 5000, 1800)).sum();
        assert_eq!(swept, 4);
        assert_eq!((m.leeching(7), m.leeching(8)), (0, 0));
        // Without leech slots nothing is counted or refused.
        let open = Ledger::new(3, 100, false);
        for t in 0..5 {
            open.report(leech(t, 1, 1)).unwrap();
        }
        assert_eq!(open.leeching(7), 0);
    }
}
