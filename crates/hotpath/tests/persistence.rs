//! Fault tests of write-behind persistence, with real processes and real databases: kill -9
//! under a load of completed downloads (and a torn journal tail), a database that goes away
//! under load, a journal that reaches its bound, and a graceful shutdown that drains.

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{announce_target, failure, server_addr, via, wait_until, Client, Proc, Proxy};
use hotpath_store::backend::{self, Dialect};
use hotpath_store::testing::{test_db, TestDb};
use hotpath_tracker::stored::TrackerDb;
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
    wait_until("acknowledged completions", Duration::from_secs(60), || {
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
    let stored = caught_up(&db, &server, 4, (sent, acked));
    // A graceful stop drains and leaves an empty journal.
    assert!(server.signal("-TERM").success());
    assert!(journal_files(&db.dir.join("data")).is_empty());
    assert_eq!(db_completed(&db), stored);
}

/// Waits until the database holds every acknowledged completion: at most the requests in
/// flight at a kill (journaled, their answers lost with the process) are there too. The
/// tracker's scrapes of torrents 1..=`torrents` report what the database holds.
fn caught_up(db: &TestDb, server: &Proc, torrents: u8, (sent, acked): (u64, u64)) -> u64 {
    wait_until(
        "the journal to reach the database",
        Duration::from_secs(30),
        || db_completed(db) >= acked,
    );
    let stored = db_completed(db);
    assert!(
        acked <= stored && stored <= sent,
        "acked {acked}, stored {stored}, sent {sent}"
    );
    let mut c = Client::connect(server.http);
    let reported: u64 = (1..=torrents)
        .map(|t| scrape_downloaded(&c.get(&common::scrape_target(&[[t; 20]])).body))
        .sum();
    assert_eq!(
        reported, stored,
        "the scrapes count every run's completions"
    );
    stored
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
    wait_until("load", Duration::from_secs(30), || load.acked() >= 200);

    proxy.set_up(false);
    let before = load.acked();
    std::thread::sleep(OUTAGE);
    let during = load.acked() - before;
    assert!(during > 1000, "announces kept being answered: {during}");
    let failures = server.metric("hotpath_store_flush_failures_total");
    assert!(failures >= 1.0, "{}", server.log_text());
    assert!(server.metric("hotpath_store_journal_bytes") > 0.0);
    // The store's own /stats section, beside the services' (the binary wires it in).
    let stats = Client::connect(server.admin.unwrap()).get("/stats");
    let v: serde_json::Value = serde_json::from_slice(&stats.body).unwrap();
    assert!(v["store"]["failures"].as_u64() >= Some(1), "{v}");
    assert!(v["store"]["journal_bytes"].as_u64() > Some(0), "{v}");
    assert!(v["tracker"].get("store_failures").is_none(), "{v}");

    recover(&proxy, load, &db, &mut server);
}

/// Brings the database back, stops the load, and checks that every acknowledged completion
/// reaches it and that a graceful stop leaves nothing in the journal.
fn recover(proxy: &Proxy, load: Load, db: &TestDb, server: &mut Proc) {
    proxy.set_up(true);
    let (_, acked) = load.finish();
    wait_until(
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
    wait_until("refusals", Duration::from_secs(60), || {
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

/// A small tmpfs mounted on a directory for the test's life: a file system that really fills.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(at).unwrap();
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "this test mounts a small tmpfs to fill a file system, which needs root: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs(at.to_path_buf())
    }

    /// Writes a file until the file system is full.
    fn fill(&self) -> PathBuf {
        use std::io::Write as _;
        let path = self.0.join("filler");
        let mut f = std::fs::File::create(&path).unwrap();
        let block = vec![0xa5u8; 4096];
        while f.write_all(&block).is_ok() {}
        let _ = f.sync_all();
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

/// The answer to one request on a new connection; `None` when the server closed it instead.
fn one_request(server: &Proc, target: &str) -> Option<common::Resp> {
    let mut c = Client::connect(server.http);
    c.send(format!("GET {target} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
    c.read()
}

#[test]
fn a_failed_journal_write_is_never_answered_from_memory() {
    let db = test_db(Dialect::Sqlite, "enospc");
    let data = db.dir.join("data");
    let fs = Tmpfs::mount(&data, "1m");
    // Nothing reaches the database before the kill: the journal is all there is.
    let config = write_config_flushing(&db, &db.url, 600_000, "journal_fsync_ms = 0\n");
    let mut server = Proc::spawn(&config, &db.dir);
    let peers = 1..=6u8;
    let hash = [5u8; 20];
    let join = |n: u8| {
        announce_target(&common::announce(
            hash,
            n,
            7000 + u16::from(n),
            50,
            Event::Started,
        ))
    };
    let complete = |n: u8| {
        announce_target(&common::announce(
            hash,
            n,
            7000 + u16::from(n),
            0,
            Event::Completed,
        ))
    };
    let scrape = common::scrape_target(&[hash]);
    for n in peers.clone() {
        let r = one_request(&server, &join(n)).expect("an answer");
        assert_eq!(failure(&r.body), None);
    }
    let filler = fs.fill();
    let records_before = server.metric("hotpath_store_journal_records_total");

    // Every completion fails to reach the journal: no answer, and no retry is answered from
    // the memory that counted it, on either worker, nor a scrape that would report it.
    for n in peers.clone() {
        assert!(one_request(&server, &complete(n)).is_none(), "peer {n}");
    }
    // A client whose request is still arriving while commits fail: a failed commit drops the
    // answers it held back, never a connection that was given none.
    let mut slow = Client::connect(server.http);
    let slow_request = format!("GET {scrape} HTTP/1.1\r\nHost: t\r\n\r\n");
    let (head, tail) = slow_request.as_bytes().split_at(10);
    slow.send(head);
    // The gauge is read after every round: the workers keep trying to journal what is held
    // on every turn, and one of those tries may succeed in a page another's failed segment
    // gave back (after which the retries are answered, as they should be).
    let mut held = server.metric("hotpath_store_journal_held_changes");
    for _ in 0..4 {
        for n in peers.clone() {
            let r = one_request(&server, &complete(n));
            assert!(
                r.is_none(),
                "a retry answered from memory: {:?}",
                r.map(|r| r.body)
            );
        }
        assert!(one_request(&server, &scrape).is_none());
        held = held.max(server.metric("hotpath_store_journal_held_changes"));
    }
    assert!(server.metric("hotpath_store_journal_errors_total") >= 6.0);
    // Every completion is held, unless a failed record could not be cut off its file (then
    // its changes wait in memory for the database under the record's number: the gate, also
    // no answer), or a worker with no answer waiting journaled what was held in a page the
    // file system gave back (then the later completions are held again): either way only the
    // others count as held. That all six are kept exactly once is checked below.
    let log = server.log_text();
    let gated = log.contains("cannot cut a failed record");
    let journaled = server.metric("hotpath_store_journal_records_total") > records_before;
    assert!(
        held >= 6.0 || ((gated || journaled) && held >= 1.0),
        "held changes at most {held}, journaled during the outage: {journaled}; the server \
         said:\n{log}"
    );
    assert!(server
        .log_text()
        .contains("no answer goes out until a journal write holds them"));

    // Room again: the next commit journals what was held, and the retries are answered.
    std::fs::remove_file(filler).unwrap();
    for n in peers.clone() {
        let r = one_request(&server, &complete(n)).unwrap_or_else(|| {
            panic!(
                "no answer once the journal has room; the server said:\n{}",
                server.log_text()
            )
        });
        assert_eq!(failure(&r.body), None);
    }
    let r = one_request(&server, &scrape).expect("a scrape answer");
    assert_eq!(scrape_downloaded(&r.body), 6);
    slow.send(tail);
    let r = slow.read().expect("the slow client is answered");
    assert_eq!(scrape_downloaded(&r.body), 6);
    assert_eq!(server.metric("hotpath_store_journal_held_changes"), 0.0);

    // What was answered is in the journal, exactly once.
    assert!(!server.signal("-KILL").success());
    assert_eq!(db_completed(&db), 0);
    let mut server = Proc::spawn(&config, &db.dir);
    let r = one_request(&server, &scrape).expect("a scrape answer");
    assert_eq!(scrape_downloaded(&r.body), 6, "{}", server.log_text());
    assert!(server.signal("-TERM").success());
    assert_eq!(db_completed(&db), 6);
    drop(fs);
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

/// Regression: 2 s of announces for random info hashes left 79k rows in hp_torrents, kept
/// after every peer left. A torrent only ever seen with one peer and no completed download
/// is not written; one with two peers is.
#[test]
fn random_announces_leave_no_rows_behind() {
    let db = test_db(Dialect::Sqlite, "random");
    let config = write_config(&db, &db.url, "[tracker]\nsnapshot_interval_secs = 1\n");
    let server = Proc::spawn(&config, &db.dir);
    let mut c = Client::connect(server.http);
    for n in 0..500u32 {
        let mut hash = [0u8; 20];
        hash[..4].copy_from_slice(&n.to_le_bytes());
        hash[19] = 0xaa;
        let a = common::announce(hash, 1, 7000, 50, Event::Started);
        assert_eq!(failure(&c.get(&announce_target(&a)).body), None);
    }
    for n in 1..=2u8 {
        let a = common::announce([9; 20], n, 7000 + u16::from(n), 50, Event::Started);
        assert_eq!(failure(&c.get(&announce_target(&a)).body), None);
    }
    let rows = || {
        let mut b = backend::connect(&db.url, &db.dir).unwrap();
        let mut keys = Vec::new();
        b.torrents(&mut |k, _| keys.push(k)).unwrap();
        keys
    };
    // The snapshot that wrote the two-peer torrent saw every single-peer one too.
    wait_until("the snapshot", Duration::from_secs(20), || {
        !rows().is_empty()
    });
    assert_eq!(rows(), vec![[9; 20]]);
}

macro_rules! per_backend {
    ($($name:ident),* $(,)?) => {
        mod sqlite { $( #[test] fn $name() { super::$name(super::Dialect::Sqlite) } )* }
        mod postgres { $( #[test] fn $name() { super::$name(super::Dialect::Postgres) } )* }
        mod mysql { $( #[test] fn $name() { super::$name(super::Dialect::Mysql) } )* }
    };
}

per_backend!(kill9_loses_nothing_acknowledged);

/// Restarts during a database outage: the server starts on its journal (it used to exit 1),
/// answers announces (completions journaled), refuses popup users whose state must be read
/// (503), is killed and started again still without the database, and once the database
/// answers replays every run's records exactly once: scrapes and the database agree, and the
/// popup catalog is read.
fn a_restart_during_an_outage_answers_and_catches_up(d: Dialect) {
    let db = test_db(d, "downstart");
    let proxy = Proxy::start(server_addr(&db.url));
    let url = via(&db.url, proxy.addr);
    let popups = "[popups]\nenabled = true\nadmin_token = \"t0ken-t0ken-t0ken\"\nreload_ms = 100\n";
    let config = write_config(&db, &url, popups);
    let (mut sent, mut acked) = (0, 0);
    let run = |server: &Proc, n: u64| {
        let load = Load::start(server.http, 2);
        wait_until("acknowledged completions", Duration::from_secs(60), || {
            load.acked() >= n
        });
        (load, n)
    };
    let popup = |server: &Proc| Client::connect(server.http).get("/v1/popup?user=alice");

    let mut server = Proc::spawn(&config, &db.dir);
    let def = r#"{"id": 1, "name": "hello", "payload": {}, "priority": 1, "frequency": {"cooldown": 3600}}"#;
    let mut c = Client::connect(server.admin.expect("an admin listener"));
    c.send(
        format!(
            "POST /admin/popups HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer t0ken-t0ken-t0ken\r\n\
             Content-Length: {}\r\n\r\n{def}",
            def.len()
        )
        .as_bytes(),
    );
    assert_eq!(c.read().unwrap().status, 201);
    proxy.set_up(false);
    let (load, _) = run(&server, 200);
    assert!(!server.signal("-KILL").success());
    let (s, a) = load.finish();
    (sent, acked) = (sent + s, acked + a);

    // Twice: started without the database, answering, then killed.
    for _ in 0..2 {
        let mut server = Proc::spawn(&config, &db.dir);
        assert!(
            server.log_text().contains("starting without it"),
            "{}",
            server.log_text()
        );
        assert_eq!(server.metric("hotpath_store_database_reached"), 0.0);
        let r = popup(&server);
        assert_eq!(r.status, 503, "{}", String::from_utf8_lossy(&r.body));
        let (load, _) = run(&server, 200);
        assert!(!server.signal("-KILL").success());
        let (s, a) = load.finish();
        (sent, acked) = (sent + s, acked + a);
    }

    // A third start without it; the database comes back under load.
    let mut server = Proc::spawn(&config, &db.dir);
    let (load, _) = run(&server, 100);
    proxy.set_up(true);
    wait_until(
        "the database to be reached",
        Duration::from_secs(30),
        || server.metric("hotpath_store_database_reached") == 1.0,
    );
    let (s, a) = load.finish();
    let stored = caught_up(&db, &server, 2, (sent + s, acked + a));
    wait_until("the popup catalog", Duration::from_secs(10), || {
        let r = popup(&server);
        r.status == 200 && String::from_utf8_lossy(&r.body).contains("\"id\":1")
    });
    assert!(server.signal("-TERM").success());
    assert_eq!(db_completed(&db), stored);
    assert!(journal_files(&db.dir.join("data")).is_empty());
}

#[test]
fn postgres_restart_during_an_outage() {
    a_restart_during_an_outage_answers_and_catches_up(Dialect::Postgres);
}

#[test]
fn mysql_restart_during_an_outage() {
    a_restart_during_an_outage_answers_and_catches_up(Dialect::Mysql);
}

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
    wait_until(
        "the reloader to pick the row up",
        Duration::from_secs(10),
        || failure(&c.get(&announce_target(&a)).body).is_none(),
    );
    server.shutdown().unwrap();
}
