//! Cluster mode (`[cluster]`): several hotpath nodes serve one set of swarms.
//!
//! Every node keeps a full replica of every swarm and answers from it; nothing on the request
//! path waits for the network. A worker that accepts an announce queues a delta in the
//! tracker's outboxes ([`hotpath_tracker::exchange`]); here, one thread takes them every
//! `cluster.publish_ms`, groups them by info hash into `cluster.groups` channels, and publishes
//! each group's deltas with `SPUBLISH` (Redis Cluster's sharded pub/sub: a channel lives on the
//! master of its hash slot, so the groups spread over the masters and a message crosses one
//! of them only). Every node subscribes to every group (`SSUBSCRIBE`); the messages it receives
//! are checked (a MAC keyed by the shared secret), queued (bounded) and merged into its table
//! by a second thread. The Redis client follows the cluster: MOVED and ASK, topology changes,
//! resubscription after a failover.
//!
//! The shared secret also keys UDP connection ids, so any node accepts an id another issued.

#![forbid(unsafe_code)]

mod metrics;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hotpath_config::ClusterConfig;
use hotpath_service::{Background, Component, Samples};
use hotpath_tracker::exchange::{self as tracker_exchange, Applied, Exchange};
use hotpath_tracker::Shared;
use hotpath_wire::exchange::{self, Delta};

use metrics::Stats;

/// What can stop a node from starting.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The secret file cannot be read.
    #[error("cluster.secret_file {path}: {source}")]
    SecretFile {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The secret is too short.
    #[error("{key}: the secret must be at least 16 characters")]
    SecretShort {
        /// Where it came from.
        key: &'static str,
    },
    /// The tracker was not built as a node.
    #[error("the tracker was not built for cluster mode (Tracker::for_node)")]
    NotANode,
}

/// Keys derived from the cluster's shared secret, one per use.
#[derive(Clone)]
pub struct Keys {
    /// Keys UDP connection ids.
    pub connection: [u8; 16],
    /// Signs exchange messages.
    pub exchange: [u8; 16],
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Keys(..)")
    }
}

/// The longest secret file read.
const MAX_SECRET_FILE: u64 = 4096;

impl Keys {
    /// The keys of `cfg`'s secret: `cluster.secret`, or the first line of `secret_file`.
    pub fn load(cfg: &ClusterConfig) -> Result<Keys, ClusterError> {
        if cfg.secret_file.is_empty() {
            return Keys::from_secret(cfg.secret.trim(), "cluster.secret");
        }
        use std::io::Read as _;
        let err = |source| ClusterError::SecretFile {
            path: cfg.secret_file.clone(),
            source,
        };
        let mut text = String::new();
        std::fs::File::open(&cfg.secret_file)
            .map_err(err)?
            .take(MAX_SECRET_FILE)
            .read_to_string(&mut text)
            .map_err(err)?;
        Keys::from_secret(
            text.lines().next().unwrap_or("").trim(),
            "cluster.secret_file",
        )
    }

    /// The keys of `secret` (at least 16 characters).
    pub fn from_secret(secret: &str, key: &'static str) -> Result<Keys, ClusterError> {
        if secret.len() < 16 {
            return Err(ClusterError::SecretShort { key });
        }
        let derive = |label: &str| {
            use sha1::Digest as _;
            let mut h = sha1::Sha1::new();
            h.update(b"hotpath cluster ");
            h.update(label.as_bytes());
            h.update([0]);
            h.update(secret.as_bytes());
            let d = h.finalize();
            let mut k = [0u8; 16];
            k.copy_from_slice(&d[..16]);
            k
        };
        Ok(Keys {
            connection: derive("udp connection ids"),
            exchange: derive("swarm exchange"),
        })
    }
}

/// The channel of group `g`: its hash tag (in braces) is the group's number, so Redis
/// Cluster puts the groups on hash slots spread over its masters.
pub fn channel(prefix: &str, g: u16) -> String {
    format!("{prefix}:x:{{{g}}}")
}

/// Unix milliseconds now.
fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// One node of a cluster: the exchange's two threads and their metrics.
pub struct Node {
    cfg: ClusterConfig,
    keys: Keys,
    shared: Arc<Shared>,
    outbox: Arc<Exchange>,
    stats: Stats,
    inbound: SyncSender<Vec<u8>>,
    /// Taken by the apply thread when it starts.
    receiver: parking_lot::Mutex<Option<Receiver<Vec<u8>>>>,
}

impl Node {
    /// A node of the tracker `shared` (built with `Tracker::for_node`).
    pub fn new(cfg: &ClusterConfig, keys: Keys, shared: Arc<Shared>) -> Result<Node, ClusterError> {
        let outbox = shared.exchange.clone().ok_or(ClusterError::NotANode)?;
        let (inbound, receiver) = std::sync::mpsc::sync_channel(cfg.max_inbound_messages);
        Ok(Node {
            cfg: cfg.clone(),
            keys,
            shared,
            outbox,
            stats: Stats::default(),
            inbound,
            receiver: parking_lot::Mutex::new(Some(receiver)),
        })
    }

    /// Checks one received message and merges its deltas (not this node's own: every node
    /// hears its own publishes too). Returns whether it was accepted.
    pub fn apply_message(&self, msg: &[u8]) -> bool {
        let m = match exchange::open(msg, &self.keys.exchange) {
            Ok(m) => m,
            Err(e) => {
                self.stats.messages_refused.add(1);
                log::debug!("cluster: message refused: {e}");
                return false;
            }
        };
        if m.origin == self.outbox.origin {
            return true;
        }
        self.stats.lag.observe(unix_ms().saturating_sub(m.sent_ms));
        let now = hotpath_service::process_secs();
        let unix_now = (self.shared.unix_base + i64::from(now)) as u32;
        let timeout = self.shared.cfg.peer_timeout_secs as u16;
        let mut applied = Applied::default();
        let mut ok = true;
        for d in m.deltas() {
            match d {
                Ok(d) => tracker_exchange::apply(
                    &*self.shared.swarms,
                    &d,
                    m.origin,
                    (now, unix_now),
                    timeout,
                    hotpath_tracker::CLOCK_SKEW_SECS,
                    &mut applied,
                ),
                Err(e) => {
                    // Signed by a node with the secret, yet malformed: what came before
                    // the fault stands.
                    self.stats.messages_refused.add(1);
                    log::warn!("cluster: a message from node {} stops early: {e}", m.origin);
                    ok = false;
                }
            }
        }
        self.stats.applied(&applied);
        ok
    }

    /// Hands a received message to the apply thread; drops it (counted) when
    /// `cluster.max_inbound_messages` wait already.
    fn receive(&self, msg: Vec<u8>) {
        self.stats.messages_received.add(1);
        self.stats.received_bytes.add(msg.len() as u64);
        if msg.len() > exchange::MAX_MESSAGE {
            self.stats.messages_refused.add(1);
            return;
        }
        match self.inbound.try_send(msg) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.stats.messages_dropped.add(1)
            }
        }
    }

    /// Applies received messages until `stop`.
    fn run_apply(&self, stop: &AtomicBool) {
        let Some(rx) = self.receiver.lock().take() else {
            return;
        };
        while !stop.load(Ordering::Relaxed) {
            if let Ok(msg) = rx.recv_timeout(Duration::from_millis(200)) {
                self.apply_message(&msg);
            }
        }
    }

    /// Packs `deltas` (one group's) into messages of at most `cluster.max_message_bytes`,
    /// each with the deltas it carries, so a failed publish can put them back.
    fn pack(&self, deltas: &[Delta], sent_ms: u64) -> Vec<(Vec<u8>, std::ops::Range<usize>)> {
        let max = self.cfg.max_message_bytes;
        let mut out = Vec::new();
        let mut i = 0;
        while i < deltas.len() {
            let from = i;
            let mut msg = Vec::with_capacity(max.min(64 * 1024));
            let start = exchange::begin(&mut msg, self.outbox.origin, sent_ms);
            while i < deltas.len()
                && (i == from || msg.len() + deltas[i].encoded_len() + exchange::MAC <= max)
            {
                exchange::put(&mut msg, &deltas[i]);
                i += 1;
            }
            exchange::seal(&mut msg, start, &self.keys.exchange);
            out.push((msg, from..i));
        }
        out
    }

    /// Publishes every queued delta, one group's at a time into messages, all sent at once
    /// (the client pipelines them per master); what fails is put back for the next round.
    async fn publish(&self, conn: &mut redis::cluster_async::ClusterConnection) {
        let mut all = Vec::new();
        self.outbox.take(&mut all);
        if all.is_empty() {
            return;
        }
        let groups = self.cfg.groups;
        all.sort_by_key(|d| exchange::group_of(&d.info_hash, groups));
        let sent_ms = unix_ms();
        let mut sends = Vec::new();
        let mut at = 0;
        while at < all.len() {
            let g = exchange::group_of(&all[at].info_hash, groups);
            let end = at
                + all[at..]
                    .iter()
                    .position(|d| exchange::group_of(&d.info_hash, groups) != g)
                    .unwrap_or(all.len() - at);
            for (msg, range) in self.pack(&all[at..end], sent_ms) {
                let range = at + range.start..at + range.end;
                let mut conn = conn.clone();
                let ch = channel(&self.cfg.prefix, g);
                sends.push(async move {
                    let len = msg.len();
                    let r: redis::RedisResult<i64> = redis::cmd("SPUBLISH")
                        .arg(&ch)
                        .arg(msg)
                        .query_async(&mut conn)
                        .await;
                    (r, range, len)
                });
            }
            at = end;
        }
        let mut failed = Vec::new();
        let mut first_error = None;
        for (r, range, len) in futures_util::future::join_all(sends).await {
            match r {
                Ok(_) => {
                    self.stats.messages_published.add(1);
                    self.stats.published_bytes.add(len as u64);
                    self.stats.deltas_published.add(range.len() as u64);
                }
                Err(e) => {
                    self.stats.redis_errors.add(1);
                    first_error.get_or_insert(e);
                    failed.extend_from_slice(&all[range]);
                }
            }
        }
        match first_error {
            None => self.stats.redis_up.set(1),
            Some(e) => {
                self.stats.redis_up.set(0);
                let n = failed.len();
                let dropped = self.outbox.requeue(&mut failed);
                log::warn!(
                    "cluster: publish failed ({e}): {n} deltas kept for the next round, \
                     {dropped} dropped"
                );
            }
        }
    }

    /// Connects to Redis Cluster and subscribes to every group.
    async fn connect(
        self: &Arc<Self>,
    ) -> redis::RedisResult<redis::cluster_async::ClusterConnection> {
        let nodes: Vec<String> = self
            .cfg
            .redis
            .iter()
            .map(|a| format!("redis://{a}/?protocol=resp3"))
            .collect();
        let node = Arc::downgrade(self);
        let timeout = Duration::from_millis(self.cfg.redis_timeout_ms);
        let client = redis::cluster::ClusterClientBuilder::new(nodes)
            .use_protocol(redis::ProtocolVersion::RESP3)
            .connection_timeout(timeout)
            .response_timeout(timeout)
            .push_sender(move |push: redis::PushInfo| {
                let Some(node) = node.upgrade() else {
                    return Err(());
                };
                if push.kind == redis::PushKind::SMessage {
                    if let Some(redis::Value::BulkString(msg)) = push.data.into_iter().nth(1) {
                        node.receive(msg);
                    }
                }
                Ok(())
            })
            .build()?;
        let conn = client.get_async_connection().await?;
        // One SSUBSCRIBE per channel: a command's channels must share a hash slot. The
        // client subscribes them again after a reconnect or a failover.
        let subscribes = (0..self.cfg.groups).map(|g| {
            let mut conn = conn.clone();
            let ch = channel(&self.cfg.prefix, g);
            async move { conn.ssubscribe(ch).await }
        });
        for r in futures_util::future::join_all(subscribes).await {
            r?;
        }
        Ok(conn)
    }

    /// Connects, then publishes every `cluster.publish_ms` until `stop` (and once more after
    /// it, so what the last requests queued goes out); reconnects every second while Redis
    /// cannot be reached.
    fn run_redis(self: &Arc<Self>, stop: &AtomicBool) {
        let rt = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => {
                log::error!("cluster: no runtime for the Redis client: {e}");
                return;
            }
        };
        rt.block_on(async {
            let every = Duration::from_millis(self.cfg.publish_ms);
            let mut conn = None;
            let mut logged_down = false;
            while !stop.load(Ordering::Relaxed) {
                let Some(c) = conn.as_mut() else {
                    match self.connect().await {
                        Ok(c) => {
                            log::info!(
                                "cluster: node {} joined through {} ({} groups)",
                                self.outbox.origin,
                                self.cfg.redis.join(", "),
                                self.cfg.groups
                            );
                            self.stats.redis_up.set(1);
                            conn = Some(c);
                            logged_down = false;
                        }
                        Err(e) => {
                            self.stats.redis_up.set(0);
                            self.stats.redis_errors.add(1);
                            if !logged_down {
                                log::warn!(
                                    "cluster: Redis Cluster at {} not reached ({e}); this node \
                                     answers from its own memory and tries again every second",
                                    self.cfg.redis.join(", ")
                                );
                                logged_down = true;
                            }
                            tokio::time::sleep(Duration::from_secs(1)).await;
                        }
                    }
                    continue;
                };
                tokio::time::sleep(every).await;
                self.publish(c).await;
            }
            if let Some(c) = conn.as_mut() {
                self.publish(c).await;
            }
        });
    }
}

/// A node run beside the services: its two threads, its metrics and `/stats` section.
pub struct NodeComponent(pub Arc<Node>);

impl Component for NodeComponent {
    fn collect(&self, out: &mut Samples) {
        let n = &self.0;
        n.stats
            .collect(out, &n.outbox, &n.shared.swarms.peers_by_origin());
    }

    fn background(&self) -> Vec<Background> {
        let (a, b) = (self.0.clone(), self.0.clone());
        vec![
            Background::new("cluster-redis", move |stop| a.run_redis(&stop)),
            Background::new("cluster-apply", move |stop| b.run_apply(&stop)),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_differ_by_use_and_by_secret() {
        let a = Keys::from_secret("a shared secret of some length", "k").unwrap();
        let b = Keys::from_secret("a shared secret of some length", "k").unwrap();
        let c = Keys::from_secret("another shared secret entirely", "k").unwrap();
        assert_eq!(a.exchange, b.exchange);
        assert_ne!(a.exchange, a.connection);
        assert_ne!(a.exchange, c.exchange);
        assert!(Keys::from_secret("short", "cluster.secret").is_err());
        assert_eq!(format!("{a:?}"), "Keys(..)");
    }

    #[test]
    fn channels_carry_their_group_as_hash_tag() {
        assert_eq!(channel("hotpath", 7), "hotpath:x:{7}");
    }
}
