//! Request metrics. Every worker owns one [`WorkerMetrics`] and is its only writer, so a count
//! is a plain load and store (no locked instruction, no shared cache line); the admin endpoint
//! reads all workers' blocks and sums them.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use hotpath_service::{Kind, Outcome};

/// A counter with a single writer.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds `n`. Only the owning worker may call this.
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.store(
            self.0.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }

    /// Sets the value (for gauges). Only the owning worker may call this.
    #[inline]
    pub fn set(&self, n: u64) {
        self.0.store(n, Ordering::Relaxed);
    }

    /// The current value.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

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

const KINDS: usize = Kind::ALL.len();
const OUTCOMES: usize = Outcome::ALL.len();

/// One worker's counters.
#[derive(Debug, Default)]
pub struct WorkerMetrics {
    requests: [[[Counter; OUTCOMES]; KINDS]; 2],
    latency: [Counter; LATENCY_BOUNDS_US.len() + 1],
    latency_sum_ns: Counter,
    /// Open HTTP connections (gauge).
    pub connections: Counter,
    /// Connections accepted.
    pub accepted: Counter,
    /// Connections closed at once because the worker was at its connection cap.
    pub rejected: Counter,
    /// Connections closed at once because their address held its maximum.
    pub refused_per_ip: Counter,
    /// Times a connection was held to the small output buffer because all connections'
    /// buffers had taken their budget.
    pub budget_held: Counter,
    /// Requests refused (503) because a larger read buffer would pass the budget.
    pub budget_refused: Counter,
    /// Connections closed for idling or being too slow (slowloris).
    pub timeouts: Counter,
    /// HTTP requests refused at the framing level (4xx/5xx before any route).
    pub http_errors: Counter,
    /// Datagrams received.
    pub udp_in: Counter,
    /// recvmmsg calls that returned datagrams.
    pub udp_batches: Counter,
    /// Datagrams sent.
    pub udp_out: Counter,
    /// Datagrams whose answer could not be sent (send buffer full or an error).
    pub udp_send_errors: Counter,
    /// Access log lines dropped because the log writer fell behind.
    pub access_log_dropped: Counter,
}

impl WorkerMetrics {
    /// Counts one request and its handling time.
    #[inline]
    pub fn request(&self, protocol: usize, kind: Kind, outcome: Outcome, nanos: u64) {
        self.count(protocol, kind, outcome);
        self.latency(1, nanos);
    }

    /// Counts one request (its time is recorded with [`WorkerMetrics::latency`]).
    #[inline]
    pub fn count(&self, protocol: usize, kind: Kind, outcome: Outcome) {
        self.requests[protocol][kind as usize][outcome as usize].add(1);
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

/// Sums of every worker's counters.
#[derive(Debug, Default)]
pub struct Totals {
    /// requests[protocol][kind][outcome]
    pub requests: [[[u64; OUTCOMES]; KINDS]; 2],
    /// Latency bucket counts (not cumulative).
    pub latency: [u64; LATENCY_BOUNDS_US.len() + 1],
    /// Sum of latencies in nanoseconds.
    pub latency_sum_ns: u64,
    /// Open connections.
    pub connections: u64,
    /// Accepted connections.
    pub accepted: u64,
    /// Rejected connections.
    pub rejected: u64,
    /// Connections refused at the per-address cap.
    pub refused_per_ip: u64,
    /// Connections held to the small output buffer by the buffer budget.
    pub budget_held: u64,
    /// Requests refused by the buffer budget.
    pub budget_refused: u64,
    /// Bytes all connections' buffers hold (set by the server, not summed from workers).
    pub buffer_bytes: u64,
    /// Timed-out connections.
    pub timeouts: u64,
    /// Framing-level HTTP errors.
    pub http_errors: u64,
    /// Datagrams in.
    pub udp_in: u64,
    /// Receive batches.
    pub udp_batches: u64,
    /// Datagrams out.
    pub udp_out: u64,
    /// Datagrams not sent.
    pub udp_send_errors: u64,
    /// Access log lines dropped.
    pub access_log_dropped: u64,
}

/// Sums all workers' counters.
pub fn totals(workers: &[WorkerMetrics]) -> Totals {
    let mut t = Totals::default();
    for w in workers {
        for p in 0..2 {
            for k in 0..KINDS {
                for o in 0..OUTCOMES {
                    t.requests[p][k][o] += w.requests[p][k][o].get();
                }
            }
        }
        for (i, b) in w.latency.iter().enumerate() {
            t.latency[i] += b.get();
        }
        t.latency_sum_ns += w.latency_sum_ns.get();
        t.connections += w.connections.get();
        t.accepted += w.accepted.get();
        t.rejected += w.rejected.get();
        t.timeouts += w.timeouts.get();
        t.refused_per_ip += w.refused_per_ip.get();
        t.budget_held += w.budget_held.get();
        t.budget_refused += w.budget_refused.get();
        t.http_errors += w.http_errors.get();
        t.udp_in += w.udp_in.get();
        t.udp_batches += w.udp_batches.get();
        t.udp_out += w.udp_out.get();
        t.udp_send_errors += w.udp_send_errors.get();
        t.access_log_dropped += w.access_log_dropped.get();
    }
    t
}

/// Renders the server's metrics in the Prometheus text format.
pub fn write_prometheus(t: &Totals, out: &mut String) {
    out.push_str("# HELP hotpath_requests_total Requests handled, by protocol, kind and result.\n");
    out.push_str("# TYPE hotpath_requests_total counter\n");
    for (p, proto) in PROTOCOLS.iter().enumerate() {
        for kind in Kind::ALL {
            for outcome in Outcome::ALL {
                let v = t.requests[p][kind as usize][outcome as usize];
                let _ = writeln!(
                    out,
                    "hotpath_requests_total{{protocol=\"{proto}\",kind=\"{}\",result=\"{}\"}} {v}",
                    kind.label(),
                    outcome.label()
                );
            }
        }
    }
    out.push_str("# HELP hotpath_request_duration_seconds Time from a request's read to its answer being ready (UDP: to its batch being sent).\n");
    out.push_str("# TYPE hotpath_request_duration_seconds histogram\n");
    let mut cumulative = 0;
    for (i, bound) in LATENCY_BOUNDS_US.iter().enumerate() {
        cumulative += t.latency[i];
        let le = *bound as f64 / 1e6;
        let _ = writeln!(
            out,
            "hotpath_request_duration_seconds_bucket{{le=\"{le}\"}} {cumulative}"
        );
    }
    cumulative += t.latency[LATENCY_BOUNDS_US.len()];
    let _ = writeln!(
        out,
        "hotpath_request_duration_seconds_bucket{{le=\"+Inf\"}} {cumulative}"
    );
    let _ = writeln!(
        out,
        "hotpath_request_duration_seconds_sum {}",
        t.latency_sum_ns as f64 / 1e9
    );
    let _ = writeln!(out, "hotpath_request_duration_seconds_count {cumulative}");
    let simple = [
        (
            "hotpath_connections",
            "gauge",
            "Open HTTP connections.",
            t.connections,
        ),
        (
            "hotpath_connections_accepted_total",
            "counter",
            "HTTP connections accepted.",
            t.accepted,
        ),
        (
            "hotpath_connections_rejected_total",
            "counter",
            "Connections closed at once at the per-worker cap.",
            t.rejected,
        ),
        (
            "hotpath_connections_refused_per_ip_total",
            "counter",
            "Connections closed at once because their address (IPv6: its /64) held server.max_connections_per_ip.",
            t.refused_per_ip,
        ),
        (
            "hotpath_connection_buffer_bytes",
            "gauge",
            "Bytes all connections' read and output buffers hold (budget: server.max_buffer_mb).",
            t.buffer_bytes,
        ),
        (
            "hotpath_connection_buffer_held_total",
            "counter",
            "Times a connection's unsent answers were held to 16 KiB because the buffer budget was spent.",
            t.budget_held,
        ),
        (
            "hotpath_connection_buffer_refused_total",
            "counter",
            "Requests answered 503 because reading them would pass the buffer budget.",
            t.budget_refused,
        ),
        (
            "hotpath_connections_timed_out_total",
            "counter",
            "Connections closed for idling or slowness.",
            t.timeouts,
        ),
        (
            "hotpath_http_framing_errors_total",
            "counter",
            "HTTP requests refused before routing (bad framing, limits).",
            t.http_errors,
        ),
        (
            "hotpath_udp_datagrams_received_total",
            "counter",
            "UDP datagrams received.",
            t.udp_in,
        ),
        (
            "hotpath_udp_datagrams_sent_total",
            "counter",
            "UDP datagrams sent.",
            t.udp_out,
        ),
        (
            "hotpath_udp_send_errors_total",
            "counter",
            "UDP answers that could not be sent.",
            t.udp_send_errors,
        ),
        (
            "hotpath_access_log_dropped_total",
            "counter",
            "Access log lines dropped because the writer fell behind.",
            t.access_log_dropped,
        ),
    ];
    for (name, kind, help, v) in simple {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_is_cumulative() {
        let w = [WorkerMetrics::default(), WorkerMetrics::default()];
        w[0].request(HTTP, Kind::Announce, Outcome::Ok, 3_000);
        w[1].request(UDP, Kind::Connect, Outcome::Ok, 2_000_000_000);
        let t = totals(&w);
        let mut out = String::new();
        write_prometheus(&t, &mut out);
        assert!(out.contains(
            "hotpath_requests_total{protocol=\"http\",kind=\"announce\",result=\"ok\"} 1"
        ));
        assert!(out.contains("hotpath_request_duration_seconds_bucket{le=\"0.000005\"} 1"));
        assert!(out.contains("hotpath_request_duration_seconds_bucket{le=\"1\"} 1"));
        assert!(out.contains("hotpath_request_duration_seconds_bucket{le=\"+Inf\"} 2"));
    }
}
