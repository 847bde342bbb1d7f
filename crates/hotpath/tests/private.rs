//! Private mode against the real server on its default SQLite store: passkeys in every place a
//! client puts them (path, query, BEP 41 URL data), each refusal with its own reason, users
//! and torrents read from hp_users and hp_private_torrents as the site changes them, and
//! rows an attacker could have written to the site's tables left out without stopping the
//! rest.

mod common;

use std::time::Duration;

use common::*;
use hotpath_config::{Config, PortRange, TrackerMode};
use hotpath_store::table::Value;
use hotpath_wire::query::{write_announce, Announce, Event};
use hotpath_wire::udp::{self, Response};

const FREE: [u8; 20] = [0x51; 20];
const NORMAL: [u8; 20] = [0x52; 20];
const UNKNOWN: [u8; 20] = [0x53; 20];
const KEY: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa1";
const SEED_ONLY: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb2";

fn private_config() -> Config {
    let mut c = test_config();
    c.tracker.mode = TrackerMode::Private;
    // Every test client is 127.0.0.1, and some send many unknown passkeys on purpose.
    c.private.max_auth_failures_per_min = 100_000;
    c.private.poll_secs = 1;
    c.private.peer_id_deny = vec!["-BAD".into()];
    c.private.port_deny = vec![PortRange::try_from("6881-6889".to_string()).unwrap()];
    c
}

/// Runs `sql` with `params` on the server's SQLite file, as the site would.
fn site(config: &Config, sql: &str, params: &[Value]) {
    let dir = std::path::Path::new(&config.store.data_dir);
    let mut db = hotpath_store::backend::connect("", dir).unwrap();
    db.execute_with(sql, params).unwrap();
}

fn now() -> i64 {
    hotpath_store::unix_now()
}

fn add_user(c: &Config, id: i64, key: &str, can_leech: i64) {
    site(
        c,
        "INSERT INTO hp_users (user_id, passkey, can_leech, updated_at) VALUES (?, ?, ?, ?)",
        &[id.into(), key.into(), can_leech.into(), now().into()],
    );
}

fn add_torrent(c: &Config, id: i64, hash: &[u8], download_pct: i64) {
    site(
        c,
        "INSERT INTO hp_private_torrents (torrent_id, info_hash, download_pct, updated_at) \
         VALUES (?, ?, ?, ?)",
        &[
            id.into(),
            Value::Blob(hash.into()),
            download_pct.into(),
            now().into(),
        ],
    );
}

fn announce_query(hash: [u8; 20], n: u8, port: u16, left: u64) -> String {
    let mut q = Vec::new();
    write_announce(&mut q, &announce(hash, n, port, left, Event::Started));
    String::from_utf8(q).unwrap()
}

fn metric(admin: &mut Client, line_start: &str) -> f64 {
    let text = String::from_utf8(admin.get("/metrics").body).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(line_start)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// A UDP announce whose BEP 41 URL data is `url_data`.
fn udp_announce(u: &Udp, hash: [u8; 20], url_data: &[u8]) -> Response<'static> {
    let mut opts = Vec::new();
    for chunk in url_data.chunks(255) {
        opts.extend_from_slice(&[2, chunk.len() as u8]);
        opts.extend_from_slice(chunk);
    }
    let a = udp::AnnounceRequest {
        connection_id: u.connection_id,
        transaction_id: 9,
        info_hash: hash,
        peer_id: *b"-TR4060-udpudpudpudp",
        downloaded: 0,
        left: 100,
        uploaded: 0,
        event: Event::Started,
        ip: 0,
        key: 1,
        num_want: -1,
        port: 51414,
        options: udp::Options(&opts),
    };
    let mut p = Vec::new();
    udp::write_announce_request(&mut p, &a);
    let r = u.exchange(&p, Duration::from_secs(2)).expect("an answer");
    let owned: &'static [u8] = Box::leak(r.into_boxed_slice());
    udp::parse_response(owned).unwrap()
}

#[test]
fn passkeys_registries_and_every_refusal() {
    let c = private_config();
    let server = start(&c);
    // The server made the tables; the site fills them, and the next poll reads them.
    add_user(&c, 1, KEY, 1);
    add_user(&c, 2, SEED_ONLY, 0);
    add_torrent(&c, 10, &FREE, 0);
    add_torrent(&c, 11, &NORMAL, 100);
    // Rows a hostile site form could have written: each is left out, the rest load.
    add_user(&c, 3, "not a passkey", 1);
    add_user(&c, 4_294_967_296, "cccccccc", 1);
    add_torrent(&c, 12, &[0x54; 19], 100);
    let mut http = Client::connect(server.http_addr().unwrap());
    let mut admin = Client::connect(server.admin_addr().unwrap());
    wait_until(
        "the poll to read the site's rows",
        Duration::from_secs(10),
        || {
            metric(&mut admin, "hotpath_private_users ") == 2.0
                && metric(&mut admin, "hotpath_private_torrents ") == 2.0
        },
    );
    assert!(metric(&mut admin, "hotpath_private_rows_skipped_total ") >= 3.0);

    // The passkey in each place a client puts it.
    let q = announce_query(FREE, 1, 51413, 0);
    for target in [
        format!("/{KEY}/announce?{q}"),
        format!("/announce/{KEY}?{q}"),
        format!("/announce?{q}&passkey={KEY}"),
    ] {
        let r = http.get(&target);
        assert_eq!(failure(&r.body), None, "{target}");
        assert_eq!(int(&r.body, "complete"), 1, "{target}");
    }
    // Each refusal, with its own reason.
    let cases = [
        (format!("/announce?{q}"), "needs a passkey"),
        (format!("/{KEY}/announce?{q}&passkey={KEY}"), "given twice"),
        (format!("/k%20y/announce?{q}"), "malformed passkey"),
        (
            format!("/{}/announce?{q}", "z".repeat(32)),
            "unknown passkey",
        ),
        (
            format!("/{KEY}/announce?{}", announce_query(UNKNOWN, 1, 51413, 0)),
            "not registered",
        ),
        (
            format!(
                "/{SEED_ONLY}/announce?{}",
                announce_query(FREE, 2, 51413, 5)
            ),
            "may not download",
        ),
        (
            format!("/{KEY}/announce?{}", announce_query(FREE, 3, 6885, 5)),
            "port",
        ),
    ];
    for (target, want) in &cases {
        let r = http.get(target);
        let reason = failure(&r.body).unwrap_or_default();
        assert!(reason.contains(want), "{target}: {reason:?}");
    }
    let mut bad_client = announce(FREE, 4, 51413, 5, Event::Started);
    bad_client.peer_id = *b"-BAD001-abcdefghijkl";
    let mut bq = Vec::new();
    write_announce(&mut bq, &bad_client);
    let r = http.get(&format!(
        "/{KEY}/announce?{}",
        String::from_utf8(bq).unwrap()
    ));
    assert!(failure(&r.body).unwrap().contains("client is not allowed"));
    // A seed-only user may seed.
    let r = http.get(&format!(
        "/{SEED_ONLY}/announce?{}",
        announce_query(NORMAL, 5, 51413, 0)
    ));
    assert_eq!(failure(&r.body), None);
    // Nothing refused changed a swarm: FREE holds the first announces' one peer.
    let r = http.get(&format!("/{KEY}/scrape?info_hash={}", pct(&FREE)));
    assert_eq!(failure(&r.body), None);
    let files = hotpath_wire::bencode::decode(&r.body).unwrap();
    let entry = file(&files, &FREE).unwrap();
    assert_eq!(entry.get("complete").unwrap().as_int(), Some(1));
    assert_eq!(entry.get("incomplete").unwrap().as_int(), Some(0));
    // A scrape needs a known passkey and shows registered torrents only.
    let r = http.get(&format!("/scrape?info_hash={}", pct(&FREE)));
    assert!(failure(&r.body).unwrap().contains("passkey"));
    let r = http.get(&format!("/{KEY}/scrape?info_hash={}", pct(&UNKNOWN)));
    let files = hotpath_wire::bencode::decode(&r.body).unwrap();
    assert!(file(&files, &UNKNOWN).is_none());

    for (reason, n) in [
        ("passkey", 4.0),
        ("unknown_passkey", 1.0),
        ("unknown_torrent", 1.0),
        ("may_not_leech", 1.0),
        ("client", 1.0),
        ("port", 1.0),
    ] {
        let line = format!("hotpath_private_refused_total{{reason=\"{reason}\"}} ");
        assert_eq!(metric(&mut admin, &line), n, "{reason}");
    }

    // UDP: the passkey comes in BEP 41's URL data.
    let mut u = Udp::new(server.udp_addr().unwrap());
    u.connect();
    let ok = udp_announce(&u, NORMAL, format!("/{KEY}/announce").as_bytes());
    assert!(
        matches!(
            ok,
            Response::Announce {
                seeders: 1,
                leechers: 1,
                ..
            }
        ),
        "{ok:?}"
    );
    // Long URL data comes in several options, joined.
    let split = format!("/announce?x={}&passkey={KEY}", "y".repeat(300));
    let ok = udp_announce(&u, NORMAL, split.as_bytes());
    assert!(matches!(ok, Response::Announce { .. }), "{ok:?}");
    for (data, want) in [
        (&b""[..], "needs a passkey"),
        (b"/zzzz/announce", "unknown passkey"),
        (b"/a/b/c", "not /<passkey>/announce"),
    ] {
        match udp_announce(&u, NORMAL, data) {
            Response::Error { message, .. } => {
                let m = String::from_utf8_lossy(message);
                assert!(m.contains(want), "{data:?}: {m}");
            }
            other => panic!("{data:?}: {other:?}"),
        }
    }

    // The site changes user 1's passkey and takes torrent 10 off: the next poll applies both.
    site(
        &c,
        "UPDATE hp_users SET passkey = ?, updated_at = ? WHERE user_id = 1",
        &["newkey1".into(), (now() + 1).into()],
    );
    wait_until("the new passkey to work", Duration::from_secs(10), || {
        let r = http.get(&format!("/newkey1/announce?{q}"));
        failure(&r.body).is_none()
    });
    let r = http.get(&format!("/{KEY}/announce?{q}"));
    assert!(failure(&r.body).unwrap().contains("unknown passkey"));
    site(
        &c,
        "DELETE FROM hp_private_torrents WHERE torrent_id = 10",
        &[],
    );
    // A deleted row is seen by a full read (every tenth poll).
    wait_until("the deleted torrent to go", Duration::from_secs(30), || {
        let r = http.get(&format!("/newkey1/announce?{q}"));
        failure(&r.body).is_some_and(|f| f.contains("not registered"))
    });
    server.shutdown().unwrap();
}

/// A scrape answer's entry for `hash`.
fn file<'a>(
    scrape: &'a hotpath_wire::bencode::Value<'a>,
    hash: &[u8],
) -> Option<&'a hotpath_wire::bencode::Value<'a>> {
    match scrape.get("files")? {
        hotpath_wire::bencode::Value::Dict(entries) => {
            entries.iter().find(|(k, _)| *k == hash).map(|(_, v)| v)
        }
        _ => None,
    }
}

fn pct(b: &[u8]) -> String {
    let mut out = Vec::new();
    hotpath_wire::query::percent_encode(&mut out, b);
    String::from_utf8(out).unwrap()
}

#[test]
fn a_schema_the_database_lacks_stops_the_start_with_the_key_to_fix() {
    let mut c = private_config();
    c.private.names.insert("users".into(), "members".into());
    let e = format!("{:#}", hotpath::start(&c).err().expect("refused"));
    assert!(e.contains("members"), "{e}");
    assert!(e.contains("private.names"), "{e}");
}

/// Sends `a` with passkey `key` in the path; it must be accepted.
fn accepted(http: &mut Client, key: &str, a: &Announce) {
    let mut q = Vec::new();
    write_announce(&mut q, a);
    let r = http.get(&format!(
        "/{key}/announce?{}",
        String::from_utf8(q).unwrap()
    ));
    assert_eq!(failure(&r.body), None);
}

/// Reads `sql` from the server's SQLite file: every row's integers.
fn rows(config: &Config, sql: &str) -> Vec<Vec<i64>> {
    let dir = std::path::Path::new(&config.store.data_dir);
    let mut db = hotpath_store::backend::connect("", dir).unwrap();
    let mut out = Vec::new();
    db.query(sql, &[], &mut |r| {
        out.push(r.iter().map(Value::int).collect())
    })
    .unwrap();
    out
}

#[test]
fn traffic_is_accounted_per_user_and_torrent_and_written_behind() {
    let c = private_config();
    let server = start(&c);
    add_user(&c, 1, KEY, 1);
    add_user(&c, 2, SEED_ONLY, 1);
    add_torrent(&c, 10, &FREE, 0);
    add_torrent(&c, 11, &NORMAL, 100);
    site(
        &c,
        "UPDATE hp_private_torrents SET upload_pct = 200 WHERE torrent_id = 11",
        &[],
    );
    let mut http = Client::connect(server.http_addr().unwrap());
    let mut admin = Client::connect(server.admin_addr().unwrap());
    wait_until("the poll", Duration::from_secs(10), || {
        metric(&mut admin, "hotpath_private_torrents ") == 2.0
    });
    let go = |http: &mut Client, key: &str, hash, n, up, down, left, event| {
        let mut a = announce(hash, n, 40000 + u16::from(n), left, event);
        a.uploaded = up;
        a.downloaded = down;
        accepted(http, key, &a);
    };
    // User 1 seeds NORMAL (double upload); user 2 leeches it and completes; user 2 also
    // leeches FREE (nothing downloaded counts). First announces credit nothing, whatever
    // their counters say.
    go(&mut http, KEY, NORMAL, 1, 5_000, 0, 0, Event::Started);
    go(
        &mut http,
        SEED_ONLY,
        NORMAL,
        2,
        0,
        9_999,
        1000,
        Event::Started,
    );
    go(&mut http, KEY, NORMAL, 1, 6_000, 0, 0, Event::None);
    go(
        &mut http,
        SEED_ONLY,
        NORMAL,
        2,
        0,
        10_999,
        0,
        Event::Completed,
    );
    go(&mut http, SEED_ONLY, FREE, 3, 0, 0, 500, Event::Started);
    go(&mut http, SEED_ONLY, FREE, 3, 100, 400, 100, Event::None);
    // A restarted client (counters went down) credits nothing.
    go(&mut http, SEED_ONLY, FREE, 3, 0, 10, 90, Event::None);
    go(&mut http, SEED_ONLY, FREE, 3, 50, 60, 0, Event::Stopped);
    let totals = "SELECT user_id, uploaded, downloaded, uploaded_raw, downloaded_raw \
                  FROM hp_user_totals ORDER BY user_id";
    wait_until("the flush", Duration::from_secs(10), || {
        rows(&c, totals).len() == 2
    });
    server.shutdown().unwrap();
    assert_eq!(
        rows(&c, totals),
        [vec![1, 2000, 0, 1000, 0], vec![2, 150, 1000, 150, 1450]]
    );
    let per_torrent = "SELECT user_id, torrent_id, uploaded, downloaded, remaining, seeding, \
                       active, announces, completed FROM hp_user_torrents \
                       ORDER BY user_id, torrent_id";
    assert_eq!(
        rows(&c, per_torrent),
        [
            vec![1, 11, 2000, 0, 0, 1, 1, 2, 0],
            // A known leecher that reports nothing left completes, whatever its event.
            vec![2, 10, 150, 0, 0, 1, 0, 4, 1],
            vec![2, 11, 0, 1000, 0, 1, 1, 2, 1],
        ]
    );
    for at in rows(
        &c,
        "SELECT completed_at FROM hp_user_torrents WHERE completed = 1",
    ) {
        assert!((at[0] - now()).abs() < 60, "{at:?}");
    }
}

/// On hotpath's own tables the ratio tiers read hp_user_totals, which hotpath itself adds
/// to: a user's own traffic moves them between tiers at the next poll after the flush.
/// The attack that once credited one user 1.2e19 bytes in 8 s: a client flipping its
/// `uploaded` between 0 and 2^48 - 1 (and reporting 2^64 - 1) as fast as it can. Now it is
/// credited at most `private.max_rate_bytes_per_sec` for each second it was seen (plus one),
/// what it claimed past that is counted, and its row is flagged suspicious; the `+=` that
/// once overflowed the database's column never comes near it, and another user's honest
/// traffic is credited as ever.
#[test]
fn a_client_flipping_its_counters_is_credited_no_more_than_the_rate() {
    let mut c = private_config();
    c.private.max_rate_bytes_per_sec = 1_000_000;
    let server = start(&c);
    add_user(&c, 1, KEY, 1);
    add_user(&c, 2, SEED_ONLY, 1);
    add_torrent(&c, 11, &NORMAL, 100);
    let mut http = Client::connect(server.http_addr().unwrap());
    let mut admin = Client::connect(server.admin_addr().unwrap());
    wait_until("the poll", Duration::from_secs(10), || {
        metric(&mut admin, "hotpath_private_torrents ") == 1.0
    });
    let go = |http: &mut Client, key: &str, n, up: u64, event| {
        let mut a = announce(NORMAL, n, 40000 + u16::from(n), 0, event);
        a.uploaded = up;
        accepted(http, key, &a);
    };
    go(&mut http, SEED_ONLY, 2, 0, Event::Started);
    let start = std::time::Instant::now();
    go(&mut http, KEY, 1, 0, Event::Started);
    for i in 0..3000 {
        let up = match i % 3 {
            0 => (1 << 48) - 1,
            1 => 0,
            _ => u64::MAX,
        };
        go(&mut http, KEY, 1, up, Event::None);
    }
    let seen = start.elapsed().as_secs() + 1;
    go(&mut http, SEED_ONLY, 2, 700, Event::None);
    let totals = "SELECT user_id, uploaded, uploaded_raw, suspicious FROM hp_user_totals \
                  ORDER BY user_id";
    wait_until("the flush", Duration::from_secs(10), || {
        rows(&c, totals).len() == 2
    });
    let cut = metric(&mut admin, "hotpath_private_credit_cut_total ");
    server.shutdown().unwrap();
    let got = rows(&c, totals);
    let (credited, suspicious) = (got[0][1], got[0][3]);
    assert!(
        credited as u64 <= 1_000_000 * (seen + 1),
        "{credited} bytes credited in {seen} s at 1 MB/s"
    );
    assert!(credited > 0, "each second's rate is credited");
    assert_eq!(
        got[0][2], credited,
        "raw is the credited amount before factors"
    );
    assert!(
        suspicious >= 1 && suspicious as f64 == cut,
        "{suspicious} flagged, {cut} cut"
    );
    assert_eq!(
        got[1],
        vec![2, 700, 700, 0],
        "an honest user is credited in full"
    );
    let per_torrent = "SELECT user_id, suspicious FROM hp_user_torrents ORDER BY user_id";
    assert_eq!(rows(&c, per_torrent), [vec![1, suspicious], vec![2, 0]]);
}

#[test]
fn the_ratio_tiers_follow_what_the_tracker_credits() {
    const THIRD: [u8; 20] = [0x54; 20];
    let mut c = private_config();
    c.private.ratio_tiers.insert("1".into(), 1);
    let server = start(&c);
    add_user(&c, 1, KEY, 1);
    add_torrent(&c, 11, &NORMAL, 100);
    add_torrent(&c, 12, &THIRD, 100);
    add_torrent(&c, 13, &UNKNOWN, 100);
    let mut http = Client::connect(server.http_addr().unwrap());
    let mut admin = Client::connect(server.admin_addr().unwrap());
    wait_until("the poll", Duration::from_secs(10), || {
        metric(&mut admin, "hotpath_private_torrents ") == 3.0
    });
    let mut go = |hash, up, down, left, event| {
        let mut a = announce(hash, 1, 40001, left, event);
        a.uploaded = up;
        a.downloaded = down;
        let mut q = Vec::new();
        write_announce(&mut q, &a);
        let r = http.get(&format!(
            "/{KEY}/announce?{}",
            String::from_utf8(q).unwrap()
        ));
        failure(&r.body)
    };
    // No totals yet: no ratio, no limit. Then 4000 bytes downloaded, none uploaded.
    assert_eq!(go(NORMAL, 0, 0, 9000, Event::Started), None);
    assert_eq!(go(THIRD, 0, 0, 9000, Event::Started), None);
    assert_eq!(go(NORMAL, 0, 4000, 5000, Event::None), None);
    wait_until("the flush and the poll", Duration::from_secs(10), || {
        metric(&mut admin, "hotpath_private_ratio_limited_users ") == 1.0
    });
    // Ratio 0, under 1: one slot, and two torrents already downloading.
    let refused = go(UNKNOWN, 0, 0, 9000, Event::Started).expect("refused");
    assert!(refused.contains("as your ratio allows"), "{refused}");
    assert_eq!(go(THIRD, 0, 0, 9000, Event::Stopped), None);
    assert_eq!(go(UNKNOWN, 0, 0, 9000, Event::Started).unwrap(), refused);
    // Uploading 5000 takes the ratio to 1.25: no tier again.
    assert_eq!(go(NORMAL, 5000, 4000, 5000, Event::None), None);
    wait_until("the flush and the poll", Duration::from_secs(10), || {
        metric(&mut admin, "hotpath_private_ratio_limited_users ") == 0.0
    });
    assert_eq!(go(UNKNOWN, 0, 0, 9000, Event::Started), None);
    assert_eq!(
        metric(
            &mut admin,
            "hotpath_private_refused_total{reason=\"leech_slots\"} "
        ),
        2.0
    );
    server.shutdown().unwrap();
}

#[test]
fn kill_9_loses_no_acknowledged_accounting() {
    let mut c = private_config();
    // Nothing reaches the database before the kill: the journal is all there is.
    c.store.flush_interval_ms = 600_000;
    let dir = std::path::PathBuf::from(&c.store.data_dir);
    let file = dir.join("hotpath.toml");
    std::fs::write(&file, c.to_commented_toml()).unwrap();
    let mut p = Proc::spawn(&file, &dir);
    add_user(&c, 1, KEY, 1);
    add_torrent(&c, 11, &NORMAL, 100);
    wait_until("the poll", Duration::from_secs(10), || {
        p.metric("hotpath_private_torrents") == 1.0
    });
    let mut http = Client::connect(p.http);
    let mut sent = 0;
    for i in 0..50u64 {
        let mut a = announce(NORMAL, 1, 40001, 0, Event::None);
        a.uploaded = i * 1000;
        let mut q = Vec::new();
        write_announce(&mut q, &a);
        let r = http.get(&format!(
            "/{KEY}/announce?{}",
            String::from_utf8(q).unwrap()
        ));
        assert_eq!(failure(&r.body), None);
        sent = i * 1000;
    }
    assert!(rows(&c, "SELECT uploaded FROM hp_user_totals").is_empty());
    p.signal("-KILL");
    // Started again (flushing at once), the journal's records reach the database.
    let mut c2 = c.clone();
    c2.store.flush_interval_ms = 100;
    std::fs::write(&file, c2.to_commented_toml()).unwrap();
    let mut p = Proc::spawn(&file, &dir);
    let totals = "SELECT uploaded, uploaded_raw FROM hp_user_totals WHERE user_id = 1";
    wait_until("the replayed accounting", Duration::from_secs(20), || {
        !rows(&c, totals).is_empty()
    });
    p.signal("-TERM");
    // The first announce credits nothing; each of the 49 after it 1000 bytes.
    assert_eq!(rows(&c, totals), [vec![sent as i64, sent as i64]]);
    let n = rows(&c, "SELECT announces FROM hp_user_torrents");
    assert_eq!(n, [vec![50]]);
}

const TOKEN: &str = "push-token-push-token";

/// The body of a JSON answer.
fn json(r: &Resp) -> serde_json::Value {
    serde_json::from_slice(&r.body)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&r.body)))
}

/// Regression: 148k passkey guesses and 216k push API token guesses in 6 s from one address.
/// Past `private.max_auth_failures_per_min`, every passkey (or token) from that address is
/// refused alike, the right one too, until its minute is over; each is counted.
#[test]
fn guessing_passkeys_and_tokens_from_one_address_is_throttled() {
    let mut c = private_config();
    c.private.admin_token = TOKEN.into();
    c.private.max_auth_failures_per_min = 5;
    let server = start(&c);
    add_user(&c, 1, KEY, 1);
    add_torrent(&c, 11, &NORMAL, 100);
    let mut http = Client::connect(server.http_addr().unwrap());
    let mut admin = Client::connect(server.admin_addr().unwrap());
    wait_until("the poll", Duration::from_secs(10), || {
        metric(&mut admin, "hotpath_private_torrents ") == 1.0
    });
    let q = announce_query(NORMAL, 1, 51413, 1000);
    let r = http.get(&format!("/{KEY}/announce?{q}"));
    assert_eq!(
        failure(&r.body),
        None,
        "the right passkey, before any guess"
    );
    for i in 0..5 {
        let r = http.get(&format!(
            "/guessguessguessguessguessguess{i:02}/announce?{q}"
        ));
        assert!(failure(&r.body).unwrap().starts_with("unknown passkey"));
    }
    let r = http.get(&format!("/{KEY}/announce?{q}"));
    assert!(
        failure(&r.body)
            .unwrap()
            .starts_with("too many unknown passkeys"),
        "{:?}",
        failure(&r.body)
    );
    assert_eq!(
        metric(
            &mut admin,
            "hotpath_private_refused_total{reason=\"guessing\"} "
        ),
        1.0
    );
    for _ in 0..5 {
        let r = admin.request("GET", "/admin/tracker", Some("push-token-push-tokeX"), "");
        assert_eq!(r.status, 401);
    }
    let r = admin.request("GET", "/admin/tracker", Some(TOKEN), "");
    assert_eq!(r.status, 429, "the right token too");
    assert!(r.head.contains("Retry-After: 60"), "{}", r.head);
    assert_eq!(
        metric(&mut admin, "hotpath_private_admin_throttled_total "),
        1.0
    );
    server.shutdown().unwrap();
}

/// A user the site adds between two polls an hour apart is served once SIGHUP asks for a
/// read, not an hour later; a control announce before the signal shows the poll alone would
/// not have read it yet.
#[test]
fn sighup_reads_the_users_and_torrents_tables_at_once() {
    let mut c = private_config();
    c.private.poll_secs = 3600;
    let server = start(&c);
    let mut http = Client::connect(server.http_addr().unwrap());
    add_user(&c, 1, KEY, 1);
    add_torrent(&c, 10, &NORMAL, 100);
    let q = announce_query(NORMAL, 1, 51413, 1000);
    let unknown = "unknown passkey: download the .torrent file again";
    // After the first poll (at start), long before the next: not read yet.
    let r = http.get(&format!("/{KEY}/announce?{q}"));
    assert_eq!(failure(&r.body).as_deref(), Some(unknown));
    server.reload();
    wait_until("the read SIGHUP asks for", Duration::from_secs(10), || {
        failure(&http.get(&format!("/{KEY}/announce?{q}")).body).is_none()
    });
    server.shutdown().unwrap();
}

#[test]
fn the_push_api_changes_what_the_next_announce_sees_and_outlives_a_restart() {
    let mut c = private_config();
    c.private.admin_token = TOKEN.into();
    // Only the pushes change the registries in this test: the tables are read once, at
    // start, while empty.
    c.private.poll_secs = 3600;
    let server = start(&c);
    let mut http = Client::connect(server.http_addr().unwrap());
    let mut admin = Client::connect(server.admin_addr().unwrap());
    let push = |admin: &mut Client, method: &str, path: &str, body: &str| {
        admin.request(method, path, Some(TOKEN), body)
    };
    // Who may push, and where.
    let r = admin.request("GET", "/admin/tracker", None, "");
    assert_eq!(r.status, 401);
    assert!(r.head.contains("WWW-Authenticate: Bearer"));
    let r = admin.request("GET", "/admin/tracker", Some("push-token-push-tokeX"), "");
    assert_eq!(r.status, 401);
    let r = http.request("GET", "/admin/tracker", Some(TOKEN), "");
    assert_eq!(r.status, 404, "the public listener has no push API");
    // A user and a torrent pushed are served on the next announce.
    let q = announce_query(NORMAL, 1, 51413, 1000);
    let r = http.get(&format!("/{KEY}/announce?{q}"));
    assert_eq!(
        failure(&r.body).as_deref(),
        Some("unknown passkey: download the .torrent file again")
    );
    let r = push(
        &mut admin,
        "PUT",
        "/admin/tracker/users/1",
        &format!(r#"{{"passkey":"{KEY}"}}"#),
    );
    assert_eq!((r.status, json(&r)["applied"].as_u64()), (200, Some(1)));
    let hash: String = NORMAL.iter().map(|b| format!("{b:02x}")).collect();
    let body = format!(r#"{{"info_hash":"{hash}","upload_pct":200}}"#);
    assert_eq!(
        push(&mut admin, "PUT", "/admin/tracker/torrents/11", &body).status,
        200
    );
    let r = http.get(&format!("/{KEY}/announce?{q}"));
    assert_eq!(failure(&r.body), None);
    // A seeder of user 2, so that answers have a peer to give.
    let body = format!(r#"{{"passkey":"{SEED_ONLY}","can_leech":false}}"#);
    assert_eq!(
        push(&mut admin, "PUT", "/admin/tracker/users/2", &body).status,
        200
    );
    let seed = announce_query(NORMAL, 2, 51414, 0);
    assert_eq!(
        failure(&http.get(&format!("/{SEED_ONLY}/announce?{seed}")).body),
        None
    );
    // A passkey changed through the push API: the old one is refused at once.
    let new_key = "cccccccccccccccccccccccccccccc33";
    let body = format!(r#"{{"passkey":"{new_key}"}}"#);
    assert_eq!(
        push(&mut admin, "PUT", "/admin/tracker/users/1", &body).status,
        200
    );
    let r = http.get(&format!("/{KEY}/announce?{q}"));
    assert_eq!(
        failure(&r.body).as_deref(),
        Some("unknown passkey: download the .torrent file again")
    );
    // A regular announce on time gets peers; one sooner than the minimum interval is
    // accounted but gets none, and a warning.
    let mut a = announce(NORMAL, 1, 51413, 1000, Event::None);
    let regular = |a: &Announce| {
        let mut q = Vec::new();
        write_announce(&mut q, a);
        format!("/{new_key}/announce?{}", String::from_utf8(q).unwrap())
    };
    a.downloaded = 4000;
    let r = http.get(&regular(&a));
    assert_eq!(failure(&r.body), None);
    let v = hotpath_wire::bencode::decode(&r.body).unwrap();
    assert!(
        v.get("warning message").is_some(),
        "{:?}",
        String::from_utf8_lossy(&r.body)
    );
    assert!(peers(&r.body, "peers").is_empty());
    // Freeleech: a token on torrent 11 for user 1, the site's double upload.
    assert_eq!(
        push(&mut admin, "PUT", "/admin/tracker/tokens/1/11", "").status,
        200
    );
    let body = r#"{"download_pct":100,"upload_pct":200}"#;
    assert_eq!(
        push(&mut admin, "PUT", "/admin/tracker/freeleech", body).status,
        200
    );
    a.downloaded = 9000;
    a.uploaded = 500;
    assert_eq!(failure(&http.get(&regular(&a)).body), None);
    // Pushed intervals are what clients are told, and the client lists are replaced.
    let body = r#"{"interval_secs":600,"min_interval_secs":0}"#;
    assert_eq!(
        push(&mut admin, "PUT", "/admin/tracker/intervals", body).status,
        200
    );
    a.uploaded = 600;
    let r = http.get(&regular(&a));
    assert_eq!(failure(&r.body), None);
    let interval = int(&r.body, "interval");
    assert!((600..=660).contains(&interval), "{interval}");
    assert_eq!(int(&r.body, "min interval"), 0);
    assert_eq!(
        peers(&r.body, "peers").len(),
        6,
        "on time again: the seeder"
    );
    let body = r#"{"deny":["-HP0001"]}"#;
    assert_eq!(
        push(&mut admin, "PUT", "/admin/tracker/clients", body).status,
        200
    );
    let r = http.get(&regular(&a));
    assert_eq!(
        failure(&r.body).as_deref(),
        Some("your BitTorrent client is not allowed on this tracker")
    );
    // Hostile bodies get an error naming the field, and change nothing.
    for (path, body, names) in [
        ("/admin/tracker/users/1", r#"{"passkey":"a;b"}"#, "passkey"),
        (
            "/admin/tracker/torrents/5",
            r#"{"info_hash":"00"}"#,
            "info_hash",
        ),
        (
            "/admin/tracker/freeleech",
            r#"{"download_pct":"0"}"#,
            "download_pct",
        ),
        (
            "/admin/tracker/users/1",
            r#"{"passkey":"abc","is_admin":1}"#,
            "is_admin",
        ),
    ] {
        let r = push(&mut admin, "PUT", path, body);
        assert_eq!(r.status, 400, "{path} {body}");
        let e = json(&r)["error"].as_str().unwrap().to_string();
        assert!(e.contains(names), "{e}");
    }
    let s = json(&push(&mut admin, "GET", "/admin/tracker", ""));
    assert_eq!(
        (
            s["users"].as_u64(),
            s["torrents"].as_u64(),
            s["tokens"].as_u64()
        ),
        (Some(2), Some(1), Some(1))
    );
    assert_eq!(s["freeleech"]["upload_pct"].as_u64(), Some(200));
    let u = json(&push(&mut admin, "GET", "/admin/tracker/users/1", ""));
    assert_eq!(u["passkey"].as_str(), Some(new_key));
    assert_eq!(
        push(&mut admin, "GET", "/admin/tracker/users/9", "").status,
        404
    );
    let pushes = metric(&mut admin, "hotpath_private_pushes_total ");
    assert_eq!(pushes, 8.0);
    assert_eq!(metric(&mut admin, "hotpath_private_too_soon_total "), 2.0);
    wait_until("the flush", Duration::from_secs(10), || {
        !rows(&c, "SELECT uploaded FROM hp_user_totals WHERE user_id = 1").is_empty()
    });
    server.shutdown().unwrap();
    // Credited: the 4000 bytes before the token, none of the 5000 after it; uploads of
    // 500 and 100 bytes at double the rate.
    assert_eq!(
        rows(&c, "SELECT uploaded, downloaded, uploaded_raw, downloaded_raw FROM hp_user_totals WHERE user_id = 1"),
        [vec![1200, 4000, 600, 9000]]
    );
    // A restart: what was pushed beside the site's tables is there again.
    let server = start(&c);
    let mut admin = Client::connect(server.admin_addr().unwrap());
    let s = json(&push(&mut admin, "GET", "/admin/tracker", ""));
    assert_eq!(s["tokens"].as_u64(), Some(1));
    assert_eq!(s["interval_secs"].as_u64(), Some(600));
    assert_eq!(s["clients"]["deny"][0].as_str(), Some("-HP0001"));
    assert_eq!(s["freeleech"]["upload_pct"].as_u64(), Some(200));
    // The users and the torrent pushed were written into hotpath's own tables, so the
    // restart's read of them finds them: user 1 with the passkey pushed last.
    assert_eq!(
        (s["users"].as_u64(), s["torrents"].as_u64()),
        (Some(2), Some(1)),
        "pushed users and torrents are kept in hp_users and hp_private_torrents"
    );
    // (The passkey is known: what refuses it is the client list pushed before.)
    let mut http = Client::connect(server.http_addr().unwrap());
    let seed = announce_query(NORMAL, 2, 51414, 0);
    assert_eq!(
        failure(&http.get(&format!("/{SEED_ONLY}/announce?{seed}")).body).as_deref(),
        Some("your BitTorrent client is not allowed on this tracker")
    );
    // A user removed through the push API: the row stays, marked, and a full read (SIGHUP)
    // does not bring the user back.
    assert_eq!(
        push(&mut admin, "DELETE", "/admin/tracker/users/2", "").status,
        200
    );
    wait_until("the flush", Duration::from_secs(10), || {
        rows(&c, "SELECT removed FROM hp_users WHERE user_id = 2") == [[1]]
    });
    let polls = metric(&mut admin, "hotpath_private_polls_total ");
    server.reload();
    wait_until("the read SIGHUP asks for", Duration::from_secs(10), || {
        metric(&mut admin, "hotpath_private_polls_total ") > polls
    });
    let r = http.get(&format!("/{SEED_ONLY}/announce?{seed}"));
    assert_eq!(
        failure(&r.body).as_deref(),
        Some("unknown passkey: download the .torrent file again")
    );
    assert_eq!(
        rows(
            &c,
            "SELECT user_id, can_leech, removed FROM hp_users ORDER BY user_id"
        ),
        [[1, 1, 0], [2, 0, 1]]
    );
    server.shutdown().unwrap();
}

#[test]
fn a_graceful_restart_keeps_each_clients_counters() {
    let c = private_config();
    let dir = std::path::PathBuf::from(&c.store.data_dir);
    let file = dir.join("hotpath.toml");
    std::fs::write(&file, c.to_commented_toml()).unwrap();
    let mut p = Proc::spawn(&file, &dir);
    add_user(&c, 1, KEY, 1);
    add_torrent(&c, 11, &NORMAL, 100);
    wait_until("the poll", Duration::from_secs(10), || {
        p.metric("hotpath_private_torrents") == 1.0
    });
    let go = |p: &Proc, up: u64, event| {
        let mut http = Client::connect(p.http);
        let mut a = announce(NORMAL, 1, 40001, 0, event);
        a.uploaded = up;
        let mut q = Vec::new();
        write_announce(&mut q, &a);
        let r = http.get(&format!(
            "/{KEY}/announce?{}",
            String::from_utf8(q).unwrap()
        ));
        assert_eq!(failure(&r.body), None);
    };
    go(&p, 500, Event::Started);
    go(&p, 1500, Event::None);
    assert!(p.signal("-TERM").success());
    let saved = dir.join("ledger.snapshot");
    assert!(saved.exists(), "saved at the stop");
    let mut p = Proc::spawn(&file, &dir);
    assert!(!saved.exists(), "loaded once, then deleted");
    wait_until("the poll", Duration::from_secs(10), || {
        p.metric("hotpath_private_torrents") == 1.0
    });
    // The client's first announce after the restart is credited what it moved meanwhile.
    go(&p, 4000, Event::None);
    let totals = "SELECT uploaded FROM hp_user_totals WHERE user_id = 1";
    wait_until("the flush", Duration::from_secs(10), || {
        rows(&c, totals) == [vec![3500]]
    });
    assert!(p.signal("-TERM").success());
    assert!(p.log_text().contains("the ledger of 1 clients restored"));
}

/// WebTorrent over WebSocket in private mode: the passkey in the upgrade's path, each
/// refusal as a `failure reason` under `announce` (the socket stays), and the traffic a
/// browser reports accounted and written behind as an HTTP announce's.
#[test]
fn webtorrent_peers_are_checked_and_accounted_like_http_ones() {
    use common::ws::{wt_announce, Ws};
    use hotpath_wire::webtorrent::{Event as WtEvent, Id};
    let c = private_config();
    let server = start(&c);
    add_user(&c, 1, KEY, 1);
    add_torrent(&c, 11, &NORMAL, 100);
    let mut admin = Client::connect(server.admin_addr().unwrap());
    wait_until("the poll", Duration::from_secs(10), || {
        metric(&mut admin, "hotpath_private_torrents ") == 1.0
    });
    let addr = server.http_addr().unwrap();
    let wait = Duration::from_secs(5);
    let reason = |w: &mut Ws| -> Option<String> {
        let r = w.recv_json(wait).expect("an answer");
        assert_eq!(r["action"], "announce");
        r["failure reason"].as_str().map(str::to_string)
    };
    // An unknown passkey, an unregistered torrent: refused, said, the socket kept.
    let mut stranger = Ws::connect(addr, &format!("/{}/announce", "z".repeat(32)));
    stranger.announce(&wt_announce(
        Id(NORMAL),
        Id([1; 20]),
        10,
        &[],
        WtEvent::Started,
    ));
    assert!(reason(&mut stranger).is_some());
    let mut w = Ws::connect(addr, &format!("/{KEY}/announce"));
    w.announce(&wt_announce(
        Id(UNKNOWN),
        Id([2; 20]),
        10,
        &[],
        WtEvent::Started,
    ));
    assert!(reason(&mut w).is_some());
    // No passkey at all (the path without one, nor a query): refused as over HTTP.
    let mut none = Ws::connect(addr, "/announce");
    none.announce(&wt_announce(
        Id(NORMAL),
        Id([3; 20]),
        10,
        &[],
        WtEvent::Started,
    ));
    assert!(reason(&mut none).is_some());
    // Started (credits nothing), then 1,000 bytes downloaded and completed.
    let mut a = wt_announce(Id(NORMAL), Id([2; 20]), 1000, &[], WtEvent::Started);
    w.announce(&a);
    assert_eq!(reason(&mut w), None);
    a.downloaded = Some(1000);
    a.uploaded = Some(300);
    a.left = Some(0);
    a.event = WtEvent::Completed;
    w.announce(&a);
    assert_eq!(reason(&mut w), None);
    let per_torrent = "SELECT user_id, torrent_id, uploaded, downloaded, completed \
                       FROM hp_user_torrents";
    wait_until("the flush", Duration::from_secs(10), || {
        rows(&c, per_torrent) == [vec![1, 11, 300, 1000, 1]]
    });
    server.shutdown().unwrap();
}
