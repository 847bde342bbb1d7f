//! hotpath's write-behind store: the only place that talks to databases.
//!
//! Requests change memory and hand their service's changes (anything [`Encode`]) to their
//! worker's [`JournalWriter`]; the
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
//! The store names no service: each declares itself as a [`Service`] (its journal tags, tables,
//! queue and migrations) in its own crate, and the binary hands the list to [`Store::open`].
//!
//! # Schema (version 7)
//! Migrations 1 to 4 predate services' own migrations: they also created the tracker's, the
//! popup service's and the Lua routes' tables below, which those crates now declare and read.
//!
//! | table | columns | what |
//! |---|---|---|
//! | `hp_schema` | `version` PK, `name`, `applied_at` (unix s) | the store's applied migrations |
//! | `hp_service_schema` | (`service`, `version`) PK, `name`, `applied_at` | each service's applied migrations (a service's tables added since version 5 are listed in its crate) |
//! | `hp_torrents` | `info_hash` (20 bytes) PK, `completed`, `seeders`, `leechers`, `first_seen`, `last_active` (unix s) | per torrent: downloads completed (added to, never overwritten), the last seeders/leechers snapshot, first and last activity |
//! | `hp_journal` | `worker` PK, `seq` | per journal, the last record the database holds (written in the same transaction as the rows): tracker workers count from 0, popup workers from 65536, Lua workers from 131072, and `hotpath db refused --replay` records itself under 2147483647; in cluster mode node `n`'s numbers are these plus `n * 2^23` ([`journal_base`]) |
//! | `hp_access_list` | `info_hash` (20 bytes) PK, `note`, `added_at` | info hashes for the tracker's access list when its source is the database |
//! | `hp_popups` | `id` PK, `definition` (the popup's JSON), `updated_at` | popup configurations |
//! | `hp_popup_users` | (`user_id`, `popup_id`) PK, `next_eligible` (unix s; `i64::MAX` = never), `shows`, `last_action` (1 shown, 2 click, 3 close), `updated_at`, `clicked_show_at`, `closed_show_at` (unix s of the show the user's last click, and last close, answered; 0: none; the larger stays) | each user's state per popup, absolute (the newest write wins) |
//! | `hp_popup_events` | `id` PK (auto), `at`, `user_id`, `popup_id`, `action` | the append-only log of shows, clicks and closes |
//! | `hp_popup_daily` | (`popup_id`, `day` = unix s / 86400) PK, `shows` | shows per popup per UTC day (added to), for daily caps |
//! | `hp_lua_rows` | `id` PK (auto), `tbl`, `at` (unix s), `data` (JSON text); index (`tbl`, `at`) | rows scripts append with `hp.store.enqueue` |
//! | `hp_lua_counters` | (`tbl`, `k`, `col`) PK, `value`, `updated_at` | counters scripts add to with `hp.store.add` (added to, never overwritten) |
//!
//! Binary keys are BLOB (SQLite), BYTEA (PostgreSQL), BINARY(20) (MySQL); counts and times
//! are 64-bit integers. Text keys and ids compare byte for byte on every backend: on MySQL and
//! MariaDB migration 6 gives them the server's no-pad binary collation (`utf8mb4_nopad_bin`,
//! `utf8mb4_0900_bin`), so `Bob`, `bob`, `bob ` and `böb` are four users.
//!
//! Owns: the journal ([`journal`]), the services' seam ([`queue`]), table declarations and
//! rows ([`table`], [`batch`]), opening and replay (`open.rs`), the flusher (`flusher.rs`),
//! the figures (`metrics.rs`), migrations ([`migrations`]) and the backends ([`backend`]).
//! Must not: name a service, or be
//! called synchronously from a request handler (only [`JournalWriter`] is, and it never
//! touches a database).

pub mod backend;
pub mod batch;
mod error;
#[cfg(test)]
mod examples;
mod flusher;
pub mod journal;
mod metrics;
pub mod migrations;
mod open;
pub mod queue;
pub mod refused;
pub mod table;
#[cfg(feature = "testing")]
pub mod testing;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::{Condvar, Mutex};

use hotpath_config::StoreConfig;

pub use backend::{Backend, Dialect};
pub use batch::Batch;
pub(crate) use error::journal_error;
pub use error::{unstorable, Fault, StoreError, Unstorable};
pub use flusher::backoff;
pub use journal::{JournalWriter, Refused};
pub use metrics::{Counter, Metrics};
pub use open::{journal_base, ConnectHook, Restored};
pub use queue::{Encode, Queue, Service};

use journal::Segment;
use open::Late;
use queue::Queues;

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
    /// `store.batch_rows`, resolved ([`StoreConfig::batch_rows`]).
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
            batch_rows: cfg.batch_rows(),
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
    pub(crate) pending: Queues,
    pub(crate) segments: Vec<Segment>,
    /// When the oldest change still pending was merged.
    pub(crate) pending_since: Option<Instant>,
    /// Changes whose journal write failed and was cut off its file: applied to memory, not
    /// journaled, not queued. The next commit of any writer journals them first.
    pub(crate) held: Held,
    /// A record whose write failed and could not be cut off its file, `(journal, sequence)`:
    /// queued under its sequence, and no answer goes out until the database holds it.
    pub(crate) gate: Option<(u32, u64)>,
}

/// Encoded changes a failed journal write left out (see [`JournalWriter::commit`]).
#[derive(Debug, Default)]
pub(crate) struct Held {
    pub(crate) bytes: Vec<u8>,
    pub(crate) changes: usize,
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
    /// Added to worker numbers: this node's journals (see [`journal_base`]).
    journal_base: u32,
    /// Per journal, the floor file's sequences ([`journal::FLOOR_FILE`]).
    floor: Mutex<HashMap<u32, u64>>,
    /// The database holds the writer lock, its schema is current and the journal's records it
    /// lacked are in the queue. Until then (a start without it) reads are refused.
    online: AtomicBool,
    /// What a start without the database left to do once it is reached.
    late: Mutex<Option<Late>>,
    /// Why the database has not been reached yet (for refused reads).
    offline_why: Mutex<String>,
    /// The services writing through it.
    services: Vec<&'static Service>,
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

impl Store {
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

    /// The journal writer of worker `worker` (one per worker; its records continue the
    /// numbering of the same worker's earlier runs).
    pub fn writer(&self, worker: u32) -> JournalWriter {
        let worker = self.journal_base + worker;
        let last = self.last_seq.get(&worker).copied().unwrap_or(0);
        JournalWriter::new(self.shared.clone(), worker, last.max(self.seq_floor) + 1)
    }

    /// Queues changes that need no journal (snapshots a crash may lose).
    pub fn submit<C: Encode>(&self, changes: &[C]) {
        if changes.is_empty() {
            return;
        }
        let mut encoded = Vec::with_capacity(changes.iter().map(C::encoded_len).sum());
        for c in changes {
            c.encode(&mut encoded);
        }
        let mut inner = self.shared.inner.lock();
        if inner.pending.apply(&encoded).is_none() {
            log::error!(
                "{}: a submitted change no service reads back; dropped",
                self.name
            );
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

    /// Runs a read on the backend (a service's reads of its tables); waits for a flush in
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

    /// A read of the database with what waits to be written laid over it. `read` runs on
    /// the database and the carry (a failed batch's rows, older than the queue's) under the
    /// lock the flusher writes under, so no batch is on its way between them; then `over`
    /// lays the queue of type `Q` over what it read, under the workers' lock (keep it short).
    /// Refused as [`Store::read`] is.
    pub fn overlay<Q: Queue, T>(
        &self,
        read: impl FnOnce(&mut dyn Backend, &Batch) -> Result<T, StoreError>,
        over: impl FnOnce(&mut T, &Q),
    ) -> Result<T, StoreError> {
        self.require_online()?;
        let mut db = self.db.lock();
        let Db { backend, carry } = &mut *db;
        let mut out = read(&mut **backend, carry)?;
        if let Some(q) = self.shared.inner.lock().pending.get::<Q>() {
            over(&mut out, q);
        }
        Ok(out)
    }

    /// Runs `f` on the database and the rows replayed from the journal at open (see
    /// [`Restored`]), for a service reading back what it counts. Call it before the flusher
    /// starts, or in a [`ConnectHook`] (a store that opened without its database replays once
    /// it reaches it): otherwise those rows may be written already.
    pub fn with_replay<T>(&self, f: impl FnOnce(&mut dyn Backend, &Batch) -> T) -> T {
        let mut db = self.db.lock();
        let Db { backend, carry } = &mut *db;
        f(&mut **backend, carry)
    }
}
