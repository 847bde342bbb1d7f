//! Real BitTorrent clients (Debian's python3-libtorrent, aria2 and Transmission's
//! transmission-cli) find each other only through hotpath and transfer a file intact, over
//! HTTP and over UDP, and the tracker counts the completed download; in private mode on XBT's and TorrentPier's tables in MariaDB, each
//! user is credited the bytes its client moved, and a tracker killed (-9) in the middle of a
//! transfer loses none of what it acknowledged. `scripts/test` installs the clients.

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
    let (child, dir) = spawn_script(tracker_url, scrape, leecher, extra);
    script_result(child, &dir)
}

/// Starts the swarm script (its standard input and output piped) in a fresh directory.
fn spawn_script(
    tracker_url: &str,
    scrape: &str,
    leecher: &str,
    extra: &[&str],
) -> (std::process::Child, std::path::PathBuf) {
    let transmission = if extra.contains(&"transmission") {
        "transmission"
    } else {
        ""
    };
    require_clients(&[leecher, transmission]);
    let dir = data_dir().join("clients");
    std::fs::create_dir_all(&dir).unwrap();
    let child = Command::new(PYTHON)
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
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    (child, dir)
}

/// Waits (bounded) for the script to end; returns its JSON line, which must say ok.
fn script_result(mut child: std::process::Child, dir: &std::path::Path) -> serde_json::Value {
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
    let _ = std::fs::remove_dir_all(dir);
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
/// (uploaded, downloaded) as the site's tables credit them, the clients' own counters, and
/// the site's database (dropped with the first).
fn private_swarm(
    schema: hotpath_config::PrivateSchema,
    seeder: &str,
    credited: impl Fn(&mut dyn hotpath_store::Backend) -> Vec<[i64; 3]>,
) -> (
    Vec<[i64; 3]>,
    serde_json::Value,
    hotpath_store::testing::TestDb,
    Box<dyn hotpath_store::Backend>,
) {
    use hotpath_config::PrivateSchema;
    use hotpath_store::backend::{self, Dialect};
    use hotpath_store::table::Value;
    let db = hotpath_store::testing::test_db(Dialect::Mysql, "clients");
    let mut site = backend::connect(&db.url, &db.dir).unwrap();
    let (ddl, users, torrents): (&[&str], _, _) = match schema {
        PrivateSchema::Torrentpier => (
            &TORRENTPIER_SCHEMA,
            "INSERT INTO bb_bt_users (user_id, auth_key) VALUES (1, ?), (2, ?)",
            "INSERT INTO bb_bt_torrents (topic_id, info_hash) VALUES (5, ?)",
        ),
        PrivateSchema::Unit3d => (
            &UNIT3D_SCHEMA,
            "INSERT INTO users (id, username, group_id, passkey) VALUES \
             (1, 'seeder', 1, ?), (2, 'leecher', 1, ?)",
            "INSERT INTO torrents (id, name, user_id, status, info_hash) VALUES (5, 't', 1, 1, ?)",
        ),
        PrivateSchema::Gazelle => (
            &GAZELLE_SCHEMA,
            "INSERT INTO users_main (ID, Username, Enabled, torrent_pass) VALUES \
             (1, 'seeder', '1', ?), (2, 'leecher', '1', ?)",
            "INSERT INTO torrents (ID, GroupID, info_hash) VALUES (5, 1, ?)",
        ),
        _ => (
            &XBT_SCHEMA,
            "INSERT INTO xbt_users (uid, torrent_pass) VALUES (1, ?), (2, ?)",
            "INSERT INTO xbt_torrents (tid, info_hash, mtime, ctime) VALUES (5, ?, 0, 0)",
        ),
    };
    for sql in ddl {
        site.execute(sql).unwrap();
    }
    if schema == PrivateSchema::Unit3d {
        site.execute("INSERT INTO `groups` (id, name, slug) VALUES (1, 'User', 'user')")
            .unwrap();
    }
    if schema == PrivateSchema::Gazelle {
        // Gazelle makes these rows with the user and the torrent.
        site.execute("INSERT INTO users_leech_stats (UserID) VALUES (1), (2)")
            .unwrap();
        site.execute("INSERT INTO torrents_leech_stats (TorrentID) VALUES (5)")
            .unwrap();
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
        // UNIT3D hands out `/announce/PASSKEY`.
        PrivateSchema::Unit3d => (
            format!("http://{http}/announce/{SEED_KEY}"),
            format!("http://{http}/scrape/{SEED_KEY}"),
        ),
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
    (users, v, db, site)
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
fn libtorrent_private_on_gazelle_tables() {
    let (_, v, _db, mut site) =
        private_swarm(hotpath_config::PrivateSchema::Gazelle, "libtorrent", |db| {
            ints3(
                db,
                "SELECT UserID, Uploaded, Downloaded FROM users_leech_stats ORDER BY UserID",
            )
        });
    // Each client's row holds its own counters as it last reported them, as Ocelot writes
    // them, and the leecher's download is a snatch.
    let rows = ints3(
        &mut *site,
        "SELECT uid, uploaded, downloaded FROM xbt_files_users ORDER BY uid",
    );
    let reported = |who: &str, what: &str| v["counters"][who][what].as_i64().unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[0][1], reported("seeder", "uploaded"), "{rows:?} {v}");
    assert_eq!(
        rows[1][2],
        reported("leecher", "downloaded"),
        "{rows:?} {v}"
    );
    assert_eq!(
        ints3(&mut *site, "SELECT uid, fid, tstamp > 0 FROM xbt_snatched"),
        [[2, 5, 1]]
    );
}

#[test]
fn libtorrent_private_on_unit3d_tables() {
    let (_, v, _db, mut site) =
        private_swarm(hotpath_config::PrivateSchema::Unit3d, "libtorrent", |db| {
            ints3(db, "SELECT id, uploaded, downloaded FROM users ORDER BY id")
        });
    // The history rows UNIT3D's hit-and-run rules read: the clients' own counters, and the
    // leecher's download finished.
    let rows = ints3(
        &mut *site,
        "SELECT user_id, client_uploaded, client_downloaded FROM history ORDER BY user_id",
    );
    let reported = |who: &str, what: &str| v["counters"][who][what].as_i64().unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[0][1], reported("seeder", "uploaded"), "{rows:?} {v}");
    assert_eq!(
        rows[1][2],
        reported("leecher", "downloaded"),
        "{rows:?} {v}"
    );
    assert_eq!(
        ints3(
            &mut *site,
            "SELECT user_id, completed_at IS NOT NULL, torrent_id FROM history ORDER BY user_id"
        ),
        [[1, 0, 5], [2, 1, 5]]
    );
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

/// What the swarm script printed for `name`'s `counter` at a pause: before its announce and
/// after the reply.
fn around(v: &serde_json::Value, name: &str, counter: &str) -> (i64, i64) {
    let c = &v[name][counter];
    (c[0].as_i64().unwrap(), c[1].as_i64().unwrap())
}

/// A private tracker process is killed (-9) while libtorrent moves a file between two users,
/// and started again on the same port: every announce it answered before the kill is
/// credited (the journal is replayed), and after the restart the clients' first announces
/// credit nothing (the ledger of a killed process is gone) and the next ones credit again.
#[test]
fn kill_9_in_the_middle_of_a_transfer_loses_no_acknowledged_accounting() {
    use hotpath_store::table::Value;
    use std::io::{BufRead, Write};
    const SIZE: i64 = 4 << 20;
    let mut c = test_config();
    c.tracker.mode = hotpath_config::TrackerMode::Private;
    c.private.poll_secs = 1;
    c.store.flush_interval_ms = 200;
    // The clients' tracker URL must outlive the restart: a port of its own.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    c.listen.http = vec![format!("127.0.0.1:{port}").parse().unwrap()];
    let dir = std::path::PathBuf::from(&c.store.data_dir);
    let file = dir.join("hotpath.toml");
    std::fs::write(&file, c.to_commented_toml()).unwrap();
    let mut p = Proc::spawn(&file, &dir);
    let size = SIZE.to_string();
    let hash = run_script(
        "http://127.0.0.1:9/announce",
        "",
        "libtorrent",
        &["--hash-only", "--size", &size],
    );
    let hex = hash["info_hash"].as_str().unwrap();
    let bytes: Vec<u8> = (0..20)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    let mut site = hotpath_store::backend::connect("", &dir).unwrap();
    let now = hotpath_store::unix_now();
    site.execute_with(
        "INSERT INTO hp_users (user_id, passkey, can_leech, updated_at) VALUES (1, ?, 1, ?), \
         (2, ?, 1, ?)",
        &[SEED_KEY.into(), now.into(), LEECH_KEY.into(), now.into()],
    )
    .unwrap();
    site.execute_with(
        "INSERT INTO hp_private_torrents (torrent_id, info_hash, download_pct, upload_pct, \
         updated_at) VALUES (5, ?, 100, 100, ?)",
        &[Value::Blob(bytes.into()), now.into()],
    )
    .unwrap();
    wait_until("the poll", Duration::from_secs(10), || {
        p.metric("hotpath_private_torrents") == 1.0
    });
    let base = format!("http://127.0.0.1:{port}");
    // 4 MiB at 512 KiB/s: about 8 s, paused at 40 %.
    let (mut child, workdir) = spawn_script(
        &format!("{base}/{SEED_KEY}/announce"),
        &format!("{base}/{SEED_KEY}/scrape"),
        "libtorrent",
        &[
            "--size",
            &size,
            "--rate",
            "524288",
            "--pause-at",
            "0.4",
            "--leech-tracker",
            &format!("{base}/{LEECH_KEY}/announce"),
            "--reannounce",
        ],
    );
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let mid: serde_json::Value =
        serde_json::from_str(&line).unwrap_or_else(|_| panic!("not the pause: {line:?}"));
    let mid = &mid["mid"];
    assert!(mid.is_object(), "not the pause: {line}");
    assert!(!p.signal("-KILL").success());
    let p = Proc::spawn(&file, &dir);
    wait_until("the poll", Duration::from_secs(10), || {
        p.metric("hotpath_private_torrents") == 1.0
    });
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    // The result line follows.
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    let v: serde_json::Value = serde_json::from_str(rest.lines().last().unwrap_or_default())
        .unwrap_or_else(|_| {
            let mut err = String::new();
            let _ = std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err);
            panic!("script output: {rest}\nstderr: {err}")
        });
    // Its output ended: it has exited, or is about to.
    child.wait().unwrap();
    let _ = std::fs::remove_dir_all(&workdir);
    assert_eq!(v["ok"], true, "{v}");
    let restart = &v["restart"];
    eprintln!("mid {mid}\nrestart {restart}");
    let totals = "SELECT user_id, uploaded, downloaded FROM hp_user_totals ORDER BY user_id";
    let final_up = v["counters"]["seeder"]["uploaded"].as_i64().unwrap();
    let final_down = v["counters"]["leecher"]["downloaded"].as_i64().unwrap();
    let mut credited = Vec::new();
    wait_until("the flush", Duration::from_secs(10), || {
        credited.clear();
        site.query(totals, &[], &mut |r| {
            credited.push([r[0].int(), r[1].int(), r[2].int()])
        })
        .unwrap();
        credited.len() == 2 && credited[1][2] > 0 && credited[0][1] > 0
    });
    // Credited: what was announced up to the kill, plus what was announced after the
    // first announce after the restart. Each announce sent counters between the client's
    // before and after its pause.
    let check = |got: i64, mid: (i64, i64), restart: (i64, i64), last: i64, who: &str| {
        let (low, high) = (mid.0 + last - restart.1, mid.1 + last - restart.0);
        eprintln!("{who}: credited {got}, between {low} and {high}; moved {last}");
        assert!(
            low <= got && got <= high,
            "{who}: {got} not in {low}..={high}"
        );
        assert!(mid.0 > 0, "the pause came after bytes moved");
    };
    check(
        credited[0][1],
        around(mid, "seeder", "uploaded"),
        around(restart, "seeder", "uploaded"),
        final_up,
        "seeder",
    );
    check(
        credited[1][2],
        around(mid, "leecher", "downloaded"),
        around(restart, "leecher", "downloaded"),
        final_down,
        "leecher",
    );
    assert!(final_down >= SIZE, "{v}");
}
