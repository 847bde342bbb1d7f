//! The catalog poller: edits made in the database directly, the daily counts' rollover at
//! midnight UTC, the user table's cap, and the first read after a start without the database.

use super::*;

/// How often idle users and old events are forgotten.
const FORGET_EVERY: Duration = Duration::from_secs(3600);

/// Parses stored definitions; a bad one is logged (once per text) and left out.
pub(super) fn parse_all(
    rows: &[(u32, String)],
    reported: &mut HashSet<(u32, String)>,
) -> Vec<Popup> {
    let mut out = Vec::with_capacity(rows.len());
    for (id, text) in rows {
        match Popup::from_json(text.as_bytes()) {
            Ok(p) if p.id == *id => out.push(p),
            Ok(p) => {
                if reported.insert((*id, text.clone())) {
                    log::error!(
                        "hp_popups row {id}: its definition says id {}; ignored",
                        p.id
                    );
                }
            }
            Err(e) => {
                if reported.insert((*id, text.clone())) {
                    log::error!("hp_popups row {id}: {e}; ignored");
                }
            }
        }
    }
    out
}

impl Shared {
    /// Polls the popup table (edits made in the database directly), rolls the daily counts
    /// over at midnight UTC, keeps the user table under its cap, and forgets admin answers
    /// nobody collected.
    pub(super) fn run_poller(&self, stop: &AtomicBool) {
        let every = Duration::from_millis(self.cfg.reload_ms);
        let mut reported = HashSet::new();
        let mut read = None;
        let mut last_error = None::<Instant>;
        let mut next = Instant::now() + every;
        let mut forget_due = Instant::now() + FORGET_EVERY;
        while !stop.load(Ordering::Acquire) {
            if Instant::now() >= forget_due {
                forget_due += FORGET_EVERY;
                self.forget();
            }
            std::thread::sleep(Duration::from_millis(50).min(every));
            if Instant::now() < next {
                continue;
            }
            next = Instant::now() + every;
            if let Err(e) = self.poll_catalog(&mut reported, &mut read) {
                self.counters.reload_failures.add(1);
                if last_error.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
                    log::warn!(
                        "popups: cannot read the popup table (keeping the popups in memory): {e}"
                    );
                    last_error = Some(Instant::now());
                }
            }
            let today = unix_day(hotpath_store::unix_now() as u64);
            if self.daily.read().day != today {
                let mut daily = self.daily.write();
                daily.day = today;
                for c in daily.counts.values() {
                    c.store(0, Ordering::Relaxed);
                }
            }
            let dropped = self.users.evict(self.cfg.max_users, process_secs());
            if dropped > 0 {
                log::debug!("popups: {dropped} idle users dropped from memory");
            }
            self.admin_done
                .lock()
                .retain(|_, (at, _)| at.elapsed() < ADMIN_ANSWER_TTL);
        }
    }

    /// Deletes idle users' states and old events (`popups.forget_idle_users_after_days`,
    /// `popups.keep_events_days`) on a connection of its own, so a long delete holds up no
    /// flush; a failure is logged and tried again in an hour.
    fn forget(&self) {
        let now = hotpath_store::unix_now();
        let days = |d: u32| now - i64::from(d) * 86_400;
        let done = self.store.connect().and_then(|mut b| {
            let t = &self.tunable;
            b.forget_idle_users(days(t.forget_idle_users_after_days.load(Ordering::Relaxed)))?;
            b.forget_events(days(t.keep_events_days.load(Ordering::Relaxed)))
        });
        if let Err(e) = done {
            log::warn!("popups: idle users and old events not forgotten this hour: {e}");
        }
    }

    /// One poll of the popup table. `read` is the fingerprint of the rows the last poll read
    /// whole: while the table's is the same, nothing more is read or parsed (a scan of the
    /// table, hashed as it streams, instead of every definition copied, compared and, when
    /// it was not written as hotpath writes JSON, published anew on every poll).
    pub(super) fn poll_catalog(
        &self,
        reported: &mut HashSet<(u32, String)>,
        read: &mut Option<u128>,
    ) -> Result<(), PopupsError> {
        let _held = self.catalog_lock.lock();
        let first = !self.catalog_read.load(Ordering::Acquire);
        if !first && read.is_some() {
            let now = self
                .store
                .read(|b| b.popups_fingerprint())
                .map_err(PopupsError::store("the catalog"))?;
            if *read == Some(now) {
                return Ok(());
            }
        }
        let rows = self
            .store
            .read(|b| b.popups())
            .map_err(PopupsError::store("the catalog"))?;
        // Of the rows as read (the table may have changed since its fingerprint was taken).
        *read = Some(Fingerprint::of(&rows));
        if first {
            // The first read after a start without the database: today's shows first, so
            // no daily cap is passed once the popups are live.
            let today = unix_day(hotpath_store::unix_now() as u64);
            let shows = self
                .store
                .popup_daily(today)
                .map_err(PopupsError::store("today's shows"))?;
            {
                let mut daily = self.daily.write();
                daily.day = today;
                for (id, n) in shows {
                    daily
                        .counts
                        .entry(id)
                        .or_insert_with(|| AtomicU64::new(0))
                        .fetch_add(n, Ordering::Relaxed);
                }
            }
            let popups = parse_all(&rows, reported);
            log::info!(
                "popups: {} reached; {} popups, {} shown today so far",
                self.store.name,
                popups.len(),
                self.daily
                    .read()
                    .counts
                    .values()
                    .map(|c| c.load(Ordering::Relaxed))
                    .sum::<u64>()
            );
            self.publish(popups);
            self.catalog_read.store(true, Ordering::Release);
            self.counters.reloads.add(1);
            return Ok(());
        }
        // The rows changed since the last read (or this is the first): published unless
        // they are what is live already (hotpath's own writes, which it published itself).
        let live = self.live.read().clone();
        let same = rows.len() == live.by_id.len()
            && rows
                .iter()
                .all(|(id, text)| live.by_id.get(id).is_some_and(|(t, _)| t == text));
        if !same {
            let popups = parse_all(&rows, reported);
            log::info!("popups: the popup table changed; {} popups", popups.len());
            self.publish(popups);
            self.counters.reloads.add(1);
        }
        Ok(())
    }
}
