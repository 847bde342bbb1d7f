//! hotpath's Lua routes, as OpenResty serves Lua on nginx: the config maps paths to scripts,
//! and each script's `handle(req)` answers with a status, headers and a body.
//!
//! Owns: one Lua 5.4 VM per worker, made on the worker's thread; every script compiled once
//! per VM (at start, and again only after a reload by SIGHUP, which is atomic: scripts that do
//! not compile or load are reported and the ones before keep serving); the per-request budget
//! of VM instructions and time (a runaway loop gets a 500, the worker goes on), the memory cap
//! per VM, and the `hp` API (`hp.shared`, `hp.json`, `hp.log`, `hp.now`, `hp.metrics`).
//! Must not: block a worker on anything but the script itself.
//!
//! Lua 5.4 rather than LuaJIT: LuaJIT does not run instruction hooks inside compiled traces
//! and cannot cap a VM's memory, so neither the budget nor the cap would hold there.

mod error;
mod hook;
pub mod json;
pub mod pattern;
mod raw;
mod req;
pub mod shared;
pub mod stored;
mod strlib;
pub mod tcp;
pub mod udp;
mod vm;

use hotpath_metrics::Counter;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hotpath_config::LuaConfig;
use hotpath_service::{
    Context, Handled, HttpResponse, Kind, Outcome, ReloadError, Request, Samples, Service,
    ServiceWorker,
};
use parking_lot::{Mutex, RwLock};
use vm::MAX_SCRIPT_BYTES;

use hotpath_store::{JournalWriter, Store};

use crate::shared::SharedDict;
use crate::tcp::{PoolSettings, TcpCounters, TcpHandle};
use crate::udp::{UdpCounters, UdpPool};
use crate::vm::{Env, Failure, Limits, Parked, Script, Step, Vm};

/// A request a Lua route answered.
pub const LUA: Kind = Kind::http("lua");

/// The Lua routes' metrics.
mod m {
    use hotpath_metrics::Desc;

    pub static REQUESTS: Desc = Desc::counter(
        "hotpath_lua_requests_total",
        "Requests a Lua route answered (errors included).",
    );
    pub static FAILURES: Desc = Desc::counter(
        "hotpath_lua_failures_total",
        "Requests a Lua route failed with a 500, by reason.",
    )
    .labels(&["reason"]);
    pub static COMPILES: Desc = Desc::counter(
        "hotpath_lua_compiles_total",
        "Scripts compiled into a worker's VM (at start and on reloads, never per request).",
    );
    pub static RELOADS: Desc = Desc::counter(
        "hotpath_lua_reloads_total",
        "Script reloads (SIGHUP), by result.",
    )
    .labels(&["result"]);
    pub static MEMORY_BYTES: Desc = Desc::gauge(
        "hotpath_lua_memory_bytes",
        "Bytes the workers' Lua VMs hold.",
    );
    pub static SHARED_KEYS: Desc = Desc::gauge("hotpath_lua_shared_keys", "Keys in hp.shared.");
    pub static SHARED_BYTES: Desc = Desc::gauge(
        "hotpath_lua_shared_bytes",
        "Bytes of hp.shared's keys and values.",
    );
    pub static SHARED_EVICTIONS: Desc = Desc::counter(
        "hotpath_lua_shared_evictions_total",
        "Keys hp.shared dropped to stay within its bounds.",
    );
    pub static UDP_SOCKETS_OPENED: Desc = Desc::counter(
        "hotpath_lua_udp_sockets_opened_total",
        "UDP sockets hp.udp.send opened (pooled: one per worker and remote).",
    );
    pub static UDP_SOCKETS: Desc =
        Desc::gauge("hotpath_lua_udp_sockets", "UDP sockets open in the pools.");
    pub static TCP_REQUESTS: Desc = Desc::counter(
        "hotpath_lua_tcp_requests_total",
        "hp.tcp.request exchanges, by result.",
    )
    .labels(&["result"]);
    pub static TCP_CONNECTIONS_OPENED: Desc = Desc::counter(
        "hotpath_lua_tcp_connections_opened_total",
        "TCP connections hp.tcp.request opened (pooled, reused).",
    );
    pub static UDP_MESSAGES: Desc = Desc::counter(
        "hotpath_lua_udp_messages_total",
        "Messages hp.udp.send was given, by result.",
    )
    .labels(&["result"]);
    pub static USER_COUNTERS: Desc = Desc::counter(
        "hotpath_lua_counter_total",
        "Counters the scripts keep (hp.metrics.incr).",
    )
    .labels(&["name"]);
}

pub use crate::error::LuaError;
pub use crate::vm::{json_decode, json_encode};

/// Journal numbers of the Lua workers (the tracker's are 0.., the popup service's 65536..).
pub const JOURNAL_BASE: u32 = 2 << 16;
/// The most names `hp.metrics.incr` may count.
const MAX_USER_COUNTERS: usize = 1000;
/// Script errors each worker logs per second at most (the rest are counted).
const LOGS_PER_SEC: u32 = 10;

/// The service's counters.
#[derive(Default)]
pub struct Counters {
    /// Requests a script answered.
    pub requests: Counter,
    /// Scripts compiled (per VM: scripts × workers at start, again on every reload).
    pub compiles: Counter,
    /// Requests failed by a script error.
    pub errors: Counter,
    /// Requests stopped at their instruction or time budget.
    pub over_budget: Counter,
    /// Requests failed for want of memory.
    pub out_of_memory: Counter,
    /// Reloads that took, and that were refused.
    pub reloads: Counter,
    /// Reloads refused (the scripts before kept serving).
    pub reload_failures: Counter,
    /// Bytes each worker's VM held when it last said.
    memory: Mutex<BTreeMap<usize, u64>>,
    /// The scripts' own counters (`hp.metrics.incr`).
    user: Mutex<BTreeMap<String, u64>>,
}

impl Counters {
    fn user_incr(&self, name: &str, by: u64) -> Result<(), String> {
        let mut user = self.user.lock();
        if let Some(n) = user.get_mut(name) {
            *n = n.saturating_add(by);
            return Ok(());
        }
        if user.len() >= MAX_USER_COUNTERS {
            return Err(format!(
                "hp.metrics.incr: at most {MAX_USER_COUNTERS} names; {name:?} is one too many"
            ));
        }
        user.insert(name.to_string(), by);
        Ok(())
    }
}

/// Which route serves a path: exact paths first, then the longest prefix.
struct Router {
    exact: HashMap<String, usize>,
    /// (prefix, route), longest first.
    prefixes: Vec<(String, usize)>,
    /// Per route: the methods allowed (empty: any) and the `Allow` header for a 405.
    methods: Vec<(Vec<String>, String)>,
}

impl Router {
    fn new(cfg: &LuaConfig) -> Router {
        let mut exact = HashMap::new();
        let mut prefixes = Vec::new();
        for (i, r) in cfg.routes.iter().enumerate() {
            if r.prefix {
                prefixes.push((r.path.clone(), i));
            } else {
                exact.insert(r.path.clone(), i);
            }
        }
        prefixes.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
        let methods = cfg
            .routes
            .iter()
            .map(|r| {
                (
                    r.methods.clone(),
                    format!("Allow: {}\r\n", r.methods.join(", ")),
                )
            })
            .collect();
        Router {
            exact,
            prefixes,
            methods,
        }
    }

    fn route(&self, path: &str) -> Option<usize> {
        if let Some(&i) = self.exact.get(path) {
            return Some(i);
        }
        self.prefixes
            .iter()
            .find(|(p, _)| path.starts_with(p.as_str()))
            .map(|&(_, i)| i)
    }
}

struct Inner {
    router: Router,
    paths: Vec<String>,
    files: Vec<String>,
    scripts: RwLock<Arc<Vec<Script>>>,
    generation: AtomicU64,
    shared: Arc<SharedDict>,
    counters: Arc<Counters>,
    limits: Limits,
    debug_errors: bool,
    udp: Arc<UdpCounters>,
    udp_max_sockets: usize,
    udp_idle: Duration,
    store: Option<Arc<Store>>,
    tcp: Arc<TcpCounters>,
    tcp_settings: PoolSettings,
    tcp_timeout: Duration,
    unsafe_stdlib: bool,
    module_dir: std::path::PathBuf,
}

impl Inner {
    fn env(&self) -> Env {
        Env {
            shared: self.shared.clone(),
            counters: self.counters.clone(),
            limits: self.limits,
            udp: self.udp.clone(),
            unsafe_stdlib: self.unsafe_stdlib,
            module_dir: self.module_dir.clone(),
            watched: true,
        }
    }

    fn pool(&self) -> Rc<RefCell<UdpPool>> {
        Rc::new(RefCell::new(UdpPool::new(
            self.udp_max_sockets,
            self.udp_idle,
        )))
    }

    /// Reads every script and loads them into a VM of their own (which is then dropped):
    /// what a worker would meet, found before any worker meets it.
    fn read_and_check(&self) -> Result<Vec<Script>, LuaError> {
        let scripts = self
            .files
            .iter()
            .map(|f| self.read(f))
            .collect::<Result<Vec<_>, _>>()?;
        Vm::new(&scripts, &self.check_env(), self.pool(), None, None)?;
        Ok(scripts)
    }

    fn read(&self, f: &str) -> Result<Script, LuaError> {
        let source = hotpath_config::file::read_bounded(std::path::Path::new(f), MAX_SCRIPT_BYTES)
            .map_err(|source| LuaError::Read {
                path: f.to_string(),
                source,
            })?;
        Ok(Script {
            name: f.to_string(),
            source,
        })
    }

    /// The environment of a VM that only checks: it counts (compiles, hp.metrics) apart from
    /// the workers'.
    fn check_env(&self) -> Env {
        Env {
            counters: Arc::new(Counters::default()),
            udp: Arc::new(UdpCounters::default()),
            watched: false,
            ..self.env()
        }
    }
}

/// The Lua routes.
pub struct LuaService {
    inner: Arc<Inner>,
}

impl LuaService {
    /// Reads and checks every script of `cfg`'s routes; an error names the script. With a
    /// store, `hp.store` writes behind to it.
    pub fn new(cfg: &LuaConfig, store: Option<Arc<Store>>) -> Result<LuaService, LuaError> {
        let inner = Inner::new(cfg, store);
        if cfg.unsafe_stdlib && !cfg.routes.is_empty() {
            log::warn!(
                "lua.unsafe_stdlib = true: scripts can read and write files, run programs, read \
                 the environment and end the server (io, os, require of any path, bytecode)"
            );
        }
        let scripts = inner.read_and_check()?;
        *inner.scripts.write() = Arc::new(scripts);
        Ok(LuaService {
            inner: Arc::new(inner),
        })
    }

    /// Every problem `cfg`'s scripts would stop a start with, found with nothing started
    /// (no store, no socket): each script read and loaded into a VM of its own, then, when
    /// each loads, all of them into one as a worker would. Each error comes with the index of
    /// the first route that names its script.
    pub fn check(cfg: &LuaConfig) -> Vec<(usize, LuaError)> {
        let inner = Inner::new(cfg, None);
        let env = inner.check_env();
        let mut errors = Vec::new();
        for (i, f) in inner.files.iter().enumerate() {
            if inner.files[..i].contains(f) {
                continue;
            }
            let loaded = inner
                .read(f)
                .and_then(|script| Vm::new(&[script], &env, inner.pool(), None, None).map(drop));
            if let Err(e) = loaded {
                errors.push((i, e));
            }
        }
        if errors.is_empty() {
            if let Err(e) = inner.read_and_check() {
                let i = match &e {
                    LuaError::Script { script, .. } => {
                        inner.files.iter().position(|f| f == script).unwrap_or(0)
                    }
                    _ => 0,
                };
                errors.push((i, e));
            }
        }
        errors
    }

    /// The service's counters.
    pub fn counters(&self) -> &Counters {
        &self.inner.counters
    }
}

impl Inner {
    fn new(cfg: &LuaConfig, store: Option<Arc<Store>>) -> Inner {
        let mb = |m: u64| usize::try_from(m << 20).unwrap_or(usize::MAX);
        Inner {
            router: Router::new(cfg),
            paths: cfg.routes.iter().map(|r| r.path.clone()).collect(),
            files: cfg.routes.iter().map(|r| r.script.clone()).collect(),
            scripts: RwLock::new(Arc::new(Vec::new())),
            generation: AtomicU64::new(0),
            shared: Arc::new(SharedDict::new(cfg.shared_max_keys, mb(cfg.shared_max_mb))),
            counters: Arc::new(Counters::default()),
            limits: Limits {
                instructions: cfg.max_instructions,
                time: Duration::from_millis(cfg.max_ms),
                memory: mb(cfg.max_memory_mb),
            },
            debug_errors: cfg.debug_errors,
            udp: Arc::new(UdpCounters::default()),
            udp_max_sockets: cfg.udp_max_sockets,
            udp_idle: Duration::from_secs(cfg.udp_idle_secs),
            store,
            tcp: Arc::new(TcpCounters::default()),
            tcp_settings: PoolSettings {
                max_idle: cfg.tcp_max_idle,
                idle: Duration::from_secs(cfg.tcp_idle_secs),
                max_waiting: cfg.tcp_max_waiting,
            },
            tcp_timeout: Duration::from_millis(cfg.tcp_timeout_ms),
            unsafe_stdlib: cfg.unsafe_stdlib,
            module_dir: match (&cfg.module_dir[..], cfg.routes.first()) {
                ("", Some(r)) => std::path::Path::new(&r.script)
                    .parent()
                    .map(std::path::Path::to_path_buf)
                    .unwrap_or_default(),
                (dir, _) => dir.into(),
            },
        }
    }
}

impl Service for LuaService {
    fn worker(&self, index: usize) -> Box<dyn ServiceWorker> {
        let inner = self.inner.clone();
        let generation = inner.generation.load(Ordering::Acquire);
        let scripts = inner.scripts.read().clone();
        let pool = inner.pool();
        let journal = inner
            .store
            .as_ref()
            .map(|s| Rc::new(RefCell::new(s.writer(JOURNAL_BASE + index as u32))));
        let tcp = Rc::new(RefCell::new(TcpHandle::new(
            index,
            inner.tcp_settings,
            inner.tcp.clone(),
            inner.tcp_timeout,
        )));
        let vm = match Vm::new(
            &scripts,
            &inner.env(),
            pool.clone(),
            journal.clone(),
            Some(tcp.clone()),
        ) {
            Ok(vm) => Some(Rc::new(vm)),
            Err(e) => {
                log::error!(
                    "lua: worker {index} cannot load the scripts: {e}; its Lua routes answer 500"
                );
                None
            }
        };
        Box::new(LuaWorker {
            inner,
            index,
            generation,
            vm,
            pool,
            journal,
            tcp,
            parked: HashMap::new(),
            served: 0,
            log_second: 0,
            logged: 0,
        })
    }

    fn name(&self) -> &'static str {
        "lua"
    }

    fn kinds(&self) -> Vec<Kind> {
        vec![LUA]
    }

    fn collect(&self, out: &mut Samples) {
        let c = &self.inner.counters;
        let g = Counter::get;
        let shared = &self.inner.shared;
        let (udp, tcp) = (&self.inner.udp, &self.inner.tcp);
        out.section("lua")
            .add(&m::REQUESTS, g(&c.requests))
            .labeled(&m::FAILURES, &["error"], g(&c.errors))
            .labeled(&m::FAILURES, &["budget"], g(&c.over_budget))
            .labeled(&m::FAILURES, &["memory"], g(&c.out_of_memory))
            .add(&m::COMPILES, g(&c.compiles))
            .labeled(&m::RELOADS, &["ok"], g(&c.reloads))
            .labeled(&m::RELOADS, &["refused"], g(&c.reload_failures))
            .add(&m::MEMORY_BYTES, c.memory.lock().values().sum::<u64>())
            .add(&m::SHARED_KEYS, shared.len())
            .add(&m::SHARED_BYTES, shared.bytes())
            .add(&m::SHARED_EVICTIONS, g(&shared.evictions))
            .add(&m::UDP_SOCKETS_OPENED, g(&udp.opened))
            .add(&m::UDP_SOCKETS, g(&udp.open))
            .labeled(&m::TCP_REQUESTS, &["ok"], g(&tcp.ok))
            .labeled(&m::TCP_REQUESTS, &["error"], g(&tcp.errors))
            .labeled(&m::TCP_REQUESTS, &["timeout"], g(&tcp.timeouts))
            .labeled(&m::TCP_REQUESTS, &["refused"], g(&tcp.refused))
            .add(&m::TCP_CONNECTIONS_OPENED, g(&tcp.opened))
            .labeled(&m::UDP_MESSAGES, &["sent"], g(&udp.sent))
            .labeled(&m::UDP_MESSAGES, &["dropped"], g(&udp.dropped))
            .labeled(&m::UDP_MESSAGES, &["error"], g(&udp.errors));
        for (name, n) in c.user.lock().iter() {
            out.labeled(&m::USER_COUNTERS, &[name], *n);
        }
    }

    fn reload(&self) -> Result<String, ReloadError> {
        let inner = &self.inner;
        match inner.read_and_check() {
            Ok(scripts) => {
                let n = scripts.len();
                *inner.scripts.write() = Arc::new(scripts);
                inner.generation.fetch_add(1, Ordering::AcqRel);
                inner.counters.reloads.add(1);
                Ok(format!("lua: {n} scripts reloaded"))
            }
            Err(e) => {
                inner.counters.reload_failures.add(1);
                Err(e.into())
            }
        }
    }
}

/// A parked request: the VM its coroutine lives in (kept even if a reload replaced it), the
/// coroutine, its route, and what the request was (so a new request on a reused address is
/// never taken for it).
struct Waiting {
    vm: Rc<Vm>,
    parked: Parked,
    route: usize,
    fingerprint: u64,
}

fn fingerprint(req: &Request<'_, '_>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (req.method, req.path, req.query, req.body).hash(&mut h);
    h.finish()
}

struct LuaWorker {
    inner: Arc<Inner>,
    index: usize,
    /// The scripts' generation this worker's VM runs.
    generation: u64,
    vm: Option<Rc<Vm>>,
    /// This worker's TCP thread and pool (`hp.tcp.request`).
    tcp: Rc<RefCell<TcpHandle>>,
    /// Requests waiting for a TCP answer, by connection (a connection has at most one: the
    /// server reads nothing more from it meanwhile).
    parked: HashMap<std::net::SocketAddr, Waiting>,
    /// This worker's UDP sockets: they outlive a reload's new VM.
    pool: Rc<RefCell<UdpPool>>,
    /// This worker's journal (`hp.store`), when the store is on.
    journal: Option<Rc<RefCell<JournalWriter>>>,
    served: u64,
    log_second: u32,
    logged: u32,
}

impl LuaWorker {
    /// Moves to the scripts of the latest reload: a new VM, every script compiled once.
    fn catch_up(&mut self) {
        let generation = self.inner.generation.load(Ordering::Acquire);
        if generation == self.generation {
            return;
        }
        self.generation = generation;
        let scripts = self.inner.scripts.read().clone();
        match Vm::new(
            &scripts,
            &self.inner.env(),
            self.pool.clone(),
            self.journal.clone(),
            Some(self.tcp.clone()),
        ) {
            Ok(vm) => self.vm = Some(Rc::new(vm)),
            Err(e) => log::error!(
                "lua: worker {} cannot load the reloaded scripts ({e}); it keeps the ones before",
                self.index
            ),
        }
    }

    fn log_failure(&mut self, now: u32, path: &str, what: &str) {
        if self.log_second != now {
            self.log_second = now;
            self.logged = 0;
        }
        self.logged += 1;
        if self.logged <= LOGS_PER_SEC {
            log::error!("lua: {path}: {what}");
        } else if self.logged == LOGS_PER_SEC + 1 {
            log::error!(
                "lua: worker {}: more script failures this second are counted, not logged",
                self.index
            );
        }
    }
}

impl ServiceWorker for LuaWorker {
    fn http(
        &mut self,
        req: &Request<'_, '_>,
        ctx: &Context,
        resp: &mut HttpResponse,
    ) -> Option<Handled> {
        let route = self.inner.router.route(req.path)?;
        let (methods, allow) = &self.inner.router.methods[route];
        if !methods.is_empty() && !methods.iter().any(|m| m == req.method) {
            resp.status = 405;
            resp.extra_headers.extend_from_slice(allow.as_bytes());
            resp.body.extend_from_slice(b"method not allowed\n");
            return Some(Handled::Answered(LUA, Outcome::Refused));
        }
        // Most workers never park: no lookup, no fingerprint then.
        let waiting = if self.parked.is_empty() {
            None
        } else {
            self.parked.remove(&ctx.peer)
        };
        let step = match waiting {
            Some(w) if w.fingerprint == fingerprint(req) => {
                let Some(result) = self.tcp.borrow().take(w.parked.job) else {
                    self.parked.insert(ctx.peer, w);
                    return Some(Handled::Parked);
                };
                let (vm, route) = (w.vm.clone(), w.route);
                (vm.resume(w.parked, result, resp), vm, route)
            }
            // A stale entry (its connection went; the address came back): forget it.
            _ => {
                self.catch_up();
                self.inner.counters.requests.add(1);
                let Some(vm) = self.vm.clone() else {
                    resp.status = 500;
                    resp.body
                        .extend_from_slice(b"internal error: the scripts did not load\n");
                    return Some(Handled::Answered(LUA, Outcome::Refused));
                };
                (vm.handle(route, req, ctx.peer, resp), vm, route)
            }
        };
        let (result, vm, route) = step;
        let c = &self.inner.counters;
        self.served += 1;
        if self.served % 1024 == 1 {
            c.memory.lock().insert(self.index, vm.memory() as u64);
        }
        match result {
            Ok(Step::Done) => {
                let outcome = if resp.status < 400 {
                    Outcome::Ok
                } else {
                    Outcome::Refused
                };
                Some(Handled::Answered(LUA, outcome))
            }
            Ok(Step::Waiting(parked)) => {
                resp.reset();
                if self.parked.len() >= 2 * self.inner.tcp_settings.max_waiting {
                    // Connections that closed while they waited are never asked again: drop
                    // those whose answer came and was not collected.
                    let tcp = self.tcp.borrow();
                    self.parked.retain(|_, w| tcp.take(w.parked.job).is_none());
                }
                self.parked.insert(
                    ctx.peer,
                    Waiting {
                        vm,
                        parked,
                        route,
                        fingerprint: fingerprint(req),
                    },
                );
                Some(Handled::Parked)
            }
            Err(f) => {
                let (counter, what) = match &f {
                    Failure::Error(e) => (&c.errors, e),
                    Failure::Budget(e) => (&c.over_budget, e),
                    Failure::Memory(e) => (&c.out_of_memory, e),
                };
                counter.add(1);
                let what = what.clone();
                let path = self.inner.paths[route].clone();
                self.log_failure(ctx.now, &path, &what);
                resp.status = 500;
                resp.content_type = "text/plain";
                resp.extra_headers.clear();
                resp.body.clear();
                if self.inner.debug_errors {
                    resp.body.extend_from_slice(what.as_bytes());
                    resp.body.push(b'\n');
                } else {
                    resp.body.extend_from_slice(b"internal error\n");
                }
                Some(Handled::Answered(LUA, Outcome::Refused))
            }
        }
    }

    fn set_wake(&mut self, wake: hotpath_service::Wake) {
        *self.tcp.borrow().wake.lock() = Some(wake);
    }

    fn udp(&mut self, _packet: &[u8], _ctx: &Context, _out: &mut Vec<u8>) -> (Kind, Outcome) {
        (Kind::OTHER, Outcome::Dropped)
    }

    fn uncommitted(&self) -> bool {
        self.journal
            .as_ref()
            .is_some_and(|j| j.borrow().uncommitted())
    }

    fn commit(&mut self) -> bool {
        self.journal
            .as_ref()
            .is_none_or(|j| j.borrow_mut().commit().is_ok())
    }
}
