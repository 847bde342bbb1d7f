//! The popup service on the server: the decision and event endpoints, the admin API, and the
//! threads behind them (the user loader, the catalog poller, the admin writer). Workers never
//! wait on the database: a request for a user not in memory parks until the loader has the
//! user; admin writes park until the admin thread has written them.

use hashbrown::{HashMap, HashSet};
use std::hash::Hasher as _;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};

use hotpath_config::PopupsConfig;
use hotpath_service::{
    process_secs, Background, Context, Handled, HttpResponse, Kind, Outcome, Request, Service,
    ServiceWorker, Wake,
};
use hotpath_store::{Change, Counter, JournalWriter, PopupUserRow, Store, CLICK, CLOSE, SHOWN};

use crate::api::{self, Event, Query, MAX_SEGMENTS};
use crate::decide::{self, Action, Catalog, Seen};
use crate::model::Popup;
use crate::spent::Spend;
use crate::token::Signer;
use crate::users::{Found, UserState, Users};
use crate::PopupsError;

/// Journal numbers of the popup workers start here (the tracker's workers use 0..).
pub const JOURNAL_BASE: u32 = 1 << 16;
/// Seconds a user whose load failed gets errors before the next try.
const LOAD_RETRY_SECS: u32 = 1;
/// Admin answers not collected (their connection died) are dropped after this.
const ADMIN_ANSWER_TTL: Duration = Duration::from_secs(60);

/// The popups every worker decides from, and each one's answer prefix.
pub struct Live {
    catalog: Catalog,
    /// Per popup id: the definition as stored, and `{"id":…,"payload":…,"token":"`.
    by_id: HashMap<u32, (String, Box<[u8]>)>,
}

impl Live {
    fn new(popups: Vec<Popup>) -> Live {
        let by_id = popups
            .iter()
            .map(|p| {
                let text = serde_json::to_string(p).expect("a popup serializes");
                let mut prefix = format!("{{\"id\":{},\"payload\":", p.id).into_bytes();
                serde_json::to_writer(&mut prefix, &p.payload).expect("JSON serializes");
                prefix.extend_from_slice(b",\"token\":\"");
                (p.id, (text, prefix.into_boxed_slice()))
            })
            .collect();
        Live {
            catalog: Catalog::new(popups),
            by_id,
        }
    }

    /// The popups, by id.
    fn sorted(&self) -> Vec<&Popup> {
        let mut v: Vec<&Popup> = self.catalog.popups().iter().collect();
        v.sort_by_key(|p| p.id);
        v
    }
}

/// Shows per popup today (UTC), shared by every worker; the daily cap is checked and taken in
/// one atomic step, so it holds exactly across workers.
struct Daily {
    day: u32,
    counts: HashMap<u32, AtomicU64>,
}

impl Daily {
    fn get(&self, id: u32) -> u64 {
        self.counts
            .get(&id)
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// Counts a show unless the cap is reached.
    fn take(&self, id: u32, cap: Option<u64>) -> bool {
        let Some(c) = self.counts.get(&id) else {
            return false;
        };
        match cap {
            None => {
                c.fetch_add(1, Ordering::Relaxed);
                true
            }
            Some(cap) => c
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                    (n < cap).then_some(n + 1)
                })
                .is_ok(),
        }
    }
}

#[derive(Default)]
struct Counters {
    shown: Counter,
    none: Counter,
    clicks: Counter,
    closes: Counter,
    bad_requests: Counter,
    bad_tokens: Counter,
    replays: Counter,
    spent_full: Counter,
    journal_full: Counter,
    load_busy: Counter,
    load_errors: Counter,
    loads: Counter,
    load_queries: Counter,
    load_failures: Counter,
    reloads: Counter,
    reload_failures: Counter,
    admin_writes: Counter,
}

/// An admin answer: status and JSON body.
type Answer = (u16, Vec<u8>);

enum AdminOp {
    Save { popup: Box<Popup>, status: u16 },
    Stats,
}

struct AdminJob {
    key: u64,
    worker: usize,
    op: AdminOp,
}

/// What the service's workers and threads share.
pub struct Shared {
    cfg: PopupsConfig,
    store: Arc<Store>,
    live: RwLock<Arc<Live>>,
    version: AtomicU64,
    users: Users,
    daily: RwLock<Daily>,
    signer: Signer,
    /// Answered shows (one click and one close each).
    spent: crate::spent::Spent,
    /// Unix seconds at process second 0.
    unix_base: i64,
    loads: SyncSender<Box<str>>,
    loads_rx: Mutex<Option<Receiver<Box<str>>>>,
    admin: SyncSender<AdminJob>,
    admin_rx: Mutex<Option<Receiver<AdminJob>>>,
    admin_busy: Mutex<HashSet<u64>>,
    admin_done: Mutex<HashMap<u64, (Instant, Answer)>>,
    /// Held while the catalog is read from or written to the database and published, so a
    /// poll never publishes what an admin write has just replaced.
    catalog_lock: Mutex<()>,
    /// The catalog and today's shows have been read from the database (not yet after a start
    /// without it).
    catalog_read: AtomicBool,
    wakes: Mutex<HashMap<usize, Wake>>,
    live_workers: AtomicUsize,
    counters: Counters,
}

/// The popup service.
pub struct Popups {
    shared: Arc<Shared>,
}

fn unix_day(unix: u64) -> u32 {
    (unix / 86_400) as u32
}

/// The signing secret: the configured one, else the one kept in `data_dir/popups.secret`
/// (made on first start), so tokens stay valid across restarts.
fn secret(cfg: &PopupsConfig, data_dir: &str) -> Result<Vec<u8>, PopupsError> {
    if !cfg.token_secret.is_empty() {
        return Ok(cfg.token_secret.as_bytes().to_vec());
    }
    let path = Path::new(data_dir).join("popups.secret");
    match std::fs::read(&path) {
        Ok(s) if s.len() >= 16 => Ok(s),
        Ok(_) => Err(PopupsError::SecretTooShort { path }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut raw = [0u8; 32];
            getrandom::fill(&mut raw).map_err(PopupsError::Random)?;
            let hex: String = raw.iter().map(|b| format!("{b:02x}")).collect();
            let tmp = path.with_extension("tmp");
            match std::fs::write(&tmp, &hex).and_then(|()| std::fs::rename(&tmp, &path)) {
                Ok(()) => Ok(hex.into_bytes()),
                Err(source) => Err(PopupsError::Secret { path, source }),
            }
        }
        Err(source) => Err(PopupsError::Secret { path, source }),
    }
}

/// Parses stored definitions; a bad one is logged (once per text) and left out.
fn parse_all(rows: &[(u32, String)], reported: &mut HashSet<(u32, String)>) -> Vec<Popup> {
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

impl Popups {
    /// The service on an opened store: popups and today's shows read from the database.
    pub fn new(
        cfg: &PopupsConfig,
        data_dir: &str,
        store: Arc<Store>,
    ) -> Result<Popups, PopupsError> {
        let signer = Signer::new(&secret(cfg, data_dir)?);
        let unix_base = hotpath_store::unix_now() - i64::from(process_secs());
        let today = unix_day(hotpath_store::unix_now() as u64);
        // Started without the database: no popup is shown until the poller has read the
        // catalog and today's shows (a daily cap needs them).
        let (popups, shows) = if store.online() {
            let rows = store
                .read(|b| b.popups())
                .map_err(PopupsError::store("the catalog"))?;
            let shows = store
                .popup_daily(today)
                .map_err(PopupsError::store("today's shows"))?;
            let popups = parse_all(&rows, &mut HashSet::new());
            log::info!(
                "popups: {} popups, {} shown today so far",
                popups.len(),
                shows.values().sum::<u64>()
            );
            (popups, shows)
        } else {
            log::warn!(
                "popups: no popups until {} answers (the catalog and today's shows are read \
                 from it)",
                store.name
            );
            (Vec::new(), std::collections::HashMap::new())
        };
        let catalog_read = AtomicBool::new(store.online());
        let (loads, loads_rx) = mpsc::sync_channel(cfg.max_loading);
        let (admin, admin_rx) = mpsc::sync_channel(64);
        let shared = Arc::new(Shared {
            cfg: cfg.clone(),
            store,
            live: RwLock::new(Arc::new(Live::new(Vec::new()))),
            version: AtomicU64::new(0),
            users: Users::default(),
            daily: RwLock::new(Daily {
                day: today,
                counts: shows
                    .into_iter()
                    .map(|(id, n)| (id, AtomicU64::new(n)))
                    .collect(),
            }),
            signer,
            spent: crate::spent::Spent::new(cfg.token_ttl_secs, cfg.max_spent_tokens),
            unix_base,
            loads,
            loads_rx: Mutex::new(Some(loads_rx)),
            admin,
            admin_rx: Mutex::new(Some(admin_rx)),
            admin_busy: Mutex::new(HashSet::new()),
            admin_done: Mutex::new(HashMap::new()),
            catalog_lock: Mutex::new(()),
            catalog_read,
            wakes: Mutex::new(HashMap::new()),
            live_workers: AtomicUsize::new(0),
            counters: Counters::default(),
        });
        shared.publish(popups);
        Ok(Popups { shared })
    }

    /// What the workers share (tests read the counters).
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}

impl Shared {
    fn unix(&self, now: u32) -> u64 {
        (self.unix_base + i64::from(now)).max(0) as u64
    }

    /// Makes `popups` the catalog every worker decides from (each sees it on its next
    /// request).
    fn publish(&self, popups: Vec<Popup>) {
        {
            let mut daily = self.daily.write();
            for p in &popups {
                daily
                    .counts
                    .entry(p.id)
                    .or_insert_with(|| AtomicU64::new(0));
            }
        }
        *self.live.write() = Arc::new(Live::new(popups));
        self.version.fetch_add(1, Ordering::Release);
    }

    fn wake(&self, worker: usize) {
        if let Some(w) = self.wakes.lock().get(&worker) {
            w();
        }
    }

    /// Users in memory and the bytes they take.
    pub fn users(&self) -> (usize, usize) {
        (self.users.len(), self.users.bytes())
    }

    /// The loader: takes queued users in batches, reads their state (database plus queue),
    /// and wakes the workers whose requests wait. Runs until stopped and every worker is gone
    /// (a worker finishing its last requests may still need it).
    fn run_loader(&self, stop: &AtomicBool) {
        let Some(rx) = self.loads_rx.lock().take() else {
            return;
        };
        let mut batch: Vec<Box<str>> = Vec::with_capacity(self.cfg.load_batch);
        let mut last_error = None::<Instant>;
        loop {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(user) => batch.push(user),
                Err(RecvTimeoutError::Timeout) => {
                    if stop.load(Ordering::Acquire)
                        && self.live_workers.load(Ordering::Acquire) == 0
                    {
                        return;
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => return,
            }
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
    fn run_known_scan(&self, stop: &AtomicBool) {
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

    /// Polls the popup table (edits made in the database directly), rolls the daily counts
    /// over at midnight UTC, keeps the user table under its cap, and forgets admin answers
    /// nobody collected.
    fn run_poller(&self, stop: &AtomicBool) {
        let every = Duration::from_millis(self.cfg.reload_ms);
        let mut reported = HashSet::new();
        let mut last_error = None::<Instant>;
        let mut next = Instant::now() + every;
        while !stop.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(50).min(every));
            if Instant::now() < next {
                continue;
            }
            next = Instant::now() + every;
            if let Err(e) = self.poll_catalog(&mut reported) {
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

    fn poll_catalog(&self, reported: &mut HashSet<(u32, String)>) -> Result<(), PopupsError> {
        let _held = self.catalog_lock.lock();
        let rows = self
            .store
            .read(|b| b.popups())
            .map_err(PopupsError::store("the catalog"))?;
        if !self.catalog_read.load(Ordering::Acquire) {
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

    /// The admin writer: saves popups and reads statistics, one job at a time.
    fn run_admin(&self, stop: &AtomicBool) {
        let Some(rx) = self.admin_rx.lock().take() else {
            return;
        };
        loop {
            let job = match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(job) => job,
                Err(RecvTimeoutError::Timeout) => {
                    if stop.load(Ordering::Acquire)
                        && self.live_workers.load(Ordering::Acquire) == 0
                    {
                        return;
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => return,
            };
            let answer = match job.op {
                AdminOp::Save { popup, status } => self.save(*popup, status),
                AdminOp::Stats => self.stats_answer(),
            };
            self.admin_done
                .lock()
                .insert(job.key, (Instant::now(), answer));
            self.admin_busy.lock().remove(&job.key);
            self.wake(job.worker);
        }
    }

    fn save(&self, popup: Popup, status: u16) -> Answer {
        let text = serde_json::to_string(&popup).expect("a popup serializes");
        let _held = self.catalog_lock.lock();
        let saved = if self.catalog_read.load(Ordering::Acquire) {
            self.store
                .read(|b| b.save_popup(popup.id, &text, hotpath_store::unix_now()))
                .map_err(|e| e.to_string())
        } else {
            // Published now, it would replace a catalog not read yet.
            Err(format!(
                "the popup catalog has not been read from {} since start",
                self.store.name
            ))
        };
        match saved {
            Ok(()) => {
                self.counters.admin_writes.add(1);
                let live = self.live.read().clone();
                let mut popups: Vec<Popup> = live
                    .catalog
                    .popups()
                    .iter()
                    .filter(|p| p.id != popup.id)
                    .cloned()
                    .collect();
                popups.push(popup);
                self.publish(popups);
                log::info!("popups: popup saved through the admin API: {text}");
                (status, text.into_bytes())
            }
            Err(e) => {
                let mut body = Vec::new();
                api::error_body(&mut body, &format!("not saved: {e}"));
                (503, body)
            }
        }
    }

    fn stats_answer(&self) -> Answer {
        let counts = match self.store.popup_event_counts() {
            Ok(c) => c,
            Err(e) => {
                let mut body = Vec::new();
                api::error_body(&mut body, &format!("statistics unavailable: {e}"));
                return (503, body);
            }
        };
        let live = self.live.read().clone();
        let daily = self.daily.read();
        let rows: Vec<serde_json::Value> = live
            .sorted()
            .into_iter()
            .map(|p| {
                let n = |a| counts.get(&(p.id, a)).copied().unwrap_or(0);
                let (shows, clicks, closes) = (n(SHOWN), n(CLICK), n(CLOSE));
                serde_json::json!({
                    "id": p.id,
                    "name": p.name,
                    "enabled": p.enabled,
                    "shows": shows,
                    "clicks": clicks,
                    "closes": closes,
                    "ctr": if shows == 0 { 0.0 } else { clicks as f64 / shows as f64 },
                    "shows_today": daily.get(p.id),
                })
            })
            .collect();
        let body = serde_json::to_vec(&serde_json::json!({ "popups": rows })).expect("JSON");
        (200, body)
    }
}

fn seen_of(r: &PopupUserRow) -> Seen {
    Seen {
        next_eligible: r.next_eligible,
        shows: r.shows,
        last_action: match r.last_action {
            SHOWN => Action::Shown,
            CLICK => Action::Click,
            CLOSE => Action::Close,
            _ => Action::None,
        },
    }
}

fn action_code(a: Action) -> u8 {
    match a {
        Action::Click => CLICK,
        Action::Close => CLOSE,
        _ => SHOWN,
    }
}

impl Service for Popups {
    fn worker(&self, index: usize) -> Box<dyn ServiceWorker> {
        let s = &self.shared;
        s.live_workers.fetch_add(1, Ordering::AcqRel);
        Box::new(PopupsWorker {
            journal: s.store.writer(JOURNAL_BASE + index as u32),
            live: s.live.read().clone(),
            version: s.version.load(Ordering::Acquire),
            shared: s.clone(),
            index,
            query: Query::default(),
        })
    }

    fn write_metrics(&self, out: &mut String) {
        use std::fmt::Write as _;
        let s = &self.shared;
        let c = &s.counters;
        let g = Counter::get;
        let (users, bytes) = s.users();
        let popups = s.live.read().catalog.popups().len();
        let spent = s.spent.len();
        let _ = write!(
            out,
            "# HELP hotpath_popups_decisions_total Popup decisions, by result.\n\
             # TYPE hotpath_popups_decisions_total counter\n\
             hotpath_popups_decisions_total{{result=\"shown\"}} {}\n\
             hotpath_popups_decisions_total{{result=\"none\"}} {}\n\
             # HELP hotpath_popups_events_total Clicks and closes recorded.\n\
             # TYPE hotpath_popups_events_total counter\n\
             hotpath_popups_events_total{{action=\"click\"}} {}\n\
             hotpath_popups_events_total{{action=\"close\"}} {}\n\
             # HELP hotpath_popups_refused_total Popup requests refused, by reason.\n\
             # TYPE hotpath_popups_refused_total counter\n\
             hotpath_popups_refused_total{{reason=\"bad_request\"}} {}\n\
             hotpath_popups_refused_total{{reason=\"bad_token\"}} {}\n\
             hotpath_popups_refused_total{{reason=\"replay\"}} {}\n\
             hotpath_popups_refused_total{{reason=\"spent_full\"}} {}\n\
             hotpath_popups_refused_total{{reason=\"journal_full\"}} {}\n\
             hotpath_popups_refused_total{{reason=\"loads_full\"}} {}\n\
             hotpath_popups_refused_total{{reason=\"load_failed\"}} {}\n\
             # HELP hotpath_popups_spent_tokens Answered shows remembered (popups.max_spent_tokens at most).\n\
             # TYPE hotpath_popups_spent_tokens gauge\n\
             hotpath_popups_spent_tokens {spent}\n\
             # HELP hotpath_popups_users Users whose state is in memory.\n\
             # TYPE hotpath_popups_users gauge\n\
             hotpath_popups_users {users}\n\
             # HELP hotpath_popups_users_limit popups.max_users.\n\
             # TYPE hotpath_popups_users_limit gauge\n\
             hotpath_popups_users_limit {}\n\
             # HELP hotpath_popups_users_bytes Bytes the user table takes (buckets and heap).\n\
             # TYPE hotpath_popups_users_bytes gauge\n\
             hotpath_popups_users_bytes {bytes}\n\
             # HELP hotpath_popups_users_evicted_total Idle users dropped to stay under the cap.\n\
             # TYPE hotpath_popups_users_evicted_total counter\n\
             hotpath_popups_users_evicted_total {}\n\
             # HELP hotpath_popups_known_users Users known to have state (a new user needs no lookup).\n\
             # TYPE hotpath_popups_known_users gauge\n\
             hotpath_popups_known_users {}\n\
             # HELP hotpath_popups_fresh_users_total New users started without a lookup.\n\
             # TYPE hotpath_popups_fresh_users_total counter\n\
             hotpath_popups_fresh_users_total {}\n\
             # HELP hotpath_popups_loads_total Users loaded from the database.\n\
             # TYPE hotpath_popups_loads_total counter\n\
             hotpath_popups_loads_total {}\n\
             # HELP hotpath_popups_load_queries_total Database lookups of user state.\n\
             # TYPE hotpath_popups_load_queries_total counter\n\
             hotpath_popups_load_queries_total {}\n\
             # HELP hotpath_popups_load_failures_total Failed lookups of user state.\n\
             # TYPE hotpath_popups_load_failures_total counter\n\
             hotpath_popups_load_failures_total {}\n\
             # HELP hotpath_popups_popups Popups in the catalog.\n\
             # TYPE hotpath_popups_popups gauge\n\
             hotpath_popups_popups {popups}\n\
             # HELP hotpath_popups_catalog_reloads_total Catalog changes found by polling the table.\n\
             # TYPE hotpath_popups_catalog_reloads_total counter\n\
             hotpath_popups_catalog_reloads_total {}\n\
             # HELP hotpath_popups_catalog_poll_failures_total Failed polls of the popup table.\n\
             # TYPE hotpath_popups_catalog_poll_failures_total counter\n\
             hotpath_popups_catalog_poll_failures_total {}\n\
             # HELP hotpath_popups_admin_writes_total Popups saved through the admin API.\n\
             # TYPE hotpath_popups_admin_writes_total counter\n\
             hotpath_popups_admin_writes_total {}\n",
            g(&c.shown),
            g(&c.none),
            g(&c.clicks),
            g(&c.closes),
            g(&c.bad_requests),
            g(&c.bad_tokens),
            g(&c.replays),
            g(&c.spent_full),
            g(&c.journal_full),
            g(&c.load_busy),
            g(&c.load_errors),
            s.cfg.max_users,
            g(&s.users.evicted),
            s.users.known(),
            g(&s.users.fresh),
            g(&c.loads),
            g(&c.load_queries),
            g(&c.load_failures),
            g(&c.reloads),
            g(&c.reload_failures),
            g(&c.admin_writes),
        );
    }

    fn name(&self) -> &'static str {
        "popups"
    }

    fn stats(&self) -> Vec<(&'static str, u64)> {
        let s = &self.shared;
        let c = &s.counters;
        let (users, bytes) = s.users();
        vec![
            ("popups", s.live.read().catalog.popups().len() as u64),
            ("shown", c.shown.get()),
            ("none", c.none.get()),
            ("clicks", c.clicks.get()),
            ("closes", c.closes.get()),
            ("users", users as u64),
            ("users_bytes", bytes as u64),
            ("bytes_per_user", (bytes / users.max(1)) as u64),
            ("known_users", s.users.known() as u64),
            ("loads", c.loads.get()),
        ]
    }

    fn background(&self) -> Vec<Background> {
        let job = |name: &str, run: fn(&Shared, &AtomicBool)| {
            let shared = self.shared.clone();
            Background::new(name, move |stop| run(&shared, &stop))
        };
        vec![
            job("popups-loader", Shared::run_loader),
            job("popups-known", Shared::run_known_scan),
            job("popups-poller", Shared::run_poller),
            job("popups-admin", Shared::run_admin),
        ]
    }
}

/// One worker's handle.
struct PopupsWorker {
    shared: Arc<Shared>,
    index: usize,
    journal: JournalWriter,
    live: Arc<Live>,
    version: u64,
    query: Query,
}

impl Drop for PopupsWorker {
    fn drop(&mut self) {
        self.shared.live_workers.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Fills `resp` with a JSON error.
fn refuse(resp: &mut HttpResponse, status: u16, kind: Kind, message: &str) -> Option<Handled> {
    resp.status = status;
    resp.content_type = "application/json";
    resp.body.clear();
    api::error_body(&mut resp.body, message);
    Some(Handled::Answered(kind, Outcome::Refused))
}

/// Bytes of a popup change in the journal (at most).
const CHANGE_BYTES: usize = 32 + api::MAX_USER_BYTES;

impl PopupsWorker {
    fn refresh(&mut self) {
        let v = self.shared.version.load(Ordering::Acquire);
        if v != self.version {
            self.live = self.shared.live.read().clone();
            self.version = v;
        }
    }

    /// Queues a load of `user`; parks the request, or refuses it when the queue is full.
    fn load(&self, user: &str, kind: Kind, resp: &mut HttpResponse) -> Option<Handled> {
        match self.shared.loads.try_send(user.into()) {
            Ok(()) => Some(Handled::Parked),
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.shared.users.cancel(user);
                self.shared.counters.load_busy.add(1);
                resp.extra_headers.extend_from_slice(b"Retry-After: 1\r\n");
                refuse(
                    resp,
                    503,
                    kind,
                    "too many users are being loaded at once; retry",
                )
            }
        }
    }

    /// A 503 when the store cannot take a change now (journal or queue at its bound).
    fn no_room(&self, kind: Kind, resp: &mut HttpResponse) -> Option<Option<Handled>> {
        if self.journal.has_room(CHANGE_BYTES) {
            return None;
        }
        self.shared.counters.journal_full.add(1);
        resp.extra_headers.extend_from_slice(b"Retry-After: 5\r\n");
        Some(refuse(resp, 503, kind, self.journal.refuse()))
    }

    /// The answer for a user whose state is not in memory: park (queuing a load if none is
    /// under way), or an error while loads fail.
    fn not_loaded<T>(
        &self,
        found: Found<T>,
        user: &str,
        kind: Kind,
        resp: &mut HttpResponse,
    ) -> Option<Handled> {
        match found {
            Found::Ready(_) => unreachable!("handled by the caller"),
            Found::Load => self.load(user, kind, resp),
            Found::Loading => Some(Handled::Parked),
            Found::Failed => {
                self.shared.counters.load_errors.add(1);
                resp.extra_headers.extend_from_slice(b"Retry-After: 1\r\n");
                refuse(
                    resp,
                    503,
                    kind,
                    "this user's state cannot be read from the database now; retry",
                )
            }
        }
    }

    /// `GET /v1/popup?user=…`.
    fn decision(
        &mut self,
        req: &Request<'_, '_>,
        ctx: &Context,
        resp: &mut HttpResponse,
    ) -> Option<Handled> {
        const K: Kind = Kind::Popup;
        if req.method != "GET" && req.method != "HEAD" {
            resp.extra_headers
                .extend_from_slice(b"Allow: GET, HEAD\r\n");
            return refuse(resp, 405, K, "use GET");
        }
        if let Err(e) = self.query.parse(req.query) {
            self.shared.counters.bad_requests.add(1);
            return refuse(resp, 400, K, e);
        }
        if let Some(refused) = self.no_room(K, resp) {
            return refused;
        }
        self.refresh();
        let shared = &*self.shared;
        let now = shared.unix(ctx.now);
        let live = &*self.live;
        let mut segs = [""; MAX_SEGMENTS];
        let viewer = self.query.viewer(&mut segs);
        let daily = shared.daily.read();
        let found = shared
            .users
            .with(viewer.user, self.index as u16, ctx.now, |state| {
                let mut capped: Vec<u32> = Vec::new();
                loop {
                    let chosen = live.catalog.choose(
                        &viewer,
                        now,
                        |id| state.get(id),
                        |id| {
                            if capped.contains(&id) {
                                u64::MAX
                            } else {
                                daily.get(id)
                            }
                        },
                    );
                    let Some(p) = chosen else {
                        return (None, false);
                    };
                    if !daily.take(p.id, p.frequency.daily_cap) {
                        // Another worker took the last show of today's cap meanwhile.
                        capped.push(p.id);
                        continue;
                    }
                    let seen = state.entry(p.id);
                    decide::shown(seen, &p.frequency, now);
                    return (Some((p.id, *seen)), true);
                }
            });
        drop(daily);
        let chosen = match found {
            Found::Ready(chosen) => chosen,
            other => return self.not_loaded(other, self.query.user(), K, resp),
        };
        let c = &shared.counters;
        let Some((id, seen)) = chosen else {
            c.none.add(1);
            resp.status = 204;
            resp.extra_headers
                .extend_from_slice(b"Cache-Control: no-store\r\n");
            return Some(Handled::Answered(K, Outcome::Ok));
        };
        c.shown.add(1);
        let user = self.query.user();
        self.journal.push(Change::Popup {
            user: user.into(),
            popup: id,
            action: SHOWN,
            next_eligible: seen.next_eligible,
            shows: seen.shows,
            at: now as u32,
        });
        resp.content_type = "application/json";
        resp.extra_headers
            .extend_from_slice(b"Cache-Control: no-store\r\n");
        let prefix = &self
            .live
            .by_id
            .get(&id)
            .expect("chosen from this catalog")
            .1;
        resp.body.extend_from_slice(prefix);
        shared.signer.sign(&mut resp.body, user, id, now);
        resp.body.extend_from_slice(b"\"}\n");
        Some(Handled::Answered(K, Outcome::Ok))
    }

    /// `POST /v1/popup/events`.
    fn event(
        &mut self,
        req: &Request<'_, '_>,
        ctx: &Context,
        resp: &mut HttpResponse,
    ) -> Option<Handled> {
        const K: Kind = Kind::PopupEvent;
        self.refresh();
        let c = &self.shared.counters;
        if req.method != "POST" {
            resp.extra_headers.extend_from_slice(b"Allow: POST\r\n");
            return refuse(resp, 405, K, "use POST with a JSON body");
        }
        if req.body.len() > api::MAX_EVENT_BYTES {
            c.bad_requests.add(1);
            return refuse(resp, 413, K, "body: larger than 4096 bytes");
        }
        let event = match Event::parse(req.body) {
            Ok(e) => e,
            Err(e) => {
                c.bad_requests.add(1);
                return refuse(resp, 400, K, &e);
            }
        };
        let Some(popup) = self.live.catalog.get(event.popup) else {
            c.bad_requests.add(1);
            return refuse(resp, 404, K, &format!("popup: no popup {}", event.popup));
        };
        let now = self.shared.unix(ctx.now);
        let shown_at = match self.shared.signer.verify(
            &event.token,
            &event.user,
            event.popup,
            now,
            self.shared.cfg.token_ttl_secs,
        ) {
            Ok(at) => at,
            Err(e) => {
                c.bad_tokens.add(1);
                return refuse(resp, 403, K, e.message());
            }
        };
        if let Some(refused) = self.no_room(K, resp) {
            return refused;
        }
        let code = action_code(event.action);
        let spent = &self.shared.spent;
        match spent.spend(&event.user, event.popup, shown_at, code, now) {
            Spend::Fresh => {}
            Spend::Replay => {
                c.replays.add(1);
                let msg = match event.action {
                    Action::Click => "token: this show was already clicked",
                    _ => "token: this show was already closed",
                };
                return refuse(resp, 409, K, msg);
            }
            Spend::Full => {
                c.spent_full.add(1);
                resp.extra_headers.extend_from_slice(b"Retry-After: 60\r\n");
                return refuse(
                    resp,
                    503,
                    K,
                    "too many answered shows to remember (popups.max_spent_tokens); try later",
                );
            }
        }
        let frequency = popup.frequency;
        let found = self
            .shared
            .users
            .with(&event.user, self.index as u16, ctx.now, |state| {
                let seen = state.entry(event.popup);
                decide::acted(seen, &frequency, event.action, now);
                (*seen, true)
            });
        let seen = match found {
            Found::Ready(seen) => seen,
            other => {
                spent.unspend(&event.user, event.popup, shown_at, code);
                return self.not_loaded(other, &event.user, K, resp);
            }
        };
        match event.action {
            Action::Click => c.clicks.add(1),
            _ => c.closes.add(1),
        }
        self.journal.push(Change::Popup {
            user: event.user.into_boxed_str(),
            popup: event.popup,
            action: code,
            next_eligible: seen.next_eligible,
            shows: seen.shows,
            at: now as u32,
        });
        resp.status = 202;
        resp.content_type = "application/json";
        resp.body.extend_from_slice(b"{\"accepted\":true}\n");
        Some(Handled::Answered(K, Outcome::Ok))
    }

    /// `/admin/popups…`, behind the bearer token.
    fn admin(
        &mut self,
        req: &Request<'_, '_>,
        ctx: &Context,
        resp: &mut HttpResponse,
    ) -> Option<Handled> {
        const K: Kind = Kind::Admin;
        let token = &self.shared.cfg.admin_token;
        if token.is_empty() {
            return refuse(resp, 403, K, "the admin API is off: set popups.admin_token");
        }
        let given = req
            .header("authorization")
            .and_then(|v| v.strip_prefix(b"Bearer "))
            .unwrap_or(b"");
        if !same_secret(given, token.as_bytes()) {
            resp.extra_headers
                .extend_from_slice(b"WWW-Authenticate: Bearer realm=\"hotpath\"\r\n");
            return refuse(resp, 401, K, "missing or wrong bearer token");
        }
        // A parked write or statistics request, asked again: its answer is in.
        let key = job_key(self.index, ctx.peer, req);
        if let Some((_, (status, body))) = self.shared.admin_done.lock().remove(&key) {
            resp.status = status;
            resp.content_type = "application/json";
            resp.body = body;
            let outcome = if status < 400 {
                Outcome::Ok
            } else {
                Outcome::Refused
            };
            return Some(Handled::Answered(K, outcome));
        }
        self.refresh();
        let rest = req.path["/admin/popups".len()..].trim_start_matches('/');
        let mut parts = rest.splitn(2, '/');
        let first = parts.next().unwrap_or("");
        let second = parts.next();
        let id = first.parse::<u32>().ok();
        let json = |resp: &mut HttpResponse, status: u16, body: Vec<u8>| {
            resp.status = status;
            resp.content_type = "application/json";
            resp.body = body;
            Some(Handled::Answered(K, Outcome::Ok))
        };
        match (req.method, first, id, second) {
            ("GET", "", _, None) => {
                let list: Vec<&Popup> = self.live.sorted();
                let body =
                    serde_json::to_vec(&serde_json::json!({ "popups": list })).expect("JSON");
                json(resp, 200, body)
            }
            ("GET", "stats", _, None) => self.admin_job(key, resp, AdminOp::Stats),
            ("GET", _, Some(id), None) => match self.live.by_id.get(&id) {
                Some((text, _)) => json(resp, 200, text.clone().into_bytes()),
                None => refuse(resp, 404, K, &format!("no popup {id}")),
            },
            ("POST", "", _, None) => {
                let popup = match Popup::from_json(req.body) {
                    Ok(p) => p,
                    Err(e) => return refuse(resp, 400, K, &e),
                };
                if self.live.by_id.contains_key(&popup.id) {
                    let id = popup.id;
                    return refuse(
                        resp,
                        409,
                        K,
                        &format!("popup {id} exists; PUT /admin/popups/{id} replaces it"),
                    );
                }
                self.admin_job(
                    key,
                    resp,
                    AdminOp::Save {
                        popup: Box::new(popup),
                        status: 201,
                    },
                )
            }
            ("PUT", _, Some(id), None) => {
                let popup = match Popup::from_json(req.body) {
                    Ok(p) => p,
                    Err(e) => return refuse(resp, 400, K, &e),
                };
                if popup.id != id {
                    return refuse(
                        resp,
                        400,
                        K,
                        &format!("id: the body says {}, the path {id}", popup.id),
                    );
                }
                self.admin_job(
                    key,
                    resp,
                    AdminOp::Save {
                        popup: Box::new(popup),
                        status: 200,
                    },
                )
            }
            ("POST", _, Some(id), Some("disable" | "enable")) => {
                let Some(p) = self.live.catalog.get(id) else {
                    return refuse(resp, 404, K, &format!("no popup {id}"));
                };
                let mut popup = p.clone();
                popup.enabled = second == Some("enable");
                self.admin_job(
                    key,
                    resp,
                    AdminOp::Save {
                        popup: Box::new(popup),
                        status: 200,
                    },
                )
            }
            _ => refuse(
                resp,
                404,
                K,
                "admin API: GET /admin/popups, GET /admin/popups/stats, GET|PUT /admin/popups/ID, \
                 POST /admin/popups, POST /admin/popups/ID/disable|enable",
            ),
        }
    }

    /// Runs an admin operation on the admin thread: the request parks until its answer is in
    /// (the same request, asked again, collects it).
    fn admin_job(&mut self, key: u64, resp: &mut HttpResponse, op: AdminOp) -> Option<Handled> {
        if !self.shared.admin_busy.lock().insert(key) {
            return Some(Handled::Parked);
        }
        let job = AdminJob {
            key,
            worker: self.index,
            op,
        };
        match self.shared.admin.try_send(job) {
            Ok(()) => Some(Handled::Parked),
            Err(_) => {
                self.shared.admin_busy.lock().remove(&key);
                resp.extra_headers.extend_from_slice(b"Retry-After: 1\r\n");
                refuse(
                    resp,
                    503,
                    Kind::Admin,
                    "too many admin requests at once; retry",
                )
            }
        }
    }
}

/// Identifies one admin request across its parked retries: the same connection asking the
/// same thing.
fn job_key(worker: usize, peer: SocketAddr, req: &Request<'_, '_>) -> u64 {
    let mut h = siphasher::sip::SipHasher13::new();
    h.write_usize(worker);
    h.write(peer.to_string().as_bytes());
    for part in [
        req.method.as_bytes(),
        req.path.as_bytes(),
        req.query,
        req.body,
    ] {
        h.write_usize(part.len());
        h.write(part);
    }
    h.finish()
}

/// Compares secrets in time that does not depend on where they differ.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

impl ServiceWorker for PopupsWorker {
    fn http(
        &mut self,
        req: &Request<'_, '_>,
        ctx: &Context,
        resp: &mut HttpResponse,
    ) -> Option<Handled> {
        match req.path {
            "/v1/popup" => self.decision(req, ctx, resp),
            "/v1/popup/events" => self.event(req, ctx, resp),
            p if p == "/admin/popups" || p.starts_with("/admin/popups/") => {
                self.admin(req, ctx, resp)
            }
            _ => None,
        }
    }

    fn set_wake(&mut self, wake: Wake) {
        self.shared.wakes.lock().insert(self.index, wake);
    }

    fn udp(&mut self, _: &[u8], _: &Context, _: &mut Vec<u8>) -> (Kind, Outcome) {
        (Kind::Other, Outcome::Dropped)
    }

    fn uncommitted(&self) -> bool {
        self.journal.uncommitted()
    }

    fn commit(&mut self) -> bool {
        self.journal.commit().is_ok()
    }
}
