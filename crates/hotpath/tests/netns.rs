//! Attacks from many client addresses, over real sockets. Loopback gives one IPv6 address
//! (::1), so each test runs again inside a network namespace of its own (`unshare --net`,
//! as root or in a user namespace): its loopback carries the IPv6 addresses the attack comes
//! from, and traffic still goes only to ::1 and 127.0.0.1, inside the namespace. Nothing of
//! the host's network is touched, and the namespace goes with the process.

mod common;

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpStream};
use std::time::Duration;

use common::netns::outside;
use common::{announce, announce_target, failure, start, test_config, Client};
use hotpath_wire::query::Event;

/// The server's HTTP listeners inside the namespace (nothing else listens there).
const V4: &str = "127.0.0.1:6969";
const V6: &str = "[::1]:6969";

/// The test config with HTTP on [`V4`] and [`V6`].
fn dual_stack_config() -> hotpath_config::Config {
    let mut c = test_config();
    c.listen.http = vec![V4.parse().unwrap(), V6.parse().unwrap()];
    c
}

/// A TCP connection from the address `from` to `to`.
fn connect_from(from: IpAddr, to: &str) -> std::io::Result<TcpStream> {
    let domain = match from {
        IpAddr::V4(_) => socket2::Domain::IPV4,
        IpAddr::V6(_) => socket2::Domain::IPV6,
    };
    let s = socket2::Socket::new(domain, socket2::Type::STREAM, None)?;
    s.bind(&SocketAddr::new(from, 0).into())?;
    s.connect(&to.parse::<SocketAddr>().unwrap().into())?;
    Ok(s.into())
}

/// A connection from `from` to `to` that sent a health request: `Some` when it was answered
/// (the server holds it), `None` when the server closed it at once.
fn held(from: IpAddr, to: &str) -> Option<TcpStream> {
    let mut s = connect_from(from, to).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        .ok()?;
    let mut b = [0u8; 512];
    match s.read(&mut b) {
        Ok(n) if n > 0 => {
            assert!(b.starts_with(b"HTTP/1.1 200"), "{:?}", &b[..n]);
            Some(s)
        }
        _ => None,
    }
}

/// `n` /64s of the /48 2001:db8:<net48>::/48, host ::1 in each.
fn nets(net48: u16, n: u16) -> Vec<Ipv6Addr> {
    (0..n)
        .map(|i| Ipv6Addr::new(0x2001, 0xdb8, net48, i, 0, 0, 0, 1))
        .collect()
}

/// The attack's addresses, twenty /64s of 2001:db8:7::/48, and one of another /48, when the
/// test `name` runs inside its namespace; `None` outside, once the run inside passed.
fn inside(name: &str) -> Option<(Vec<Ipv6Addr>, Ipv6Addr)> {
    let attack = nets(7, 20);
    let fresh = Ipv6Addr::new(0x2001, 0xdb8, 8, 0, 0, 0, 0, 1);
    let mut all = attack.clone();
    all.push(fresh);
    (!outside(name, &all)).then_some((attack, fresh))
}

/// Regression: 70 IPv6 /64s of 256 idle connections each took all 16,384 connection slots,
/// and IPv4 and fresh IPv6 clients were reset. The /64s of one /48 now share
/// `server.max_connections_per_48`: the same attack, scaled to this test's slots (2 workers
/// of 64, 16 per /64, 64 per /48, from 20 /64s of one /48), leaves an IPv4 client and one
/// from another /48 served. The control run, with the /48's cap lifted, shows the attack
/// does take every slot here.
#[test]
fn many_64s_of_one_48_leave_others_a_connection() {
    let Some((attack, fresh)) = inside("many_64s_of_one_48_leave_others_a_connection") else {
        return;
    };
    // (cap per /48, connections the attack holds, whether others are served)
    for (per_48, holds, others_served) in [(64, 64, true), (1 << 20, 128, false)] {
        let mut c = dual_stack_config();
        c.server.max_connections_per_worker = 64;
        c.server.max_connections_per_ip = 16;
        c.server.max_connections_per_48 = per_48;
        let server = start(&c);
        let mut flood = Vec::new();
        for net in &attack {
            for _ in 0..16 {
                flood.extend(held(IpAddr::V6(*net), V6));
            }
        }
        assert_eq!(
            flood.len(),
            holds,
            "held for the attack (cap per /48 {per_48})"
        );
        let ipv4 = held("127.0.0.1".parse().unwrap(), V4).is_some();
        let ipv6 = held(IpAddr::V6(fresh), V6).is_some();
        assert_eq!(
            (ipv4, ipv6),
            (others_served, others_served),
            "IPv4 and another /48 served (cap per /48 {per_48})"
        );
        drop(flood);
        server.shutdown().unwrap();
    }
}

/// The /64s of one /48 share its budgets in the tracker too: made-up torrents they are alone
/// in (`tracker.max_torrents_per_48`), and peers in one swarm (`tracker.max_peers_per_ip_48`),
/// so a customer's many /64s fill neither the table nor a swarm; another /48 and an IPv4
/// client still make torrents and join the swarm, over HTTP.
#[test]
fn many_64s_of_one_48_hold_one_48s_share_of_torrents_and_swarms() {
    let Some((attack, fresh)) =
        inside("many_64s_of_one_48_hold_one_48s_share_of_torrents_and_swarms")
    else {
        return;
    };
    let mut c = dual_stack_config();
    c.tracker.max_torrents_per_address = 10;
    c.tracker.max_torrents_per_48 = 30;
    c.tracker.max_peers_per_ip = 16;
    c.tracker.max_peers_per_ip_48 = 40;
    let server = start(&c);
    // The shared torrent, made by someone else.
    let mut seed = Client::from_stream(connect_from("127.0.0.2".parse().unwrap(), V4).unwrap());
    let a = announce([1; 20], 99, 6881, 0, Event::Started);
    assert_eq!(failure(&seed.get(&announce_target(&a)).body), None);
    let (mut torrents, mut peers) = (0, 0);
    for (i, net) in attack.iter().enumerate() {
        let mut c = Client::from_stream(connect_from(IpAddr::V6(*net), V6).unwrap());
        for t in 0..10u8 {
            let mut hash = [0x80; 20];
            hash[..2].copy_from_slice(&[i as u8, t]);
            let a = announce(hash, 1, 6881, 100, Event::Started);
            match failure(&c.get(&announce_target(&a)).body) {
                None => torrents += 1,
                Some(f) if f.starts_with("too many torrents from your address") => {}
                Some(f) => panic!("{f}"),
            }
        }
        // Sixteen ports each in one shared torrent.
        for port in 0..16u16 {
            let a = announce([1; 20], port as u8, 7000 + port, 100, Event::Started);
            match failure(&c.get(&announce_target(&a)).body) {
                None => peers += 1,
                Some(f) if f.starts_with("too many peers from your address") => {}
                Some(f) => panic!("{f}"),
            }
        }
    }
    assert_eq!((torrents, peers), (30, 40), "the /48's shares");
    for (from, to) in [(IpAddr::V6(fresh), V6), ("127.0.0.1".parse().unwrap(), V4)] {
        let mut c = Client::from_stream(connect_from(from, to).unwrap());
        for hash in [[1; 20], [2; 20]] {
            let a = announce(hash, 9, 6881, 100, Event::Started);
            assert_eq!(failure(&c.get(&announce_target(&a)).body), None, "{from}");
        }
    }
    server.shutdown().unwrap();
}
