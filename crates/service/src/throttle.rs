//! A bound on guessing: failed secrets (passkeys, admin tokens) counted per client address,
//! and an address past its limit refused every secret it sends until its window ends, good
//! or bad, so a guess that happens to be right tells it nothing.
//!
//! The good path costs one atomic load while no address is over its limit (a lookup under a
//! short lock while some are); a failure takes one short lock. No syscall either way: the
//! caller passes the time it already has. Addresses are held within a bound: past it, the
//! stalest are forgotten first.
//!
//! Owns: [`Throttle`]. Must not: do I/O.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use hotpath_metrics::Counter;

/// The addresses a throttle of guesses holds by default: 65,536, about 2 MiB.
pub const GUESSING_ADDRESSES: usize = 1 << 16;

/// Shards of the address map (a power of two).
const SHARDS: usize = 16;

/// One address's failures in its current window.
#[derive(Debug, Clone, Copy)]
struct Tries {
    /// The second its window began.
    since: u32,
    /// Failures in it.
    fails: u32,
}

/// Failed secrets per client address (IPv6: per /64), within a window.
#[derive(Debug)]
pub struct Throttle {
    shards: Box<[Mutex<HashMap<u64, Tries>>]>,
    /// Failures an address may have in a window; the next secret it sends is refused.
    limit: u32,
    /// Seconds of a window.
    window: u32,
    /// Addresses one shard holds.
    per_shard: usize,
    /// Addresses at their limit now (an upper bound: a window that ended is only noticed
    /// when its address comes again): zero lets every secret through unlooked.
    over: AtomicUsize,
    /// Secrets refused because their address was over its limit.
    pub refused: Counter,
    /// Failures counted.
    pub failures: Counter,
    /// Addresses forgotten before their window ended, to hold at most `max_addresses`
    /// (a guesser spread over more addresses than that).
    pub forgotten: Counter,
}

impl Throttle {
    /// A throttle of `limit` failures per `window` seconds for each of at most
    /// `max_addresses` addresses.
    pub fn new(limit: u32, window: u32, max_addresses: usize) -> Throttle {
        Throttle {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            limit: limit.max(1),
            window: window.max(1),
            per_shard: max_addresses.div_ceil(SHARDS).max(1),
            over: AtomicUsize::new(0),
            refused: Counter::default(),
            failures: Counter::default(),
            forgotten: Counter::default(),
        }
    }

    /// The address as counted: IPv4 (and IPv4-mapped) as it is, IPv6 by its /64 (what one
    /// host or one customer commonly holds).
    fn key(ip: IpAddr) -> u64 {
        match ip.to_canonical() {
            IpAddr::V4(a) => 1 << 63 | u64::from(u32::from(a)),
            IpAddr::V6(a) => (u128::from(a) >> 64) as u64 & !(1 << 63),
        }
    }

    fn shard(&self, key: u64) -> std::sync::MutexGuard<'_, HashMap<u64, Tries>> {
        let i = (key ^ key >> 29).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 60;
        self.shards[i as usize & (SHARDS - 1)]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether `ip` may try a secret at second `now`; counts a refusal when not.
    pub fn allows(&self, ip: IpAddr, now: u32) -> bool {
        if self.over.load(Ordering::Relaxed) == 0 {
            return true;
        }
        let key = Throttle::key(ip);
        let mut map = self.shard(key);
        let Some(t) = map.get(&key).copied() else {
            return true;
        };
        if t.fails < self.limit {
            return true;
        }
        if now.wrapping_sub(t.since) >= self.window {
            map.remove(&key);
            self.over.fetch_sub(1, Ordering::Relaxed);
            return true;
        }
        self.refused.add(1);
        false
    }

    /// Counts a failed secret from `ip` at second `now`.
    pub fn failed(&self, ip: IpAddr, now: u32) {
        self.failures.add(1);
        let key = Throttle::key(ip);
        let mut map = self.shard(key);
        if !map.contains_key(&key) && map.len() >= self.per_shard {
            self.make_room(&mut map, now);
        }
        let t = map.entry(key).or_insert(Tries {
            since: now,
            fails: 0,
        });
        if now.wrapping_sub(t.since) >= self.window {
            if t.fails >= self.limit {
                self.over.fetch_sub(1, Ordering::Relaxed);
            }
            *t = Tries {
                since: now,
                fails: 0,
            };
        }
        t.fails = t.fails.saturating_add(1);
        if t.fails == self.limit {
            self.over.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Forgets the addresses whose window ended, or else the one whose window began first.
    fn make_room(&self, map: &mut HashMap<u64, Tries>, now: u32) {
        let before = map.len();
        let (limit, window) = (self.limit, self.window);
        let mut gone_over = 0;
        map.retain(|_, t| {
            let keep = now.wrapping_sub(t.since) < window;
            if !keep && t.fails >= limit {
                gone_over += 1;
            }
            keep
        });
        if map.len() == before {
            if let Some((&k, &t)) = map.iter().min_by_key(|(_, t)| t.since) {
                map.remove(&k);
                self.forgotten.add(1);
                if t.fails >= limit {
                    gone_over += 1;
                }
            }
        }
        self.over.fetch_sub(gone_over, Ordering::Relaxed);
    }

    /// Addresses held (for tests and figures).
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                s.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .len()
            })
            .sum()
    }

    /// Whether no address is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn an_address_past_its_limit_is_refused_until_its_window_ends() {
        let t = Throttle::new(3, 60, 1000);
        let (a, b) = (ip("192.0.2.1"), ip("192.0.2.2"));
        for _ in 0..3 {
            assert!(t.allows(a, 100));
            t.failed(a, 100);
        }
        // Every secret it sends now is refused, the right one too; another address is not.
        assert!(!t.allows(a, 101));
        assert!(!t.allows(a, 159));
        assert!(t.allows(b, 101));
        assert_eq!(t.refused.get(), 2);
        // The window is over: it may try again, and its count starts anew.
        assert!(t.allows(a, 160));
        t.failed(a, 160);
        assert!(t.allows(a, 161));
        assert_eq!(t.over.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn ipv6_counts_by_64_and_the_map_is_bounded() {
        let t = Throttle::new(2, 60, 32);
        t.failed(ip("2001:db8:0:1::1"), 5);
        t.failed(ip("2001:db8:0:1::2"), 5);
        assert!(!t.allows(ip("2001:db8:0:1::ffff"), 6), "one /64");
        assert!(t.allows(ip("2001:db8:0:2::1"), 6), "another /64");
        assert!(t.allows(ip("::ffff:192.0.2.1"), 6));
        // A flood of addresses keeps the map within its bound, and the count of addresses
        // over their limit stays true.
        for i in 0..10_000u32 {
            let a = IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + i));
            t.failed(a, 7);
            t.failed(a, 7);
        }
        assert!(t.len() <= 32, "{}", t.len());
        assert!(t.over.load(Ordering::Relaxed) <= t.len());
        // All but the 32 held were forgotten early (their window had not ended): counted.
        assert_eq!(t.forgotten.get(), 10_000 + 1 - 32);
    }
}
