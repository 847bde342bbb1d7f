//! Real BitTorrent clients (Debian's python3-libtorrent, aria2 and Transmission's
//! transmission-cli) find each other only through
//! hotpath and transfer a file intact, over HTTP and over UDP, and the tracker counts the
//! completed download; in private mode on XBT's and TorrentPier's tables in MariaDB, each
//! user is credited the bytes its client moved. `scripts/test` installs the clients.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

const PYTHON: &str = "/usr/bin/python3";

fn script() -> String {
    format!(
        "{}/../../tests/clients/swarm.py",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn require_clients(clients: &[&str]) {
    let ok = Command::new(PYTHON)
        .args(["-c", "import libtorrent"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "python3-libtorrent is missing: run scripts/test (it installs the test clients)"
    );
    for client in clients {
        let program = match *client {
            "aria2" => "aria2c",
            "transmission" => "transmission-cli",
            _ => continue,
        };
        let ok = Command::new(program)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            ok,
            "{program} is missing: run scripts/test (it installs the test clients)"
        );
    }
}

/// Runs the swarm script against `tracker_url`, bounded in time; returns its JSON line.
fn run_swarm(
    server: &hotpath_server::RunningServer,
    tracker_url: &str,
    leecher: &str,
) -> serde_json::Value {
    let scrape = format!("http://{}/scrape", server.http_addr().unwrap());
    run_script(tracker_url, &scrape, leecher, &[])
}

/// Runs the swarm script with `extra` arguments, bounded in time; returns its JSON line.
fn run_script(tracker_url: &str, scrape: &str, leecher: &str, extra: &[&str]) -> serde_json::Value {
    require_clients(&[
        leecher,
        if extra.contains(&"transmission") {
            "transmission"
        } else {
            ""
        },
    ]);
    let dir = std::env::temp_dir().join(format!(
        "hotpath-clients-{}-{leecher}-{}",
        std::process::id(),
        tracker_url.len()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut child = Command::new(PYTHON)
        .arg(script())
        .args([
            "--tracker",
            tracker_url,
            "--scrape",
            scrape,
            "--leecher",
            leecher,
            "--timeout",
            "90",
        ])
        .args(extra)
        .arg("--workdir")
        .arg(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the client script did not stop in time");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|_| {
        panic!(
            "script output: {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(
        v["ok"],
        true,
        "{v}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
    v
}

#[test]
fn libtorrent_over_http() {
    let server = start(&test_config());
    let url = format!("http://{}/announce", server.http_addr().unwrap());
    let v = run_swarm(&server, &url, "libtorrent");
    assert!(v["downloaded"].as_i64().unwrap() >= 1, "{v}");
    server.shutdown().unwrap();
}

#[test]
fn libtorrent_over_udp() {
    let server = start(&test_config());
    let url = format!("udp://{}/announce", server.udp_addr().unwrap());
    let v = run_swarm(&server, &url, "libtorrent");
    assert!(v["downloaded"].as_i64().unwrap() >= 1, "{v}");
    server.shutdown().unwrap();
}

#[test]
fn aria2_over_http() {
    let server = start(&test_config());
    let url = format!("http://{}/announce", server.http_addr().unwrap());
    let v = run_swarm(&server, &url, "aria2");
    assert!(v["downloaded"].as_i64().unwrap() >= 1, "{v}");
    server.shutdown().unwrap();
}

/// Transmission takes no loopback peer from a tracker, so here it seeds and libtorrent,
/// which it learns of only from the tracker, connects to it.
#[test]
fn transmission_over_udp() {
    let server = start(&test_config());
    let url = format!("udp://{}/announce", server.udp_addr().unwrap());
    let scrape = format!("http://{}/scrape", server.http_addr().unwrap());
    let v = run_script(&url, &scrape, "libtorrent", &["--seeder", "transmission"]);
    assert!(v["downloaded"].as_i64().unwrap() >= 1, "{v}");
    server.shutdown().unwrap();
}

/// Passkeys of the seeder (user 1) and the leecher (user 2), 20 characters as TorrentPier's.
const SEED_KEY: &str = "5eed5eed5eed5eed5eed";
const LEECH_KEY: &str = "1eec1eec1eec1eec1eec";

/// A private tracker on a site's tables in MariaDB: a seeder (libtorrent, or Transmission)
/// announcing over HTTP with one passkey (in the path, or TorrentPier's `uk` parameter) and a
/// libtorrent leecher over UDP with another (BEP 41 URL data) move a file. Returns each user's
/// (uploaded, downloaded) as the site's tables credit them, and the clients' own counters.
fn private_swarm(
    schema: hotpath_config::PrivateSchema,
    seeder: &str,
    credited: impl Fn(&mut dyn hotpath_store::Backend) -> Vec<[i64; 3]>,
) -> (Vec<[i64; 3]>, serde_json::Value) {
    use hotpath_config::PrivateSchema;
    use hotpath_store::backend::{self, Dialect};
    use hotpath_store::table::Value;
    let db = hotpath_store::testing::test_db(Dialect::Mysql, "clients");
    let mut site = backend::connect(&db.url, &db.dir).unwrap();
    let (ddl, users, torrents) = match schema {
        PrivateSchema::Torrentpier => (
            TORRENTPIER_SCHEMA,
            "INSERT INTO bb_bt_users (user_id, auth_key) VALUES (1, ?), (2, ?)",
            "INSERT INTO bb_bt_torrents (topic_id, info_hash) VALUES (5, ?)",
        ),
        _ => (
            XBT_SCHEMA,
            "INSERT INTO xbt_users (uid, torrent_pass) VALUES (1, ?), (2, ?)",
            "INSERT INTO xbt_torrents (tid, info_hash, mtime, ctime) VALUES (5, ?, 0, 0)",
        ),
    };
    for sql in ddl {
        site.execute(sql).unwrap();
    }
    site.execute_with(users, &[SEED_KEY.into(), LEECH_KEY.into()])
        .unwrap();
    // The torrent is registered by its info hash before anyone announces it.
    let hash = run_script(
        "http://127.0.0.1:9/announce",
        "",
        "libtorrent",
        &["--hash-only"],
    );
    let hex = hash["info_hash"].as_str().unwrap();
    let bytes: Vec<u8> = (0..20)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    site.execute_with(torrents, &[Value::Blob(bytes.into())])
        .unwrap();
    let mut c = test_config();
    c.store.url = db.url.clone();
    c.store.flush_interval_ms = 200;
    c.tracker.mode = hotpath_config::TrackerMode::Private;
    c.private.schema = schema;
    if seeder == "transmission" {
        // transmission-cli quits without a stopped announce: its final counters come with
        // a regular announce, every 2 s here.
        c.tracker.interval_secs = 2;
        c.tracker.min_interval_secs = 1;
        c.tracker.interval_jitter_percent = 0;
    }
    let server = start(&c);
    let http = server.http_addr().unwrap();
    let udp = server.udp_addr().unwrap();
    let (announce, scrape) = match schema {
        PrivateSchema::Torrentpier => (
            format!("http://{http}/announce?uk={SEED_KEY}"),
            format!("http://{http}/{SEED_KEY}/scrape"),
        ),
        _ => (
            format!("http://{http}/{SEED_KEY}/announce"),
            format!("http://{http}/{SEED_KEY}/scrape"),
        ),
    };
    let v = run_script(
        &announce,
        &scrape,
        "libtorrent",
        &[
            "--leech-tracker",
            &format!("udp://{udp}/{LEECH_KEY}/announce"),
            "--reannounce",
            "--seeder",
            seeder,
            "--final-wait",
            "5",
        ],
    );
    let size = v["bytes"].as_i64().unwrap();
    // Transmission's counters are not reported here: it sent the whole file, once.
    let up = match seeder {
        "transmission" => size,
        _ => v["counters"]["seeder"]["uploaded"].as_i64().unwrap(),
    };
    let down = v["counters"]["leecher"]["downloaded"].as_i64().unwrap();
    assert!(up >= size && down >= size, "{v}");
    let mut users = Vec::new();
    wait_until("the flush", Duration::from_secs(10), || {
        users = credited(&mut *site);
        users.len() == 2 && users[0][1] > 0 && users[1][2] > 0
    });
    server.shutdown().unwrap();
    users = credited(&mut *site);
    eprintln!(
        "{schema:?}: credited {users:?}; the clients reported {}",
        v["counters"]
    );
    // Within a few percent of what the clients reported (a client counts what it sent since
    // its first announce, which credits nothing).
    let near = |got: i64, want: i64| (got - want).abs() * 100 <= want * 5;
    assert!(
        near(users[0][1], up),
        "seeder credited {users:?}, reported {v}"
    );
    assert!(
        near(users[1][2], down),
        "leecher credited {users:?}, reported {v}"
    );
    assert_eq!((users[0][2], users[1][1]), (0, 0), "{users:?}");
    (users, v)
}

/// Every row's first three integers.
fn ints3(db: &mut dyn hotpath_store::Backend, sql: &str) -> Vec<[i64; 3]> {
    let mut out = Vec::new();
    db.query(sql, &[], &mut |r| {
        out.push([r[0].int(), r[1].int(), r[2].int()])
    })
    .unwrap();
    out
}

#[test]
fn libtorrent_private_on_xbt_tables() {
    private_swarm(hotpath_config::PrivateSchema::Xbt, "libtorrent", |db| {
        ints3(
            db,
            "SELECT uid, uploaded, downloaded FROM xbt_users ORDER BY uid",
        )
    });
}

#[test]
fn libtorrent_private_on_torrentpier_tables() {
    // The site's cron moves up_add and down_add into the users' totals.
    private_swarm(
        hotpath_config::PrivateSchema::Torrentpier,
        "libtorrent",
        torrentpier_totals,
    );
}

/// The users' totals once TorrentPier's cron has credited them.
fn torrentpier_totals(db: &mut dyn hotpath_store::Backend) -> Vec<[i64; 3]> {
    torrentpier_cron(db, 0);
    ints3(
        db,
        "SELECT user_id, u_up_total, u_down_total FROM bb_bt_users ORDER BY user_id",
    )
}

#[test]
fn transmission_private_on_torrentpier_tables() {
    // Transmission seeds with TorrentPier's `uk` parameter.
    private_swarm(
        hotpath_config::PrivateSchema::Torrentpier,
        "transmission",
        torrentpier_totals,
    );
}
