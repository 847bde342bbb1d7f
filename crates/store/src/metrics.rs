//! The store's figures: lock-free counters ([`Counter`], [`Metrics`]) and their declarations
//! in the metrics registry.
//!
//! Owns: [`Metrics`] and [`Store::collect`]. Must not: take the store's locks for long.

use std::sync::atomic::Ordering;

use hotpath_metrics::Samples;

use crate::Store;

pub use hotpath_metrics::Counter;

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
    /// Adds the store's metrics to a scrape (its `/stats` section: `store`).
    pub fn collect(&self, out: &mut Samples) {
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
        out.section("store")
            .add(&m::DATABASE_REACHED, self.online())
            .add(&m::JOURNAL_HELD_CHANGES, held)
            .add(&m::QUEUE_ROWS, self.queued_rows())
            .add(&m::QUEUE_LIMIT_ROWS, self.shared.settings.max_queue_rows)
            .add(&m::FLUSH_LAG_SECONDS, lag)
            .add(&m::LAST_BATCH_ROWS, m.last_batch_rows.get())
            .add(&m::MAX_BATCH_ROWS, m.max_batch_rows.get())
            .add(&m::LAST_WRITE_SECONDS, m.last_write_ms.get() as f64 / 1e3)
            .add(&m::JOURNAL_BYTES, self.journal_bytes())
            .add(
                &m::JOURNAL_LIMIT_BYTES,
                self.shared.settings.journal_max_bytes,
            )
            .add(&m::FLUSHES, m.flushes.get())
            .add(&m::FLUSH_FAILURES, m.failures.get())
            .add(&m::RETRIES, m.retries.get())
            .add(&m::ROWS_WRITTEN, m.rows.get())
            .add(&m::STATEMENTS, m.statements.get())
            .add(&m::CHANGES_WRITTEN, m.changes.get())
            .add(&m::JOURNAL_RECORDS, m.journal_records.get())
            .add(&m::JOURNAL_WRITTEN_BYTES, m.journal_written.get())
            .add(&m::JOURNAL_SYNCS, m.journal_syncs.get())
            .add(&m::JOURNAL_ERRORS, m.journal_errors.get())
            .add(&m::REFUSED, m.refused.get())
            .add(&m::REPLAYED_RECORDS, m.replayed.get())
            .add(&m::TORN_RECORDS, m.torn.get())
            .add(&m::REFUSED_ROWS, m.refused_rows.get())
            .add(&m::REFUSED_DROPPED_ROWS, m.refused_dropped.get());
    }
}

/// The store's metrics.
mod m {
    use hotpath_metrics::Desc;

    pub static DATABASE_REACHED: Desc = Desc::gauge(
"hotpath_store_database_reached",
"1 once the database has been reached since start; 0 while a server started  without it runs on its journal alone (reads that need it are refused).",
);

    pub static JOURNAL_HELD_CHANGES: Desc = Desc::gauge(
"hotpath_store_journal_held_changes",
"Changes whose journal write failed, in memory and waiting for the next journal  write; while any wait, answers wait with them.",
);

    pub static QUEUE_ROWS: Desc = Desc::gauge(
        "hotpath_store_queue_rows",
        "Distinct rows waiting to be written.",
    );

    pub static QUEUE_LIMIT_ROWS: Desc = Desc::gauge(
        "hotpath_store_queue_limit_rows",
        "store.max_queue_rows: with this many rows in memory changes are refused.",
    );

    pub static FLUSH_LAG_SECONDS: Desc = Desc::gauge(
        "hotpath_store_flush_lag_seconds",
        "Age of the oldest change not yet written.",
    );

    pub static LAST_BATCH_ROWS: Desc = Desc::gauge(
        "hotpath_store_last_batch_rows",
        "Rows in the last batch written.",
    );

    pub static MAX_BATCH_ROWS: Desc = Desc::gauge(
        "hotpath_store_max_batch_rows",
        "Most rows in one batch so far.",
    );

    pub static LAST_WRITE_SECONDS: Desc = Desc::gauge(
        "hotpath_store_last_write_seconds",
        "Time the last batch's transaction took.",
    );

    pub static JOURNAL_BYTES: Desc = Desc::gauge(
        "hotpath_store_journal_bytes",
        "Bytes of journal on disk (changes the database does not hold yet).",
    );

    pub static JOURNAL_LIMIT_BYTES: Desc = Desc::gauge(
        "hotpath_store_journal_limit_bytes",
        "store.journal_max_bytes: at this size changes are refused.",
    );

    pub static FLUSHES: Desc = Desc::counter("hotpath_store_flushes_total", "Batches written.");

    pub static FLUSH_FAILURES: Desc = Desc::counter(
"hotpath_store_flush_failures_total",
"Batch writes that failed, kept and retried (after a start without the database, also the attempts to reach it).",
)
.stat("failures");

    pub static RETRIES: Desc = Desc::counter(
        "hotpath_store_retries_total",
        "Writes that retried a failed batch.",
    );

    pub static ROWS_WRITTEN: Desc =
        Desc::counter("hotpath_store_rows_written_total", "Rows written.");

    pub static STATEMENTS: Desc =
        Desc::counter("hotpath_store_statements_total", "Upsert statements sent.");

    pub static CHANGES_WRITTEN: Desc = Desc::counter(
        "hotpath_store_changes_written_total",
        "Changes written, before merging per key.",
    );

    pub static JOURNAL_RECORDS: Desc = Desc::counter(
        "hotpath_store_journal_records_total",
        "Journal records written.",
    );

    pub static JOURNAL_WRITTEN_BYTES: Desc = Desc::counter(
        "hotpath_store_journal_written_bytes_total",
        "Journal bytes written.",
    );

    pub static JOURNAL_SYNCS: Desc =
        Desc::counter("hotpath_store_journal_syncs_total", "Journal fsyncs.");

    pub static JOURNAL_ERRORS: Desc = Desc::counter(
        "hotpath_store_journal_errors_total",
        "Journal writes that failed.",
    );

    pub static REFUSED: Desc = Desc::counter(
        "hotpath_store_refused_total",
        "Changes refused because the journal was full.",
    );

    pub static REPLAYED_RECORDS: Desc = Desc::counter(
        "hotpath_store_replayed_records_total",
        "Journal records replayed at start.",
    );

    pub static TORN_RECORDS: Desc = Desc::counter(
        "hotpath_store_torn_records_total",
        "Damaged or incomplete journal records skipped at start.",
    );

    pub static REFUSED_ROWS: Desc = Desc::counter(
        "hotpath_store_refused_rows_total",
        "Rows the database refused for their values, set aside in data_dir/refused.jsonl.",
    );

    pub static REFUSED_DROPPED_ROWS: Desc = Desc::counter(
"hotpath_store_refused_dropped_rows_total",
"Rows the database refused while data_dir/refused.jsonl was at store.refused_max_bytes: dropped, and logged.",
);
}
