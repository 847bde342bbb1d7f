//! The statsd exporter against a UDP sink on loopback: counters arrive as increases that add
//! up to the server's own counts, every datagram from the one socket it made.

mod common;

use std::collections::HashSet;
use std::net::UdpSocket;
use std::time::{Duration, Instant};

use common::{start, test_config, Client};

#[test]
fn metrics_reach_statsd_as_increases_through_one_socket() {
    let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
    sink.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut c = test_config();
    c.store.enabled = false;
    c.statsd.enabled = true;
    c.statsd.address = sink.local_addr().unwrap().to_string();
    c.statsd.interval_ms = 200;
    c.statsd.max_packet_bytes = 512;
    let server = start(&c);
    let mut cl = Client::connect(server.http_addr().unwrap());
    let mut sources = HashSet::new();
    let mut health = 0u64;
    let mut gauges = 0;
    let mut datagrams = 0;
    let mut buf = [0u8; 65536];
    let mut read = |sources: &mut HashSet<_>, health: &mut u64, gauges: &mut usize| {
        while let Ok((n, from)) = sink.recv_from(&mut buf) {
            datagrams += 1;
            assert!(n <= 512, "{n}");
            sources.insert(from);
            for line in std::str::from_utf8(&buf[..n]).unwrap().lines() {
                let (name, rest) = line.split_once(':').expect(line);
                if name == "hotpath.requests_total.http.health.ok" {
                    *health += rest.strip_suffix("|c").expect(line).parse::<u64>().unwrap();
                }
                if rest.ends_with("|g") {
                    *gauges += 1;
                }
            }
        }
    };
    for _ in 0..3 {
        for _ in 0..10 {
            assert_eq!(cl.get("/healthz").status, 200);
        }
        let until = Instant::now() + Duration::from_millis(300);
        while Instant::now() < until {
            read(&mut sources, &mut health, &mut gauges);
        }
    }
    for _ in 0..5 {
        assert_eq!(cl.get("/healthz").status, 200);
    }
    drop(cl);
    // The last push comes at shutdown.
    server.shutdown().unwrap();
    read(&mut sources, &mut health, &mut gauges);
    assert_eq!(health, 35, "the increases add up to the requests made");
    assert!(gauges > 0);
    assert!(datagrams > 3);
    assert_eq!(sources.len(), 1, "one socket for every push: {sources:?}");
}
