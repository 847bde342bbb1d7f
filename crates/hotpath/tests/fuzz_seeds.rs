//! The seed corpus of every fuzz target (`fuzz/seeds/<target>/`), made by the project's own
//! encoders and from its examples. The test fails when a committed seed differs from what the
//! encoders make now (a format changed) or a target has no seeds;
//! `HOTPATH_WRITE_SEEDS=1 cargo test -p hotpath --test fuzz_seeds` writes them anew.

use std::net::{IpAddr, Ipv6Addr};
use std::path::{Path, PathBuf};

use hotpath_lua::stored::LuaChange;
use hotpath_popups::stored::{PopupChange, CLICK, SHOWN};
use hotpath_store::journal::seal;
use hotpath_store::Encode;
use hotpath_tracker::private::stored::{
    AccountChange, Client, CountsChange, LogChange, LoggedAnnounce, RegistryChange,
};
use hotpath_tracker::stored::TorrentChange;
use hotpath_tracker::table::{Caps, PeerAnnounce, Selection, SwarmTable, Table};
use hotpath_wire::bencode::{put_bytes, put_failure, put_int};
use hotpath_wire::query::{write_announce, Announce, Event};
use hotpath_wire::udp;

#[derive(Default)]
struct Seeds {
    /// (target, file name, bytes).
    all: Vec<(String, String, Vec<u8>)>,
}

impl Seeds {
    fn put(&mut self, target: &str, name: &str, bytes: impl AsRef<[u8]>) {
        self.all
            .push((target.into(), name.into(), bytes.as_ref().to_vec()));
    }
}

fn announce() -> Announce {
    Announce {
        info_hash: *b"\x12\x34\x56\x78\x9a\xbc\xde\xf0\x11\x22\x33\x44\x55\x66\x77\x88\x99\xaa%&",
        peer_id: *b"-HP0001-abcdefghijkl",
        port: 6881,
        uploaded: 1024,
        downloaded: 2048,
        left: 4096,
        event: Event::Started,
        compact: true,
        no_peer_id: false,
        numwant: Some(50),
        key: Some(*b"k3y\0\0\0\0\0"),
        ipv6: None,
        ip: None,
    }
}

fn http(seeds: &mut Seeds) {
    let mut q = Vec::new();
    write_announce(&mut q, &announce());
    let get = |target: &[u8]| {
        [
            b"GET ".as_slice(),
            target,
            b" HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept-Encoding: gzip\r\n\r\n",
        ]
        .concat()
    };
    let announce = get(&[b"/announce?".as_slice(), &q].concat());
    seeds.put("http_request", "announce", &announce);
    seeds.put(
        "http_request",
        "pipelined",
        [
            announce.clone(),
            get(b"/scrape?info_hash=aaaaaaaaaaaaaaaaaaaa"),
            get(b"/healthz"),
        ]
        .concat(),
    );
    seeds.put(
        "http_request",
        "popup",
        get(b"/v1/popup?user=u%201&platform=ios&segment=a,b&app_version=2.1.0"),
    );
    seeds.put(
        "http_request",
        "post",
        "POST /v1/popup/event HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\
         Connection: keep-alive\r\n\r\n{}GET /metrics HTTP/1.0\r\n\r\n",
    );
    seeds.put(
        "http_request",
        "chunked",
        "POST /lua HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    );
    seeds.put(
        "http_request",
        "lengths",
        "PUT /admin/popups/1 HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
    );

    let mut chunked = vec![7u8];
    chunked.extend_from_slice(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n");
    seeds.put("http_response", "chunked_head", &chunked);
    seeds.put(
        "http_response",
        "chunked_body",
        b"\x03a;ext=1\r\n0123456789\r\n0\r\nTrailer: x\r\n\r\nrest",
    );
    seeds.put(
        "http_response",
        "length",
        b"\x01HTTP/1.1 503 Service Unavailable\r\nContent-Length: 12\r\nConnection: close\r\n\r\n",
    );
}

fn queries(seeds: &mut Seeds) {
    let mut a = announce();
    let mut q = Vec::new();
    write_announce(&mut q, &a);
    seeds.put("announce_query", "plain", &q);
    a.ip = Some(IpAddr::from([203, 0, 113, 7]));
    a.ipv6 = Some((Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1), Some(51413)));
    a.event = Event::Completed;
    a.compact = false;
    a.no_peer_id = true;
    q.clear();
    write_announce(&mut q, &a);
    seeds.put("announce_query", "addresses", &q);
    seeds.put(
        "announce_query",
        "odd",
        b"info_hash=%zz&peer_id=12345678901234567890&port=0&ipv6=fe80::1%25eth0&ip=example.org\
          &numwant=99999999999999999999&event=paused&key=%ff%fe",
    );
    seeds.put(
        "passkey",
        "path",
        b"\x00/0123456789abcdefABCDEF0123456789/announce",
    );
    seeds.put("passkey", "query", b"\x02uk/announce?info_hash=x&uk=Ab12");
    seeds.put(
        "passkey",
        "twice",
        b"\x07passkey/scrape/k1?passkey=k2&passkey=k3",
    );
    seeds.put(
        "scrape_query",
        "two",
        b"\x05info_hash=aaaaaaaaaaaaaaaaaaaa&info_hash=%12%34%56%78%9a%bc%de%f0%11%22%33%44%55%66%77%88%99%aa%25%26",
    );
    seeds.put(
        "popup_query",
        "full",
        b"user=alice&platform=android&country=DE&app_version=3.2.1&segment=paying,new&segment=beta&cb=123",
    );
    seeds.put(
        "popup_query",
        "escaped",
        b"user=%E2%9C%93%20b&segment=%2C%2C&app_version=1",
    );
}

fn udp_packets(seeds: &mut Seeds) {
    let mut b = Vec::new();
    udp::write_connect_request(&mut b, 42);
    seeds.put("udp_request", "connect", &b);
    let a = announce();
    let mut req = udp::AnnounceRequest {
        connection_id: 0x1122_3344_5566_7788,
        transaction_id: 7,
        info_hash: a.info_hash,
        peer_id: a.peer_id,
        downloaded: 1,
        left: 2,
        uploaded: 3,
        event: Event::Started,
        ip: 0,
        key: 0xdead_beef,
        num_want: -1,
        port: 6881,
        options: udp::Options(&[]),
    };
    b.clear();
    udp::write_announce_request(&mut b, &req);
    seeds.put("udp_request", "announce", &b);
    let opts = b"\x02\x0c/announce?ab\x01\x02\x12info_hash=xxxxxxxx\x09\x00\x00";
    req.options = udp::Options(opts);
    b.clear();
    udp::write_announce_request(&mut b, &req);
    seeds.put("udp_request", "announce_options", &b);
    b.clear();
    udp::write_scrape_request(&mut b, 5, 6, &[[1; 20], [2; 20]]);
    seeds.put("udp_request", "scrape", &b);

    b.clear();
    udp::write_connect(&mut b, 42, 0x0102_0304_0506_0708);
    seeds.put("udp_response", "connect", &b);
    b.clear();
    udp::write_announce_head(&mut b, 7, 1800, 3, 4);
    b.extend_from_slice(&[127, 0, 0, 1, 0x1a, 0xe1]);
    seeds.put("udp_response", "announce", &b);
    b.clear();
    udp::write_scrape_head(&mut b, 9);
    udp::write_scrape_entry(&mut b, 1, 2, 3);
    seeds.put("udp_response", "scrape", &b);
    b.clear();
    udp::write_error(&mut b, 9, "unknown info hash", 100);
    seeds.put("udp_response", "error", &b);
}

fn bencode(seeds: &mut Seeds) {
    let mut out = b"d".to_vec();
    put_bytes(&mut out, b"complete");
    put_int(&mut out, 5);
    put_bytes(&mut out, b"interval");
    put_int(&mut out, 1800);
    put_bytes(&mut out, b"peers");
    put_bytes(&mut out, &[127, 0, 0, 1, 0x1a, 0xe1]);
    put_bytes(&mut out, b"files");
    out.extend_from_slice(b"ld2:idi-3eee");
    out.push(b'e');
    seeds.put("bencode", "announce", &out);
    out.clear();
    put_failure(&mut out, "unregistered torrent");
    seeds.put("bencode", "failure", &out);
    seeds.put("bencode", "nested", b"llllllllllllllleeeeeeeeeeeeeee");
}

fn journal(seeds: &mut Seeds) {
    let changes: [&dyn Encode; 11] = [
        &TorrentChange {
            info_hash: [9; 20],
            completed: 1,
            seeders: 2,
            leechers: 3,
            at: 1_800_000_000,
        },
        &PopupChange {
            user: "alice",
            popup: 4,
            action: SHOWN,
            next_eligible: 1_800_003_600,
            shows: 1,
            at: 1_800_000_000,
            answers: 0,
        },
        &PopupChange {
            user: "alice",
            popup: 4,
            action: CLICK,
            next_eligible: u64::MAX,
            shows: 1,
            at: 1_800_000_060,
            answers: 1_800_000_000,
        },
        &LuaChange::Row {
            table: "checkins".into(),
            at: 1_800_000_000,
            data: "{\"user\":\"bob\"}".into(),
        },
        &LuaChange::Add {
            table: "visits".into(),
            key: "bob".into(),
            column: "count".into(),
            delta: -2,
            at: 1_800_000_000,
        },
        &AccountChange {
            user: 7,
            torrent: 11,
            uploaded: 2000,
            downloaded: 500,
            uploaded_raw: 1000,
            downloaded_raw: 1000,
            remaining: 0,
            completed: 1,
            flags: AccountChange::SEEDING,
            at: 1_800_000_000,
            client: None,
        },
        &AccountChange {
            user: 8,
            torrent: 11,
            uploaded: 20,
            downloaded: 5,
            uploaded_raw: 10,
            downloaded_raw: 10,
            remaining: 100,
            completed: 0,
            flags: AccountChange::STOPPED,
            at: 1_800_000_001,
            client: Some(Client {
                peer_id: *b"-TR4050-abcdefghijkl",
                ip: "2001:db8::9".parse().unwrap(),
                port: 51413,
                uploaded: 10,
                downloaded: 10,
                speed_up: 1,
                speed_down: 1,
                since: 2,
            }),
        },
        &CountsChange {
            torrent: 11,
            seeders: 3,
            leechers: 4,
            at: 1_800_000_002,
        },
        &RegistryChange::User {
            id: 12,
            passkey: "k12".into(),
            can_leech: true,
            removed: false,
            at: 1_800_000_003,
        },
        &RegistryChange::Torrent {
            id: 13,
            info_hash: [0x13; 20],
            download_pct: 0,
            upload_pct: 200,
            removed: true,
            at: 1_800_000_004,
        },
        &LogChange {
            ip: [0x14; 16],
            uid: 14,
            at: 1_800_000_005,
            announce: Some(LoggedAnnounce {
                port: 6881,
                event: 3,
                info_hash: [0x15; 20],
                peer_id: [0x16; 20],
                downloaded: 1,
                left: 2,
                uploaded: 3,
            }),
        },
    ];
    let mut payload = Vec::new();
    for c in &changes {
        c.encode(&mut payload);
    }
    let mut segment = Vec::new();
    for (seq, c) in changes.iter().enumerate() {
        let mut record = vec![0u8; 16];
        c.encode(&mut record);
        seal(&mut record, seq as u64 + 1);
        segment.extend_from_slice(&record);
    }
    seeds.put("journal", "payload", &payload);
    seeds.put("journal", "segment", &segment);
    seeds.put("journal", "torn", &segment[..segment.len() - 3]);
    let floor = [(0, 17), (65536, 1_800_000_000_000_000)]
        .into_iter()
        .collect();
    let dir = std::env::temp_dir().join(format!("hotpath-floor-seed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    hotpath_store::journal::write_floor(&dir, &floor).unwrap();
    let text = std::fs::read(dir.join(hotpath_store::journal::FLOOR_FILE)).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(hotpath_store::journal::parse_floor(&text), Ok(floor));
    seeds.put("journal", "floor", &text);

    // The refused-rows file, one line per row of those changes (as the flusher writes it).
    let mut pending = hotpath_store::queue::Queues::new(&hotpath::STORED).unwrap();
    let mut encoded = Vec::new();
    for c in &changes {
        c.encode(&mut encoded);
    }
    pending.apply(&encoded).unwrap();
    pending.covered(0, 4);
    let batch = pending.take();
    let dir = std::env::temp_dir().join(format!("hotpath-refused-seed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = hotpath_store::refused::path(&dir);
    let every: Vec<(usize, String)> = (0..batch.rows()).map(|i| (i, "refused".into())).collect();
    assert!(hotpath_store::refused::append(&file, "db", &batch, &every, 1 << 20).unwrap());
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    // The same seed on every run: the time of the refusal fixed.
    let mut fixed = String::new();
    for line in text.lines() {
        let mut v: serde_json::Value = serde_json::from_str(line).unwrap();
        v["refused_at"] = 1_800_000_000.into();
        fixed.push_str(&format!("{v}\n"));
    }
    seeds.put("refused_file", "every_table", &fixed);
}

/// One torrent's snapshot body: six peers (IPv4 and IPv6, seeders and leechers, one IPv4 peer
/// with an IPv6 alias).
fn one_torrent(hash: u8) -> Vec<u8> {
    let table = Table::<20>::new(1, Caps::LARGE);
    let mut rng = fastrand::Rng::with_seed(1);
    let mut sel = Selection::default();
    for n in 0..6u8 {
        let v6 = |first: u8| {
            let mut v6 = [0u8; 18];
            v6[0] = first;
            v6[15] = n;
            v6[17] = 1;
            v6
        };
        let a = PeerAnnounce {
            info_hash: [hash; 20],
            peer_id: [n; 20],
            v4: (n % 3 != 2).then_some([127, 0, 0, n, 0x1a, 0xe1]),
            v6: (n % 3 == 2).then(|| v6(0x20)),
            alias6: (n == 1).then(|| v6(0x24)),
            seeder: n % 2 == 0,
            complete: false,
            event: Event::Started,
            want: 50,
            want_v4: true,
            want_v6: true,
        };
        table
            .announce(&a, 100, &mut rng, &mut sel)
            .expect("an announce");
    }
    let mut body = Vec::new();
    table.save(110, &mut body);
    body
}

fn snapshot(seeds: &mut Seeds) {
    let body = [one_torrent(1), one_torrent(2)].concat();
    // Flags: peer ids kept (1), the format with the alias count (2), 20-byte ids saved (4).
    seeds.put("snapshot", "ids", [&[7u8][..], &body].concat());
    let mut file = b"HPSWARM2".to_vec();
    file.extend_from_slice(&1_800_000_000i64.to_le_bytes());
    file.push(20);
    file.extend_from_slice(&body);
    let crc = crc32fast::hash(&file);
    file.extend_from_slice(&crc.to_le_bytes());
    seeds.put("snapshot", "file", &file);
}

fn connection_key(seeds: &mut Seeds) {
    let mut file = b"HPCONNK1".to_vec();
    file.extend_from_slice(&1_800_000_000i64.to_le_bytes());
    file.extend_from_slice(&[9u8; 16]);
    let crc = crc32fast::hash(&file);
    file.extend_from_slice(&crc.to_le_bytes());
    seeds.put("connection_key", "fresh", &file);
}

fn exchange_message(seeds: &mut Seeds) {
    use hotpath_wire::exchange::{begin, put, seal, Delta};
    // The fuzz target's key.
    let key = *b"hotpath-fuzz-key";
    let hash = *b"\x12\x34\x56\x78\x9a\xbc\xde\xf0\x11\x22\x33\x44\x55\x66\x77\x88\x99\xaa%&";
    let at = 1_800_000_000 - 30;
    let mut v6 = Delta::v6(
        hash,
        [
            0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0x1a, 0xe1,
        ],
        at,
    );
    v6.seeder = true;
    v6.peer_id = Some(*b"-HP0001-abcdefghijkl");
    let mut gone = Delta::v4(hash, [192, 0, 2, 7, 0x1a, 0xe1], at);
    gone.stopped = true;
    gone.snatched = true;
    let mut msg = Vec::new();
    let start = begin(&mut msg, 2, 1_800_000_000_000);
    for d in [Delta::v4(hash, [192, 0, 2, 7, 0x1a, 0xe1], at), v6, gone] {
        put(&mut msg, &d);
    }
    seal(&mut msg, start, &key);
    seeds.put("exchange_message", "three_deltas", &msg);
    let mut empty = Vec::new();
    let start = begin(&mut empty, 3, 1_800_000_000_000);
    seal(&mut empty, start, &key);
    seeds.put("exchange_message", "empty", &empty);
}

fn proxy_header(seeds: &mut Seeds) {
    let mut v2 = Vec::new();
    hotpath_wire::proxy::write_v2(
        &mut v2,
        "203.0.113.7:51000".parse().unwrap(),
        "10.0.0.2:6969".parse().unwrap(),
    );
    v2.extend_from_slice(b"GET /announce HTTP/1.1\r\n\r\n");
    seeds.put("proxy_header", "v2_ipv4", &v2);
    let mut v6 = Vec::new();
    hotpath_wire::proxy::write_v2(
        &mut v6,
        "[2001:db8::7]:51000".parse().unwrap(),
        "[2001:db8::1]:6969".parse().unwrap(),
    );
    seeds.put("proxy_header", "v2_ipv6", &v6);
    seeds.put(
        "proxy_header",
        "v1",
        "PROXY TCP4 198.51.100.22 203.0.113.7 35646 80\r\n",
    );
}

fn websocket(seeds: &mut Seeds) {
    use hotpath_wire::webtorrent::{self as wt, Event, Id};
    use hotpath_wire::ws::{write_client_frame, Opcode};
    let announce = wt::Announce {
        info_hash: Id(
            *b"\x12\x34\x56\x78\x9a\xbc\xde\xf0\x11\x22\x33\x44\x55\x66\x77\x88\x99\xaa%&",
        ),
        peer_id: Id(*b"-WW0210-abcdefghijkl"),
        numwant: Some(5),
        uploaded: Some(0),
        downloaded: Some(1024),
        left: Some(4096),
        event: Event::Started,
        offers: vec![wt::Offer {
            offer_id: Id([0xfe; 20]),
            offer: wt::Sdp {
                kind: "offer".into(),
                sdp: "v=0\r\no=- 4 2 IN IP4 127.0.0.1\r\ns=-\r\na=ice-ufrag:x\r\n".into(),
            },
        }],
    };
    let mut text = Vec::new();
    wt::write_client_announce(&mut text, &announce);
    seeds.put("webtorrent_message", "announce", &text);
    let answer = wt::Answer {
        info_hash: announce.info_hash,
        peer_id: Id(*b"-WW0210-zyxwvutsrqpo"),
        to_peer_id: announce.peer_id,
        offer_id: Id([0xfe; 20]),
        answer: wt::Sdp {
            kind: "answer".into(),
            sdp: "v=0\r\n".into(),
        },
    };
    let mut a = Vec::new();
    wt::write_client_answer(&mut a, &answer);
    seeds.put("webtorrent_message", "answer", &a);
    seeds.put(
        "webtorrent_message",
        "scrape",
        r#"{"action":"scrape","info_hash":["aaaaaaaaaaaaaaaaaaaa","\u0000\u00ffbbbbbbbbbbbbbbbbbb"]}"#,
    );
    let mut frames = Vec::new();
    write_client_frame(&mut frames, Opcode::Text, false, &text[..20], [1, 2, 3, 4]);
    write_client_frame(&mut frames, Opcode::Ping, true, b"p", [5, 6, 7, 8]);
    write_client_frame(
        &mut frames,
        Opcode::Continuation,
        true,
        &text[20..],
        [9, 9, 9, 9],
    );
    write_client_frame(
        &mut frames,
        Opcode::Close,
        true,
        &1000u16.to_be_bytes(),
        [0; 4],
    );
    seeds.put("ws_frame", "fragments_ping_close", &frames);
    let mut long = Vec::new();
    write_client_frame(&mut long, Opcode::Text, true, &[b'x'; 300], [3; 4]);
    seeds.put("ws_frame", "sixteen_bit_length", &long);
}

fn popups(seeds: &mut Seeds) {
    let signer = hotpath_wire::popup_token::Signer::new(b"fuzz secret");
    let mut token = Vec::new();
    signer.sign(&mut token, "alice", 7, 1_800_000_000);
    let token = String::from_utf8(token).expect("ASCII");
    seeds.put("popup_token", "signed", format!("{token}\nalice"));
    seeds.put("popup_token", "bad", "ffffffffffffffff.0000000000000000\n");
    seeds.put(
        "popup_event",
        "click",
        format!(r#"{{"user":"alice","popup":7,"action":"click","token":"{token}"}}"#),
    );
    seeds.put(
        "popup_event",
        "wrong",
        r#"{"user":"","popup":"three","action":"open","token":1,"extra":null}"#,
    );
    seeds.put(
        "popup_json",
        "full",
        r#"{"id":3,"name":"Spring sale","payload":{"title":"Sale","discount":0.25,"tags":["a"]},
"priority":10,"starts_at":1700000000,"ends_at":1900000000,
"targeting":{"platform":{"include":["ios","android"]},"country":{"exclude":["FR"]},
"segment":{"include":["paying"]},"app_version_min":"2.0.0","app_version_max":"3.9.9"},
"rollout_percent":50,
"frequency":{"cooldown":3600,"after_close":"never","after_click":604800,"max_shows":3,"daily_cap":1000},
"enabled":true}"#,
    );
    seeds.put(
        "popup_json",
        "minimal",
        r#"{"id":1,"name":"n","payload":null}"#,
    );
    seeds.put(
        "lua_json",
        "object",
        r#"{"user":"bob","n":[1,2.5,-3e10,null,true],"nested":{"a":{"b":{}}},"s":"\u00e9\ud83d\ude00"}"#,
    );
    seeds.put("lua_json", "deep", "[".repeat(200));
    let mut trim = b"^%s*(.-)%s*$\xffx".to_vec();
    trim.extend(std::iter::repeat_n(b' ', 2000));
    trim.push(b'x');
    seeds.put("lua_pattern", "trim", trim);
    seeds.put(
        "lua_pattern",
        "classes",
        &b"%f[%w](%a+)%s*=%s*(%b\"\")()[^%]%-]+%1\xffname = \"v\" and name"[..],
    );
    seeds.put("lua_pattern", "malformed", &b"[a-%\xff]x"[..]);
}

fn files(seeds: &mut Seeds, repo: &Path) {
    seeds.put("config", "defaults", hotpath_config::Config::default_toml());
    let example = repo.join("examples/lua/hotpath.toml");
    if let Ok(text) = std::fs::read(&example) {
        seeds.put("config", "lua_example", text);
    }
    seeds.put(
        "config",
        "bad",
        "[server]\nworkers = -1\n[tracker]\nmax_peers = 0\nannounce_interval_secs = 1e400\n[listen]\nhttp = [\"[::1]:0\"]\n",
    );
    seeds.put(
        "access_list",
        "list",
        "# allowed\n0123456789abcdef0123456789abcdef01234567\n\nABCDEFABCDEFABCDEFABCDEFABCDEFABCDEFABCD # a comment\n",
    );
}

fn push_api(seeds: &mut Seeds) {
    use hotpath_tracker::private::push::{encode_line, Push};
    let hash = "0123456789abcdef0123456789abcdef01234567";
    let req = |method: u8, path: &str, body: &str| {
        [&[method], path.as_bytes(), b"\0", body.as_bytes()].concat()
    };
    seeds.put(
        "push_api",
        "user",
        req(
            1,
            "/admin/tracker/users/7",
            r#"{"passkey":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa1","can_leech":false}"#,
        ),
    );
    seeds.put(
        "push_api",
        "torrent",
        req(
            1,
            "/admin/tracker/torrents/9",
            &format!(r#"{{"info_hash":"{hash}","download_pct":50,"upload_pct":200}}"#),
        ),
    );
    seeds.put(
        "push_api",
        "token",
        req(1, "/admin/tracker/tokens/7/9", r#"{"until":2000}"#),
    );
    seeds.put(
        "push_api",
        "clients",
        req(
            1,
            "/admin/tracker/clients",
            r#"{"allow":["-TR","-qB"],"deny":["-TR2"]}"#,
        ),
    );
    seeds.put(
        "push_api",
        "intervals",
        req(
            1,
            "/admin/tracker/intervals",
            r#"{"interval_secs":1800,"min_interval_secs":900}"#,
        ),
    );
    seeds.put(
        "push_api",
        "delete",
        req(2, "/admin/tracker/users/7/freeleech", ""),
    );
    seeds.put(
        "push_api",
        "batch",
        req(3, "/admin/tracker/batch", r#"[{"op":"token","user":1,"torrent":2},{"op":"personal_freeleech","user":3,"until":0},{"op":"freeleech","download_pct":0,"upload_pct":100},{"op":"remove_token","user":1,"torrent":2}]"#),
    );
    let mut line = Vec::new();
    encode_line(
        &Push::Token {
            user: 1,
            torrent: 2,
            until: 0,
        },
        &mut line,
    );
    seeds.put("push_api", "log_line", line);
}

fn ocelot_api(seeds: &mut Seeds) {
    let hash = "%01%02%03%04%05%06%07%08%09%0A%0B%0C%0D%0E%0F%10%11%12%13%14";
    let key = "a".repeat(32);
    for (name, query) in [
        (
            "add_user",
            format!("action=add_user&id=3&passkey={key}&visible=0"),
        ),
        (
            "change_passkey",
            format!(
                "action=change_passkey&oldpasskey={key}&newpasskey={}",
                "b".repeat(32)
            ),
        ),
        (
            "add_torrent",
            format!("action=add_torrent&id=7&info_hash={hash}&freetorrent=1"),
        ),
        (
            "update_torrents",
            format!("action=update_torrents&info_hashes={hash}{hash}&freetorrent=2"),
        ),
        (
            "add_token",
            format!("action=add_token&info_hash={hash}&userid=3"),
        ),
        (
            "delete_torrent",
            format!("action=delete_torrent&info_hash={hash}&reason=4"),
        ),
        (
            "whitelist",
            "action=edit_whitelist&old_peer_id=-TR&new_peer_id=-qB".to_string(),
        ),
        (
            "remove_users",
            format!("action=remove_users&passkeys={key}{key}"),
        ),
    ] {
        seeds.put("ocelot_api", name, query);
    }
}

fn unit3d_api(seeds: &mut Seeds) {
    let req = |method: u8, path: &str, body: &str| {
        [&[method], path.as_bytes(), b"\0", body.as_bytes()].concat()
    };
    let hash = "0123456789abcdef0123456789abcdef01234567";
    for (name, method, path, body) in [
        (
            "torrent",
            0,
            "/torrents",
            format!(
                r#"{{"id":7,"status":1,"info_hash":"{hash}","is_deleted":false,"seeders":0,"leechers":0,"times_completed":0,"download_factor":50,"upload_factor":200}}"#
            ),
        ),
        (
            "user",
            0,
            "/users",
            r#"{"id":3,"group_id":4,"passkey":"abc","can_download":true,"num_seeding":0,"num_leeching":0}"#.to_string(),
        ),
        (
            "group",
            0,
            "/groups",
            r#"{"id":4,"slug":"vip","download_slots":2,"is_immune":true,"is_freeleech":true,"is_double_upload":false}"#.to_string(),
        ),
        ("blacklist", 1, "/blacklisted-agents", r#"{"peer_id_prefix":"-XL"}"#.to_string()),
        ("token", 0, "/freeleech-tokens", r#"{"user_id":3,"torrent_id":7}"#.to_string()),
        ("featured", 0, "/featured-torrents", r#"{"torrent_id":7}"#.to_string()),
        ("show", 2, "/users/3", String::new()),
    ] {
        seeds.put("unit3d_api", name, req(method, path, &body));
    }
}

fn ledger(seeds: &mut Seeds) {
    use hotpath_tracker::private::ledger::{Ledger, Report, MAGIC};
    let l = Ledger::new(3, 100, true);
    for (torrent, user, peer) in [(1, 7, 1u8), (1, 7, 2), (2, 8, 1)] {
        let id = [peer; 20];
        let report = |uploaded, now| Report {
            torrent,
            user,
            peer_id: &id,
            uploaded,
            downloaded: 0,
            stopped: false,
            leeching: user == 7,
            leech_limit: &|_| 0,
            slots: &|_| 0,
            now,
        };
        l.report(report(0, 10)).unwrap();
        l.report(report(1000, 20)).unwrap();
    }
    let mut saved = Vec::new();
    l.save(30, 1_700_000_000, &mut saved);
    // The target takes a downtime byte and the file after its magic (it adds the checksum);
    // the key, so the peer id hashes, and the peers' order vary by run, so the seed fixes
    // the key and the hashes and sorts the peers.
    let (head, peers) = saved[MAGIC.len()..].split_at(24);
    let mut entries: Vec<Vec<u8>> = peers.chunks(36).map(<[u8]>::to_vec).collect();
    entries.sort_by(|a, b| a[..8].cmp(&b[..8]));
    for (i, e) in entries.iter_mut().enumerate() {
        e[8..16].copy_from_slice(&(i as u64 + 1).to_le_bytes());
    }
    let mut body = vec![3u8];
    body.extend_from_slice(&head[..8]);
    body.extend_from_slice(&[0x42; 16]);
    body.extend(entries.concat());
    seeds.put("ledger", "three_peers", body);
}

fn all() -> Seeds {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut seeds = Seeds::default();
    http(&mut seeds);
    queries(&mut seeds);
    udp_packets(&mut seeds);
    bencode(&mut seeds);
    journal(&mut seeds);
    snapshot(&mut seeds);
    connection_key(&mut seeds);
    exchange_message(&mut seeds);
    proxy_header(&mut seeds);
    websocket(&mut seeds);
    popups(&mut seeds);
    push_api(&mut seeds);
    ocelot_api(&mut seeds);
    unit3d_api(&mut seeds);
    ledger(&mut seeds);
    files(&mut seeds, &repo);
    seeds
}

#[test]
fn every_fuzz_target_has_current_seeds() {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let root = fuzz.join("seeds");
    let seeds = all();
    let write = std::env::var_os("HOTPATH_WRITE_SEEDS").is_some();
    let mut stale = Vec::new();
    for (target, name, bytes) in &seeds.all {
        let path: PathBuf = root.join(target).join(name);
        if write {
            std::fs::create_dir_all(root.join(target)).expect("the seeds directory");
            std::fs::write(&path, bytes).expect("a seed file");
        } else if std::fs::read(&path).ok().as_ref() != Some(bytes) {
            stale.push(path.display().to_string());
        }
    }
    assert!(
        stale.is_empty(),
        "fuzz seeds differ from what the encoders make now: {stale:?}; \
         write them anew with HOTPATH_WRITE_SEEDS=1 cargo test -p hotpath --test fuzz_seeds"
    );
    // Every target is seeded.
    let mut targets = Vec::new();
    for entry in std::fs::read_dir(fuzz.join("fuzz_targets")).expect("fuzz/fuzz_targets") {
        let name = entry.expect("an entry").file_name();
        let name = name.to_string_lossy();
        if let Some(target) = name.strip_suffix(".rs") {
            targets.push(target.to_string());
        }
    }
    assert!(targets.len() >= 16, "fuzz targets: {targets:?}");
    for t in &targets {
        assert!(
            seeds.all.iter().any(|(target, _, _)| target == t),
            "fuzz target {t} has no seeds"
        );
    }
}
