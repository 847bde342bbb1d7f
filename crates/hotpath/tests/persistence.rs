//! Fault tests of write-behind persistence, with real processes and real databases: kill -9
//! under a load of completed downloads (and a torn journal tail), a database that goes away
//! under load, a journal that reaches its bound, and a graceful shutdown that drains.

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{announce_target, failure, server_addr, via, Client, Proc, Proxy};
use hotpath_store::backend::{self, Dialect};
use hotpath_store::testing::{test_db, TestDb};
use hotpath_wire::query::Event;

/// How long the database stays unreachable in the outage test.
const OUTAGE: Duration = Duration::from_secs(60);

fn write_config(db: &TestDb, url: &str, extra: &str) -> PathBuf {
    write_config_flushing(db, url, 100, extra)
}

fn write_config_flushing(db: &TestDb, url: &str, flush_ms: u64, extra: &str) -> PathBuf {
    let data = db.dir.join("data");
    let text = format!(
        "[server]\nworkers = 2\nshutdown_grace_secs = 2\n\
         [listen]\nhttp = [\"127.0.0.1:0\"]\nudp = []\nadmin = [\"127.0.0.1:0\"]\nipv6 = false\n\
         [store]\nurl = \"{url}\"\ndata_dir = \"{}\"\nflush_interval_ms = {flush_ms}\nretry_max_ms = 1000\n{extra}",
        data.display()
    );
    let path = db.dir.join("hotpath.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Completed downloads the database holds, over all torrents.
fn db_completed(db: &TestDb) -> u64 {
    let mut b = backend::connect(&db.url, &db.dir).unwrap();
    let mut sum = 0;
    b.torrents(&mut |_, t| sum += t.completed).unwrap();
    sum
}

fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Clients that each announce new peers completing downloads, one request at a time on a
/// kept-alive connection, counting what was sent and what was acknowledged.
struct Load {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    acked: Arc<AtomicU64>,
    refused: Arc<Mutex<Vec<String>>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    fn start(addr: SocketAddr, clients: u8) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let acked = Arc::new(AtomicU64::new(0));
        let refused = Arc::new(Mutex::new(Vec::new()));
        let threads = (0..clients)
            .map(|t| {
                let (stop, sent, acked, refused) =
                    (stop.clone(), sent.clone(), acked.clone(), refused.clone());
                std::thread::spawn(move || {
                    let mut c = Client::connect(addr);
                    c.stream
                        .set_read_timeout(Some(Duration::from_secs(30)))
                        .unwrap();
                    // Each peer (its own port) joins as a leecher, completes its download (a
                    // snatch: the swarm knew it as a leecher) and leaves.
                    for port in 1..=u16::MAX {
                        if stop.load(Ordering::Relaxed) {
                            return;
                        }
                        let step = |left: u64, event: Event| {
                            let mut a = common::announce([t + 1; 20], 0, port, left, event);
                            a.peer_id = *b"-HP0001-000000000000";
                            a.numwant = Some(0);
                            let target = announce_target(&a);
                            format!("GET {target} HTTP/1.1\r\nHost: t\r\n\r\n").into_bytes()
                        };
                        c.send(&step(100, Event::Started));
                        if c.read().is_none() {
                            return; // the server went away
                        }
                        sent.fetch_add(1, Ordering::SeqCst);
                        c.send(&step(0, Event::Completed));
                        let Some(r) = c.read() else {
                            return;
                        };
                        match failure(&r.body) {
                            None if r.status == 200 => {
                                acked.fetch_add(1, Ordering::SeqCst);
                            }
                            None => panic!("status {}", r.status),
                            Some(reason) => refused.lock().unwrap().push(reason),
                        }
                        c.send(&step(0, Event::Stopped));
                        if c.read().is_none() {
                            return;
                        }
                    }
                })
            })
            .collect();
        Load {
            stop,
            sent,
            acked,
            refused,
            threads,
        }
    }

    fn acked(&self) -> u64 {
        self.acked.load(Ordering::SeqCst)
    }

    /// Stops the clients; returns (sent, acknowledged).
    fn finish(self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().unwrap();
        }
        (
            self.sent.load(Ordering::SeqCst),
            self.acked.load(Ordering::SeqCst),
        )
    }
}

fn journal_files(data: &Path) -> Vec<PathBuf> {
    let dir = data.join("journal");
    hotpath_store::journal::list_segments(&dir)
        .unwrap_or_default()
        .into_iter()
        .map(|(_, _, p)| p)
        .collect()
}

fn kill9_loses_nothing_acknowledged(d: Dialect) {
    let db = test_db(d, "kill");
    let config = write_config(&db, &db.url, "");
    let mut server = Proc::spawn(&config, &db.dir);
    let load = Load::start(server.http, 4);
    // Each completion takes three requests (join, complete, leave).
    wait_for("acknowledged completions", Duration::from_secs(60), || {
        load.acked() >= 1000
    });
    let status = server.signal("-KILL");
    assert!(!status.success());
    assert!(load.refused.lock().unwrap().is_empty());
    let (sent, acked) = load.finish();

    // A crash in the middle of a journal write leaves a torn record at the end of a file.
    let files = journal_files(&db.dir.join("data"));
    assert!(!files.is_empty(), "the journal holds the unflushed tail");
    let torn = files.last().unwrap();
    let mut bytes = std::fs::read(torn).unwrap();
    bytes.extend_from_slice(&[40, 0, 0, 0, 1, 2, 3, 4, 9, 9]);
    std::fs::write(torn, bytes).unwrap();

    let mut server = Proc::spawn(&config, &db.dir);
    assert!(
        server.log_text().contains("incomplete or damaged record"),
        "{}",
        server.log_text()
    );
    assert_eq!(server.metric("hotpath_store_torn_records_total"), 1.0);
    wait_for(
        "the replay to reach the database",
        Duration::from_secs(30),
        || db_completed(&db) >= acked,
    );
    let stored = db_completed(&db);
    // Every acknowledged completion is there; at most the requests in flight at the kill
    // (journaled, their answers lost with the process) are there too.
    assert!(
        acked <= stored && stored <= sent,
        "acked {acked}, stored {stored}, sent {sent}"
    );
    // The restarted tracker reports the stored counts.
    let mut c = Client::connect(server.http);
    let reported: u64 = (1..=4u8)
        .map(|t| scrape_downloaded(&c.get(&common::scrape_target(&[[t; 20]])).body))
        .sum();
    assert_eq!(reported, stored);
    // A graceful stop drains and leaves an empty journal.
    assert!(server.signal("-TERM").success());
    assert!(journal_files(&db.dir.join("data")).is_empty());
    assert_eq!(db_completed(&db), stored);
}

/// The `downloaded` of the only entry of a scrape answer (0 when the torrent is unknown).
fn scrape_downloaded(body: &[u8]) -> u64 {
    use hotpath_wire::bencode::{decode, Value};
    let v = decode(body).unwrap();
    let Some(Value::Dict(files)) = v.get("files") else {
        panic!("no files: {:?}", String::from_utf8_lossy(body));
    };
    files
        .first()
        .and_then(|(_, e)| e.get("downloaded")?.as_int())
        .map_or(0, |d| d as u64)
}

fn database_outage_loses_nothing(d: Dialect) {
    let db = test_db(d, "outage");
    let proxy = Proxy::start(server_addr(&db.url));
    let config = write_config(&db, &via(&db.url, proxy.addr), "");
    let mut server = Proc::spawn(&config, &db.dir);
    let load = Load::start(server.http, 2);
    wait_for("load", Duration::from_secs(30), || load.acked() >= 200);

    proxy.set_up(false);
    let before = load.acked();
    std::thread::sleep(OUTAGE);
    let during = load.acked() - before;
    assert!(during > 1000, "announces kept being answered: {during}");
    let failures = server.metric("hotpath_store_flush_failures_total");
    assert!(failures >= 1.0, "{}", server.log_text());
    assert!(server.metric("hotpath_store_journal_bytes") > 0.0);

    recover(&proxy, load, &db, &mut server);
}

/// Brings the database back, stops the load, and checks that every acknowledged completion
/// reaches it and that a graceful stop leaves nothing in the journal.
fn recover(proxy: &Proxy, load: Load, db: &TestDb, server: &mut Proc) {
    proxy.set_up(true);
    let (_, acked) = load.finish();
    wait_for(
        "the backlog to reach the database",
        Duration::from_secs(30),
        || db_completed(db) == acked,
    );
    assert!(server.signal("-TERM").success());
    assert_eq!(db_completed(db), acked);
    assert!(journal_files(&db.dir.join("data")).is_empty());
}

#[test]
fn a_full_journal_refuses_completions_and_keeps_answering_the_rest() {
    let db = test_db(Dialect::Postgres, "bound");
    let proxy = Proxy::start(server_addr(&db.url));
    let extra = "journal_segment_bytes = 65536\njournal_max_bytes = 131072\njournal_fsync_ms = 0\n";
    let config = write_config(&db, &via(&db.url, proxy.addr), extra);
    let mut server = Proc::spawn(&config, &db.dir);
    proxy.set_up(false);
    let load = Load::start(server.http, 2);
    wait_for("refusals", Duration::from_secs(60), || {
        !load.refused.lock().unwrap().is_empty()
    });
    let refused = load.refused.lock().unwrap()[0].clone();
    assert!(refused.contains("journal is full"), "{refused}");
    // Announces that complete nothing are still answered.
    let mut c = Client::connect(server.http);
    let a = common::announce([9; 20], 1, 7000, 100, Event::Started);
    let r = c.get(&announce_target(&a));
    assert_eq!(failure(&r.body), None);
    assert!(server.metric("hotpath_store_refused_total") >= 1.0);

    recover(&proxy, load, &db, &mut server);
}

#[test]
fn graceful_shutdown_drains_and_swarms_survive_a_restart() {
    let db = test_db(Dialect::Sqlite, "drain");
    // A long interval: only the shutdown drain can have written these.
    let config = write_config_flushing(&db, &db.url, 600_000, "");
    let mut server = Proc::spawn(&config, &db.dir);
    let mut c = Client::connect(server.http);
    for n in 1..=5u8 {
        let a = common::announce([7; 20], n, 7000 + u16::from(n), 50, Event::Started);
        assert_eq!(failure(&c.get(&announce_target(&a)).body), None);
        let a = common::announce([7; 20], n, 7000 + u16::from(n), 0, Event::Completed);
        assert_eq!(failure(&c.get(&announce_target(&a)).body), None);
    }
    let leecher = common::announce([7; 20], 9, 7100, 50, Event::Started);
    assert_eq!(failure(&c.get(&announce_target(&leecher)).body), None);
    drop(c);
    assert_eq!(db_completed(&db), 0);
    assert!(server.signal("-TERM").success());
    assert_eq!(db_completed(&db), 5);
    assert!(journal_files(&db.dir.join("data")).is_empty());
    assert!(server.log_text().contains("every change written"));

    let server = Proc::spawn(&config, &db.dir);
    let mut c = Client::connect(server.http);
    let r = c.get(&common::scrape_target(&[[7; 20]]));
    assert_eq!(scrape_downloaded(&r.body), 5);
    // The swarm came back with its peers: a new leecher is sent the five seeders.
    let a = common::announce([7; 20], 20, 7200, 10, Event::Started);
    let r = c.get(&announce_target(&a));
    assert_eq!(common::int(&r.body, "complete"), 5);
    assert_eq!(common::int(&r.body, "incomplete"), 2);
    assert_eq!(common::peers(&r.body, "peers").len(), 6 * 6);
}

macro_rules! per_backend {
    ($($name:ident),* $(,)?) => {
        mod sqlite { $( #[test] fn $name() { super::$name(super::Dialect::Sqlite) } )* }
        mod postgres { $( #[test] fn $name() { super::$name(super::Dialect::Postgres) } )* }
        mod mysql { $( #[test] fn $name() { super::$name(super::Dialect::Mysql) } )* }
    };
}

per_backend!(kill9_loses_nothing_acknowledged);

#[test]
fn postgres_outage_loses_nothing() {
    database_outage_loses_nothing(Dialect::Postgres);
}

#[test]
fn mysql_outage_loses_nothing() {
    database_outage_loses_nothing(Dialect::Mysql);
}

#[test]
fn the_access_list_follows_the_database() {
    let mut config = common::test_config();
    config.access_list.mode = hotpath_config::AccessListMode::Allow;
    config.access_list.database = true;
    config.access_list.reload_secs = 1;
    let data = PathBuf::from(&config.store.data_dir);
    let server = common::start(&config);
    let mut c = Client::connect(server.http_addr().unwrap());
    let a = common::announce([0x5a; 20], 1, 7000, 10, Event::Started);
    let r = c.get(&announce_target(&a));
    assert!(failure(&r.body).unwrap().contains("allow list"));

    let mut db = backend::connect("", &data).unwrap();
    let hex = "5a".repeat(20);
    db.execute(&format!(
        "INSERT INTO hp_access_list (info_hash, note) VALUES (X'{hex}', 'added by hand')"
    ))
    .unwrap();
    wait_for(
        "the reloader to pick the row up",
        Duration::from_secs(10),
        || failure(&c.get(&announce_target(&a)).body).is_none(),
    );
    server.shutdown().unwrap();
}
