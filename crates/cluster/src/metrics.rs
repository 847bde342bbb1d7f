//! The cluster's metrics: deltas and messages in and out, drops, Redis reachability, the
//! delivery lag, and peers by the node they announced to.

use std::sync::atomic::{AtomicU64, Ordering};

use hotpath_metrics::{Buckets, Counter, Desc, Samples};
use hotpath_tracker::exchange::Applied;

pub(crate) static DELTAS_QUEUED: Desc = Desc::counter(
    "hotpath_cluster_deltas_queued_total",
    "Deltas (announces accepted here) queued for the other nodes.",
);
pub(crate) static DELTAS_DROPPED: Desc = Desc::counter(
    "hotpath_cluster_deltas_dropped_total",
    "Deltas dropped: the outboxes held cluster.max_pending_deltas (Redis slow or down).",
);
pub(crate) static DELTAS_PENDING: Desc = Desc::gauge(
    "hotpath_cluster_deltas_pending",
    "Deltas waiting to be published.",
);
pub(crate) static DELTAS_PUBLISHED: Desc = Desc::counter(
    "hotpath_cluster_deltas_published_total",
    "Deltas published to the other nodes.",
);
pub(crate) static MESSAGES_PUBLISHED: Desc = Desc::counter(
    "hotpath_cluster_messages_published_total",
    "Exchange messages published (SPUBLISH).",
);
pub(crate) static PUBLISHED_BYTES: Desc = Desc::counter(
    "hotpath_cluster_published_bytes_total",
    "Bytes of exchange messages published.",
);
pub(crate) static MESSAGES_RECEIVED: Desc = Desc::counter(
    "hotpath_cluster_messages_received_total",
    "Exchange messages received from the other nodes.",
);
pub(crate) static RECEIVED_BYTES: Desc = Desc::counter(
    "hotpath_cluster_received_bytes_total",
    "Bytes of exchange messages received from the other nodes.",
);
pub(crate) static MESSAGES_DROPPED: Desc = Desc::counter(
    "hotpath_cluster_messages_dropped_total",
    "Messages received and dropped: cluster.max_inbound_messages waited to be applied.",
);
pub(crate) static MESSAGES_REFUSED: Desc = Desc::counter(
    "hotpath_cluster_messages_refused_total",
    "Messages refused: a MAC that does not match (another secret, or forged), an unknown \
     version, or a malformed body.",
);
pub(crate) static DELTAS_APPLIED: Desc = Desc::counter(
    "hotpath_cluster_deltas_applied_total",
    "Deltas from other nodes, by what applying them did (stale: older than the record held, \
     expired, or from the future; full: a cap held).",
)
.labels(&["result"]);
pub(crate) static REDIS_UP: Desc = Desc::gauge(
    "hotpath_cluster_redis_up",
    "1 while the last publish or connect to Redis Cluster succeeded.",
);
pub(crate) static REDIS_ERRORS: Desc = Desc::counter(
    "hotpath_cluster_redis_errors_total",
    "Failed connects, subscribes and publishes to Redis Cluster.",
);
pub(crate) static LAG: Desc = Desc::histogram(
    "hotpath_cluster_delivery_lag_seconds",
    "From a message's publish on its node to its arrival here (the nodes' clocks' difference \
     included).",
);
pub(crate) static PEERS: Desc = Desc::gauge(
    "hotpath_cluster_peers",
    "Peers in this node's table by the node they announced to (as of the last sweep).",
)
.labels(&["origin"]);

pub(crate) static READY: Desc = Desc::gauge(
    "hotpath_cluster_ready",
    "1 once the replica was filled from the nodes' snapshots (or Redis was out of reach at \
     start); /healthz answers 503 before.",
);
pub(crate) static SNAPSHOTS: Desc = Desc::counter(
    "hotpath_cluster_snapshots_total",
    "This node's snapshot keys rewritten (cluster.snapshot_secs).",
);
pub(crate) static SNAPSHOT_PEERS: Desc = Desc::gauge(
    "hotpath_cluster_snapshot_peers",
    "Peers in this node's last snapshot (those that announced to it).",
);
pub(crate) static SNAPSHOT_BYTES: Desc = Desc::gauge(
    "hotpath_cluster_snapshot_bytes",
    "Bytes of this node's last snapshot in Redis.",
);
pub(crate) static FILLS: Desc = Desc::counter(
    "hotpath_cluster_fills_total",
    "Times the replica was filled from the nodes' snapshots (at start, and after Redis was \
     out of reach).",
);

/// Upper bounds of the lag histogram, seconds.
pub(crate) const LAG_BOUNDS: [f64; 10] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0];

/// A histogram of delivery lags.
#[derive(Debug, Default)]
pub(crate) struct Lag {
    counts: [AtomicU64; LAG_BOUNDS.len() + 1],
    sum_us: AtomicU64,
}

impl Lag {
    /// Notes one message's lag, in ms (0 when the sender's clock is ahead).
    pub fn observe(&self, ms: u64) {
        let s = ms as f64 / 1000.0;
        let i = LAG_BOUNDS
            .iter()
            .position(|&b| s <= b)
            .unwrap_or(LAG_BOUNDS.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(ms * 1000, Ordering::Relaxed);
    }

    fn buckets(&self) -> Buckets {
        Buckets {
            bounds: &LAG_BOUNDS,
            counts: self
                .counts
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .collect(),
            sum: self.sum_us.load(Ordering::Relaxed) as f64 / 1e6,
        }
    }
}

/// The counters the exchange keeps (the outboxes keep theirs).
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub(crate) deltas_published: Counter,
    pub(crate) messages_published: Counter,
    pub(crate) published_bytes: Counter,
    pub(crate) messages_received: Counter,
    pub(crate) received_bytes: Counter,
    pub(crate) messages_dropped: Counter,
    pub(crate) messages_refused: Counter,
    pub(crate) added: Counter,
    pub(crate) updated: Counter,
    pub(crate) removed: Counter,
    pub(crate) stale: Counter,
    pub(crate) full: Counter,
    pub(crate) redis_up: Counter,
    pub(crate) redis_errors: Counter,
    pub(crate) snapshots: Counter,
    pub(crate) snapshot_peers: Counter,
    pub(crate) snapshot_bytes: Counter,
    pub(crate) fills: Counter,
    pub(crate) lag: Lag,
}

impl Stats {
    /// Adds what one message's deltas did.
    pub fn applied(&self, a: &Applied) {
        self.added.add(a.added);
        self.updated.add(a.updated);
        self.removed.add(a.removed);
        self.stale.add(a.stale);
        self.full.add(a.full);
    }

    /// Adds the metrics to a scrape, under the `/stats` section "cluster".
    pub fn collect(
        &self,
        out: &mut Samples,
        outbox: &hotpath_tracker::exchange::Exchange,
        by_origin: &[(u8, usize)],
        ready: bool,
    ) {
        let get = Counter::get;
        out.section("cluster")
            .add(&DELTAS_QUEUED, get(&outbox.queued))
            .add(&DELTAS_DROPPED, get(&outbox.dropped))
            .add(&DELTAS_PENDING, outbox.pending())
            .add(&DELTAS_PUBLISHED, get(&self.deltas_published))
            .add(&MESSAGES_PUBLISHED, get(&self.messages_published))
            .add(&PUBLISHED_BYTES, get(&self.published_bytes))
            .add(&MESSAGES_RECEIVED, get(&self.messages_received))
            .add(&RECEIVED_BYTES, get(&self.received_bytes))
            .add(&MESSAGES_DROPPED, get(&self.messages_dropped))
            .add(&MESSAGES_REFUSED, get(&self.messages_refused))
            .add(&REDIS_UP, get(&self.redis_up))
            .add(&REDIS_ERRORS, get(&self.redis_errors))
            .add(&READY, u64::from(ready))
            .add(&SNAPSHOTS, get(&self.snapshots))
            .add(&SNAPSHOT_PEERS, get(&self.snapshot_peers))
            .add(&SNAPSHOT_BYTES, get(&self.snapshot_bytes))
            .add(&FILLS, get(&self.fills));
        for (result, c) in [
            ("added", &self.added),
            ("updated", &self.updated),
            ("removed", &self.removed),
            ("stale", &self.stale),
            ("full", &self.full),
        ] {
            out.labeled(&DELTAS_APPLIED, &[result], get(c));
        }
        out.histogram(&LAG, &[], self.lag.buckets());
        for (origin, n) in by_origin {
            out.labeled(&PEERS, &[&origin.to_string()], *n);
        }
    }
}
