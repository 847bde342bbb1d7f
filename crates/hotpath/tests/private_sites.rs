//! Private mode on a site's own tables, on MariaDB as the sites run it: XBT's schema (users
//! credited with `+=`, a peers row per user and torrent, torrents' seeders, leechers and
//! completed) and TorrentPier's (a `bb_bt_tracker` row per client that the site's cron turns
//! into user totals and deletes once stopped). The tables are created as the projects' own
//! schema files have them, with their NOT NULL columns the tracker never fills. And hotpath's
//! own tables on PostgreSQL, made by its migrations.

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
    // Tests poll with a passkey until the tracker has read it: each try before is an unknown
    // passkey from 127.0.0.1.
    c.private.max_auth_failures_per_min = 100_000;
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
    for ddl in XBT_SCHEMA {
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
    // Today's schema file has torrent_pass and no torrent_pass_version: a user's stored
    // passkey holds, and so does the one XBT derives for them at version 0.
    site.execute(XBT_CONFIG).unwrap();
    // A log turned on whose table the site lacks (XBT's schema file has it commented out)
    // stays off: the other writes flow.
    site.execute(
        "INSERT INTO xbt_config (name, value) VALUES ('torrent_pass_private_key', 'k'), \
         ('log_announce', '1')",
    )
    .unwrap();
    let c = site_config(&db, PrivateSchema::Xbt);
    let server = start(&c);
    let mut http = Client::connect(server.http_addr().unwrap());
    let derived = hotpath_tracker::private::xbt::passkey(b"k", 0, 1, &A);
    let r = http.get(&format!("/{derived}{}", scrape_target(&[A])));
    assert_eq!(failure(&r.body), None);
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
    // A torrent XBT flags deleted is not served, and its row is deleted, as XBT deletes it;
    // an unknown passkey changes nothing.
    let refused = go(&mut http, K1, None, GONE, 1, 0, 0, 0, Event::Started).unwrap();
    assert!(refused.contains("not registered"), "{refused}");
    wait_until("the flagged row deleted", Duration::from_secs(10), || {
        ints(
            &mut *site,
            "SELECT COUNT(*) FROM xbt_torrents WHERE tid = 12",
        ) == [[0]]
    });
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

/// XBT's settings table as its schema file has it.
const XBT_CONFIG: &str = "CREATE TABLE xbt_config (id INT NOT NULL AUTO_INCREMENT, name \
                          VARCHAR(255) NOT NULL, value VARCHAR(255) NOT NULL, PRIMARY KEY (id))";

/// XBT's schema file of 2016-2020: no `torrent_pass` (commented out), `torrent_pass_version`
/// in (and the commented-out `wait_time` and `peers_limit` put back, as a site may). Users
/// announce with the passkeys XBT derives from `xbt_config`'s secret, each for one user and
/// torrent; a raised version revokes the user's old ones at the next poll; a forged one is an
/// unknown passkey, in announces and scrapes; a user's wait time and peers limit hold.
#[test]
fn xbt_derived_passkeys_hold_and_a_raised_version_revokes_them() {
    use hotpath_tracker::private::xbt::passkey;
    let db = test_db(Dialect::Mysql, "xbtd");
    let mut site = connect(&db);
    site.execute(XBT_CONFIG).unwrap();
    site.execute(
        "CREATE TABLE xbt_users (uid INT NOT NULL AUTO_INCREMENT, wait_time INT NOT NULL \
         DEFAULT 0, peers_limit INT NOT NULL DEFAULT 0, torrent_pass_version INT NOT NULL \
         DEFAULT 0, downloaded BIGINT UNSIGNED NOT NULL DEFAULT 0, uploaded BIGINT UNSIGNED NOT \
         NULL DEFAULT 0, PRIMARY KEY (uid))",
    )
    .unwrap();
    for ddl in &XBT_SCHEMA[1..] {
        site.execute(ddl).unwrap();
    }
    // XBT's log tables (commented out in its schema file), turned on in its settings.
    site.execute(
        "CREATE TABLE xbt_announce_log (id INT NOT NULL AUTO_INCREMENT, ipv6 VARBINARY(16) NOT \
         NULL, port INT NOT NULL, event INT NOT NULL, info_hash BINARY(20) NOT NULL, peer_id \
         BINARY(20) NOT NULL, downloaded BIGINT UNSIGNED NOT NULL, left0 BIGINT UNSIGNED NOT \
         NULL, uploaded BIGINT UNSIGNED NOT NULL, uid INT NOT NULL, mtime INT NOT NULL, \
         PRIMARY KEY (id)) ENGINE = MyISAM",
    )
    .unwrap();
    site.execute(
        "CREATE TABLE xbt_scrape_log (id INT NOT NULL AUTO_INCREMENT, ipv6 VARBINARY(16) NOT \
         NULL, uid INT NOT NULL, mtime INT NOT NULL, PRIMARY KEY (id)) ENGINE = MyISAM",
    )
    .unwrap();
    site.execute(
        "INSERT INTO xbt_config (name, value) VALUES ('torrent_pass_private_key', \
         'Xk2pQ7vR9sT4wY6zA8bC1dE3fG5hJ'), ('log_announce', '1'), ('log_scrape', '1')",
    )
    .unwrap();
    // User 2 waits an hour for new torrents and runs one downloading client per torrent.
    site.execute(
        "INSERT INTO xbt_users (uid, torrent_pass_version, wait_time, peers_limit) VALUES \
         (1, 0, 0, 0), (2, 5, 3600, 1)",
    )
    .unwrap();
    // Torrent 11 was added just now.
    site.execute_with(
        "INSERT INTO xbt_torrents (tid, info_hash, mtime, ctime) VALUES (10, ?, 1, 1), \
         (11, ?, 1, ?)",
        &[
            Value::Blob(A.into()),
            Value::Blob(B.into()),
            hotpath_store::unix_now().into(),
        ],
    )
    .unwrap();
    let secret = b"Xk2pQ7vR9sT4wY6zA8bC1dE3fG5hJ";
    let server = start(&site_config(&db, PrivateSchema::Xbt));
    let mut http = Client::connect(server.http_addr().unwrap());
    let k1 = passkey(secret, 0, 1, &A);
    let k2 = passkey(secret, 5, 2, &A);
    assert_eq!(
        go(&mut http, &k1, None, A, 1, 0, 0, 0, Event::Started),
        None
    );
    assert_eq!(go(&mut http, &k1, None, A, 1, 700, 0, 0, Event::None), None);
    assert_eq!(
        go(
            &mut http,
            &k2,
            Some("passkey"),
            A,
            2,
            0,
            0,
            10,
            Event::Started
        ),
        None
    );
    // User 1's passkey of torrent A is not theirs on B; user 2's at another version, or with
    // user 1's id in front, is no one's.
    let unknown = |r: Option<String>| r.is_some_and(|r| r.contains("unknown passkey"));
    assert!(unknown(go(
        &mut http,
        &k1,
        None,
        B,
        1,
        0,
        0,
        0,
        Event::Started
    )));
    let old = passkey(secret, 4, 2, &A);
    assert!(unknown(go(
        &mut http,
        &old,
        None,
        A,
        2,
        0,
        0,
        10,
        Event::None
    )));
    let forged = format!("00000001{}", &k2[8..]);
    assert!(unknown(go(
        &mut http,
        &forged,
        None,
        A,
        1,
        0,
        0,
        0,
        Event::None
    )));
    // XBT's per-user rules: user 2 may not download the new torrent yet (seeding it is
    // allowed), nor run a second downloading client on torrent 10.
    let k2b = passkey(secret, 5, 2, &B);
    let r = go(&mut http, &k2b, None, B, 2, 0, 0, 10, Event::Started).unwrap();
    assert!(r.contains("wait time"), "{r}");
    assert_eq!(
        go(&mut http, &k2b, None, B, 2, 0, 0, 0, Event::Started),
        None
    );
    let r = go(&mut http, &k2, None, A, 4, 0, 0, 10, Event::Started).unwrap();
    assert!(r.contains("as many clients"), "{r}");
    // A scrape with the passkey of the torrent it asks for.
    let scrape = http.get(&format!("/{k1}{}", scrape_target(&[A])));
    assert_eq!(failure(&scrape.body), None);
    assert!(scrape.body.windows(20).any(|w| w == A), "{:?}", scrape.body);
    let scrape = http.get(&format!("/{k1}{}", scrape_target(&[B])));
    assert!(unknown(failure(&scrape.body)));
    // The site raises user 2's version: the old passkey stops at the next poll, the new one
    // holds.
    site.execute("UPDATE xbt_users SET torrent_pass_version = 6 WHERE uid = 2")
        .unwrap();
    wait_until("the poll", Duration::from_secs(10), || {
        unknown(go(&mut http, &k2, None, A, 2, 0, 0, 10, Event::None))
    });
    let k2 = passkey(secret, 6, 2, &A);
    assert_eq!(go(&mut http, &k2, None, A, 2, 0, 0, 10, Event::None), None);
    // User 1's upload is credited to their row, as with a stored passkey.
    let users = "SELECT uid, uploaded FROM xbt_users ORDER BY uid";
    wait_until("the flush", Duration::from_secs(10), || {
        ints(&mut *site, users) == [[1, 700], [2, 0]]
    });
    // Each announce and scrape of a known user was logged, as XBT logs them (an unknown
    // passkey's, which XBT logs with uid 0, is not: made-up passkeys fill no table).
    let logged = "SELECT uid, port, event, left0, uploaded, HEX(ipv6) FROM xbt_announce_log \
                  ORDER BY id LIMIT 2";
    let mut rows = Vec::new();
    site.query(logged, &[], &mut |r| {
        rows.push((
            r[..5].iter().map(Value::int).collect::<Vec<_>>(),
            r[5].text().to_string(),
        ))
    })
    .unwrap();
    assert_eq!(rows[0].0, [1, 40001, 2, 0, 0], "user 1 started");
    assert_eq!(rows[1].0, [1, 40001, 0, 0, 700]);
    assert_eq!(
        rows[0].1, "7F000001",
        "127.0.0.1 in 4 bytes, as XBT writes it"
    );
    assert_eq!(
        ints(
            &mut *site,
            "SELECT COUNT(*) FROM xbt_announce_log WHERE uid = 0"
        ),
        [[0]]
    );
    assert_eq!(
        ints(&mut *site, "SELECT uid FROM xbt_scrape_log"),
        [[1]],
        "the one scrape that passed"
    );
    // XBT's settings: its announce interval is what clients are told, and its offline
    // message refuses every announce until it is cleared (read at a full read: SIGHUP).
    site.execute(
        "INSERT INTO xbt_config (name, value) VALUES ('announce_interval', '900'), \
         ('offline_message', 'down for maintenance')",
    )
    .unwrap();
    server.reload();
    wait_until("the offline message", Duration::from_secs(10), || {
        go(&mut http, &k1, None, A, 1, 700, 0, 0, Event::None).as_deref()
            == Some("down for maintenance")
    });
    site.execute("DELETE FROM xbt_config WHERE name = 'offline_message'")
        .unwrap();
    server.reload();
    let mut a = announce(A, 1, 40001, 0, Event::None);
    a.uploaded = 700;
    let mut q = Vec::new();
    write_announce(&mut q, &a);
    let target = format!("/{k1}/announce?{}", String::from_utf8(q).unwrap());
    wait_until("back online", Duration::from_secs(10), || {
        failure(&http.get(&target).body).is_none()
    });
    let interval = int(&http.get(&target).body, "interval");
    assert!((900..=990).contains(&interval), "{interval}");
    // XBT's auto_register: a torrent the site never added is served to a known user, added
    // to xbt_torrents at the next poll, and accounted from then on.
    const C: [u8; 20] = [0xd4; 20];
    let k1c = passkey(secret, 0, 1, &C);
    let r = go(&mut http, &k1c, None, C, 1, 0, 0, 0, Event::Started).unwrap();
    assert!(r.contains("not registered"), "{r}");
    site.execute("INSERT INTO xbt_config (name, value) VALUES ('auto_register', '1')")
        .unwrap();
    server.reload();
    wait_until("auto_register", Duration::from_secs(10), || {
        go(&mut http, &k1c, None, C, 1, 0, 0, 0, Event::Started).is_none()
    });
    let registered = "SELECT COUNT(*) FROM xbt_torrents WHERE info_hash = UNHEX(REPEAT('d4', 20)) \
                      AND ctime > 0";
    wait_until("the registration", Duration::from_secs(10), || {
        ints(&mut *site, registered) == [[1]]
    });
    // Once the poll has read its id: the first announce is known, the next credits.
    wait_until("its id read", Duration::from_secs(10), || {
        go(&mut http, &k1c, None, C, 1, 100, 0, 0, Event::None).is_none()
            && ints(&mut *site, "SELECT COUNT(*) FROM xbt_peers WHERE tid > 11") == [[1]]
    });
    assert_eq!(
        go(&mut http, &k1c, None, C, 1, 400, 0, 0, Event::None),
        None
    );
    wait_until("the credit", Duration::from_secs(10), || {
        ints(&mut *site, "SELECT uploaded FROM xbt_users WHERE uid = 1") == [[1000]]
    });
    server.shutdown().unwrap();
}

const T1: &str = "tp1tp1tp1tp1tp1tp1tp";
const T2: &str = "tp2tp2tp2tp2tp2tp2tp";

#[test]
fn torrentpier_gets_peer_rows_its_cron_credits() {
    let db = test_db(Dialect::Mysql, "tp");
    let mut site = connect(&db);
    for ddl in TORRENTPIER_SCHEMA {
        site.execute(ddl).unwrap();
    }
    site.execute_with(
        "INSERT INTO bb_bt_users (user_id, auth_key) VALUES (1, ?), (2, ?)",
        &[T1.into(), T2.into()],
    )
    .unwrap();
    // A gold torrent (no download counts) and a normal one that user 1 uploaded (its releaser).
    site.execute_with(
        "INSERT INTO bb_bt_torrents (topic_id, info_hash, tor_type, poster_id) VALUES \
         (20, ?, 1, 0), (21, ?, 0, 1)",
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
                down_add, update_time = 0, complete, releaser, tor_type FROM bb_bt_tracker \
                ORDER BY topic_id, user_id";
    wait_until("the flush", Duration::from_secs(10), || {
        ints(&mut *site, rows).len() == 3 && ints(&mut *site, rows)[1][9] == 1
    });
    assert_eq!(
        ints(&mut *site, rows),
        [
            // The gold topic's type is copied into its rows, as TorrentPier's announcer does.
            vec![20, 1, 40001, 1, 300, 0, 0, 300, 0, 0, 1, 0, 1],
            // Gold: 900 downloaded, none counted; stopped, so its update_time is 0.
            vec![20, 2, 40002, 1, 100, 900, 0, 100, 0, 1, 1, 0, 1],
            // User 1 uploaded torrent 21: the releaser.
            vec![21, 1, 40001, 1, 500, 0, 0, 500, 0, 0, 1, 1, 0],
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
    // The address as TorrentPier's announcer writes it (its ip2long), which its pages and
    // its own announcer read back.
    assert_eq!(text[0].2, "2130706433", "127.0.0.1 as one number");
    // The site's cron credits the users and deletes the stopped row.
    let now = hotpath_store::unix_now();
    torrentpier_cron(&mut *site, now - 3600);
    let totals = "SELECT user_id, u_up_total, u_down_total, u_up_release FROM bb_bt_users \
                  ORDER BY user_id";
    // The releaser's 500 count as release too, as with TorrentPier's own announcer.
    assert_eq!(ints(&mut *site, totals), [[1, 800, 0, 500], [2, 100, 0, 0]]);
    assert_eq!(ints(&mut *site, rows).len(), 2);
    // Traffic after the cron is added to the zeroed rows, and credited once by the next run.
    assert_eq!(go(&mut http, T1, uk, B, 1, 700, 0, 0, Event::None), None);
    wait_until("the second flush", Duration::from_secs(10), || {
        ints(&mut *site, rows)[1][7] == 200
    });
    server.shutdown().unwrap();
    torrentpier_cron(&mut *site, now - 3600);
    assert_eq!(
        ints(&mut *site, totals),
        [[1, 1000, 0, 700], [2, 100, 0, 0]]
    );
}

/// TorrentPier's rating tiers as the site configures them (ratio under 0.4: one torrent at a
/// time, under 0.5: two, under 0.6: three; counted once 10 GiB are downloaded), read from
/// bb_bt_users with the release and bonus uploads TorrentPier's ratio adds.
#[test]
fn torrentpier_ratio_tiers_give_leech_slots() {
    const GIB: i64 = 1 << 30;
    const T3: &str = "tp3tp3tp3tp3tp3tp3tp";
    const C: [u8; 20] = [0xd4; 20];
    const D: [u8; 20] = [0xe5; 20];
    let db = test_db(Dialect::Mysql, "tiers");
    let mut site = connect(&db);
    for ddl in TORRENTPIER_SCHEMA {
        site.execute(ddl).unwrap();
    }
    // User 1: ratio (5 + 1 + 1) / 20 = 0.35, one slot. User 2: 5 GiB downloaded, too little
    // for a ratio: the default two. User 3: 11 / 20 = 0.55, three.
    site.execute_with(
        "INSERT INTO bb_bt_users (user_id, auth_key, u_up_total, u_up_release, u_up_bonus, \
         u_down_total) VALUES (1, ?, ?, ?, ?, ?), (2, ?, 0, 0, 0, ?), (3, ?, ?, 0, 0, ?)",
        &[
            T1.into(),
            (5 * GIB).into(),
            GIB.into(),
            GIB.into(),
            (20 * GIB).into(),
            T2.into(),
            (5 * GIB).into(),
            T3.into(),
            (11 * GIB).into(),
            (20 * GIB).into(),
        ],
    )
    .unwrap();
    site.execute_with(
        "INSERT INTO bb_bt_torrents (topic_id, info_hash) VALUES (20, ?), (21, ?), (22, ?), \
         (23, ?)",
        &[A, B, C, D].map(|h| Value::Blob(h.into())),
    )
    .unwrap();
    let mut c = site_config(&db, PrivateSchema::Torrentpier);
    c.private.leech_slots = 2;
    c.private.ratio_min_downloaded = 10 * GIB as u64;
    for (r, n) in [("0.4", 1), ("0.5", 2), ("0.6", 3)] {
        c.private.ratio_tiers.insert(r.into(), n);
    }
    let server = start(&c);
    let mut http = Client::connect(server.http_addr().unwrap());
    let mut admin = Client::connect(server.admin_addr().unwrap());
    let uk = Some("uk");
    let slots = "you download as many torrents at once as your ratio allows: finish or stop \
                 one first (seeding is allowed)";
    let leech =
        |http: &mut Client, key, hash, n, event| go(http, key, uk, hash, n, 0, 0, 500, event);
    assert_eq!(leech(&mut http, T1, A, 1, Event::Started), None);
    // A second client on the same torrent takes no slot; another torrent does.
    assert_eq!(leech(&mut http, T1, A, 2, Event::Started), None);
    assert_eq!(
        leech(&mut http, T1, B, 1, Event::Started).as_deref(),
        Some(slots)
    );
    // Seeding is never limited.
    assert_eq!(go(&mut http, T1, uk, C, 1, 0, 0, 0, Event::Started), None);
    // Both clients finish A: the slot is free.
    assert_eq!(
        go(&mut http, T1, uk, A, 1, 0, 500, 0, Event::Completed),
        None
    );
    assert_eq!(
        leech(&mut http, T1, B, 1, Event::Started).as_deref(),
        Some(slots)
    );
    assert_eq!(go(&mut http, T1, uk, A, 2, 0, 500, 0, Event::Stopped), None);
    assert_eq!(leech(&mut http, T1, B, 1, Event::Started), None);
    // User 2 has the default two; a stop frees one.
    assert_eq!(leech(&mut http, T2, A, 1, Event::Started), None);
    assert_eq!(leech(&mut http, T2, B, 1, Event::Started), None);
    assert_eq!(
        leech(&mut http, T2, C, 1, Event::Started).as_deref(),
        Some(slots)
    );
    assert_eq!(go(&mut http, T2, uk, A, 1, 0, 0, 500, Event::Stopped), None);
    assert_eq!(leech(&mut http, T2, C, 1, Event::Started), None);
    // User 3 has three.
    for hash in [A, B, C] {
        assert_eq!(leech(&mut http, T3, hash, 1, Event::Started), None);
    }
    assert_eq!(
        leech(&mut http, T3, D, 1, Event::Started).as_deref(),
        Some(slots)
    );
    let metric = |admin: &mut Client, line: &str| -> f64 {
        let text = String::from_utf8(admin.get("/metrics").body).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(line)?.trim().parse().ok())
            .unwrap_or(-1.0)
    };
    assert_eq!(
        metric(
            &mut admin,
            "hotpath_private_refused_total{reason=\"leech_slots\"}"
        ),
        4.0
    );
    assert_eq!(
        metric(&mut admin, "hotpath_private_ratio_limited_users"),
        2.0
    );
    // The site credits user 1 a bonus (ratio 17 / 20): at the next poll they have the
    // default two slots.
    site.execute(&format!(
        "UPDATE bb_bt_users SET u_up_bonus = {} WHERE user_id = 1",
        11 * GIB
    ))
    .unwrap();
    wait_until("the poll", Duration::from_secs(10), || {
        metric(&mut admin, "hotpath_private_ratio_limited_users") == 1.0
    });
    assert_eq!(leech(&mut http, T1, D, 1, Event::Started), None);
    assert_eq!(
        leech(&mut http, T1, A, 1, Event::Started).as_deref(),
        Some(slots)
    );
    server.shutdown().unwrap();
}

/// hotpath's own schema on PostgreSQL: the migrations make the tables, the site fills
/// hp_users and hp_private_torrents, the tracker credits hp_user_totals and
/// hp_user_torrents, and the ratio tiers read the totals back (only rows changed since the
/// last read).
#[test]
fn hotpath_tables_on_postgresql() {
    let db = test_db(Dialect::Postgres, "own");
    let mut c = site_config(&db, PrivateSchema::Hotpath);
    c.private.ratio_tiers.insert("0.5".into(), 1);
    let server = start(&c);
    let mut site = connect(&db);
    let now = hotpath_store::unix_now();
    site.execute_with(
        "INSERT INTO hp_users (user_id, passkey, can_leech, updated_at) VALUES (1, ?, 1, ?), \
         (2, ?, 1, ?)",
        &[K1.into(), now.into(), K2.into(), now.into()],
    )
    .unwrap();
    site.execute_with(
        "INSERT INTO hp_private_torrents (torrent_id, info_hash, download_pct, upload_pct, \
         updated_at) VALUES (10, ?, 50, 100, ?), (11, ?, 100, 100, ?), (12, ?, 100, 100, ?)",
        &[
            Value::Blob(A.into()),
            now.into(),
            Value::Blob(B.into()),
            now.into(),
            Value::Blob(GONE.into()),
            now.into(),
        ],
    )
    .unwrap();
    let mut http = Client::connect(server.http_addr().unwrap());
    wait_until("the poll", Duration::from_secs(10), || {
        go(&mut http, K1, None, A, 1, 0, 0, 0, Event::Started).is_none()
    });
    // User 2 leeches A (half download) from user 1, and completes.
    assert_eq!(
        go(&mut http, K2, None, A, 2, 0, 0, 4000, Event::Started),
        None
    );
    assert_eq!(go(&mut http, K1, None, A, 1, 4000, 0, 0, Event::None), None);
    assert_eq!(
        go(&mut http, K2, None, A, 2, 0, 4000, 0, Event::Completed),
        None
    );
    // User 2 starts B; its ratio (0 / 2000) reaches the tiers a poll after the flush.
    assert_eq!(
        go(&mut http, K2, None, B, 2, 0, 0, 4000, Event::Started),
        None
    );
    let totals = "SELECT user_id, uploaded, downloaded, uploaded_raw, downloaded_raw FROM \
                  hp_user_totals ORDER BY user_id";
    wait_until("the flush", Duration::from_secs(10), || {
        ints(&mut *site, totals).len() == 2
    });
    assert_eq!(
        ints(&mut *site, totals),
        [vec![1, 4000, 0, 4000, 0], vec![2, 0, 2000, 0, 4000]]
    );
    let snatched = "SELECT user_id, torrent_id, completed, seeding FROM hp_user_torrents \
                    WHERE completed > 0";
    assert_eq!(ints(&mut *site, snatched), [[2, 10, 1, 1]]);
    let mut admin = Client::connect(server.admin_addr().unwrap());
    wait_until("the ratio", Duration::from_secs(10), || {
        let text = String::from_utf8(admin.get("/metrics").body).unwrap();
        text.contains("\nhotpath_private_ratio_limited_users 1\n")
    });
    assert!(go(&mut http, K2, None, GONE, 2, 0, 0, 4000, Event::Started).is_some());
    // User 1 has no tier (ratio 4000 / 0 is none: nothing downloaded).
    assert_eq!(
        go(&mut http, K1, None, GONE, 1, 0, 0, 4000, Event::Started),
        None
    );
    server.shutdown().unwrap();
}

const G1: &str = "g1g1g1g1g1g1g1g1g1g1g1g1g1g1g1g1";
const G2: &str = "g2g2g2g2g2g2g2g2g2g2g2g2g2g2g2g2";
const G3: &str = "g3g3g3g3g3g3g3g3g3g3g3g3g3g3g3g3";
const G4: &str = "g4g4g4g4g4g4g4g4g4g4g4g4g4g4g4g4";
const G5: &str = "g5g5g5g5g5g5g5g5g5g5g5g5g5g5g5g5";
const SITE_SECRET: &str = "s3cr3ts3cr3ts3cr3ts3cr3ts3cr3t00";
const REPORT_KEY: &str = "r3p0rtr3p0rtr3p0rtr3p0rtr3p0rt00";

/// A call of Ocelot's update API as Gazelle's `Tracker::update_tracker` makes it (HTTP/1.1,
/// `Connection: Close`, read to the end), and whether Gazelle takes the answer as done: the
/// text after the response's last newline is `success`.
fn gazelle_call(admin: std::net::SocketAddr, secret: &str, params: &str) -> (bool, String) {
    gazelle_request(admin, &format!("/{secret}/update?{params}"))
}

/// A request to Ocelot's APIs as Gazelle's `Tracker::request` sends it, and whether Gazelle
/// takes the answer as a `success`.
fn gazelle_request(admin: std::net::SocketAddr, target: &str) -> (bool, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(admin).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "GET {target} HTTP/1.1\r\nHost: tracker\r\nConnection: Close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    s.read_to_string(&mut response).unwrap();
    let last = response.rfind('\n').map_or("", |i| &response[i + 1..]);
    (last == "success", response)
}

fn pct(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("%{b:02X}")).collect()
}

#[test]
fn gazelle_tables_get_what_ocelot_writes_and_the_sites_calls_apply_at_once() {
    const C: [u8; 20] = [0xd4; 20];
    let db = test_db(Dialect::Mysql, "gazelle");
    let mut site = connect(&db);
    for ddl in GAZELLE_SCHEMA {
        site.execute(ddl).unwrap();
    }
    // User 2 is IP-protected (not visible); user 3 is disabled.
    site.execute_with(
        "INSERT INTO users_main (ID, Username, Enabled, Visible, torrent_pass) VALUES \
         (1, 'one', '1', '1', ?), (2, 'two', '1', '0', ?), (3, 'three', '0', '1', ?)",
        &[G1.into(), G2.into(), G3.into()],
    )
    .unwrap();
    site.execute("INSERT INTO users_leech_stats (UserID) VALUES (1), (2), (3), (4)")
        .unwrap();
    // A normal torrent, a freeleech one and a neutral one.
    site.execute_with(
        "INSERT INTO torrents (ID, GroupID, info_hash, FreeTorrent) VALUES (10, 1, ?, '0'), \
         (11, 1, ?, '1'), (12, 1, ?, '2')",
        &[
            Value::Blob(A.into()),
            Value::Blob(B.into()),
            Value::Blob(C.into()),
        ],
    )
    .unwrap();
    site.execute(
        "INSERT INTO torrents_leech_stats (TorrentID, Seeders) VALUES (10, 5), (11, 0), (12, 0)",
    )
    .unwrap();
    // User 2 holds a freeleech token on torrent 10; an expired one on 11 counts for nothing.
    site.execute(
        "INSERT INTO users_freeleeches (UserID, TorrentID, Time, Expired) VALUES \
         (2, 10, NOW(), 0), (2, 11, NOW(), 1)",
    )
    .unwrap();
    // A client row of a run long gone, which no swarm can hold: deleted at start.
    site.execute_with(
        "INSERT INTO xbt_files_users (uid, fid, peer_id, mtime) VALUES (1, 10, ?, 1)",
        &[Value::Blob([7; 20].into())],
    )
    .unwrap();
    let mut c = site_config(&db, PrivateSchema::Gazelle);
    c.private.site_secret = SITE_SECRET.into();
    c.private.report_secret = REPORT_KEY.into();
    // Only the start reads the tables: what changes after comes through the site's calls.
    c.private.poll_secs = 3600;
    let server = start(&c);
    let mut http = Client::connect(server.http_addr().unwrap());
    let admin = server.admin_addr().unwrap();
    assert_eq!(
        ints(
            &mut *site,
            "SELECT Seeders FROM torrents_leech_stats WHERE TorrentID = 10"
        ),
        [[0]],
        "counts start from 0, as Ocelot starts them"
    );
    assert_eq!(
        ints(&mut *site, "SELECT COUNT(*) FROM xbt_files_users"),
        [[0]]
    );
    let refused = go(&mut http, G3, None, A, 3, 0, 0, 0, Event::Started).unwrap();
    assert!(refused.contains("unknown passkey"), "{refused}");
    // User 1 seeds A; user 2 downloads it on a token, uploading a little.
    assert_eq!(go(&mut http, G1, None, A, 1, 0, 0, 0, Event::Started), None);
    assert_eq!(
        go(&mut http, G2, None, A, 2, 0, 0, 1000, Event::Started),
        None
    );
    assert_eq!(go(&mut http, G1, None, A, 1, 600, 0, 0, Event::None), None);
    assert_eq!(
        go(&mut http, G2, None, A, 2, 100, 1000, 0, Event::Completed),
        None
    );
    // User 1 downloads the freeleech torrent and the neutral one.
    assert_eq!(
        go(&mut http, G1, None, B, 1, 0, 0, 1000, Event::Started),
        None
    );
    assert_eq!(
        go(&mut http, G1, None, B, 1, 50, 400, 600, Event::None),
        None
    );
    assert_eq!(
        go(&mut http, G1, None, C, 1, 0, 0, 1000, Event::Started),
        None
    );
    assert_eq!(
        go(&mut http, G1, None, C, 1, 70, 30, 970, Event::None),
        None
    );
    let users = "SELECT UserID, Uploaded, Downloaded FROM users_leech_stats ORDER BY UserID";
    wait_until("the flush", Duration::from_secs(10), || {
        ints(&mut *site, users)[..2] == [[1, 650, 0], [2, 100, 0]]
    });
    let stats = "SELECT TorrentID, Seeders, Leechers, Snatched, Balance, last_action IS NOT NULL \
                 FROM torrents_leech_stats ORDER BY TorrentID";
    wait_until("the snapshot", Duration::from_secs(10), || {
        ints(&mut *site, stats)[0] == [10, 2, 0, 1, -300, 1]
    });
    assert_eq!(
        ints(&mut *site, stats)[1..],
        [[11, 0, 1, 0, -350, 0], [12, 0, 1, 0, 40, 0]]
    );
    let peers = "SELECT uid, fid, active, announced, uploaded, downloaded, remaining, \
                 ip = '127.0.0.1', ip = '' FROM xbt_files_users ORDER BY fid, uid";
    assert_eq!(
        ints(&mut *site, peers),
        [
            vec![1, 10, 1, 2, 600, 0, 0, 1, 0],
            // User 2 is protected: no address written.
            vec![2, 10, 1, 2, 100, 1000, 0, 0, 1],
            vec![1, 11, 1, 2, 50, 400, 600, 1, 0],
            vec![1, 12, 1, 2, 70, 30, 970, 1, 0],
        ]
    );
    assert_eq!(
        ints(&mut *site, "SELECT uid, fid, IP = '' FROM xbt_snatched"),
        [[2, 10, 1]]
    );
    // The token saved user 2's 1000 bytes, and the completion ended it.
    assert_eq!(
        ints(
            &mut *site,
            "SELECT UserID, TorrentID, Downloaded, Expired FROM users_freeleeches ORDER BY \
             TorrentID"
        ),
        [[2, 10, 1000, 1], [2, 11, 0, 1]]
    );

    // The site's tracker pages, through Ocelot's report API and its own key: Gazelle
    // json-decodes the body up to its last newline.
    let report = |params: &str| -> serde_json::Value {
        let (_, text) = gazelle_request(admin, &format!("/{REPORT_KEY}/report?{params}"));
        assert!(text.starts_with("HTTP/1.1 200"), "{params}: {text}");
        let body = &text[text.find("\r\n\r\n").unwrap() + 4..text.rfind('\n').unwrap()];
        serde_json::from_str(body).unwrap_or_else(|e| panic!("{params}: {e}: {body}"))
    };
    let stats = report("get=stats");
    assert_eq!(stats["seeders tracked"]["value"], 2, "{stats}");
    assert_eq!(stats["leechers tracked"]["value"], 2, "{stats}");
    assert_eq!(stats["bad announce key received"]["value"], 1, "{stats}");
    assert_eq!(stats["uptime"]["type"], "elapsed");
    // User 1 seeds A and downloads B and C; user 2 finished A and is IP-protected.
    assert_eq!(
        report(&format!("get=user&key={G1}")),
        serde_json::json!({"id": 1, "leeching": 2, "seeding": 1, "deleted": 0,
                           "protected": 0, "can_leech": 1})
    );
    assert_eq!(
        report(&format!("get=user&key={G2}")),
        serde_json::json!({"id": 2, "leeching": 0, "seeding": 1, "deleted": 0,
                           "protected": 1, "can_leech": 1})
    );
    let (_, text) = gazelle_request(admin, &format!("/{REPORT_KEY}/report?get=user&key={G3}"));
    assert!(text.starts_with("HTTP/1.1 404"), "a disabled user: {text}");
    // Each key opens its own API only.
    let (_, text) = gazelle_request(admin, &format!("/{SITE_SECRET}/report?get=stats"));
    assert!(text.starts_with("HTTP/1.1 403"), "{text}");
    let (ok, text) = gazelle_call(admin, REPORT_KEY, "action=update_announce_jitter");
    assert!(!ok && text.starts_with("HTTP/1.1 403"), "{text}");

    // The site's calls, as Gazelle makes them: each answered `success`, each in force at
    // once (the tables are not read again in this test).
    let (ok, text) = gazelle_call(admin, "wrongwrongwrongwrongwrongwrong00", "action=add_user");
    assert!(!ok && text.starts_with("HTTP/1.1 403"), "{text}");
    let call = |params: &str| {
        let (ok, text) = gazelle_call(admin, SITE_SECRET, params);
        assert!(ok, "{params}: {text}");
    };
    call(&format!("action=add_user&id=4&passkey={G4}&visible=1"));
    assert_eq!(go(&mut http, G4, None, A, 4, 0, 0, 0, Event::Started), None);
    call(&format!(
        "action=change_passkey&oldpasskey={G4}&newpasskey={G5}"
    ));
    let refused = go(&mut http, G4, None, A, 4, 0, 0, 0, Event::None).unwrap();
    assert!(refused.contains("unknown passkey"), "{refused}");
    assert_eq!(go(&mut http, G5, None, A, 4, 0, 0, 0, Event::None), None);
    call(&format!(
        "action=update_user&passkey={G5}&can_leech=0&visible=1"
    ));
    let refused = go(&mut http, G5, None, B, 4, 0, 0, 10, Event::Started).unwrap();
    assert!(refused.contains("may not download"), "{refused}");
    call(&format!("action=remove_user&passkey={G5}"));
    assert!(go(&mut http, G5, None, A, 4, 0, 0, 0, Event::None).is_some());
    // A deleted torrent's announces are told why, as Ocelot tells them.
    call(&format!(
        "action=delete_torrent&info_hash={}&reason=1",
        pct(&B)
    ));
    let refused = go(&mut http, G1, None, B, 1, 50, 400, 600, Event::None).unwrap();
    assert_eq!(refused, "Unregistered torrent: Trump");
    call(&format!(
        "action=add_torrent&id=13&info_hash={}&freetorrent=1",
        pct(&GONE)
    ));
    let (_, info) = gazelle_call(
        admin,
        SITE_SECRET,
        &format!("action=info_torrent&info_hash={}", "c3".repeat(20)),
    );
    assert!(info.contains("\"id\":13,\"free\":1"), "{info}");
    // The whitelist: a client not on it is refused.
    call("action=add_whitelist&peer_id=-TR");
    let refused = go(&mut http, G1, None, A, 1, 600, 0, 0, Event::None).unwrap();
    assert!(refused.contains("client is not allowed"), "{refused}");
    call("action=edit_whitelist&old_peer_id=-TR&new_peer_id=-HP");
    assert_eq!(go(&mut http, G1, None, A, 1, 600, 0, 0, Event::None), None);
    call("action=remove_whitelist&peer_id=-HP");
    call("action=update_announce_interval&new_announce_interval=1200");
    let r = http.get(&format!(
        "/{G1}{}",
        announce_target(&announce(A, 1, 40001, 0, Event::None))
    ));
    let interval = int(&r.body, "interval");
    assert!(
        (1200..=1320).contains(&interval),
        "{interval}: 1200 and its jitter"
    );
    // Bad calls are refused, naming what is wrong.
    let (ok, text) = gazelle_call(admin, SITE_SECRET, "action=add_torrent&id=x");
    assert!(
        !ok && text.contains("400") && text.contains("id: must be"),
        "{text}"
    );
    server.shutdown().unwrap();
}

const V1: &str = "v1v1v1v1v1v1v1v1v1v1v1v1v1v1v1v1";
const V2: &str = "v2v2v2v2v2v2v2v2v2v2v2v2v2v2v2v2";
const V3: &str = "v3v3v3v3v3v3v3v3v3v3v3v3v3v3v3v3";
const V4: &str = "v4v4v4v4v4v4v4v4v4v4v4v4v4v4v4v4";
const V5: &str = "v5v5v5v5v5v5v5v5v5v5v5v5v5v5v5v5";
const V6: &str = "v6v6v6v6v6v6v6v6v6v6v6v6v6v6v6v6";
const API_KEY: &str = "unit3d-api-key-unit3d-api-key-0123456789";

/// An announce as UNIT3D hands out its URL: `/announce/PASSKEY`.
#[allow(clippy::too_many_arguments)]
fn u3(
    http: &mut Client,
    key: &str,
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
    failure(&http.get(&format!("/announce/{key}?{q}")).body)
}

/// A call of UNIT3D-Announce's API as UNIT3D makes it: `method` on `/announce/KEY/what` with a
/// JSON body; its status.
fn unit3d_call(admin: std::net::SocketAddr, method: &str, what: &str, body: &str) -> u16 {
    let mut c = Client::connect(admin);
    let r = c.request(method, &format!("/announce/{API_KEY}/{what}"), None, body);
    assert!(
        r.status != 200 || r.body.is_empty() || method == "GET",
        "{:?}",
        r.body
    );
    r.status
}

#[test]
fn unit3d_tables_get_what_unit3d_announce_writes_and_its_api_applies_at_once() {
    const C: [u8; 20] = [0xd5; 20];
    const D: [u8; 20] = [0xd6; 20];
    const E: [u8; 20] = [0xd7; 20];
    let db = test_db(Dialect::Mysql, "unit3d");
    let mut site = connect(&db);
    for ddl in UNIT3D_SCHEMA {
        site.execute(ddl).unwrap();
    }
    // Groups: plain users; VIPs (freeleech, double upload, immune); banned; one download
    // at a time.
    site.execute(
        "INSERT INTO `groups` (id, name, slug, download_slots, is_immune, is_freeleech, \
         is_double_upload) VALUES (1, 'User', 'user', NULL, 0, 0, 0), (2, 'VIP', 'vip', NULL, \
         1, 1, 1), (3, 'Banned', 'banned', NULL, 0, 0, 0), (4, 'Leech', 'leech', 1, 0, 0, 0)",
    )
    .unwrap();
    // User 5 is deleted.
    site.execute_with(
        "INSERT INTO users (id, username, passkey, group_id, deleted_at) VALUES \
         (1, 'one', ?, 1, NULL), (2, 'two', ?, 2, NULL), (3, 'three', ?, 3, NULL), \
         (4, 'four', ?, 4, NULL), (5, 'five', ?, 1, NOW())",
        &[V1.into(), V2.into(), V3.into(), V4.into(), V5.into()],
    )
    .unwrap();
    // Normal, half freeleech, pending moderation, featured, double upload (with user 1's
    // freeleech token).
    site.execute_with(
        "INSERT INTO torrents (id, name, user_id, info_hash, free, doubleup, status) VALUES \
         (10, 'a', 1, ?, 0, 0, 1), (11, 'b', 1, ?, 50, 0, 1), (12, 'c', 1, ?, 0, 0, 0), \
         (13, 'd', 1, ?, 0, 0, 1), (14, 'e', 1, ?, 0, 1, 1)",
        &[
            Value::Blob(A.into()),
            Value::Blob(B.into()),
            Value::Blob(C.into()),
            Value::Blob(D.into()),
            Value::Blob(E.into()),
        ],
    )
    .unwrap();
    site.execute("INSERT INTO featured_torrents (user_id, torrent_id) VALUES (1, 13)")
        .unwrap();
    site.execute("INSERT INTO freeleech_tokens (user_id, torrent_id) VALUES (1, 14)")
        .unwrap();
    let mut c = site_config(&db, PrivateSchema::Unit3d);
    c.private.site_secret = API_KEY.into();
    c.private.poll_secs = 3600;
    let server = start(&c);
    let mut http = Client::connect(server.http_addr().unwrap());
    let admin = server.admin_addr().unwrap();
    #[track_caller]
    fn refused(r: Option<String>, words: &str) {
        let r = r.expect("refused");
        assert!(r.contains(words), "{r}");
    }
    refused(u3(&mut http, V3, A, 3, 0, 0, 0, Event::Started), "group");
    refused(
        u3(&mut http, V5, A, 5, 0, 0, 0, Event::Started),
        "unknown passkey",
    );
    refused(
        u3(&mut http, V1, C, 1, 0, 0, 0, Event::Started),
        "not registered",
    );
    // A torrent the site does not have at all, asked for twice by user 1 and once by user 2,
    // is recorded for the site's staff (the pending one above is not: the site has it).
    for (key, user) in [(V1, 1), (V1, 1), (V2, 2)] {
        refused(
            u3(&mut http, key, GONE, user, 0, 0, 0, Event::Started),
            "not registered",
        );
    }
    server.reload();
    let unregistered = "SELECT user_id, HEX(info_hash) = REPEAT('C3', 20), \
                        created_at IS NOT NULL, updated_at >= created_at \
                        FROM unregistered_info_hashes ORDER BY user_id";
    wait_until(
        "the unregistered torrents' rows",
        Duration::from_secs(10),
        || ints(&mut *site, unregistered) == [[1, 1, 1, 1], [2, 1, 1, 1]],
    );
    // User 1 seeds A; VIP user 2 downloads it and uploads a little.
    assert_eq!(u3(&mut http, V1, A, 1, 0, 0, 0, Event::Started), None);
    assert_eq!(u3(&mut http, V2, A, 2, 0, 0, 1000, Event::Started), None);
    assert_eq!(u3(&mut http, V1, A, 1, 1000, 0, 0, Event::None), None);
    assert_eq!(
        u3(&mut http, V2, A, 2, 100, 1000, 0, Event::Completed),
        None
    );
    // User 1 downloads the half-free torrent, the featured one and the double-upload one on a
    // token.
    for (hash, n) in [(B, 11), (D, 13), (E, 14)] {
        assert_eq!(u3(&mut http, V1, hash, n, 0, 0, 1000, Event::Started), None);
        assert_eq!(u3(&mut http, V1, hash, n, 100, 400, 600, Event::None), None);
    }
    // User 4 may download one torrent at a time.
    assert_eq!(u3(&mut http, V4, A, 4, 0, 0, 1000, Event::Started), None);
    refused(
        u3(&mut http, V4, B, 4, 0, 0, 1000, Event::Started),
        "ratio allows",
    );
    let users = "SELECT id, uploaded, downloaded FROM users ORDER BY id";
    wait_until("the flush", Duration::from_secs(10), || {
        ints(&mut *site, users)[..2] == [[1, 1000 + 100 + 200 + 200, 200], [2, 200, 0]]
    });
    let history = "SELECT user_id, torrent_id, uploaded, actual_uploaded, client_uploaded, \
                   downloaded, actual_downloaded, client_downloaded, seeder, active, immune, \
                   completed_at IS NOT NULL FROM history ORDER BY user_id, torrent_id";
    assert_eq!(
        ints(&mut *site, history),
        [
            vec![1, 10, 1000, 1000, 1000, 0, 0, 0, 1, 1, 0, 0],
            vec![1, 11, 100, 100, 100, 200, 400, 400, 0, 1, 0, 0],
            vec![1, 13, 200, 100, 100, 0, 400, 400, 0, 1, 0, 0],
            vec![1, 14, 200, 100, 100, 0, 400, 400, 0, 1, 0, 0],
            vec![2, 10, 200, 100, 100, 0, 1000, 1000, 1, 1, 1, 1],
            vec![4, 10, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0],
        ]
    );
    let peers = "SELECT user_id, torrent_id, port, uploaded, downloaded, `left`, seeder, active, \
                 visible, LENGTH(ip) FROM peers ORDER BY user_id, torrent_id";
    let rows = ints(&mut *site, peers);
    assert_eq!(rows.len(), 6, "{rows:?}");
    assert_eq!(rows[4], [2, 10, 40002, 100, 1000, 0, 1, 1, 1, 4]);
    let mut agent = String::new();
    site.query("SELECT agent FROM peers WHERE user_id = 2", &[], &mut |r| {
        agent = r[0].text().to_string()
    })
    .unwrap();
    assert_eq!(agent, "-HP0001-", "the client its peer id names");
    let torrents = "SELECT id, seeders, leechers, times_completed FROM torrents ORDER BY id";
    wait_until("the snapshot", Duration::from_secs(10), || {
        ints(&mut *site, torrents)[0] == [10, 2, 1, 1]
    });

    // The site's calls, as UNIT3D makes them: each answered 200, each in force at once.
    let status = unit3d_call(admin, "PUT", "users", "{}");
    assert!(
        (400..500).contains(&status),
        "a body missing fields: {status}"
    );
    let wrong =
        Client::connect(admin).request("PUT", "/announce/wrongkeywrongkey/users", None, "{}");
    assert_eq!(wrong.status, 403);
    assert_eq!(
        unit3d_call(
            admin,
            "PUT",
            "users",
            &format!(
                r#"{{"id":6,"group_id":1,"passkey":"{V6}","can_download":true,"num_seeding":0,"num_leeching":0}}"#
            )
        ),
        200
    );
    assert_eq!(u3(&mut http, V6, A, 6, 0, 0, 0, Event::Started), None);
    assert_eq!(
        unit3d_call(
            admin,
            "PUT",
            "groups",
            r#"{"id":1,"slug":"banned","download_slots":null,"is_immune":false,"is_freeleech":false,"is_double_upload":false}"#
        ),
        200
    );
    refused(u3(&mut http, V6, A, 6, 0, 0, 0, Event::None), "group");
    assert_eq!(
        unit3d_call(
            admin,
            "PUT",
            "groups",
            r#"{"id":1,"slug":"user","download_slots":null,"is_immune":false,"is_freeleech":false,"is_double_upload":false}"#
        ),
        200
    );
    assert_eq!(
        unit3d_call(
            admin,
            "PUT",
            "blacklisted-agents",
            r#"{"peer_id_prefix":"-HP"}"#
        ),
        200
    );
    refused(
        u3(&mut http, V6, A, 6, 0, 0, 0, Event::None),
        "client is not allowed",
    );
    assert_eq!(
        unit3d_call(
            admin,
            "DELETE",
            "blacklisted-agents",
            r#"{"peer_id_prefix":"-HP"}"#
        ),
        200
    );
    assert_eq!(u3(&mut http, V6, A, 6, 0, 0, 0, Event::None), None);
    let hash = "d8".repeat(20);
    assert_eq!(
        unit3d_call(
            admin,
            "PUT",
            "torrents",
            &format!(
                r#"{{"id":15,"status":1,"info_hash":"{hash}","is_deleted":false,"seeders":0,"leechers":0,"times_completed":0,"download_factor":100,"upload_factor":100}}"#
            )
        ),
        200
    );
    assert_eq!(
        u3(&mut http, V6, [0xd8; 20], 6, 0, 0, 10, Event::Started),
        None
    );
    assert_eq!(
        unit3d_call(admin, "DELETE", "torrents", r#"{"id":15,"info_hash":""}"#),
        200
    );
    refused(
        u3(&mut http, V6, [0xd8; 20], 6, 0, 0, 10, Event::None),
        "not registered",
    );
    assert_eq!(
        unit3d_call(
            admin,
            "DELETE",
            "users",
            &format!(r#"{{"id":6,"passkey":"{V6}"}}"#)
        ),
        200
    );
    refused(
        u3(&mut http, V6, A, 6, 0, 0, 0, Event::None),
        "unknown passkey",
    );
    let mut c = Client::connect(admin);
    let shown = c.request("GET", &format!("/announce/{API_KEY}/users/2"), None, "");
    assert_eq!(shown.status, 200);
    let v: serde_json::Value = serde_json::from_slice(&shown.body).unwrap();
    assert_eq!(v["group_id"], 2, "{v}");
    // A row the database refuses (its user deleted from the table since the announce, which
    // UNIT3D's foreign key no longer finds) is counted, and the others land. User 6, pushed
    // through the API and never in the table, had one refused so already (its announce of an
    // unregistered torrent above).
    const GONE2: [u8; 20] = [0xc4; 20];
    for (key, user) in [(V1, 1), (V4, 4)] {
        refused(
            u3(&mut http, key, GONE2, user, 0, 0, 0, Event::Started),
            "not registered",
        );
    }
    site.execute("DELETE FROM users WHERE id = 4").unwrap();
    server.reload();
    let gone2 =
        "SELECT user_id FROM unregistered_info_hashes WHERE HEX(info_hash) = REPEAT('C4', 20)";
    wait_until("the refused row counted", Duration::from_secs(10), || {
        let text = String::from_utf8(Client::connect(admin).get("/metrics").body).unwrap();
        text.contains("\nhotpath_private_unregistered_dropped_total 2\n")
    });
    assert_eq!(ints(&mut *site, gone2), [[1]]);
    server.shutdown().unwrap();
    // Completed once, and kept through the later announces.
    assert_eq!(
        ints(
            &mut *site,
            "SELECT COUNT(*) FROM history WHERE completed_at IS NOT NULL"
        ),
        [[1]]
    );
}

/// What a hostile caller of the site's API, or a site's table grown past a cap, meets: wrong
/// secrets are counted against the address, which is then refused whatever it sends; token rows
/// past `private.max_tokens` are left out and counted.
#[test]
fn a_guessed_site_secret_is_throttled_and_site_rows_past_a_cap_are_counted() {
    let db = test_db(Dialect::Mysql, "gazelle_hostile");
    let mut site = connect(&db);
    for ddl in GAZELLE_SCHEMA {
        site.execute(ddl).unwrap();
    }
    site.execute_with(
        "INSERT INTO torrents (ID, GroupID, info_hash) VALUES (10, 1, ?), (11, 1, ?)",
        &[Value::Blob(A.into()), Value::Blob(B.into())],
    )
    .unwrap();
    site.execute(
        "INSERT INTO users_freeleeches (UserID, TorrentID, Time) VALUES (1, 10, NOW()), \
         (1, 11, NOW()), (0, 10, NOW())",
    )
    .unwrap();
    let mut c = site_config(&db, PrivateSchema::Gazelle);
    c.private.site_secret = SITE_SECRET.into();
    c.private.max_auth_failures_per_min = 3;
    c.private.max_tokens = 1;
    let server = start(&c);
    let admin = server.admin_addr().unwrap();
    let metrics = || {
        let body = Client::connect(admin).get("/metrics").body;
        String::from_utf8(body).unwrap()
    };
    let value = |text: &str, name: &str| -> i64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("{name} in /metrics"))
    };
    let m = metrics();
    assert_eq!(value(&m, "hotpath_private_freeleech_tokens "), 1, "{m}");
    // One row past the cap, one with user 0.
    assert!(value(&m, "hotpath_private_rows_skipped_total ") >= 2, "{m}");
    let wrong = "wrongwrongwrongwrongwrongwrong00";
    for _ in 0..3 {
        let (ok, text) = gazelle_call(admin, wrong, "action=update_announce_jitter");
        assert!(!ok && text.starts_with("HTTP/1.1 403"), "{text}");
    }
    // The right secret, from the same address within the minute: refused too.
    let (ok, text) = gazelle_call(admin, SITE_SECRET, "action=update_announce_jitter");
    assert!(!ok && text.starts_with("HTTP/1.1 429"), "{text}");
    assert!(text.contains("Retry-After: 60"), "{text}");
    server.shutdown().unwrap();
}
