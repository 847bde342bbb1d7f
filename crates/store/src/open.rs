//! Opening the store: connect, migrate, replay the journal records the database lacks into the
//! carry, or start without the database and do all of it once the flusher reaches it.
//!
//! Owns: [`Store::open`], [`Restored`], [`ConnectHook`] and the journal's scan at start.
//! Must not: write a batch (the flusher does).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use parking_lot::{Condvar, Mutex};

use hotpath_config::StoreConfig;

use crate::journal::{self, Segment};
use crate::queue::Queues;
use crate::{
    backend, journal_error, migrations, Backend, Db, Dialect, Held, Inner, Metrics, Service,
    Settings, Shared, Store, StoreError,
};

/// Runs once a store that opened without its database reaches it, on the flusher's thread,
/// before anything is written: [`Store::with_replay`] then gives it what it would have read
/// at open had the database been up.
pub type ConnectHook = Box<dyn FnOnce(&Store) + Send>;

/// A start without the database: what the flusher does once it reaches it.
pub(crate) struct Late {
    /// `store.migrate`.
    migrate: bool,
    /// The journal's segments at start, and per journal the last sequence they hold: the
    /// records among them the database lacks are replayed once it is reached (later records
    /// are this run's, in the queue already).
    segments: Vec<(u32, PathBuf)>,
    upto: HashMap<u32, u64>,
    pub(crate) hooks: Vec<ConnectHook>,
    /// The cluster node this store writes for (0 outside cluster mode).
    node: u8,
}

/// What [`Store::open`] found.
#[derive(Debug, Default)]
pub struct Restored {
    /// Journal records replayed.
    pub replayed: u64,
    /// Rows they merged into (read them with [`Store::with_replay`]).
    pub rows: usize,
}

/// What a scan of the journal's segments found.
struct Scanned {
    /// The records chosen for replay, merged.
    pending: Queues,
    segments: Vec<Segment>,
    /// Per journal, the last valid sequence.
    last_seq: HashMap<u32, u64>,
    bytes: u64,
    /// Valid records read, and those replayed.
    records: u64,
    replayed: u64,
    torn: u64,
}

/// Reads the segment files `list`, merging into `pending` (empty) the records `replay(journal,
/// sequence)` chooses (none without it). With `warn`, damaged tails and records this build
/// cannot read are logged.
fn scan_journal(
    pending: Queues,
    list: &[(u32, PathBuf)],
    replay: Option<&dyn Fn(u32, u64) -> bool>,
    warn: bool,
) -> Result<Scanned, StoreError> {
    let mut out = Scanned {
        pending,
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
                if pending.apply(payload).is_none() {
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

/// Journal numbers one cluster node's journals take: node `n`'s worker `w` records its
/// position in `hp_journal` under `n * 2^23 + w` (node 0, outside cluster mode, under `w`), so
/// nodes on one database never share a position, and a restarted node replays exactly its own.
pub fn journal_base(node: u8) -> u32 {
    u32::from(node) << 23
}

/// Takes the database's writer lock, migrates it (or checks its schema) and reads the
/// journal positions it holds.
fn attach(
    backend: &mut dyn Backend,
    services: &[&'static Service],
    migrate: bool,
    node: u8,
) -> Result<HashMap<u32, u64>, StoreError> {
    backend.claim_writer(node)?;
    if migrate {
        backend.claim_migrations()?;
        let migrated = migrations::migrate(backend, services);
        backend.release_migrations()?;
        migrated?;
    } else {
        migrations::require_current(backend, services)?;
    }
    Ok(backend.journal_positions()?.into_iter().collect())
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
    pub fn open(
        cfg: &StoreConfig,
        services: &[&'static Service],
    ) -> Result<(Store, Restored), StoreError> {
        let backend = backend::connect(&cfg.url, Path::new(&cfg.data_dir))?;
        Store::open_with(cfg, services, backend)
    }

    /// [`Store::open`] for node `node` of a cluster (1-255), on a database the nodes share:
    /// each node takes a writer lock of its own, and its journals' positions are kept under
    /// numbers of its own ([`journal_base`]), so every node replays exactly its own journal.
    pub fn open_for_node(
        cfg: &StoreConfig,
        services: &[&'static Service],
        node: u8,
    ) -> Result<(Store, Restored), StoreError> {
        let backend = backend::connect(&cfg.url, Path::new(&cfg.data_dir))?;
        Store::open_node_with(cfg, services, backend, node)
    }

    /// [`Store::open`] on a given backend (tests wrap one to inject failures).
    pub fn open_with(
        cfg: &StoreConfig,
        services: &[&'static Service],
        backend: Box<dyn Backend>,
    ) -> Result<(Store, Restored), StoreError> {
        Store::open_node_with(cfg, services, backend, 0)
    }

    /// [`Store::open_for_node`] on a given backend.
    pub fn open_node_with(
        cfg: &StoreConfig,
        services: &[&'static Service],
        mut backend: Box<dyn Backend>,
        node: u8,
    ) -> Result<(Store, Restored), StoreError> {
        // Two services on one name or tag would mix their changes: refused before anything.
        let queues = Queues::new(services).map_err(StoreError::Schema)?;
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

        let attached = attach(&mut *backend, services, cfg.migrate, node);
        let (mut scan, confirmed, late, seq_floor) = match attached {
            Ok(confirmed) => {
                let replay = |w: u32, seq: u64| seq > confirmed.get(&w).copied().unwrap_or(0);
                let scan = scan_journal(queues, &list, Some(&replay), true)?;
                if scan.replayed > 0 {
                    log::info!(
                        "journal: {} records the database lacks were replayed ({} rows queued)",
                        scan.replayed,
                        scan.pending.rows()
                    );
                }
                (scan, confirmed, None, 0)
            }
            Err(e)
                if !cfg.require_db_at_start
                    && e.retryable()
                    && backend.dialect() != Dialect::Sqlite =>
            {
                let scan = scan_journal(queues, &list, None, true)?;
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
                    node,
                };
                (scan, HashMap::new(), Some((late, e)), clock_floor())
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
        // The replayed rows wait beside the database, as a failed batch would: older than
        // anything this run queues, and what a service reads back at open.
        let carry = scan.pending.take();
        let carried = carry.rows();
        let pending_since = (carried > 0).then(Instant::now);
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
                    held: Held::default(),
                    gate: None,
                }),
                wake: Condvar::new(),
                journal_bytes: AtomicU64::new(scan.bytes),
                queue_rows: AtomicUsize::new(carried),
                in_flight: AtomicUsize::new(carried),
                writers: AtomicUsize::new(0),
                unjournaled: AtomicUsize::new(0),
                held_bytes: AtomicU64::new(0),
                held_writer: Arc::new(Mutex::new(())),
                metrics,
            }),
            db: Mutex::new(Db { backend, carry }),
            confirmed: Mutex::new(confirmed),
            last_seq,
            seq_floor,
            journal_base: journal_base(node),
            floor: Mutex::new(floor),
            online: AtomicBool::new(late.is_none()),
            late: Mutex::new(late),
            offline_why: Mutex::new(offline_why),
            services: services.to_vec(),
            name,
            url: cfg.url.clone(),
            data_dir: PathBuf::from(&cfg.data_dir),
        };
        store.prune();
        let replayed = scan.replayed;
        Ok((
            store,
            Restored {
                replayed,
                rows: carried,
            },
        ))
    }

    /// After a start without the database: connects, takes the writer lock, migrates, merges
    /// the journal's records the database lacks into the queue (under what this run queued
    /// since: they are older), and runs the hooks. Only the flusher calls it (through
    /// [`Store::flush`]), so no batch is written before the replay.
    pub(crate) fn reach_database(&self) -> Result<(), StoreError> {
        let mut late_slot = self.late.lock();
        let Some(late) = late_slot.as_ref() else {
            return Ok(());
        };
        let mut db = self.db.lock();
        let confirmed = match attach(&mut *db.backend, &self.services, late.migrate, late.node) {
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
        let queues = self.shared.inner.lock().pending.empty_like();
        let mut scan = scan_journal(queues, &late.segments, Some(&replay), false)?;
        let rows = scan.pending.rows();
        // Nothing was written before the database was reached, so the carry was empty: it
        // is the replay now, until this flush writes it (after the hooks).
        let mut older = scan.pending.take();
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
        // Online, no lock held: a hook reads as any service does, and `with_replay` gives
        // it the database and the replay, which the flush that called this writes next.
        for hook in late.hooks {
            hook(self);
        }
        Ok(())
    }
}
