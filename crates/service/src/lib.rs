//! The contract between the network server and the services it runs (the tracker, popups and
//! Lua routes). The server owns sockets, framing, timers and metrics of
//! requests; a service owns its rules and state and sees only parsed requests and reused output
//! buffers.
//!
//! Each service hands every worker thread its own [`ServiceWorker`], so per-worker scratch
//! buffers and random generators need no locks; shared state lives behind the service itself.

use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

pub mod throttle;
pub use throttle::{Throttle, GUESSING_ADDRESSES};

pub use hotpath_metrics::{Desc, Samples};
pub use hotpath_wire::http::Request;

/// What a request was, for the `hotpath_requests_total{kind=…}` metric: a label the service
/// that answers it declares (see [`Service::kinds`]), with the protocols it comes over, so
/// no series is printed that cannot occur.
#[derive(Debug, Clone, Copy)]
pub struct Kind {
    label: &'static str,
    http: bool,
    udp: bool,
}

impl PartialEq for Kind {
    fn eq(&self, other: &Kind) -> bool {
        // The same constant is nearly always the same string in memory.
        std::ptr::eq(self.label, other.label) || self.label == other.label
    }
}

impl Eq for Kind {}

impl Kind {
    /// `/healthz`.
    pub const HEALTH: Kind = Kind::http("health");
    /// An admin endpoint (/metrics, /stats, /admin/…).
    pub const ADMIN: Kind = Kind::http("admin");
    /// Anything else (unknown paths, malformed packets).
    pub const OTHER: Kind = Kind::http_and_udp("other");
    /// The server's own kinds, which every server counts.
    pub const BUILTIN: [Kind; 3] = [Kind::HEALTH, Kind::ADMIN, Kind::OTHER];

    /// A kind of HTTP request.
    pub const fn http(label: &'static str) -> Kind {
        Kind {
            label,
            http: true,
            udp: false,
        }
    }

    /// A kind of UDP request.
    pub const fn udp(label: &'static str) -> Kind {
        Kind {
            label,
            http: false,
            udp: true,
        }
    }

    /// A kind of request that comes over HTTP and UDP.
    pub const fn http_and_udp(label: &'static str) -> Kind {
        Kind {
            label,
            http: true,
            udp: true,
        }
    }

    /// The metric label.
    pub fn label(self) -> &'static str {
        self.label
    }

    /// Whether it comes over HTTP.
    pub fn on_http(self) -> bool {
        self.http
    }

    /// Whether it comes over UDP.
    pub fn on_udp(self) -> bool {
        self.udp
    }
}

/// How a request ended, for the `result` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Outcome {
    /// Served.
    Ok,
    /// Refused with a reason (a `failure reason`, a BEP 15 error, an HTTP 4xx).
    Refused,
    /// Dropped without an answer (malformed datagrams).
    Dropped,
}

impl Outcome {
    /// Every outcome, in label order.
    pub const ALL: [Outcome; 3] = [Outcome::Ok, Outcome::Refused, Outcome::Dropped];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Refused => "refused",
            Outcome::Dropped => "dropped",
        }
    }
}

/// Where a request came from and when it is handled.
#[derive(Debug, Clone, Copy)]
pub struct Context {
    /// The remote address of the socket.
    pub peer: SocketAddr,
    /// Seconds since the server started (a coarse clock, refreshed once per event-loop turn).
    pub now: u32,
}

/// A response a service fills in; the server frames it. Reused across requests, so a service
/// must set every field it relies on (the server resets it before each call).
#[derive(Debug)]
pub struct HttpResponse {
    /// The status code.
    pub status: u16,
    /// The Content-Type.
    pub content_type: &'static str,
    /// Extra header lines, each ending in CRLF.
    pub extra_headers: Vec<u8>,
    /// The body.
    pub body: Vec<u8>,
    /// Close the connection after this response even if the client asked for keep-alive.
    pub close: bool,
}

impl Default for HttpResponse {
    fn default() -> Self {
        Self {
            status: 200,
            content_type: "text/plain",
            extra_headers: Vec::new(),
            body: Vec::new(),
            close: false,
        }
    }
}

impl HttpResponse {
    /// Clears the response for the next request, keeping the buffers' memory.
    pub fn reset(&mut self) {
        self.status = 200;
        self.content_type = "text/plain";
        self.extra_headers.clear();
        self.body.clear();
        self.close = false;
    }
}

/// What a service did with an HTTP request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handled {
    /// Answered in the response.
    Answered(Kind, Outcome),
    /// Cannot be answered before data the service is fetching arrives (a user's state from
    /// the database, an admin write). The server keeps the request, reads nothing more on
    /// that connection, and asks again after the service calls the worker's [`Wake`]; the
    /// service must then answer or park it again, and must wake the worker within bounded
    /// time (an error answer is an answer).
    Parked,
}

impl From<(Kind, Outcome)> for Handled {
    fn from((kind, outcome): (Kind, Outcome)) -> Handled {
        Handled::Answered(kind, outcome)
    }
}

/// A WebSocket connection, as the server names it to services: the worker that holds it,
/// its slot there and a serial that tells it from a later connection in the same slot. A
/// service keeps it to send to that connection later (a relayed offer or answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WsConn {
    /// The worker's index.
    pub worker: u16,
    /// The connection's slot in that worker.
    pub slot: u32,
    /// Its serial, unique within the worker.
    pub serial: u32,
}

/// Where a WebSocket connection's messages go: the service that took the upgrade (set by
/// [`Composite`]) and what that service said of it (a private tracker's user, 0 otherwise).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WsRoute {
    /// The service, in a [`Composite`]'s order.
    pub service: u8,
    /// The service's own value.
    pub key: u32,
}

/// The messages a WebSocket message's handling sends: each to the connection it came on
/// (`None`) or to another one, perhaps on another worker. The server frames them.
#[derive(Debug, Default)]
pub struct WsOut {
    /// Every message's text, one after the other.
    pub buf: Vec<u8>,
    /// Each message: its destination and where its text ends in `buf`.
    pub sends: Vec<(Option<WsConn>, usize)>,
}

impl WsOut {
    /// Clears it for the next message, keeping the memory.
    pub fn clear(&mut self) {
        self.buf.clear();
        self.sends.clear();
    }

    /// Adds a message to `to` (`None`: the sender), written by `write`.
    pub fn send(&mut self, to: Option<WsConn>, write: impl FnOnce(&mut Vec<u8>)) {
        write(&mut self.buf);
        self.sends.push((to, self.buf.len()));
    }

    /// Each message: its destination and text.
    pub fn messages(&self) -> impl Iterator<Item = (Option<WsConn>, &[u8])> + '_ {
        let mut start = 0;
        self.sends.iter().map(move |&(to, end)| {
            let text = &self.buf[start..end];
            start = end;
            (to, text)
        })
    }
}

/// Why a reload left a service as it was: each service's own error type, boxed.
pub type ReloadError = Box<dyn std::error::Error + Send + Sync>;

/// Wakes one worker's event loop from another thread, so it asks again about the requests
/// its service parked.
pub type Wake = Arc<dyn Fn() + Send + Sync>;

/// One worker's handle on a service. It is made on the worker's own thread and stays there,
/// so it may hold what cannot move between threads (a Lua VM).
pub trait ServiceWorker {
    /// Handles an HTTP request whose path this service serves; `None` when it does not serve
    /// that path (the server then answers 404).
    fn http(
        &mut self,
        req: &Request<'_, '_>,
        ctx: &Context,
        resp: &mut HttpResponse,
    ) -> Option<Handled>;

    /// Handles an HTTP request that came to the admin listener (`server.admin`) and that the
    /// server does not answer itself (`/metrics`, `/stats`, `/healthz`); `None` when the
    /// service has no admin endpoint at that path (the server then answers 404). Admin
    /// endpoints check their own bearer token ([`bearer`]).
    fn admin(
        &mut self,
        _req: &Request<'_, '_>,
        _ctx: &Context,
        _resp: &mut HttpResponse,
    ) -> Option<Handled> {
        None
    }

    /// Hands the worker the means to wake its event loop (called once, before any request).
    /// Only services that park requests need it.
    fn set_wake(&mut self, _wake: Wake) {}

    /// Handles one UDP datagram, appending the answer (if any) to `out`.
    fn udp(&mut self, packet: &[u8], ctx: &Context, out: &mut Vec<u8>) -> (Kind, Outcome);

    /// Whether answers given since the last [`commit`](Self::commit) acknowledge changes
    /// that are not durable yet. The server then holds those answers back until it commits.
    fn uncommitted(&self) -> bool {
        false
    }

    /// Makes the changes acknowledged since the last commit durable (one journal write for
    /// a whole event-loop batch). The server calls it before sending any answer given since
    /// the last commit; `false` means they are not durable and must not be sent (the server
    /// drops them and closes those connections, so clients retry).
    fn commit(&mut self) -> bool {
        true
    }

    /// Whether this service takes a WebSocket upgrade at `req`'s path (the server checked
    /// the upgrade's headers) for connection `conn`: `None` when it serves no WebSocket
    /// there (404), an error status and reason to refuse it, or the route its messages will
    /// carry. When it is taken, the service hears of the connection's end
    /// ([`ServiceWorker::ws_closed`]).
    fn ws_upgrade(
        &mut self,
        _req: &Request<'_, '_>,
        _ctx: &Context,
        _conn: WsConn,
    ) -> Option<Result<WsRoute, (u16, &'static str)>> {
        None
    }

    /// Handles one text message of connection `conn`, whose upgrade gave `route`; what it
    /// sends goes into `out`.
    fn ws_message(
        &mut self,
        _conn: WsConn,
        _route: WsRoute,
        _text: &[u8],
        _ctx: &Context,
        _out: &mut WsOut,
    ) -> (Kind, Outcome) {
        (Kind::OTHER, Outcome::Refused)
    }

    /// Connection `conn` (of `route`) closed: forget what it announced.
    fn ws_closed(&mut self, _conn: WsConn, _route: WsRoute) {}
}

/// A background job a service runs on its own named thread until `stop` is set.
pub struct Background {
    /// The thread's name.
    pub name: String,
    /// Run at the lower priority `server.background_nice`: bulk work that holds no lock a
    /// worker waits on for long (the store's flusher), so on a busy core the workers go
    /// first. Jobs holding locks workers need (a sweeper's swarm shard) must not: lowered,
    /// they would make the workers wait for them.
    pub low_priority: bool,
    /// The job; it must return soon after `stop` becomes true.
    pub run: Box<dyn FnOnce(Arc<AtomicBool>) + Send>,
}

impl Background {
    /// A job at the workers' priority.
    pub fn new(name: &str, run: impl FnOnce(Arc<AtomicBool>) + Send + 'static) -> Background {
        Background {
            name: name.into(),
            low_priority: false,
            run: Box::new(run),
        }
    }

    /// The same job at the lower priority (see [`Background::low_priority`]).
    pub fn low_priority(mut self) -> Background {
        self.low_priority = true;
        self
    }
}

/// A service the server runs.
pub trait Service: Send + Sync + 'static {
    /// A handle for worker `index`.
    fn worker(&self, index: usize) -> Box<dyn ServiceWorker>;

    /// The kinds of request it answers with (each counted in `hotpath_requests_total`, from
    /// 0, for the protocols it declares).
    fn kinds(&self) -> Vec<Kind> {
        Vec::new()
    }

    /// Adds its metrics to a scrape, under its own `/stats` section
    /// ([`Samples::section`], its [`name`](Self::name)).
    fn collect(&self, _out: &mut Samples) {}

    /// The service's name: its section in `/stats`, and in reload messages.
    fn name(&self) -> &'static str {
        "service"
    }

    /// Reloads what can be reloaded without a restart (SIGHUP); the text says what happened.
    fn reload(&self) -> Result<String, ReloadError> {
        Ok("nothing to reload".into())
    }

    /// Applies what `new` (the config file read again on SIGHUP, checked whole) changes of
    /// the settings this service can change in place, from the next request on; returns
    /// those keys (`tracker.interval_secs`). Every other changed key waits for a restart,
    /// and the binary says so.
    fn reconfigure(&self, _new: &hotpath_config::Config) -> Vec<&'static str> {
        Vec::new()
    }

    /// Jobs to run on their own threads (expiry sweepers, flushers).
    fn background(&self) -> Vec<Background> {
        Vec::new()
    }

    /// Whether it is ready for traffic; else what it waits for (`/healthz` answers 503 with
    /// that, so a balancer sends it nothing yet).
    fn ready(&self) -> Result<(), String> {
        Ok(())
    }
}

/// What the server runs beside its services and that answers no request: the write-behind
/// store, whose flusher and figures every service shares. The binary wires it in
/// ([`Composite::with_component`]), so no service owns what all of them use.
pub trait Component: Send + Sync + 'static {
    /// Adds its metrics to a scrape, under its own `/stats` section.
    fn collect(&self, _out: &mut Samples) {}

    /// Jobs to run on their own threads.
    fn background(&self) -> Vec<Background> {
        Vec::new()
    }

    /// Whether it is ready for traffic; else what it waits for (see [`Service::ready`]).
    fn ready(&self) -> Result<(), String> {
        Ok(())
    }
}

/// Several services on one server: each HTTP request goes to the first service that serves
/// its path; UDP goes to the first service; commits, metrics, stats, reloads and background
/// jobs go to all.
pub struct Composite {
    services: Vec<Arc<dyn Service>>,
    components: Vec<Arc<dyn Component>>,
}

impl Composite {
    /// The services, in the order they are asked.
    pub fn new(services: Vec<Arc<dyn Service>>) -> Composite {
        assert!(!services.is_empty(), "a server runs at least one service");
        Composite {
            services,
            components: Vec::new(),
        }
    }

    /// Runs `component` beside the services: its metrics, stats and background jobs come
    /// after theirs.
    pub fn with_component(mut self, component: Arc<dyn Component>) -> Composite {
        self.components.push(component);
        self
    }
}

struct CompositeWorker {
    workers: Vec<Box<dyn ServiceWorker>>,
}

impl ServiceWorker for CompositeWorker {
    fn http(
        &mut self,
        req: &Request<'_, '_>,
        ctx: &Context,
        resp: &mut HttpResponse,
    ) -> Option<Handled> {
        self.workers.iter_mut().find_map(|w| w.http(req, ctx, resp))
    }

    fn admin(
        &mut self,
        req: &Request<'_, '_>,
        ctx: &Context,
        resp: &mut HttpResponse,
    ) -> Option<Handled> {
        self.workers
            .iter_mut()
            .find_map(|w| w.admin(req, ctx, resp))
    }

    fn set_wake(&mut self, wake: Wake) {
        for w in &mut self.workers {
            w.set_wake(wake.clone());
        }
    }

    fn udp(&mut self, packet: &[u8], ctx: &Context, out: &mut Vec<u8>) -> (Kind, Outcome) {
        self.workers[0].udp(packet, ctx, out)
    }

    fn uncommitted(&self) -> bool {
        self.workers.iter().any(|w| w.uncommitted())
    }

    fn ws_upgrade(
        &mut self,
        req: &Request<'_, '_>,
        ctx: &Context,
        conn: WsConn,
    ) -> Option<Result<WsRoute, (u16, &'static str)>> {
        self.workers.iter_mut().enumerate().find_map(|(i, w)| {
            w.ws_upgrade(req, ctx, conn).map(|r| {
                r.map(|route| WsRoute {
                    service: i as u8,
                    key: route.key,
                })
            })
        })
    }

    fn ws_message(
        &mut self,
        conn: WsConn,
        route: WsRoute,
        text: &[u8],
        ctx: &Context,
        out: &mut WsOut,
    ) -> (Kind, Outcome) {
        match self.workers.get_mut(usize::from(route.service)) {
            Some(w) => w.ws_message(conn, route, text, ctx, out),
            None => (Kind::OTHER, Outcome::Refused),
        }
    }

    fn ws_closed(&mut self, conn: WsConn, route: WsRoute) {
        if let Some(w) = self.workers.get_mut(usize::from(route.service)) {
            w.ws_closed(conn, route);
        }
    }

    fn commit(&mut self) -> bool {
        // Every service commits, even after one failed: each answer waits on all of them.
        let mut durable = true;
        for w in self.workers.iter_mut().filter(|w| w.uncommitted()) {
            durable &= w.commit();
        }
        durable
    }
}

impl Service for Composite {
    fn worker(&self, index: usize) -> Box<dyn ServiceWorker> {
        Box::new(CompositeWorker {
            workers: self.services.iter().map(|s| s.worker(index)).collect(),
        })
    }

    fn kinds(&self) -> Vec<Kind> {
        let mut kinds: Vec<Kind> = Vec::new();
        for k in self.services.iter().flat_map(|s| s.kinds()) {
            if !kinds.contains(&k) {
                kinds.push(k);
            }
        }
        kinds
    }

    fn collect(&self, out: &mut Samples) {
        for s in &self.services {
            s.collect(out);
        }
        for c in &self.components {
            c.collect(out);
        }
    }

    /// Reloads every service, even after one fails: a bad access list file does not keep a
    /// script from reloading. Fails with every failure when one did.
    fn reload(&self) -> Result<String, ReloadError> {
        let (mut said, mut failed) = (Vec::new(), Vec::new());
        for s in &self.services {
            match s.reload() {
                Ok(text) => said.push(text),
                Err(e) => failed.push(format!("{}: {e}", s.name())),
            }
        }
        if failed.is_empty() {
            Ok(said.join("; "))
        } else {
            Err(failed.join("; ").into())
        }
    }

    fn reconfigure(&self, new: &hotpath_config::Config) -> Vec<&'static str> {
        self.services
            .iter()
            .flat_map(|s| s.reconfigure(new))
            .collect()
    }

    fn ready(&self) -> Result<(), String> {
        for s in &self.services {
            s.ready()?;
        }
        for c in &self.components {
            c.ready()?;
        }
        Ok(())
    }

    fn background(&self) -> Vec<Background> {
        let services = self.services.iter().flat_map(|s| s.background());
        services
            .chain(self.components.iter().flat_map(|c| c.background()))
            .collect()
    }
}

/// Seconds since this process first asked, from a monotonic clock: the one clock the server
/// and every service share for ages and expiries.
pub fn process_secs() -> u32 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_secs() as u32
}

/// Checks a request's `Authorization: Bearer TOKEN` against `token`, in time that does not
/// depend on where they differ. On failure fills `resp` with the JSON answer to give (403
/// naming `key`, the config key that turns the endpoint on, when `token` is empty; 401 with
/// `WWW-Authenticate` when the token is missing or wrong; 429 with `Retry-After` when the
/// client's address sent too many wrong ones lately, counted in `guesses`) and returns it.
pub fn bearer(
    req: &Request<'_, '_>,
    token: &str,
    key: &str,
    resp: &mut HttpResponse,
    guesses: &Throttle,
    ctx: &Context,
) -> Result<(), Handled> {
    if token.is_empty() {
        let text = format!("this admin API is off: set {key}");
        return Err(json_error(resp, 403, Kind::ADMIN, &text));
    }
    let from = ctx.peer.ip();
    if !guesses.allows(from, ctx.now) {
        resp.extra_headers.extend_from_slice(b"Retry-After: 60\r\n");
        return Err(json_error(
            resp,
            429,
            Kind::ADMIN,
            "too many wrong bearer tokens from your address: wait a minute",
        ));
    }
    let given = req
        .header("authorization")
        .and_then(|v| v.strip_prefix(b"Bearer "))
        .unwrap_or(b"");
    if !same_secret(given, token.as_bytes()) {
        guesses.failed(from, ctx.now);
        resp.extra_headers
            .extend_from_slice(b"WWW-Authenticate: Bearer realm=\"hotpath\"\r\n");
        return Err(json_error(
            resp,
            401,
            Kind::ADMIN,
            "missing or wrong bearer token",
        ));
    }
    Ok(())
}

/// Whether two secrets are equal, comparing every byte whatever the first difference.
pub fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// Fills `resp` with `{"error": message}` and `status`, refused as `kind`.
pub fn json_error(resp: &mut HttpResponse, status: u16, kind: Kind, message: &str) -> Handled {
    resp.status = status;
    resp.content_type = "application/json";
    resp.body.clear();
    resp.body.extend_from_slice(b"{\"error\":");
    serde_json::to_writer(&mut resp.body, message).expect("a string serializes");
    resp.body.extend_from_slice(b"}\n");
    Handled::Answered(kind, Outcome::Refused)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Reloads(&'static str, bool, AtomicBool);

    impl Service for Reloads {
        fn worker(&self, _index: usize) -> Box<dyn ServiceWorker> {
            unreachable!("not served")
        }
        fn name(&self) -> &'static str {
            self.0
        }
        fn reload(&self) -> Result<String, ReloadError> {
            self.2.store(true, std::sync::atomic::Ordering::SeqCst);
            if self.1 {
                Ok(format!("{} reloaded", self.0))
            } else {
                Err("bad file".into())
            }
        }
    }

    #[test]
    fn a_failed_reload_does_not_keep_the_others_from_reloading() {
        let (a, b, c) = (
            Arc::new(Reloads("a", true, AtomicBool::new(false))),
            Arc::new(Reloads("b", false, AtomicBool::new(false))),
            Arc::new(Reloads("c", true, AtomicBool::new(false))),
        );
        let all = Composite::new(vec![a.clone(), b.clone(), c.clone()]);
        let e = all.reload().unwrap_err().to_string();
        assert_eq!(e, "b: bad file");
        for s in [&a, &b, &c] {
            assert!(s.2.load(std::sync::atomic::Ordering::SeqCst), "{}", s.0);
        }
        let ok = Composite::new(vec![a, c]);
        assert_eq!(ok.reload().unwrap(), "a reloaded; c reloaded");
    }
}
