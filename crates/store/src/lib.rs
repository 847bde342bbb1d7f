//! hotpath's write-behind store: the only place that talks to databases.
//!
//! Requests change memory and hand [`Change`]s to their worker's [`JournalWriter`]; the
//! server commits each worker's journal with one write per event-loop batch, before any answer
//! of that batch is sent, and the changes are merged per key into one queue. The flusher
//! thread ([`Store::run_flusher`]) writes the queue every `store.flush_interval_ms` (or when
//! `store.batch_rows` keys wait) as multi-row upserts in one transaction, together with each
//! journal's position, then deletes journal segments the database has confirmed. A failed
//! write is merged back and retried with jittered backoff, never dropped, unless the database
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
//! # Schema (version 3)
//! | table | columns | what |
//! |---|---|---|
//! | `hp_schema` | `version` PK, `name`, `applied_at` (unix s) | applied migrations |
//! | `hp_torrents` | `info_hash` (20 bytes) PK, `completed`, `seeders`, `leechers`, `first_seen`, `last_active` (unix s) | per torrent: downloads completed (added to, never overwritten), the last seeders/leechers snapshot, first and last activity |
//! | `hp_journal` | `worker` PK, `seq` | per journal, the last record the database holds (written in the same transaction as the rows) |
//! | `hp_access_list` | `info_hash` (20 bytes) PK, `note`, `added_at` | info hashes for the tracker's access list when its source is the database |
//! | `hp_popups` | `id` PK, `definition` (the popup's JSON), `updated_at` | popup configurations |
//! | `hp_popup_users` | (`user_id`, `popup_id`) PK, `next_eligible` (unix s; `i64::MAX` = never), `shows`, `last_action` (1 shown, 2 click, 3 close), `updated_at` | each user's state per popup, absolute (the newest write wins) |
//! | `hp_popup_events` | `id` PK (auto), `at`, `user_id`, `popup_id`, `action` | the append-only log of shows, clicks and closes |
//! | `hp_popup_daily` | (`popup_id`, `day` = unix s / 86400) PK, `shows` | shows per popup per UTC day (added to), for daily caps |
//!
//! Binary keys are BLOB (SQLite), BYTEA (PostgreSQL), BINARY(20) (MySQL); counts and times
//! are 64-bit integers.
//!
//! Owns: the journal ([`journal`]), the merge queue ([`merge`]), the flusher, migrations
//! ([`migrations`]) and the backends ([`backend`]). Must not: be called synchronously from a
//! request handler (only [`JournalWriter`] is, and it never touches a database).

pub mod backend;
pub mod journal;
pub mod merge;
pub mod migrations;
pub mod refused;
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
}

impl StoreError {
    /// Whether trying again may help (a lost connection, a timeout, a deadlock).
    pub fn retryable(&self) -> bool {
        match self {
            StoreError::Db { fault, .. } => *fault == Fault::Transient,
            StoreError::Journal { .. } => true,
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
    backend: Mutex<Box<dyn Backend>>,
    /// Per journal, the last sequence the database holds.
    confirmed: Mutex<HashMap<u32, u64>>,
    /// Per journal, the last sequence found on disk or in the database at start.
    last_seq: HashMap<u32, u64>,
    /// The database, for logs.
    pub name: String,
    /// `store.url` and `store.data_dir`, for [`Store::connect`].
    url: String,
    data_dir: PathBuf,
}

/// What [`Store::open`] found.
#[derive(Debug, Default)]
pub struct Restored {
    /// Completed downloads per torrent: the database's plus those replayed from the journal.
    pub completed: Vec<(Key, u64)>,
    /// Journal records replayed.
    pub replayed: u64,
}

impl Store {
    /// Connects, migrates (or checks the schema), replays the journal records the database
    /// lacks into the queue, and reads back the completed counts.
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
        backend.claim_writer()?;
        if cfg.migrate {
            migrations::migrate(&mut *backend)?;
        } else {
            migrations::require_current(&mut *backend)?;
        }
        let confirmed: HashMap<u32, u64> = backend.journal_positions()?.into_iter().collect();

        let mut pending = Pending::default();
        let mut segments = Vec::new();
        let mut last_seq = confirmed.clone();
        let (mut bytes, mut replayed, mut torn) = (0u64, 0u64, 0u64);
        let list = journal::list_segments(&dir).map_err(|e| journal_error(&dir, e))?;
        for (w, _, path) in list {
            let done = confirmed.get(&w).copied().unwrap_or(0);
            let mut undecodable = 0u64;
            let end = journal::scan(&path, &mut |seq, payload| {
                if seq > done {
                    if Change::decode_all(payload, &mut |c| pending.apply(c)).is_none() {
                        undecodable += 1;
                    }
                    pending.covered(w, seq);
                    replayed += 1;
                }
            })
            .map_err(|e| journal_error(&path, e))?;
            if end.torn() {
                torn += 1;
                log::warn!(
                    "journal {}: {} bytes after byte {} are an incomplete or damaged record \
                     (never acknowledged); skipped",
                    path.display(),
                    end.file_bytes - end.valid_bytes,
                    end.valid_bytes
                );
            }
            if undecodable > 0 {
                log::error!(
                    "journal {}: {undecodable} records hold changes this build cannot read",
                    path.display()
                );
            }
            let last = last_seq.entry(w).or_insert(0);
            *last = (*last).max(end.last_seq);
            bytes += end.file_bytes;
            segments.push(Segment {
                worker: w,
                path,
                last_seq: end.last_seq,
                bytes: end.file_bytes,
                open: false,
                unsynced: false,
            });
        }
        if replayed > 0 {
            log::info!(
                "journal: {replayed} records the database lacks were replayed ({} rows queued)",
                pending.rows()
            );
        }

        let mut completed: HashMap<Key, u64> = HashMap::new();
        backend.torrents(&mut |k, t| {
            if t.completed > 0 {
                completed.insert(k, t.completed);
            }
        })?;
        for (k, n) in pending.completed_rows() {
            *completed.entry(k).or_insert(0) += n;
        }

        let metrics = Metrics::default();
        metrics.replayed.set(replayed);
        metrics.torn.set(torn);
        let pending_since = (pending.rows() > 0).then(Instant::now);
        let pending_rows = pending.rows();
        let store = Store {
            _lock: lock,
            shared: Arc::new(Shared {
                settings,
                inner: Mutex::new(Inner {
                    pending,
                    segments,
                    pending_since,
                    held: Vec::new(),
                    gate: None,
                }),
                wake: Condvar::new(),
                journal_bytes: AtomicU64::new(bytes),
                queue_rows: AtomicUsize::new(pending_rows),
                in_flight: AtomicUsize::new(0),
                writers: AtomicUsize::new(0),
                unjournaled: AtomicUsize::new(0),
                held_bytes: AtomicU64::new(0),
                metrics,
            }),
            backend: Mutex::new(backend),
            confirmed: Mutex::new(confirmed),
            last_seq,
            name,
            url: cfg.url.clone(),
            data_dir: PathBuf::from(&cfg.data_dir),
        };
        store.prune();
        Ok((
            store,
            Restored {
                completed: completed.into_iter().collect(),
                replayed,
            },
        ))
    }

    /// The journal writer of worker `worker` (one per worker; its records continue the
    /// numbering of the same worker's earlier runs).
    pub fn writer(&self, worker: u32) -> JournalWriter {
        let next = self.last_seq.get(&worker).copied().unwrap_or(0) + 1;
        JournalWriter::new(self.shared.clone(), worker, next)
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

    /// Distinct rows waiting to be written.
    pub fn queued_rows(&self) -> usize {
        self.shared.inner.lock().pending.rows()
    }

    /// Bytes of journal on disk.
    pub fn journal_bytes(&self) -> u64 {
        self.shared.journal_bytes.load(Ordering::Relaxed)
    }

    /// Runs `f` on the backend (start-up reads, the access list); waits for a flush in progress.
    pub fn with_backend<T>(&self, f: impl FnOnce(&mut dyn Backend) -> T) -> T {
        f(&mut **self.backend.lock())
    }

    /// A connection of its own to the store's database, for long reads (a scan at start)
    /// that must not hold up flushes.
    pub fn connect(&self) -> Result<Box<dyn Backend>, StoreError> {
        backend::connect(&self.url, &self.data_dir)
    }

    /// The users with popup state waiting in the queue (replayed from the journal, or not
    /// flushed yet). Read once no batch is on its way to the database (under the backend
    /// lock, see `flush`): a scan of the database started after this call then finds every
    /// user this list lacks. Without it, a batch taken from the queue before the call and
    /// committed after the scan's snapshot was in neither, and its users looked new.
    pub fn pending_popup_users(&self) -> Vec<String> {
        let _no_batch_in_flight = self.backend.lock();
        self.shared
            .inner
            .lock()
            .pending
            .popup_user_names()
            .map(String::from)
            .collect()
    }

    /// The users' popup state, per user: the database's rows with the queue's newer ones laid
    /// over them. Read under the backend lock, so no batch is between the two (see `flush`).
    pub fn popup_users(
        &self,
        users: &[&str],
    ) -> Result<HashMap<String, Vec<(u32, PopupUserRow)>>, StoreError> {
        let mut backend = self.backend.lock();
        let mut out: HashMap<String, Vec<(u32, PopupUserRow)>> = HashMap::new();
        for (user, popup, row) in backend.popup_users(users)? {
            out.entry(user).or_default().push((popup, row));
        }
        let inner = self.shared.inner.lock();
        for user in users {
            for &(popup, row) in inner.pending.popup_user(user) {
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
        let mut backend = self.backend.lock();
        let mut out: HashMap<u32, u64> = backend.popup_daily(day)?.into_iter().collect();
        for (popup, n) in self.shared.inner.lock().pending.popup_daily(day) {
            *out.entry(popup).or_insert(0) += n;
        }
        Ok(out)
    }

    /// Events per `(popup, action)` over the whole log: the database's and the queue's.
    pub fn popup_event_counts(&self) -> Result<HashMap<(u32, u8), u64>, StoreError> {
        let mut backend = self.backend.lock();
        let mut out: HashMap<(u32, u8), u64> = backend
            .popup_event_counts()?
            .into_iter()
            .map(|(p, a, n)| ((p, a), n))
            .collect();
        for (popup, action) in self.shared.inner.lock().pending.popup_event_keys() {
            *out.entry((popup, action)).or_insert(0) += 1;
        }
        Ok(out)
    }

    /// Writes what is queued now, in one transaction. `Ok(rows)` when written (0 when there
    /// was nothing); on an error the batch is back in the queue.
    pub fn flush(&self) -> Result<usize, StoreError> {
        // The backend first, then the queue: whoever holds the backend (a reader of user state
        // under `with_backend`) sees every change either in the database or in the queue,
        // never in a batch on its way between them.
        let mut backend = self.backend.lock();
        let (pending, since) = {
            let mut inner = self.shared.inner.lock();
            self.shared
                .in_flight
                .store(inner.pending.rows(), Ordering::Relaxed);
            self.shared.queued(0);
            let room = Pending::with_room_of(&inner.pending);
            (
                std::mem::replace(&mut inner.pending, room),
                inner.pending_since.take(),
            )
        };
        let batch = pending.into_batch();
        if batch.is_empty() {
            return Ok(0);
        }
        let m = &self.shared.metrics;
        let started = Instant::now();
        let file = refused::path(&self.data_dir);
        let mut batch = batch;
        match refused::write(&mut **backend, &file, &self.name, &mut batch) {
            Ok((w, refused)) => {
                m.refused_rows.add(refused as u64);
                self.shared.in_flight.store(0, Ordering::Relaxed);
                self.shared.queued(self.shared.inner.lock().pending.rows());
                drop(backend);
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
                // Back in the queue before the backend is free (see above).
                let mut inner = self.shared.inner.lock();
                inner.pending.restore(batch);
                self.shared.in_flight.store(0, Ordering::Relaxed);
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
                        log::warn!(
                            "{}: write failed ({failures} in a row; kept, retry in {} ms): {e}",
                            self.name,
                            pause.as_millis()
                        );
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
        let held = self.shared.inner.lock().held.len();
        let gauges: [(&str, &str, f64); 9] = [
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
                "Batch writes that failed (kept and retried).",
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
