//! The PROXY protocol (HAProxy's, versions 1 and 2): the header a balancer sends first on a
//! connection it opens to a backend, naming the client's address. Only connections from the
//! balancers' networks (`server.proxy_protocol_from`) are read with it; anyone else's header
//! is an ordinary bad request.
//!
//! Version 2 is binary: a 12-byte signature, version and command (`0x21` PROXY, `0x20` LOCAL:
//! the balancer's own connection, a health check), family and transport, a 16-bit length,
//! then the addresses (IPv4: 12 bytes, IPv6: 36) and TLVs, which are skipped. Version 1 is a
//! text line: `PROXY TCP4 <src> <dst> <sport> <dport>\r\n` (or `TCP6`, or `UNKNOWN`), at most
//! 107 bytes. A header longer than [`MAX_V2`] is refused: no balancer sends one that long
//! without TLVs nobody here reads.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The version 2 signature.
pub const SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";
/// The longest version 2 header read (the fixed 16 bytes included).
pub const MAX_V2: usize = 16 + 512;
/// The longest version 1 line (the protocol's own bound).
pub const MAX_V1: usize = 107;

/// What the start of a connection holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// Not all of the header yet.
    Incomplete,
    /// A header of `used` bytes: the client's address, or `None` when the balancer speaks
    /// for itself (LOCAL, UNKNOWN, or a family other than TCP over IPv4 and IPv6).
    Complete {
        /// The client's address and port.
        source: Option<SocketAddr>,
        /// Bytes the header took.
        used: usize,
    },
}

/// Reads a PROXY header (either version) at the start of `buf`.
pub fn parse(buf: &[u8]) -> Result<Header, &'static str> {
    let n = buf.len().min(SIGNATURE.len());
    if buf[..n] == SIGNATURE[..n] {
        return v2(buf);
    }
    let n = buf.len().min(6);
    if buf[..n] == b"PROXY "[..n] {
        return v1(buf);
    }
    Err("a connection from a balancer must start with a PROXY protocol header")
}

fn v2(buf: &[u8]) -> Result<Header, &'static str> {
    if buf.len() < 16 {
        return Ok(Header::Incomplete);
    }
    let (ver_cmd, fam) = (buf[12], buf[13]);
    if ver_cmd >> 4 != 2 {
        return Err("PROXY protocol v2: unknown version");
    }
    let len = usize::from(u16::from_be_bytes([buf[14], buf[15]]));
    let used = 16 + len;
    if used > MAX_V2 {
        return Err("PROXY protocol v2: header too long");
    }
    if buf.len() < used {
        return Ok(Header::Incomplete);
    }
    let body = &buf[16..used];
    let local = match ver_cmd & 0x0f {
        0 => true,
        1 => false,
        _ => return Err("PROXY protocol v2: unknown command"),
    };
    let source = match (local, fam) {
        (true, _) => None,
        // TCP (or UDP: the address is what counts) over IPv4.
        (false, 0x11 | 0x12) => {
            let a: [u8; 12] = body
                .get(..12)
                .ok_or("PROXY protocol v2: IPv4 addresses cut short")?
                .try_into()
                .expect("12 bytes");
            let ip = Ipv4Addr::new(a[0], a[1], a[2], a[3]);
            Some(SocketAddr::new(
                IpAddr::V4(ip),
                u16::from_be_bytes([a[8], a[9]]),
            ))
        }
        (false, 0x21 | 0x22) => {
            let a = body
                .get(..36)
                .ok_or("PROXY protocol v2: IPv6 addresses cut short")?;
            let ip: [u8; 16] = a[..16].try_into().expect("16 bytes");
            let port = u16::from_be_bytes([a[32], a[33]]);
            Some(SocketAddr::new(IpAddr::V6(Ipv6Addr::from(ip)), port))
        }
        // AF_UNSPEC, AF_UNIX: nothing to take.
        (false, _) => None,
    };
    Ok(Header::Complete { source, used })
}

fn v1(buf: &[u8]) -> Result<Header, &'static str> {
    let Some(end) = buf.iter().take(MAX_V1).position(|&b| b == b'\n') else {
        return if buf.len() >= MAX_V1 {
            Err("PROXY protocol v1: line too long")
        } else {
            Ok(Header::Incomplete)
        };
    };
    let line = buf[..end]
        .strip_suffix(b"\r")
        .ok_or("PROXY protocol v1: line must end with CRLF")?;
    let line = std::str::from_utf8(line).map_err(|_| "PROXY protocol v1: not text")?;
    let mut parts = line.split(' ');
    parts.next(); // "PROXY"
    let used = end + 1;
    let family = parts.next().ok_or("PROXY protocol v1: no family")?;
    if family == "UNKNOWN" {
        return Ok(Header::Complete { source: None, used });
    }
    let (src, _dst, sport, _dport) = match (parts.next(), parts.next(), parts.next(), parts.next())
    {
        (Some(a), Some(b), Some(c), Some(d)) if parts.next().is_none() => (a, b, c, d),
        _ => return Err("PROXY protocol v1: expected 4 fields after the family"),
    };
    let ip: IpAddr = match family {
        "TCP4" => IpAddr::V4(
            src.parse()
                .map_err(|_| "PROXY protocol v1: bad IPv4 source")?,
        ),
        "TCP6" => IpAddr::V6(
            src.parse()
                .map_err(|_| "PROXY protocol v1: bad IPv6 source")?,
        ),
        _ => return Err("PROXY protocol v1: unknown family"),
    };
    let port: u16 = sport
        .parse()
        .map_err(|_| "PROXY protocol v1: bad source port")?;
    Ok(Header::Complete {
        source: Some(SocketAddr::new(ip, port)),
        used,
    })
}

/// Writes a version 2 PROXY header for a TCP connection from `source` to `dest` (the
/// balancer's side: for tests, benchmarks and the load generator).
pub fn write_v2(out: &mut Vec<u8>, source: SocketAddr, dest: SocketAddr) {
    out.extend_from_slice(&SIGNATURE);
    out.push(0x21);
    match (source, dest) {
        (SocketAddr::V4(s), SocketAddr::V4(d)) => {
            out.push(0x11);
            out.extend_from_slice(&12u16.to_be_bytes());
            out.extend_from_slice(&s.ip().octets());
            out.extend_from_slice(&d.ip().octets());
            out.extend_from_slice(&s.port().to_be_bytes());
            out.extend_from_slice(&d.port().to_be_bytes());
        }
        (s, d) => {
            let v6 = |a: SocketAddr| match a.ip() {
                IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                IpAddr::V6(v6) => v6,
            };
            out.push(0x21);
            out.extend_from_slice(&36u16.to_be_bytes());
            out.extend_from_slice(&v6(s).octets());
            out.extend_from_slice(&v6(d).octets());
            out.extend_from_slice(&s.port().to_be_bytes());
            out.extend_from_slice(&d.port().to_be_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn v2_round_trips_and_waits_for_the_whole_header() {
        for (src, dst) in [
            ("203.0.113.7:51000", "10.0.0.2:6969"),
            ("[2001:db8::7]:51000", "[2001:db8::1]:6969"),
        ] {
            let mut h = Vec::new();
            write_v2(&mut h, addr(src), addr(dst));
            h.extend_from_slice(b"GET /announce HTTP/1.1\r\n");
            let used = if src.starts_with('[') { 52 } else { 28 };
            assert_eq!(
                parse(&h),
                Ok(Header::Complete {
                    source: Some(addr(src)),
                    used
                })
            );
            for cut in 0..used {
                assert_eq!(parse(&h[..cut]), Ok(Header::Incomplete), "{cut}");
            }
        }
    }

    #[test]
    fn v2_local_tlvs_and_refusals() {
        let mut local = SIGNATURE.to_vec();
        local.extend_from_slice(&[0x20, 0x00, 0, 3, 1, 2, 3]);
        assert_eq!(
            parse(&local),
            Ok(Header::Complete {
                source: None,
                used: 19
            })
        );
        // TLVs after the addresses are skipped.
        let mut h = Vec::new();
        write_v2(&mut h, addr("192.0.2.1:1000"), addr("192.0.2.2:80"));
        h[15] += 5;
        h.extend_from_slice(&[0x04, 0, 2, 9, 9]);
        assert!(matches!(parse(&h), Ok(Header::Complete { used: 33, .. })));
        let mut bad = h.clone();
        bad[12] = 0x31;
        assert!(parse(&bad).is_err());
        let mut bad = h.clone();
        bad[12] = 0x22;
        assert!(parse(&bad).is_err());
        let mut long = h.clone();
        long[14..16].copy_from_slice(&1000u16.to_be_bytes());
        assert!(parse(&long).is_err());
        let mut short = SIGNATURE.to_vec();
        short.extend_from_slice(&[0x21, 0x11, 0, 4, 1, 2, 3, 4]);
        assert!(parse(&short).is_err());
    }

    #[test]
    fn v1_lines() {
        let ok = b"PROXY TCP4 198.51.100.22 203.0.113.7 35646 80\r\nGET";
        assert_eq!(
            parse(ok),
            Ok(Header::Complete {
                source: Some(addr("198.51.100.22:35646")),
                used: 47
            })
        );
        let six = b"PROXY TCP6 2001:db8::1 2001:db8::2 1 2\r\n";
        assert!(matches!(
            parse(six),
            Ok(Header::Complete {
                source: Some(SocketAddr::V6(_)),
                ..
            })
        ));
        assert_eq!(
            parse(b"PROXY UNKNOWN\r\n"),
            Ok(Header::Complete {
                source: None,
                used: 15
            })
        );
        assert_eq!(parse(b"PROXY TCP4 1.2"), Ok(Header::Incomplete));
        assert_eq!(parse(b"PRO"), Ok(Header::Incomplete));
        for bad in [
            &b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n"[..],
            b"PROXY TCP4 1.2.3.999 5.6.7.8 1 2\r\n",
            b"PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 70000 2\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n",
            b"GET / HTTP/1.1\r\n",
            &[b'P'; 200][..],
        ] {
            assert!(parse(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        let mut long = b"PROXY ".to_vec();
        long.extend_from_slice(&[b'x'; 120]);
        assert!(parse(&long).is_err());
    }
}
