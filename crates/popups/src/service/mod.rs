//! The popup service on the server: the decision and event endpoints, the admin API, and the
//! threads behind them (the user loader, the catalog poller, the admin writer). Workers never
//! wait on the database: a request for a user not in memory parks until the loader has the
//! user; admin writes park until the admin thread has written them.
//!
//! Here: the state the workers and threads share, start-up, and the [`Service`] contract. The
//! jobs live apart: `worker` (the decision and event endpoints), `admin` (the admin API and
//! its writer thread), `loader` (users read from the database), `catalog` (the poller),
//! `metrics` and `secret` (the token key).

mod admin;
mod catalog;
mod loader;
mod metrics;
mod secret;
mod worker;

use hashbrown::{HashMap, HashSet};
use std::hash::Hasher as _;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};

use hotpath_config::PopupsConfig;
use hotpath_service::{
    process_secs, Background, Context, Handled, HttpResponse, Kind, Outcome, Request, Samples,
    Service, ServiceWorker, Wake,
};
use hotpath_store::{Counter, JournalWriter, Store};

use crate::stored::{
    Fingerprint, PopupChange, PopupDb, PopupStore, PopupUserRow, CLICK, CLOSE, SHOWN,
};

use crate::api::{self, Event, Query, MAX_SEGMENTS};
use crate::decide::{self, Action, Catalog, Seen};
use crate::model::Popup;
use crate::token::Signer;
use crate::users::{Found, UserState, Users};
use crate::PopupsError;
use catalog::parse_all;
use worker::seen_of;

/// A popup decision (`GET /v1/popup`).
pub const POPUP: Kind = Kind::http("popup");
/// A popup click or close (`POST /v1/popup/events`).
pub const POPUP_EVENT: Kind = Kind::http("popup_event");

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
    /// The settings a reload may change in place.
    tunable: Tunable,
    store: Arc<Store>,
    live: RwLock<Arc<Live>>,
    version: AtomicU64,
    users: Users,
    daily: RwLock<Daily>,
    signer: Signer,
    /// Wrong admin tokens per client address (`popups.max_auth_failures_per_min`).
    token_guesses: hotpath_service::Throttle,
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

/// The popup settings a reload (SIGHUP) may change in place; the rest of `[popups]` is read
/// once, at start.
#[derive(Debug)]
struct Tunable {
    admin_token: RwLock<String>,
    token_ttl_secs: AtomicU64,
    forget_idle_users_after_days: AtomicU32,
    keep_events_days: AtomicU32,
}

impl Tunable {
    fn of(c: &PopupsConfig) -> Tunable {
        Tunable {
            admin_token: RwLock::new(c.admin_token.clone()),
            token_ttl_secs: AtomicU64::new(c.token_ttl_secs),
            forget_idle_users_after_days: AtomicU32::new(c.forget_idle_users_after_days),
            keep_events_days: AtomicU32::new(c.keep_events_days),
        }
    }

    /// Takes `c`'s values; the keys that changed.
    fn set(&self, c: &PopupsConfig) -> Vec<&'static str> {
        let mut applied = Vec::new();
        {
            let mut t = self.admin_token.write();
            if *t != c.admin_token {
                *t = c.admin_token.clone();
                applied.push("popups.admin_token");
            }
        }
        if self
            .token_ttl_secs
            .swap(c.token_ttl_secs, Ordering::Relaxed)
            != c.token_ttl_secs
        {
            applied.push("popups.token_ttl_secs");
        }
        let days = c.forget_idle_users_after_days;
        if self
            .forget_idle_users_after_days
            .swap(days, Ordering::Relaxed)
            != days
        {
            applied.push("popups.forget_idle_users_after_days");
        }
        if self
            .keep_events_days
            .swap(c.keep_events_days, Ordering::Relaxed)
            != c.keep_events_days
        {
            applied.push("popups.keep_events_days");
        }
        applied
    }
}

/// The popup service.
pub struct Popups {
    shared: Arc<Shared>,
}

fn unix_day(unix: u64) -> u32 {
    (unix / 86_400) as u32
}

impl Popups {
    /// The service on an opened store: popups and today's shows read from the database.
    pub fn new(
        cfg: &PopupsConfig,
        data_dir: &str,
        store: Arc<Store>,
    ) -> Result<Popups, PopupsError> {
        let signer = Signer::new(&secret::secret(cfg, data_dir)?);
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
            tunable: Tunable::of(cfg),
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
            token_guesses: hotpath_service::Throttle::new(
                cfg.max_auth_failures_per_min,
                60,
                hotpath_service::GUESSING_ADDRESSES,
            ),
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
}

impl Service for Popups {
    fn reconfigure(&self, new: &hotpath_config::Config) -> Vec<&'static str> {
        if !new.popups.enabled {
            return Vec::new();
        }
        self.shared.tunable.set(&new.popups)
    }

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

    fn kinds(&self) -> Vec<Kind> {
        vec![POPUP, POPUP_EVENT]
    }

    fn collect(&self, out: &mut Samples) {
        metrics::collect(self, out);
    }

    fn name(&self) -> &'static str {
        "popups"
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
