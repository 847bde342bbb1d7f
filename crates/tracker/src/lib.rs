//! hotpath's BitTorrent tracker, open or private, in memory, over HTTP (BEP 3, 7, 23, 48) and
//! UDP (BEP 15, 41).
//!
//! Owns: the swarm table ([`swarm`], [`table`]), peer selection and expiry, the access list
//! ([`access`]), UDP connection ids ([`connid`]), and the handlers that turn parsed requests
//! into answers ([`handler`]), and what it hands the write-behind store ([`persist`]): completed
//! downloads through each worker's journal, seeders/leechers snapshots on an interval; private
//! mode ([`private`]): users, torrents, rules and accounting. Must not: open sockets (the
//! server does), or reach a database other than through the store's `Backend` (its reads are
//! in [`stored`] and [`private::source`], its writes are changes the store writes).

pub mod access;
pub mod connid;
mod dense;
mod error;
pub mod exchange;
pub mod handler;
pub mod owners;
pub mod persist;
pub mod private;
pub mod stored;
pub mod swarm;
pub mod table;
pub mod webtorrent;

use hotpath_metrics::Counter;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hotpath_config::Config;
use hotpath_service::{Background, Kind, ReloadError, Samples, Service, ServiceWorker};

use access::AccessList;
use connid::ConnectionIds;
pub use error::{BadLine, TrackerError};
use table::{Caps, SwarmTable, Table};

/// An announce, over HTTP or UDP.
pub const ANNOUNCE: Kind = Kind::http_and_udp("announce");
/// A scrape, over HTTP or UDP.
pub const SCRAPE: Kind = Kind::http_and_udp("scrape");
/// A BEP 15 connect.
pub const CONNECT: Kind = Kind::udp("connect");
/// A WebTorrent announce (or answer), over WebSocket on an HTTP listener.
pub const WS_ANNOUNCE: Kind = Kind::http("ws_announce");
/// A WebTorrent scrape.
pub const WS_SCRAPE: Kind = Kind::http("ws_scrape");

/// Seconds the clocks of a cluster's nodes may differ by: a UDP connection id another node
/// issued, or a delta it stamped, may lie that far in this node's future.
pub const CLOCK_SKEW_SECS: u32 = 5;

/// The tracker's metrics.
mod m {
    use hotpath_metrics::Desc;

    pub static TORRENTS: Desc = Desc::gauge("hotpath_tracker_torrents", "Torrents tracked.");
    pub static PEERS: Desc = Desc::gauge(
        "hotpath_tracker_peers",
        "Peers tracked (both address families).",
    );
    pub static SEEDERS: Desc = Desc::gauge("hotpath_tracker_seeders", "Seeders tracked.");
    pub static LEECHERS: Desc = Desc::gauge("hotpath_tracker_leechers", "Leechers tracked.");
    pub static IDLE_TORRENTS: Desc = Desc::gauge(
        "hotpath_tracker_idle_torrents",
        "Torrents without peers whose completed counts are kept (tracker.max_idle_torrents).",
    );
    pub static ACCESS_LIST_SIZE: Desc = Desc::gauge(
        "hotpath_tracker_access_list_size",
        "Info hashes in the access list.",
    );
    pub static BAD_CONNECTION_IDS: Desc = Desc::counter(
        "hotpath_tracker_bad_connection_ids_total",
        "UDP requests with a forged or expired connection id.",
    );
    pub static ACCESS_REFUSED: Desc = Desc::counter(
        "hotpath_tracker_access_refused_total",
        "Requests refused by the access list.",
    );
    pub static PEERS_EXPIRED: Desc = Desc::counter(
        "hotpath_tracker_peers_expired_total",
        "Peers dropped by the expiry sweeper.",
    );
    pub static TORRENTS_FREED: Desc = Desc::counter(
        "hotpath_tracker_torrents_freed_total",
        "Empty torrents freed by the sweeper.",
    );
    pub static SWEEPS: Desc =
        Desc::counter("hotpath_tracker_sweeps_total", "Completed sweeper passes.");
    pub static ADDRESSES_IGNORED: Desc = Desc::counter(
        "hotpath_tracker_client_addresses_ignored_total",
        "ip= and ipv6= values left out (not accepted by the config, or not global unicast).",
    );
    pub static SNATCH_REPEATS: Desc = Desc::counter(
        "hotpath_tracker_snatch_repeats_total",
        "Completions not counted: the client address had completed the torrent within \
         tracker.peer_timeout_secs (a client flipping left between 0 and 1 counts once).",
    );
    pub static CAP_HITS: Desc = Desc::counter(
        "hotpath_tracker_cap_hits_total",
        "Times a swarm cap was met, by cap (tracker.max_*).",
    )
    .labels(&["cap"]);
}

/// Counters of what the tracker refused or expired (the server counts requests).
#[derive(Debug, Default)]
pub struct TrackerCounters {
    /// UDP requests with a forged or expired connection id.
    pub bad_connection_ids: Counter,
    /// Announces and scrape entries refused by the access list.
    pub access_refused: Counter,
    /// Peers dropped by the sweeper.
    pub peers_expired: Counter,
    /// Torrents freed by the sweeper.
    pub torrents_freed: Counter,
    /// Completed sweeper passes over all shards.
    pub sweeps: Counter,
    /// `ip=` or `ipv6=` values left out (not global unicast, or not accepted by the config).
    pub client_addresses_ignored: Counter,
}

/// State shared by every worker.
pub struct Shared {
    /// The tracker settings.
    pub cfg: hotpath_config::TrackerConfig,
    /// The swarm table.
    pub swarms: Box<dyn SwarmTable>,
    /// The access list.
    pub access: AccessList,
    /// UDP connection ids.
    pub conn_ids: ConnectionIds,
    /// Counters.
    pub counters: TrackerCounters,
    /// The write-behind store, when `store.enabled`.
    pub persist: Option<Arc<hotpath_store::Store>>,
    /// Unix seconds at process second 0, to stamp changes without a clock call per request.
    pub unix_base: i64,
    /// Where swarms are saved at shutdown and loaded at start (`tracker.persist_swarms`).
    pub swarms_dir: Option<std::path::PathBuf>,
    /// Seconds between reads of the access list's database rows, when that source is on.
    pub access_db_reload: Option<u32>,
    /// Private mode's users, torrents and rules (`tracker.mode = "private"`).
    pub private: Option<Arc<private::Private>>,
    /// Where a private tracker's ledger is saved at a graceful stop and loaded at start.
    pub ledger_dir: Option<std::path::PathBuf>,
    /// The settings announces and scrapes read, which a reload may change
    /// ([`Tracker::reconfigure`]), and their generation: each worker keeps a copy and takes
    /// the new one when the generation moves (one relaxed load a request).
    pub live: parking_lot::RwLock<Arc<hotpath_config::TrackerConfig>>,
    /// Moves on each change of `live`.
    pub live_gen: std::sync::atomic::AtomicU64,
    /// Cluster mode: the deltas this node has yet to publish to the others.
    pub exchange: Option<Arc<exchange::Exchange>>,
    /// WebTorrent swarms (peers over WebSocket), when `webtorrent.enabled`.
    pub webtorrent: Option<Arc<webtorrent::WebTorrent>>,
}

/// The swarm table's caps of `cfg`.
fn caps(cfg: &hotpath_config::TrackerConfig) -> Caps {
    Caps {
        max_torrents: cfg.max_torrents,
        max_peers: cfg.max_peers,
        max_peers_per_torrent: cfg.max_peers_per_torrent,
        max_peers_per_ip: cfg.max_peers_per_ip,
        max_peers_per_ip_48: cfg.max_peers_per_ip_48,
        max_idle_torrents: cfg.max_idle_torrents,
        max_torrents_per_address: cfg.max_torrents_per_address,
        max_torrents_per_48: cfg.max_torrents_per_48,
        max_peers_per_address: cfg.max_peers_per_address,
        max_peers_per_48: cfg.max_peers_per_48,
    }
}

/// `running` with the settings of `new` a reload may change in place (those announces and
/// scrapes read, and the swarm table's caps on growth); the keys that differ. The intervals
/// stay when they would reach the running `peer_timeout_secs` (peers would expire first).
fn reloaded(
    running: &hotpath_config::TrackerConfig,
    new: &hotpath_config::TrackerConfig,
) -> (hotpath_config::TrackerConfig, Vec<&'static str>) {
    let mut out = running.clone();
    let mut changed = Vec::new();
    macro_rules! take {
        ($($field:ident),*) => {$(
            if out.$field != new.$field {
                out.$field = new.$field.clone();
                changed.push(concat!("tracker.", stringify!($field)));
            }
        )*};
    }
    if new.interval_secs < running.peer_timeout_secs {
        take!(interval_secs, min_interval_secs, interval_jitter_percent);
    }
    take!(
        numwant_default,
        numwant_max,
        max_scrape_hashes,
        full_scrape,
        accept_ip_param,
        accept_ipv6_param,
        real_ip_header,
        trusted_proxies,
        max_torrents,
        max_peers,
        max_peers_per_torrent,
        max_peers_per_ip,
        max_peers_per_ip_48
    );
    (out, changed)
}

/// The tracker service.
pub struct Tracker {
    shared: Arc<Shared>,
}

impl Tracker {
    /// Builds the tracker without persistence; fails when the access list cannot be read.
    pub fn new(config: &Config) -> Result<Tracker, TrackerError> {
        Tracker::with_store(config, None)
    }

    /// Builds the tracker on an opened store: completed counts restored from it, completed
    /// downloads journaled and written behind.
    pub fn with_store(
        config: &Config,
        persist: Option<Arc<hotpath_store::Store>>,
    ) -> Result<Tracker, TrackerError> {
        Tracker::build(config, persist, None)
    }

    /// Builds the tracker as a node of a cluster (`cluster.enabled`): its peers carry the
    /// node they announced to, accepted announces are queued for the other nodes, and UDP
    /// connection ids are keyed by `connection_key` (from the cluster's shared secret), so
    /// every node accepts the ids any node issued.
    pub fn for_node(
        config: &Config,
        persist: Option<Arc<hotpath_store::Store>>,
        connection_key: [u8; 16],
    ) -> Result<Tracker, TrackerError> {
        Tracker::build(config, persist, Some(connection_key))
    }

    fn build(
        config: &Config,
        persist: Option<Arc<hotpath_store::Store>>,
        node_key: Option<[u8; 16]>,
    ) -> Result<Tracker, TrackerError> {
        let cfg = config.tracker.clone();
        let caps = caps(&cfg);
        let node = config.cluster.node_id;
        let swarms: Box<dyn SwarmTable> = match (node_key.is_some(), cfg.keep_peer_ids) {
            (false, true) => Box::new(Table::<20>::new(cfg.shards, caps)),
            (false, false) => Box::new(Table::<0>::new(cfg.shards, caps)),
            (true, true) => Box::new(Table::<20, 1>::new(cfg.shards, caps).with_origin(node)),
            (true, false) => Box::new(Table::<0, 1>::new(cfg.shards, caps).with_origin(node)),
        };
        let exchange = node_key.map(|_| {
            Arc::new(exchange::Exchange::new(
                node,
                config.cluster.max_pending_deltas,
            ))
        });
        let access = AccessList::load(config.access_list.mode, &config.access_list.path)?;
        // Started without the database, the counts come once it answers (below).
        if let Some(db) = persist.as_ref().filter(|db| db.online()) {
            let completed = db
                .with_replay(persist::completed_counts)
                .map_err(|source| TrackerError::Restore {
                    db: db.name.clone(),
                    source,
                })?;
            add_completed(&*swarms, cfg.max_idle_torrents, completed, &db.name);
        }
        let swarms_dir = (persist.is_some() && cfg.persist_swarms)
            .then(|| std::path::PathBuf::from(&config.store.data_dir));
        // The ids clients got from the process before this one stay good.
        let conn_ids = match (
            node_key,
            swarms_dir.as_deref().map(persist::load_connection_key),
        ) {
            (Some(key), _) => ConnectionIds::shared(key, CLOCK_SKEW_SECS),
            (None, Some(Ok(Some(ids)))) => ids,
            (None, Some(Err(e))) => {
                log::warn!("UDP connection ids: {e}; a new key");
                ConnectionIds::random()
            }
            _ => ConnectionIds::random(),
        };
        let al = &config.access_list;
        let access_db_reload = (al.database && al.mode != hotpath_config::AccessListMode::Off)
            .then_some(al.reload_secs);
        if let (Some(_), None) = (access_db_reload, &persist) {
            return Err(TrackerError::AccessNeedsStore);
        }
        let private = (cfg.mode == hotpath_config::TrackerMode::Private).then(|| {
            Arc::new(private::Private::new(
                &config.private,
                cfg.max_peers,
                cfg.peer_timeout_secs,
            ))
        });
        if let Some(p) = &private {
            let db = persist.as_ref().ok_or(TrackerError::PrivateNeedsStore)?;
            let dir = std::path::Path::new(&config.store.data_dir);
            let n = p
                .open_log(dir, hotpath_store::unix_now() as u32)
                .map_err(|source| TrackerError::PushLog {
                    path: dir.join(private::policy::PushLog::FILE),
                    source,
                })?
                .taken;
            if n > 0 {
                log::info!("private: {n} changes pushed before the restart applied again");
            }
            match persist::load_ledger(p, dir, cfg.peer_timeout_secs) {
                Ok(Some((peers, ago))) => log::info!(
                    "private: the ledger of {peers} clients restored (saved {ago} s ago): \
                     their next announces are credited"
                ),
                Ok(None) => {}
                // Clients are credited again from their second announce: not a reason to refuse.
                Err(e) => log::warn!("private: ledger not restored: {e}"),
            }
            if db.online() {
                let (users, torrents) = first_poll(p, db)?;
                log::info!(
                    "private: {users} users, {torrents} torrents from {}",
                    db.name
                );
            } else {
                log::warn!(
                    "private: every announce is refused until {} answers (users and torrents \
                     are read from it)",
                    db.name
                );
            }
        }
        let tracker = Tracker {
            shared: Arc::new(Shared {
                live: parking_lot::RwLock::new(Arc::new(cfg.clone())),
                live_gen: std::sync::atomic::AtomicU64::new(0),
                cfg,
                swarms,
                access,
                conn_ids,
                counters: TrackerCounters::default(),
                persist,
                unix_base: hotpath_store::unix_now() - i64::from(hotpath_service::process_secs()),
                swarms_dir,
                access_db_reload,
                ledger_dir: private
                    .as_ref()
                    .map(|_| std::path::PathBuf::from(&config.store.data_dir)),
                private,
                exchange,
                webtorrent: config
                    .webtorrent
                    .enabled
                    .then(|| Arc::new(webtorrent::WebTorrent::new(&config.webtorrent))),
            }),
        };
        match &tracker.shared.persist {
            Some(db) if !db.online() => {
                if access_db_reload.is_some() {
                    log::warn!(
                        "access list: only the file's entries until {} answers",
                        db.name
                    );
                }
                // Started without the database: what it holds is added once it answers.
                let shared = Arc::downgrade(&tracker.shared);
                db.on_connect(Box::new(move |db| {
                    let Some(shared) = shared.upgrade() else {
                        return;
                    };
                    match db.with_replay(persist::completed_counts) {
                        Ok(completed) => add_completed(
                            &*shared.swarms,
                            shared.cfg.max_idle_torrents,
                            completed,
                            &db.name,
                        ),
                        Err(e) => {
                            log::error!("completed counts not restored from {}: {e}", db.name)
                        }
                    }
                    if let Some(p) = &shared.private {
                        match first_poll(p, db) {
                            Ok((u, t)) => log::info!("private: {u} users, {t} torrents"),
                            Err(e) => log::error!("{e}; polled again in private.poll_secs"),
                        }
                    }
                    if shared.access_db_reload.is_some() {
                        match persist::reload_access_from_db(&shared) {
                            Ok(n) => log::info!("access list: {n} info hashes (file and database)"),
                            Err(e) => log::warn!("{e}; the list in force stays"),
                        }
                    }
                }));
            }
            _ if access_db_reload.is_some() => {
                let n = persist::reload_access_from_db(&tracker.shared)?;
                log::info!("access list: {n} info hashes (file and database)");
            }
            _ => {}
        }
        if let Some(dir) = &tracker.shared.swarms_dir {
            match persist::load_swarms(&tracker.shared, dir) {
                Ok(Some((t, p, ago))) => {
                    log::info!("swarms restored: {t} torrents, {p} peers (saved {ago} s ago)")
                }
                Ok(None) => {}
                // Swarms refill from announces within one interval: not a reason to refuse.
                Err(e) => log::warn!("swarms not restored: {e}"),
            }
        }
        Ok(tracker)
    }

    /// Saves what the next start loads, after the server has stopped: a private tracker's
    /// ledger, and every swarm when `tracker.persist_swarms` and the store are on.
    pub fn save(&self) {
        if let (Some(p), Some(dir)) = (&self.shared.private, &self.shared.ledger_dir) {
            match persist::save_ledger(p, dir) {
                Ok(n) => log::info!("private: the ledger of {n} clients saved"),
                Err(e) => log::error!("private: ledger not saved to {}: {e}", dir.display()),
            }
        }
        let Some(dir) = &self.shared.swarms_dir else {
            return;
        };
        match persist::save_swarms(&self.shared, dir) {
            Ok((t, p)) => log::info!("swarms saved: {t} torrents, {p} peers"),
            Err(e) => log::error!("swarms not saved to {}: {e}", dir.display()),
        }
        if self.shared.exchange.is_some() {
            // A node's key comes from the cluster's secret, not from this file.
            return;
        }
        if let Err(e) = persist::save_connection_key(&self.shared.conn_ids, dir) {
            log::error!(
                "UDP connection ids' key not saved to {}: {e}",
                dir.display()
            );
        }
    }

    /// The shared state (for tests and benchmarks that drive the swarm API directly).
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}

/// Reads every user and torrent once, on a connection of its own.
fn first_poll(
    p: &private::Private,
    db: &hotpath_store::Store,
) -> Result<(usize, usize), TrackerError> {
    let err = |cause| TrackerError::PrivateDb {
        db: db.name.clone(),
        cause,
    };
    let mut conn = db.connect().map_err(err)?;
    let held = p.poll(&mut *conn, true).map_err(err)?;
    if let Some(sql) = p.source.reset_counts(conn.dialect()) {
        conn.execute(&sql).map_err(err)?;
    }
    if let Some(sql) = p.source.clear_stale(conn.dialect()) {
        let before = hotpath_store::unix_now() - i64::from(p.peer_timeout());
        conn.execute_with(&sql, &[hotpath_store::table::Value::Int(before)])
            .map_err(err)?;
    }
    Ok(held)
}

/// Adds the completed counts the database holds (and the journal's replay) to the swarm
/// table; past `max_idle` torrents, keeps the counts scrapes are likeliest to ask for.
fn add_completed(
    store: &dyn SwarmTable,
    max_idle: usize,
    mut completed: Vec<(stored::Key, u64)>,
    db: &str,
) {
    if completed.len() > max_idle {
        completed.sort_unstable_by_key(|c| std::cmp::Reverse(c.1));
        completed.truncate(max_idle);
    }
    for (hash, n) in &completed {
        store.add_completed(hash, u32::try_from(*n).unwrap_or(u32::MAX));
    }
    if !completed.is_empty() {
        log::info!(
            "{} torrents' completed counts restored from {db}",
            completed.len()
        );
    }
}

/// Runs the expiry sweeper: one shard at a time, spreading one pass over all shards across
/// `sweep_interval_secs`, so no request waits for more than one shard's sweep.
fn sweeper(shared: Arc<Shared>, stop: Arc<AtomicBool>) {
    let shards = shared.swarms.shards();
    let pause = Duration::from_secs(u64::from(shared.cfg.sweep_interval_secs)) / shards as u32;
    let timeout = shared.cfg.peer_timeout_secs as u16;
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        let now = hotpath_service::process_secs() as u16;
        let (dropped, freed) = shared.swarms.sweep(i, now, timeout);
        let c = &shared.counters;
        c.peers_expired.add(dropped as u64);
        c.torrents_freed.add(freed as u64);
        i += 1;
        if i == shards {
            i = 0;
            c.sweeps.add(1);
            if let Some(w) = &shared.webtorrent {
                w.sweep(
                    hotpath_service::process_secs(),
                    shared.cfg.peer_timeout_secs,
                );
            }
            // The ledger forgets peers silent as long, one short lock per shard.
            if let Some(p) = &shared.private {
                let now = hotpath_service::process_secs();
                for s in 0..private::ledger::SHARDS {
                    p.ledger.sweep(s, now, shared.cfg.peer_timeout_secs);
                }
            }
        }
        std::thread::sleep(pause.max(Duration::from_millis(1)));
    }
}

impl Service for Tracker {
    fn reconfigure(&self, new: &Config) -> Vec<&'static str> {
        let mut live = self.shared.live.write();
        let (next, mut changed) = reloaded(&live, &new.tracker);
        if !changed.is_empty() {
            self.shared.swarms.set_caps(&caps(&next));
            *live = Arc::new(next);
            self.shared
                .live_gen
                .fetch_add(1, std::sync::atomic::Ordering::Release);
        }
        // A private tracker's settings, when it stays one of the same preset (else every
        // changed key waits for the restart).
        if let Some(p) = &self.shared.private {
            let same = new.tracker.mode == hotpath_config::TrackerMode::Private
                && new.private.schema == p.schema;
            if same {
                changed.extend(p.reconfigure(&new.private));
            }
        }
        changed
    }

    fn worker(&self, index: usize) -> Box<dyn ServiceWorker> {
        Box::new(handler::TrackerWorker::new(self.shared.clone(), index))
    }

    fn kinds(&self) -> Vec<Kind> {
        let mut kinds = vec![ANNOUNCE, SCRAPE, CONNECT];
        if self.shared.webtorrent.is_some() {
            kinds.extend([WS_ANNOUNCE, WS_SCRAPE]);
        }
        kinds
    }

    fn name(&self) -> &'static str {
        "tracker"
    }

    fn collect(&self, out: &mut Samples) {
        let t = self.shared.swarms.totals();
        let c = &self.shared.counters;
        let h = self.shared.swarms.cap_hits();
        let get = Counter::get;
        out.section("tracker")
            .add(&m::TORRENTS, t.torrents)
            .add(&m::PEERS, t.peers)
            .add(&m::SEEDERS, t.seeders)
            .add(&m::LEECHERS, t.peers - t.seeders)
            .add(&m::IDLE_TORRENTS, t.idle)
            .add(&m::ACCESS_LIST_SIZE, self.shared.access.len())
            .add(&m::BAD_CONNECTION_IDS, get(&c.bad_connection_ids))
            .add(&m::ACCESS_REFUSED, get(&c.access_refused))
            .add(&m::PEERS_EXPIRED, get(&c.peers_expired))
            .add(&m::TORRENTS_FREED, get(&c.torrents_freed))
            .add(&m::SWEEPS, get(&c.sweeps))
            .add(&m::ADDRESSES_IGNORED, get(&c.client_addresses_ignored))
            .add(&m::SNATCH_REPEATS, get(&h.snatch_repeats));
        for (cap, v) in [
            ("max_torrents", &h.torrents),
            ("max_peers", &h.peers),
            ("max_peers_per_torrent", &h.swarm),
            ("max_peers_per_ip", &h.address),
            ("max_idle_torrents", &h.idle_evicted),
            ("recent_snatches", &h.snatch_evicted),
            ("max_torrents_per_address", &h.owned),
            ("max_torrents_evicted", &h.evicted),
            ("max_peers_per_address", &h.spread),
        ] {
            out.labeled(&m::CAP_HITS, &[cap], get(v));
        }

        if let Some(p) = &self.shared.private {
            p.collect(out);
        }
        if let Some(w) = &self.shared.webtorrent {
            w.collect(out);
        }
    }

    fn reload(&self) -> Result<String, ReloadError> {
        // Private mode: the poller reads the users and torrents tables whole at once.
        let private = match &self.shared.private {
            Some(p) if self.shared.persist.is_some() => {
                p.reread();
                "; private users and torrents: read whole now"
            }
            _ => "",
        };
        if self.shared.access.mode() == hotpath_config::AccessListMode::Off {
            return Ok(format!("access list off{private}"));
        }
        let mut n = self.shared.access.reload()?;
        if self.shared.access_db_reload.is_some() {
            n = persist::reload_access_from_db(&self.shared)?;
        }
        Ok(format!("access list reloaded: {n} info hashes{private}"))
    }

    fn background(&self) -> Vec<Background> {
        let shared = self.shared.clone();
        let mut jobs = vec![Background::new("tracker-sweeper", move |stop| {
            sweeper(shared, stop)
        })];
        if self.shared.persist.is_some() {
            let shared = self.shared.clone();
            jobs.push(Background::new("tracker-snapshot", move |stop| {
                persist::snapshotter(shared, stop)
            }));
        }
        if self.shared.access_db_reload.is_some() {
            let shared = self.shared.clone();
            jobs.push(Background::new("access-list-reloader", move |stop| {
                persist::access_reloader(shared, stop)
            }));
        }
        if let (Some(p), Some(db)) = (&self.shared.private, &self.shared.persist) {
            let (p, db) = (p.clone(), db.clone());
            jobs.push(Background::new("private-poller", move |stop| {
                private::poller(p, db, stop)
            }));
        }
        jobs
    }
}
