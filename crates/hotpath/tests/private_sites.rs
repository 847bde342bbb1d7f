//! Private mode on a site's own tables, on MariaDB as the sites run it: XBT's schema (users
//! credited with `+=`, a peers row per user and torrent, torrents' seeders, leechers and
//! completed) and TorrentPier's (a `bb_bt_tracker` row per client that the site's cron turns
//! into user totals and deletes once stopped). The tables are created as the projects' own
//! schema files have them, with their NOT NULL columns the tracker never fills.

mod common;

use std::time::Duration;

use common::*;
use hotpath_config::{Config, PrivateSchema, TrackerMode};
use hotpath_store::backend::{self, Dialect};
use hotpath_store::table::Value;
use hotpath_store::testing::{test_db, TestDb};
use hotpath_store::Backend;
use hotpath_wire::query::{write_announce, Event};

const A: [u8; 20] = [0xa1; 20];
const B: [u8; 20] = [0xb2; 20];
const GONE: [u8; 20] = [0xc3; 20];

fn site_config(db: &TestDb, schema: PrivateSchema) -> Config {
    let mut c = test_config();
    c.store.url = db.url.clone();
    c.store.flush_interval_ms = 200;
    c.tracker.mode = TrackerMode::Private;
    c.tracker.snapshot_interval_secs = 1;
    c.private.schema = schema;
    c.private.poll_secs = 1;
    c
}

fn connect(db: &TestDb) -> Box<dyn Backend> {
    backend::connect(&db.url, &db.dir).unwrap()
}

fn ints(db: &mut dyn Backend, sql: &str) -> Vec<Vec<i64>> {
    let mut out = Vec::new();
    db.query(sql, &[], &mut |r| {
        out.push(r.iter().map(Value::int).collect())
    })
    .unwrap();
    out
}

/// An announce by client `n`, its passkey in the path or in query parameter `param`.
#[allow(clippy::too_many_arguments)]
fn go(
    http: &mut Client,
    key: &str,
    param: Option<&str>,
    hash: [u8; 20],
    n: u8,
    up: u64,
    down: u64,
    left: u64,
    event: Event,
) -> Option<String> {
    let mut a = announce(hash, n, 40000 + u16::from(n), left, event);
    a.uploaded = up;
    a.downloaded = down;
    let mut q = Vec::new();
    write_announce(&mut q, &a);
    let q = String::from_utf8(q).unwrap();
    let target = match param {
        None => format!("/{key}/announce?{q}"),
        Some(p) => format!("/announce?{q}&{p}={key}"),
    };
    failure(&http.get(&target).body)
}

const K1: &str = "k1k1k1k1k1k1k1k1k1k1k1k1k1k1k1k1";
const K2: &str = "k2k2k2k2k2k2k2k2k2k2k2k2k2k2k2k2";

#[test]
fn xbt_tables_get_what_xbt_writes() {
    let db = test_db(Dialect::Mysql, "xbt");
    let mut site = connect(&db);
    for ddl in [
        "CREATE TABLE xbt_users (uid INT NOT NULL AUTO_INCREMENT, torrent_pass CHAR(32) NOT \
         NULL, downloaded BIGINT UNSIGNED NOT NULL DEFAULT 0, uploaded BIGINT UNSIGNED NOT \
         NULL DEFAULT 0, PRIMARY KEY (uid))",
        "CREATE TABLE xbt_torrents (tid INT NOT NULL AUTO_INCREMENT, info_hash BINARY(20) NOT \
         NULL, seeders INT NOT NULL DEFAULT 0, leechers INT NOT NULL DEFAULT 0, completed INT \
         NOT NULL DEFAULT 0, flags INT NOT NULL DEFAULT 0, mtime INT NOT NULL, ctime INT NOT \
         NULL, PRIMARY KEY (tid), UNIQUE KEY (info_hash))",
        "CREATE TABLE xbt_peers (tid INT NOT NULL, uid INT NOT NULL, active TINYINT NOT NULL, \
         completed INT NOT NULL, downloaded BIGINT UNSIGNED NOT NULL, `left` BIGINT UNSIGNED \
         NOT NULL, uploaded BIGINT UNSIGNED NOT NULL, mtime INT NOT NULL, PRIMARY KEY (tid, \
         uid), KEY (uid))",
    ] {
        site.execute(ddl).unwrap();
    }
    site.execute_with(
        "INSERT INTO xbt_users (uid, torrent_pass, uploaded) VALUES (1, ?, 7), (2, ?, 0)",
        &[K1.into(), K2.into()],
    )
    .unwrap();
    site.execute_with(
        "INSERT INTO xbt_torrents (tid, info_hash, seeders, flags, mtime, ctime) VALUES \
         (10, ?, 0, 0, 1, 1), (11, ?, 99, 0, 1, 1), (12, ?, 0, 1, 1, 1)",
        &[
            Value::Blob(A.into()),
            Value::Blob(B.into()),
            Value::Blob(GONE.into()),
        ],
    )
    .unwrap();
    let c = site_config(&db, PrivateSchema::Xbt);
    let server = start(&c);
    let mut http = Client::connect(server.http_addr().unwrap());
    // XBT sets every torrent's counts to 0 at start; so does hotpath, the swarms' snapshots
    // write them again.
    assert_eq!(
        ints(
            &mut *site,
            "SELECT seeders FROM xbt_torrents WHERE tid = 11"
        ),
        [[0]]
    );
    // Seeder user 1, leecher user 2 who completes; counters of first announces credit 0.
    assert_eq!(
        go(&mut http, K1, None, A, 1, 5000, 0, 0, Event::Started),
        None
    );
    assert_eq!(
        go(&mut http, K2, None, A, 2, 0, 50, 1000, Event::Started),
        None
    );
    assert_eq!(go(&mut http, K1, None, A, 1, 6000, 0, 0, Event::None), None);
    assert_eq!(
        go(&mut http, K2, None, A, 2, 0, 1050, 0, Event::Completed),
        None
    );
    // A torrent XBT flags deleted is not served; an unknown passkey changes nothing.
    let refused = go(&mut http, K1, None, GONE, 1, 0, 0, 0, Event::Started).unwrap();
    assert!(refused.contains("not registered"), "{refused}");
    let bad = "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz";
    assert!(go(&mut http, bad, None, A, 3, 9, 9, 0, Event::Started).is_some());
    let users = "SELECT uid, uploaded, downloaded FROM xbt_users ORDER BY uid";
    wait_until("the flush", Duration::from_secs(10), || {
        ints(&mut *site, users) == [[1, 1007, 0], [2, 0, 1000]]
    });
    let torrents = "SELECT tid, seeders, leechers, completed FROM xbt_torrents ORDER BY tid";
    wait_until("the snapshot", Duration::from_secs(10), || {
        ints(&mut *site, torrents)[0] == [10, 2, 0, 1]
    });
    let peers = "SELECT tid, uid, active, completed, downloaded, `left`, uploaded FROM \
                 xbt_peers ORDER BY tid, uid";
    assert_eq!(
        ints(&mut *site, peers),
        [[10, 1, 1, 0, 0, 0, 1000], [10, 2, 1, 1, 1000, 0, 0]]
    );
    // User 2 stops: its peers row goes inactive, and the next snapshot counts one seeder.
    assert_eq!(
        go(&mut http, K2, None, A, 2, 30, 1050, 0, Event::Stopped),
        None
    );
    wait_until("the stop", Duration::from_secs(10), || {
        ints(&mut *site, peers)[1][2] == 0 && ints(&mut *site, torrents)[0] == [10, 1, 0, 1]
    });
    server.shutdown().unwrap();
    assert_eq!(
        ints(&mut *site, users),
        [[1, 1007, 0], [2, 30, 1000]],
        "nothing else credited"
    );
    let mut pass = Vec::new();
    site.query(
        "SELECT torrent_pass FROM xbt_users ORDER BY uid",
        &[],
        &mut |r| pass.push(r[0].text().to_string()),
    )
    .unwrap();
    assert_eq!(pass, [K1, K2], "the site's columns are the site's");
}

const T1: &str = "tp1tp1tp1tp1tp1tp1tp";
const T2: &str = "tp2tp2tp2tp2tp2tp2tp";

/// What TorrentPier's cron does with `bb_bt_tracker`: adds up_add and down_add to the users'
/// totals, zeroes them, deletes rows not updated since `expire`.
fn torrentpier_cron(site: &mut dyn Backend, expire: i64) {
    site.execute(
        "UPDATE bb_bt_users u JOIN (SELECT user_id, SUM(up_add) AS up, SUM(down_add) AS down \
         FROM bb_bt_tracker GROUP BY user_id) t ON u.user_id = t.user_id SET u.u_up_total = \
         u.u_up_total + t.up, u.u_down_total = u.u_down_total + t.down",
    )
    .unwrap();
    site.execute("UPDATE bb_bt_tracker SET up_add = 0, down_add = 0")
        .unwrap();
    site.execute(&format!(
        "DELETE FROM bb_bt_tracker WHERE update_time < {expire}"
    ))
    .unwrap();
}

#[test]
fn torrentpier_gets_peer_rows_its_cron_credits() {
    let db = test_db(Dialect::Mysql, "tp");
    let mut site = connect(&db);
    for ddl in [
        "CREATE TABLE bb_bt_users (user_id MEDIUMINT NOT NULL DEFAULT 0, auth_key CHAR(20) \
         CHARACTER SET utf8mb3 COLLATE utf8mb3_bin NOT NULL DEFAULT '', u_up_total BIGINT \
         UNSIGNED NOT NULL DEFAULT 0, u_down_total BIGINT UNSIGNED NOT NULL DEFAULT 0, \
         PRIMARY KEY (user_id), UNIQUE KEY (auth_key))",
        "CREATE TABLE bb_bt_torrents (topic_id MEDIUMINT UNSIGNED NOT NULL DEFAULT 0, \
         info_hash VARBINARY(20) DEFAULT NULL, poster_id MEDIUMINT NOT NULL DEFAULT 0, \
         tor_type TINYINT(1) NOT NULL DEFAULT 0, complete_count MEDIUMINT UNSIGNED NOT NULL \
         DEFAULT 0, PRIMARY KEY (topic_id), UNIQUE KEY (info_hash))",
        "CREATE TABLE bb_bt_tracker (peer_hash VARCHAR(32) CHARACTER SET utf8mb3 COLLATE \
         utf8mb3_bin NOT NULL DEFAULT '', topic_id MEDIUMINT UNSIGNED NOT NULL DEFAULT 0, \
         peer_id VARCHAR(20) NOT NULL DEFAULT '0', user_id MEDIUMINT NOT NULL DEFAULT 0, ip \
         VARCHAR(42) DEFAULT NULL, ipv6 VARCHAR(42) DEFAULT NULL, port SMALLINT UNSIGNED NOT \
         NULL DEFAULT 0, client VARCHAR(51) NOT NULL DEFAULT 'Unknown', seeder TINYINT(1) NOT \
         NULL DEFAULT 0, releaser TINYINT(1) NOT NULL DEFAULT 0, tor_type TINYINT(1) NOT NULL \
         DEFAULT 0, uploaded BIGINT UNSIGNED NOT NULL DEFAULT 0, downloaded BIGINT UNSIGNED \
         NOT NULL DEFAULT 0, remain BIGINT UNSIGNED NOT NULL DEFAULT 0, speed_up INT UNSIGNED \
         NOT NULL DEFAULT 0, speed_down INT UNSIGNED NOT NULL DEFAULT 0, up_add BIGINT \
         UNSIGNED NOT NULL DEFAULT 0, down_add BIGINT UNSIGNED NOT NULL DEFAULT 0, update_time \
         INT NOT NULL DEFAULT 0, complete_percent BIGINT NOT NULL DEFAULT 0, complete INT NOT \
         NULL DEFAULT 0, PRIMARY KEY (peer_hash), KEY (topic_id), KEY (user_id)) \
         DEFAULT CHARSET utf8mb4",
    ] {
        site.execute(ddl).unwrap();
    }
    site.execute_with(
        "INSERT INTO bb_bt_users (user_id, auth_key) VALUES (1, ?), (2, ?)",
        &[T1.into(), T2.into()],
    )
    .unwrap();
    // A gold torrent (no download counts) and a normal one.
    site.execute_with(
        "INSERT INTO bb_bt_torrents (topic_id, info_hash, tor_type) VALUES (20, ?, 1), (21, ?, 0)",
        &[Value::Blob(A.into()), Value::Blob(B.into())],
    )
    .unwrap();
    let c = site_config(&db, PrivateSchema::Torrentpier);
    let server = start(&c);
    let mut http = Client::connect(server.http_addr().unwrap());
    let uk = Some("uk");
    // User 1 seeds both; user 2 leeches the gold one, uploading a little, then stops.
    assert_eq!(go(&mut http, T1, uk, A, 1, 0, 0, 0, Event::Started), None);
    assert_eq!(go(&mut http, T1, uk, B, 1, 0, 0, 0, Event::Started), None);
    assert_eq!(go(&mut http, T2, uk, A, 2, 0, 0, 900, Event::Started), None);
    assert_eq!(go(&mut http, T1, uk, A, 1, 300, 0, 0, Event::None), None);
    assert_eq!(go(&mut http, T1, uk, B, 1, 500, 0, 0, Event::None), None);
    assert_eq!(
        go(&mut http, T2, uk, A, 2, 100, 800, 100, Event::None),
        None
    );
    assert_eq!(
        go(&mut http, T2, uk, A, 2, 100, 900, 0, Event::Stopped),
        None
    );
    let rows = "SELECT topic_id, user_id, port, seeder, uploaded, downloaded, remain, up_add, \
                down_add, update_time = 0, complete FROM bb_bt_tracker ORDER BY topic_id, \
                user_id";
    wait_until("the flush", Duration::from_secs(10), || {
        ints(&mut *site, rows).len() == 3 && ints(&mut *site, rows)[1][9] == 1
    });
    assert_eq!(
        ints(&mut *site, rows),
        [
            vec![20, 1, 40001, 1, 300, 0, 0, 300, 0, 0, 1],
            // Gold: 900 downloaded, none counted; stopped, so its update_time is 0.
            vec![20, 2, 40002, 1, 100, 900, 0, 100, 0, 1, 1],
            vec![21, 1, 40001, 1, 500, 0, 0, 500, 0, 0, 1],
        ]
    );
    let mut text = Vec::new();
    site.query(
        "SELECT peer_hash, peer_id, ip FROM bb_bt_tracker WHERE user_id = 1 ORDER BY topic_id",
        &[],
        &mut |r| {
            text.push((
                r[0].text().to_string(),
                r[1].text().to_string(),
                r[2].text().to_string(),
            ))
        },
    )
    .unwrap();
    assert_eq!(text[0].0.len(), 32);
    assert_ne!(text[0].0, text[1].0, "a row per torrent");
    assert_eq!(text[0].1, "-HP0001-00000000000.", "the peer id, printable");
    assert_eq!(text[0].2, "127.0.0.1");
    // The site's cron credits the users and deletes the stopped row.
    let now = hotpath_store::unix_now();
    torrentpier_cron(&mut *site, now - 3600);
    let totals = "SELECT user_id, u_up_total, u_down_total FROM bb_bt_users ORDER BY user_id";
    assert_eq!(ints(&mut *site, totals), [[1, 800, 0], [2, 100, 0]]);
    assert_eq!(ints(&mut *site, rows).len(), 2);
    // Traffic after the cron is added to the zeroed rows, and credited once by the next run.
    assert_eq!(go(&mut http, T1, uk, B, 1, 700, 0, 0, Event::None), None);
    wait_until("the second flush", Duration::from_secs(10), || {
        ints(&mut *site, rows)[1][7] == 200
    });
    server.shutdown().unwrap();
    torrentpier_cron(&mut *site, now - 3600);
    assert_eq!(ints(&mut *site, totals), [[1, 1000, 0], [2, 100, 0]]);
}
