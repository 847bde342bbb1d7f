//! The network edge as an attacker tries it: mixed IPv4/IPv6 UDP batches, long pipelines,
//! floods from one address, clients that never read. Every test here failed on the build
//! before these limits existed.

mod common;

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::*;
use hotpath_wire::query::Event;
use hotpath_wire::udp::{self, Response};

/// A TCP connection to `to` from the local address `from` (any address of 127.0.0.0/8).
fn connect_from(from: IpAddr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    s.bind(&SocketAddr::new(from, 0).into())?;
    s.connect_timeout(&to.into(), Duration::from_secs(2))?;
    Ok(s.into())
}

/// Regression: recvmmsg slots kept the address length of their last use, so an IPv6 sender
/// read into a slot an IPv4 datagram had used was cut to 16 bytes and answered at a wrong
/// address (with one worker, every such announce failed).
#[test]
fn ipv4_and_ipv6_senders_interleaved_in_one_worker_get_their_own_answers() {
    let mut cfg = test_config();
    cfg.server.workers = 1;
    cfg.listen.udp = vec!["127.0.0.1:0".parse().unwrap(), "[::1]:0".parse().unwrap()];
    let server = start(&cfg);
    let udp = server.addresses().udp.clone();
    let (v4, v6) = (udp[0], udp[1]);
    assert!(v4.is_ipv4() && v6.is_ipv6());
    let mut clients: Vec<Udp> = (0..8)
        .map(|i| Udp::new(if i % 2 == 0 { v4 } else { v6 }))
        .collect();
    let hash = [0x5a; 20];
    for round in 0..20u16 {
        for (i, c) in clients.iter_mut().enumerate() {
            // Every exchange goes through the same worker's batch slots, the families
            // alternating; a wrong source address gets no answer (or a bad connection id).
            c.connect();
            let r = c.announce(hash, i as u8, 7000 + round, 1, Event::None);
            assert!(
                matches!(udp::parse_response(&r), Ok(Response::Announce { .. })),
                "round {round}, client {i} ({}): {r:?}",
                c.server
            );
        }
    }
    server.shutdown().unwrap();
}

/// Regression: reading stopped at the output cap and no edge-triggered event came back, so a
/// long pipeline stalled after ~256 KB of answers until the connection was reset.
#[test]
fn ten_thousand_pipelined_requests_in_one_write_are_all_answered_in_order() {
    let server = start(&test_config());
    let addr = server.http_addr().unwrap();
    let stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let n = 10_000u32;
    let mut all = Vec::new();
    for i in 0..n {
        let mut hash = [0u8; 20];
        hash[..4].copy_from_slice(&i.to_be_bytes());
        all.extend_from_slice(
            format!("GET {} HTTP/1.1\r\nHost: t\r\n\r\n", scrape_target(&[hash])).as_bytes(),
        );
    }
    // Written from another thread: the server stops reading while its answers wait.
    let mut writer = stream.try_clone().unwrap();
    let sent = std::thread::spawn(move || writer.write_all(&all));
    let mut c = Client::from_stream(stream);
    for i in 0..n {
        let r = c
            .read()
            .unwrap_or_else(|| panic!("answer {i} of {n} never came"));
        assert_eq!(r.status, 200);
        let mut hash = [0u8; 20];
        hash[..4].copy_from_slice(&i.to_be_bytes());
        let at = r.body.windows(20).position(|w| w == hash);
        assert!(at.is_some(), "answer {i} is not for request {i}");
    }
    sent.join().unwrap().unwrap();
    server.shutdown().unwrap();
}

/// Regression: one address could hold every connection slot (20k idle connections locked
/// everyone else out); now it holds `server.max_connections_per_ip` and others still connect.
#[test]
fn one_address_holds_at_most_its_share_of_connections() {
    let mut cfg = test_config();
    cfg.server.max_connections_per_ip = 40;
    let server = start(&cfg);
    let addr = server.http_addr().unwrap();
    let attacker: IpAddr = "127.0.0.2".parse().unwrap();
    let mut held = Vec::new();
    for _ in 0..40 {
        let mut s = connect_from(attacker, addr).unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        held.push(s);
    }
    // Each of the 40 is served.
    for s in &mut held {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut b = [0u8; 512];
        assert!(s.read(&mut b).unwrap() > 0);
    }
    // The 41st from that address is closed at once, without an answer.
    let mut extra = connect_from(attacker, addr).unwrap();
    extra
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let _ = extra.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n");
    let mut b = [0u8; 512];
    assert!(matches!(extra.read(&mut b), Ok(0) | Err(_)));
    // Another address is served.
    let mut c = Client::connect(addr);
    assert_eq!(c.get("/healthz").status, 200);
    let mut admin = Client::connect(server.admin_addr().unwrap());
    let metrics = String::from_utf8(admin.get("/metrics").body).unwrap();
    assert!(
        metrics.contains("hotpath_connections_refused_per_ip_total 1"),
        "{metrics}"
    );
    // Closing one frees a place for that address.
    drop(held.pop());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut s = connect_from(attacker, addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        if matches!(s.read(&mut b), Ok(n) if n > 0) {
            break;
        }
        assert!(Instant::now() < deadline, "the freed place never came back");
        std::thread::sleep(Duration::from_millis(20));
    }
    server.shutdown().unwrap();
}
