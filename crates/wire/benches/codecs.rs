//! Cost of the codecs on the hot path: an HTTP request head, an announce query, a BEP 15
//! announce packet, and writing a compact announce answer.
#![allow(missing_docs)]

use criterion::{black_box, criterion_group, criterion_main, Criterion};

use hotpath_wire::bencode::{put_bytes, put_int};
use hotpath_wire::http::{header_slots, parse_request, Limits, Parsed};
use hotpath_wire::query::{parse_announce, write_announce, Announce, Event};
use hotpath_wire::udp;

fn sample() -> Announce {
    Announce {
        info_hash: [0xab; 20],
        peer_id: *b"-qB4650-abcdefghijkl",
        port: 51413,
        uploaded: 123_456,
        downloaded: 654_321,
        left: 1_000_000,
        event: Event::None,
        compact: true,
        no_peer_id: true,
        numwant: Some(50),
        key: Some(*b"1a2b3c4d"),
        ipv6: None,
        ip: None,
    }
}

fn codecs(c: &mut Criterion) {
    let mut query = Vec::new();
    write_announce(&mut query, &sample());
    let request = format!(
        "GET /announce?{} HTTP/1.1\r\nHost: tracker.example:6969\r\nUser-Agent: qBittorrent/4.6.5\r\nAccept-Encoding: gzip\r\nConnection: keep-alive\r\n\r\n",
        String::from_utf8(query.clone()).unwrap()
    );
    let limits = Limits {
        max_header_bytes: 8192,
        max_url_bytes: 4096,
        max_body_bytes: 65536,
    };
    c.bench_function("http_parse_request_head", |b| {
        b.iter(|| {
            let mut slots = header_slots::<32>();
            match parse_request(black_box(request.as_bytes()), &mut slots, &limits) {
                Ok(Parsed::Complete(r, n)) => (r.query.len(), n),
                _ => unreachable!(),
            }
        })
    });
    c.bench_function("announce_query_parse", |b| {
        b.iter(|| parse_announce(black_box(&query)).unwrap())
    });
    let mut packet = Vec::new();
    udp::write_announce_request(
        &mut packet,
        &udp::AnnounceRequest {
            connection_id: 1,
            transaction_id: 2,
            info_hash: [3; 20],
            peer_id: [4; 20],
            downloaded: 5,
            left: 6,
            uploaded: 7,
            event: Event::Started,
            ip: 0,
            key: 8,
            num_want: 50,
            port: 6881,
            options: udp::Options(&[
                2, 9, b'/', b'a', b'n', b'n', b'o', b'u', b'n', b'c', b'e', 0,
            ]),
        },
    );
    c.bench_function("udp_announce_parse", |b| {
        b.iter(|| udp::parse_request(black_box(&packet)).unwrap())
    });
    let peers = [7u8; 300];
    let mut out = Vec::with_capacity(1024);
    c.bench_function("announce_answer_write_50_peers", |b| {
        b.iter(|| {
            out.clear();
            out.extend_from_slice(b"d8:complete");
            put_int(&mut out, 25);
            out.extend_from_slice(b"10:incomplete");
            put_int(&mut out, 26);
            out.extend_from_slice(b"8:interval");
            put_int(&mut out, 1800);
            out.extend_from_slice(b"5:peers");
            put_bytes(&mut out, black_box(&peers));
            out.push(b'e');
            out.len()
        })
    });
}

criterion_group!(benches, codecs);
criterion_main!(benches);
