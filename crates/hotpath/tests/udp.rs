//! The UDP tracker (BEP 15, 41) against the real server.

mod common;

use std::time::Duration;

use common::*;
use hotpath_wire::query::Event;
use hotpath_wire::udp::{self, Response};

const H: [u8; 20] = [0x33; 20];

#[test]
fn connect_announce_scrape() {
    let server = start(&test_config());
    let addr = server.udp_addr().unwrap();
    let mut seeder = Udp::new(addr);
    seeder.connect();
    let mut leecher = Udp::new(addr);
    leecher.connect();
    let r = seeder.announce(H, 1, 7001, 0, Event::Started);
    let Response::Announce {
        transaction_id: 5,
        seeders: 1,
        leechers: 0,
        peers,
        interval,
    } = udp::parse_response(&r).unwrap()
    else {
        panic!("{r:?}")
    };
    assert!(peers.is_empty());
    assert!((1800..=1980).contains(&interval));
    let r = leecher.announce(H, 2, 7002, 10, Event::Started);
    let Response::Announce {
        seeders: 1,
        leechers: 1,
        peers,
        ..
    } = udp::parse_response(&r).unwrap()
    else {
        panic!("{r:?}")
    };
    assert_eq!(peers, [127, 0, 0, 1, 0x1b, 0x59]);
    let r = leecher.announce(H, 2, 7002, 0, Event::Completed);
    assert!(matches!(
        udp::parse_response(&r).unwrap(),
        Response::Announce {
            seeders: 2,
            leechers: 0,
            ..
        }
    ));
    let mut p = Vec::new();
    udp::write_scrape_request(&mut p, leecher.connection_id, 8, &[H, [0; 20]]);
    let r = leecher.exchange(&p, Duration::from_secs(2)).unwrap();
    let Response::Scrape {
        transaction_id: 8,
        entries,
    } = udp::parse_response(&r).unwrap()
    else {
        panic!()
    };
    assert_eq!(
        entries,
        [0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    );
    // HTTP and UDP share the swarm.
    let mut c = Client::connect(server.http_addr().unwrap());
    let r = c.get(&announce_target(&announce(H, 3, 7003, 5, Event::None)));
    assert_eq!(int(&r.body, "complete"), 2);
    server.shutdown().unwrap();
}

#[test]
fn forged_connection_ids_are_refused_and_counted() {
    let server = start(&test_config());
    let mut u = Udp::new(server.udp_addr().unwrap());
    u.connection_id = 0x1234_5678_9abc_def0;
    let r = u.announce(H, 1, 7001, 0, Event::None);
    match udp::parse_response(&r).unwrap() {
        Response::Error {
            transaction_id: 5,
            message,
        } => assert_eq!(message, b"connection id expired or invalid"),
        other => panic!("{other:?}"),
    }
    u.connect();
    let real = u.connection_id;
    u.connection_id = real ^ 1;
    let r = u.announce(H, 1, 7001, 0, Event::None);
    assert!(matches!(
        udp::parse_response(&r).unwrap(),
        Response::Error { .. }
    ));
    // Ids are bound to the IP, not the port: another socket on the same IP may use it.
    let other = Udp::new(server.udp_addr().unwrap());
    let mut p = Vec::new();
    udp::write_scrape_request(&mut p, real, 1, &[H]);
    let r = other.exchange(&p, Duration::from_secs(2)).unwrap();
    assert!(matches!(
        udp::parse_response(&r).unwrap(),
        Response::Scrape { .. }
    ));
    let mut admin = Client::connect(server.admin_addr().unwrap());
    let v: serde_json::Value = serde_json::from_slice(&admin.get("/stats").body).unwrap();
    assert!(
        v["tracker"]["bad_connection_ids"].as_u64().unwrap() >= 2,
        "{v}"
    );
    server.shutdown().unwrap();
}

/// Each malformed datagram and what comes back: nothing, or an error no longer than it.
#[test]
fn malformed_datagrams_table() {
    let server = start(&test_config());
    let mut u = Udp::new(server.udp_addr().unwrap());
    u.connect();
    let cid = u.connection_id.to_be_bytes();
    let with_header = |action: u32, rest: &[u8]| {
        let mut p = cid.to_vec();
        p.extend_from_slice(&action.to_be_bytes());
        p.extend_from_slice(&9u32.to_be_bytes());
        p.extend_from_slice(rest);
        p
    };
    let mut bad_magic = Vec::new();
    udp::write_connect_request(&mut bad_magic, 1);
    bad_magic[3] ^= 0xff;
    let mut bad_event = with_header(1, &[0; 82]);
    bad_event[83] = 9;
    let mut zero_port = with_header(1, &[0; 82]);
    zero_port[96] = 0;
    zero_port[97] = 0;
    let cases: Vec<(&str, Vec<u8>, Option<&str>)> = vec![
        ("empty", vec![], None),
        ("15 bytes", vec![0; 15], None),
        ("connect without the magic", bad_magic, None),
        (
            "unknown action",
            with_header(7, &[]),
            Some("unknown action"),
        ),
        (
            "short announce",
            with_header(1, &[0; 40]),
            Some("malformed announce"),
        ),
        ("bad event", bad_event, Some("unknown event")),
        ("zero port", zero_port, Some("invalid port")),
        (
            "bad options",
            with_header(1, &{
                let mut v = vec![0u8; 82];
                v[81] = 1;
                v.extend_from_slice(&[2, 200, b'x']);
                v
            }),
            Some("malformed options"),
        ),
        ("scrape of nothing", with_header(2, &[]), Some("malformed")),
        (
            "scrape of 75",
            with_header(2, &[0; 75 * 20]),
            Some("too many info hashes in one scrape"),
        ),
        (
            "scrape of 30 bytes",
            with_header(2, &[0; 30]),
            Some("malformed scrape"),
        ),
    ];
    for (name, packet, want) in cases {
        let answer = u.exchange(&packet, Duration::from_millis(300));
        match (want, answer) {
            (None, None) => {}
            (None, Some(a)) => panic!("{name}: expected no answer, got {a:?}"),
            (Some(_), None) => panic!("{name}: expected an error answer"),
            (Some(msg), Some(a)) => {
                assert!(
                    a.len() <= packet.len(),
                    "{name}: answer larger than the request"
                );
                match udp::parse_response(&a).unwrap() {
                    Response::Error {
                        transaction_id: 9,
                        message,
                    } => {
                        let text = String::from_utf8_lossy(message);
                        assert!(
                            msg.starts_with(&*text) && !text.is_empty(),
                            "{name}: {text}"
                        );
                    }
                    other => panic!("{name}: {other:?}"),
                }
            }
        }
    }
    // Still serving.
    let r = u.announce(H, 1, 7001, 0, Event::None);
    assert!(matches!(
        udp::parse_response(&r).unwrap(),
        Response::Announce { seeders: 1, .. }
    ));
    server.shutdown().unwrap();
}

#[test]
fn many_datagrams_in_one_burst_are_all_answered() {
    let server = start(&test_config());
    let u = Udp::new(server.udp_addr().unwrap());
    // Bursts of 150 (more than one 64-datagram batch, less than a default socket buffer holds).
    let mut p = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut buf = [0u8; 64];
    u.socket
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    for burst in 0..4u32 {
        for t in burst * 150..(burst + 1) * 150 {
            p.clear();
            udp::write_connect_request(&mut p, t);
            u.socket.send_to(&p, u.server).unwrap();
        }
        while seen.len() < (burst as usize + 1) * 150 {
            let Ok(n) = u.socket.recv(&mut buf) else {
                break;
            };
            if let Ok(Response::Connect { transaction_id, .. }) = udp::parse_response(&buf[..n]) {
                seen.insert(transaction_id);
            }
        }
    }
    assert_eq!(seen.len(), 600);
    server.shutdown().unwrap();
}

#[test]
fn a_completion_over_udp_is_persisted_and_scraped_after_a_restart() {
    let config = test_config();
    let server = start(&config);
    let mut u = Udp::new(server.udp_addr().unwrap());
    u.connect();
    u.announce(H, 1, 7001, 10, Event::Started);
    u.announce(H, 1, 7001, 0, Event::Completed);
    // The in-process shutdown drains the journal to the SQLite file, as SIGTERM does.
    server.shutdown().unwrap();

    let server = start(&config);
    let mut u = Udp::new(server.udp_addr().unwrap());
    u.connect();
    let mut p = Vec::new();
    udp::write_scrape_request(&mut p, u.connection_id, 9, &[H]);
    let r = u.exchange(&p, Duration::from_secs(2)).unwrap();
    let Response::Scrape { entries, .. } = udp::parse_response(&r).unwrap() else {
        panic!("{r:?}")
    };
    // seeders, completed, leechers: the peer is gone with the old process, its download not.
    assert_eq!(&entries[4..8], &1u32.to_be_bytes());
    server.shutdown().unwrap();
}
