//! HTTPS listeners (rustls): announces over TLS 1.3 and 1.2 with ALPN, resumption, the
//! certificate read again on a reload, garbage refused, and WebTorrent over wss://.

mod common;

use std::io::Write;
use std::time::Duration;

use common::tls::{client_config, connect, get, self_signed};
use common::ws::{id_of, wt_announce, Ws};
use common::*;
use hotpath_server::listen::ListenerKind;
use hotpath_wire::query::Event;
use hotpath_wire::webtorrent::{self as wt, Id};

const H: [u8; 20] = [0x5a; 20];
const WAIT: Duration = Duration::from_secs(5);

fn tls_server() -> (hotpath_server::RunningServer, Vec<u8>, String, String) {
    let mut cfg = test_config();
    let dir = std::path::PathBuf::from(&cfg.store.data_dir);
    let (cert, key, pem) = self_signed(&dir, "server");
    cfg.listen.https = vec!["127.0.0.1:0".parse().unwrap()];
    cfg.tls.cert_file = cert.clone();
    cfg.tls.key_file = key.clone();
    (start(&cfg), pem, cert, key)
}

fn https(server: &hotpath_server::RunningServer) -> std::net::SocketAddr {
    server
        .tcp_addr(ListenerKind::Https)
        .expect("an HTTPS listener")
}

fn metric(server: &hotpath_server::RunningServer, name: &str) -> f64 {
    metric_at(server.tcp_addr(ListenerKind::Admin).unwrap(), name).unwrap_or(0.0)
}

#[test]
fn announces_over_tls13_and_tls12_keep_alive_with_alpn_and_resumption() {
    let (server, pem, _, _) = tls_server();
    let addr = https(&server);
    for version in [&rustls::version::TLS13, &rustls::version::TLS12] {
        let config = client_config(&pem, Some(version));
        let mut s = connect(addr, &pem, Some(config.clone()));
        for (n, port) in [(1u8, 7001u16), (2, 7002)] {
            let (status, body) = get(
                &mut s,
                &announce_target(&announce(H, n, port, 10, Event::Started)),
            );
            assert_eq!(status, 200);
            assert!(
                failure(&body).is_none(),
                "{}",
                String::from_utf8_lossy(&body)
            );
        }
        assert_eq!(s.conn.alpn_protocol(), Some(&b"http/1.1"[..]));
        assert_eq!(s.conn.protocol_version(), Some(version.version));
        assert_eq!(s.conn.handshake_kind(), Some(rustls::HandshakeKind::Full));
        // A second connection with the same client config resumes the session.
        let mut again = connect(addr, &pem, Some(config));
        let (status, _) = get(&mut again, &scrape_target(&[H]));
        assert_eq!(status, 200);
        assert_eq!(
            again.conn.handshake_kind(),
            Some(rustls::HandshakeKind::Resumed),
            "{version:?}"
        );
    }
    wait_until("handshakes counted", WAIT, || {
        metric(&server, "hotpath_tls_handshakes_total{result=\"full\"}") == 2.0
            && metric(&server, "hotpath_tls_handshakes_total{result=\"resumed\"}") == 2.0
    });
    // The plain listener is unchanged beside it.
    let r = Client::connect(server.http_addr().unwrap()).get(&scrape_target(&[H]));
    assert_eq!(r.status, 200);
    server.shutdown().unwrap();
}

#[test]
fn a_reload_takes_a_new_certificate_and_a_broken_one_keeps_the_old() {
    let (server, old_pem, cert, key) = tls_server();
    let addr = https(&server);
    let mut open = connect(addr, &old_pem, None);
    assert_eq!(get(&mut open, &scrape_target(&[H])).0, 200);
    // A broken pair: the reload keeps the one in use.
    std::fs::write(&cert, "not a certificate").unwrap();
    server.reload();
    let mut s = connect(addr, &old_pem, None);
    assert_eq!(get(&mut s, &scrape_target(&[H])).0, 200);
    // A renewed pair (written where the old one was): new connections get it.
    let dir = std::path::Path::new(&cert).parent().unwrap();
    let (new_cert, new_key, new_pem) = self_signed(dir, "renewed");
    std::fs::rename(new_cert, &cert).unwrap();
    std::fs::rename(new_key, &key).unwrap();
    server.reload();
    let mut s = connect(addr, &new_pem, None);
    assert_eq!(get(&mut s, &scrape_target(&[H])).0, 200);
    // A client that trusts only the old certificate is refused now.
    let mut stale = connect(addr, &old_pem, None);
    let refused = stale
        .write_all(b"GET /scrape HTTP/1.1\r\n\r\n")
        .and_then(|_| stale.flush());
    let mut byte = [0u8; 1];
    let read = std::io::Read::read(&mut stale, &mut byte);
    assert!(
        refused.is_err() || read.is_err(),
        "the old certificate is still served"
    );
    // The connection open before the reloads goes on.
    assert_eq!(get(&mut open, &scrape_target(&[H])).0, 200);
    server.shutdown().unwrap();
}

#[test]
fn garbage_and_plain_http_on_the_tls_port_are_refused_and_counted() {
    let (server, pem, _, _) = tls_server();
    let addr = https(&server);
    for junk in [
        &b"GET /announce HTTP/1.1\r\nHost: x\r\n\r\n"[..],
        &[0x16, 0x03, 0x01, 0x00, 0x05, 1, 2, 3, 4, 5][..],
        &[0xff; 64][..],
    ] {
        let mut c = Client::connect(addr);
        c.send(junk);
        assert!(c.closed_within(WAIT), "{junk:?}");
    }
    wait_until("failures counted", WAIT, || {
        metric(&server, "hotpath_tls_handshakes_total{result=\"failed\"}") == 3.0
    });
    // A proper client is served as before.
    let mut s = connect(addr, &pem, None);
    assert_eq!(get(&mut s, &scrape_target(&[H])).0, 200);
    server.shutdown().unwrap();
}

#[test]
fn pipelined_requests_past_a_record_are_all_answered_and_a_stalled_handshake_is_cut() {
    let mut cfg = test_config();
    cfg.server.header_timeout_secs = 1;
    let dir = std::path::PathBuf::from(&cfg.store.data_dir);
    let (cert, key, pem) = self_signed(&dir, "server");
    cfg.listen.https = vec!["127.0.0.1:0".parse().unwrap()];
    cfg.tls.cert_file = cert;
    cfg.tls.key_file = key;
    let server = start(&cfg);
    let addr = https(&server);
    // A handshake that stops halfway (a record header promising 500 bytes, then 50 of them),
    // and one that never starts: both cut at the header timeout, whatever they hold.
    let mut stalled = Client::connect(addr);
    let mut partial = vec![0x16, 0x03, 0x01, 0x01, 0xf4, 0x01, 0x00, 0x01, 0xf0];
    partial.resize(55, 0);
    stalled.send(&partial);
    let mut silent = Client::connect(addr);
    // 400 scrapes in one write: about 50 KB of requests, so several TLS records, read
    // through the connection's 4 KiB buffer; the answers, about 60 KB, leave as several.
    let mut s = connect(addr, &pem, None);
    let one = format!(
        "GET {} HTTP/1.1\r\nHost: localhost\r\n\r\n",
        scrape_target(&[H])
    );
    let n = 400;
    s.write_all(one.repeat(n).as_bytes()).unwrap();
    s.flush().unwrap();
    let mut got = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let answers = |got: &[u8]| got.windows(15).filter(|w| w == b"HTTP/1.1 200 OK").count();
    while answers(&got) < n && std::time::Instant::now() < deadline {
        let mut buf = [0u8; 16_384];
        match std::io::Read::read(&mut s, &mut buf) {
            Ok(0) => break,
            Ok(k) => got.extend_from_slice(&buf[..k]),
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(answers(&got), n);
    // The header timeout is 1 s; the bound only keeps a failure from hanging the test (the
    // sweep may run late on a loaded machine).
    let guard = Duration::from_secs(30);
    assert!(
        stalled.closed_within(guard),
        "a stalled handshake stays open"
    );
    assert!(
        silent.closed_within(guard),
        "a silent connection stays open"
    );
    // The served connection goes on.
    assert_eq!(get(&mut s, &scrape_target(&[H])).0, 200);
    server.shutdown().unwrap();
}

#[test]
fn webtorrent_peers_meet_over_wss() {
    let (server, pem, _, _) = tls_server();
    let addr = https(&server);
    let h = Id(H);
    let peer = |n: u8| Id([n; 20]);
    let mut seeder = Ws::connect_tls(addr, "/announce", &pem);
    seeder.announce(&wt_announce(h, peer(1), 0, &[], wt::Event::Started));
    assert_eq!(seeder.recv_json(WAIT).unwrap()["complete"], 1);
    let mut leecher = Ws::connect_tls(addr, "/announce", &pem);
    leecher.announce(&wt_announce(
        h,
        peer(2),
        9,
        &[Id([7; 20])],
        wt::Event::Started,
    ));
    leecher.recv_json(WAIT).unwrap();
    let offer = seeder.recv_json(WAIT).expect("the offer over wss");
    assert_eq!(id_of(&offer["peer_id"]), peer(2));
    seeder.answer(&wt::Answer {
        info_hash: h,
        peer_id: peer(1),
        to_peer_id: peer(2),
        offer_id: Id([7; 20]),
        answer: wt::Sdp {
            kind: "answer".into(),
            sdp: "v=0\r\n".into(),
        },
    });
    let answer = leecher.recv_json(WAIT).expect("the answer over wss");
    assert_eq!(id_of(&answer["peer_id"]), peer(1));
    server.shutdown().unwrap();
}

#[test]
fn an_https_listener_without_a_usable_certificate_does_not_start_and_says_which_key() {
    let mut cfg = test_config();
    cfg.listen.https = vec!["127.0.0.1:0".parse().unwrap()];
    cfg.tls.cert_file = "/nonexistent/cert.pem".into();
    cfg.tls.key_file = "/nonexistent/key.pem".into();
    let err = hotpath::start(&cfg).err().expect("refused").to_string();
    assert!(err.contains("tls.cert_file"), "{err}");
}
