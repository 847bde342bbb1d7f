//! Bounds that hold across workers: connections per client address, and the memory all
//! connections' buffers may take together.
//!
//! Both are touched only when a connection opens or closes, or when a buffer's size changes,
//! never per request.

use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};

use hashbrown::HashMap;
use parking_lot::Mutex;

const SHARDS: usize = 64;

/// The key a client address is counted under: an IPv4 address, or an IPv6 address's /64 (a
/// single host is commonly given a whole /64, so counting single IPv6 addresses would let it
/// open as many connections as it has addresses).
fn key(ip: IpAddr) -> u128 {
    match ip.to_canonical() {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => (u128::from(v6) >> 64) | (1 << 127),
    }
}

/// The key of an IPv6 address's /48 (what one customer is commonly given), if it is one.
fn key48(ip: IpAddr) -> Option<u128> {
    match ip.to_canonical() {
        IpAddr::V4(_) => None,
        IpAddr::V6(v6) => Some((u128::from(v6) >> 80) | (3 << 126)),
    }
}

/// Open connections per client address (IPv6: per /64, and per /48 together), in shards
/// with short locks.
pub struct PerIp {
    max: AtomicUsize,
    max48: AtomicUsize,
    shards: Box<[Mutex<HashMap<u128, u32>>]>,
}

impl PerIp {
    /// Counts that allow `max` connections per address, and `max48` per IPv6 /48.
    pub fn new(max: usize, max48: usize) -> Self {
        Self {
            max: AtomicUsize::new(max),
            max48: AtomicUsize::new(max48),
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
        }
    }

    /// New limits, for the next connections (a reload); those open stay.
    pub fn set(&self, max: usize, max48: usize) {
        self.max.store(max, Ordering::Relaxed);
        self.max48.store(max48, Ordering::Relaxed);
    }

    fn shard(&self, k: u128) -> &Mutex<HashMap<u128, u32>> {
        // Fold the key so neighbouring addresses spread over shards.
        let h = (k ^ (k >> 64)) as u64;
        &self.shards[(h.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize % SHARDS]
    }

    /// Counts a new connection from `ip`; false (and nothing counted) when the address, or
    /// its /48, already holds its maximum.
    pub fn try_add(&self, ip: IpAddr) -> bool {
        if !self.try_add_key(key(ip), self.max.load(Ordering::Relaxed)) {
            return false;
        }
        if let Some(k48) = key48(ip) {
            if !self.try_add_key(k48, self.max48.load(Ordering::Relaxed)) {
                self.remove_key(key(ip));
                return false;
            }
        }
        true
    }

    fn try_add_key(&self, k: u128, max: usize) -> bool {
        let mut shard = self.shard(k).lock();
        let n = shard.entry(k).or_insert(0);
        if *n as usize >= max {
            if *n == 0 {
                shard.remove(&k);
            }
            return false;
        }
        *n += 1;
        true
    }

    /// Uncounts a connection from `ip` (one that `try_add` counted).
    pub fn remove(&self, ip: IpAddr) {
        self.remove_key(key(ip));
        if let Some(k48) = key48(ip) {
            self.remove_key(k48);
        }
    }

    fn remove_key(&self, k: u128) {
        let mut shard = self.shard(k).lock();
        if let hashbrown::hash_map::Entry::Occupied(mut o) = shard.entry(k) {
            *o.get_mut() -= 1;
            if *o.get() == 0 {
                o.remove();
            }
        }
    }

    /// Connections counted for `ip`.
    pub fn count(&self, ip: IpAddr) -> usize {
        let k = key(ip);
        self.shard(k).lock().get(&k).map_or(0, |&n| n as usize)
    }
}

/// Bytes held by every connection's buffers, against a budget. Workers report a connection's
/// size when it changes; past the budget, connections are held to a small output buffer and a
/// read buffer that does not grow (see the worker), so the total stays near the budget.
pub struct Budget {
    max: AtomicUsize,
    used: AtomicUsize,
}

impl Budget {
    /// A budget of `max` bytes.
    pub fn new(max: usize) -> Self {
        Self {
            max: AtomicUsize::new(max),
            used: AtomicUsize::new(0),
        }
    }

    /// A new budget (a reload).
    pub fn set(&self, max: usize) {
        self.max.store(max, Ordering::Relaxed);
    }

    /// Moves a connection's accounted size from `old` to `new` bytes.
    #[inline]
    pub fn resize(&self, old: usize, new: usize) {
        if new > old {
            self.used.fetch_add(new - old, Ordering::Relaxed);
        } else if old > new {
            self.used.fetch_sub(old - new, Ordering::Relaxed);
        }
    }

    /// Whether the buffers hold the budget or more.
    #[inline]
    pub fn spent(&self) -> bool {
        self.used.load(Ordering::Relaxed) >= self.max.load(Ordering::Relaxed)
    }

    /// Bytes accounted now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_address_caps_count_ipv6_by_prefix() {
        let p = PerIp::new(2, 4);
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        assert!(p.try_add(a) && p.try_add(a));
        assert!(!p.try_add(a));
        // The same address mapped into IPv6 is the same client.
        assert!(!p.try_add("::ffff:192.0.2.1".parse().unwrap()));
        assert!(p.try_add("192.0.2.2".parse().unwrap()));
        p.remove(a);
        assert!(p.try_add(a));
        // Two addresses of one /64 share a count; another /64 has its own.
        assert!(p.try_add("2001:db8:0:1::1".parse().unwrap()));
        assert!(p.try_add("2001:db8:0:1::2".parse().unwrap()));
        assert!(!p.try_add("2001:db8:0:1:ffff::3".parse().unwrap()));
        assert!(p.try_add("2001:db8:0:2::1".parse().unwrap()));
        // Uncounted down to zero, an address leaves the map.
        for _ in 0..2 {
            p.remove("2001:db8:0:1::9".parse().unwrap());
        }
        assert_eq!(p.count("2001:db8:0:1::1".parse().unwrap()), 0);
        assert!(p.shards.iter().all(|s| !s
            .lock()
            .contains_key(&key("2001:db8:0:1::1".parse().unwrap()))));
    }

    /// Regression: 70 IPv6 /64s of 256 connections each took all 16,384 slots. The /64s of
    /// one /48 now share its cap; another /48 and IPv4 are not touched.
    #[test]
    fn the_64s_of_one_48_share_its_cap() {
        let p = PerIp::new(2, 5);
        let in48 = |n: u16| -> IpAddr { format!("2001:db8:7:{n:x}::1").parse().unwrap() };
        let mut held = 0;
        for n in 0..70 {
            for _ in 0..2 {
                if p.try_add(in48(n)) {
                    held += 1;
                }
            }
        }
        assert_eq!(held, 5, "the /48's cap, whatever its /64s");
        assert!(p.try_add("2001:db8:8::1".parse().unwrap()), "another /48");
        assert!(p.try_add("192.0.2.1".parse().unwrap()));
        // A refusal by the /48 leaves the /64's count as it was.
        assert_eq!(p.count(in48(60)), 0);
        p.remove(in48(0));
        assert!(p.try_add(in48(69)));
        assert!(!p.try_add(in48(68)));
    }

    #[test]
    fn budget_follows_resizes() {
        let b = Budget::new(100);
        b.resize(0, 60);
        assert!(!b.spent());
        b.resize(60, 100);
        assert!(b.spent());
        b.resize(100, 10);
        assert_eq!(b.used(), 10);
        assert!(!b.spent());
    }
}
