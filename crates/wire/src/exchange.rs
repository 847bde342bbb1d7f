//! The swarm exchange between the nodes of a cluster: what one node tells the others about the
//! peers that announced to it, carried as Redis Cluster sharded pub/sub messages.
//!
//! A message is a header, any number of deltas, and a MAC over all of it:
//!
//! ```text
//! version (1) | origin node (1) | sent, unix ms (8, LE) | delta* | SipHash-2-4-128 MAC (16)
//! delta: flags (1) | at, unix s (4, LE) | info_hash (20) | address (6 or 18) | peer id (20)?
//! flags: 0x01 IPv6, 0x02 seeder, 0x04 stopped, 0x08 snatched, 0x10 peer id follows
//! ```
//!
//! The MAC is keyed by the cluster's shared secret, so a message that anyone else put on the
//! channel (Redis has no per-channel rights) is refused whole before a byte of it is used.
//! A record is 32 bytes for an IPv4 peer without its id; the header and MAC are 26 per message.

use std::hash::Hasher as _;

use siphasher::sip128::{Hasher128 as _, SipHasher24};

use crate::query::Id20;

/// The format's version (the first byte).
pub const VERSION: u8 = 1;
/// Header bytes: version, origin, sent time.
pub const HEADER: usize = 10;
/// MAC bytes at the end.
pub const MAC: usize = 16;
/// The largest message any node sends or reads (a sender packs well below it).
pub const MAX_MESSAGE: usize = 1 << 20;

const V6: u8 = 0x01;
const SEEDER: u8 = 0x02;
const STOPPED: u8 = 0x04;
const SNATCHED: u8 = 0x08;
const PEER_ID: u8 = 0x10;
const KNOWN: u8 = V6 | SEEDER | STOPPED | SNATCHED | PEER_ID;

/// One change to one peer of one swarm, as the node it announced to saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delta {
    /// The torrent.
    pub info_hash: Id20,
    /// The compact address (IP then port, network order): the first 6 bytes for IPv4, all 18
    /// for IPv6.
    pub addr: [u8; 18],
    /// IPv6 (18 address bytes) rather than IPv4 (6).
    pub v6: bool,
    /// The peer seeds.
    pub seeder: bool,
    /// The peer left (event=stopped): a tombstone.
    pub stopped: bool,
    /// This announce completed a download that counted (a snatch).
    pub snatched: bool,
    /// The peer id, when the origin keeps peer ids.
    pub peer_id: Option<Id20>,
    /// When the origin saw the announce, unix seconds.
    pub at: u32,
}

impl Delta {
    /// A delta for an IPv4 peer (`addr` is 4 IP bytes then the port).
    pub fn v4(info_hash: Id20, addr: [u8; 6], at: u32) -> Self {
        let mut a = [0u8; 18];
        a[..6].copy_from_slice(&addr);
        Self {
            info_hash,
            addr: a,
            v6: false,
            seeder: false,
            stopped: false,
            snatched: false,
            peer_id: None,
            at,
        }
    }

    /// A delta for an IPv6 peer (`addr` is 16 IP bytes then the port).
    pub fn v6(info_hash: Id20, addr: [u8; 18], at: u32) -> Self {
        Self {
            addr,
            v6: true,
            ..Self::v4(info_hash, [0; 6], at)
        }
    }

    /// The compact address: 6 bytes for IPv4, 18 for IPv6.
    pub fn address(&self) -> &[u8] {
        &self.addr[..if self.v6 { 18 } else { 6 }]
    }

    /// Bytes this delta takes in a message.
    pub fn encoded_len(&self) -> usize {
        1 + 4 + 20 + self.address().len() + if self.peer_id.is_some() { 20 } else { 0 }
    }
}

/// The group (and so the channel) of an info hash, one of `groups`.
pub fn group_of(info_hash: &Id20, groups: u16) -> u16 {
    let n = u16::from_le_bytes([info_hash[0], info_hash[1]]);
    n % groups.max(1)
}

/// Starts a message from node `origin` sent at `sent_ms` (unix ms) at the end of `out`;
/// returns where it starts, for [`seal`].
pub fn begin(out: &mut Vec<u8>, origin: u8, sent_ms: u64) -> usize {
    let start = out.len();
    out.push(VERSION);
    out.push(origin);
    out.extend_from_slice(&sent_ms.to_le_bytes());
    start
}

/// Appends one delta to the message being built.
pub fn put(out: &mut Vec<u8>, d: &Delta) {
    let mut flags = 0;
    for (on, bit) in [
        (d.v6, V6),
        (d.seeder, SEEDER),
        (d.stopped, STOPPED),
        (d.snatched, SNATCHED),
        (d.peer_id.is_some(), PEER_ID),
    ] {
        if on {
            flags |= bit;
        }
    }
    out.push(flags);
    out.extend_from_slice(&d.at.to_le_bytes());
    out.extend_from_slice(&d.info_hash);
    out.extend_from_slice(d.address());
    if let Some(id) = &d.peer_id {
        out.extend_from_slice(id);
    }
}

fn mac(body: &[u8], key: &[u8; 16]) -> [u8; 16] {
    let mut h = SipHasher24::new_with_key(key);
    h.write(body);
    h.finish128().as_bytes()
}

/// Ends the message that starts at `start` in `out` with its MAC under `key`.
pub fn seal(out: &mut Vec<u8>, start: usize, key: &[u8; 16]) {
    let m = mac(&out[start..], key);
    out.extend_from_slice(&m);
}

/// A message whose MAC and header were checked; its deltas are read as they are iterated.
#[derive(Debug, Clone, Copy)]
pub struct Message<'a> {
    /// The node that sent it.
    pub origin: u8,
    /// When it was sent, unix ms (the sender's clock).
    pub sent_ms: u64,
    body: &'a [u8],
}

/// Checks a message's size, MAC and version; the deltas are checked as they are read.
pub fn open<'a>(msg: &'a [u8], key: &[u8; 16]) -> Result<Message<'a>, &'static str> {
    if msg.len() > MAX_MESSAGE {
        return Err("exchange message too large");
    }
    if msg.len() < HEADER + MAC {
        return Err("exchange message too short");
    }
    let (signed, tag) = msg.split_at(msg.len() - MAC);
    // Compared in full whatever the first difference (no early exit to time).
    let want = mac(signed, key);
    if want.iter().zip(tag).fold(0u8, |acc, (a, b)| acc | (a ^ b)) != 0 {
        return Err("exchange message MAC does not match (another secret, or forged)");
    }
    if signed[0] != VERSION {
        return Err("exchange message of an unknown version");
    }
    Ok(Message {
        origin: signed[1],
        sent_ms: u64::from_le_bytes(signed[2..10].try_into().expect("8 bytes")),
        body: &signed[HEADER..],
    })
}

impl<'a> Message<'a> {
    /// The deltas, in order; an item is an error where the body stops making sense (and the
    /// iteration stops there).
    pub fn deltas(&self) -> Deltas<'a> {
        Deltas { rest: self.body }
    }
}

/// The deltas of a [`Message`].
#[derive(Debug, Clone)]
pub struct Deltas<'a> {
    rest: &'a [u8],
}

impl Iterator for Deltas<'_> {
    type Item = Result<Delta, &'static str>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let r = read(self.rest);
        match r {
            Ok((d, used)) => {
                self.rest = &self.rest[used..];
                Some(Ok(d))
            }
            Err(e) => {
                self.rest = &[];
                Some(Err(e))
            }
        }
    }
}

fn read(b: &[u8]) -> Result<(Delta, usize), &'static str> {
    let flags = *b.first().ok_or("exchange delta cut short")?;
    if flags & !KNOWN != 0 {
        return Err("exchange delta has unknown flags");
    }
    let alen = if flags & V6 != 0 { 18 } else { 6 };
    let ilen = if flags & PEER_ID != 0 { 20 } else { 0 };
    let len = 1 + 4 + 20 + alen + ilen;
    if b.len() < len {
        return Err("exchange delta cut short");
    }
    let mut addr = [0u8; 18];
    addr[..alen].copy_from_slice(&b[25..25 + alen]);
    let peer_id = (ilen > 0).then(|| b[25 + alen..len].try_into().expect("20 bytes"));
    let d = Delta {
        info_hash: b[5..25].try_into().expect("20 bytes"),
        addr,
        v6: flags & V6 != 0,
        seeder: flags & SEEDER != 0,
        stopped: flags & STOPPED != 0,
        snatched: flags & SNATCHED != 0,
        peer_id,
        at: u32::from_le_bytes(b[1..5].try_into().expect("4 bytes")),
    };
    Ok((d, len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const KEY: [u8; 16] = *b"0123456789abcdef";

    fn message(deltas: &[Delta]) -> Vec<u8> {
        let mut out = vec![0xAA]; // something before, as in a shared buffer
        let start = begin(&mut out, 3, 1_700_000_000_123);
        for d in deltas {
            put(&mut out, d);
        }
        seal(&mut out, start, &KEY);
        out.split_off(start)
    }

    fn delta() -> impl Strategy<Value = Delta> {
        (
            any::<[u8; 20]>(),
            any::<[u8; 18]>(),
            any::<bool>(),
            any::<[bool; 3]>(),
            proptest::option::of(any::<[u8; 20]>()),
            any::<u32>(),
        )
            .prop_map(|(h, a, v6, [s, st, sn], id, at)| {
                let mut d = if v6 {
                    Delta::v6(h, a, at)
                } else {
                    Delta::v4(h, a[..6].try_into().unwrap(), at)
                };
                d.seeder = s;
                d.stopped = st;
                d.snatched = sn;
                d.peer_id = id;
                d
            })
    }

    proptest! {
        #[test]
        fn round_trip(ds in proptest::collection::vec(delta(), 0..40)) {
            let msg = message(&ds);
            let want: usize = HEADER + MAC + ds.iter().map(Delta::encoded_len).sum::<usize>();
            prop_assert_eq!(msg.len(), want);
            let m = open(&msg, &KEY).unwrap();
            prop_assert_eq!(m.origin, 3);
            prop_assert_eq!(m.sent_ms, 1_700_000_000_123);
            let back: Vec<Delta> = m.deltas().map(Result::unwrap).collect();
            prop_assert_eq!(back, ds);
        }

        #[test]
        fn any_flipped_bit_is_refused(ds in proptest::collection::vec(delta(), 1..5), at in any::<prop::sample::Index>(), bit in 0u8..8) {
            let mut msg = message(&ds);
            let i = at.index(msg.len());
            msg[i] ^= 1 << bit;
            prop_assert!(open(&msg, &KEY).is_err());
        }
    }

    #[test]
    fn refusals() {
        let d = Delta::v4([7; 20], [127, 0, 0, 1, 0x1a, 0xe1], 5);
        let msg = message(&[d]);
        assert!(open(&msg, b"another key 16 b").is_err());
        assert!(open(&msg[..HEADER + MAC - 1], &KEY).is_err());
        assert!(open(&vec![0; MAX_MESSAGE + 1], &KEY).is_err());
        // A well-signed body with unknown flags, or cut inside a delta, stops with an error.
        for body in [&[0x80u8, 0, 0, 0, 0][..], &[0x01, 0, 0, 0][..]] {
            let mut out = Vec::new();
            let start = begin(&mut out, 1, 0);
            out.extend_from_slice(body);
            seal(&mut out, start, &KEY);
            let m = open(&out, &KEY).unwrap();
            let got: Vec<_> = m.deltas().collect();
            assert_eq!(got.len(), 1);
            assert!(got[0].is_err());
        }
        // Another version.
        let mut out = Vec::new();
        let start = begin(&mut out, 1, 0);
        out[start] = 9;
        seal(&mut out, start, &KEY);
        assert!(open(&out, &KEY).is_err());
    }

    #[test]
    fn groups_spread_and_stay_in_range() {
        let mut seen = [0u32; 64];
        for i in 0..6400u32 {
            let mut h = [0u8; 20];
            h[..4].copy_from_slice(&i.wrapping_mul(2_654_435_761).to_le_bytes());
            seen[group_of(&h, 64) as usize] += 1;
        }
        assert!(seen.iter().all(|&n| n > 0));
        assert_eq!(group_of(&[0xff; 20], 0), 0);
    }
}
