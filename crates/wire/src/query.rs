//! Tracker query strings (BEP 3, 7, 23, 48): `/announce?…` and `/scrape?…` parsed without
//! allocation into fixed-size values, and built from the client side.

use std::net::{IpAddr, Ipv6Addr};

/// A 20-byte info hash or peer id.
pub type Id20 = [u8; 20];

/// The `event` of an announce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Event {
    /// A regular announce (no event, or `event=empty`).
    #[default]
    None,
    /// The download started.
    Started,
    /// The peer leaves the swarm.
    Stopped,
    /// The download completed (counted once per peer as a snatch).
    Completed,
    /// BEP 21: the peer is a partial seed and wants nothing more.
    Paused,
}

/// A parsed announce query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Announce {
    /// The torrent.
    pub info_hash: Id20,
    /// The client's peer id.
    pub peer_id: Id20,
    /// The port the client listens on.
    pub port: u16,
    /// Bytes uploaded so far.
    pub uploaded: u64,
    /// Bytes downloaded so far.
    pub downloaded: u64,
    /// Bytes left to download (0 = seeder).
    pub left: u64,
    /// The event.
    pub event: Event,
    /// Whether peers are wanted as compact strings (BEP 23). Defaults to true.
    pub compact: bool,
    /// Whether peer ids may be left out of a non-compact answer.
    pub no_peer_id: bool,
    /// How many peers the client wants, when it said so.
    pub numwant: Option<u32>,
    /// The client's `key`, up to 8 bytes as sent (0-padded), when given.
    pub key: Option<[u8; 8]>,
    /// BEP 7: an IPv6 address (and optionally port) the client also listens on.
    pub ipv6: Option<(Ipv6Addr, Option<u16>)>,
    /// BEP 3's `ip`: the address the client says it has, when it is an IP address (a DNS
    /// name, which BEP 3 also allows, is left out).
    pub ip: Option<IpAddr>,
}

/// Splits a query string into `(key, value)` pairs, raw (not decoded).
pub fn pairs(query: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    query
        .split(|&b| b == b'&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.iter().position(|&b| b == b'=') {
            Some(i) => (&p[..i], &p[i + 1..]),
            None => (p, &b""[..]),
        })
}

fn hex_val(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Percent-decodes `src` into `dst`, returning the decoded length; `None` when the input is
/// malformed or does not fit.
pub fn percent_decode(src: &[u8], dst: &mut [u8]) -> Option<usize> {
    let mut i = 0;
    let mut n = 0;
    while i < src.len() {
        let b = match src[i] {
            b'%' => {
                let hi = hex_val(*src.get(i + 1)?)?;
                let lo = hex_val(*src.get(i + 2)?)?;
                i += 3;
                hi << 4 | lo
            }
            b'+' => {
                i += 1;
                b' '
            }
            b => {
                i += 1;
                b
            }
        };
        *dst.get_mut(n)? = b;
        n += 1;
    }
    Some(n)
}

/// Decodes a value that must be exactly 20 bytes.
pub fn decode_id20(src: &[u8]) -> Option<Id20> {
    let mut out = [0u8; 20];
    (percent_decode(src, &mut out)? == 20).then_some(out)
}

fn parse_u64(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 20 || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    s.iter().try_fold(0u64, |n, &d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// Parses `numwant`: negative values (some clients send -1) mean "the default".
fn parse_numwant(s: &[u8]) -> Result<Option<u32>, &'static str> {
    if let Some(rest) = s.strip_prefix(b"-") {
        return parse_u64(rest).map(|_| None).ok_or("malformed numwant");
    }
    parse_u64(s)
        .map(|n| Some(n.min(u64::from(u32::MAX)) as u32))
        .ok_or("malformed numwant")
}

fn parse_ipv6(s: &[u8]) -> Option<(Ipv6Addr, Option<u16>)> {
    let mut buf = [0u8; 64];
    let n = percent_decode(s, &mut buf)?;
    let text = std::str::from_utf8(&buf[..n]).ok()?;
    if let Some(rest) = text.strip_prefix('[') {
        let (addr, tail) = rest.split_once(']')?;
        let addr: Ipv6Addr = addr.parse().ok()?;
        let port = match tail.strip_prefix(':') {
            Some(p) => Some(p.parse::<u16>().ok().filter(|&p| p != 0)?),
            None if tail.is_empty() => None,
            None => return None,
        };
        return Some((addr, port));
    }
    text.parse().ok().map(|a| (a, None))
}

fn parse_ip(s: &[u8]) -> Option<IpAddr> {
    let mut buf = [0u8; 64];
    let n = percent_decode(s, &mut buf)?;
    let text = std::str::from_utf8(&buf[..n]).ok()?;
    let text = text
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .unwrap_or(text);
    text.parse().ok()
}

/// Whether `ip` is a global unicast address a peer may be reached at: not loopback,
/// unspecified, private, shared (carrier-grade NAT), link-local, multicast, broadcast,
/// reserved, benchmarking or documentation space, and for IPv6 inside 2000::/3 but not in its
/// documentation, Teredo/ORCHID (2001::/23) or 6to4-of-private ranges; v4-mapped and other
/// embedded forms are refused. Client-supplied addresses (`ip=`, `ipv6=`) must pass this,
/// or anyone could make a swarm send its peers to a third party (or to the tracker's own
/// network).
pub fn is_global_unicast(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            !(a == 0
                || a == 10
                || a == 127
                || a >= 224
                || (a == 100 && (64..128).contains(&b))
                || (a == 169 && b == 254)
                || (a == 172 && (16..32).contains(&b))
                || (a == 192 && b == 168)
                || (a == 192 && b == 0 && (c == 0 || c == 2))
                || (a == 198 && (b == 18 || b == 19))
                || (a == 198 && b == 51 && c == 100)
                || (a == 203 && b == 0 && c == 113))
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            let global = (s[0] & 0xe000) == 0x2000;
            let documentation = (s[0] == 0x2001 && s[1] == 0x0db8) || (s[0] & 0xfff0) == 0x3ff0;
            let special = s[0] == 0x2001 && s[1] < 0x0200;
            let six_to_four = s[0] == 0x2002
                && !is_global_unicast(IpAddr::V4(std::net::Ipv4Addr::new(
                    (s[1] >> 8) as u8,
                    s[1] as u8,
                    (s[2] >> 8) as u8,
                    s[2] as u8,
                )));
            global && !documentation && !special && !six_to_four
        }
    }
}

/// Parses an announce query. The error is the `failure reason` to send.
pub fn parse_announce(query: &[u8]) -> Result<Announce, &'static str> {
    let mut info_hash = None;
    let mut peer_id = None;
    let mut port = None;
    let mut a = Announce {
        info_hash: [0; 20],
        peer_id: [0; 20],
        port: 0,
        uploaded: 0,
        downloaded: 0,
        left: 0,
        event: Event::None,
        compact: true,
        no_peer_id: false,
        numwant: None,
        key: None,
        ipv6: None,
        ip: None,
    };
    for (k, v) in pairs(query) {
        match k {
            b"info_hash" => info_hash = Some(decode_id20(v).ok_or("malformed info_hash")?),
            b"peer_id" => peer_id = Some(decode_id20(v).ok_or("malformed peer_id")?),
            b"port" => {
                let p = parse_u64(v).ok_or("malformed port")?;
                port = Some(
                    u16::try_from(p)
                        .ok()
                        .filter(|&p| p != 0)
                        .ok_or("invalid port")?,
                );
            }
            b"uploaded" => a.uploaded = parse_u64(v).ok_or("malformed uploaded")?,
            b"downloaded" => a.downloaded = parse_u64(v).ok_or("malformed downloaded")?,
            b"left" => a.left = parse_u64(v).ok_or("malformed left")?,
            b"event" => {
                a.event = match v {
                    b"" | b"empty" => Event::None,
                    b"started" => Event::Started,
                    b"stopped" => Event::Stopped,
                    b"completed" => Event::Completed,
                    b"paused" => Event::Paused,
                    _ => return Err("unknown event"),
                }
            }
            b"compact" => a.compact = v != b"0",
            b"no_peer_id" => a.no_peer_id = v != b"0",
            b"numwant" => a.numwant = parse_numwant(v)?,
            b"key" => {
                let mut key = [0u8; 8];
                let mut long = [0u8; 64];
                let n = percent_decode(v, &mut long).ok_or("malformed key")?;
                let n = n.min(8);
                key[..n].copy_from_slice(&long[..n]);
                a.key = Some(key);
            }
            b"ipv6" => a.ipv6 = Some(parse_ipv6(v).ok_or("malformed ipv6")?),
            b"ip" => a.ip = parse_ip(v),
            _ => {}
        }
    }
    a.info_hash = info_hash.ok_or("missing info_hash")?;
    a.peer_id = peer_id.ok_or("missing peer_id")?;
    a.port = port.ok_or("missing port")?;
    Ok(a)
}

/// Parses the `info_hash` parameters of a scrape into `out` (cleared first), at most `max`.
pub fn parse_scrape(query: &[u8], max: usize, out: &mut Vec<Id20>) -> Result<(), &'static str> {
    out.clear();
    for (k, v) in pairs(query) {
        if k == b"info_hash" {
            if out.len() == max {
                return Err("too many info hashes in one scrape");
            }
            out.push(decode_id20(v).ok_or("malformed info_hash")?);
        }
    }
    Ok(())
}

/// Appends `bytes` percent-encoded (unreserved characters as they are).
pub fn percent_encode(out: &mut Vec<u8>, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in bytes {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
}

/// Appends an announce query (client side), without the leading `?`.
pub fn write_announce(out: &mut Vec<u8>, a: &Announce) {
    out.extend_from_slice(b"info_hash=");
    percent_encode(out, &a.info_hash);
    out.extend_from_slice(b"&peer_id=");
    percent_encode(out, &a.peer_id);
    let num = |out: &mut Vec<u8>, name: &[u8], n: u64| {
        out.extend_from_slice(name);
        out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    };
    num(out, b"&port=", u64::from(a.port));
    num(out, b"&uploaded=", a.uploaded);
    num(out, b"&downloaded=", a.downloaded);
    num(out, b"&left=", a.left);
    if let Some(n) = a.numwant {
        num(out, b"&numwant=", u64::from(n));
    }
    out.extend_from_slice(if a.compact {
        b"&compact=1"
    } else {
        b"&compact=0"
    });
    if a.no_peer_id {
        out.extend_from_slice(b"&no_peer_id=1");
    }
    let event: &[u8] = match a.event {
        Event::None => b"",
        Event::Started => b"&event=started",
        Event::Stopped => b"&event=stopped",
        Event::Completed => b"&event=completed",
        Event::Paused => b"&event=paused",
    };
    out.extend_from_slice(event);
    if let Some(key) = a.key {
        out.extend_from_slice(b"&key=");
        percent_encode(out, &key);
    }
    if let Some(ip) = a.ip {
        out.extend_from_slice(b"&ip=");
        percent_encode(out, ip.to_string().as_bytes());
    }
    if let Some((addr, port)) = a.ipv6 {
        out.extend_from_slice(b"&ipv6=");
        let text = match port {
            Some(p) => format!("[{addr}]:{p}"),
            None => addr.to_string(),
        };
        percent_encode(out, text.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_global_unicast_addresses_pass() {
        for ok in [
            "8.8.8.8",
            "1.1.1.1",
            "203.0.114.9",
            "2a00:1450::1",
            "2606:4700::1111",
        ] {
            assert!(is_global_unicast(ok.parse().unwrap()), "{ok}");
        }
        for bad in [
            "0.0.0.0",
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "100.64.0.1",
            "169.254.1.1",
            "224.0.0.1",
            "239.1.1.1",
            "255.255.255.255",
            "240.0.0.1",
            "192.0.2.1",
            "198.51.100.7",
            "203.0.113.5",
            "198.18.0.1",
            "192.0.0.8",
            "::",
            "::1",
            "ff02::1",
            "fe80::1",
            "fc00::1",
            "fd12::1",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2001:db8::1",
            "3fff::1",
            "2001::1",
            "2002:7f00:1::1",
            "2002:c0a8:101::1",
        ] {
            assert!(!is_global_unicast(bad.parse().unwrap()), "{bad}");
        }
        assert!(is_global_unicast("2002:808:808::1".parse().unwrap()));
    }

    #[test]
    fn ip_parameter_takes_addresses_and_leaves_names_out() {
        let base = b"info_hash=aaaaaaaaaaaaaaaaaaaa&peer_id=bbbbbbbbbbbbbbbbbbbb&port=1";
        let with = |ip: &str| {
            let mut q = base.to_vec();
            q.extend_from_slice(b"&ip=");
            q.extend_from_slice(ip.as_bytes());
            parse_announce(&q).unwrap().ip
        };
        assert_eq!(with("8.8.8.8"), Some("8.8.8.8".parse().unwrap()));
        assert_eq!(
            with("%5B2a00%3A1450%3A%3A1%5D"),
            Some("2a00:1450::1".parse().unwrap())
        );
        assert_eq!(with("tracker.example"), None);
        assert_eq!(with("%ZZ"), None);
    }
    use proptest::prelude::*;

    fn sample() -> Announce {
        Announce {
            info_hash: [0xab; 20],
            peer_id: *b"-HP0001-abcdefghijkl",
            port: 6881,
            uploaded: 1,
            downloaded: 2,
            left: 3,
            event: Event::Started,
            compact: true,
            no_peer_id: false,
            numwant: Some(30),
            key: Some(*b"k1k2k3k4"),
            ipv6: Some(("::1".parse().unwrap(), Some(6882))),
            ip: Some("203.0.114.9".parse().unwrap()),
        }
    }

    #[test]
    fn round_trip() {
        let a = sample();
        let mut q = Vec::new();
        write_announce(&mut q, &a);
        assert_eq!(parse_announce(&q), Ok(a));
    }

    #[test]
    fn errors_name_the_parameter() {
        let base = "peer_id=-HP0001-abcdefghijkl&port=1";
        assert_eq!(parse_announce(base.as_bytes()), Err("missing info_hash"));
        let ih = "info_hash=%ab%ab";
        assert_eq!(
            parse_announce(format!("{ih}&{base}").as_bytes()),
            Err("malformed info_hash")
        );
        let ok_ih = "info_hash=".to_string() + &"%AB".repeat(20);
        let cases = [
            ("peer_id=x&port=1", "malformed peer_id"),
            ("port=1", "missing peer_id"),
            ("peer_id=-HP0001-abcdefghijkl", "missing port"),
            ("peer_id=-HP0001-abcdefghijkl&port=70000", "invalid port"),
            ("peer_id=-HP0001-abcdefghijkl&port=0", "invalid port"),
            ("peer_id=-HP0001-abcdefghijkl&port=x", "malformed port"),
            (
                "peer_id=-HP0001-abcdefghijkl&port=1&left=-1",
                "malformed left",
            ),
            (
                "peer_id=-HP0001-abcdefghijkl&port=1&uploaded=99999999999999999999999",
                "malformed uploaded",
            ),
            (
                "peer_id=-HP0001-abcdefghijkl&port=1&event=bogus",
                "unknown event",
            ),
            (
                "peer_id=-HP0001-abcdefghijkl&port=1&numwant=x",
                "malformed numwant",
            ),
            (
                "peer_id=-HP0001-abcdefghijkl&port=1&ipv6=zz",
                "malformed ipv6",
            ),
        ];
        for (q, want) in cases {
            assert_eq!(
                parse_announce(format!("{ok_ih}&{q}").as_bytes()),
                Err(want),
                "{q}"
            );
        }
        let a = parse_announce(
            format!("{ok_ih}&peer_id=-HP0001-abcdefghijkl&port=1&numwant=-1").as_bytes(),
        )
        .unwrap();
        assert_eq!(a.numwant, None);
        assert!(a.compact);
    }

    #[test]
    fn scrape_many() {
        let mut q = Vec::new();
        for i in 0..3u8 {
            q.extend_from_slice(b"info_hash=");
            percent_encode(&mut q, &[i; 20]);
            q.push(b'&');
        }
        let mut out = Vec::new();
        parse_scrape(&q, 10, &mut out).unwrap();
        assert_eq!(out, vec![[0; 20], [1; 20], [2; 20]]);
        assert_eq!(
            parse_scrape(&q, 2, &mut out),
            Err("too many info hashes in one scrape")
        );
        parse_scrape(b"", 2, &mut out).unwrap();
        assert!(out.is_empty());
    }

    proptest! {
        #[test]
        fn never_panics(input in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = parse_announce(&input);
            let mut out = Vec::new();
            let _ = parse_scrape(&input, 5, &mut out);
        }

        #[test]
        fn ids_round_trip(id in any::<[u8; 20]>()) {
            let mut q = Vec::new();
            percent_encode(&mut q, &id);
            prop_assert_eq!(decode_id20(&q), Some(id));
        }
    }
}
