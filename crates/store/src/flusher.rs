//! The flusher: writes the queue (over what a failed write left) every interval or when a
//! batch fills, retries with jittered backoff, deletes the journal segments the database
//! holds, fsyncs the journal off the workers, and drains at shutdown.
//!
//! Owns: [`Store::flush`], [`Store::run_flusher`], [`Store::drain`], [`backoff`]. Must not:
//! hold the workers' lock across I/O.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::journal::{self, Segment};
use crate::{refused, Store, StoreError};

impl Store {
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
        let (mut pending, since) = {
            let mut inner = self.shared.inner.lock();
            self.shared
                .in_flight
                .store(inner.pending.rows() + db.carry.rows(), Ordering::Relaxed);
            self.shared.queued(0);
            let room = inner.pending.empty_like();
            (
                std::mem::replace(&mut inner.pending, room),
                inner.pending_since.take(),
            )
        };
        // What a failed write left is older than the queue: the queue's rows go over it.
        let mut batch = std::mem::take(&mut db.carry);
        batch.merge(pending.take());
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
    pub(crate) fn prune(&self) {
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
            if held.changes > 0 {
                log::warn!(
                    "shutdown: {} changes whose journal write failed are written from memory",
                    held.changes
                );
                s.unjournaled.fetch_sub(held.changes, Ordering::AcqRel);
                s.held_bytes.store(0, Ordering::Relaxed);
                journal::merge_record(&mut inner.pending, &held.bytes);
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
