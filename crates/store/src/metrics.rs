//! The store's figures: lock-free counters ([`Counter`], [`Metrics`]) and their Prometheus text.
//!
//! Owns: [`Metrics`] and [`Store::write_metrics`]. Must not: take the store's locks for long.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::Store;

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

impl Store {
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
