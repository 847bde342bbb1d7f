//! Who holds the torrents that only one client is in: each such torrent is its one peer's
//! address's (IPv6: its /64, and its /48 with the other /64s of that /48), and an address may
//! hold `tracker.max_torrents_per_address` of them (a /48, `max_torrents_per_48`). A flood of
//! made-up info hashes from one place then stops at its own budget, and never makes the
//! tracker full for everyone else; a torrent that a second client joins is no longer anyone's.
//!
//! Counts change only when a torrent's sole peer changes (created, joined, left to one, freed):
//! re-announces into a swarm never touch them.
//!
//! Peers are budgeted the same way across all torrents ([`Spread`]): an address may have
//! `tracker.max_peers_per_address` of them in the whole table, its /48 `max_peers_per_48`, so
//! joining every torrent with made-up ports from one place cannot fill `max_peers` either.
//!
//! Owns: [`Owners`], [`Spread`]. Must not: know swarms (the table tells it what changed).

use std::hash::Hasher as _;
use std::sync::atomic::{AtomicI32, Ordering};

use hashbrown::HashMap;
use parking_lot::Mutex;

const SHARDS: usize = 16;

/// An address as counted: IPv4, or IPv6 by /64.
pub type Key = u128;

/// An address and the torrents it holds alone.
pub type Held = (Key, u32);

/// The key of a compact address (4 or 16 bytes of IP, then the port).
pub fn key(addr: &[u8]) -> Key {
    match addr.len() {
        6 => u128::from(u32::from_be_bytes(addr[..4].try_into().expect("4 bytes"))),
        18 => {
            let ip = u128::from_be_bytes(addr[..16].try_into().expect("16 bytes"));
            (ip >> 64) | (1 << 127)
        }
        _ => 0,
    }
}

/// The key of the /48 an IPv6 key's /64 is in.
fn key48(k: Key) -> Option<Key> {
    (k >> 127 == 1).then_some(((k & !(1 << 127)) >> 16) | (3 << 126))
}

/// Single-peer torrents per address.
#[derive(Debug)]
pub struct Owners {
    shards: Box<[Mutex<HashMap<Key, u32>>]>,
    max: u32,
    max48: u32,
    /// The heaviest address found at a process second (see [`Owners::heaviest_at`]).
    heaviest: Mutex<Option<(u16, Option<Held>)>>,
}

impl Owners {
    /// Budgets of `max` single-peer torrents per address and `max48` per IPv6 /48.
    pub fn new(max: usize, max48: usize) -> Owners {
        let cap = |n: usize| u32::try_from(n).unwrap_or(u32::MAX).max(1);
        Owners {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            max: cap(max),
            max48: cap(max48),
            heaviest: Mutex::new(None),
        }
    }

    fn shard(&self, k: Key) -> &Mutex<HashMap<Key, u32>> {
        let h = (k ^ (k >> 64)) as u64;
        &self.shards[(h.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 60) as usize % SHARDS]
    }

    fn get(&self, k: Key) -> u32 {
        self.shard(k).lock().get(&k).copied().unwrap_or(0)
    }

    /// Whether the address `k` may make one more torrent.
    pub fn may_create(&self, k: Key) -> bool {
        self.get(k) < self.max && key48(k).is_none_or(|k48| self.get(k48) < self.max48)
    }

    fn bump(&self, k: Key, up: bool) {
        let mut map = self.shard(k).lock();
        if up {
            *map.entry(k).or_insert(0) += 1;
        } else if let hashbrown::hash_map::Entry::Occupied(mut o) = map.entry(k) {
            *o.get_mut() -= 1;
            if *o.get() == 0 {
                o.remove();
            }
        }
    }

    /// A torrent's sole peer went from `before` to `after` (`None`: it has none, or several).
    pub fn moved(&self, before: Option<Key>, after: Option<Key>) {
        if before == after {
            return;
        }
        for (k, up) in [(before, false), (after, true)] {
            if let Some(k) = k {
                self.bump(k, up);
                if let Some(k48) = key48(k) {
                    self.bump(k48, up);
                }
            }
        }
    }

    /// The address holding the most torrents alone, and how many (a scan of every address
    /// counted: the table calls it only when it is full).
    pub fn heaviest(&self) -> Option<(Key, u32)> {
        let mut best: Option<(Key, u32)> = None;
        for s in self.shards.iter() {
            for (&k, &n) in s.lock().iter() {
                // A /48's total (its key's top two bits set) is not an address of its own.
                if k >> 126 != 3 && best.is_none_or(|(_, b)| n > b) {
                    best = Some((k, n));
                }
            }
        }
        best
    }

    /// [`Owners::heaviest`] as found at most once in process second `now`: a full table asks
    /// for every new torrent, and a scan of every address per request would be the flood's
    /// lever. Between scans, evictions may have lowered its count: the caller checks it.
    pub fn heaviest_at(&self, now: u16) -> Option<(Key, u32)> {
        let mut cached = self.heaviest.lock();
        match *cached {
            Some((at, found)) if at == now => found.map(|(k, _)| (k, self.held(k))),
            _ => {
                let found = self.heaviest();
                *cached = Some((now, found));
                found
            }
        }
    }

    /// Torrents the address `k` holds alone (tests, figures).
    pub fn held(&self, k: Key) -> u32 {
        self.get(k)
    }
}

/// Counters per row of [`Spread`]'s sketch.
const WIDTH: usize = 1 << 16;

/// Peers per address (IPv6: per /64, and per /48) across the whole table, counted in a sketch
/// of fixed size (two rows of 65,536 counters, 512 KiB) rather than a map: it costs no memory
/// per address, takes no lock, and cannot be grown by a flood. An address's count is the
/// smaller of its two counters; each row is indexed by a keyed SipHash (random key), so no
/// client can choose whose counters it shares. A counter is the exact sum of the addresses
/// sharing it: an address is never under-counted (its budget holds), and another address
/// is over-counted only when both its counters are shared with heavy ones (with 64 addresses
/// at their budget, about one address in a million: (64 / 65,536)²).
#[derive(Debug)]
pub struct Spread {
    rows: Box<[AtomicI32]>,
    hash_key: [u64; 2],
    max: i32,
    max48: i32,
}

impl Spread {
    /// Budgets of `max` peers per address and `max48` per IPv6 /48, in all torrents together.
    pub fn new(max: usize, max48: usize) -> Spread {
        let mut b = [0u8; 16];
        getrandom::fill(&mut b).expect("the OS's random numbers");
        let k = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let cap = |n: usize| i32::try_from(n).unwrap_or(i32::MAX).max(1);
        Spread {
            rows: (0..2 * WIDTH).map(|_| AtomicI32::new(0)).collect(),
            hash_key: [k(0), k(8)],
            max: cap(max),
            max48: cap(max48),
        }
    }

    /// The two counters of key `k`.
    fn slots(&self, k: Key) -> [usize; 2] {
        let mut h = siphasher::sip::SipHasher13::new_with_keys(self.hash_key[0], self.hash_key[1]);
        h.write_u128(k);
        let h = h.finish();
        [(h as usize) % WIDTH, WIDTH + ((h >> 32) as usize) % WIDTH]
    }

    fn count(&self, k: Key) -> i32 {
        let [a, b] = self.slots(k);
        self.rows[a]
            .load(Ordering::Relaxed)
            .min(self.rows[b].load(Ordering::Relaxed))
    }

    /// Whether the address `k` may add one more peer to the table.
    pub fn may_add(&self, k: Key) -> bool {
        self.count(k) < self.max && key48(k).is_none_or(|k48| self.count(k48) < self.max48)
    }

    fn bump(&self, k: Key, by: i32) {
        for s in self.slots(k) {
            self.rows[s].fetch_add(by, Ordering::Relaxed);
        }
    }

    /// A peer of the address of compact `addr` was added (`true`) or dropped.
    pub fn moved(&self, addr: &[u8], added: bool) {
        let k = key(addr);
        let by = if added { 1 } else { -1 };
        self.bump(k, by);
        if let Some(k48) = key48(k) {
            self.bump(k48, by);
        }
    }

    /// Peers counted for the address `k` (tests, figures: over-counted when it shares both
    /// its counters).
    pub fn peers(&self, k: Key) -> i32 {
        self.count(k)
    }

    /// The sum of one row: every peer once, IPv6 ones twice (/64 and /48) (tests: whatever
    /// came and went, it matches the table's count).
    pub fn total(&self) -> i64 {
        self.rows[..WIDTH]
            .iter()
            .map(|c| i64::from(c.load(Ordering::Relaxed)))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v6(s: &str) -> Key {
        let ip: std::net::Ipv6Addr = s.parse().unwrap();
        let mut a = ip.octets().to_vec();
        a.extend_from_slice(&[0, 80]);
        key(&a)
    }

    #[test]
    fn budgets_hold_per_address_and_per_48() {
        let o = Owners::new(2, 3);
        let a = key(&[192, 0, 2, 1, 0, 80]);
        assert_eq!(a, key(&[192, 0, 2, 1, 1, 1]), "the port is not the address");
        o.moved(None, Some(a));
        o.moved(None, Some(a));
        assert!(!o.may_create(a));
        assert!(o.may_create(key(&[192, 0, 2, 2, 0, 80])));
        // Joined by a second client: no longer the address's.
        o.moved(Some(a), None);
        assert!(o.may_create(a));
        assert_eq!(o.held(a), 1);
        // Three /64s of one /48 share its budget of 3.
        let (x, y, z) = (
            v6("2001:db8:5:1::1"),
            v6("2001:db8:5:2::1"),
            v6("2001:db8:5:3::1"),
        );
        o.moved(None, Some(x));
        o.moved(None, Some(y));
        o.moved(None, Some(z));
        assert!(!o.may_create(v6("2001:db8:5:4::1")));
        assert!(o.may_create(v6("2001:db8:6:1::1")), "another /48");
        o.moved(Some(z), Some(x));
        assert_eq!((o.held(x), o.held(z)), (2, 0));
        assert!(!o.may_create(x));
    }

    #[test]
    fn peer_budgets_hold_across_torrents_per_address_and_per_48() {
        let s = Spread::new(3, 5);
        let a = [192, 0, 2, 1, 0, 80];
        for port in 0..3u8 {
            assert!(s.may_add(key(&a)));
            s.moved(&[192, 0, 2, 1, 1, port], true);
        }
        assert!(!s.may_add(key(&a)), "a fourth port of the same address");
        assert!(s.may_add(key(&[192, 0, 2, 2, 0, 80])), "another address");
        s.moved(&a, false);
        assert!(s.may_add(key(&a)));
        assert_eq!(s.peers(key(&a)), 2);
        // Five peers from three /64s of one /48 spend the /48's budget.
        let v6 = |net: u8, host: u8| {
            let mut b = [
                0x20, 0x01, 0x0d, 0xb8, 0, 7, 0, net, 0, 0, 0, 0, 0, 0, 0, host, 0, 1,
            ];
            b[17] = host;
            b
        };
        for (net, host) in [(1, 1), (1, 2), (2, 1), (3, 1), (3, 2)] {
            s.moved(&v6(net, host), true);
        }
        assert!(!s.may_add(key(&v6(4, 1))), "a fresh /64 of a spent /48");
        let mut other = v6(1, 1);
        other[5] = 8;
        assert!(s.may_add(key(&other)), "another /48");
        assert_eq!(s.total(), 2 + 2 * 5);
        for (net, host) in [(1, 1), (1, 2), (2, 1), (3, 1), (3, 2)] {
            s.moved(&v6(net, host), false);
        }
        assert_eq!(s.total(), 2);
    }
}
