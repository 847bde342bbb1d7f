//! The user loader and the known-users scan: the threads that read users' state from the
//! database so that workers never wait on it.

use super::*;

impl Shared {
    /// The next job for a background thread; `None` once it is stopped and every worker is
    /// gone (a worker finishing its last requests may still send one), or nobody can send.
    pub(super) fn next_job<T>(&self, rx: &Receiver<T>, stop: &AtomicBool) -> Option<T> {
        loop {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(job) => return Some(job),
                Err(RecvTimeoutError::Timeout) => {
                    if stop.load(Ordering::Acquire)
                        && self.live_workers.load(Ordering::Acquire) == 0
                    {
                        return None;
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return None,
            }
        }
    }

    /// The loader: takes queued users in batches, reads their state (database plus queue),
    /// and wakes the workers whose requests wait. Runs until stopped and every worker is gone
    /// (a worker finishing its last requests may still need it).
    pub(super) fn run_loader(&self, stop: &AtomicBool) {
        let Some(rx) = self.loads_rx.lock().take() else {
            return;
        };
        let mut batch: Vec<Box<str>> = Vec::with_capacity(self.cfg.load_batch);
        let mut last_error = None::<Instant>;
        while let Some(user) = self.next_job(&rx, stop) {
            batch.push(user);
            while batch.len() < self.cfg.load_batch {
                match rx.try_recv() {
                    Ok(user) => batch.push(user),
                    Err(_) => break,
                }
            }
            let names: Vec<&str> = batch.iter().map(|u| &**u).collect();
            let c = &self.counters;
            c.load_queries.add(names.len().div_ceil(512) as u64);
            let result = self.store.popup_users(&names);
            let mut woken = HashSet::new();
            match result {
                Ok(mut found) => {
                    c.loads.add(batch.len() as u64);
                    let now = process_secs();
                    for user in &batch {
                        let seen = found
                            .remove(&**user)
                            .unwrap_or_default()
                            .into_iter()
                            .map(|(p, r)| (p, seen_of(&r)))
                            .collect();
                        let state = UserState {
                            seen,
                            touched: now,
                            changed: 0,
                        };
                        woken.extend(self.users.loaded(user, Ok(state)));
                    }
                }
                Err(e) => {
                    c.load_failures.add(1);
                    if last_error.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
                        log::error!("popups: cannot load user state: {e}");
                        last_error = Some(Instant::now());
                    }
                    let until = process_secs() + LOAD_RETRY_SECS;
                    for user in &batch {
                        woken.extend(self.users.loaded(user, Err(until)));
                    }
                }
            }
            for w in woken {
                self.wake(usize::from(w));
            }
            batch.clear();
        }
    }

    /// Reads every user with state into the known set (the queue's, then the database's,
    /// on a connection of its own), so that from then on new users need no lookup. Retried
    /// every 10 s if the database fails; until it succeeds, new users are looked up.
    pub(super) fn run_known_scan(&self, stop: &AtomicBool) {
        loop {
            let started = Instant::now();
            let mut n = 0u64;
            let scanned = self.store.pending_popup_users().and_then(|queued| {
                for user in queued {
                    self.users.add_known(&user);
                }
                self.store.connect()?.popup_user_ids(&mut |user| {
                    self.users.add_known(user);
                    n += 1;
                })
            });
            match scanned {
                Ok(()) => {
                    self.users.known_complete();
                    log::info!(
                        "popups: {n} users with state listed in {} ms; new users need no lookup",
                        started.elapsed().as_millis()
                    );
                    return;
                }
                Err(e) => log::warn!(
                    "popups: cannot list the users with state ({e}); new users are looked up \
                     until this works (retried in 10 s)"
                ),
            }
            for _ in 0..100 {
                if stop.load(Ordering::Acquire) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}
