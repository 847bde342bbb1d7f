//! IPv6 clients: BEP 15's 18-byte peer format over UDP and `peers6` over HTTP (BEP 7), on [::1].

mod common;

use common::*;
use hotpath_wire::query::Event;
use hotpath_wire::udp::{self, Response};

const H: [u8; 20] = [0x66; 20];

fn v6_config() -> hotpath_config::Config {
    let mut c = test_config();
    c.listen.http = vec!["[::1]:0".parse().unwrap()];
    c.listen.udp = vec!["[::1]:0".parse().unwrap()];
    c
}

#[test]
fn udp_over_ipv6_answers_with_18_byte_peers() {
    let server = start(&v6_config());
    let addr = server.udp_addr().unwrap();
    assert!(addr.is_ipv6());
    let mut a = Udp::new(addr);
    a.connect();
    let mut b = Udp::new(addr);
    b.connect();
    a.announce(H, 1, 7001, 0, Event::Started);
    let r = b.announce(H, 2, 7002, 5, Event::Started);
    let Response::Announce {
        seeders: 1,
        leechers: 1,
        peers,
        ..
    } = udp::parse_response(&r).unwrap()
    else {
        panic!("{r:?}")
    };
    let mut want = std::net::Ipv6Addr::LOCALHOST.octets().to_vec();
    want.extend_from_slice(&7001u16.to_be_bytes());
    assert_eq!(peers, want);
    server.shutdown().unwrap();
}

#[test]
fn http_over_ipv6_answers_with_peers6() {
    let server = start(&v6_config());
    let mut c = Client::connect(server.http_addr().unwrap());
    c.get(&announce_target(&announce(H, 1, 7001, 0, Event::Started)));
    let r = c.get(&announce_target(&announce(H, 2, 7002, 5, Event::Started)));
    let mut want = std::net::Ipv6Addr::LOCALHOST.octets().to_vec();
    want.extend_from_slice(&7001u16.to_be_bytes());
    assert_eq!(peers(&r.body, "peers6"), want);
    assert!(peers(&r.body, "peers").is_empty());
    server.shutdown().unwrap();
}
