//! BEP 15 connection ids without per-client state: the id is an expiry time (unix seconds) and
//! a keyed MAC (SipHash-1-3, a random key, kept across a restart or a binary upgrade in
//! `store.data_dir` so the ids clients hold stay good) over the client's IP address and that
//! expiry. An id is valid from the connect until the expiry, about two
//! minutes, for the IP it was issued to. The port is left out on purpose: some NATs move a
//! client's source port between packets, and what the id guards against is a forged source IP.

use std::hash::Hasher;
use std::net::IpAddr;

use siphasher::sip::SipHasher13;

/// Seconds an id stays valid.
pub const LIFETIME_SECS: u32 = 120;

/// Issues and checks connection ids.
#[derive(Debug, Clone)]
pub struct ConnectionIds {
    key: [u8; 16],
    /// Seconds an expiry may lie beyond this clock's idea of the latest one: 0 for ids only
    /// this process issues, a few for a cluster's nodes, whose clocks differ a little.
    skew: u32,
}

impl ConnectionIds {
    /// With a key from the OS random source.
    pub fn random() -> Self {
        let mut key = [0u8; 16];
        getrandom::fill(&mut key).expect("the OS random source works");
        Self { key, skew: 0 }
    }

    /// With a fixed key (one saved before, or tests').
    pub fn with_key(key: [u8; 16]) -> Self {
        Self { key, skew: 0 }
    }

    /// With a key every node of a cluster derives from its shared secret, so any node accepts
    /// an id another issued, whose clock may be up to `skew` seconds ahead.
    pub fn shared(key: [u8; 16], skew: u32) -> Self {
        Self { key, skew }
    }

    /// The key, to be saved for the next process.
    pub fn key(&self) -> [u8; 16] {
        self.key
    }

    fn mac(&self, ip: IpAddr, expires: u32) -> u32 {
        let mut h = SipHasher13::new_with_key(&self.key);
        match ip {
            IpAddr::V4(v4) => h.write(&v4.octets()),
            IpAddr::V6(v6) => h.write(&v6.octets()),
        }
        h.write_u32(expires);
        h.finish() as u32
    }

    /// A new id for `ip` at time `now`.
    pub fn issue(&self, ip: IpAddr, now: u32) -> u64 {
        let expires = now + LIFETIME_SECS;
        u64::from(expires) << 32 | u64::from(self.mac(ip, expires))
    }

    /// Whether `id` was issued by this process to `ip` and has not expired at `now`.
    pub fn check(&self, id: u64, ip: IpAddr, now: u32) -> bool {
        let expires = (id >> 32) as u32;
        expires >= now
            && expires <= now + LIFETIME_SECS + self.skew
            && self.mac(ip, expires) == id as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_for_its_ip_and_lifetime_only() {
        let ids = ConnectionIds::with_key([7; 16]);
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        let other: IpAddr = "192.0.2.2".parse().unwrap();
        let id = ids.issue(ip, 1000);
        assert!(ids.check(id, ip, 1000));
        assert!(ids.check(id, ip, 1000 + LIFETIME_SECS));
        assert!(!ids.check(id, ip, 1001 + LIFETIME_SECS));
        assert!(!ids.check(id, other, 1000));
        assert!(!ids.check(id ^ 1, ip, 1000));
        // An id claiming a far-future expiry is refused even with a matching MAC.
        let far = u64::from(5000u32) << 32 | u64::from(ids.mac(ip, 5000));
        assert!(!ids.check(far, ip, 1000));
        assert!(!ConnectionIds::with_key([8; 16]).check(id, ip, 1000));
    }

    #[test]
    fn another_node_within_the_skew_accepts_an_id() {
        let a = ConnectionIds::shared([7; 16], 5);
        let b = ConnectionIds::shared([7; 16], 5);
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        // Node a's clock is 4 s ahead of b's.
        let id = a.issue(ip, 1004);
        assert!(b.check(id, ip, 1000));
        let far = a.issue(ip, 1006);
        assert!(!b.check(far, ip, 1000));
        assert!(!ConnectionIds::shared([9; 16], 5).check(id, ip, 1000));
    }
}
