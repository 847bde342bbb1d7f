//! The HTTP tracker, the HTTP core's limits and the admin endpoints, against the real server.

mod common;

use std::time::Duration;

use common::*;
use hotpath_wire::query::Event;

const H: [u8; 20] = [0x11; 20];

#[test]
fn seeder_and_leecher_find_each_other() {
    let server = start(&test_config());
    let mut c = Client::connect(server.http_addr().unwrap());
    let seed = c.get(&announce_target(&announce(H, 1, 7001, 0, Event::Started)));
    assert_eq!(seed.status, 200);
    assert_eq!(int(&seed.body, "complete"), 1);
    assert!(
        peers(&seed.body, "peers").is_empty(),
        "a lone seeder gets no peers"
    );
    let leech = c.get(&announce_target(&announce(H, 2, 7002, 100, Event::Started)));
    assert_eq!(peers(&leech.body, "peers"), vec![127, 0, 0, 1, 0x1b, 0x59]);
    assert_eq!(
        (int(&leech.body, "complete"), int(&leech.body, "incomplete")),
        (1, 1)
    );
    let interval = int(&leech.body, "interval");
    assert!((1800..=1980).contains(&interval), "{interval}");
    assert_eq!(int(&leech.body, "min interval"), 900);
    // The seeder re-announces: updated in place, and now it is sent the leecher.
    let seed = c.get(&announce_target(&announce(H, 1, 7001, 0, Event::None)));
    assert_eq!(peers(&seed.body, "peers"), vec![127, 0, 0, 1, 0x1b, 0x5a]);
    assert_eq!(int(&seed.body, "complete"), 1);
    // The leecher completes.
    let done = c.get(&announce_target(&announce(H, 2, 7002, 0, Event::Completed)));
    assert_eq!(
        (int(&done.body, "complete"), int(&done.body, "incomplete")),
        (2, 0)
    );
    assert_eq!(int(&done.body, "downloaded"), 1);
    let scrape = c.get(&scrape_target(&[H, [0x22; 20]]));
    let v = hotpath_wire::bencode::decode(&scrape.body).unwrap();
    let files = v.get("files").unwrap();
    let entry = files
        .get(std::str::from_utf8(&[0x11; 20]).unwrap())
        .unwrap();
    assert_eq!(entry.get("complete").unwrap().as_int(), Some(2));
    assert_eq!(entry.get("downloaded").unwrap().as_int(), Some(1));
    let unknown = files
        .get(std::str::from_utf8(&[0x22; 20]).unwrap())
        .unwrap();
    assert_eq!(unknown.get("complete").unwrap().as_int(), Some(0));
    // Stopped removes the peer.
    let stop = c.get(&announce_target(&announce(H, 1, 7001, 0, Event::Stopped)));
    assert_eq!(int(&stop.body, "complete"), 1);
    server.shutdown().unwrap();
}

#[test]
fn non_compact_answers_carry_peer_ids_when_kept() {
    let mut config = test_config();
    config.tracker.keep_peer_ids = true;
    let server = start(&config);
    let mut c = Client::connect(server.http_addr().unwrap());
    c.get(&announce_target(&announce(H, 1, 7001, 0, Event::None)));
    let mut a = announce(H, 2, 7002, 5, Event::None);
    a.compact = false;
    let r = c.get(&announce_target(&a));
    let v = hotpath_wire::bencode::decode(&r.body).unwrap();
    let hotpath_wire::bencode::Value::List(list) = v.get("peers").unwrap() else {
        panic!()
    };
    assert_eq!(list.len(), 1);
    assert_eq!(
        list[0].get("ip").unwrap().as_bytes(),
        Some(&b"127.0.0.1"[..])
    );
    assert_eq!(list[0].get("port").unwrap().as_int(), Some(7001));
    let mut id = *b"-HP0001-000000000000";
    id[19] = 1;
    assert_eq!(list[0].get("peer id").unwrap().as_bytes(), Some(&id[..]));
    a.no_peer_id = true;
    let r = c.get(&announce_target(&a));
    let v = hotpath_wire::bencode::decode(&r.body).unwrap();
    let hotpath_wire::bencode::Value::List(list) = v.get("peers").unwrap() else {
        panic!()
    };
    assert!(list[0].get("peer id").is_none());
    server.shutdown().unwrap();
}

#[test]
fn pipelined_requests_are_all_answered_in_order() {
    let server = start(&test_config());
    let mut c = Client::connect(server.http_addr().unwrap());
    let mut batch = Vec::new();
    for n in 0..20u8 {
        let t = announce_target(&announce(H, n, 8000 + u16::from(n), 1, Event::None));
        batch.extend_from_slice(format!("GET {t} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
    }
    batch.extend_from_slice(b"GET /healthz HTTP/1.1\r\n\r\n");
    c.send(&batch);
    for n in 0..20 {
        let r = c.read().unwrap();
        assert_eq!(int(&r.body, "incomplete"), n + 1);
    }
    assert_eq!(c.read().unwrap().body, b"{\"status\":\"ok\"}");
    server.shutdown().unwrap();
}

#[test]
fn connection_close_and_http10() {
    let server = start(&test_config());
    let addr = server.http_addr().unwrap();
    let mut c = Client::connect(addr);
    c.send(b"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n");
    let r = c.read().unwrap();
    assert!(r.close);
    assert!(c.closed_within(Duration::from_secs(2)));
    let mut c = Client::connect(addr);
    c.send(b"GET /healthz HTTP/1.0\r\n\r\n");
    let r = c.read().unwrap();
    assert!(r.head.starts_with("HTTP/1.0 200"), "{}", r.head);
    assert!(c.closed_within(Duration::from_secs(2)));
    let mut c = Client::connect(addr);
    c.send(b"GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    assert!(c.read().unwrap().head.contains("Connection: keep-alive"));
    assert_eq!(c.get("/healthz").status, 200);
    c.send(b"HEAD /healthz HTTP/1.1\r\n\r\n");
    let head = c.read_head().unwrap();
    assert!(head.head.contains("Content-Length: 15"), "{}", head.head);
    assert_eq!(c.get("/healthz").status, 200, "HEAD left no stray body");
    server.shutdown().unwrap();
}

/// Each malformed request, its expected status and failure reason (or body), and whether the
/// connection stays usable; after each, a normal announce is still served.
#[test]
fn malformed_requests_table() {
    let mut config = test_config();
    config.server.max_header_bytes = 2048;
    config.server.max_url_bytes = 1024;
    config.server.max_headers = 16;
    config.tracker.max_scrape_hashes = 3;
    let server = start(&config);
    let addr = server.http_addr().unwrap();
    let ih = "%11".repeat(20);
    let pid = "-HP0001-000000000000";
    let cases: Vec<(String, u16, &str, bool)> = vec![
        (
            format!("GET /announce?peer_id={pid}&port=1 HTTP/1.1\r\n\r\n"),
            200,
            "missing info_hash",
            true,
        ),
        (
            format!("GET /announce?info_hash=%11%11&peer_id={pid}&port=1 HTTP/1.1\r\n\r\n"),
            200,
            "malformed info_hash",
            true,
        ),
        (
            format!("GET /announce?info_hash={ih}&port=1 HTTP/1.1\r\n\r\n"),
            200,
            "missing peer_id",
            true,
        ),
        (
            format!("GET /announce?info_hash={ih}&peer_id=short&port=1 HTTP/1.1\r\n\r\n"),
            200,
            "malformed peer_id",
            true,
        ),
        (
            format!("GET /announce?info_hash={ih}&peer_id={pid} HTTP/1.1\r\n\r\n"),
            200,
            "missing port",
            true,
        ),
        (
            format!("GET /announce?info_hash={ih}&peer_id={pid}&port=99999 HTTP/1.1\r\n\r\n"),
            200,
            "invalid port",
            true,
        ),
        (
            format!("GET /announce?info_hash={ih}&peer_id={pid}&port=1&left=x HTTP/1.1\r\n\r\n"),
            200,
            "malformed left",
            true,
        ),
        (
            format!(
                "GET /announce?info_hash={ih}&peer_id={pid}&port=1&numwant=many HTTP/1.1\r\n\r\n"
            ),
            200,
            "malformed numwant",
            true,
        ),
        (
            format!(
                "GET /announce?info_hash={ih}&peer_id={pid}&port=1&event=exploded HTTP/1.1\r\n\r\n"
            ),
            200,
            "unknown event",
            true,
        ),
        (
            "GET /scrape?info_hash=%11 HTTP/1.1\r\n\r\n".to_string(),
            200,
            "malformed info_hash",
            true,
        ),
        (
            format!(
                "GET /scrape?{} HTTP/1.1\r\n\r\n",
                format!("info_hash={ih}&").repeat(4)
            ),
            200,
            "too many info hashes in one scrape",
            true,
        ),
        (
            "GET /scrape HTTP/1.1\r\n\r\n".into(),
            200,
            "full scrape is disabled: name info_hash parameters",
            true,
        ),
        (
            "POST /announce HTTP/1.1\r\nContent-Length: 0\r\n\r\n".into(),
            405,
            "use GET",
            true,
        ),
        (
            "GET /nothing-here HTTP/1.1\r\n\r\n".into(),
            404,
            "not found\n",
            true,
        ),
        (
            format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(1100)),
            414,
            "request target too long\n",
            false,
        ),
        (
            format!("GET / HTTP/1.1\r\n{}\r\n", "X: y\r\n".repeat(17)),
            431,
            "too many header lines\n",
            false,
        ),
        (
            format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "y".repeat(2100)),
            431,
            "request head too large\n",
            false,
        ),
        (
            "POST / HTTP/1.1\r\nContent-Length: 999999999\r\n\r\n".into(),
            413,
            "request body too large\n",
            false,
        ),
        (
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n".into(),
            501,
            "Transfer-Encoding is not supported; send Content-Length\n",
            false,
        ),
        (
            "GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n".into(),
            400,
            "malformed Content-Length\n",
            false,
        ),
        (
            "\x16\x03\x01\x02\x00\x01\x00\x01\x7c\x03\x03\r\n\r\n".into(),
            400,
            "malformed request\n",
            false,
        ),
        (
            "GET / HTTP/3.0\r\n\r\n".into(),
            505,
            "only HTTP/1.0 and HTTP/1.1 are supported\n",
            false,
        ),
    ];
    let good = announce_target(&announce(H, 9, 9999, 0, Event::None));
    for (raw, status, reason, usable) in cases {
        let mut c = Client::connect(addr);
        c.send(raw.as_bytes());
        let r = c.read().unwrap_or_else(|| panic!("no answer to {raw:.60}"));
        assert_eq!(r.status, status, "{raw:.60}");
        match failure(&r.body) {
            Some(f) => assert_eq!(f, reason, "{raw:.60}"),
            None => assert_eq!(String::from_utf8_lossy(&r.body), reason, "{raw:.60}"),
        }
        if usable {
            assert_eq!(
                c.get(&good).status,
                200,
                "connection unusable after {raw:.60}"
            );
        } else {
            assert!(r.close, "{raw:.60} must close");
            assert!(c.closed_within(Duration::from_secs(2)), "{raw:.60}");
        }
        let mut fresh = Client::connect(addr);
        assert_eq!(int(&fresh.get(&good).body, "complete"), 1);
    }
    server.shutdown().unwrap();
}

#[test]
fn slowloris_is_cut_off_and_does_not_hold_the_worker() {
    let mut config = test_config();
    config.server.workers = 1;
    config.server.header_timeout_secs = 1;
    let server = start(&config);
    let addr = server.http_addr().unwrap();
    let mut slow = Client::connect(addr);
    slow.send(b"GET /announce?info_hash=");
    // Meanwhile the only worker keeps serving others.
    let mut other = Client::connect(addr);
    assert_eq!(other.get("/healthz").status, 200);
    slow.send(b"%11");
    assert!(
        slow.closed_within(Duration::from_secs(4)),
        "the slow client was not cut off"
    );
    let stats = Client::connect(server.admin_addr().unwrap()).get("/stats");
    let v: serde_json::Value = serde_json::from_slice(&stats.body).unwrap();
    assert!(v["connections_timed_out"].as_u64().unwrap() >= 1, "{v}");
    server.shutdown().unwrap();
}

#[test]
fn idle_connections_time_out() {
    let mut config = test_config();
    config.server.idle_timeout_secs = 1;
    let server = start(&config);
    let mut c = Client::connect(server.http_addr().unwrap());
    assert_eq!(c.get("/healthz").status, 200);
    assert!(c.closed_within(Duration::from_secs(4)));
    server.shutdown().unwrap();
}

#[test]
fn connection_cap_per_worker() {
    let mut config = test_config();
    config.server.workers = 1;
    config.server.max_connections_per_worker = 2;
    let server = start(&config);
    let addr = server.http_addr().unwrap();
    let mut a = Client::connect(addr);
    let mut b = Client::connect(addr);
    assert_eq!(a.get("/healthz").status, 200);
    assert_eq!(b.get("/healthz").status, 200);
    let mut c = Client::connect(addr);
    assert!(
        c.closed_within(Duration::from_secs(2)),
        "a third connection was kept"
    );
    assert_eq!(a.get("/healthz").status, 200);
    drop(b);
    // Once the server has seen b go, a new connection is kept again.
    wait_until(
        "a connection's slot to free",
        Duration::from_secs(10),
        || {
            let mut d = Client::connect(addr);
            d.send(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n");
            d.read().is_some_and(|r| r.status == 200)
        },
    );
    server.shutdown().unwrap();
}

#[test]
fn full_scrape_when_enabled_is_gzipped_on_request() {
    let mut config = test_config();
    config.tracker.full_scrape = true;
    let server = start(&config);
    let mut c = Client::connect(server.http_addr().unwrap());
    for n in 0..100u8 {
        c.get(&announce_target(&announce(
            [n; 20],
            n,
            7000,
            1,
            Event::None,
        )));
    }
    let plain = c.get("/scrape");
    assert_eq!(plain.status, 200);
    let v = hotpath_wire::bencode::decode(&plain.body).unwrap();
    let hotpath_wire::bencode::Value::Dict(files) = v.get("files").unwrap() else {
        panic!()
    };
    assert_eq!(files.len(), 100);
    c.send(b"GET /scrape HTTP/1.1\r\nAccept-Encoding: gzip\r\n\r\n");
    let gz = c.read().unwrap();
    assert!(gz.head.contains("Content-Encoding: gzip"));
    let mut decoded = Vec::new();
    std::io::Read::read_to_end(
        &mut flate2::read::GzDecoder::new(&gz.body[..]),
        &mut decoded,
    )
    .unwrap();
    assert_eq!(decoded.len(), plain.body.len());
    server.shutdown().unwrap();
}

#[test]
fn access_list_allow_mode_reloads() {
    let dir = std::env::temp_dir().join(format!("hotpath-access-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("allow.txt");
    std::fs::write(&file, format!("# allowed\n{}\n", "11".repeat(20))).unwrap();
    let mut config = test_config();
    config.access_list.mode = hotpath_config::AccessListMode::Allow;
    config.access_list.path = file.display().to_string();
    let server = start(&config);
    let mut c = Client::connect(server.http_addr().unwrap());
    let ok = c.get(&announce_target(&announce(H, 1, 7000, 1, Event::None)));
    assert_eq!(failure(&ok.body), None);
    let other = [0x22; 20];
    let refused = c.get(&announce_target(&announce(other, 1, 7000, 1, Event::None)));
    assert_eq!(
        failure(&refused.body).as_deref(),
        Some("info_hash is not on this tracker's allow list")
    );
    std::fs::write(&file, format!("{}\n{}\n", "11".repeat(20), "22".repeat(20))).unwrap();
    server.reload();
    let now_ok = c.get(&announce_target(&announce(other, 1, 7000, 1, Event::None)));
    assert_eq!(failure(&now_ok.body), None);
    // A broken file keeps the old list.
    std::fs::write(&file, "not a hash\n").unwrap();
    server.reload();
    let still = c.get(&announce_target(&announce(other, 2, 7001, 1, Event::None)));
    assert_eq!(failure(&still.body), None);
    server.shutdown().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn client_address_from_trusted_proxy_header_only() {
    let mut config = test_config();
    config.tracker.real_ip_header = "X-Forwarded-For".into();
    config.tracker.trusted_proxies = vec!["127.0.0.0/8".parse().unwrap()];
    let server = start(&config);
    let mut c = Client::connect(server.http_addr().unwrap());
    let t = announce_target(&announce(H, 1, 7001, 0, Event::None));
    c.send(
        format!("GET {t} HTTP/1.1\r\nX-Forwarded-For: 203.0.113.5, 198.51.100.7\r\n\r\n")
            .as_bytes(),
    );
    c.read().unwrap();
    let r = c.get(&announce_target(&announce(H, 2, 7002, 1, Event::None)));
    assert_eq!(peers(&r.body, "peers"), vec![198, 51, 100, 7, 0x1b, 0x59]);
    c.send(format!("GET {t} HTTP/1.1\r\nX-Forwarded-For: garbage\r\n\r\n").as_bytes());
    let bad = c.read().unwrap();
    assert_eq!(
        failure(&bad.body).as_deref(),
        Some("the proxy's client address header is malformed")
    );
    server.shutdown().unwrap();

    // Untrusted source: the header is ignored.
    let mut config = test_config();
    config.tracker.real_ip_header = "X-Forwarded-For".into();
    config.tracker.trusted_proxies = vec!["10.0.0.0/8".parse().unwrap()];
    let server = start(&config);
    let mut c = Client::connect(server.http_addr().unwrap());
    c.send(format!("GET {t} HTTP/1.1\r\nX-Forwarded-For: 198.51.100.7\r\n\r\n").as_bytes());
    c.read().unwrap();
    let r = c.get(&announce_target(&announce(H, 2, 7002, 1, Event::None)));
    assert_eq!(peers(&r.body, "peers"), vec![127, 0, 0, 1, 0x1b, 0x59]);
    server.shutdown().unwrap();
}

/// Regression: `ipv6=` from any client was stored and handed out in `peers6` (`ff02::1`,
/// `::1`, `::ffff:8.8.8.8` port 53 all came back), and counted the peer twice. Now
/// client-given addresses are off by default, and when on only global unicast ones are taken,
/// the peer still counted once.
#[test]
fn client_given_addresses_are_off_by_default_and_only_global_when_on() {
    let server = start(&test_config());
    let mut c = Client::connect(server.http_addr().unwrap());
    let mut a = announce(H, 1, 7001, 0, Event::None);
    a.ipv6 = Some(("2a00:1450::1".parse().unwrap(), None));
    a.ip = Some("8.8.8.8".parse().unwrap());
    let r = c.get(&announce_target(&a));
    let d = hotpath_wire::bencode::decode(&r.body).unwrap();
    assert!(d.get("peers6").is_none(), "ipv6= was taken by default");
    let b = announce(H, 2, 7002, 1, Event::None);
    let r = c.get(&announce_target(&b));
    // The first peer is at its connection's address, not at the one it gave.
    assert_eq!(peers(&r.body, "peers"), vec![127, 0, 0, 1, 0x1b, 0x59]);
    let mut admin = Client::connect(server.admin_addr().unwrap());
    let text = String::from_utf8(admin.get("/metrics").body).unwrap();
    assert!(text.contains("hotpath_tracker_client_addresses_ignored_total 2"));
    server.shutdown().unwrap();

    let mut cfg = test_config();
    cfg.tracker.accept_ipv6_param = true;
    cfg.tracker.accept_ip_param = true;
    let server = start(&cfg);
    let mut c = Client::connect(server.http_addr().unwrap());
    let mut a = announce(H, 1, 7001, 0, Event::None);
    a.ipv6 = Some(("2a00:1450::1".parse().unwrap(), None));
    let r = c.get(&announce_target(&a));
    assert!(hotpath_wire::bencode::decode(&r.body)
        .unwrap()
        .get("peers6")
        .is_some());
    // One peer, though it gave two addresses.
    assert_eq!(int(&r.body, "complete"), 1);
    for (n, bad) in ["ff02::1", "::1", "::ffff:8.8.8.8", "2001:db8::2", "fe80::1"]
        .iter()
        .enumerate()
    {
        let mut x = announce(H, 10 + n as u8, 7100 + n as u16, 1, Event::None);
        x.ipv6 = Some((bad.parse().unwrap(), Some(53)));
        c.get(&announce_target(&x));
    }
    for (n, bad) in ["127.0.0.5", "10.0.0.1", "224.0.0.1", "0.0.0.0"]
        .iter()
        .enumerate()
    {
        let mut x = announce(H, 20 + n as u8, 7200 + n as u16, 1, Event::None);
        x.ip = Some(bad.parse().unwrap());
        c.get(&announce_target(&x));
    }
    let mut g = announce(H, 30, 7300, 1, Event::None);
    g.ip = Some("8.8.4.4".parse().unwrap());
    c.get(&announce_target(&g));
    let mut b = announce(H, 2, 7002, 1, Event::None);
    b.ipv6 = Some(("2a00:1450::2".parse().unwrap(), Some(7003)));
    b.numwant = Some(200);
    let r = c.get(&announce_target(&b));
    let mut want6 = "2a00:1450::1"
        .parse::<std::net::Ipv6Addr>()
        .unwrap()
        .octets()
        .to_vec();
    want6.extend_from_slice(&7001u16.to_be_bytes());
    // Only the global IPv6 address is handed out; the refused ones never are.
    assert_eq!(peers(&r.body, "peers6"), want6);
    // ip=8.8.4.4 was taken; the refused ip= values left their peers at 127.0.0.1.
    let v4 = peers(&r.body, "peers");
    assert!(
        v4.chunks(6).any(|p| p == [8, 8, 4, 4, 0x1c, 0x84]),
        "{v4:?}"
    );
    assert!(v4
        .chunks(6)
        .all(|p| p[..4] == [8, 8, 4, 4] || p[..4] == [127, 0, 0, 1]));
    // 1 + 5 + 4 + 1 + 1 peers, each counted once.
    assert_eq!(int(&r.body, "complete") + int(&r.body, "incomplete"), 12);
    server.shutdown().unwrap();
}

#[test]
fn admin_endpoints() {
    let server = start(&test_config());
    let mut c = Client::connect(server.http_addr().unwrap());
    c.get(&announce_target(&announce(H, 1, 7001, 0, Event::None)));
    c.get(&announce_target(&announce(H, 2, 7002, 5, Event::None)));
    let mut admin = Client::connect(server.admin_addr().unwrap());
    assert_eq!(admin.get("/healthz").body, b"{\"status\":\"ok\"}");
    let m = admin.get("/metrics");
    let text = String::from_utf8(m.body).unwrap();
    for needle in [
        "hotpath_requests_total{protocol=\"http\",kind=\"announce\",result=\"ok\"} 2",
        "hotpath_tracker_torrents 1",
        "hotpath_tracker_peers 2",
        "hotpath_tracker_seeders 1",
        "hotpath_tracker_leechers 1",
        "hotpath_request_duration_seconds_count",
        "hotpath_connections ",
    ] {
        assert!(text.contains(needle), "missing {needle} in\n{text}");
    }
    let s = admin.get("/stats");
    let v: serde_json::Value = serde_json::from_slice(&s.body).unwrap();
    assert_eq!(v["tracker"]["peers"], 2);
    assert_eq!(v["requests"]["http"]["announce"]["ok"], 2);
    // Admin paths are not served on the tracker listener.
    assert_eq!(c.get("/metrics").status, 404);
    server.shutdown().unwrap();
}

#[test]
fn shutdown_answers_in_flight_and_stops_accepting() {
    let server = start(&test_config());
    let addr = server.http_addr().unwrap();
    let mut c = Client::connect(addr);
    assert_eq!(c.get("/healthz").status, 200);
    // Half a request is in flight when the stop comes; it is cut at the grace period at most.
    c.send(b"GET /healthz HTTP/1.1\r\n");
    let started = std::time::Instant::now();
    server.shutdown().unwrap();
    assert!(started.elapsed() < Duration::from_secs(4));
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "still accepting after shutdown"
    );
}

#[test]
fn the_sweeper_expires_silent_peers_and_frees_empty_torrents() {
    let mut config = test_config();
    config.tracker.interval_secs = 1;
    config.tracker.min_interval_secs = 1;
    config.tracker.peer_timeout_secs = 2;
    config.tracker.sweep_interval_secs = 1;
    let server = start(&config);
    let mut c = Client::connect(server.http_addr().unwrap());
    c.get(&announce_target(&announce(H, 1, 7001, 0, Event::Started)));
    c.get(&announce_target(&announce(
        [0x44; 20],
        2,
        7002,
        5,
        Event::Started,
    )));
    let mut admin = Client::connect(server.admin_addr().unwrap());
    let stats = |admin: &mut Client| -> serde_json::Value {
        serde_json::from_slice(&admin.get("/stats").body).unwrap()
    };
    assert_eq!(stats(&mut admin)["tracker"]["peers"], 2);
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let v = stats(&mut admin);
        if v["tracker"]["peers"] == 0 && v["tracker"]["torrents"] == 0 {
            assert!(v["tracker"]["peers_expired"].as_u64().unwrap() >= 2, "{v}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "peers were not expired: {v}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    server.shutdown().unwrap();
}
