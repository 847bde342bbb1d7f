//! Request metrics. Every worker owns one [`WorkerMetrics`] and is its only writer, so a count
//! is a plain load and store (no locked instruction, no shared cache line); a scrape reads all
//! workers' blocks, sums them and adds them to the registry's [`Samples`].

use std::sync::Arc;

use hotpath_metrics::{Buckets, Desc, LocalCounter, Samples};
use hotpath_service::{Kind, Outcome};

/// Protocols, for the `protocol` label.
pub const PROTOCOLS: [&str; 2] = ["http", "udp"];
/// Index of HTTP in [`PROTOCOLS`].
pub const HTTP: usize = 0;
/// Index of UDP in [`PROTOCOLS`].
pub const UDP: usize = 1;

/// Upper bounds of the latency histogram's buckets, in microseconds.
pub const LATENCY_BOUNDS_US: [u64; 14] = [
    5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 25_000, 100_000, 1_000_000,
];
/// The same bounds in seconds, as the histogram prints them.
const LATENCY_BOUNDS_S: [f64; 14] = [
    0.000_005, 0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005,
    0.01, 0.025, 0.1, 1.0,
];

/// Kinds of request one server counts at most: the server's own and its services'.
pub const MAX_KINDS: usize = 16;
const OUTCOMES: usize = Outcome::ALL.len();

/// The kinds of request a server counts: its own, then its services' ([`Kind`]s they
/// declare). A kind no service declared is counted as `other`.
#[derive(Debug)]
pub struct KindTable {
    kinds: Vec<Kind>,
    /// Whether the server listens on UDP (else no UDP series is printed).
    udp: bool,
}

impl KindTable {
    /// The server's own kinds and `declared`, without repeats; past [`MAX_KINDS`] the rest
    /// are counted as `other` (and logged). `udp`: whether the server listens on UDP.
    pub fn new(declared: Vec<Kind>, udp: bool) -> KindTable {
        let mut kinds = Kind::BUILTIN.to_vec();
        for k in declared {
            if kinds.contains(&k) {
                continue;
            }
            if kinds.len() == MAX_KINDS {
                log::warn!(
                    "more than {MAX_KINDS} kinds of request: {:?} is counted as other",
                    k.label()
                );
                continue;
            }
            kinds.push(k);
        }
        KindTable { kinds, udp }
    }

    /// The kind's counter slot.
    #[inline]
    fn slot(&self, kind: Kind) -> usize {
        // A handful of kinds, the service's first after the three built in.
        self.kinds
            .iter()
            .rposition(|&k| k == kind)
            .unwrap_or(OTHER_SLOT)
    }
}

/// `Kind::OTHER`'s place in [`Kind::BUILTIN`].
const OTHER_SLOT: usize = 2;

/// One worker's counters.
#[derive(Debug)]
pub struct WorkerMetrics {
    kinds: Arc<KindTable>,
    requests: [[[LocalCounter; OUTCOMES]; MAX_KINDS]; 2],
    latency: [LocalCounter; LATENCY_BOUNDS_US.len() + 1],
    latency_sum_ns: LocalCounter,
    /// Open HTTP connections (gauge).
    pub connections: LocalCounter,
    /// Connections accepted.
    pub accepted: LocalCounter,
    /// Connections closed at once because the worker was at its connection cap.
    pub rejected: LocalCounter,
    /// Connections closed at once because their address held its maximum.
    pub refused_per_ip: LocalCounter,
    /// Times a connection was held to the small output buffer because all connections'
    /// buffers had taken their budget.
    pub budget_held: LocalCounter,
    /// Requests refused (503) because a larger read buffer would pass the budget.
    pub budget_refused: LocalCounter,
    /// Connections closed for idling or being too slow (slowloris).
    pub timeouts: LocalCounter,
    /// HTTP requests refused at the framing level (4xx/5xx before any route).
    pub http_errors: LocalCounter,
    /// Datagrams received.
    pub udp_in: LocalCounter,
    /// recvmmsg calls that returned datagrams.
    pub udp_batches: LocalCounter,
    /// Datagrams sent.
    pub udp_out: LocalCounter,
    /// Datagrams whose answer could not be sent (send buffer full or an error).
    pub udp_send_errors: LocalCounter,
    /// Times the io_uring path found every receive buffer taken.
    pub udp_buffers_full: LocalCounter,
    /// Access log lines dropped because the log writer fell behind.
    pub access_log_dropped: LocalCounter,
    /// Open WebSocket connections (gauge).
    pub ws_open: LocalCounter,
    /// WebSocket upgrades taken.
    pub ws_upgrades: LocalCounter,
    /// WebSocket upgrades refused (bad headers, no such route, refused by the service).
    pub ws_upgrades_refused: LocalCounter,
    /// WebSocket connections closed, by [`WS_CLOSE_REASONS`].
    pub ws_closed: [LocalCounter; WS_CLOSE_REASONS.len()],
    /// Text messages received whole.
    pub ws_messages_in: LocalCounter,
    /// Messages sent (answers and relays).
    pub ws_messages_out: LocalCounter,
    /// Relayed messages dropped: the connection was gone, or the receiving worker's inbox
    /// full.
    pub ws_relays_dropped: LocalCounter,
    /// Pings sent to silent connections.
    pub ws_pings: LocalCounter,
    /// TLS handshakes completed in full.
    pub tls_full: LocalCounter,
    /// TLS handshakes that resumed a session (by id or ticket).
    pub tls_resumed: LocalCounter,
    /// TLS handshakes or sessions that failed (a bad record, an alert, no common cipher).
    pub tls_failed: LocalCounter,
}

/// Why WebSocket connections closed (`hotpath_ws_closed_total{reason}`).
pub const WS_CLOSE_REASONS: [&str; 8] = [
    "client",
    "protocol_error",
    "too_big",
    "idle",
    "send_timeout",
    "output_full",
    "shutdown",
    "gone",
];
/// Indexes into [`WS_CLOSE_REASONS`].
pub mod ws_close {
    /// The client closed (a close frame, or its socket).
    pub const CLIENT: usize = 0;
    /// A frame RFC 6455 forbids, or text that is not UTF-8.
    pub const PROTOCOL: usize = 1;
    /// A frame or message over its limit.
    pub const TOO_BIG: usize = 2;
    /// Silent past webtorrent.idle_timeout_secs.
    pub const IDLE: usize = 3;
    /// Sent bytes left unread past webtorrent.send_timeout_secs.
    pub const SEND_TIMEOUT: usize = 4;
    /// Messages for it would pass webtorrent.max_output_bytes.
    pub const OUTPUT_FULL: usize = 5;
    /// The server stopped.
    pub const SHUTDOWN: usize = 6;
    /// The socket failed.
    pub const GONE: usize = 7;
}

impl WorkerMetrics {
    /// Counters for the kinds of `kinds`.
    pub fn new(kinds: Arc<KindTable>) -> WorkerMetrics {
        WorkerMetrics {
            kinds,
            requests: Default::default(),
            latency: Default::default(),
            latency_sum_ns: LocalCounter::default(),
            connections: LocalCounter::default(),
            accepted: LocalCounter::default(),
            rejected: LocalCounter::default(),
            refused_per_ip: LocalCounter::default(),
            budget_held: LocalCounter::default(),
            budget_refused: LocalCounter::default(),
            timeouts: LocalCounter::default(),
            http_errors: LocalCounter::default(),
            udp_in: LocalCounter::default(),
            udp_batches: LocalCounter::default(),
            udp_out: LocalCounter::default(),
            udp_send_errors: LocalCounter::default(),
            udp_buffers_full: LocalCounter::default(),
            access_log_dropped: LocalCounter::default(),
            ws_open: LocalCounter::default(),
            ws_upgrades: LocalCounter::default(),
            ws_upgrades_refused: LocalCounter::default(),
            ws_closed: Default::default(),
            ws_messages_in: LocalCounter::default(),
            ws_messages_out: LocalCounter::default(),
            ws_relays_dropped: LocalCounter::default(),
            ws_pings: LocalCounter::default(),
            tls_full: LocalCounter::default(),
            tls_resumed: LocalCounter::default(),
            tls_failed: LocalCounter::default(),
        }
    }

    /// Counts one request and its handling time.
    #[inline]
    pub fn request(&self, protocol: usize, kind: Kind, outcome: Outcome, nanos: u64) {
        self.count(protocol, kind, outcome);
        self.latency(1, nanos);
    }

    /// Counts one request (its time is recorded with [`WorkerMetrics::latency`]).
    #[inline]
    pub fn count(&self, protocol: usize, kind: Kind, outcome: Outcome) {
        self.requests[protocol][self.kinds.slot(kind)][outcome as usize].add(1);
    }

    /// Records that `n` requests each took `nanos` (a batch answered together).
    #[inline]
    pub fn latency(&self, n: u64, nanos: u64) {
        let us = nanos / 1000;
        let bucket = LATENCY_BOUNDS_US
            .iter()
            .position(|&b| us <= b)
            .unwrap_or(LATENCY_BOUNDS_US.len());
        self.latency[bucket].add(n);
        self.latency_sum_ns.add(n * nanos);
    }
}

static REQUESTS: Desc = Desc::counter(
    "hotpath_requests_total",
    "Requests handled, by protocol, kind and result.",
)
.labels(&["protocol", "kind", "result"]);
static DURATION: Desc = Desc::histogram(
    "hotpath_request_duration_seconds",
    "Time from a request's read to its answer being ready (UDP: to its batch being sent).",
);
static UPTIME: Desc = Desc::gauge(
    "hotpath_uptime_seconds",
    "Seconds since the server started.",
)
.stat("uptime_secs");
static WORKERS: Desc = Desc::gauge("hotpath_workers", "Worker threads (server.workers).");
static CONNECTIONS: Desc = Desc::gauge("hotpath_connections", "Open HTTP connections.");
static ACCEPTED: Desc = Desc::counter(
    "hotpath_connections_accepted_total",
    "HTTP connections accepted.",
);
static REJECTED: Desc = Desc::counter(
    "hotpath_connections_rejected_total",
    "Connections closed at once at the per-worker cap.",
);
static REFUSED_PER_IP: Desc = Desc::counter(
    "hotpath_connections_refused_per_ip_total",
    "Connections closed at once because their address (IPv6: its /64) held \
     server.max_connections_per_ip.",
);
static BUFFER_BYTES: Desc = Desc::gauge(
    "hotpath_connection_buffer_bytes",
    "Bytes all connections' read and output buffers hold (budget: server.max_buffer_mb).",
);
static BUFFER_HELD: Desc = Desc::counter(
    "hotpath_connection_buffer_held_total",
    "Times a connection's unsent answers were held to 16 KiB because the buffer budget was \
     spent.",
);
static BUFFER_REFUSED: Desc = Desc::counter(
    "hotpath_connection_buffer_refused_total",
    "Requests answered 503 because reading them would pass the buffer budget.",
);
static TIMED_OUT: Desc = Desc::counter(
    "hotpath_connections_timed_out_total",
    "Connections closed for idling or slowness.",
);
static FRAMING: Desc = Desc::counter(
    "hotpath_http_framing_errors_total",
    "HTTP requests refused before routing (bad framing, limits).",
);
static UDP_IN: Desc = Desc::counter(
    "hotpath_udp_datagrams_received_total",
    "UDP datagrams received.",
);
static UDP_BATCHES: Desc = Desc::counter(
    "hotpath_udp_batches_total",
    "Receive calls that returned datagrams (recvmmsg batches).",
);
static UDP_OUT: Desc = Desc::counter("hotpath_udp_datagrams_sent_total", "UDP datagrams sent.");
static UDP_SEND_ERRORS: Desc = Desc::counter(
    "hotpath_udp_send_errors_total",
    "UDP answers that could not be sent.",
);
static UDP_BUFFERS_FULL: Desc = Desc::counter(
    "hotpath_udp_receive_buffers_full_total",
    "Times io_uring found every UDP receive buffer taken (datagrams wait in the socket buffer; server.udp_batch sets how many).",
);
static ACCESS_LOG_DROPPED: Desc = Desc::counter(
    "hotpath_access_log_dropped_total",
    "Access log lines dropped because the writer fell behind.",
);

static WS_OPEN: Desc = Desc::gauge(
    "hotpath_ws_connections",
    "Open WebSocket connections (WebTorrent peers).",
);
static WS_UPGRADES: Desc = Desc::counter(
    "hotpath_ws_upgrades_total",
    "WebSocket upgrades, by result.",
)
.labels(&["result"]);
static WS_CLOSED: Desc = Desc::counter(
    "hotpath_ws_closed_total",
    "WebSocket connections closed, by reason.",
)
.labels(&["reason"]);
static WS_IN: Desc = Desc::counter(
    "hotpath_ws_messages_received_total",
    "WebSocket text messages received whole.",
);
static WS_OUT: Desc = Desc::counter(
    "hotpath_ws_messages_sent_total",
    "WebSocket messages sent (answers and relayed offers and answers).",
);
static WS_RELAYS_DROPPED: Desc = Desc::counter(
    "hotpath_ws_relays_dropped_total",
    "Relayed messages dropped: their connection was gone, or its worker's inbox full.",
);
static TLS_HANDSHAKES: Desc = Desc::counter(
    "hotpath_tls_handshakes_total",
    "TLS handshakes on the HTTPS listeners, by result: full, resumed (session id or ticket), \
     failed.",
)
.labels(&["result"]);
static WS_PINGS: Desc = Desc::counter(
    "hotpath_ws_pings_total",
    "Pings sent to silent WebSocket connections.",
);

/// Adds every worker's counters, summed, to a scrape (the top level of `/stats`), with the
/// server-wide figures given.
pub fn collect(workers: &[WorkerMetrics], server: &ServerFigures, out: &mut Samples) {
    let sum = |f: fn(&WorkerMetrics) -> &LocalCounter| -> u64 {
        workers.iter().map(|w| f(w).get()).sum()
    };
    out.section("");
    out.add(&UPTIME, server.uptime_secs)
        .add(&WORKERS, workers.len());
    if let Some(first) = workers.first() {
        let protocols = if first.kinds.udp { 2 } else { 1 };
        for (p, proto) in PROTOCOLS.iter().enumerate().take(protocols) {
            for (slot, kind) in first.kinds.kinds.iter().enumerate() {
                if (p == UDP && !kind.on_udp()) || (p == HTTP && !kind.on_http()) {
                    continue;
                }
                for outcome in Outcome::ALL {
                    if p == HTTP && outcome == Outcome::Dropped {
                        // An HTTP request is answered or refused, never dropped.
                        continue;
                    }
                    let n: u64 = workers
                        .iter()
                        .map(|w| w.requests[p][slot][outcome as usize].get())
                        .sum();
                    out.labeled(&REQUESTS, &[proto, kind.label(), outcome.label()], n);
                }
            }
        }
    }
    let mut counts = vec![0; LATENCY_BOUNDS_US.len() + 1];
    for w in workers {
        for (c, b) in counts.iter_mut().zip(&w.latency) {
            *c += b.get();
        }
    }
    let sum_ns = sum(|w| &w.latency_sum_ns);
    out.histogram(
        &DURATION,
        &[],
        Buckets {
            bounds: &LATENCY_BOUNDS_S,
            counts,
            sum: sum_ns as f64 / 1e9,
        },
    );
    out.add(&CONNECTIONS, sum(|w| &w.connections))
        .add(&ACCEPTED, sum(|w| &w.accepted))
        .add(&REJECTED, sum(|w| &w.rejected))
        .add(&REFUSED_PER_IP, sum(|w| &w.refused_per_ip))
        .add(&BUFFER_BYTES, server.buffer_bytes)
        .add(&BUFFER_HELD, sum(|w| &w.budget_held))
        .add(&BUFFER_REFUSED, sum(|w| &w.budget_refused))
        .add(&TIMED_OUT, sum(|w| &w.timeouts))
        .add(&FRAMING, sum(|w| &w.http_errors))
        .add(&UDP_IN, sum(|w| &w.udp_in))
        .add(&UDP_BATCHES, sum(|w| &w.udp_batches))
        .add(&UDP_OUT, sum(|w| &w.udp_out))
        .add(&UDP_SEND_ERRORS, sum(|w| &w.udp_send_errors))
        .add(&UDP_BUFFERS_FULL, sum(|w| &w.udp_buffers_full))
        .add(&ACCESS_LOG_DROPPED, sum(|w| &w.access_log_dropped))
        .add(&WS_OPEN, sum(|w| &w.ws_open))
        .add(&WS_IN, sum(|w| &w.ws_messages_in))
        .add(&WS_OUT, sum(|w| &w.ws_messages_out))
        .add(&WS_RELAYS_DROPPED, sum(|w| &w.ws_relays_dropped))
        .add(&WS_PINGS, sum(|w| &w.ws_pings))
        .add(
            &hotpath_metrics::LOG_LINES_SUPPRESSED_DESC,
            hotpath_metrics::log_lines_suppressed(),
        );
    out.labeled(&TLS_HANDSHAKES, &["full"], sum(|w| &w.tls_full));
    out.labeled(&TLS_HANDSHAKES, &["resumed"], sum(|w| &w.tls_resumed));
    out.labeled(&TLS_HANDSHAKES, &["failed"], sum(|w| &w.tls_failed));
    out.labeled(&WS_UPGRADES, &["ok"], sum(|w| &w.ws_upgrades));
    out.labeled(&WS_UPGRADES, &["refused"], sum(|w| &w.ws_upgrades_refused));
    for (i, reason) in WS_CLOSE_REASONS.iter().enumerate() {
        let n: u64 = workers.iter().map(|w| w.ws_closed[i].get()).sum();
        out.labeled(&WS_CLOSED, &[reason], n);
    }
}

/// What the server knows beside its workers' counters.
#[derive(Debug, Default)]
pub struct ServerFigures {
    /// Seconds since start.
    pub uptime_secs: u32,
    /// Bytes all connections' buffers hold.
    pub buffer_bytes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    const ANNOUNCE: Kind = Kind::http_and_udp("announce");
    const POPUP: Kind = Kind::http("popup");

    fn workers() -> [WorkerMetrics; 2] {
        let kinds = Arc::new(KindTable::new(vec![ANNOUNCE, POPUP], true));
        [WorkerMetrics::new(kinds.clone()), WorkerMetrics::new(kinds)]
    }

    fn text(w: &[WorkerMetrics]) -> String {
        let mut s = Samples::new();
        collect(w, &ServerFigures::default(), &mut s);
        let mut out = String::new();
        s.prometheus(&mut out);
        out
    }

    #[test]
    fn histogram_is_cumulative_and_requests_sum_over_workers() {
        let w = workers();
        w[0].request(HTTP, ANNOUNCE, Outcome::Ok, 3_000);
        w[1].request(HTTP, ANNOUNCE, Outcome::Ok, 2_000_000_000);
        let out = text(&w);
        assert!(out.contains(
            "hotpath_requests_total{protocol=\"http\",kind=\"announce\",result=\"ok\"} 2\n"
        ));
        assert!(out.contains("hotpath_request_duration_seconds_bucket{le=\"0.000005\"} 1\n"));
        assert!(out.contains("hotpath_request_duration_seconds_bucket{le=\"0.005\"} 1\n"));
        assert!(out.contains("hotpath_request_duration_seconds_bucket{le=\"1\"} 1\n"));
        assert!(out.contains("hotpath_request_duration_seconds_bucket{le=\"+Inf\"} 2\n"));
    }

    #[test]
    fn only_label_combinations_that_can_occur_are_printed() {
        let w = workers();
        let out = text(&w);
        assert!(out.contains("protocol=\"udp\",kind=\"announce\",result=\"dropped\"} 0"));
        assert!(out.contains("protocol=\"http\",kind=\"popup\",result=\"refused\"} 0"));
        assert!(!out.contains("protocol=\"udp\",kind=\"popup\""), "{out}");
        assert!(!out.contains("protocol=\"udp\",kind=\"health\""), "{out}");
        assert!(!out.contains("protocol=\"http\",kind=\"announce\",result=\"dropped\""));
        // A kind nobody declared is counted as other.
        w[0].count(UDP, Kind::udp("connect"), Outcome::Ok);
        assert!(text(&w).contains("protocol=\"udp\",kind=\"other\",result=\"ok\"} 1"));
        // A server without UDP listeners prints no UDP series.
        let http_only = [WorkerMetrics::new(Arc::new(KindTable::new(
            vec![ANNOUNCE],
            false,
        )))];
        let out = text(&http_only);
        assert!(out.contains("protocol=\"http\",kind=\"announce\""));
        assert!(!out.contains("protocol=\"udp\""), "{out}");
    }
}
