//! The store with the services this binary wires, one conformance suite run against every
//! backend: SQLite (a file in a temporary directory), PostgreSQL and MariaDB/MySQL (real
//! servers; `scripts/test` starts or installs them). Each test gets its own database, so tests
//! run in parallel without seeing each other. See [`hotpath_store::testing`] for where the
//! servers are found. (The store's seam alone, with a service it has never heard of, is tested
//! in crates/store/tests/toy_service.rs.)

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hotpath::STORED as SERVICES;
use hotpath_config::StoreConfig;
use hotpath_lua::stored::{LuaChange, LuaDb};
use hotpath_popups::stored::{PopupChange, PopupDb, PopupStore, PopupUserRow, CLICK, CLOSE, SHOWN};
use hotpath_popups::user_id::UserId;
use hotpath_store::backend::{self, Backend, Dialect, Written};
use hotpath_store::migrations;
use hotpath_store::table::{Rows, Value};
use hotpath_store::testing::test_db;
use hotpath_store::{refused, Batch, Fault, Store, StoreError};
use hotpath_tracker::stored::{Key, StoredTorrent, TorrentChange, TorrentRow, TrackerDb, TORRENTS};

fn key(n: u32) -> Key {
    let mut k = [0xab; 20];
    k[..4].copy_from_slice(&n.to_be_bytes());
    k
}

/// A batch of torrent rows and journal positions.
fn torrents(rows: Vec<(Key, TorrentRow)>, seqs: Vec<(u32, u64)>, changes: u64) -> Batch {
    let mut t = Rows::with_capacity(&TORRENTS, rows.len());
    for (k, r) in &rows {
        t.push(r.row(k));
    }
    let mut b = Batch {
        seqs,
        changes,
        ..Batch::default()
    };
    b.push(t);
    b
}

fn row(completed: u64, seeders: u32, leechers: u32, first: u32, last: u32) -> TorrentRow {
    TorrentRow {
        completed,
        seeders,
        leechers,
        first_seen: first,
        last_active: last,
    }
}

fn stored(b: &mut dyn Backend) -> Vec<(Key, StoredTorrent)> {
    let mut out = Vec::new();
    b.torrents(&mut |k, t| out.push((k, t))).unwrap();
    out.sort_by_key(|r| r.0);
    out
}

/// Completed downloads per torrent, sorted: the database's and those of the rows replayed
/// from the journal (what the tracker restores).
fn completed(b: &mut dyn Backend, replayed: &Batch) -> Vec<(Key, u64)> {
    let mut counts: std::collections::BTreeMap<Key, u64> = stored(b)
        .into_iter()
        .filter(|(_, t)| t.completed > 0)
        .map(|(k, t)| (k, t.completed))
        .collect();
    for r in replayed.rows_of(&TORRENTS) {
        *counts.entry(r[0].bytes().try_into().unwrap()).or_insert(0) += r[1].int() as u64;
    }
    counts.into_iter().filter(|c| c.1 > 0).collect()
}

/// One completed download of `info_hash` at `at`.
fn done(info_hash: Key, at: u32) -> TorrentChange {
    TorrentChange {
        info_hash,
        completed: 1,
        seeders: 1,
        leechers: 0,
        at,
    }
}

// ---- the suite: each fn takes a dialect --------------------------------------------------

fn migrations_apply_once_and_report_status(d: Dialect) {
    let db = test_db(d, "migrate");
    let mut b = backend::connect(&db.url, &db.dir).unwrap();
    let before = migrations::status(&mut *b, &SERVICES).unwrap();
    assert!(before.iter().all(|s| s.applied_at.is_none()));
    let applied = migrations::migrate(&mut *b, &SERVICES).unwrap();
    let versions: Vec<(&str, u32)> = applied.iter().map(|m| (m.owner, m.version)).collect();
    // The store's own, then each service's, in the order the services are listed.
    let mut want: Vec<(&str, u32)> = (1..=migrations::latest())
        .map(|v| (migrations::STORE, v))
        .collect();
    for s in SERVICES.iter() {
        want.extend(s.migrations.iter().map(|m| (s.name, m.version)));
    }
    assert!(
        want.len() > migrations::latest() as usize,
        "private mode's tables"
    );
    assert_eq!(versions, want);
    assert!(migrations::migrate(&mut *b, &SERVICES).unwrap().is_empty());
    let after = migrations::status(&mut *b, &SERVICES).unwrap();
    assert!(after.iter().all(|s| s.applied_at.is_some()));
    migrations::require_current(&mut *b, &SERVICES).unwrap();
    // A database migrated by a newer hotpath is refused, not written to.
    b.execute("INSERT INTO hp_schema (version, name, applied_at) VALUES (999, 'future', 0)")
        .unwrap();
    let e = migrations::status(&mut *b, &SERVICES).unwrap_err();
    assert!(e.to_string().contains("newer"), "{e}");
    assert!(!e.retryable());
}

fn upserts_add_counts_replace_snapshots_and_keep_first_seen(d: Dialect) {
    let db = test_db(d, "upsert");
    let mut b = backend::connect(&db.url, &db.dir).unwrap();
    migrations::migrate(&mut *b, &SERVICES).unwrap();
    let first = torrents(
        vec![
            (key(1), row(2, 5, 6, 100, 110)),
            (key(2), row(0, 1, 1, 100, 100)),
        ],
        vec![(0, 7), (3, 2)],
        4,
    );
    assert_eq!(
        b.write(&first).unwrap(),
        Written {
            statements: 1,
            rows: 2
        }
    );
    let second = torrents(
        vec![(key(1), row(3, 9, 0, 200, 105))],
        vec![(0, 9), (3, 1)],
        3,
    );
    b.write(&second).unwrap();
    let rows = stored(&mut *b);
    assert_eq!(rows.len(), 2);
    assert_eq!(
        rows[0].1,
        StoredTorrent {
            completed: 5,
            seeders: 9,
            leechers: 0,
            first_seen: 100,
            last_active: 110
        }
    );
    let mut pos = b.journal_positions().unwrap();
    pos.sort();
    // Positions only move forward, whatever order batches arrive in.
    assert_eq!(pos, vec![(0, 9), (3, 2)]);
}

fn big_batches_split_under_the_parameter_limit(d: Dialect) {
    let db = test_db(d, "big");
    let mut b = backend::connect(&db.url, &db.dir).unwrap();
    migrations::migrate(&mut *b, &SERVICES).unwrap();
    let n = d.rows_per_statement(TORRENTS.width()) * 2 + 7;
    let batch = torrents(
        (0..n as u32)
            .map(|i| (key(i), row(1, 1, 2, 10, 10)))
            .collect(),
        vec![(1, 1)],
        n as u64,
    );
    let w = b.write(&batch).unwrap();
    // Prepared statements come in repeating sizes; MySQL's text statements are cut evenly.
    let expected = match d {
        Dialect::Mysql => 3,
        _ => d.statement_sizes(n, TORRENTS.width()).count() as u64,
    };
    assert_eq!(w.statements, expected);
    assert_eq!(w.rows, n as u64);
    let rows = stored(&mut *b);
    assert_eq!(rows.len(), n);
    assert!(rows.iter().all(|(_, t)| t.completed == 1));
}

/// `tracker.forget_torrents_after_days`: the torrents idle since before the cut with no
/// completed download go; a completed download or recent activity keeps a row.
fn idle_torrents_without_downloads_are_forgotten(d: Dialect) {
    let db = test_db(d, "forget");
    let mut b = backend::connect(&db.url, &db.dir).unwrap();
    migrations::migrate(&mut *b, &SERVICES).unwrap();
    let batch = torrents(
        vec![
            (key(1), row(0, 2, 0, 100, 100)),
            (key(2), row(3, 2, 0, 100, 100)),
            (key(3), row(0, 2, 0, 100, 900)),
        ],
        vec![(0, 1)],
        3,
    );
    b.write(&batch).unwrap();
    b.forget_idle_torrents(500).unwrap();
    let left: Vec<Key> = stored(&mut *b).into_iter().map(|r| r.0).collect();
    assert_eq!(left, vec![key(2), key(3)]);
}

/// `popups.forget_idle_users_after_days` and `keep_events_days`: a user only shown a popup,
/// whose cooldown and last show are before the cut, goes; an answered one, one still cooling
/// down and one shown since stay; events before the cut go.
fn idle_popup_users_and_old_events_are_forgotten(d: Dialect) {
    let db = test_db(d, "forget_users");
    let cfg = db.store_config();
    let (store, _) = Store::open(&cfg, &SERVICES).unwrap();
    let change = |user: &str, action, next_eligible, at| PopupChange {
        user: UserId::new(user),
        popup: 1,
        action,
        next_eligible,
        shows: 1,
        at,
        answers: if action == SHOWN { 0 } else { at - 1 },
    };
    let mut w = store.writer(0);
    for c in [
        change("invented", SHOWN, 200, 100),
        change("clicked", SHOWN, 200, 100),
        change("clicked", CLICK, 200, 101),
        change("cooling", SHOWN, 5_000, 100),
        change("recent", SHOWN, 200, 900),
    ] {
        w.append(&c).unwrap();
    }
    w.commit().unwrap();
    store.flush().unwrap();
    let mut b = backend::connect(&db.url, &db.dir).unwrap();
    b.forget_idle_users(500).unwrap();
    b.forget_events(500).unwrap();
    let users = ["invented", "clicked", "cooling", "recent"];
    let mut left: Vec<String> = b
        .popup_users(&users)
        .unwrap()
        .into_iter()
        .map(|r| r.0)
        .collect();
    left.sort();
    assert_eq!(left, ["clicked", "cooling", "recent"]);
    let events: u64 = b.popup_event_counts().unwrap().iter().map(|e| e.2).sum();
    assert_eq!(events, 1, "the recent show's");
}

/// A batch of a wide table (hp_user_torrents, 14 columns): rows enough for statements as
/// large as the parameter limit allows, twice over. Statements sized for narrow tables once
/// passed SQLite's limit here, so every flush of 2,521 or more of these rows failed for good.
fn wide_batches_split_under_the_parameter_limit(d: Dialect) {
    use hotpath_tracker::private::stored::USER_TORRENTS;
    let db = test_db(d, "wide");
    let mut b = backend::connect(&db.url, &db.dir).unwrap();
    migrations::migrate(&mut *b, &SERVICES).unwrap();
    let n = d.rows_per_statement(USER_TORRENTS.width()) * 2 + 7;
    let mut rows = Rows::with_capacity(&USER_TORRENTS, n);
    for i in 0..n as i64 {
        let v = Value::Int;
        rows.push([
            v(i + 1),
            v(7),
            v(100),
            v(50),
            v(100),
            v(50),
            v(0),
            v(1),
            v(1),
            v(1),
            v(0),
            v(0),
            v(0),
            v(1_800_000_000),
        ]);
    }
    let mut batch = Batch {
        seqs: vec![(0, 1)],
        changes: n as u64,
        ..Batch::default()
    };
    batch.push(rows);
    let w = b.write(&batch).unwrap();
    assert_eq!(w.rows, n as u64);
    let mut got = Vec::new();
    b.query(
        "SELECT COUNT(*), MIN(uploaded), MAX(uploaded) FROM hp_user_torrents WHERE torrent_id = ?",
        &[Value::Int(7)],
        &mut |r| got.push(r.to_vec()),
    )
    .unwrap();
    let r: Vec<i64> = got[0].iter().map(Value::int).collect();
    assert_eq!(r, vec![n as i64, 100, 100]);
}

fn errors_say_whether_a_retry_can_help(d: Dialect) {
    let db = test_db(d, "errors");
    let mut b = backend::connect(&db.url, &db.dir).unwrap();
    // No schema: a person must act, retrying will not help.
    let batch = torrents(vec![(key(1), row(1, 0, 0, 1, 1))], vec![], 1);
    let e = b.write(&batch).unwrap_err();
    assert!(!e.retryable(), "{e}");
    // The backend reconnects after an error.
    migrations::migrate(&mut *b, &SERVICES).unwrap();
    b.write(&batch).unwrap();
    assert_eq!(stored(&mut *b).len(), 1);
}

fn access_list_rows_are_read(d: Dialect) {
    let db = test_db(d, "access");
    let mut b = backend::connect(&db.url, &db.dir).unwrap();
    migrations::migrate(&mut *b, &SERVICES).unwrap();
    let hex: String = key(5).iter().map(|x| format!("{x:02x}")).collect();
    let literal = match d {
        Dialect::Sqlite | Dialect::Mysql => format!("X'{hex}'"),
        Dialect::Postgres => format!("'\\x{hex}'::bytea"),
    };
    b.execute(&format!(
        "INSERT INTO hp_access_list (info_hash, note) VALUES ({literal}, 'test')"
    ))
    .unwrap();
    assert_eq!(b.access_list().unwrap(), vec![key(5)]);
}

/// The one read primitive every service's reads go through: values come back typed, NULLs a
/// site left are `Null` (not a crash), text with quotes and placeholders' marks in it is a
/// value, not SQL, and an integer too big for its column is the row's own fault.
fn queries_return_typed_values_whatever_the_rows_hold(d: Dialect) {
    let db = test_db(d, "query");
    let mut b = backend::connect(&db.url, &db.dir).unwrap();
    migrations::migrate(&mut *b, &SERVICES).unwrap();
    let odd = "{\"x\":\"it's ? $1 \\u0000\"}";
    b.save_popup(i32::MAX as u32, odd, 7).unwrap();
    b.save_popup(3, "{}", 8).unwrap();
    b.save_popup(3, "[]", 9).unwrap();
    assert_eq!(
        b.popups().unwrap(),
        vec![(3, "[]".to_string()), (i32::MAX as u32, odd.to_string())]
    );
    b.execute("CREATE TABLE t_query (k INTEGER, t TEXT, n BIGINT)")
        .unwrap();
    b.execute_with(
        "INSERT INTO t_query (k, t, n) VALUES (?, ?, ?)",
        &[Value::Int(1), Value::from("a'b;--"), Value::Null],
    )
    .unwrap();
    let mut rows = Vec::new();
    b.query(
        "SELECT k, t, n FROM t_query WHERE t = ?",
        &[Value::from("a'b;--")],
        &mut |r| rows.push(r.to_vec()),
    )
    .unwrap();
    assert_eq!(
        rows,
        vec![vec![Value::Int(1), Value::from("a'b;--"), Value::Null]]
    );
    let e = b
        .query("SELECT nope FROM t_query", &[], &mut |_| {})
        .unwrap_err();
    assert!(!e.retryable(), "{e}");
    if d != Dialect::Sqlite {
        // SQLite's columns take any integer.
        let e = b
            .execute_with(
                "INSERT INTO t_query (k, t, n) VALUES (?, 'x', 0)",
                &[Value::Int(i64::from(u32::MAX))],
            )
            .unwrap_err();
        assert_eq!(e.fault(), Some(Fault::Refused), "{e}");
    }
    b.execute("DROP TABLE t_query").unwrap();
}

fn journaled_changes_survive_a_crash_exactly_once(d: Dialect) {
    let db = test_db(d, "replay");
    let cfg = db.store_config();
    {
        let (store, restored) = Store::open(&cfg, &SERVICES).unwrap();
        assert_eq!(restored.replayed, 0);
        assert!(store.with_replay(completed).is_empty());
        let mut w = store.writer(0);
        w.append(&done(key(1), 100)).unwrap();
        w.append(&done(key(1), 101)).unwrap();
        w.commit().unwrap();
        assert_eq!(store.flush().unwrap(), 1);
        // Journaled and acknowledged, but the process dies before the next flush.
        w.append(&done(key(1), 102)).unwrap();
        w.append(&done(key(2), 102)).unwrap();
        w.commit().unwrap();
        // A store has no drop-time flush: dropping it is what a kill leaves (the writer,
        // whose drop would commit, is forgotten).
        std::mem::forget(w);
        drop(store);
    }
    let (store, restored) = Store::open(&cfg, &SERVICES).unwrap();
    assert_eq!(restored.replayed, 1);
    assert_eq!(store.with_replay(completed), vec![(key(1), 3), (key(2), 1)]);
    store.flush().unwrap();
    assert_eq!(store.journal_bytes(), 0, "confirmed segments are deleted");
    let rows = store.with_backend(|b| stored(b));
    assert_eq!(rows[0].1.completed, 3);
    drop(store);
    // Opening again replays nothing: the database holds the journal's position.
    let (store, restored) = Store::open(&cfg, &SERVICES).unwrap();
    assert_eq!(restored.replayed, 0);
    assert_eq!(store.with_replay(completed), vec![(key(1), 3), (key(2), 1)]);
}

/// The store shared with a flusher thread, and the flag that stops it.
fn with_flusher(store: Store) -> (Arc<Store>, Arc<AtomicBool>, std::thread::JoinHandle<()>) {
    let store = Arc::new(store);
    let stop = Arc::new(AtomicBool::new(false));
    let flusher = {
        let (store, stop) = (store.clone(), stop.clone());
        std::thread::spawn(move || store.run_flusher(&stop))
    };
    (store, stop, flusher)
}

fn the_flusher_writes_on_time_and_drains_at_stop(d: Dialect) {
    let db = test_db(d, "flusher");
    let mut cfg = db.store_config();
    cfg.flush_interval_ms = 50;
    let (store, stop, flusher) = with_flusher(Store::open(&cfg, &SERVICES).unwrap().0);
    let mut w = store.writer(2);
    for i in 0..100u32 {
        w.append(&done(key(i % 10), i)).unwrap();
        w.commit().unwrap();
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while store.metrics().changes.get() < 100 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(store.metrics().changes.get(), 100);
    // At most 10 rows a flush: at most two statements (8 + 2).
    assert!(store.metrics().statements.get() <= 2 * store.metrics().flushes.get());
    // Changes after the last flush, then a stop: the drain writes them once the writer closes.
    for i in 0..5u32 {
        w.append(&done(key(50 + i), 1)).unwrap();
    }
    stop.store(true, Ordering::Release);
    drop(w);
    flusher.join().unwrap();
    let rows = store.with_backend(|b| stored(b));
    assert_eq!(rows.len(), 15);
    assert_eq!(rows.iter().map(|r| r.1.completed).sum::<u64>(), 105);
    assert_eq!(store.journal_bytes(), 0);
}

/// A backend that fails its first `n` writes like a lost connection.
struct Flaky {
    inner: Box<dyn Backend>,
    fail: u32,
    /// Writer-lock claims to fail like an unreachable server.
    unreachable: u32,
}

impl Backend for Flaky {
    fn dialect(&self) -> Dialect {
        self.inner.dialect()
    }
    fn applied_migrations(&mut self) -> Result<Vec<(u32, i64)>, StoreError> {
        self.inner.applied_migrations()
    }
    fn apply_migration(
        &mut self,
        statements: &[&str],
        record: &str,
        params: &[Value],
    ) -> Result<(), StoreError> {
        self.inner.apply_migration(statements, record, params)
    }
    fn write_batch(&mut self, batch: &Batch, commit: bool) -> Result<Written, StoreError> {
        if self.fail > 0 && commit {
            self.fail -= 1;
            return Err(StoreError::Db {
                backend: "flaky",
                what: "connection reset".into(),
                fault: Fault::Transient,
            });
        }
        self.inner.write_batch(batch, commit)
    }
    fn query(
        &mut self,
        sql: &str,
        params: &[Value],
        each: &mut dyn FnMut(&[Value]),
    ) -> Result<(), StoreError> {
        self.inner.query(sql, params, each)
    }
    fn execute_with(&mut self, sql: &str, params: &[Value]) -> Result<(), StoreError> {
        self.inner.execute_with(sql, params)
    }
    fn claim_writer(&mut self, node: u8) -> Result<(), StoreError> {
        if self.unreachable > 0 {
            self.unreachable -= 1;
            return Err(StoreError::Db {
                backend: "flaky",
                what: "connection refused".into(),
                fault: Fault::Transient,
            });
        }
        self.inner.claim_writer(node)
    }
}

fn failed_batches_are_merged_back_and_retried(d: Dialect) {
    let db = test_db(d, "retry");
    let mut cfg = db.store_config();
    cfg.flush_interval_ms = 20;
    cfg.retry_max_ms = 200;
    let inner = backend::connect(&db.url, &db.dir).unwrap();
    let flaky = Flaky {
        inner,
        fail: 4,
        unreachable: 0,
    };
    let opened = Store::open_with(&cfg, &SERVICES, Box::new(flaky)).unwrap();
    let (store, stop, flusher) = with_flusher(opened.0);
    let mut w = store.writer(0);
    for i in 0..50u32 {
        w.append(&done(key(i % 7), i)).unwrap();
        w.commit().unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while store.metrics().changes.get() < 50 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Ordering::Release);
    drop(w);
    flusher.join().unwrap();
    let m = store.metrics();
    assert_eq!(m.failures.get(), 4);
    assert!(m.retries.get() >= 4);
    assert_eq!(m.changes.get(), 50);
    let rows = store.with_backend(|b| stored(b));
    assert_eq!(rows.iter().map(|r| r.1.completed).sum::<u64>(), 50);
}

/// A batch whose write failed waits beside the database (the carry) for the next flush; the
/// popup reads see it meanwhile, under the queue's newer changes where those order later, and
/// the next flush writes the same.
fn a_failed_batch_is_read_and_written_under_newer_changes(d: Dialect) {
    let db = test_db(d, "carry");
    let cfg = db.store_config();
    let flaky = Flaky {
        inner: backend::connect(&db.url, &db.dir).unwrap(),
        fail: 1,
        unreachable: 0,
    };
    let (store, _) = Store::open_with(&cfg, &SERVICES, Box::new(flaky)).unwrap();
    let pop = |user: &str, action, shows, at| PopupChange::<Box<str>> {
        user: user.into(),
        popup: 1,
        action,
        next_eligible: u64::from(at) + 10,
        shows,
        at,
        answers: if action == SHOWN { 0 } else { at - 1 },
    };
    let day = 20_000u32;
    let at = day * 86_400;
    let mut w = store.writer(0);
    w.append(&pop("ann", CLICK, 2, at + 50)).unwrap();
    w.append(&pop("bob", SHOWN, 1, at + 50)).unwrap();
    w.commit().unwrap();
    assert!(store.flush().is_err(), "the first write fails");
    assert_eq!(
        store.queued_rows(),
        5,
        "2 users, 2 events, 1 daily count kept"
    );
    // Newer in arrival, older in order for ann (a worker's late journal); later for bob.
    w.append(&pop("ann", SHOWN, 1, at + 40)).unwrap();
    w.append(&pop("bob", CLOSE, 1, at + 60)).unwrap();
    w.commit().unwrap();
    let read = |store: &Store| {
        let users = store.popup_users(&["ann", "bob"]).unwrap();
        let state = |u: &str| {
            let r = users[u][0].1;
            (r.last_action, r.shows, r.updated_at)
        };
        (state("ann"), state("bob"))
    };
    let expected = ((CLICK, 2, at + 50), (CLOSE, 1, at + 60));
    assert_eq!(read(&store), expected);
    assert_eq!(store.popup_daily(day).unwrap()[&1], 2);
    assert_eq!(store.popup_event_counts().unwrap()[&(1, SHOWN)], 2);
    assert_eq!(
        store.pending_popup_users().unwrap().len(),
        4,
        "carry and queue"
    );
    store.flush().unwrap();
    assert_eq!(store.queued_rows(), 0);
    assert_eq!(read(&store), expected, "the database holds what was read");
    assert_eq!(store.popup_daily(day).unwrap()[&1], 2);
    assert_eq!(store.popup_event_counts().unwrap()[&(1, SHOWN)], 2);
}

fn a_full_journal_refuses_changes(d: Dialect) {
    let db = test_db(d, "full");
    let mut cfg = db.store_config();
    cfg.journal_segment_bytes = 1 << 16;
    cfg.journal_max_bytes = 1 << 17;
    let (store, _) = Store::open(&cfg, &SERVICES).unwrap();
    let mut w = store.writer(0);
    let mut taken = 0u64;
    let refused = loop {
        match w.append(&done(key(taken as u32), 1)) {
            Ok(()) => taken += 1,
            Err(e) => break e,
        }
        w.commit().unwrap();
    };
    assert!(refused.reason().contains("journal is full"));
    assert!(store.journal_bytes() <= 1 << 17);
    assert_eq!(store.metrics().refused.get(), 1);
    // Once the database has them, the segments go and changes are taken again.
    store.flush().unwrap();
    w.append(&done(key(0), 2)).unwrap();
    w.commit().unwrap();
    drop(w);
    store.flush().unwrap();
    let rows = store.with_backend(|b| stored(b));
    assert_eq!(rows.iter().map(|r| r.1.completed).sum::<u64>(), taken + 1);

    // The rows waiting in memory are bounded too: an event log grows with every change.
    let db = test_db(d, "full_queue");
    let mut cfg = db.store_config();
    cfg.batch_rows = 50;
    cfg.max_queue_rows = 100;
    let (store, _) = Store::open(&cfg, &SERVICES).unwrap();
    let mut w = store.writer(0);
    let mut taken = 0u32;
    while w
        .append(&PopupChange::<Box<str>> {
            user: format!("u{taken}").into(),
            popup: 1,
            action: SHOWN,
            next_eligible: 0,
            shows: 1,
            at: 1,
            answers: 0,
        })
        .is_ok()
    {
        taken += 1;
        w.commit().unwrap();
        assert!(taken < 1000, "never refused");
    }
    assert!(
        (33..=100).contains(&taken),
        "{taken} changes (3 rows each) taken"
    );
    assert!(store.queued_rows() <= 100 + 3);
    store.flush().unwrap();
    assert!(w.has_room(64), "room again once written");
}

fn popup_state_events_and_daily_counts_are_written_and_read_back(d: Dialect) {
    let db = test_db(d, "popups");
    let cfg = db.store_config();
    let (store, _) = Store::open(&cfg, &SERVICES).unwrap();
    let day = 20_000u32;
    let at = day * 86_400 + 5;
    let ev = |user: &str, popup, action, next, shows| PopupChange::<Box<str>> {
        user: user.into(),
        popup,
        action,
        next_eligible: next,
        shows,
        at,
        answers: if action == SHOWN { 0 } else { at - 1 },
    };
    let mut w = store.writer(0);
    // A user id with quotes and non-ASCII text, which no statement may choke on.
    let odd = "o'brien \"ü\" 🙂";
    for c in [
        ev("alice", 1, SHOWN, 100, 1),
        ev("alice", 1, CLICK, u64::MAX, 1),
        ev(odd, 1, SHOWN, 200, 1),
        ev(odd, 1, CLOSE, 300, 1),
        ev("bob", 2, SHOWN, 400, 3),
    ] {
        w.append(&c).unwrap();
    }
    w.commit().unwrap();
    store.flush().unwrap();
    // Written twice over (a replayed batch): state is absolute, so it does not drift.
    w.append(&ev("bob", 2, SHOWN, 500, 4)).unwrap();
    w.commit().unwrap();
    store.flush().unwrap();
    store.with_backend(|b| {
        let alice = b.popup_user("alice").unwrap();
        assert_eq!(alice.len(), 1);
        assert_eq!(
            (alice[0].0, alice[0].1.next_eligible, alice[0].1.last_action),
            (1, u64::MAX, CLICK)
        );
        let o = b.popup_user(odd).unwrap();
        assert_eq!((o[0].1.next_eligible, o[0].1.last_action), (300, CLOSE));
        assert_eq!(b.popup_user("bob").unwrap()[0].1.shows, 4);
        assert!(b.popup_user("nobody").unwrap().is_empty());
        let mut daily = b.popup_daily(day).unwrap();
        daily.sort();
        assert_eq!(daily, vec![(1, 2), (2, 2)]);
        assert!(b.popup_daily(day + 1).unwrap().is_empty());
        let counts = b.popup_event_counts().unwrap();
        assert_eq!(
            counts,
            vec![(1, SHOWN, 2), (1, CLICK, 1), (1, CLOSE, 1), (2, SHOWN, 2)]
        );
        b.execute("INSERT INTO hp_popups (id, definition, updated_at) VALUES (7, '{\"id\":7}', 0)")
            .unwrap();
        assert_eq!(b.popups().unwrap(), vec![(7, "{\"id\":7}".to_string())]);
        b.save_popup(7, "{\"id\":7,\"name\":\"o'brien\"}", 5)
            .unwrap();
        b.save_popup(8, "{}", 6).unwrap();
        assert_eq!(
            b.popups().unwrap(),
            vec![
                (7, "{\"id\":7,\"name\":\"o'brien\"}".to_string()),
                (8, "{}".to_string())
            ]
        );
    });

    // Many users in few statements: 600 users (one lookup of 512 and one of 128, padded),
    // every second one with state.
    let users: Vec<String> = (0..600).map(|i| format!("user-{i}")).collect();
    for u in users.iter().step_by(2) {
        w.append(&ev(u, 3, SHOWN, 900, 1)).unwrap();
    }
    w.commit().unwrap();
    store.flush().unwrap();
    let refs: Vec<&str> = users.iter().map(String::as_str).collect();
    let rows = store.with_backend(|b| b.popup_users(&refs).unwrap());
    assert_eq!(rows.len(), 300, "padding repeats a user, never a row");
    let mut ids = Vec::new();
    store.with_backend(|b| b.popup_user_ids(&mut |u| ids.push(u.to_string())).unwrap());
    ids.sort();
    let mut want: Vec<String> = users.iter().step_by(2).cloned().collect();
    want.extend(["alice", "bob", odd].map(String::from));
    want.sort();
    assert_eq!(ids, want, "each user with state once");
    assert!(rows
        .iter()
        .all(|(u, p, r)| u[5..].parse::<u32>().unwrap() % 2 == 0
            && *p == 3
            && r.next_eligible == 900));

    // The store lays the queue's newer state over the database's.
    w.append(&ev("alice", 1, SHOWN, 7_000, 2)).unwrap();
    w.append(&ev("carol", 4, SHOWN, 8_000, 1)).unwrap();
    w.commit().unwrap();
    let got = store.popup_users(&["alice", "carol", "nobody"]).unwrap();
    assert_eq!(
        got["alice"],
        vec![(
            1,
            PopupUserRow {
                next_eligible: 7_000,
                shows: 2,
                last_action: SHOWN,
                updated_at: at,
                // The show Alice's click above answered, kept under the newer show.
                clicked_show: at - 1,
                closed_show: 0,
            }
        )]
    );
    assert_eq!(got["carol"][0].1.next_eligible, 8_000);
    assert!(!got.contains_key("nobody"));
    assert_eq!(
        store.popup_daily(day).unwrap()[&1],
        3,
        "database 2 + queued 1"
    );
    assert_eq!(store.popup_event_counts().unwrap()[&(4, SHOWN)], 1);
}

fn script_rows_and_counters_are_written_and_read_back(d: Dialect) {
    let db = test_db(d, "lua");
    let cfg = db.store_config();
    let (store, _) = Store::open(&cfg, &SERVICES).unwrap();
    // Keys and rows with quotes and non-ASCII text, which no statement may choke on.
    let odd = "o'brien \"ü\" 🙂";
    let row = |data: String, at| LuaChange::Row {
        table: "checkins".into(),
        at,
        data: data.into(),
    };
    let add = |key: &str, delta| LuaChange::Add {
        table: "places".into(),
        key: key.into(),
        column: "visits".into(),
        delta,
        at: 7,
    };
    let big = format!("{{\"note\":\"{}\"}}", "x".repeat(60_000));
    let mut w = store.writer(0);
    for c in [
        row(format!("{{\"user\":{odd:?}}}"), 5),
        add(odd, 2),
        add("cafe", 1),
        add("cafe", 3),
        add(odd, -1),
        row("{\"user\":\"alice\"}".into(), 6),
    ] {
        w.append(&c).unwrap();
    }
    w.commit().unwrap();
    store.flush().unwrap();
    for c in [add("cafe", 10), row(big.clone(), 9)] {
        w.append(&c).unwrap();
    }
    w.commit().unwrap();
    store.flush().unwrap();
    let mut b = backend::connect(&db.url, &db.dir).unwrap();
    assert_eq!(b.lua_counter("places", "cafe", "visits").unwrap(), Some(14));
    assert_eq!(b.lua_counter("places", odd, "visits").unwrap(), Some(1));
    assert_eq!(b.lua_counter("places", "cafe", "other").unwrap(), None);
    let rows = b.lua_rows("checkins", 10).unwrap();
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[0], (5, format!("{{\"user\":{odd:?}}}")));
    assert_eq!(rows[1].1, "{\"user\":\"alice\"}");
    assert_eq!(rows[2], (9, big));
    assert!(b.lua_rows("other", 10).unwrap().is_empty());
}

/// What no database may keep is refused alike on every backend, and only that row: a counter
/// whose sum leaves the 64-bit range (MariaDB's `ERROR 1690`, PostgreSQL's `22003`, SQLite's
/// checked `hp_add`, where `+` would silently store a REAL), a text too long for its column,
/// and a text with a NUL byte. Each is set aside in `refused.jsonl`; the other rows of the same
/// flushes are written, and so is what comes after.
fn values_no_database_can_keep_are_refused_alike(d: Dialect) {
    let db = test_db(d, "unkeepable");
    let cfg = db.store_config();
    let (store, _) = Store::open(&cfg, &SERVICES).unwrap();
    let add = |key: &str, delta| LuaChange::Add {
        table: "places".into(),
        key: key.into(),
        column: "visits".into(),
        delta,
        at: 7,
    };
    let mut w = store.writer(0);
    for c in [add("full", i64::MAX), add("ok", 1)] {
        w.append(&c).unwrap();
    }
    w.commit().unwrap();
    store.flush().unwrap();
    for c in [add("full", 1), add("nul\0key", 1), add("ok", 2)] {
        w.append(&c).unwrap();
    }
    w.commit().unwrap();
    store.flush().unwrap();
    assert_eq!(store.metrics().refused_rows.get(), 2);
    assert_eq!(store.queued_rows(), 0);
    let mut b = backend::connect(&db.url, &db.dir).unwrap();
    assert_eq!(
        b.lua_counter("places", "full", "visits").unwrap(),
        Some(i64::MAX)
    );
    assert_eq!(b.lua_counter("places", "ok", "visits").unwrap(), Some(3));
    let file = refused::path(&db.dir.join("data"));
    let (entries, junk) = refused::read(&file).unwrap();
    assert!(junk.is_empty());
    let why = |key: &str| {
        let e = entries
            .iter()
            .find(|e| e.row["k"] == key)
            .unwrap_or_else(|| panic!("{key:?} set aside: {entries:?}"));
        e.error.clone()
    };
    let overflow = match d {
        Dialect::Postgres => "22003",
        Dialect::Mysql => "1690",
        Dialect::Sqlite => "integer out of range",
    };
    let e = why("full");
    assert!(e.contains(overflow), "{e}");
    let e = why("nul\0key");
    assert!(e.contains("NUL"), "{e}");
    assert_eq!(entries.len(), 2);
    // A text too long for its column (the journal's codec cuts a script's key at 255
    // bytes, so it comes here in a batch made by hand, as a site's or an older build's row
    // would): refused by the store on every backend, as MySQL would refuse it.
    let long = "k".repeat(256);
    let mut rows = Rows::new(&hotpath_lua::stored::LUA_COUNTERS);
    for key in [long.as_str(), "ok"] {
        rows.push([
            "places".into(),
            key.into(),
            "visits".into(),
            Value::Int(1),
            Value::Int(8),
        ]);
    }
    let mut batch = Batch::default();
    batch.push(rows);
    let (written, aside) = store
        .with_backend(|b| refused::write(b, &file, "test", &mut batch, 1 << 20))
        .unwrap();
    assert_eq!((written.rows, aside.kept), (1, 1));
    let (entries, _) = refused::read(&file).unwrap();
    let e = &entries.last().unwrap().error;
    assert!(
        e.contains("hp_lua_counters.k: too long (256 bytes; the column holds at most 255)"),
        "{e}"
    );
    assert_eq!(b.lua_counter("places", "ok", "visits").unwrap(), Some(4));
    // Later changes are written as ever.
    w.append(&add("ok", 4)).unwrap();
    w.commit().unwrap();
    store.flush().unwrap();
    assert_eq!(b.lua_counter("places", "ok", "visits").unwrap(), Some(8));
}

/// Ids that differ in any byte are different rows on every backend: popup users `Bob`,
/// `bob`, `bob ` and `böb` have four states with four cooldowns (MariaDB's default collation
/// once made them one, so one user's cooldown was another's), and so do script keys.
fn text_keys_compare_byte_for_byte(d: Dialect) {
    let db = test_db(d, "exact");
    let cfg = db.store_config();
    let (store, _) = Store::open(&cfg, &SERVICES).unwrap();
    let ids = ["Bob", "bob", "bob ", "böb"];
    let mut w = store.writer(0);
    for (i, user) in ids.into_iter().enumerate() {
        let mut c = shown(user, 100);
        c.next_eligible = 1000 + i as u64;
        w.append(&c).unwrap();
        w.append(&LuaChange::Add {
            table: "t".into(),
            key: user.into(),
            column: "c".into(),
            delta: 1 + i as i64,
            at: 7,
        })
        .unwrap();
    }
    w.commit().unwrap();
    store.flush().unwrap();
    let users = store.popup_users(&ids).unwrap();
    assert_eq!(users.len(), 4, "{users:?}");
    let mut b = backend::connect(&db.url, &db.dir).unwrap();
    for (i, user) in ids.into_iter().enumerate() {
        let (_, _, row) = b
            .popup_users(&[user])
            .unwrap()
            .into_iter()
            .find(|(u, ..)| u == user)
            .unwrap_or_else(|| panic!("{user:?} kept"));
        assert_eq!(row.next_eligible, 1000 + i as u64, "{user:?}");
        assert_eq!(
            b.lua_counter("t", user, "c").unwrap(),
            Some(1 + i as i64),
            "{user:?}"
        );
    }
}

/// A second store on the same database waits for the first one's writer lock: it reads the
/// journal positions only once the first one's connection (and whatever it was committing)
/// is gone.
fn a_second_writer_waits_for_the_first(d: Dialect) {
    let db = test_db(d, "writer");
    let cfg = db.store_config();
    let (first, _) = Store::open(&cfg, &SERVICES).unwrap();
    let mut other = cfg.clone();
    other.data_dir = db.dir.join("other").display().to_string();
    let opened = Arc::new(AtomicBool::new(false));
    let flag = opened.clone();
    let second = std::thread::spawn(move || {
        let store = Store::open(&other, &SERVICES).map(|(s, _)| s);
        flag.store(true, Ordering::SeqCst);
        store
    });
    std::thread::sleep(Duration::from_millis(600));
    assert!(!opened.load(Ordering::SeqCst), "the second store waited");
    drop(first);
    let second = second.join().unwrap();
    assert!(second.is_ok(), "{:?}", second.err());
}

/// A popup change of `user`.
fn shown(user: &str, at: u32) -> PopupChange {
    PopupChange {
        user: user.into(),
        popup: 1,
        action: SHOWN,
        next_eligible: 0,
        shows: 1,
        at,
        answers: 0,
    }
}

/// A row the database refuses, and how to make it take such rows again: PostgreSQL refuses a
/// NUL byte in text; SQLite and MariaDB refuse what a site's trigger or CHECK refuses.
fn refusal(d: Dialect, b: &mut dyn Backend) -> (&'static str, Option<&'static str>) {
    match d {
        Dialect::Postgres => ("nul\0byte", None),
        Dialect::Sqlite => {
            for t in ["hp_popup_users", "hp_popup_events"] {
                b.execute(&format!(
                    "CREATE TRIGGER refuse_{t} BEFORE INSERT ON {t} WHEN NEW.user_id = 'poison' \
                     BEGIN SELECT RAISE(ABORT, 'no poison here'); END"
                ))
                .unwrap();
            }
            (
                "poison",
                Some("DROP TRIGGER refuse_hp_popup_users; DROP TRIGGER refuse_hp_popup_events"),
            )
        }
        Dialect::Mysql => {
            for t in ["hp_popup_users", "hp_popup_events"] {
                b.execute(&format!(
                    "ALTER TABLE {t} ADD CONSTRAINT refuse_{t} CHECK (user_id <> 'poison')"
                ))
                .unwrap();
            }
            (
                "poison",
                Some("ALTER TABLE hp_popup_users DROP CONSTRAINT refuse_hp_popup_users"),
            )
        }
    }
}

fn a_refused_row_is_set_aside_and_the_rest_written(d: Dialect) {
    let db = test_db(d, "refused");
    let cfg = db.store_config();
    let (store, _) = Store::open(&cfg, &SERVICES).unwrap();
    let (bad, fix) = store.with_backend(|b| refusal(d, b));
    let mut w = store.writer(0);
    for (i, user) in ["a", bad, "c"].into_iter().enumerate() {
        w.append(&shown(user, 100 + i as u32)).unwrap();
        w.append(&done(key(i as u32), 100)).unwrap();
        w.commit().unwrap();
    }
    // The refused rows are found and set aside, the rest written with the journal position.
    assert_eq!(store.flush().unwrap(), 3 + 2 + 2 + 1);
    assert_eq!(store.metrics().refused_rows.get(), 2);
    assert_eq!(store.queued_rows(), 0);
    let users = store.popup_users(&["a", "c"]).unwrap();
    assert!(users.contains_key("a") && users.contains_key("c"));
    assert_eq!(store.with_backend(|b| stored(b)).len(), 3);
    assert!(store
        .with_backend(|b| b.journal_positions())
        .unwrap()
        .contains(&(0, 3)));
    let file = refused::path(&db.dir.join("data"));
    let (entries, junk) = refused::read(&file).unwrap();
    assert!(junk.is_empty());
    let tables: Vec<&str> = entries.iter().map(|e| e.table.as_str()).collect();
    assert_eq!(tables, ["hp_popup_users", "hp_popup_events"]);
    for e in &entries {
        assert_eq!(e.row["user_id"], bad);
        // The database's own reason, not "db error" (a NUL byte is refused by the store
        // before PostgreSQL sees it, as SQLite and MySQL would keep it).
        let why = match d {
            Dialect::Postgres => "contains a NUL byte",
            Dialect::Sqlite => "no poison here",
            Dialect::Mysql => "4025",
        };
        assert!(e.error.contains(why), "{}", e.error);
    }
    // Later changes are written as ever.
    w.append(&shown("d", 200)).unwrap();
    w.commit().unwrap();
    assert_eq!(store.flush().unwrap(), 3);
    drop(w);
    // Replayed once the cause is gone (a constraint dropped, or, for a value no database can
    // take, the value edited in the file): what is still refused goes back to the file.
    match fix {
        Some(fix) => store.with_backend(|b| b.execute(fix)).unwrap(),
        None => {
            let text = std::fs::read_to_string(&file).unwrap();
            std::fs::write(&file, text.replace("\\u0000", "_")).unwrap();
        }
    }
    let bad = if fix.is_none() { "nul_byte" } else { bad };
    let replay = || {
        store
            .with_backend(|b| {
                refused::replay(
                    b,
                    &hotpath_store::queue::tables(&SERVICES),
                    &db.dir.join("data"),
                    "test",
                )
            })
            .unwrap()
    };
    let r = replay();
    let again = usize::from(d == Dialect::Mysql);
    assert_eq!((r.entries, r.written, r.refused), (2, 2 - again, again));
    assert!(store.popup_users(&[bad]).unwrap().contains_key(bad));
    let (left, _) = refused::read(&file).unwrap();
    assert_eq!(left.len(), again);
    // A second replay finds nothing to do twice.
    let r = replay();
    assert_eq!(r.written, 0);
    let events = store.popup_event_counts().unwrap();
    assert_eq!(events.get(&(1, SHOWN)), Some(&(4 - again as u64)));
}

/// A server database down at start: the store opens on its journal, numbers past anything the
/// database may hold, refuses reads, and once the database answers replays the records it
/// lacked (only those: this run's are queued already), hands the hooks what a normal open
/// would have, and writes everything exactly once. A second start while it is down again
/// numbers past both runs' records.
fn a_store_opened_without_its_database_catches_up_once_it_answers(d: Dialect) {
    let db = test_db(d, "offline");
    let mut cfg = db.store_config();
    cfg.flush_interval_ms = 20;
    cfg.retry_max_ms = 100;
    let unreachable = |cfg: &StoreConfig, times: u32| {
        let flaky = Flaky {
            inner: backend::connect(&db.url, &db.dir).unwrap(),
            fail: 0,
            unreachable: times,
        };
        Store::open_with(cfg, &SERVICES, Box::new(flaky))
    };
    if d == Dialect::Sqlite {
        // A local file has no outage to wait out: a failure to open it stops the start.
        let e = unreachable(&cfg, 1)
            .err()
            .expect("SQLite never starts offline");
        assert!(e.to_string().contains("connection refused"), "{e}");
        return;
    }
    // Acknowledged, but the database never got it: 3 completions of key 1.
    {
        let (store, _) = Store::open(&cfg, &SERVICES).unwrap();
        let mut w = store.writer(0);
        for at in 0..3 {
            w.append(&done(key(1), at)).unwrap();
            w.commit().unwrap();
        }
        std::mem::forget(w);
    }
    // Down at start (and the old behaviour on request).
    let mut strict = cfg.clone();
    strict.require_db_at_start = true;
    let e = unreachable(&strict, 1)
        .err()
        .expect("refused with require_db_at_start");
    assert!(e.to_string().contains("connection refused"), "{e}");
    let (store, restored) = unreachable(&cfg, 1).unwrap();
    assert!(!store.online());
    assert_eq!((restored.replayed, restored.rows), (0, 0));
    assert!(store.with_replay(completed).is_empty());
    let e = store.read(|b| b.access_list()).unwrap_err();
    assert!(e.to_string().contains("not reached since start"), "{e}");
    assert!(store.popup_users(&["u"]).is_err() && store.connect().is_err());
    let mut w = store.writer(0);
    for at in 0..2 {
        w.append(&done(key(1), 10 + at)).unwrap();
        w.append(&done(key(2), 10 + at)).unwrap();
        w.commit().unwrap();
    }
    // Killed again before the database came back: its records join the journal.
    std::mem::forget(w);
    drop(store);
    // A clock set back below the last deleted segment: the floor file still numbers past it.
    let journal = hotpath_store::journal_dir(&cfg.data_dir);
    let ahead = 5_000_000_000_000_000u64;
    hotpath_store::journal::write_floor(&journal, &[(0, ahead)].into_iter().collect()).unwrap();
    let (store, _) = unreachable(&cfg, 3).unwrap();
    let got = Arc::new(std::sync::Mutex::new(None));
    let hook_got = got.clone();
    store.on_connect(Box::new(move |s| {
        // Online, and free to read as any service does.
        assert!(s.online() && s.read(|b| b.access_list()).is_ok());
        *hook_got.lock().unwrap() = Some(s.with_replay(completed));
    }));
    let mut w = store.writer(0);
    w.append(&done(key(2), 20)).unwrap();
    w.commit().unwrap();
    let (store, stop, flusher) = with_flusher(store);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while store.metrics().changes.get() < 8 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(store.online());
    // What the database and the earlier runs' journal held: not this run's completion.
    let hooked = got.lock().unwrap().take();
    assert_eq!(hooked, Some(vec![(key(1), 5), (key(2), 2)]));
    assert_eq!(store.metrics().replayed.get(), 5);
    stop.store(true, Ordering::Release);
    drop(w);
    flusher.join().unwrap();
    let rows = store.with_backend(|b| stored(b));
    let counts: Vec<u64> = rows.iter().map(|r| r.1.completed).collect();
    assert_eq!(counts, vec![5, 3]);
    assert_eq!(store.journal_bytes(), 0);
    drop(store);
    // Nothing is replayed twice, and the numbering goes on past the clock's.
    let (store, restored) = Store::open(&cfg, &SERVICES).unwrap();
    assert_eq!(restored.replayed, 0);
    let positions = store.with_backend(|b| b.journal_positions()).unwrap();
    assert_eq!(positions, vec![(0, ahead + 1)]);
    // The last segment's deletion raised the floor to it.
    let floor = hotpath_store::journal::read_floor(&journal).unwrap();
    assert_eq!(floor.get(&0), Some(&(ahead + 1)));
}

macro_rules! suite {
    ($($name:ident),* $(,)?) => {
        mod sqlite { use super::*; $( #[test] fn $name() { super::$name(Dialect::Sqlite) } )* }
        mod postgres { use super::*; $( #[test] fn $name() { super::$name(Dialect::Postgres) } )* }
        mod mysql { use super::*; $( #[test] fn $name() { super::$name(Dialect::Mysql) } )* }
    };
}

suite!(
    migrations_apply_once_and_report_status,
    upserts_add_counts_replace_snapshots_and_keep_first_seen,
    idle_torrents_without_downloads_are_forgotten,
    idle_popup_users_and_old_events_are_forgotten,
    big_batches_split_under_the_parameter_limit,
    wide_batches_split_under_the_parameter_limit,
    errors_say_whether_a_retry_can_help,
    access_list_rows_are_read,
    queries_return_typed_values_whatever_the_rows_hold,
    journaled_changes_survive_a_crash_exactly_once,
    the_flusher_writes_on_time_and_drains_at_stop,
    failed_batches_are_merged_back_and_retried,
    a_failed_batch_is_read_and_written_under_newer_changes,
    a_full_journal_refuses_changes,
    popup_state_events_and_daily_counts_are_written_and_read_back,
    script_rows_and_counters_are_written_and_read_back,
    a_second_writer_waits_for_the_first,
    a_refused_row_is_set_aside_and_the_rest_written,
    values_no_database_can_keep_are_refused_alike,
    text_keys_compare_byte_for_byte,
    a_store_opened_without_its_database_catches_up_once_it_answers,
);

#[test]
fn one_data_dir_serves_one_process() {
    let db = test_db(Dialect::Sqlite, "lock");
    let cfg = db.store_config();
    let (first, _) = Store::open(&cfg, &SERVICES).unwrap();
    let e = Store::open(&cfg, &SERVICES)
        .err()
        .expect("a second store on one data_dir is refused");
    assert!(e.to_string().contains("another hotpath process"), "{e}");
    drop(first);
    Store::open(&cfg, &SERVICES).unwrap();
}

#[test]
fn the_syncer_fsyncs_the_journal_off_the_writers_thread() {
    let db = test_db(Dialect::Sqlite, "sync");
    let mut cfg = db.store_config();
    cfg.journal_fsync_ms = 50;
    cfg.flush_interval_ms = 600_000;
    let (store, stop, flusher) = with_flusher(Store::open(&cfg, &SERVICES).unwrap().0);
    let mut w = store.writer(0);
    w.append(&done(key(1), 1)).unwrap();
    w.commit().unwrap();
    assert_eq!(
        store.metrics().journal_syncs.get(),
        0,
        "the writer did not fsync"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while store.metrics().journal_syncs.get() == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(store.metrics().journal_syncs.get(), 1);
    stop.store(true, Ordering::Release);
    drop(w);
    flusher.join().unwrap();
}
