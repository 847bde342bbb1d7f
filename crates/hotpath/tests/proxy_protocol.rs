//! The PROXY protocol from a balancer's network (`server.proxy_protocol_from`): requests count
//! as the client's the header names (its address in answers, its own per-address limits); a
//! balancer's connection without the header, a malformed header, and a header from elsewhere
//! are refused.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use hotpath_wire::proxy::write_v2;
use hotpath_wire::query::Event;

const H: [u8; 20] = [0x61; 20];

/// A connection that starts with a PROXY v2 header for `client`.
fn via_balancer(server: SocketAddr, client: &str) -> Client {
    let mut c = Client::connect(server);
    let mut h = Vec::new();
    write_v2(&mut h, client.parse().unwrap(), server);
    c.send(&h);
    c
}

#[test]
fn requests_count_as_the_client_the_header_names() {
    let mut config = test_config();
    config.server.proxy_protocol_from = vec!["127.0.0.0/8".parse().unwrap()];
    config.server.max_connections_per_ip = 1;
    let server = start(&config);
    let http = server.http_addr().unwrap();

    let mut a = via_balancer(http, "203.0.113.7:51000");
    let first = a.get(&announce_target(&announce(H, 1, 7001, 100, Event::Started)));
    assert_eq!(failure(&first.body), None);
    // Kept alive: the next request on it is the same client's.
    let mut b = via_balancer(http, "198.51.100.9:40000");
    let r = b.get(&announce_target(&announce(H, 2, 7002, 0, Event::Started)));
    assert_eq!(
        peers(&r.body, "peers"),
        [203, 0, 113, 7, 0x1b, 0x59],
        "the peer is the client the balancer named, not the balancer"
    );
    let r = a.get(&announce_target(&announce(H, 1, 7001, 100, Event::None)));
    assert_eq!(peers(&r.body, "peers"), [198, 51, 100, 9, 0x1b, 0x5a]);

    // The per-address limit holds per client behind the balancer: a second connection of
    // 203.0.113.7 is closed, one of another client is served.
    let mut again = via_balancer(http, "203.0.113.7:51001");
    again.send(announce_get(2).as_bytes());
    assert!(again.closed_within(Duration::from_secs(5)));
    let mut other = via_balancer(http, "192.0.2.50:1234");
    assert_eq!(other.get("/healthz").status, 200);

    // From the balancer's network, no header (or a broken one) is refused.
    let mut bare = Client::connect(http);
    assert_eq!(bare.get("/healthz").status, 400);
    let mut broken = Client::connect(http);
    broken.send(b"PROXY TCP4 1.2.3.999 5.6.7.8 1 2\r\nGET /healthz HTTP/1.1\r\n\r\n");
    assert_eq!(broken.read().expect("an answer").status, 400);
    server.shutdown().unwrap();
}

fn announce_get(n: u8) -> String {
    format!(
        "GET {} HTTP/1.1\r\nHost: t\r\n\r\n",
        announce_target(&announce(H, n, 7003, 100, Event::Started))
    )
}

#[test]
fn a_header_from_anywhere_else_is_a_bad_request() {
    let server = start(&test_config());
    let http = server.http_addr().unwrap();
    let mut c = via_balancer(http, "203.0.113.7:51000");
    assert_eq!(c.get("/healthz").status, 400);
    server.shutdown().unwrap();
}
