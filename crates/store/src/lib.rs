//! hotpath's write-behind store: the only place that talks to databases.
//!
//! Requests change memory and hand [`Change`]s to their worker's [`JournalWriter`]; the
//! server commits each worker's journal with one write per event-loop batch, before any answer
//! of that batch is sent, and the changes are merged per key into one queue. The flusher
//! thread ([`Store::run_flusher`]) writes the queue every `store.flush_interval_ms` (or when
//! `store.batch_rows` keys wait) as multi-row upserts in one transaction, together with each
//! journal's position, then deletes journal segments the database has confirmed. A failed
//! write is kept (the carry: the next flush merges newer rows over it) and retried with
//! jittered backoff, never dropped, unless the database
//! refused rows for their values ([`Fault::Refused`]): those are set aside in
//! `data_dir/refused.jsonl` and the rest written ([`refused`]); a database outage
//! only grows the journal, up to `store.journal_max_bytes`, beyond which [`JournalWriter::append`]
//! refuses (and the caller refuses its request). At start, journal records the database lacks
//! are replayed ([`Store::open`]); at shutdown the queue is drained.
//!
//! What can be lost: nothing acknowledged when hotpath is killed (the journal is written
//! before the answer); on a power loss, up to `store.journal_fsync_ms` of acknowledged changes
//! (0 makes every batch wait for fsync). Snapshots (seeders, leechers) are not journaled: a
//! crash loses at most the last interval of them.
//!
//! # Schema (version 4)
//! | table | columns | what |
//! |---|---|---|
//! | `hp_schema` | `version` PK, `name`, `applied_at` (unix s) | applied migrations |
//! | `hp_torrents` | `info_hash` (20 bytes) PK, `completed`, `seeders`, `leechers`, `first_seen`, `last_active` (unix s) | per torrent: downloads completed (added to, never overwritten), the last seeders/leechers snapshot, first and last activity |
//! | `hp_journal` | `worker` PK, `seq` | per journal, the last record the database holds (written in the same transaction as the rows): tracker workers count from 0, popup workers from 65536, Lua workers from 131072, and `hotpath db refused --replay` records itself under 2147483647 |
//! | `hp_access_list` | `info_hash` (20 bytes) PK, `note`, `added_at` | info hashes for the tracker's access list when its source is the database |
//! | `hp_popups` | `id` PK, `definition` (the popup's JSON), `updated_at` | popup configurations |
//! | `hp_popup_users` | (`user_id`, `popup_id`) PK, `next_eligible` (unix s; `i64::MAX` = never), `shows`, `last_action` (1 shown, 2 click, 3 close), `updated_at` | each user's state per popup, absolute (the newest write wins) |
//! | `hp_popup_events` | `id` PK (auto), `at`, `user_id`, `popup_id`, `action` | the append-only log of shows, clicks and closes |
//! | `hp_popup_daily` | (`popup_id`, `day` = unix s / 86400) PK, `shows` | shows per popup per UTC day (added to), for daily caps |
//! | `hp_lua_rows` | `id` PK (auto), `tbl`, `at` (unix s), `data` (JSON text); index (`tbl`, `at`) | rows scripts append with `hp.store.enqueue` |
//! | `hp_lua_counters` | (`tbl`, `k`, `col`) PK, `value`, `updated_at` | counters scripts add to with `hp.store.add` (added to, never overwritten) |
//!
//! Binary keys are BLOB (SQLite), BYTEA (PostgreSQL), BINARY(20) (MySQL); counts and times
//! are 64-bit integers.
//!
//! Owns: the journal ([`journal`]), the merge queue ([`merge`]), table declarations and rows
//! ([`table`], [`batch`]), the flusher, migrations ([`migrations`]) and the backends
//! ([`backend`]). Must not: be called synchronously from a
//! request handler (only [`JournalWriter`] is, and it never touches a database).

pub mod backend;
pub mod batch;
pub mod journal;
pub mod merge;
pub mod migrations;
pub mod refused;
pub mod table;
#[cfg(feature = "testing")]
pub mod testing;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::{Condvar, Mutex};

use hotpath_config::StoreConfig;

pub use backend::{Backend, Dialect, StoredTorrent};
pub use journal::{JournalWriter, Refused};
pub use merge::{
    Batch, Change, Key, PopupUserRow, CLICK, CLOSE, MAX_NAME_LEN, MAX_ROW_LEN, MAX_USER_LEN, SHOWN,
};

use journal::Segment;
use merge::Pending;

/// Store errors, by layer; [`StoreError::retryable`] says whether trying again may help.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// `store.url` cannot be used.
    #[error("store.url {url:?}: {why}")]
    Url {
        /// The URL, password hidden.
        url: String,
        /// What is wrong.
        why: String,
    },
    /// The database refused or failed.
    #[error("{backend}: {what}")]
    Db {
        /// Which backend.
        backend: &'static str,
        /// What happened: the database's own message and code.
        what: String,
        /// What the error means for the write that met it.
        fault: Fault,
    },
    /// The journal could not be read or written.
    #[error("journal {path}: {source}")]
    Journal {
        /// The file or directory.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The database schema does not fit this build.
    #[error("schema: {0}")]
    Schema(String),
    /// The store started without its database and has not reached it yet: reads wait until
    /// it has, and the journal's records it lacks are replayed (see [`Store::open`]).
    #[error("{name} not reached since start (the journal keeps every change meanwhile): {why}")]
    Offline {
        /// The database, for the message.
        name: String,
        /// The last attempt's error.
        why: String,
    },
}

impl StoreError {
    /// Whether trying again may help (a lost connection, a timeout, a deadlock).
    pub fn retryable(&self) -> bool {
        match self {
            StoreError::Db { fault, .. } => *fault == Fault::Transient,
            StoreError::Journal { .. } | StoreError::Offline { .. } => true,
            StoreError::Url { .. } | StoreError::Schema(_) => false,
        }
    }

    /// What a database error means for the write that met it; `None` for other errors.
    pub fn fault(&self) -> Option<Fault> {
        match self {
            StoreError::Db { fault, .. } => Some(*fault),
            _ => None,
        }
    }
}

/// What a database error means for the write that met it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// A lost connection, a timeout, a deadlock, a full disk: the same write may pass later.
    Transient,
    /// The database refused a value of the write (a NUL byte in text, a string too long for
    /// its column, a constraint): no retry can pass, but the other rows can. The flusher
    /// finds the rows and sets them aside (see [`dead_letter`]).
    Refused,
    /// The schema, the SQL, the credentials: a person must act. The flusher keeps the batch
    /// and retries with backoff, never dropping it.
    Setup,
}

fn journal_error(path: &Path, source: std::io::Error) -> StoreError {
    StoreError::Journal {
        path: path.display().to_string(),
        source,
    }
}

/// Why a string cannot be kept as text by every database the store writes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unstorable {
    /// Longer than the column.
    TooLong,
    /// A NUL byte: PostgreSQL refuses it in `TEXT`, and the whole batch with it would fail.
    Nul,
}

impl Unstorable {
    /// The reason, for a message that names the field first.
    pub fn message(self) -> &'static str {
        match self {
            Unstorable::TooLong => "too long",
            Unstorable::Nul => "contains a NUL byte, which a database cannot keep as text",
        }
    }
}

/// Why `text` cannot be kept as text by every database the store writes to, if it cannot
/// (more than `max_bytes` bytes, or a NUL byte). Callers check what a client sends against it
/// on the way in, so no change the database would refuse is journaled; what slips through
/// anyway is set aside by the flusher ([`refused`]).
pub fn unstorable(text: &str, max_bytes: usize) -> Option<Unstorable> {
    if text.len() > max_bytes {
        Some(Unstorable::TooLong)
    } else if text.as_bytes().contains(&0) {
        Some(Unstorable::Nul)
    } else {
        None
    }
}

/// The journal's directory under `store.data_dir`.
pub fn journal_dir(data_dir: &str) -> PathBuf {
    Path::new(data_dir).join("journal")
}

/// Unix seconds now.
pub fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// A counter.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds `n`.
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    /// Sets the value (for gauges).
    pub fn set(&self, n: u64) {
        self.0.store(n, Ordering::Relaxed);
    }

    /// Raises the value to `n` if it is lower.
    pub fn max(&self, n: u64) {
        self.0.fetch_max(n, Ordering::Relaxed);
    }

    /// The value.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// The store's own figures.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Journal records written.
    pub journal_records: Counter,
    /// Journal bytes written.
    pub journal_written: Counter,
    /// Journal fsyncs.
    pub journal_syncs: Counter,
    /// Journal writes that failed.
    pub journal_errors: Counter,
    /// Changes refused because the journal was full.
    pub refused: Counter,
    /// Batches written.
    pub flushes: Counter,
    /// Batch writes that failed (each is retried).
    pub failures: Counter,
    /// Writes that were retries of a failed batch.
    pub retries: Counter,
    /// Rows written.
    pub rows: Counter,
    /// Upsert statements sent.
    pub statements: Counter,
    /// Changes written (before merging).
    pub changes: Counter,
    /// Rows in the last batch written.
    pub last_batch_rows: Counter,
    /// Most rows in one batch.
    pub max_batch_rows: Counter,
    /// Milliseconds from the oldest change of the last batch to its commit.
    pub last_lag_ms: Counter,
    /// Milliseconds the last batch's write took.
    pub last_write_ms: Counter,
    /// Journal records replayed at start.
    pub replayed: Counter,
    /// Damaged or incomplete journal records skipped at start.
    pub torn: Counter,
    /// Rows the database refused, set aside in `data_dir/refused.jsonl`.
    pub refused_rows: Counter,
    /// Rows the database refused while that file was at `store.refused_max_bytes`: dropped.
    pub refused_dropped: Counter,
}

/// The store's settings, from `[store]`.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where the journal lives.
    pub journal_dir: PathBuf,
    /// `store.journal_max_bytes`.
    pub journal_max_bytes: u64,
    /// `store.journal_segment_bytes`.
    pub journal_segment_bytes: u64,
    /// `store.journal_fsync_ms`.
    pub journal_fsync_ms: u64,
    /// `store.batch_rows`.
    pub batch_rows: usize,
    /// `store.flush_interval_ms`.
    pub flush_interval: Duration,
    /// `store.retry_max_ms`.
    pub retry_max: Duration,
    /// `store.shutdown_drain_secs`.
    pub drain: Duration,
    /// `store.max_queue_rows`.
    pub max_queue_rows: usize,
    /// `store.refused_max_bytes`.
    pub refused_max_bytes: u64,
}

impl Settings {
    fn from_config(cfg: &StoreConfig) -> Settings {
        Settings {
            journal_dir: journal_dir(&cfg.data_dir),
            journal_max_bytes: cfg.journal_max_bytes,
            journal_segment_bytes: cfg.journal_segment_bytes,
            journal_fsync_ms: cfg.journal_fsync_ms,
            batch_rows: cfg.batch_rows,
            flush_interval: Duration::from_millis(cfg.flush_interval_ms),
            retry_max: Duration::from_millis(cfg.retry_max_ms),
            drain: Duration::from_secs(cfg.shutdown_drain_secs),
            max_queue_rows: cfg.max_queue_rows,
            refused_max_bytes: cfg.refused_max_bytes,
        }
    }
}

/// What the writers and the flusher share.
pub(crate) struct Shared {
    pub(crate) settings: Settings,
    pub(crate) inner: Mutex<Inner>,
    /// Wakes the flusher early (a full batch, a writer closing).
    pub(crate) wake: Condvar,
    /// Bytes of journal segments on disk.
    pub(crate) journal_bytes: AtomicU64,
    /// Rows in memory: the queue's and the batch being written's (bounded by
    /// `store.max_queue_rows`).
    pub(crate) queue_rows: AtomicUsize,
    /// Rows of the batch being written.
    pub(crate) in_flight: AtomicUsize,
    /// Live [`JournalWriter`]s; shutdown drains after the last one closes.
    pub(crate) writers: AtomicUsize,
    /// Changes in memory but not in the journal (`Inner::held`), plus one while
    /// `Inner::gate` is set: while not 0, no answer goes out before a commit.
    pub(crate) unjournaled: AtomicUsize,
    /// Encoded bytes of `Inner::held` (counted against `store.journal_max_bytes`).
    pub(crate) held_bytes: AtomicU64,
    /// Taken by the writer that journals held changes, for its whole commit.
    pub(crate) held_writer: Arc<Mutex<()>>,
    pub(crate) metrics: Metrics,
}

impl Shared {
    /// Records that the queue holds `rows` (call under the inner lock).
    pub(crate) fn queued(&self, rows: usize) {
        let total = rows + self.in_flight.load(Ordering::Relaxed);
        self.queue_rows.store(total, Ordering::Relaxed);
    }
}

/// State behind the store's one lock: taken once per commit, never across I/O.
pub(crate) struct Inner {
    pub(crate) pending: Pending,
    pub(crate) segments: Vec<Segment>,
    /// When the oldest change still pending was merged.
    pub(crate) pending_since: Option<Instant>,
    /// Changes whose journal write failed and was cut off its file: applied to memory, not
    /// journaled, not queued. The next commit of any writer journals them first.
    pub(crate) held: Vec<Change>,
    /// A record whose write failed and could not be cut off its file, `(journal, sequence)`:
    /// queued under its sequence, and no answer goes out until the database holds it.
    pub(crate) gate: Option<(u32, u64)>,
}

/// The write-behind store.
pub struct Store {
    shared: Arc<Shared>,
    /// `data_dir/LOCK`, locked while this store is open: two processes on one journal
    /// would number records over each other.
    _lock: std::fs::File,
    /// The database, and what a failed write left to write again.
    db: Mutex<Db>,
    /// Per journal, the last sequence the database holds.
    confirmed: Mutex<HashMap<u32, u64>>,
    /// Per journal, the last sequence found on disk, in the floor file or in the database at
    /// start.
    last_seq: HashMap<u32, u64>,
    /// The least sequence any writer numbers past: 0 after a start with the database, the
    /// clock in microseconds after one without it (see [`Store::open`]).
    seq_floor: u64,
    /// Per journal, the floor file's sequences ([`journal::FLOOR_FILE`]).
    floor: Mutex<HashMap<u32, u64>>,
    /// The database holds the writer lock, its schema is current and the journal's records it
    /// lacked are in the queue. Until then (a start without it) reads are refused.
    online: AtomicBool,
    /// What a start without the database left to do once it is reached.
    late: Mutex<Option<Late>>,
    /// Why the database has not been reached yet (for refused reads).
    offline_why: Mutex<String>,
    /// The database, for logs.
    pub name: String,
    /// `store.url` and `store.data_dir`, for [`Store::connect`].
    url: String,
    data_dir: PathBuf,
}

/// The database connection and the batch a failed write left: rows older than the queue's,
/// written under them by the next flush. Behind one lock, so whoever holds it sees every
/// change in the database, here or in the queue, never in a batch on its way.
struct Db {
    backend: Box<dyn Backend>,
    carry: Batch,
}

/// Runs once a store that opened without its database reaches it, on the flusher's thread,
/// with what [`Store::open`] would have returned had the database been up.
pub type ConnectHook = Box<dyn FnOnce(&Restored) + Send>;

/// A start without the database: what the flusher does once it reaches it.
struct Late {
    /// `store.migrate`.
    migrate: bool,
    /// The journal's segments at start, and per journal the last sequence they hold: the
    /// records among them the database lacks are replayed once it is reached (later records
    /// are this run's, in the queue already).
    segments: Vec<(u32, PathBuf)>,
    upto: HashMap<u32, u64>,
    hooks: Vec<ConnectHook>,
}

/// What [`Store::open`] found.
#[derive(Debug, Default)]
pub struct Restored {
    /// Completed downloads per torrent: the database's plus those replayed from the journal.
    pub completed: Vec<(Key, u64)>,
    /// Journal records replayed.
    pub replayed: u64,
}

/// What a scan of the journal's segments found.
struct Scanned {
    /// The records chosen for replay, merged.
    pending: Pending,
    segments: Vec<Segment>,
    /// Per journal, the last valid sequence.
    last_seq: HashMap<u32, u64>,
    bytes: u64,
    /// Valid records read, and those replayed.
    records: u64,
    replayed: u64,
    torn: u64,
}

/// Reads the segment files `list`, merging into the queue the records `replay(journal,
/// sequence)` chooses (none without it). With `warn`, damaged tails and records this build
/// cannot read are logged.
fn scan_journal(
    list: &[(u32, PathBuf)],
    replay: Option<&dyn Fn(u32, u64) -> bool>,
    warn: bool,
) -> Result<Scanned, StoreError> {
    let mut out = Scanned {
        pending: Pending::default(),
        segments: Vec::new(),
        last_seq: HashMap::new(),
        bytes: 0,
        records: 0,
        replayed: 0,
        torn: 0,
    };
    for (w, path) in list {
        let w = *w;
        let mut undecodable = 0u64;
        let pending = &mut out.pending;
        let mut replayed = 0;
        let end = journal::scan(path, &mut |seq, payload| {
            if replay.is_some_and(|r| r(w, seq)) {
                if Change::decode_all(payload, &mut |c| pending.apply(c)).is_none() {
                    undecodable += 1;
                }
                pending.covered(w, seq);
                replayed += 1;
            }
        })
        .map_err(|e| journal_error(path, e))?;
        out.replayed += replayed;
        out.records += end.records;
        if end.torn() {
            out.torn += 1;
            if warn {
                log::warn!(
                    "journal {}: {} bytes after byte {} are an incomplete or damaged record \
                     (never acknowledged); skipped",
                    path.display(),
                    end.file_bytes - end.valid_bytes,
                    end.valid_bytes
                );
            }
        }
        if undecodable > 0 && warn {
            log::error!(
                "journal {}: {undecodable} records hold changes this build cannot read",
                path.display()
            );
        }
        let last = out.last_seq.entry(w).or_insert(0);
        *last = (*last).max(end.last_seq);
        out.bytes += end.file_bytes;
        out.segments.push(Segment {
            worker: w,
            path: path.clone(),
            last_seq: end.last_seq,
            bytes: end.file_bytes,
            open: false,
            unsynced: false,
        });
    }
    Ok(out)
}

/// Takes the database's writer lock, migrates it (or checks its schema) and reads the
/// journal positions it holds.
fn attach(backend: &mut dyn Backend, migrate: bool) -> Result<HashMap<u32, u64>, StoreError> {
    backend.claim_writer()?;
    if migrate {
        migrations::migrate(backend)?;
    } else {
        migrations::require_current(backend)?;
    }
    Ok(backend.journal_positions()?.into_iter().collect())
}

/// The completed counts per torrent: the database's plus the queue's.
fn completed_counts(
    backend: &mut dyn Backend,
    pending: &Pending,
) -> Result<Vec<(Key, u64)>, StoreError> {
    let mut completed: HashMap<Key, u64> = HashMap::new();
    backend.torrents(&mut |k, t| {
        if t.completed > 0 {
            completed.insert(k, t.completed);
        }
    })?;
    for (k, n) in pending.completed_rows() {
        *completed.entry(k).or_insert(0) += n;
    }
    Ok(completed.into_iter().collect())
}

/// Microseconds since the epoch: a start without the database numbers its records from
/// here. Every record ever numbered got a sequence below the clock's microseconds of its
/// time (a journal starts at or below them and writes far fewer than a million records a
/// second), so no record of this start can fall at or below a position the database holds,
/// even one written through another data_dir. The floor file covers a clock set back.
fn clock_floor() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

impl Store {
    /// Connects, migrates (or checks the schema), replays the journal records the database
    /// lacks into the queue, and reads back the completed counts.
    ///
    /// When a server database (PostgreSQL, MySQL) cannot be reached for a reason that may
    /// pass (refused, reset, timed out), and `store.require_db_at_start` is off, the store
    /// opens without it: writers journal as always (numbering past every sequence the
    /// database can hold, see [`clock_floor`]), reads are refused with
    /// [`StoreError::Offline`], and the flusher keeps trying; once it connects it migrates,
    /// replays what the database lacks and runs the [`ConnectHook`]s. SQLite, a local file,
    /// has no outage to wait out: a failure to open it stops the start.
    pub fn open(cfg: &StoreConfig) -> Result<(Store, Restored), StoreError> {
        let backend = backend::connect(&cfg.url, Path::new(&cfg.data_dir))?;
        Store::open_with(cfg, backend)
    }

    /// [`Store::open`] on a given backend (tests wrap one to inject failures).
    pub fn open_with(
        cfg: &StoreConfig,
        mut backend: Box<dyn Backend>,
    ) -> Result<(Store, Restored), StoreError> {
        let settings = Settings::from_config(cfg);
        let dir = settings.journal_dir.clone();
        std::fs::create_dir_all(&dir).map_err(|e| journal_error(&dir, e))?;
        let lock_path = Path::new(&cfg.data_dir).join("LOCK");
        let lock = std::fs::File::create(&lock_path).map_err(|e| journal_error(&lock_path, e))?;
        if let Err(e) = lock.try_lock() {
            let why = match e {
                std::fs::TryLockError::WouldBlock => std::io::Error::other(
                    "another hotpath process uses this store.data_dir; give each its own",
                ),
                std::fs::TryLockError::Error(e) => e,
            };
            return Err(journal_error(&lock_path, why));
        }
        let name = backend::display_name(&cfg.url, &cfg.data_dir);
        let floor = journal::read_floor(&dir).unwrap_or_else(|e| {
            log::warn!(
                "journal {}: {e}; ignored (a start without the database numbers from the clock)",
                dir.join(journal::FLOOR_FILE).display()
            );
            HashMap::new()
        });
        let list: Vec<(u32, PathBuf)> = journal::list_segments(&dir)
            .map_err(|e| journal_error(&dir, e))?
            .into_iter()
            .map(|(w, _, path)| (w, path))
            .collect();

        let attached = attach(&mut *backend, cfg.migrate);
        let (scan, confirmed, late, completed, seq_floor) = match attached {
            Ok(confirmed) => {
                let replay = |w: u32, seq: u64| seq > confirmed.get(&w).copied().unwrap_or(0);
                let scan = scan_journal(&list, Some(&replay), true)?;
                if scan.replayed > 0 {
                    log::info!(
                        "journal: {} records the database lacks were replayed ({} rows queued)",
                        scan.replayed,
                        scan.pending.rows()
                    );
                }
                let completed = completed_counts(&mut *backend, &scan.pending)?;
                (scan, confirmed, None, completed, 0)
            }
            Err(e)
                if !cfg.require_db_at_start
                    && e.retryable()
                    && backend.dialect() != Dialect::Sqlite =>
            {
                let scan = scan_journal(&list, None, true)?;
                log::warn!(
                    "{name}: cannot be reached ({e}); starting without it (store.require_db_at_start \
                     = false): changes are journaled, reads that need it are refused, and of the \
                     {} journal records on disk those it lacks are replayed once it answers",
                    scan.records
                );
                let late = Late {
                    migrate: cfg.migrate,
                    segments: list,
                    upto: scan.last_seq.clone(),
                    hooks: Vec::new(),
                };
                (
                    scan,
                    HashMap::new(),
                    Some((late, e)),
                    Vec::new(),
                    clock_floor(),
                )
            }
            Err(e) => return Err(e),
        };

        let mut last_seq = confirmed.clone();
        for (w, seq) in scan.last_seq.iter().chain(floor.iter()) {
            let last = last_seq.entry(*w).or_insert(0);
            *last = (*last).max(*seq);
        }
        let metrics = Metrics::default();
        metrics.replayed.set(scan.replayed);
        metrics.torn.set(scan.torn);
        let pending_since = (scan.pending.rows() > 0).then(Instant::now);
        let pending_rows = scan.pending.rows();
        let (late, offline_why) = match late {
            Some((late, e)) => (Some(late), e.to_string()),
            None => (None, String::new()),
        };
        let store = Store {
            _lock: lock,
            shared: Arc::new(Shared {
                settings,
                inner: Mutex::new(Inner {
                    pending: scan.pending,
                    segments: scan.segments,
                    pending_since,
                    held: Vec::new(),
                    gate: None,
                }),
                wake: Condvar::new(),
                journal_bytes: AtomicU64::new(scan.bytes),
                queue_rows: AtomicUsize::new(pending_rows),
                in_flight: AtomicUsize::new(0),
                writers: AtomicUsize::new(0),
                unjournaled: AtomicUsize::new(0),
                held_bytes: AtomicU64::new(0),
                held_writer: Arc::new(Mutex::new(())),
                metrics,
            }),
            db: Mutex::new(Db {
                backend,
                carry: Batch::default(),
            }),
            confirmed: Mutex::new(confirmed),
            last_seq,
            seq_floor,
            floor: Mutex::new(floor),
            online: AtomicBool::new(late.is_none()),
            late: Mutex::new(late),
            offline_why: Mutex::new(offline_why),
            name,
            url: cfg.url.clone(),
            data_dir: PathBuf::from(&cfg.data_dir),
        };
        store.prune();
        let replayed = scan.replayed;
        Ok((
            store,
            Restored {
                completed,
                replayed,
            },
        ))
    }

    /// Whether the database has been reached since start (always, unless the store opened
    /// without it and has not connected yet).
    pub fn online(&self) -> bool {
        self.online.load(Ordering::Acquire)
    }

    /// Runs `hook` once a store that opened without its database reaches it (see
    /// [`ConnectHook`]); never when it opened with it. Register before the flusher starts.
    pub fn on_connect(&self, hook: ConnectHook) {
        if let Some(late) = self.late.lock().as_mut() {
            late.hooks.push(hook);
        }
    }

    /// `Err(StoreError::Offline)` until the database has been reached since start.
    fn require_online(&self) -> Result<(), StoreError> {
        if self.online() {
            return Ok(());
        }
        Err(StoreError::Offline {
            name: self.name.clone(),
            why: self.offline_why.lock().clone(),
        })
    }

    /// After a start without the database: connects, takes the writer lock, migrates, merges
    /// the journal's records the database lacks into the queue (under what this run queued
    /// since: they are older), and runs the hooks. Only the flusher calls it (through
    /// [`Store::flush`]), so no batch is written before the replay.
    fn reach_database(&self) -> Result<(), StoreError> {
        let mut late_slot = self.late.lock();
        let Some(late) = late_slot.as_ref() else {
            return Ok(());
        };
        let mut db = self.db.lock();
        let confirmed = match attach(&mut *db.backend, late.migrate) {
            Ok(c) => c,
            Err(e) => {
                *self.offline_why.lock() = e.to_string();
                return Err(e);
            }
        };
        let replay = |w: u32, seq: u64| {
            seq > confirmed.get(&w).copied().unwrap_or(0)
                && seq <= late.upto.get(&w).copied().unwrap_or(0)
        };
        let scan = scan_journal(&late.segments, Some(&replay), false)?;
        let completed = completed_counts(&mut *db.backend, &scan.pending)?;
        let rows = scan.pending.rows();
        let mut older = scan.pending.into_batch();
        older.merge(std::mem::take(&mut db.carry));
        let carried = older.rows();
        db.carry = older;
        {
            let mut inner = self.shared.inner.lock();
            self.shared.in_flight.store(carried, Ordering::Relaxed);
            self.shared.queued(inner.pending.rows());
            if rows > 0 {
                inner.pending_since.get_or_insert_with(Instant::now);
            }
        }
        *self.confirmed.lock() = confirmed;
        self.shared.metrics.replayed.set(scan.replayed);
        self.online.store(true, Ordering::Release);
        let late = late_slot.take().expect("checked above");
        drop(db);
        drop(late_slot);
        log::info!(
            "{}: reached; {} journal records it lacked were replayed ({rows} rows queued)",
            self.name,
            scan.replayed
        );
        let restored = Restored {
            completed,
            replayed: scan.replayed,
        };
        for hook in late.hooks {
            hook(&restored);
        }
        Ok(())
    }

    /// The journal writer of worker `worker` (one per worker; its records continue the
    /// numbering of the same worker's earlier runs).
    pub fn writer(&self, worker: u32) -> JournalWriter {
        let last = self.last_seq.get(&worker).copied().unwrap_or(0);
        JournalWriter::new(self.shared.clone(), worker, last.max(self.seq_floor) + 1)
    }

    /// Queues changes that need no journal (snapshots a crash may lose).
    pub fn submit(&self, changes: &[Change]) {
        if changes.is_empty() {
            return;
        }
        let mut inner = self.shared.inner.lock();
        for c in changes {
            inner.pending.apply(c.clone());
        }
        self.shared.queued(inner.pending.rows());
        inner.pending_since.get_or_insert_with(Instant::now);
    }

    /// The store's figures.
    pub fn metrics(&self) -> &Metrics {
        &self.shared.metrics
    }

    /// Distinct rows waiting to be written (queued, kept after a failed write, or being
    /// written).
    pub fn queued_rows(&self) -> usize {
        let inner = self.shared.inner.lock();
        inner.pending.rows() + self.shared.in_flight.load(Ordering::Relaxed)
    }

    /// Bytes of journal on disk.
    pub fn journal_bytes(&self) -> u64 {
        self.shared.journal_bytes.load(Ordering::Relaxed)
    }

    /// Runs `f` on the backend, whether or not the database has been reached (tests and
    /// tools); waits for a flush in progress. Services read through [`Store::read`].
    pub fn with_backend<T>(&self, f: impl FnOnce(&mut dyn Backend) -> T) -> T {
        f(&mut *self.db.lock().backend)
    }

    /// Runs a read on the backend (the popup catalog, the access list); waits for a flush in
    /// progress. Refused with [`StoreError::Offline`] until the database has been reached
    /// since start: before the journal's replay, the database alone may be behind.
    pub fn read<T>(
        &self,
        f: impl FnOnce(&mut dyn Backend) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.require_online()?;
        f(&mut *self.db.lock().backend)
    }

    /// A connection of its own to the store's database, for long reads (a scan at start)
    /// that must not hold up flushes; refused as [`Store::read`] is.
    pub fn connect(&self) -> Result<Box<dyn Backend>, StoreError> {
        self.require_online()?;
        backend::connect(&self.url, &self.data_dir)
    }

    /// The users with popup state waiting in the queue (replayed from the journal, or not
    /// flushed yet). Read once no batch is on its way to the database (under the backend
    /// lock, see `flush`): a scan of the database started after this call then finds every
    /// user this list lacks. Without it, a batch taken from the queue before the call and
    /// committed after the scan's snapshot was in neither, and its users looked new.
    /// Refused as [`Store::read`] is.
    pub fn pending_popup_users(&self) -> Result<Vec<String>, StoreError> {
        self.require_online()?;
        let db = self.db.lock();
        let mut users: Vec<String> = self
            .shared
            .inner
            .lock()
            .pending
            .popup_user_names()
            .map(String::from)
            .collect();
        if let Some(rows) = db.carry.part(&merge::POPUP_USERS) {
            users.extend(rows.iter().map(|r| r[0].text().to_string()));
        }
        Ok(users)
    }

    /// The users' popup state, per user: the database's rows with the queue's newer ones laid
    /// over them. Read under the backend lock, so no batch is between the two (see `flush`).
    pub fn popup_users(
        &self,
        users: &[&str],
    ) -> Result<HashMap<String, Vec<(u32, PopupUserRow)>>, StoreError> {
        self.require_online()?;
        let mut db = self.db.lock();
        let mut out: HashMap<String, Vec<(u32, PopupUserRow)>> = HashMap::new();
        for (user, popup, row) in db.backend.popup_users(users)? {
            out.entry(user).or_default().push((popup, row));
        }
        let carried: Vec<(&str, u32, PopupUserRow)> = match db.carry.part(&merge::POPUP_USERS) {
            Some(rows) => rows.iter().map(PopupUserRow::from_row).collect(),
            None => Vec::new(),
        };
        let inner = self.shared.inner.lock();
        for user in users {
            // The carry's rows, then the queue's over them where they order later (as the
            // next flush merges them).
            let mut newest: Vec<(u32, PopupUserRow)> = carried
                .iter()
                .filter(|c| c.0 == *user)
                .map(|c| (c.1, c.2))
                .collect();
            for &(popup, row) in inner.pending.popup_user(user) {
                match newest.iter_mut().find(|(p, _)| *p == popup) {
                    Some((_, r)) if row.order() >= r.order() => *r = row,
                    Some(_) => {}
                    None => newest.push((popup, row)),
                }
            }
            for (popup, row) in newest {
                let rows = out.entry((*user).to_string()).or_default();
                match rows.iter_mut().find(|(p, _)| *p == popup) {
                    Some((_, r)) => *r = row,
                    None => rows.push((popup, row)),
                }
            }
        }
        Ok(out)
    }

    /// Shows per popup on UTC day `day`: the database's and the queue's.
    pub fn popup_daily(&self, day: u32) -> Result<HashMap<u32, u64>, StoreError> {
        self.require_online()?;
        let mut db = self.db.lock();
        let mut out: HashMap<u32, u64> = db.backend.popup_daily(day)?.into_iter().collect();
        let carried = db
            .carry
            .part(&merge::POPUP_DAILY)
            .into_iter()
            .flat_map(|r| r.iter());
        let carried = carried
            .filter(|r| r[1].int() == i64::from(day))
            .map(|r| (r[0].int() as u32, r[2].int() as u64));
        let inner = self.shared.inner.lock();
        for (popup, n) in carried.chain(inner.pending.popup_daily(day)) {
            *out.entry(popup).or_insert(0) += n;
        }
        Ok(out)
    }

    /// Events per `(popup, action)` over the whole log: the database's and the queue's.
    pub fn popup_event_counts(&self) -> Result<HashMap<(u32, u8), u64>, StoreError> {
        self.require_online()?;
        let mut db = self.db.lock();
        let mut out: HashMap<(u32, u8), u64> = db
            .backend
            .popup_event_counts()?
            .into_iter()
            .map(|(p, a, n)| ((p, a), n))
            .collect();
        let carried = db
            .carry
            .part(&merge::POPUP_EVENTS)
            .into_iter()
            .flat_map(|r| r.iter());
        let carried = carried.map(|e| (e[2].int() as u32, e[3].int() as u8));
        let inner = self.shared.inner.lock();
        for (popup, action) in carried.chain(inner.pending.popup_event_keys()) {
            *out.entry((popup, action)).or_insert(0) += 1;
        }
        Ok(out)
    }

    /// Writes what is queued now, in one transaction. `Ok(rows)` when written (0 when there
    /// was nothing); on an error the batch is back in the queue.
    pub fn flush(&self) -> Result<usize, StoreError> {
        if !self.online() {
            if let Err(e) = self.reach_database() {
                self.shared.metrics.failures.add(1);
                return Err(e);
            }
        }
        // The database first, then the queue: whoever holds the database (a reader of user
        // state) sees every change either in the database, in the carry or in the queue,
        // never in a batch on its way between them.
        let mut db = self.db.lock();
        let (pending, since) = {
            let mut inner = self.shared.inner.lock();
            self.shared
                .in_flight
                .store(inner.pending.rows() + db.carry.rows(), Ordering::Relaxed);
            self.shared.queued(0);
            let room = Pending::with_room_of(&inner.pending);
            (
                std::mem::replace(&mut inner.pending, room),
                inner.pending_since.take(),
            )
        };
        // What a failed write left is older than the queue: the queue's rows go over it.
        let mut batch = std::mem::take(&mut db.carry);
        batch.merge(pending.into_batch());
        if batch.is_empty() {
            self.shared.in_flight.store(0, Ordering::Relaxed);
            return Ok(0);
        }
        let m = &self.shared.metrics;
        let started = Instant::now();
        let file = refused::path(&self.data_dir);
        let bound = self.shared.settings.refused_max_bytes;
        match refused::write(&mut *db.backend, &file, &self.name, &mut batch, bound) {
            Ok((w, set_aside)) => {
                m.refused_rows.add(set_aside.kept as u64);
                m.refused_dropped.add(set_aside.dropped as u64);
                self.shared.in_flight.store(0, Ordering::Relaxed);
                self.shared.queued(self.shared.inner.lock().pending.rows());
                drop(db);
                let rows = batch.rows();
                m.flushes.add(1);
                m.rows.add(w.rows);
                m.statements.add(w.statements);
                m.changes.add(batch.changes);
                m.last_batch_rows.set(rows as u64);
                m.max_batch_rows.max(rows as u64);
                m.last_write_ms.set(started.elapsed().as_millis() as u64);
                if let Some(since) = since {
                    m.last_lag_ms.set(since.elapsed().as_millis() as u64);
                }
                {
                    let mut confirmed = self.confirmed.lock();
                    for &(j, s) in &batch.seqs {
                        let c = confirmed.entry(j).or_insert(0);
                        *c = (*c).max(s);
                    }
                    let mut inner = self.shared.inner.lock();
                    if let Some((j, s)) = inner.gate {
                        if confirmed.get(&j).is_some_and(|&c| c >= s) {
                            inner.gate = None;
                            self.shared.unjournaled.fetch_sub(1, Ordering::AcqRel);
                            log::info!(
                                "{}: holds the record whose journal write failed; answering again",
                                self.name
                            );
                        }
                    }
                }
                self.prune();
                Ok(rows)
            }
            Err(e) => {
                m.failures.add(1);
                // Kept before the database is free (see above), for the next flush.
                let mut inner = self.shared.inner.lock();
                self.shared.in_flight.store(batch.rows(), Ordering::Relaxed);
                db.carry = batch;
                self.shared.queued(inner.pending.rows());
                if let Some(since) = since {
                    inner.pending_since = Some(inner.pending_since.map_or(since, |s| s.min(since)));
                }
                Err(e)
            }
        }
    }

    /// Deletes closed journal segments whose every record the database holds.
    fn prune(&self) {
        let confirmed = self.confirmed.lock().clone();
        let doomed: Vec<Segment> = {
            let mut inner = self.shared.inner.lock();
            let (gone, kept) =
                std::mem::take(&mut inner.segments)
                    .into_iter()
                    .partition(|s: &Segment| {
                        !s.open && s.last_seq <= confirmed.get(&s.worker).copied().unwrap_or(0)
                    });
            inner.segments = kept;
            gone
        };
        if doomed.is_empty() {
            return;
        }
        // The floor first: once a segment is gone, a start without the database learns its
        // last sequence only from there.
        let mut floor = self.floor.lock();
        let mut raised = floor.clone();
        for s in doomed.iter().filter(|s| s.last_seq > 0) {
            let f = raised.entry(s.worker).or_insert(0);
            *f = (*f).max(s.last_seq);
        }
        if raised != *floor {
            if let Err(e) = journal::write_floor(&self.shared.settings.journal_dir, &raised) {
                log::error!(
                    "journal {}: cannot write the floor file, so confirmed segments are kept: {e}",
                    self.shared.settings.journal_dir.display()
                );
                self.shared.inner.lock().segments.extend(doomed);
                return;
            }
            *floor = raised;
        }
        drop(floor);
        for s in doomed {
            match std::fs::remove_file(&s.path) {
                Ok(()) => {
                    self.shared
                        .journal_bytes
                        .fetch_sub(s.bytes, Ordering::Relaxed);
                }
                Err(e) => log::warn!("journal {}: cannot delete: {e}", s.path.display()),
            }
        }
    }

    /// Fsyncs the journal segments written since the last call (the syncer's job, every
    /// `store.journal_fsync_ms`: an fsync can stall for milliseconds, so it never runs on a
    /// worker unless `store.journal_fsync_ms = 0` asks for it before every answer).
    pub fn sync_journal(&self) {
        let due: Vec<PathBuf> = {
            let mut inner = self.shared.inner.lock();
            inner
                .segments
                .iter_mut()
                .filter_map(|s| std::mem::take(&mut s.unsynced).then(|| s.path.clone()))
                .collect()
        };
        for path in due {
            // A segment deleted in the meantime was confirmed: nothing to keep.
            let synced = match std::fs::File::open(&path) {
                Ok(f) => f.sync_data(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => Err(e),
            };
            match synced {
                Ok(()) => self.shared.metrics.journal_syncs.add(1),
                Err(e) => {
                    self.shared.metrics.journal_errors.add(1);
                    log::error!("journal {}: fsync: {e}", path.display());
                }
            }
        }
    }

    /// The flusher: writes the queue every interval or when a batch fills, retries failures
    /// with jittered backoff, and, once `stop` is set and every journal writer has closed,
    /// drains the queue (bounded by `store.shutdown_drain_secs`). Beside it, on its own
    /// thread, the syncer fsyncs the journal every `store.journal_fsync_ms`.
    pub fn run_flusher(&self, stop: &AtomicBool) {
        let every = Duration::from_millis(self.shared.settings.journal_fsync_ms);
        let syncer_stop = AtomicBool::new(false);
        std::thread::scope(|scope| {
            if !every.is_zero() {
                let syncer_stop = &syncer_stop;
                std::thread::Builder::new()
                    .name("journal-sync".into())
                    .spawn_scoped(scope, move || {
                        let mut due = Instant::now() + every;
                        while !syncer_stop.load(Ordering::Acquire) {
                            std::thread::sleep(Duration::from_millis(20).min(every));
                            if Instant::now() >= due {
                                due = Instant::now() + every;
                                self.sync_journal();
                            }
                        }
                    })
                    .expect("spawn the journal syncer");
            }
            self.flush_loop(stop);
            syncer_stop.store(true, Ordering::Release);
        });
    }

    fn flush_loop(&self, stop: &AtomicBool) {
        let s = &self.shared;
        let mut failures = 0u32;
        let mut due = Instant::now() + s.settings.flush_interval;
        let mut warned_full = false;
        while !stop.load(Ordering::Acquire) {
            {
                let mut inner = s.inner.lock();
                while !stop.load(Ordering::Acquire)
                    && Instant::now() < due
                    && (failures > 0 || inner.pending.rows() < s.settings.batch_rows)
                {
                    let until = due.min(Instant::now() + Duration::from_millis(100));
                    s.wake.wait_until(&mut inner, until);
                }
            }
            if stop.load(Ordering::Acquire) {
                break;
            }
            warned_full = self.watch_journal(warned_full);
            if failures > 0 {
                s.metrics.retries.add(1);
            }
            match self.flush() {
                Ok(_) => {
                    if failures > 0 {
                        log::info!(
                            "{}: writing again after {failures} failed attempts",
                            self.name
                        );
                    }
                    failures = 0;
                    due = Instant::now() + s.settings.flush_interval;
                }
                Err(e) => {
                    failures += 1;
                    let pause = backoff(failures, s.settings.retry_max);
                    if failures == 1 || failures.is_multiple_of(10) {
                        if self.online() {
                            log::warn!(
                                "{}: write failed ({failures} in a row; kept, retry in {} ms): {e}",
                                self.name,
                                pause.as_millis()
                            );
                        } else {
                            log::warn!(
                                "{}: not reached yet ({failures} attempts; the journal keeps \
                                 every change; retry in {} ms): {e}",
                                self.name,
                                pause.as_millis()
                            );
                        }
                    }
                    due = Instant::now() + pause;
                }
            }
        }
        self.drain();
    }

    /// Warns once when the journal passes 80 % of its bound (again after it falls below 50 %).
    fn watch_journal(&self, warned: bool) -> bool {
        let used = self.journal_bytes();
        let max = self.shared.settings.journal_max_bytes;
        if !warned && used * 5 >= max * 4 {
            log::warn!(
                "journal holds {used} bytes, {}% of store.journal_max_bytes: the database is \
                 behind or down; at the limit, changes are refused",
                used * 100 / max
            );
            return true;
        }
        warned && used * 2 >= max
    }

    /// Waits for the journal writers to close, then writes everything queued, within
    /// `store.shutdown_drain_secs`; says what remains in the journal if time runs out.
    pub fn drain(&self) {
        let s = &self.shared;
        let deadline = Instant::now() + s.settings.drain;
        {
            let mut inner = s.inner.lock();
            while s.writers.load(Ordering::Acquire) > 0 && Instant::now() < deadline {
                let until = deadline.min(Instant::now() + Duration::from_millis(50));
                s.wake.wait_until(&mut inner, until);
            }
            // No writer is left to journal them: they reach the database from memory (they
            // were never acknowledged; a crash before this write loses them).
            let held = std::mem::take(&mut inner.held);
            if !held.is_empty() {
                log::warn!(
                    "shutdown: {} changes whose journal write failed are written from memory",
                    held.len()
                );
                s.unjournaled.fetch_sub(held.len(), Ordering::AcqRel);
                s.held_bytes.store(0, Ordering::Relaxed);
                for c in held {
                    inner.pending.apply(c);
                }
                inner.pending_since.get_or_insert_with(Instant::now);
            }
        }
        let mut failures = 0;
        loop {
            match self.flush() {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    failures += 1;
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        log::warn!("{}: last write failed: {e}", self.name);
                        break;
                    }
                    std::thread::sleep(backoff(failures, s.settings.retry_max).min(left));
                }
            }
        }
        // Segments the writers closed after the last write are confirmed too.
        self.prune();
        let rows = self.queued_rows();
        let segments = s.inner.lock().segments.len();
        if rows == 0 && segments == 0 {
            log::info!("{}: every change written; journal empty", self.name);
        } else {
            log::warn!(
                "shutdown: {rows} rows not written to {}; the journal keeps {} bytes in \
                 {segments} files, replayed at the next start",
                self.name,
                self.journal_bytes()
            );
        }
    }

    /// Appends the store's Prometheus metrics.
    pub fn write_metrics(&self, out: &mut String) {
        let m = &self.shared.metrics;
        let lag = self
            .shared
            .inner
            .lock()
            .pending_since
            .map_or(0.0, |t| t.elapsed().as_secs_f64());
        // Held changes, also those a writer has taken into a write still under way.
        let gated = usize::from(self.shared.inner.lock().gate.is_some());
        let held = self
            .shared
            .unjournaled
            .load(Ordering::Acquire)
            .saturating_sub(gated);
        let gauges: [(&str, &str, f64); 10] = [
            (
                "hotpath_store_database_reached",
                "1 once the database has been reached since start; 0 while a server started \
                 without it runs on its journal alone (reads that need it are refused).",
                f64::from(u8::from(self.online())),
            ),
            (
                "hotpath_store_journal_held_changes",
                "Changes whose journal write failed, in memory and waiting for the next journal \
                 write; while any wait, answers wait with them.",
                held as f64,
            ),
            (
                "hotpath_store_queue_rows",
                "Distinct rows waiting to be written.",
                self.queued_rows() as f64,
            ),
            (
                "hotpath_store_queue_limit_rows",
                "store.max_queue_rows: with this many rows in memory changes are refused.",
                self.shared.settings.max_queue_rows as f64,
            ),
            (
                "hotpath_store_flush_lag_seconds",
                "Age of the oldest change not yet written.",
                lag,
            ),
            (
                "hotpath_store_last_batch_rows",
                "Rows in the last batch written.",
                m.last_batch_rows.get() as f64,
            ),
            (
                "hotpath_store_max_batch_rows",
                "Most rows in one batch so far.",
                m.max_batch_rows.get() as f64,
            ),
            (
                "hotpath_store_last_write_seconds",
                "Time the last batch's transaction took.",
                m.last_write_ms.get() as f64 / 1e3,
            ),
            (
                "hotpath_store_journal_bytes",
                "Bytes of journal on disk (changes the database does not hold yet).",
                self.journal_bytes() as f64,
            ),
            (
                "hotpath_store_journal_limit_bytes",
                "store.journal_max_bytes: at this size changes are refused.",
                self.shared.settings.journal_max_bytes as f64,
            ),
        ];
        for (name, help, v) in gauges {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
        }
        let counters = [
            (
                "hotpath_store_flushes_total",
                "Batches written.",
                &m.flushes,
            ),
            (
                "hotpath_store_flush_failures_total",
                "Batch writes that failed, kept and retried (after a start without the database, also the attempts to reach it).",
                &m.failures,
            ),
            (
                "hotpath_store_retries_total",
                "Writes that retried a failed batch.",
                &m.retries,
            ),
            ("hotpath_store_rows_written_total", "Rows written.", &m.rows),
            (
                "hotpath_store_statements_total",
                "Upsert statements sent.",
                &m.statements,
            ),
            (
                "hotpath_store_changes_written_total",
                "Changes written, before merging per key.",
                &m.changes,
            ),
            (
                "hotpath_store_journal_records_total",
                "Journal records written.",
                &m.journal_records,
            ),
            (
                "hotpath_store_journal_written_bytes_total",
                "Journal bytes written.",
                &m.journal_written,
            ),
            (
                "hotpath_store_journal_syncs_total",
                "Journal fsyncs.",
                &m.journal_syncs,
            ),
            (
                "hotpath_store_journal_errors_total",
                "Journal writes that failed.",
                &m.journal_errors,
            ),
            (
                "hotpath_store_refused_total",
                "Changes refused because the journal was full.",
                &m.refused,
            ),
            (
                "hotpath_store_replayed_records_total",
                "Journal records replayed at start.",
                &m.replayed,
            ),
            (
                "hotpath_store_torn_records_total",
                "Damaged or incomplete journal records skipped at start.",
                &m.torn,
            ),
            (
                "hotpath_store_refused_rows_total",
                "Rows the database refused for their values, set aside in data_dir/refused.jsonl.",
                &m.refused_rows,
            ),
            (
                "hotpath_store_refused_dropped_rows_total",
                "Rows the database refused while data_dir/refused.jsonl was at \
                 store.refused_max_bytes: dropped, and logged.",
                &m.refused_dropped,
            ),
        ];
        for (name, help, c) in counters {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                c.get()
            );
        }
    }
}

/// The pause before retry `n` (1, 2, ...): 100 ms doubling up to `max`, each drawn between
/// half and all of that, so that many servers do not retry in step.
pub fn backoff(n: u32, max: Duration) -> Duration {
    let full = Duration::from_millis(100)
        .saturating_mul(1u32 << n.saturating_sub(1).min(16))
        .min(max);
    full / 2 + full.mul_f64(fastrand::f64() / 2.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap_with_jitter() {
        let max = Duration::from_secs(30);
        for _ in 0..100 {
            let b1 = backoff(1, max);
            assert!(b1 >= Duration::from_millis(50) && b1 <= Duration::from_millis(100));
            let b4 = backoff(4, max);
            assert!(b4 >= Duration::from_millis(400) && b4 <= Duration::from_millis(800));
            let b40 = backoff(40, max);
            assert!(b40 >= max / 2 && b40 <= max);
        }
    }
}
