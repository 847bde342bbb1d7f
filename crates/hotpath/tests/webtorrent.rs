//! The WebTorrent tracker over WebSocket, against the real server: offers and answers relayed
//! between connections (on both workers), counts, scrapes, and every refusal and bound an
//! attacker would try.

mod common;

use std::time::Duration;

use common::ws::{id_of, upgrade_request, wt_announce, Ws};
use common::*;
use hotpath_wire::webtorrent::{self as wt, Event, Id};
use hotpath_wire::ws::Opcode;

const H: Id = Id([0xa1; 20]);
const WAIT: Duration = Duration::from_secs(5);

fn peer(n: u8) -> Id {
    let mut id = [b'p'; 20];
    id[0] = n;
    id[19] = 0xff; // a code point above 127 travels as itself
    Id(id)
}

fn offer_id(n: u8) -> Id {
    Id([n; 20])
}

fn answer<'a>(from: Id, to: Id, offer: Id) -> wt::Answer<'a> {
    wt::Answer {
        info_hash: H,
        peer_id: from,
        to_peer_id: to,
        offer_id: offer,
        answer: wt::Sdp {
            kind: "answer".into(),
            sdp: "v=0\r\ns=answer\r\n".into(),
        },
    }
}

fn metric(server: &hotpath_server::RunningServer, name: &str) -> f64 {
    metric_at(
        server
            .tcp_addr(hotpath_server::listen::ListenerKind::Admin)
            .unwrap(),
        name,
    )
    .unwrap_or(0.0)
}

#[test]
fn offers_reach_other_peers_and_answers_come_back_to_the_offerer() {
    let server = start(&test_config());
    let addr = server.http_addr().unwrap();
    // A seeder, then a leecher with two offers: only one other peer, so one is relayed.
    let mut seeder = Ws::connect(addr, "/announce");
    seeder.announce(&wt_announce(H, peer(1), 0, &[], Event::Started));
    let r = seeder.recv_json(WAIT).expect("an announce response");
    assert_eq!(r["action"], "announce");
    assert_eq!(
        (r["complete"].as_u64(), r["incomplete"].as_u64()),
        (Some(1), Some(0))
    );
    assert_eq!(id_of(&r["info_hash"]), H);
    assert!(r["interval"].as_u64().unwrap() > 0);

    let mut leecher = Ws::connect(addr, "/announce");
    leecher.announce(&wt_announce(
        H,
        peer(2),
        100,
        &[offer_id(7), offer_id(8)],
        Event::Started,
    ));
    let r = leecher.recv_json(WAIT).unwrap();
    assert_eq!(
        (r["complete"].as_u64(), r["incomplete"].as_u64()),
        (Some(1), Some(1))
    );
    let offer = seeder.recv_json(WAIT).expect("the relayed offer");
    assert_eq!(offer["action"], "announce");
    assert_eq!(id_of(&offer["peer_id"]), peer(2));
    assert_eq!(offer["offer"]["type"], "offer");
    let oid = id_of(&offer["offer_id"]);
    assert!(oid == offer_id(7) || oid == offer_id(8));

    // The seeder answers: the leecher, and only it, gets the answer.
    seeder.answer(&answer(peer(1), peer(2), oid));
    let a = leecher.recv_json(WAIT).expect("the relayed answer");
    assert_eq!(id_of(&a["peer_id"]), peer(1));
    assert_eq!(id_of(&a["to_peer_id"]), peer(2));
    assert_eq!(id_of(&a["offer_id"]), oid);
    assert_eq!(a["answer"]["type"], "answer");
    // The same answer again, one for an offer never sent, one naming another offerer:
    // none relayed, all counted.
    seeder.answer(&answer(peer(1), peer(2), oid));
    seeder.answer(&answer(peer(1), peer(2), offer_id(99)));
    let mut third = Ws::connect(addr, "/announce");
    third.answer(&answer(peer(3), peer(2), oid));
    wait_until("three answers refused", WAIT, || {
        metric(&server, "hotpath_webtorrent_answers_without_offer_total") >= 3.0
    });
    assert!(leecher.recv_json(Duration::from_millis(300)).is_none());
    assert_eq!(
        metric(&server, "hotpath_webtorrent_answers_relayed_total"),
        1.0
    );
    assert_eq!(
        metric(&server, "hotpath_webtorrent_offers_relayed_total"),
        1.0
    );

    // Scrape, then the leecher's connection closes: it leaves the swarm.
    let mut b = Vec::new();
    b.extend_from_slice(br#"{"action":"scrape","info_hash":["#);
    b.extend_from_slice(serde_json::to_string(&H).unwrap().as_bytes());
    b.extend_from_slice(b"]}");
    third.send_text(&b);
    let s = third.recv_json(WAIT).unwrap();
    assert_eq!(s["action"], "scrape");
    let (k, c) = s["files"].as_object().unwrap().iter().next().unwrap();
    assert_eq!(id_of(&serde_json::Value::String(k.clone())), H);
    assert_eq!(
        (c["complete"].as_u64(), c["incomplete"].as_u64()),
        (Some(1), Some(1))
    );
    drop(leecher);
    wait_until("the leecher left", WAIT, || {
        metric(&server, "hotpath_webtorrent_peers") == 1.0
    });
    server.shutdown().unwrap();
}

#[test]
fn many_peers_on_both_workers_all_get_offers_and_a_seeder_offers_only_to_leechers() {
    let server = start(&test_config());
    let addr = server.http_addr().unwrap();
    // Ten leechers on ten connections (spread over the two workers by the kernel).
    let mut leechers: Vec<Ws> = (0..10)
        .map(|i| {
            let mut w = Ws::connect(addr, "/announce");
            w.announce(&wt_announce(H, peer(10 + i), 50, &[], Event::Started));
            w.recv_json(WAIT).unwrap();
            w
        })
        .collect();
    let mut other_seeder = Ws::connect(addr, "/announce");
    other_seeder.announce(&wt_announce(H, peer(2), 0, &[], Event::Started));
    other_seeder.recv_json(WAIT).unwrap();
    // A seeder's ten offers: one to each leecher, none to the other seeder.
    let mut seeder = Ws::connect(addr, "/announce");
    let offers: Vec<Id> = (0..10).map(|i| offer_id(100 + i)).collect();
    seeder.announce(&wt_announce(H, peer(1), 0, &offers, Event::Started));
    seeder.recv_json(WAIT).unwrap();
    for l in leechers.iter_mut() {
        let o = l.recv_json(WAIT).expect("each leecher gets one offer");
        assert_eq!(id_of(&o["peer_id"]), peer(1));
        let oid = id_of(&o["offer_id"]);
        l.answer(&answer(peer(0), peer(1), oid));
    }
    assert!(other_seeder.recv_json(Duration::from_millis(300)).is_none());
    // Every answer comes back to the seeder, whichever worker it crossed from.
    let mut back = 0;
    while back < 10 {
        let a = seeder.recv_json(WAIT).expect("ten answers");
        assert_eq!(a["answer"]["type"], "answer");
        back += 1;
    }
    server.shutdown().unwrap();
}

#[test]
fn broken_upgrades_and_messages_are_refused_with_reasons() {
    let mut cfg = test_config();
    cfg.webtorrent.max_frame_bytes = 4096;
    cfg.webtorrent.max_message_bytes = 8192;
    cfg.webtorrent.max_swarms_per_connection = 2;
    let server = start(&cfg);
    let addr = server.http_addr().unwrap();
    // The upgrade's headers.
    let no_key = upgrade_request("/announce", "").replace("Sec-WebSocket-Key", "X-Key");
    assert_eq!(Ws::try_raw(addr, &no_key).err().unwrap().status, 400);
    let bad_key = upgrade_request("/announce", "").replace("dGhlIHNhbXBsZSBub25jZQ==", "abc");
    assert_eq!(Ws::try_raw(addr, &bad_key).err().unwrap().status, 400);
    let old = upgrade_request("/announce", "").replace("Version: 13", "Version: 8");
    let r = Ws::try_raw(addr, &old).err().unwrap();
    assert_eq!(r.status, 426);
    assert!(r.head.contains("Sec-WebSocket-Version: 13"));
    assert_eq!(
        Ws::try_raw(addr, &upgrade_request("/elsewhere", ""))
            .err()
            .unwrap()
            .status,
        404
    );
    let post = upgrade_request("/announce", "").replacen("GET", "POST", 1);
    assert_eq!(Ws::try_raw(addr, &post).err().unwrap().status, 400);

    // Messages that do not parse: a failure reason under their action; the socket stays.
    let mut w = Ws::connect(addr, "/announce");
    for (msg, action) in [
        (&br#"{"action":"scrape"}"#[..], "scrape"),
        (
            br#"{"action":"announce","info_hash":"short","peer_id":"x"}"#,
            "announce",
        ),
        (br#"not json"#, "announce"),
        (br#"{"action":"connect"}"#, "announce"),
    ] {
        w.send_text(msg);
        let r = w.recv_json(WAIT).expect("an error");
        assert_eq!(r["action"], action, "{}", String::from_utf8_lossy(msg));
        assert!(r["failure reason"].as_str().is_some());
    }
    // A ping is answered with its payload.
    w.send_frame(Opcode::Ping, true, b"hi");
    assert_eq!(w.recv(WAIT), Some((Opcode::Pong, b"hi".to_vec())));
    // A message in fragments is joined.
    let mut msg = Vec::new();
    wt::write_client_announce(&mut msg, &wt_announce(H, peer(1), 0, &[], Event::Started));
    let (a, b) = msg.split_at(10);
    w.send_frame(Opcode::Text, false, a);
    w.send_frame(Opcode::Ping, true, b"");
    w.send_frame(Opcode::Continuation, true, b);
    assert_eq!(w.recv(WAIT).unwrap().0, Opcode::Pong);
    assert_eq!(w.recv_json(WAIT).unwrap()["complete"], 1);
    // Past max_swarms_per_connection: refused, said.
    for n in 0..3u8 {
        let mut a = wt_announce(Id([n; 20]), peer(1), 0, &[], Event::Started);
        a.numwant = None;
        w.announce(&a);
        let r = w.recv_json(WAIT).unwrap();
        if n == 2 {
            assert!(r["failure reason"]
                .as_str()
                .unwrap()
                .contains("too many torrents"));
        }
    }

    // Frames a client may not send close the connection with the RFC's codes.
    let cases: [(&[u8], u16); 4] = [
        (&[0x81, 0x02, b'h', b'i'], 1002),             // unmasked
        (&[0xc1, 0x80, 1, 2, 3, 4], 1002),             // reserved bit
        (&[0x82, 0x80, 1, 2, 3, 4], 1003),             // binary
        (&[0x81, 0xfe, 0x7f, 0xff, 0, 0, 0, 0], 1009), // 32 KiB frame > 4 KiB
    ];
    for (frame, code) in cases {
        let mut w = Ws::connect(addr, "/announce");
        w.send_raw(frame);
        assert_eq!(w.close_code(WAIT), Some(code), "{frame:?}");
        assert!(w.closed_within(WAIT));
    }
    // Text that is not UTF-8: 1007. Fragments past max_message_bytes: 1009.
    let mut w = Ws::connect(addr, "/announce");
    w.send_text(b"\xff\xfe");
    assert_eq!(w.close_code(WAIT), Some(1007));
    let mut w = Ws::connect(addr, "/announce");
    w.send_frame(Opcode::Text, false, &[b' '; 3000]);
    for _ in 0..2 {
        w.send_frame(Opcode::Continuation, false, &[b' '; 3000]);
    }
    assert_eq!(w.close_code(WAIT), Some(1009));
    // A continuation with no message begun.
    let mut w = Ws::connect(addr, "/announce");
    w.send_frame(Opcode::Continuation, true, b"x");
    assert_eq!(w.close_code(WAIT), Some(1002));
    // A client's close is answered with a close.
    let mut w = Ws::connect(addr, "/announce");
    w.send_frame(Opcode::Close, true, &1000u16.to_be_bytes());
    assert_eq!(w.close_code(WAIT), Some(1000));

    wait_until("the closes counted", WAIT, || {
        metric(
            &server,
            "hotpath_ws_closed_total{reason=\"protocol_error\"}",
        ) == 5.0
            && metric(&server, "hotpath_ws_closed_total{reason=\"too_big\"}") == 2.0
            && metric(&server, "hotpath_ws_closed_total{reason=\"client\"}") == 1.0
    });
    assert_eq!(
        metric(&server, "hotpath_ws_upgrades_total{result=\"refused\"}"),
        5.0
    );
    assert_eq!(
        metric(&server, "hotpath_ws_upgrades_total{result=\"ok\"}"),
        9.0
    );
    server.shutdown().unwrap();
}

#[test]
fn a_peer_that_does_not_read_is_cut_off_and_others_are_served() {
    let mut cfg = test_config();
    cfg.webtorrent.max_output_bytes = 16_384;
    cfg.webtorrent.max_pending_offers_per_peer = 10_000;
    let server = start(&cfg);
    let addr = server.http_addr().unwrap();
    // The victim of the flood never reads; its receive buffer is small.
    let sink = std::net::TcpStream::connect(addr).unwrap();
    {
        let s2 = socket2::SockRef::from(&sink);
        s2.set_recv_buffer_size(4096).unwrap();
    }
    let mut sink = {
        use std::io::Write;
        let mut s = sink;
        s.write_all(upgrade_request("/announce", "").as_bytes())
            .unwrap();
        s
    };
    let mut a = Vec::new();
    wt::write_client_announce(&mut a, &wt_announce(H, peer(1), 100, &[], Event::Started));
    let mut frame = Vec::new();
    hotpath_wire::ws::write_client_frame(&mut frame, Opcode::Text, true, &a, [1, 2, 3, 4]);
    {
        use std::io::Write;
        sink.write_all(&frame).unwrap();
    }
    // A flooder sends big offers that all go to the only other peer, the sink.
    let mut flooder = Ws::connect(addr, "/announce");
    let big = "a".repeat(8000);
    let mut n = 0u32;
    wait_until("the sink is cut off", Duration::from_secs(30), || {
        let mut ann = wt_announce(H, peer(2), 100, &[Id([(n % 250) as u8; 20])], Event::None);
        ann.offers[0].offer_id.0[1] = (n / 250) as u8;
        ann.offers[0].offer.sdp = big.as_str().into();
        flooder.announce(&ann);
        let _ = flooder.recv_json(WAIT);
        n += 1;
        metric(&server, "hotpath_ws_closed_total{reason=\"output_full\"}") == 1.0
    });
    // The flooder itself is still served.
    flooder.announce(&wt_announce(H, peer(2), 100, &[], Event::None));
    assert_eq!(flooder.recv_json(WAIT).unwrap()["action"], "announce");
    let text = metrics_text(&server);
    assert!(
        text.contains("hotpath_ws_closed_total{reason=\"output_full\"} 1"),
        "{text}"
    );
    server.shutdown().unwrap();
}

fn metrics_text(server: &hotpath_server::RunningServer) -> String {
    let admin = server
        .tcp_addr(hotpath_server::listen::ListenerKind::Admin)
        .unwrap();
    let r = Client::connect(admin).get("/metrics");
    String::from_utf8(r.body).unwrap()
}

#[test]
fn silent_connections_are_pinged_then_closed_and_a_stop_says_going_away() {
    let mut cfg = test_config();
    // A ping after 2 s of silence, a close after 4: the control below has 2 s to answer each.
    cfg.webtorrent.idle_timeout_secs = 4;
    let server = start(&cfg);
    let addr = server.http_addr().unwrap();
    let mut silent = Ws::connect(addr, "/announce");
    silent.announce(&wt_announce(H, peer(1), 0, &[], Event::Started));
    silent.recv_json(WAIT).unwrap();
    // A ping after half the idle time; left unanswered, a close after the rest.
    let (op, _) = silent.recv(Duration::from_secs(10)).expect("a ping");
    assert_eq!(op, Opcode::Ping);
    assert!(silent.closed_within(Duration::from_secs(10)));
    wait_until("the peer left with its connection", WAIT, || {
        metric(&server, "hotpath_webtorrent_peers") == 0.0
    });
    // One that answers its pings stays (a control for the above, in the same run).
    let mut lively = Ws::connect(addr, "/announce");
    for _ in 0..3 {
        let (op, p) = lively.recv(Duration::from_secs(10)).expect("pings");
        assert_eq!(op, Opcode::Ping);
        lively.send_frame(Opcode::Pong, true, &p);
    }
    let text = metrics_text(&server);
    assert!(
        text.contains("hotpath_ws_closed_total{reason=\"idle\"} 1"),
        "{text}"
    );
    // A stop closes it with 1001.
    let stopping = std::thread::spawn(move || server.shutdown());
    assert_eq!(lively.close_code(Duration::from_secs(10)), Some(1001));
    stopping.join().unwrap().unwrap();
}

/// Floods from one address: its connections past `server.max_connections_per_ip` are closed
/// at once, and a connection's stream of announces with offers keeps its pending offers at
/// their bound; a peer from another address is served meanwhile, and the offers it makes
/// still reach their peer.
#[test]
fn floods_from_one_address_hold_their_bounds_and_others_are_served() {
    let mut cfg = test_config();
    cfg.server.max_connections_per_ip = 10;
    cfg.webtorrent.max_pending_offers_per_peer = 20;
    let server = start(&cfg);
    let addr = server.http_addr().unwrap();
    let mut held: Vec<Ws> = (0..8).map(|_| Ws::connect(addr, "/announce")).collect();
    let extra: Vec<Ws> = (0..2).map(|_| Ws::connect(addr, "/announce")).collect();
    // The eleventh from the same address: closed before any answer.
    let mut ninth = std::net::TcpStream::connect(addr).unwrap();
    ninth
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let _ = std::io::Write::write_all(&mut ninth, upgrade_request("/announce", "").as_bytes());
    let mut byte = [0u8; 1];
    assert!(matches!(
        std::io::Read::read(&mut ninth, &mut byte),
        Ok(0) | Err(_)
    ));
    drop(extra);
    // One of them floods: 2,000 announces of 10 offers each, to the seven others' swarm.
    for (i, w) in held.iter_mut().enumerate().skip(1) {
        w.announce(&wt_announce(H, peer(100 + i as u8), 0, &[], Event::Started));
        w.recv_json(WAIT).unwrap();
    }
    let flooder = &mut held[0];
    for n in 0..2000u32 {
        let offers: Vec<Id> = (0..10u32)
            .map(|k| {
                let mut id = [0u8; 20];
                id[..4].copy_from_slice(&(n * 10 + k).to_le_bytes());
                Id(id)
            })
            .collect();
        flooder.announce(&wt_announce(H, peer(1), 50, &offers, Event::None));
    }
    // Another address is served, and its offer reaches a seeder.
    let mut outsider = {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        s.bind(
            &"127.0.0.2:0"
                .parse::<std::net::SocketAddr>()
                .unwrap()
                .into(),
        )
        .unwrap();
        s.connect(&addr.into()).unwrap();
        let tcp: std::net::TcpStream = s.into();
        tcp.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        Ws::try_on(Box::new(tcp), &upgrade_request("/announce", "")).expect("upgraded")
    };
    outsider.announce(&wt_announce(
        H,
        peer(200),
        50,
        &[Id([0xee; 20])],
        Event::Started,
    ));
    let r = outsider.recv_json(WAIT).expect("the outsider is answered");
    assert_eq!(r["action"], "announce");
    wait_until("the flood handled", Duration::from_secs(60), || {
        metric_elsewhere(
            &server,
            "hotpath_webtorrent_messages_total{kind=\"announce\",result=\"ok\"}",
        ) >= 2008.0
    });
    // The flooder's pending offers stayed at their bound; the rest were dropped, counted.
    let pending = metric_elsewhere(&server, "hotpath_webtorrent_pending_offers");
    assert!(pending <= 20.0 + 1.0, "{pending}");
    assert!(
        metric_elsewhere(
            &server,
            "hotpath_webtorrent_offers_dropped_total{reason=\"max_pending_offers_per_peer\"}"
        ) > 10_000.0
    );
    assert!(metric_elsewhere(&server, "hotpath_connections_refused_per_ip_total") >= 1.0);
    server.shutdown().unwrap();
}

/// A metric read from 127.0.0.3: the flood test's own address holds its connection cap.
fn metric_elsewhere(server: &hotpath_server::RunningServer, name: &str) -> f64 {
    let admin = server
        .tcp_addr(hotpath_server::listen::ListenerKind::Admin)
        .unwrap();
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.bind(
        &"127.0.0.3:0"
            .parse::<std::net::SocketAddr>()
            .unwrap()
            .into(),
    )
    .unwrap();
    s.connect(&admin.into()).unwrap();
    let tcp: std::net::TcpStream = s.into();
    tcp.set_read_timeout(Some(WAIT)).unwrap();
    let text = String::from_utf8(Client::from_stream(tcp).get("/metrics").body).unwrap();
    metric_in(&text, name).unwrap_or(0.0)
}

/// New peers into a full swarm: each gets the swarm's counts, none is kept (the swarm's
/// memory stays at its bound), and their offers are dropped, counted.
#[test]
fn a_full_swarm_keeps_no_more_peers_and_says_so() {
    let mut cfg = test_config();
    cfg.webtorrent.max_peers_per_swarm = 3;
    let server = start(&cfg);
    let addr = server.http_addr().unwrap();
    let mut conns = Vec::new();
    for n in 0..8u8 {
        let mut w = Ws::connect(addr, "/announce");
        w.announce(&wt_announce(H, peer(n), 10, &[Id([n; 20])], Event::Started));
        let r = w.recv_json(WAIT).expect("an answer");
        assert_eq!(r["incomplete"].as_u64(), Some(u64::from(n.min(2) + 1)));
        conns.push(w);
    }
    assert_eq!(metric(&server, "hotpath_webtorrent_peers"), 3.0);
    assert_eq!(
        metric(
            &server,
            "hotpath_webtorrent_cap_hits_total{cap=\"max_peers_per_swarm\"}"
        ),
        5.0
    );
    assert_eq!(
        metric(
            &server,
            "hotpath_webtorrent_offers_dropped_total{reason=\"max_peers_per_swarm\"}"
        ),
        5.0
    );
    server.shutdown().unwrap();
}
