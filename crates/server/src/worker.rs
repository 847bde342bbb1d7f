//! One worker: an event loop (epoll through mio, edge-triggered) over this worker's own
//! listeners, UDP sockets and connections. A request is read, parsed, handled and answered on
//! this thread with no hand-off; all pipelined requests of one read are answered with one write.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::TrySendError;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mio::net::{TcpListener, TcpStream, UdpSocket};
use mio::{Events, Interest, Poll, Token, Waker};

use hotpath_config::ServerConfig;
use hotpath_service::{
    process_secs, Context, Handled, HttpResponse, Kind, Outcome, Request, Service, ServiceWorker,
    WsConn, WsOut, WsRoute,
};
use hotpath_wire::http::{self, header_slots, Head, Limits, Parsed};
use hotpath_wire::proxy;
use hotpath_wire::ws::{self, Decoded, Opcode};

use crate::limits::{Budget, PerIp};
use crate::listen::ListenerKind;
use crate::metrics::{self, ws_close, WorkerMetrics};
use crate::udp::Batch;
use hotpath_uring::UdpRing;
use mio::unix::SourceFd;
use std::os::fd::AsRawFd;

/// Token of the waker that shutdown uses.
pub const WAKER: Token = Token(0);
const LISTENER_BASE: usize = 1;
const UDP_BASE: usize = 1 << 10;
/// The io_uring's eventfd, when the UDP sockets are on a ring.
const UDP_RING: usize = UDP_BASE - 1;
/// Rounds of completions one turn takes from the ring before the rest of the loop's work.
const RING_ROUNDS: usize = 16;
const CONN_BASE: usize = 1 << 20;
/// The header array's size on the stack; `server.max_headers` is at most this.
const HEADER_SLOTS: usize = 256;
const READ_BUF_START: usize = 4096;
/// Buffers of closed connections kept for new ones (saves an allocation per connection).
const SPARE_BUFFERS: usize = 256;
/// Read buffers that waiting connections gave back, kept for the next one that has something
/// to read. A worker drives one connection at a time, so a few cover its wake-ups; more would
/// only hold memory (4 KiB each) while thousands of WebSocket peers sit idle.
const SPARE_READ_BUFFERS: usize = 32;
/// Unsent answers a connection may hold while the buffer budget is spent.
const HELD_OUTPUT: usize = 16 << 10;
/// How long a stop leaves an idle connection open for the request its client may be sending
/// (one just accepted has not sent it yet): answered, with `Connection: close`, instead of
/// lost to a close that crosses it. Those still idle then are closed.
const IDLE_DRAIN: Duration = Duration::from_millis(250);
/// Room asked for a response head beyond its body and extra headers.
const HEAD_ROOM: usize = 256;
/// Requests one connection may have answered per event-loop turn; a longer pipeline goes on
/// next turn, after the other connections' events, so no client waits behind another's
/// pipeline for more than a slice.
const ANSWERS_PER_TURN: usize = 64;
/// Bytes of answers one connection may produce per turn (the same slice, for large answers).
const BYTES_PER_TURN: usize = 32 << 10;
/// Slices the connections of one client address get per turn from the carried-over lists:
/// many connections from one address wait their turn behind each other, not before others.
const SLICES_PER_ADDRESS: u8 = 2;
/// Time one event-loop turn spends on connections before the rest wait for the next turn
/// (after its new events): a flood of busy connections delays another client's answer by
/// about this much, not by all of their work.
/// The live dashboard (`/` and `/dashboard` on the admin listener): one page that reads
/// `/metrics` every second, with everything it needs inline.
const DASHBOARD: &str = include_str!("dashboard.html");

/// The page may run only its own inline script and style and read only this listener.
const DASHBOARD_HEADERS: &[u8] = b"Content-Security-Policy: default-src 'none'; \
    script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self'\r\n\
    X-Content-Type-Options: nosniff\r\nCache-Control: no-store\r\n";

const TURN_BUDGET: Duration = Duration::from_millis(2);
/// Connections one listener accepts per turn; a longer backlog is taken over the next turns,
/// so a burst of connections does not hold up the answers of those already open.
const ACCEPTS_PER_TURN: usize = 128;

/// What every worker shares.
pub struct Shared {
    /// Whether the UDP sockets are driven by io_uring (`server.udp_io` and the kernel).
    pub udp_ring: bool,
    /// Server settings.
    pub cfg: ServerConfig,
    /// The service that handles requests.
    pub service: Arc<dyn Service>,
    /// Every worker's metrics (for /metrics and /stats).
    pub metrics: Arc<[WorkerMetrics]>,
    /// Set once to stop.
    pub stop: Arc<AtomicBool>,
    /// Where access log lines go, when enabled.
    pub access_log: Option<crate::access_log::Sender>,
    /// The settings a reload may change in place.
    pub live: LiveServer,
    /// Open connections per client address.
    pub per_ip: PerIp,
    /// Bytes all connections' buffers hold, against `server.max_buffer_mb`.
    pub budget: Budget,
    /// The bounds of WebSocket connections.
    pub ws: crate::ws::WsSettings,
    /// Every worker's inbox of relayed WebSocket messages.
    pub hub: crate::ws::WsHub,
    /// TLS for the HTTPS listeners, when there are any.
    pub tls: Option<Arc<crate::tls::Tls>>,
}

impl Shared {
    /// A scrape: every worker's counters summed, the server-wide figures, and the
    /// service's metrics (for /metrics, /stats and statsd).
    pub fn scrape(&self) -> hotpath_metrics::Samples {
        let mut s = hotpath_metrics::Samples::new();
        let server = metrics::ServerFigures {
            uptime_secs: hotpath_service::process_secs(),
            buffer_bytes: self.budget.used() as u64,
        };
        metrics::collect(&self.metrics, &server, &mut s);
        self.service.collect(&mut s);
        s
    }
}

/// The server settings a reload (SIGHUP) may change in place, read with relaxed loads.
#[derive(Debug)]
pub struct LiveServer {
    /// `server.max_connections_per_worker`.
    pub max_connections_per_worker: std::sync::atomic::AtomicU64,
    /// `server.max_output_bytes`.
    pub max_output_bytes: std::sync::atomic::AtomicU64,
    /// `server.idle_timeout_secs`.
    pub idle_timeout_secs: std::sync::atomic::AtomicU64,
    /// `server.header_timeout_secs`.
    pub header_timeout_secs: std::sync::atomic::AtomicU64,
    /// `server.shutdown_grace_secs`.
    pub shutdown_grace_secs: std::sync::atomic::AtomicU64,
}

impl LiveServer {
    /// The values of `c`.
    pub fn of(c: &hotpath_config::ServerConfig) -> LiveServer {
        LiveServer {
            max_connections_per_worker: (c.max_connections_per_worker as u64).into(),
            max_output_bytes: (c.max_output_bytes as u64).into(),
            idle_timeout_secs: c.idle_timeout_secs.into(),
            header_timeout_secs: c.header_timeout_secs.into(),
            shutdown_grace_secs: c.shutdown_grace_secs.into(),
        }
    }

    /// Takes `c`'s values; the keys whose value changed.
    pub fn set(&self, c: &hotpath_config::ServerConfig) -> Vec<&'static str> {
        [
            (
                &self.max_connections_per_worker,
                c.max_connections_per_worker as u64,
                "server.max_connections_per_worker",
            ),
            (
                &self.max_output_bytes,
                c.max_output_bytes as u64,
                "server.max_output_bytes",
            ),
            (
                &self.idle_timeout_secs,
                c.idle_timeout_secs,
                "server.idle_timeout_secs",
            ),
            (
                &self.header_timeout_secs,
                c.header_timeout_secs,
                "server.header_timeout_secs",
            ),
            (
                &self.shutdown_grace_secs,
                c.shutdown_grace_secs,
                "server.shutdown_grace_secs",
            ),
        ]
        .into_iter()
        .filter(|(at, value, _)| at.swap(*value, Ordering::Relaxed) != *value)
        .map(|(_, _, key)| key)
        .collect()
    }
}

/// What a worker is handed at start.
pub struct Setup {
    /// Its index.
    pub index: usize,
    /// Its poll instance (the waker is registered on it).
    pub poll: Poll,
    /// Its waker (shutdown, and the service's parked requests).
    pub waker: Arc<Waker>,
    /// Its TCP listeners.
    pub tcp: Vec<(TcpListener, ListenerKind)>,
    /// Its UDP sockets.
    pub udp: Vec<UdpSocket>,
}

struct Conn {
    stream: TcpStream,
    peer: SocketAddr,
    kind: ListenerKind,
    rbuf: Vec<u8>,
    rstart: usize,
    rend: usize,
    out: Vec<u8>,
    out_pos: usize,
    /// Process-clock second of the last activity (read or write).
    last_active: u32,
    /// When the first byte of a still-incomplete request arrived.
    partial_since: Option<u32>,
    /// Close once `out` is sent.
    closing: bool,
    /// Registered with epoll (done lazily: a connection answered and closed on accept never is).
    registered: bool,
    /// Holds answers that wait for this event-loop turn's journal commit.
    deferred: bool,
    /// The service parked the first unanswered request; nothing more is read or answered
    /// until the service wakes the worker.
    parked: bool,
    /// When the parked request was first handled (its latency counts from then).
    parked_at: Option<Instant>,
    /// Reading stopped at the output cap with requests possibly left unanswered: once the
    /// output drains, the worker carries on by itself (no epoll edge will come for them).
    more: bool,
    /// Buffer bytes this connection has reported to the budget.
    accounted: usize,
    /// Listed on the worker's `ready` list (a connection is listed once, so the carried-over
    /// lists never hold more entries than there are connections, plus closed ones once).
    in_ready: bool,
    /// Listed on the worker's `overflow` list.
    in_overflow: bool,
    /// From a balancer (`server.proxy_protocol_from`): its PROXY header is still to be read.
    proxy_header: bool,
    /// `peer`'s address is counted in the per-address limits (a balancer's own is not).
    ip_counted: bool,
    /// Upgraded to a WebSocket: its state (boxed: most connections are plain HTTP).
    ws: Option<Box<WsState>>,
    /// Its slot in the worker's table.
    slot: u32,
    /// On an HTTPS listener: its TLS session (boxed, as `ws`).
    tls: Option<Box<crate::tls::Session>>,
    /// Its handshake was counted.
    tls_counted: bool,
}

/// A WebSocket connection's state.
struct WsState {
    /// Where its messages go.
    route: WsRoute,
    /// Its name for the service and the other workers.
    id: WsConn,
    /// The fragments of a message not yet whole (empty and unallocated otherwise).
    frag: Vec<u8>,
    /// A fragmented message is being received.
    in_message: bool,
    /// A ping went out since it last sent anything.
    pinged: bool,
    /// Why it is being closed (an index of `WS_CLOSE_REASONS`), once decided.
    closed_for: Option<usize>,
}

impl Conn {
    fn pending_out(&self) -> usize {
        // Bytes TLS still holds count as one: enough to keep the connection from closing
        // before they leave.
        self.out.len() - self.out_pos
            + usize::from(self.tls.as_ref().is_some_and(|t| t.wants_write()))
    }

    /// Bytes its buffers hold.
    fn footprint(&self) -> usize {
        self.rbuf.len() + self.out.capacity() + self.tls.as_ref().map_or(0, |t| t.footprint())
    }

    /// Reports a change in its buffers' size to the budget.
    fn account(&mut self, budget: &Budget) {
        let now = self.footprint();
        if now != self.accounted {
            budget.resize(self.accounted, now);
            self.accounted = now;
        }
    }

    fn reserve_out(&mut self, need: usize, cap: usize) {
        reserve_out(&mut self.out, &mut self.out_pos, need, cap);
    }
}

/// Makes room for `need` more bytes in an output buffer whose first `pos` bytes are sent,
/// without letting its capacity run far past `cap` (a doubling Vec would reach twice the cap):
/// the bytes already sent are dropped first, then the buffer grows by at most what the cap
/// still allows.
fn reserve_out(out: &mut Vec<u8>, pos: &mut usize, need: usize, cap: usize) {
    if out.len() + need <= out.capacity() {
        return;
    }
    if *pos > 0 {
        out.drain(..*pos);
        *pos = 0;
        if out.len() + need <= out.capacity() {
            return;
        }
    }
    let doubled = (out.capacity() * 2).max(4096);
    let want = doubled.min(cap.saturating_add(need)).max(out.len() + need);
    out.reserve_exact(want - out.len());
}

/// Frames `text` into a WebSocket connection's output; false (nothing queued) when that
/// would pass `cap` unsent bytes.
fn ws_queue(conn: &mut Conn, text: &[u8], cap: usize) -> bool {
    let need = text.len() + ws::MAX_HEADER;
    if conn.pending_out() + need > cap {
        return false;
    }
    reserve_out(&mut conn.out, &mut conn.out_pos, need, cap);
    ws::write_frame(&mut conn.out, Opcode::Text, text);
    true
}

/// Closes a WebSocket connection for `why` (an index of `WS_CLOSE_REASONS`): a close frame
/// with `code` and `reason`, then nothing more is read.
fn ws_fail(conn: &mut Conn, code: u16, reason: &str, why: usize) {
    if let Some(st) = conn.ws.as_deref_mut() {
        st.closed_for.get_or_insert(why);
    }
    reserve_out(&mut conn.out, &mut conn.out_pos, 2 + 125, usize::MAX);
    ws::write_close(&mut conn.out, code, reason);
    conn.closing = true;
    conn.rstart = conn.rend;
}

/// The per-request half of a worker, split from the connection table so a request can be
/// handled while its connection is borrowed.
struct Handler {
    shared: Arc<Shared>,
    index: usize,
    service: Box<dyn ServiceWorker>,
    resp: HttpResponse,
    limits: Limits,
    max_headers: usize,
    date: [u8; 29],
    date_secs: u64,
    now: u32,
    stopping: bool,
    /// Answers the connection being driven may still give this turn.
    turn_left: usize,
    /// Bytes of answers the connection being driven has produced this turn.
    turn_bytes: usize,
    /// What a WebSocket message's handling sends.
    ws_out: WsOut,
    /// The serial the next WebSocket connection gets.
    next_serial: u32,
    /// Messages were relayed to this worker's own connections this turn.
    local_relays: bool,
}

impl Handler {
    fn metrics(&self) -> &WorkerMetrics {
        &self.shared.metrics[self.index]
    }

    fn tick(&mut self) {
        self.now = process_secs();
        let unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        if unix != self.date_secs {
            self.date_secs = unix;
            self.date = http::http_date(unix);
        }
    }

    /// Whether the connection being driven has had its share of this turn.
    fn slice_spent(&self) -> bool {
        self.turn_left == 0 || self.turn_bytes >= BYTES_PER_TURN
    }

    /// Starts a connection's share of a turn.
    fn new_slice(&mut self) {
        self.turn_left = ANSWERS_PER_TURN;
        self.turn_bytes = 0;
    }

    /// The most unsent output a connection may hold now: the configured cap, or a small one
    /// while every connection's buffers together hold their budget.
    fn output_cap(&self) -> usize {
        if self.shared.budget.spent() {
            HELD_OUTPUT.min(self.shared.live.max_output_bytes.load(Ordering::Relaxed) as usize)
        } else {
            self.shared.live.max_output_bytes.load(Ordering::Relaxed) as usize
        }
    }

    /// Answers every complete request in the connection's read buffer, stopping when the output
    /// buffer reaches its cap (the rest is answered once the client reads).
    fn process(&mut self, conn: &mut Conn) {
        if conn.proxy_header && !self.proxy_header(conn) {
            return;
        }
        if conn.ws.is_some() {
            self.process_ws(conn);
            return;
        }
        let max_out = self.output_cap();
        while conn.rstart < conn.rend
            && !conn.closing
            && !conn.parked
            && conn.pending_out() < max_out
            && !self.slice_spent()
        {
            let started = conn.parked_at.take().unwrap_or_else(Instant::now);
            let mut slots = header_slots::<HEADER_SLOTS>();
            let buf = &conn.rbuf[conn.rstart..conn.rend];
            match http::parse_request(buf, &mut slots[..self.max_headers], &self.limits) {
                Ok(Parsed::Incomplete) => {
                    conn.partial_since.get_or_insert(self.now);
                    return;
                }
                Ok(Parsed::Complete(req, used))
                    if conn.kind.serves()
                        && req
                            .header("upgrade")
                            .is_some_and(|u| ws::lists_token(u, "websocket")) =>
                {
                    let id = WsConn {
                        worker: self.index as u16,
                        slot: conn.slot,
                        serial: self.next_serial,
                    };
                    let out = (&mut conn.out, &mut conn.out_pos);
                    let route = self.upgrade(&req, conn.peer, id, out, started);
                    conn.rstart += used;
                    conn.partial_since = None;
                    match route {
                        Some(route) => {
                            self.next_serial = self.next_serial.wrapping_add(1);
                            conn.ws = Some(Box::new(WsState {
                                route,
                                id,
                                frag: Vec::new(),
                                in_message: false,
                                pinged: false,
                                closed_for: None,
                            }));
                            let m = self.metrics();
                            m.ws_upgrades.add(1);
                            m.ws_open.add(1);
                            // The frames that came with the upgrade.
                            self.process_ws(conn);
                            return;
                        }
                        None => {
                            conn.closing = true;
                            conn.rstart = conn.rend;
                        }
                    }
                }
                Ok(Parsed::Complete(req, used)) => {
                    let pending = conn.out.len() - conn.out_pos;
                    let out = (&mut conn.out, &mut conn.out_pos);
                    let Some(keep) =
                        self.respond(&req, conn.peer, conn.kind, out, started, max_out)
                    else {
                        // Asked again, from the same bytes, when the service wakes us.
                        conn.parked = true;
                        conn.parked_at = Some(started);
                        return;
                    };
                    conn.rstart += used;
                    conn.partial_since = None;
                    conn.closing = !keep;
                    self.turn_left -= 1;
                    self.turn_bytes += conn.pending_out().saturating_sub(pending);
                }
                Err(e) => {
                    self.metrics().http_errors.add(1);
                    self.refuse(conn, e.status, e.reason, started);
                }
            }
        }
        if conn.rstart == conn.rend {
            conn.rstart = 0;
            conn.rend = 0;
            conn.partial_since = None;
        }
    }

    /// Reads the PROXY header a balancer's connection starts with: from then on the
    /// connection is the client's, counted in the per-address limits as if it came directly.
    /// False while the header is incomplete, or when it was refused.
    fn proxy_header(&mut self, conn: &mut Conn) -> bool {
        let buf = &conn.rbuf[conn.rstart..conn.rend];
        match proxy::parse(buf) {
            Ok(proxy::Header::Incomplete) => {
                if !buf.is_empty() {
                    conn.partial_since.get_or_insert(self.now);
                }
                false
            }
            Ok(proxy::Header::Complete { source, used }) => {
                conn.rstart += used;
                conn.proxy_header = false;
                conn.partial_since = None;
                if let Some(src) = source {
                    let src = SocketAddr::new(src.ip().to_canonical(), src.port());
                    if !self.shared.per_ip.try_add(src.ip()) {
                        self.metrics().refused_per_ip.add(1);
                        conn.closing = true;
                        conn.rstart = conn.rend;
                        return false;
                    }
                    conn.peer = src;
                    conn.ip_counted = true;
                }
                true
            }
            Err(reason) => {
                self.metrics().http_errors.add(1);
                self.refuse(conn, 400, reason, Instant::now());
                false
            }
        }
    }

    /// Answers a WebSocket upgrade: `101 Switching Protocols` and the route when the headers
    /// are right and a service takes it; otherwise a 4xx (the connection then closes).
    fn upgrade(
        &mut self,
        req: &Request<'_, '_>,
        peer: SocketAddr,
        id: WsConn,
        (out, out_pos): (&mut Vec<u8>, &mut usize),
        started: Instant,
    ) -> Option<WsRoute> {
        let ctx = Context {
            peer,
            now: self.now,
        };
        let checked = ws::check_upgrade(
            req.method,
            req.header("upgrade"),
            req.header("connection"),
            req.header("sec-websocket-version"),
            req.header("sec-websocket-key"),
        )
        .and_then(ws::accept_key);
        let refusal = match checked {
            Err(why) => {
                let version = b"Sec-WebSocket-Version: 13\r\n";
                let upgrade_required = why == ws::WRONG_VERSION;
                let status = if upgrade_required { 426 } else { 400 };
                Some((
                    status,
                    why,
                    if upgrade_required { &version[..] } else { b"" },
                ))
            }
            Ok(accept) => match self.service.ws_upgrade(req, &ctx, id) {
                None => Some((404, "no WebSocket here", &b""[..])),
                Some(Err((status, why))) => Some((status, why, &b""[..])),
                Some(Ok(route)) => {
                    reserve_out(out, out_pos, HEAD_ROOM, usize::MAX);
                    ws::write_switch(out, &accept);
                    return Some(route);
                }
            },
        };
        let (status, why, extra) = refusal?;
        self.metrics().ws_upgrades_refused.add(1);
        let body = format!("{why}\n");
        let head = Head {
            status,
            content_type: "text/plain",
            extra,
        };
        reserve_out(out, out_pos, body.len() + HEAD_ROOM, usize::MAX);
        http::write_response(out, &head, &self.date, false, 1, body.as_bytes());
        let nanos = started.elapsed().as_nanos() as u64;
        self.metrics()
            .request(metrics::HTTP, Kind::OTHER, Outcome::Refused, nanos);
        None
    }

    /// Handles the whole frames in a WebSocket connection's read buffer.
    fn process_ws(&mut self, conn: &mut Conn) {
        let (max_frame, max_message) = (self.shared.ws.max_frame, self.shared.ws.max_message);
        while conn.rstart < conn.rend && !conn.closing && !self.slice_spent() {
            let start = conn.rstart;
            let frame = match ws::decode(&mut conn.rbuf[start..conn.rend], max_frame) {
                Ok(Decoded::Incomplete(_)) => {
                    conn.partial_since.get_or_insert(self.now);
                    break;
                }
                Ok(Decoded::Frame(f)) => f,
                Err(e) => {
                    let why = if e == ws::FrameError::TooBig {
                        ws_close::TOO_BIG
                    } else {
                        ws_close::PROTOCOL
                    };
                    ws_fail(conn, e.close_code(), e.reason(), why);
                    break;
                }
            };
            conn.partial_since = None;
            conn.rstart += frame.size();
            let payload = start + frame.payload_start..start + frame.size();
            let Some(st) = conn.ws.as_deref_mut() else {
                return;
            };
            st.pinged = false;
            let text = match (frame.opcode, st.in_message) {
                (Opcode::Ping, _) => {
                    let cap = self.shared.ws.max_output;
                    reserve_out(&mut conn.out, &mut conn.out_pos, frame.payload_len + 2, cap);
                    ws::write_frame(&mut conn.out, Opcode::Pong, &conn.rbuf[payload]);
                    continue;
                }
                (Opcode::Pong, _) => continue,
                (Opcode::Close, _) => {
                    let code = match ws::close_code(&conn.rbuf[payload]) {
                        Ok(code) => code.unwrap_or(ws::close::NORMAL),
                        Err(e) => {
                            ws_fail(conn, ws::close::PROTOCOL, e.reason(), ws_close::PROTOCOL);
                            break;
                        }
                    };
                    ws_fail(conn, code, "", ws_close::CLIENT);
                    break;
                }
                (Opcode::Binary, false) => {
                    let why = "binary messages are not spoken here";
                    ws_fail(conn, ws::close::UNSUPPORTED, why, ws_close::PROTOCOL);
                    break;
                }
                (Opcode::Text, false) if frame.fin => payload,
                (Opcode::Text, false) => {
                    if frame.payload_len > max_message {
                        ws_fail(
                            conn,
                            ws::close::TOO_BIG,
                            "message too big",
                            ws_close::TOO_BIG,
                        );
                        break;
                    }
                    st.in_message = true;
                    st.frag.extend_from_slice(&conn.rbuf[payload]);
                    continue;
                }
                (Opcode::Continuation, true) => {
                    if st.frag.len() + frame.payload_len > max_message {
                        ws_fail(
                            conn,
                            ws::close::TOO_BIG,
                            "message too big",
                            ws_close::TOO_BIG,
                        );
                        break;
                    }
                    st.frag.extend_from_slice(&conn.rbuf[payload]);
                    if !frame.fin {
                        continue;
                    }
                    st.in_message = false;
                    let whole = std::mem::take(&mut st.frag);
                    self.ws_message(conn, &whole);
                    continue;
                }
                (Opcode::Continuation, false) | (Opcode::Text | Opcode::Binary, true) => {
                    let why = "a fragment out of order";
                    ws_fail(conn, ws::close::PROTOCOL, why, ws_close::PROTOCOL);
                    break;
                }
            };
            if text.len() > max_message {
                ws_fail(
                    conn,
                    ws::close::TOO_BIG,
                    "message too big",
                    ws_close::TOO_BIG,
                );
                break;
            }
            // The read buffer is lent out for the call, so the text is read where it lies
            // while the connection's output is written (ws_message never reads the buffer).
            let rbuf = std::mem::take(&mut conn.rbuf);
            self.ws_message(conn, &rbuf[text]);
            conn.rbuf = rbuf;
        }
        if conn.rstart == conn.rend {
            conn.rstart = 0;
            conn.rend = 0;
            conn.partial_since = None;
        }
    }

    /// One whole text message: the service handles it; its answers go into the connection's
    /// output, its relays to the hub.
    fn ws_message(&mut self, conn: &mut Conn, text: &[u8]) {
        let started = Instant::now();
        let Some(st) = conn.ws.as_deref() else {
            return;
        };
        if std::str::from_utf8(text).is_err() {
            let why = "text that is not UTF-8";
            ws_fail(conn, ws::close::INVALID_DATA, why, ws_close::PROTOCOL);
            return;
        }
        let (id, route) = (st.id, st.route);
        self.metrics().ws_messages_in.add(1);
        let ctx = Context {
            peer: conn.peer,
            now: self.now,
        };
        let mut out = std::mem::take(&mut self.ws_out);
        out.clear();
        let (kind, outcome) = self.service.ws_message(id, route, text, &ctx, &mut out);
        let cap = self.shared.ws.max_output;
        let mut full = false;
        let mut sent = 0u64;
        let mut dropped = 0u64;
        for (to, msg) in out.messages() {
            match to.filter(|&t| t != id) {
                None => {
                    if !ws_queue(conn, msg, cap) {
                        full = true;
                        break;
                    }
                    sent += 1;
                }
                Some(to) => {
                    if self.shared.hub.push(self.index, to, msg) {
                        self.local_relays |= usize::from(to.worker) == self.index;
                    } else {
                        dropped += 1;
                    }
                }
            }
        }
        self.ws_out = out;
        let m = self.metrics();
        m.ws_messages_out.add(sent);
        m.ws_relays_dropped.add(dropped);
        m.request(
            metrics::HTTP,
            kind,
            outcome,
            started.elapsed().as_nanos() as u64,
        );
        self.turn_left = self.turn_left.saturating_sub(1);
        if full {
            ws_fail(conn, ws::close::POLICY, "", ws_close::OUTPUT_FULL);
        }
    }

    /// Answers `status` with `reason` as a plain-text body and closes the connection once it
    /// is sent; whatever else the client sent is dropped.
    fn refuse(&mut self, conn: &mut Conn, status: u16, reason: &str, started: Instant) {
        self.resp.reset();
        self.resp.body.extend_from_slice(reason.as_bytes());
        self.resp.body.push(b'\n');
        let head = Head {
            status,
            content_type: "text/plain",
            extra: b"",
        };
        conn.reserve_out(self.resp.body.len() + HEAD_ROOM, self.output_cap());
        http::write_response(&mut conn.out, &head, &self.date, false, 1, &self.resp.body);
        let nanos = started.elapsed().as_nanos() as u64;
        self.metrics()
            .request(metrics::HTTP, Kind::OTHER, Outcome::Refused, nanos);
        conn.closing = true;
        conn.rstart = conn.rend;
    }

    fn respond(
        &mut self,
        req: &Request<'_, '_>,
        peer: SocketAddr,
        kind: ListenerKind,
        (out, out_pos): (&mut Vec<u8>, &mut usize),
        started: Instant,
        max_out: usize,
    ) -> Option<bool> {
        self.resp.reset();
        let ctx = Context {
            peer,
            now: self.now,
        };
        let (k, outcome) = match (kind, req.path) {
            (_, "/healthz") => {
                self.resp.content_type = "application/json";
                match self.shared.service.ready() {
                    Ok(()) => self.resp.body.extend_from_slice(b"{\"status\":\"ok\"}"),
                    Err(why) => {
                        // Not yet: a balancer's health check keeps traffic away meanwhile.
                        self.resp.status = 503;
                        let body = serde_json::json!({"status": "starting", "waiting_for": why});
                        self.resp.body = body.to_string().into_bytes();
                    }
                }
                (Kind::HEALTH, Outcome::Ok)
            }
            (ListenerKind::Admin, "/metrics") => {
                self.resp.content_type = "text/plain; version=0.0.4";
                let mut text = String::with_capacity(16_384);
                self.shared.scrape().prometheus(&mut text);
                self.resp.body = text.into_bytes();
                (Kind::ADMIN, Outcome::Ok)
            }
            (ListenerKind::Admin, "/" | "/dashboard") => {
                self.resp.content_type = "text/html; charset=utf-8";
                self.resp.body.extend_from_slice(DASHBOARD.as_bytes());
                self.resp.extra_headers.extend_from_slice(DASHBOARD_HEADERS);
                (Kind::ADMIN, Outcome::Ok)
            }
            // The browser that opens the dashboard asks for an icon: none, and no 404 for it
            // among the refused requests.
            (ListenerKind::Admin, "/favicon.ico") => {
                self.resp.status = 204;
                (Kind::ADMIN, Outcome::Ok)
            }
            (ListenerKind::Admin, "/stats") => {
                self.resp.content_type = "application/json";
                self.resp.body = self.shared.scrape().stats().to_string().into_bytes();
                (Kind::ADMIN, Outcome::Ok)
            }
            (ListenerKind::Http | ListenerKind::Https, _) => {
                match self.service.http(req, &ctx, &mut self.resp) {
                    Some(Handled::Answered(kind, outcome)) => (kind, outcome),
                    Some(Handled::Parked) => return None,
                    None => self.not_found(),
                }
            }
            (ListenerKind::Admin, _) => match self.service.admin(req, &ctx, &mut self.resp) {
                Some(Handled::Answered(kind, outcome)) => (kind, outcome),
                Some(Handled::Parked) => return None,
                None => self.not_found(),
            },
        };
        let keep = req.keep_alive && !self.resp.close && !self.stopping;
        let head = Head {
            status: self.resp.status,
            content_type: self.resp.content_type,
            extra: &self.resp.extra_headers,
        };
        let need = self.resp.body.len() + self.resp.extra_headers.len() + HEAD_ROOM;
        reserve_out(out, out_pos, need, max_out);
        http::write_response(
            out,
            &head,
            &self.date,
            keep,
            req.minor_version,
            &self.resp.body,
        );
        if req.method == "HEAD" {
            // Same head (with the GET's Content-Length), no body.
            out.truncate(out.len() - self.resp.body.len());
        }
        let nanos = started.elapsed().as_nanos() as u64;
        self.metrics().request(metrics::HTTP, k, outcome, nanos);
        if let Some(log) = &self.shared.access_log {
            let query = String::from_utf8_lossy(req.query);
            let entry = crate::access_log::Entry {
                ip: peer.ip(),
                request: format!(
                    "{} {}{}{}",
                    req.method,
                    req.path,
                    if query.is_empty() { "" } else { "?" },
                    query
                ),
                status: self.resp.status,
                bytes: self.resp.body.len(),
                micros: nanos / 1000,
            };
            if let Err(TrySendError::Full(_)) = log.try_send(entry) {
                self.metrics().access_log_dropped.add(1);
            }
        }
        Some(keep)
    }

    fn not_found(&mut self) -> (Kind, Outcome) {
        self.resp.status = 404;
        self.resp.content_type = "text/plain";
        self.resp.body.clear();
        self.resp.body.extend_from_slice(b"not found\n");
        (Kind::OTHER, Outcome::Refused)
    }
}

/// A running worker's loop state.
pub struct Worker {
    poll: Poll,
    tcp: Vec<Option<(TcpListener, ListenerKind)>>,
    udp: Vec<Option<UdpSocket>>,
    /// Whether each UDP socket is bound to an IPv6 address (see `Batch::recv`).
    udp_ipv6: Vec<bool>,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    spare: Vec<(Vec<u8>, Vec<u8>)>,
    /// Read buffers WebSocket connections gave back while they wait.
    spare_rbufs: Vec<Vec<u8>>,
    /// The relayed messages taken from this worker's inbox (kept for its memory).
    inbox: Vec<u8>,
    open: usize,
    batch: Batch,
    /// The UDP sockets' io_uring, when they are on one (else they are in `poll`).
    ring: Option<UdpRing>,
    /// Buffers the ring's last round received.
    ring_got: Vec<u32>,
    /// The ring had completions left when the turn's rounds ran out.
    ring_more: bool,
    h: Handler,
    last_sweep: u32,
    /// When a stop closes the connections still idle ([`IDLE_DRAIN`] after it began).
    drain_idle_at: Option<Instant>,
    /// Failed journal writes not logged yet, and the process second of the last line about
    /// one: a full disk fails every turn's write, and one line a second says it all.
    failed_commits: (u64, usize, Option<u32>),
    /// Connections whose answers wait for the journal commit at the end of this turn.
    deferred: Vec<usize>,
    /// Connections whose service parked a request, to ask again when woken.
    parked: Vec<usize>,
    /// Connections that stopped at their output cap or their share of a turn and can go on:
    /// driven again after the next turn's events, as no epoll event will come for what they
    /// still have to answer.
    ready: Vec<usize>,
    /// Connections whose events came after the turn's time was spent: driven first next turn.
    overflow: Vec<usize>,
    /// Listeners that had more connections waiting than one turn accepts.
    backlog: Vec<usize>,
    /// When this event-loop turn started.
    turn: Instant,
    /// Slices each client address got this turn from the carried-over lists.
    per_address: hashbrown::HashMap<std::net::IpAddr, u8>,
}

impl Worker {
    /// Registers the sockets and builds the worker.
    pub fn new(setup: Setup, shared: Arc<Shared>) -> io::Result<Worker> {
        let Setup {
            index,
            poll,
            waker,
            mut tcp,
            mut udp,
        } = setup;
        for (i, (l, _)) in tcp.iter_mut().enumerate() {
            poll.registry()
                .register(l, Token(LISTENER_BASE + i), Interest::READABLE)?;
        }
        let cfg = &shared.cfg;
        let ring = if shared.udp_ring && !udp.is_empty() {
            let fds: Vec<_> = udp.iter().map(|s| s.as_raw_fd()).collect();
            match UdpRing::new(&fds, cfg.udp_batch) {
                Ok(ring) => {
                    poll.registry().register(
                        &mut SourceFd(&ring.event_fd()),
                        Token(UDP_RING),
                        Interest::READABLE,
                    )?;
                    Some(ring)
                }
                Err(e) => {
                    log::warn!("worker {index}: UDP on epoll: cannot set up io_uring: {e}");
                    None
                }
            }
        } else {
            None
        };
        if ring.is_none() {
            for (i, s) in udp.iter_mut().enumerate() {
                poll.registry()
                    .register(s, Token(UDP_BASE + i), Interest::READABLE)?;
            }
        }
        let limits = Limits {
            max_header_bytes: cfg.max_header_bytes,
            max_url_bytes: cfg.max_url_bytes,
            max_body_bytes: cfg.max_body_bytes,
        };
        let mut service = shared.service.worker(index);
        service.set_wake(Arc::new(move || {
            if let Err(e) = waker.wake() {
                log::error!("worker {index}: cannot wake: {e}");
            }
        }));
        let h = Handler {
            service,
            resp: HttpResponse::default(),
            limits,
            max_headers: cfg.max_headers.min(HEADER_SLOTS),
            date: http::http_date(0),
            date_secs: 0,
            now: process_secs(),
            stopping: false,
            turn_left: ANSWERS_PER_TURN,
            turn_bytes: 0,
            ws_out: WsOut::default(),
            next_serial: 0,
            local_relays: false,
            index,
            shared: shared.clone(),
        };
        Ok(Worker {
            poll,
            tcp: tcp.into_iter().map(Some).collect(),
            udp_ipv6: udp
                .iter()
                .map(|s| s.local_addr().is_ok_and(|a| a.is_ipv6()))
                .collect(),
            udp: udp.into_iter().map(Some).collect(),
            conns: Vec::new(),
            free: Vec::new(),
            spare: Vec::new(),
            spare_rbufs: Vec::new(),
            inbox: Vec::new(),
            open: 0,
            batch: Batch::new(if ring.is_some() {
                0
            } else {
                shared.cfg.udp_batch
            }),
            ring_got: Vec::with_capacity(ring.as_ref().map_or(0, |r| r.slots())),
            ring,
            ring_more: false,
            last_sweep: process_secs(),
            drain_idle_at: None,
            failed_commits: (0, 0, None),
            h,
            deferred: Vec::new(),
            parked: Vec::new(),
            ready: Vec::new(),
            overflow: Vec::new(),
            backlog: Vec::new(),
            turn: Instant::now(),
            per_address: hashbrown::HashMap::new(),
        })
    }

    /// Runs until shutdown has drained (or its grace period ran out).
    pub fn run(mut self) -> io::Result<()> {
        let mut events = Events::with_capacity(1024);
        let mut grace_until: Option<Instant> = None;
        loop {
            let busy = !self.ready.is_empty()
                || !self.overflow.is_empty()
                || !self.backlog.is_empty()
                || self.ring_more;
            let timeout = if busy {
                Duration::ZERO
            } else if grace_until.is_some() {
                Duration::from_millis(20)
            } else {
                Duration::from_millis(500)
            };
            if let Err(e) = self.poll.poll(&mut events, Some(timeout)) {
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
            self.h.tick();
            let mut woken = false;
            self.turn = Instant::now();
            let turn = self.turn;
            let mut over = false;
            for i in std::mem::take(&mut self.backlog) {
                self.accept(i);
            }
            self.per_address.clear();
            for slot in std::mem::take(&mut self.overflow) {
                if self.conns[slot].is_none() {
                    continue; // closed since it was listed
                }
                if over || !self.address_may_go(slot) {
                    self.overflow.push(slot); // keeps its place (and its flag)
                } else {
                    if let Some(c) = self.conns[slot].as_mut() {
                        c.in_overflow = false;
                    }
                    self.drive(slot);
                    over = turn.elapsed() >= TURN_BUDGET;
                }
            }
            for ev in events.iter() {
                let t = ev.token().0;
                if t == WAKER.0 {
                    woken = true;
                } else if t >= CONN_BASE {
                    if over {
                        self.list_overflow(t - CONN_BASE);
                    } else {
                        self.drive(t - CONN_BASE);
                        over = turn.elapsed() >= TURN_BUDGET;
                    }
                } else if t >= UDP_BASE {
                    self.udp_ready(t - UDP_BASE);
                } else if t == UDP_RING {
                    self.ring_more = true;
                } else if t >= LISTENER_BASE {
                    self.accept(t - LISTENER_BASE);
                }
            }
            if self.ring_more {
                self.ring_ready();
            }
            if woken && !self.parked.is_empty() {
                self.resume_parked();
            }
            if woken || std::mem::take(&mut self.h.local_relays) {
                self.deliver_relays();
            }
            self.drive_ready(turn);
            // Also when no answer waits (its connection died): changes never sit uncommitted.
            // And when a UDP batch of this turn already committed the changes the held-back
            // answers acknowledge: they go now (the commit finds nothing left to write).
            if self.h.service.uncommitted() || !self.deferred.is_empty() {
                self.commit_and_send();
            }
            if grace_until.is_none() && self.h.shared.stop.load(Ordering::Acquire) {
                grace_until = Some(
                    Instant::now()
                        + Duration::from_secs(
                            self.h
                                .shared
                                .live
                                .shutdown_grace_secs
                                .load(Ordering::Relaxed),
                        ),
                );
                self.begin_shutdown();
            }
            if let Some(deadline) = grace_until {
                if self.drain_idle_at.is_some_and(|t| Instant::now() >= t) {
                    self.close_idle();
                }
                if self.open == 0 || Instant::now() >= deadline {
                    if self.open > 0 {
                        log::warn!("worker {}: closing {} connections still busy at the end of the shutdown grace period", self.h.index, self.open);
                    }
                    return Ok(());
                }
            }
            if self.h.now != self.last_sweep {
                self.last_sweep = self.h.now;
                self.sweep_timeouts();
            }
        }
    }

    /// Drives the connections that can go on by themselves, oldest first, until the turn's
    /// time is spent; the rest keep their place for the next turn.
    fn drive_ready(&mut self, turn: Instant) {
        let ready = std::mem::take(&mut self.ready);
        let mut waiting = Vec::new();
        for slot in ready {
            if self.conns[slot].is_none() {
                continue; // closed since it was listed
            }
            if turn.elapsed() < TURN_BUDGET && self.address_may_go(slot) {
                if let Some(c) = self.conns[slot].as_mut() {
                    c.in_ready = false;
                }
                self.drive(slot);
            } else {
                waiting.push(slot); // keeps its place (and its flag)
            }
        }
        // Those listed while driving (by `finish`) go after those still waiting.
        let newer = std::mem::replace(&mut self.ready, waiting);
        self.ready.extend(newer);
    }

    /// Lists the connection in `slot` to be driven first next turn, unless it is listed.
    fn list_overflow(&mut self, slot: usize) {
        if let Some(c) = self.conns[slot].as_mut().filter(|c| !c.in_overflow) {
            c.in_overflow = true;
            self.overflow.push(slot);
        }
    }

    /// Whether the connection in `slot` may be driven from a carried-over list this turn: its
    /// address has had fewer than [`SLICES_PER_ADDRESS`] slices from them (counted here).
    fn address_may_go(&mut self, slot: usize) -> bool {
        let Some(c) = self.conns[slot].as_ref() else {
            return true;
        };
        let n = self.per_address.entry(c.peer.ip()).or_insert(0);
        if *n >= SLICES_PER_ADDRESS {
            return false;
        }
        *n += 1;
        true
    }

    /// Asks the service again about every parked request (it woke us: some are answerable
    /// now; the rest park again), then reads on from those connections.
    fn resume_parked(&mut self) {
        for slot in std::mem::take(&mut self.parked) {
            if let Some(c) = self.conns[slot].as_mut().filter(|c| c.parked) {
                c.parked = false;
                self.drive(slot);
            }
        }
    }

    /// Frames the messages other connections relayed to this worker's WebSocket connections
    /// into their output and sends them. A connection that would pass its output cap (it
    /// does not read) is closed; one that is gone (or whose slot holds a newer connection)
    /// has its messages dropped, counted.
    fn deliver_relays(&mut self) {
        let mut inbox = std::mem::take(&mut self.inbox);
        self.h.shared.hub.take(self.h.index, &mut inbox);
        if inbox.is_empty() {
            self.inbox = inbox;
            return;
        }
        let cap = self.h.shared.ws.max_output;
        let mut touched = Vec::new();
        let (mut sent, mut dropped) = (0u64, 0u64);
        for (slot, serial, text) in crate::ws::records(&inbox) {
            let slot = slot as usize;
            let Some(conn) = self
                .conns
                .get_mut(slot)
                .and_then(Option::as_mut)
                .filter(|c| !c.closing && c.ws.as_deref().is_some_and(|st| st.id.serial == serial))
            else {
                dropped += 1;
                continue;
            };
            if ws_queue(conn, text, cap) {
                sent += 1;
            } else {
                ws_fail(conn, ws::close::POLICY, "", ws_close::OUTPUT_FULL);
                dropped += 1;
            }
            if touched.last() != Some(&slot) {
                touched.push(slot);
            }
        }
        touched.sort_unstable();
        touched.dedup();
        for slot in touched {
            let slow = self.conns[slot].as_ref().is_some_and(|c| {
                c.ws.as_deref()
                    .is_some_and(|st| st.closed_for == Some(ws_close::OUTPUT_FULL))
            });
            let deferred = self.conns[slot].as_ref().is_some_and(|c| c.deferred);
            if slow {
                // It does not read: its close frame would wait behind what it left unread.
                self.close(slot);
            } else if !deferred {
                // (A connection whose answers wait for this turn's journal commit is sent to
                // after it, relays and all.)
                self.finish(slot, false);
            }
        }
        let m = &self.h.shared.metrics[self.h.index];
        m.ws_messages_out.add(sent);
        m.ws_relays_dropped.add(dropped);
        if inbox.capacity() > 1 << 20 {
            inbox = Vec::new();
        }
        self.inbox = inbox;
    }

    fn begin_shutdown(&mut self) {
        self.h.stopping = true;
        for l in self.tcp.iter_mut() {
            if let Some((mut l, _)) = l.take() {
                let _ = self.poll.registry().deregister(&mut l);
            }
        }
        if let Some(ring) = self.ring.as_mut() {
            // Receives are cancelled; answers in flight still go. The sockets stay open
            // (deregistered from nothing) until the ring is dropped.
            ring.stop();
            self.ring_more = true;
        } else {
            for s in self.udp.iter_mut() {
                if let Some(mut s) = s.take() {
                    let _ = self.poll.registry().deregister(&mut s);
                }
            }
        }
        // Busy ones finish their answers and close; idle ones get [`IDLE_DRAIN`] for a request
        // on its way (answered with `Connection: close`), then close; a request still
        // arriving is read to its end and answered.
        let mut upgraded = Vec::new();
        for (slot, c) in self.conns.iter_mut().enumerate() {
            let Some(c) = c.as_mut() else { continue };
            if c.ws.is_some() {
                ws_fail(
                    c,
                    ws::close::GOING_AWAY,
                    "server stopping",
                    ws_close::SHUTDOWN,
                );
                upgraded.push(slot);
            } else if c.pending_out() > 0 && c.rstart == c.rend {
                c.closing = true;
            }
        }
        for slot in upgraded {
            self.finish(slot, false);
        }
        self.drain_idle_at = Some(Instant::now() + IDLE_DRAIN);
    }

    /// Closes the connections with nothing to answer or send (a stop's drain is over).
    fn close_idle(&mut self) {
        for slot in 0..self.conns.len() {
            let idle = self.conns[slot]
                .as_ref()
                .is_some_and(|c| c.pending_out() == 0 && c.rstart == c.rend && !c.parked);
            if idle {
                self.close(slot);
            }
        }
    }

    fn accept(&mut self, i: usize) {
        let max = self
            .h
            .shared
            .live
            .max_connections_per_worker
            .load(Ordering::Relaxed) as usize;
        for _ in 0..ACCEPTS_PER_TURN {
            let Some((listener, kind)) = self.tcp[i].as_ref() else {
                return;
            };
            let kind = *kind;
            match listener.accept() {
                Ok((stream, peer)) => {
                    let m = &self.h.shared.metrics[self.h.index];
                    if self.open >= max {
                        m.rejected.add(1);
                        drop(stream);
                        continue;
                    }
                    // A balancer's connections are counted by the client each one carries,
                    // once its PROXY header is read.
                    let proxied = kind.serves()
                        && self
                            .h
                            .shared
                            .cfg
                            .proxy_protocol_from
                            .iter()
                            .any(|n| n.contains(&peer.ip().to_canonical()));
                    if !proxied && !self.h.shared.per_ip.try_add(peer.ip()) {
                        m.refused_per_ip.add(1);
                        drop(stream);
                        continue;
                    }
                    m.accepted.add(1);
                    // TCP_NODELAY is inherited from the listener: no setsockopt per connection.
                    self.add_conn(stream, peer, kind, proxied);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // EMFILE and friends (a connection flood can cause them): log rarely,
                    // keep serving the open connections.
                    hotpath_metrics::log_limited!(
                        warn,
                        1,
                        "worker {}: accept failed: {e}",
                        self.h.index
                    );
                    return;
                }
            }
        }
        // More may be waiting, and no new edge comes for them: go on next turn.
        self.backlog.push(i);
    }

    fn add_conn(&mut self, stream: TcpStream, peer: SocketAddr, kind: ListenerKind, proxied: bool) {
        let slot = self.free.pop().unwrap_or_else(|| {
            self.conns.push(None);
            self.conns.len() - 1
        });
        let tls = match (kind, &self.h.shared.tls) {
            (ListenerKind::Https, Some(t)) => match crate::tls::Session::new(t.config()) {
                Ok(c) => Some(Box::new(c)),
                Err(e) => {
                    hotpath_metrics::log_limited!(warn, 1, "TLS: no session for a connection: {e}");
                    self.h.shared.metrics[self.h.index].tls_failed.add(1);
                    if !proxied {
                        self.h.shared.per_ip.remove(peer.ip());
                    }
                    self.free.push(slot);
                    return;
                }
            },
            _ => None,
        };
        let (rbuf, out) = self
            .spare
            .pop()
            .unwrap_or_else(|| (vec![0; READ_BUF_START], Vec::new()));
        self.conns[slot] = Some(Conn {
            stream,
            peer,
            kind,
            rbuf,
            rstart: 0,
            rend: 0,
            out,
            out_pos: 0,
            last_active: self.h.now,
            partial_since: None,
            closing: false,
            registered: false,
            deferred: false,
            parked: false,
            parked_at: None,
            more: false,
            accounted: 0,
            in_ready: false,
            in_overflow: false,
            proxy_header: proxied,
            ip_counted: !proxied,
            ws: None,
            slot: slot as u32,
            tls,
            tls_counted: false,
        });
        self.open += 1;
        self.h.shared.metrics[self.h.index]
            .connections
            .set(self.open as u64);
        // The request has usually arrived with the connection: answer it now (or next turn,
        // when this one's time is spent). The connection is registered with epoll only if it
        // outlives this (see `finish`).
        if self.turn.elapsed() < TURN_BUDGET {
            self.drive(slot);
        } else {
            self.list_overflow(slot);
        }
    }

    fn close(&mut self, slot: usize) {
        if let Some(mut c) = self.conns[slot].take() {
            if let Some(t) = c.tls.as_deref_mut() {
                // close_notify, best effort (one non-blocking write of 24 bytes): a client
                // that reads to the end otherwise sees a truncation, and OpenSSL's then
                // forgets the session it could have resumed.
                t.close_notify();
                let _ = t.send(&mut c.stream);
            }
            // Dropping the stream closes the socket, which also removes it from epoll: no
            // epoll_ctl per connection. Its buffers are kept for the next connection.
            let shared = &self.h.shared;
            if c.ip_counted {
                shared.per_ip.remove(c.peer.ip());
            }
            shared.budget.resize(c.accounted, 0);
            if let Some(st) = c.ws.as_deref() {
                let m = &shared.metrics[self.h.index];
                m.ws_open.set(m.ws_open.get().saturating_sub(1));
                m.ws_closed[st.closed_for.unwrap_or(ws_close::CLIENT)].add(1);
                self.h.service.ws_closed(st.id, st.route);
            }
            let Conn { rbuf, mut out, .. } = c;
            if self.spare.len() < SPARE_BUFFERS
                && rbuf.len() == READ_BUF_START
                && out.capacity() <= READ_BUF_START
            {
                out.clear();
                self.spare.push((rbuf, out));
            }
            self.free.push(slot);
            self.open -= 1;
            self.h.shared.metrics[self.h.index]
                .connections
                .set(self.open as u64);
        }
    }

    /// Sends what is pending, answers what is buffered, reads what has arrived (answering as it
    /// goes), and sends again: at most one write per batch of pipelined requests.
    fn drive(&mut self, slot: usize) {
        let max_http = self.h.limits.max_header_bytes + self.h.limits.max_body_bytes;
        let max_out = self.h.output_cap();
        let Some(conn) = self.conns[slot].as_mut() else {
            return;
        };
        let max_total = if conn.ws.is_some() {
            self.h.shared.ws.max_frame + ws::MAX_HEADER
        } else {
            max_http
        };
        if conn.rbuf.is_empty() {
            // A WebSocket connection gave its buffer back while it waited.
            conn.rbuf = self
                .spare_rbufs
                .pop()
                .unwrap_or_else(|| vec![0; READ_BUF_START]);
        }
        if conn.deferred {
            // Driven already this turn: its answers wait for the commit and must not be sent
            // before it. Whatever brought it here is looked at next turn.
            self.list_overflow(slot);
            return;
        }
        conn.more = false;
        self.h.new_slice();
        // A parked connection is already on the list; one that parks in this drive joins it.
        let was_parked = conn.parked;
        let mut dead = !flush(conn);
        // Output pending now was committed already: only what this drive adds answers it.
        let committed_out = conn.pending_out();
        if !dead {
            self.h.process(conn);
        }
        while !dead
            && !conn.closing
            && !conn.parked
            && conn.pending_out() < max_out
            && !self.h.slice_spent()
        {
            if conn.rend == conn.rbuf.len() {
                if conn.rstart > 0 {
                    conn.rbuf.copy_within(conn.rstart..conn.rend, 0);
                    conn.rend -= conn.rstart;
                    conn.rstart = 0;
                } else if conn.rbuf.len() < max_total {
                    if conn.rbuf.len() >= HELD_OUTPUT && self.h.shared.budget.spent() {
                        // A large request while every buffer byte is taken: refuse it rather
                        // than grow past the budget.
                        self.h.metrics().budget_refused.add(1);
                        let reason = "server busy: too much buffered, retry later";
                        self.h.refuse(conn, 503, reason, Instant::now());
                        break;
                    }
                    let grown = (conn.rbuf.len() * 2).min(max_total);
                    conn.rbuf.resize(grown, 0);
                    conn.account(&self.h.shared.budget);
                } else {
                    // Cannot happen: the parser refuses heads and bodies beyond the limits.
                    dead = true;
                    break;
                }
            }
            let room = conn.rbuf.len() - conn.rend;
            let got = read_plain(&mut conn.stream, &mut conn.tls, &mut conn.rbuf[conn.rend..]);
            if !conn.tls_counted {
                if let Some(t) = conn.tls.as_ref().filter(|t| !t.is_handshaking()) {
                    conn.tls_counted = true;
                    let m = &self.h.shared.metrics[self.h.index];
                    match t.handshake_kind() {
                        Some(rustls::HandshakeKind::Resumed) => m.tls_resumed.add(1),
                        _ => m.tls_full.add(1),
                    }
                }
            }
            match got {
                Ok(0) => {
                    // The client closed its side. What it sent before was answered as it was
                    // read, so send what is pending and close.
                    conn.closing = true;
                }
                Ok(n) => {
                    conn.rend += n;
                    conn.last_active = self.h.now;
                    self.h.process(conn);
                    if n < room && conn.tls.is_none() {
                        // A short read drained the socket; new data brings a new edge. (Not
                        // so through TLS: what it decrypted says nothing of the socket.)
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    if conn.tls.is_some() && e.kind() == io::ErrorKind::InvalidData {
                        self.h.shared.metrics[self.h.index].tls_failed.add(1);
                    }
                    dead = true;
                }
            }
        }
        if !dead && conn.parked && !was_parked {
            self.parked.push(slot);
        }
        // Stopped at the output cap or at the turn's share, not because the socket ran dry:
        // carried on next turn, or once the output drains (see `finish`).
        conn.more = !dead
            && !conn.closing
            && !conn.parked
            && (conn.pending_out() >= max_out || self.h.slice_spent());
        if conn.more
            && conn.pending_out() >= max_out
            && max_out < self.h.shared.live.max_output_bytes.load(Ordering::Relaxed) as usize
        {
            // Stopped at the small cap the spent budget imposes, not at its own.
            self.h.metrics().budget_held.add(1);
        }
        if !dead
            && conn.kind.serves()
            && conn.pending_out() > committed_out
            && self.h.service.uncommitted()
        {
            // These answers acknowledge changes not yet in the journal (or answer from memory
            // that holds changes a failed journal write left out): they leave after the one
            // commit at the end of this event-loop turn. Admin answers report no service
            // state, so they never wait. A connection this drive gave no answer (its request
            // not read yet) has nothing to hold back, so a failed commit does not close it.
            if !conn.deferred {
                conn.deferred = true;
                self.deferred.push(slot);
            }
            return;
        }
        self.finish(slot, dead);
    }

    /// Commits the service's journal once for every answer this turn held back, then sends
    /// them; if the commit failed, the answers are dropped and their connections closed, so
    /// no client is told a change counted that might not be kept.
    fn commit_and_send(&mut self) {
        let durable = self.h.service.commit();
        if !durable {
            let (failed, closing, logged) = &mut self.failed_commits;
            *failed += 1;
            *closing += self.deferred.len();
            if *logged != Some(self.h.now) {
                log::error!(
                    "worker {}: the journal write failed; closing {} connections without their \
                     answers ({} failed writes since the last such line; at most one a second)",
                    self.h.index,
                    closing,
                    failed
                );
                self.failed_commits = (0, 0, Some(self.h.now));
            }
        }
        for slot in std::mem::take(&mut self.deferred) {
            let Some(conn) = self.conns[slot].as_mut() else {
                continue;
            };
            conn.deferred = false;
            if durable {
                self.finish(slot, false);
            } else {
                self.close(slot);
            }
        }
    }

    /// Sends what a drive left pending, then closes the connection or makes sure epoll
    /// watches it.
    fn finish(&mut self, slot: usize, mut dead: bool) {
        let Some(conn) = self.conns[slot].as_mut() else {
            return;
        };
        if !dead {
            dead = !flush(conn);
        }
        if !dead && conn.pending_out() > 0 {
            conn.last_active = self.h.now;
        }
        if dead || (conn.closing && conn.pending_out() == 0) {
            self.close(slot);
            return;
        }
        let waits = conn.ws.is_some() || conn.tls.as_ref().is_some_and(|t| t.is_handshaking());
        if waits && conn.rstart == conn.rend {
            // A WebSocket connection mostly waits, and so does one in a TLS handshake (for
            // the client's next flight): it holds no buffer meanwhile (one is taken again when
            // it has something to read).
            let rbuf = std::mem::take(&mut conn.rbuf);
            if rbuf.len() == READ_BUF_START && self.spare_rbufs.len() < SPARE_READ_BUFFERS {
                self.spare_rbufs.push(rbuf);
            }
            if conn.pending_out() == 0 {
                conn.out = Vec::new();
                conn.out_pos = 0;
            }
            if let Some(st) = conn.ws.as_deref_mut().filter(|st| !st.in_message) {
                st.frag = Vec::new();
            }
            if let Some(t) = conn.tls.as_deref_mut() {
                t.give_back();
            }
        }
        conn.account(&self.h.shared.budget);
        if conn.more && conn.pending_out() < self.h.output_cap() && !conn.in_ready {
            // The client took the answers at once: go on with its pipeline next turn.
            conn.more = false;
            conn.in_ready = true;
            self.ready.push(slot);
        }
        if !conn.registered {
            // Adding an fd reports readiness it already has, so nothing that arrived since the
            // last read is missed.
            let token = Token(CONN_BASE + slot);
            let interest = Interest::READABLE | Interest::WRITABLE;
            match self
                .poll
                .registry()
                .register(&mut conn.stream, token, interest)
            {
                Ok(()) => conn.registered = true,
                Err(e) => {
                    hotpath_metrics::log_limited!(
                        warn,
                        1,
                        "worker {}: cannot register a connection: {e}",
                        self.h.index
                    );
                    self.close(slot);
                }
            }
        }
    }

    fn udp_ready(&mut self, i: usize) {
        loop {
            let Some(socket) = self.udp[i].as_ref() else {
                return;
            };
            let n = match self.batch.recv(socket, self.udp_ipv6[i]) {
                Ok(n) => n,
                Err(e) => {
                    log::debug!("worker {}: recvmmsg: {e}", self.h.index);
                    return;
                }
            };
            if n == 0 {
                return;
            }
            // Every answer of a batch leaves in the same sendmmsg, so each request's time is the
            // batch's: one clock pair per batch, not per datagram.
            let started = Instant::now();
            let m = &self.h.shared.metrics[self.h.index];
            m.udp_in.add(n as u64);
            m.udp_batches.add(1);
            for j in 0..n {
                let ctx = Context {
                    peer: self.batch.from[j],
                    now: self.h.now,
                };
                let mut out = std::mem::take(&mut self.batch.outs[j]);
                out.clear();
                let (kind, outcome) = self.h.service.udp(self.batch.datagram(j), &ctx, &mut out);
                self.batch.outs[j] = out;
                m.count(metrics::UDP, kind, outcome);
            }
            if self.h.service.uncommitted() && !self.h.service.commit() {
                // Not durable: no answer may acknowledge it; clients retry.
                hotpath_metrics::log_limited!(
                    error,
                    1,
                    "worker {}: the journal write failed; dropping a batch of answers",
                    self.h.index
                );
                for j in 0..n {
                    self.batch.outs[j].clear();
                }
            }
            let (sent, failed) = self.batch.send(socket);
            m.latency(n as u64, started.elapsed().as_nanos() as u64);
            m.udp_out.add(sent as u64);
            m.udp_send_errors.add(failed as u64);
            if n < self.batch.size() {
                return;
            }
        }
    }

    /// Answers what the io_uring received: each round takes every completion, answers the
    /// received datagrams (one journal commit for the round, as for a recvmmsg batch) and
    /// submits the answers with the next receives in one call, which also runs the ring's
    /// completion work for the next round.
    fn ring_ready(&mut self) {
        self.ring_more = false;
        let Some(ring) = self.ring.as_mut() else {
            return;
        };
        let m = &self.h.shared.metrics[self.h.index];
        // Runs the completion work the eventfd announced; each round's own submit then
        // runs the next round's.
        if let Err(e) = ring.submit() {
            log::debug!("worker {}: io_uring submit: {e}", self.h.index);
        }
        for _ in 0..RING_ROUNDS {
            self.ring_got.clear();
            let reaped = ring.reap(&mut self.ring_got);
            m.udp_out.add(reaped.sent as u64);
            m.udp_send_errors.add(reaped.failed as u64);
            m.udp_buffers_full.add(reaped.buffers_full as u64);
            if reaped.recv_errors > 0 {
                log::debug!(
                    "worker {}: {} io_uring receives failed",
                    self.h.index,
                    reaped.recv_errors
                );
            }
            let n = self.ring_got.len();
            if n == 0 {
                // Answers that finished may have freed buffers for a receive to arm again.
                if let Err(e) = ring.settle() {
                    log::debug!("worker {}: io_uring submit: {e}", self.h.index);
                }
                return;
            }
            let started = Instant::now();
            m.udp_in.add(n as u64);
            m.udp_batches.add(1);
            for &slot in &self.ring_got {
                let (data, from, _, out) = ring.io(slot);
                let ctx = Context {
                    peer: from.unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0))),
                    now: self.h.now,
                };
                let (kind, outcome) = self.h.service.udp(data, &ctx, out);
                m.count(metrics::UDP, kind, outcome);
            }
            let durable = !self.h.service.uncommitted() || self.h.service.commit();
            if !durable {
                hotpath_metrics::log_limited!(
                    error,
                    1,
                    "worker {}: the journal write failed; dropping a batch of answers",
                    self.h.index
                );
            }
            for &slot in &self.ring_got {
                ring.answer(slot, durable);
            }
            if let Err(e) = ring.submit() {
                log::debug!("worker {}: io_uring submit: {e}", self.h.index);
            }
            m.latency(n as u64, started.elapsed().as_nanos() as u64);
        }
        self.ring_more = true;
    }

    /// Closes connections that idled too long or are too slow sending a request or reading an
    /// answer (slowloris, slow readers).
    fn sweep_timeouts(&mut self) {
        let now = self.h.now;
        let idle = self.h.shared.live.idle_timeout_secs.load(Ordering::Relaxed) as u32;
        let slow = self
            .h
            .shared
            .live
            .header_timeout_secs
            .load(Ordering::Relaxed) as u32;
        let ws_cfg = self.h.shared.ws.clone();
        let mut pinged = Vec::new();
        for slot in 0..self.conns.len() {
            if let Some(c) = self.conns[slot].as_mut().filter(|c| c.ws.is_some()) {
                let silent = now.saturating_sub(c.last_active);
                let why = if c.pending_out() > 0 && silent >= ws_cfg.send_timeout_secs {
                    Some(ws_close::SEND_TIMEOUT)
                } else if silent >= ws_cfg.idle_secs
                    || c.partial_since
                        .is_some_and(|t| now.saturating_sub(t) >= slow)
                {
                    // Silent, or a frame begun and not finished in server.header_timeout_secs.
                    Some(ws_close::IDLE)
                } else {
                    None
                };
                let st = c.ws.as_deref_mut().expect("filtered");
                match why {
                    Some(why) => {
                        st.closed_for.get_or_insert(why);
                        self.h.shared.metrics[self.h.index].timeouts.add(1);
                        self.close(slot);
                    }
                    None if silent >= ws_cfg.idle_secs / 2 && !st.pinged && !c.closing => {
                        st.pinged = true;
                        reserve_out(&mut c.out, &mut c.out_pos, 2, usize::MAX);
                        ws::write_frame(&mut c.out, Opcode::Ping, b"");
                        pinged.push(slot);
                    }
                    None => {}
                }
                continue;
            }
            let expired = self.conns[slot].as_ref().is_some_and(|c| {
                if c.tls.as_ref().is_some_and(|t| t.is_handshaking()) {
                    // A handshake gets as long as a request's head.
                    now.saturating_sub(c.last_active) >= slow
                } else if let Some(since) = c.partial_since {
                    now.saturating_sub(since) >= slow
                } else if c.pending_out() > 0 {
                    now.saturating_sub(c.last_active) >= slow
                } else {
                    now.saturating_sub(c.last_active) >= idle
                }
            });
            if expired {
                self.h.shared.metrics[self.h.index].timeouts.add(1);
                self.close(slot);
            }
        }
        self.h.shared.metrics[self.h.index]
            .ws_pings
            .add(pinged.len() as u64);
        for slot in pinged {
            self.finish(slot, false);
        }
    }
}

/// Reads what the client sent into `buf`, through TLS when the connection has it: `Ok(0)` at
/// its end, `WouldBlock` once the socket is drained, `InvalidData` for a TLS failure (its
/// alert is sent first).
fn read_plain(
    stream: &mut TcpStream,
    tls: &mut Option<Box<crate::tls::Session>>,
    buf: &mut [u8],
) -> io::Result<usize> {
    match tls.as_deref_mut() {
        Some(t) => t.read(stream, buf),
        None => stream.read(buf),
    }
}

/// Writes what is pending; false when the connection is dead.
fn flush(conn: &mut Conn) -> bool {
    if let Some(t) = conn.tls.as_deref_mut() {
        loop {
            match t.send(&mut conn.stream) {
                Ok(true) => {}
                Ok(false) => return true,
                Err(_) => return false,
            }
            if conn.out_pos == conn.out.len() {
                break;
            }
            match t.encrypt(&conn.out[conn.out_pos..]) {
                // The handshake is not done: the answer leaves once it is.
                Ok(0) => return true,
                Ok(n) => conn.out_pos += n,
                Err(_) => return false,
            }
        }
    }
    while conn.out_pos < conn.out.len() {
        match conn.stream.write(&conn.out[conn.out_pos..]) {
            Ok(0) => return false,
            Ok(n) => conn.out_pos += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    conn.out.clear();
    conn.out_pos = 0;
    if conn.out.capacity() > 1 << 16 {
        conn.out.shrink_to(1 << 12);
    }
    true
}

/// The waker a worker's poll uses for shutdown.
pub fn waker(poll: &Poll) -> io::Result<Waker> {
    Waker::new(poll.registry(), WAKER)
}
