//! hotpath's network server: one worker thread per core, each with its own SO_REUSEPORT TCP
//! listeners and UDP sockets and its own event loop ([`worker`]); HTTP/1.1 with keep-alive and
//! pipelining; batched UDP ([`udp`]); admin endpoints; start-up host checks ([`host`]); signals
//! and drained shutdown.
//!
//! Owns: sockets, connection state, timers, framing, request metrics. Must not: know any
//! service's rules (services plug in through `hotpath_service::Service`).

pub mod access_log;
pub mod host;
pub mod limits;
pub mod listen;
pub mod metrics;
pub mod statsd;
pub mod tls;
pub mod udp;
pub mod upgrade;
pub mod worker;
pub mod ws;

/// Bytes of relayed WebSocket messages one worker's inbox holds at most (64 MiB): a worker
/// that falls this far behind has relays dropped, counted, rather than memory grow.
const WS_INBOX_BYTES: usize = 64 << 20;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use hotpath_config::{effective_workers, Config, UdpIo};
use hotpath_service::{process_secs, Service};

use listen::{Addresses, ListenerKind};
use metrics::WorkerMetrics;
use worker::{Setup, Shared, Worker};

/// Server errors, by what failed.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A socket could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// Another hotpath process serves the port.
    #[error("cannot listen on {addr}: port {port}/{proto} is already served by another hotpath process{}; stop it first or choose another port in [listen]", .pid.map(|p| format!(" (pid {p})")).unwrap_or_default())]
    PortTaken {
        /// The address.
        addr: SocketAddr,
        /// "tcp" or "udp".
        proto: &'static str,
        /// The port.
        port: u16,
        /// The other process, when the kernel tells.
        pid: Option<i32>,
    },
    /// `server.udp_io = "io_uring"` on a kernel that does not allow it.
    #[error("server.udp_io = \"io_uring\", but this kernel does not let hotpath use io_uring ({0}); set it to \"auto\" or \"epoll\"")]
    NoIoUring(std::io::Error),
    /// The access log's file could not be opened.
    #[error("log.access_log: cannot open {}: {source}", .path.display())]
    AccessLog {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Some other start-up step failed.
    #[error("cannot start: {0}")]
    Start(#[from] std::io::Error),
    /// A worker or background thread died.
    #[error("thread {0} died; stopping")]
    ThreadDied(String),
    /// The HTTPS listeners' certificate or key could not be used.
    #[error("listen.https: {0}")]
    Tls(#[from] tls::TlsError),
}

/// A started server: its bound addresses and the means to stop it.
pub struct RunningServer {
    addrs: Addresses,
    stop: Arc<AtomicBool>,
    wakers: Vec<Arc<mio::Waker>>,
    threads: Vec<JoinHandle<()>>,
    died: Receiver<String>,
    service: Arc<dyn Service>,
    /// The access log writer's handle, when it writes.
    reopen: Option<access_log::Reopen>,
    /// Duplicates of the sockets and port guards, for a binary upgrade.
    handover: upgrade::Handover,
    /// What the workers share (the settings a reload changes in place among it).
    shared: Arc<Shared>,
    /// The ports this process holds against a second hotpath (see [`listen::PortGuard`]).
    _ports: Vec<listen::PortGuard>,
}

/// Tells the supervisor when a thread ends by panicking (or returning an error).
struct DeathNotice {
    name: String,
    tx: mpsc::Sender<String>,
    clean: bool,
}

impl Drop for DeathNotice {
    fn drop(&mut self) {
        if !self.clean || std::thread::panicking() {
            let _ = self.tx.send(self.name.clone());
        }
    }
}

/// The ports claimed so far at start-up (a port bound twice, e.g. on 0.0.0.0 and [::], is
/// claimed once).
#[derive(Default)]
struct Ports {
    claimed: Vec<(&'static str, u16)>,
    guards: Vec<listen::PortGuard>,
    /// What a binary upgrade handed this process: taken before anything is bound anew.
    inherited: upgrade::Inherited,
}

impl Ports {
    fn claim(&mut self, proto: &'static str, addr: SocketAddr) -> Result<(), ServerError> {
        let key = (proto, addr.port());
        if self.claimed.contains(&key) {
            return Ok(());
        }
        if let Some(guard) = self.inherited.take_guard(proto, addr.port()) {
            self.claimed.push(key);
            self.guards.push(guard);
            return Ok(());
        }
        match listen::claim_port(proto, addr.port()) {
            Ok(guard) => {
                self.claimed.push(key);
                self.guards.push(guard);
                Ok(())
            }
            Err(listen::Claim::Taken(pid)) => Err(ServerError::PortTaken {
                addr,
                proto,
                port: addr.port(),
                pid,
            }),
            Err(listen::Claim::Io(source)) => Err(ServerError::Bind { addr, source }),
        }
    }
}

/// How many ports a port-0 address draws before a port another hotpath holds is an error.
const PORT_DRAWS: u32 = 16;

/// Binds `addr` once, for the first worker, so port 0 resolves to a concrete port that every
/// other worker then shares, and claims that port for `proto` (see [`listen::claim_port`]).
/// `None` when `addr` is `optional` (an IPv6 twin) and cannot be bound, which `what` names
/// in the log.
///
/// The kernel hands out a port bound with SO_REUSEPORT to another socket of the same user as
/// readily as a free one, so port 0 can land on a port another server (in this process or
/// another) serves: then another port is drawn, up to [`PORT_DRAWS`] times. A configured
/// port another hotpath holds is an error at once.
fn first_claimed<T>(
    ports: &mut Ports,
    proto: &'static str,
    what: &str,
    (addr, optional): (SocketAddr, bool),
    bind: impl Fn(&mut Ports, SocketAddr) -> std::io::Result<T>,
    local: impl Fn(&T) -> std::io::Result<SocketAddr>,
) -> Result<Option<(T, SocketAddr)>, ServerError> {
    let mut draws = 0;
    loop {
        let s = match bind(ports, addr) {
            Ok(s) => s,
            Err(e) if optional => {
                log::info!("no IPv6 {what}: {}", ServerError::Bind { addr, source: e });
                return Ok(None);
            }
            Err(source) => return Err(ServerError::Bind { addr, source }),
        };
        let resolved = local(&s)?;
        match ports.claim(proto, resolved) {
            Err(ServerError::PortTaken { .. }) if addr.port() == 0 && draws < PORT_DRAWS => {
                draws += 1;
            }
            claimed => return claimed.map(|()| Some((s, resolved))),
        }
    }
}

/// Every socket of every worker, bound, and each worker's poll: what [`RunningServer::start`]
/// needs before it spawns a thread.
struct Bound {
    addrs: Addresses,
    ports: Ports,
    setups: Vec<Setup>,
    wakers: Vec<Arc<mio::Waker>>,
    handover: upgrade::Handover,
}

/// Whether the UDP workers use io_uring, as `server.udp_io` asks and the kernel allows.
fn ring_wanted(io: UdpIo) -> Result<bool, ServerError> {
    if io == UdpIo::Epoll {
        log::info!("UDP: epoll with recvmmsg/sendmmsg (server.udp_io = \"epoll\")");
        return Ok(false);
    }
    match hotpath_uring::available() {
        Ok(()) => {
            log::info!("UDP: io_uring");
            Ok(true)
        }
        Err(e) if io == UdpIo::IoUring => Err(ServerError::NoIoUring(e)),
        Err(e) => {
            log::info!("UDP: epoll with recvmmsg/sendmmsg (io_uring is not available: {e})");
            Ok(false)
        }
    }
}

/// Binds the first worker's sockets (port 0 resolves there), then every other worker's on the
/// resolved addresses, and makes each worker's poll.
fn bind(
    config: &Config,
    workers: usize,
    inherited: upgrade::Inherited,
) -> Result<Bound, ServerError> {
    let cfg = &config.server;
    let mut ports = Ports {
        inherited,
        ..Ports::default()
    };
    // A socket the process before this one handed over, else a new one.
    let tcp_on = |ports: &mut Ports, a: SocketAddr| match ports.inherited.take_tcp(a) {
        Some(l) => l.set_nonblocking(true).map(|()| l),
        None => listen::tcp_listener(a, cfg.backlog),
    };
    let udp_on = |ports: &mut Ports, a: SocketAddr| match ports.inherited.take_udp(a) {
        Some(s) => s.set_nonblocking(true).map(|()| s),
        None => listen::udp_socket(a, cfg.udp_recv_buffer, cfg.udp_send_buffer),
    };
    let mut addrs = Addresses::default();
    let mut first_tcp = Vec::new();
    let mut first_udp = Vec::new();
    let tcp_wanted = listen::with_ipv6(&config.listen.http, config.listen.ipv6)
        .into_iter()
        .map(|(a, v6)| (a, v6, ListenerKind::Http))
        .chain(
            listen::with_ipv6(&config.listen.https, config.listen.ipv6)
                .into_iter()
                .map(|(a, v6)| (a, v6, ListenerKind::Https)),
        )
        .chain(
            config
                .listen
                .admin
                .iter()
                .map(|a| (*a, false, ListenerKind::Admin)),
        );
    for (addr, optional, kind) in tcp_wanted {
        let first = first_claimed(
            &mut ports,
            "tcp",
            "listener",
            (addr, optional),
            tcp_on,
            |l| l.local_addr(),
        )?;
        if let Some((l, resolved)) = first {
            first_tcp.push((mio::net::TcpListener::from_std(l), kind));
            addrs.tcp.push((resolved, kind));
        }
    }
    for wanted in listen::with_ipv6(&config.listen.udp, config.listen.ipv6) {
        let first = first_claimed(&mut ports, "udp", "UDP socket", wanted, udp_on, |s| {
            s.local_addr()
        })?;
        if let Some((s, resolved)) = first {
            first_udp.push(mio::net::UdpSocket::from_std(s));
            addrs.udp.push(resolved);
        }
    }

    let mut setups = Vec::with_capacity(workers);
    let mut wakers = Vec::with_capacity(workers);
    for index in 0..workers {
        let (tcp, udp) = if index == 0 {
            (
                std::mem::take(&mut first_tcp),
                std::mem::take(&mut first_udp),
            )
        } else {
            let mut tcp = Vec::new();
            for &(addr, kind) in &addrs.tcp {
                let l = tcp_on(&mut ports, addr)
                    .map_err(|source| ServerError::Bind { addr, source })?;
                tcp.push((mio::net::TcpListener::from_std(l), kind));
            }
            let mut udp = Vec::new();
            for &addr in &addrs.udp {
                let s = udp_on(&mut ports, addr)
                    .map_err(|source| ServerError::Bind { addr, source })?;
                udp.push(mio::net::UdpSocket::from_std(s));
            }
            (tcp, udp)
        };
        let poll = mio::Poll::new()?;
        let waker = Arc::new(worker::waker(&poll)?);
        wakers.push(waker.clone());
        setups.push(Setup {
            index,
            poll,
            waker,
            tcp,
            udp,
        });
    }
    // Handed over with more workers than this process has: the extra sockets of an address
    // go to the workers in turn (each is still read, or what the kernel queued on it would
    // wait for ever). Those of an address the config no longer names close once the process
    // before this one has exited.
    for &(addr, kind) in &addrs.tcp {
        for (i, l) in ports.inherited.rest_tcp(addr).into_iter().enumerate() {
            l.set_nonblocking(true)?;
            setups[i % workers]
                .tcp
                .push((mio::net::TcpListener::from_std(l), kind));
        }
    }
    for &addr in &addrs.udp {
        for (i, s) in ports.inherited.rest_udp(addr).into_iter().enumerate() {
            s.set_nonblocking(true)?;
            setups[i % workers]
                .udp
                .push(mio::net::UdpSocket::from_std(s));
        }
    }
    let (tcp_left, udp_left) = ports.inherited.left();
    if !tcp_left.is_empty() || !udp_left.is_empty() {
        log::warn!(
            "upgrade: sockets handed over that the config no longer names are closed: TCP \
             {tcp_left:?}, UDP {udp_left:?}"
        );
    }
    // A duplicate of every socket and guard, for the next upgrade.
    let mut handover = upgrade::Handover::default();
    {
        use std::os::fd::AsFd as _;
        for s in &setups {
            for (l, _) in &s.tcp {
                handover.keep("tcp", l.as_fd().try_clone_to_owned()?);
            }
            for u in &s.udp {
                handover.keep("udp", u.as_fd().try_clone_to_owned()?);
            }
        }
        for g in &ports.guards {
            handover.keep("guard", g.dup()?);
        }
    }
    Ok(Bound {
        addrs,
        ports,
        setups,
        wakers,
        handover,
    })
}

/// Spawns thread `name` running `f`; the supervisor hears of it if it ends unless `f` returns
/// `true` (a clean end).
fn spawn_watched(
    name: String,
    died: &mpsc::Sender<String>,
    f: impl FnOnce() -> bool + Send + 'static,
) -> std::io::Result<JoinHandle<()>> {
    let tx = died.clone();
    std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            let mut notice = DeathNotice {
                name,
                tx,
                clean: false,
            };
            notice.clean = f();
        })
}

impl RunningServer {
    /// Binds every socket, then starts the workers, the service's background jobs and the
    /// statsd exporter.
    pub fn start(config: &Config, service: Arc<dyn Service>) -> Result<RunningServer, ServerError> {
        RunningServer::start_with(config, service, upgrade::Inherited::default())
    }

    /// [`RunningServer::start`] on the sockets a binary upgrade handed over, where the config
    /// names their addresses (see [`upgrade`]).
    pub fn start_with(
        config: &Config,
        service: Arc<dyn Service>,
        inherited: upgrade::Inherited,
    ) -> Result<RunningServer, ServerError> {
        let cfg = &config.server;
        let workers = effective_workers(cfg.workers);
        let _ = process_secs();
        host::raise_nofile();
        let Bound {
            addrs,
            ports,
            setups,
            wakers,
            handover,
        } = bind(config, workers, inherited)?;

        let stop = Arc::new(AtomicBool::new(false));
        let tls = if config.listen.https.is_empty() {
            None
        } else {
            Some(Arc::new(tls::Tls::new(&config.tls)?))
        };
        let (access_log, reopen) =
            match access_log::start(&config.log.access_target(cfg), config.log.format) {
                Ok(Some((tx, reopen))) => (Some(tx), Some(reopen)),
                Ok(None) => (None, None),
                Err((path, source)) => return Err(ServerError::AccessLog { path, source }),
            };
        // UDP series are printed only by a server that listens on UDP.
        let udp = setups.iter().any(|s| !s.udp.is_empty());
        let kinds = Arc::new(metrics::KindTable::new(service.kinds(), udp));
        let metrics: Arc<[WorkerMetrics]> = (0..workers)
            .map(|_| WorkerMetrics::new(kinds.clone()))
            .collect();
        let udp_ring = udp && ring_wanted(cfg.udp_io)?;
        let shared = Arc::new(Shared {
            udp_ring,
            cfg: cfg.clone(),
            service: service.clone(),
            metrics,
            stop: stop.clone(),
            access_log,
            live: worker::LiveServer::of(cfg),
            per_ip: limits::PerIp::new(cfg.max_connections_per_ip, cfg.max_connections_per_48),
            budget: limits::Budget::new(cfg.max_buffer_mb.saturating_mul(1 << 20)),
            ws: ws::WsSettings::of(&config.webtorrent),
            tls,
            hub: ws::WsHub::new(wakers.clone(), WS_INBOX_BYTES),
        });
        let (died_tx, died) = mpsc::channel();
        let mut threads = Vec::new();
        for setup in setups {
            let name = format!("worker-{}", setup.index);
            let shared = shared.clone();
            let log_name = name.clone();
            threads.push(spawn_watched(name, &died_tx, move || {
                // Built on its own thread: the batch buffers hold raw pointers and stay here.
                match Worker::new(setup, shared).and_then(Worker::run) {
                    Ok(()) => true,
                    Err(e) => {
                        log::error!("{log_name}: event loop failed: {e}");
                        false
                    }
                }
            })?);
        }
        let nice = cfg.background_nice;
        for job in service.background() {
            let stop = stop.clone();
            let name = job.name.clone();
            let low_priority = job.low_priority;
            threads.push(spawn_watched(job.name.clone(), &died_tx, move || {
                if nice > 0 && low_priority {
                    host::lower_priority(&name, nice);
                }
                (job.run)(stop);
                true
            })?);
        }
        if config.statsd.enabled {
            let (socket, to) = statsd::connect(&config.statsd).map_err(|e| {
                ServerError::Start(std::io::Error::new(
                    e.kind(),
                    format!("statsd.address {}: {e}", config.statsd.address),
                ))
            })?;
            log::info!(
                "statsd: pushing to {to} every {} ms",
                config.statsd.interval_ms
            );
            let (cfg, shared, stop) = (config.statsd.clone(), shared.clone(), stop.clone());
            threads.push(spawn_watched("statsd".into(), &died_tx, move || {
                statsd::run(cfg, socket, shared, stop);
                true
            })?);
        }
        for (addr, kind) in &addrs.tcp {
            log::info!(
                "listening on {addr} ({})",
                match kind {
                    ListenerKind::Http => "HTTP",
                    ListenerKind::Https => "HTTPS",
                    ListenerKind::Admin => "admin",
                }
            );
        }
        for addr in &addrs.udp {
            log::info!("listening on {addr} (UDP)");
        }
        log::info!("{workers} workers started");
        Ok(RunningServer {
            addrs,
            stop,
            wakers,
            threads,
            died,
            service,
            reopen,
            handover,
            shared,
            _ports: ports.guards,
        })
    }

    /// The first bound address of the given kind.
    pub fn tcp_addr(&self, kind: ListenerKind) -> Option<SocketAddr> {
        self.addrs
            .tcp
            .iter()
            .find(|(_, k)| *k == kind)
            .map(|(a, _)| *a)
    }

    /// Every bound address.
    pub fn addresses(&self) -> &Addresses {
        &self.addrs
    }

    /// The first HTTP listener's address.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.tcp_addr(ListenerKind::Http)
    }

    /// The first admin listener's address.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.tcp_addr(ListenerKind::Admin)
    }

    /// The first UDP socket's address.
    pub fn udp_addr(&self) -> Option<SocketAddr> {
        self.addrs.udp.first().copied()
    }

    /// Has the access log open its file again before its next line (SIGHUP and SIGUSR1, for
    /// logrotate).
    pub fn reopen_logs(&self) {
        if let Some(r) = &self.reopen {
            r.request();
        }
    }

    /// Applies what `new` changes of the settings that can change in place (the services',
    /// and the access log's format); returns those keys.
    pub fn reconfigure(&self, new: &Config) -> Vec<&'static str> {
        let mut applied = self.service.reconfigure(new);
        let (s, n) = (&self.shared, &new.server);
        applied.extend(s.live.set(n));
        // The per-address limits and the buffer budget, set whatever they were (the binary
        // lists a key as applied only when the file changed it).
        s.per_ip
            .set(n.max_connections_per_ip, n.max_connections_per_48);
        s.budget.set(n.max_buffer_mb.saturating_mul(1 << 20));
        if s.cfg.max_connections_per_ip != n.max_connections_per_ip {
            applied.push("server.max_connections_per_ip");
        }
        if s.cfg.max_connections_per_48 != n.max_connections_per_48 {
            applied.push("server.max_connections_per_48");
        }
        if s.cfg.max_buffer_mb != n.max_buffer_mb {
            applied.push("server.max_buffer_mb");
        }
        if let Some(r) = &self.reopen {
            if r.set_format(new.log.format) {
                applied.push("log.format");
            }
        }
        applied
    }

    /// SIGUSR2: starts `successor` on this server's sockets and waits for it to say it is
    /// ready; the successor when it is (the caller stops this server then), None when it is
    /// not, this server serving on (the log says why).
    pub fn upgrade(
        &self,
        successor: Option<&(std::path::PathBuf, Vec<std::ffi::OsString>)>,
    ) -> Option<upgrade::Successor> {
        let Some((exe, args)) = successor else {
            log::warn!("SIGUSR2: no binary to upgrade to; serving on");
            return None;
        };
        log::info!("SIGUSR2: starting {} to take over", exe.display());
        let mut s = match self.handover.spawn(exe, args) {
            Ok(s) => s,
            Err(e) => {
                log::error!("upgrade: cannot start {}: {e}; serving on", exe.display());
                return None;
            }
        };
        match s.ready(SUCCESSOR_READY) {
            Ok(()) => {
                log::info!(
                    "upgrade: pid {} is ready; stopping here (in-flight requests answered, \
                     pending rows written, swarms saved), then it serves",
                    s.child.id()
                );
                Some(s)
            }
            Err(why) => {
                log::error!("upgrade: the new binary did not take over: {why}; serving on");
                None
            }
        }
    }

    /// Reloads the service (what SIGHUP does).
    pub fn reload(&self) {
        match self.service.reload() {
            Ok(msg) => log::info!("{msg}"),
            Err(e) => log::error!("reload failed, keeping the old state: {e}"),
        }
        if let Some(t) = &self.shared.tls {
            match t.reload() {
                Ok(()) => {
                    log::info!("TLS: certificate and key read again; new connections get them")
                }
                Err(e) => log::error!("TLS: {e}; keeping the certificate in use"),
            }
        }
    }

    /// Waits up to `timeout` for a thread to die; returns its name if one did.
    pub fn thread_died(&self, timeout: Duration) -> Option<String> {
        self.died.recv_timeout(timeout).ok()
    }

    /// Stops accepting, lets workers finish in-flight answers, stops background jobs, and joins
    /// every thread. Errors name a thread that died.
    pub fn shutdown(self) -> Result<(), ServerError> {
        self.stop.store(true, Ordering::Release);
        for w in &self.wakers {
            let _ = w.wake();
        }
        let mut died = None;
        for t in self.threads {
            let name = t.thread().name().unwrap_or("?").to_string();
            if t.join().is_err() {
                died = Some(name);
            }
        }
        if let Ok(name) = self.died.try_recv() {
            died.get_or_insert(name);
        }
        match died {
            Some(name) => Err(ServerError::ThreadDied(name)),
            None => Ok(()),
        }
    }
}

/// What [`run`] is given beside the config and the service.
pub struct RunOptions<'a> {
    /// The sockets a binary upgrade handed this process (see [`upgrade`]).
    pub inherited: upgrade::Inherited,
    /// The binary and arguments SIGUSR2 starts to take over (the path this one was started
    /// from, which now holds the new version); None: SIGUSR2 is refused.
    pub successor: Option<(std::path::PathBuf, Vec<std::ffi::OsString>)>,
    /// Called on SIGHUP before the access log's file is opened again and the service
    /// reloaded (the binary reads its config again there).
    pub on_hup: &'a mut dyn FnMut(&RunningServer),
}

/// How [`run`] ended.
#[derive(Debug)]
pub enum Ended {
    /// SIGTERM or SIGINT: drained and stopped.
    Stopped,
    /// SIGUSR2: the new binary said it is ready, and this one drained and stopped; the new
    /// one starts serving once this process has exited (holding the pair's end until then).
    Upgraded(upgrade::Successor),
}

/// How long SIGUSR2 waits for the new binary to say it is ready.
const SUCCESSOR_READY: Duration = Duration::from_secs(60);

/// Runs the server until SIGTERM or SIGINT (drained shutdown) or SIGUSR2 with a successor
/// ready (drained shutdown, the successor returned), or until a thread dies (`Err` naming
/// it). SIGHUP calls `on_hup`, then opens the access log's file again and reloads the
/// service; SIGUSR1 only opens the file again. Under systemd (`Type=notify`) it says
/// `READY=1` once it serves and `STOPPING=1` when it stops.
pub fn run(
    config: &Config,
    service: Arc<dyn Service>,
    opts: RunOptions<'_>,
) -> Result<Ended, ServerError> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1, SIGUSR2};
    let mut signals =
        signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2])?;
    let server = RunningServer::start_with(config, service, opts.inherited)?;
    upgrade::notify_systemd(&format!("READY=1\nMAINPID={}", std::process::id()));
    loop {
        if let Some(name) = server.thread_died(Duration::from_millis(200)) {
            log::error!("thread {name} died; stopping");
            let _ = server.shutdown();
            return Err(ServerError::ThreadDied(name));
        }
        for sig in signals.pending() {
            match sig {
                SIGHUP => {
                    (opts.on_hup)(&server);
                    server.reopen_logs();
                    server.reload();
                }
                SIGUSR1 => {
                    log::info!("SIGUSR1: the access log is opened again");
                    server.reopen_logs();
                }
                SIGUSR2 => {
                    if let Some(successor) = server.upgrade(opts.successor.as_ref()) {
                        upgrade::notify_systemd("STOPPING=1");
                        server.shutdown()?;
                        return Ok(Ended::Upgraded(successor));
                    }
                }
                _ => {
                    log::info!("signal {sig}: stopping (in-flight requests are answered first)");
                    upgrade::notify_systemd("STOPPING=1");
                    server.shutdown()?;
                    return Ok(Ended::Stopped);
                }
            }
        }
    }
}
