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

use futures_util::StreamExt as _;
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

/// Snapshot lists a fill reads at once, and messages it asks of each at a time.
const FILL_LISTS_AT_ONCE: usize = 8;
const FILL_PAGE: usize = 32;

/// How old a live message may be when it is applied (its sender's clock against this one's):
/// far longer than any delivery takes, far shorter than a peer's life.
const MAX_MESSAGE_AGE_MS: u64 = 60_000;

/// The longest secret file read.
const MAX_SECRET_FILE: u64 = 4096;

impl Keys {
    /// The keys of `cfg`'s secret: `cluster.secret`, or the first line of `secret_file`.
    pub fn load(cfg: &ClusterConfig) -> Result<Keys, ClusterError> {
        if cfg.secret_file.is_empty() {
            return Keys::from_secret(cfg.secret.trim(), "cluster.secret");
        }
        // A device, a FIFO or a directory is refused at once, never read.
        let text = hotpath_config::file::read_bounded_text(
            std::path::Path::new(&cfg.secret_file),
            MAX_SECRET_FILE,
        )
        .map_err(|source| ClusterError::SecretFile {
            path: cfg.secret_file.clone(),
            source,
        })?;
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

/// The snapshot of node `node`'s peers in group `g`: a list of exchange messages, on the same
/// hash slot as the group's channel.
pub fn snapshot_key(prefix: &str, g: u16, node: u8) -> String {
    format!("{prefix}:s:{{{g}}}:{node}")
}

/// The nodes that wrote snapshots, scored by when (unix seconds).
pub fn nodes_key(prefix: &str) -> String {
    format!("{prefix}:nodes")
}

/// Sealed messages, each with how many deltas it carries.
type Sealed = Vec<(Vec<u8>, usize)>;

/// One group's messages: the sealed ones, the open one and its delta count.
#[derive(Default)]
struct Group {
    sealed: Sealed,
    open: Vec<u8>,
    n: usize,
}

/// Deltas packed into signed messages of at most a given size, group by group.
struct Packer<'a> {
    origin: u8,
    sent_ms: u64,
    max: usize,
    key: &'a [u8; 16],
    groups: Vec<Group>,
}

impl<'a> Packer<'a> {
    fn new(node: &'a Node, sent_ms: u64) -> Packer<'a> {
        Packer {
            origin: node.outbox.origin,
            sent_ms,
            max: node.cfg.max_message_bytes,
            key: &node.keys.exchange,
            groups: (0..node.cfg.groups).map(|_| Default::default()).collect(),
        }
    }

    fn put(&mut self, g: u16, d: &Delta) {
        let gr = &mut self.groups[usize::from(g)];
        if gr.n > 0 && gr.open.len() + d.encoded_len() + exchange::MAC > self.max {
            exchange::seal(&mut gr.open, 0, self.key);
            gr.sealed.push((std::mem::take(&mut gr.open), gr.n));
            gr.n = 0;
        }
        if gr.n == 0 {
            exchange::begin(&mut gr.open, self.origin, self.sent_ms);
        }
        exchange::put(&mut gr.open, d);
        gr.n += 1;
    }

    /// Every group's messages (none for a group without deltas), with their delta counts.
    fn finish(self) -> Vec<Sealed> {
        self.groups
            .into_iter()
            .map(|mut gr| {
                if gr.n > 0 {
                    exchange::seal(&mut gr.open, 0, self.key);
                    gr.sealed.push((gr.open, gr.n));
                }
                gr.sealed
            })
            .collect()
    }
}

/// The group of a channel `channel` names (its hash tag).
fn group_of_channel(channel: &[u8]) -> Option<u16> {
    let open = channel.iter().rposition(|&b| b == b'{')?;
    let tail = &channel[open + 1..];
    let close = tail.iter().position(|&b| b == b'}')?;
    std::str::from_utf8(&tail[..close]).ok()?.parse().ok()
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
    /// Per group, when this node last heard its own heartbeat on the group's channel (unix
    /// ms): a group it stops hearing has lost its subscription (a failover the client did not
    /// follow), and the node subscribes afresh.
    heard: Box<[std::sync::atomic::AtomicU64]>,
    /// The replica was filled from the snapshots (or Redis could not be reached at start).
    ready: AtomicBool,
    /// A fill after an outage asks the apply thread to read completed counts again.
    raise_due: AtomicBool,
    /// Moves on with each connection: what an older connection still delivers (its socket
    /// may hold messages from before an outage) is dropped.
    generation: std::sync::atomic::AtomicU64,
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
            ready: AtomicBool::new(false),
            raise_due: AtomicBool::new(false),
            generation: std::sync::atomic::AtomicU64::new(0),
            heard: (0..cfg.groups)
                .map(|_| std::sync::atomic::AtomicU64::new(0))
                .collect(),
        })
    }

    /// Checks one message and merges its deltas: a received one (not this node's own: every
    /// node hears its own publishes too), or with `own` a snapshot's, this node's too (its
    /// peers from before a restart). Returns whether it was accepted.
    fn apply(&self, msg: &[u8], own: bool) -> bool {
        let m = match exchange::open(msg, &self.keys.exchange) {
            Ok(m) => m,
            Err(e) => {
                self.stats.messages_refused.add(1);
                log::debug!("cluster: message refused: {e}");
                return false;
            }
        };
        if m.origin == self.outbox.origin && !own {
            return true;
        }
        if !own {
            // A live message is fresh: one replayed from long ago (anyone who can reach
            // Redis can publish again what a node sent), or stamped far in the future, is
            // refused whole. Snapshots (`own` reads) are old by design; their deltas' own
            // times decide.
            let now_ms = unix_ms();
            let skew_ms = 1000 * u64::from(hotpath_tracker::CLOCK_SKEW_SECS);
            if m.sent_ms + MAX_MESSAGE_AGE_MS < now_ms || m.sent_ms > now_ms + skew_ms {
                self.stats.messages_refused.add(1);
                log::debug!(
                    "cluster: message of node {} refused: sent too long ago, or in the future",
                    m.origin
                );
                return false;
            }
            self.stats.lag.observe(now_ms.saturating_sub(m.sent_ms));
        }
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
    fn receive(&self, group: Option<u16>, msg: Vec<u8>) {
        self.stats.messages_received.add(1);
        self.stats.received_bytes.add(msg.len() as u64);
        if msg.len() > exchange::MAX_MESSAGE {
            self.stats.messages_refused.add(1);
            return;
        }
        // This node's own messages come back too: nothing to apply, but its heartbeats
        // (header and MAC only) say the group's subscription works.
        if msg.get(1) == Some(&self.outbox.origin) {
            if msg.len() == exchange::HEADER + exchange::MAC
                && exchange::open(&msg, &self.keys.exchange).is_ok()
            {
                if let Some(h) = group.and_then(|g| self.heard.get(usize::from(g))) {
                    h.store(unix_ms(), Ordering::Relaxed);
                }
            }
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
                self.apply(&msg, false);
            }
            if self.raise_due.swap(false, Ordering::Relaxed) {
                self.raise_completed_from_store();
            }
        }
    }

    /// Publishes every queued delta, one group's at a time into messages, all sent at once
    /// (the client pipelines them per master); what fails is put back for the next round.
    async fn publish(&self, conn: &mut redis::cluster_async::ClusterConnection) -> bool {
        let mut all = Vec::new();
        self.outbox.take(&mut all);
        if all.is_empty() {
            return true;
        }
        let groups = self.cfg.groups;
        // Packed as they come, each group into its own messages: no sort. A failed message's
        // deltas are read back from it to be put back.
        let mut packer = Packer::new(self, unix_ms());
        for d in &all {
            packer.put(exchange::group_of(&d.info_hash, groups), d);
        }
        drop(all);
        let mut sends = Vec::new();
        for (g, messages) in packer.finish().into_iter().enumerate() {
            let ch = channel(&self.cfg.prefix, g as u16);
            for (msg, n) in messages {
                let mut conn = conn.clone();
                let ch = ch.clone();
                sends.push(async move {
                    let r: redis::RedisResult<i64> = redis::cmd("SPUBLISH")
                        .arg(&ch)
                        .arg(&msg)
                        .query_async(&mut conn)
                        .await;
                    (r, msg, n)
                });
            }
        }
        let mut failed = Vec::new();
        let mut first_error = None;
        for (r, msg, n) in futures_util::future::join_all(sends).await {
            match r {
                Ok(_) => {
                    self.stats.messages_published.add(1);
                    self.stats.published_bytes.add(msg.len() as u64);
                    self.stats.deltas_published.add(n as u64);
                }
                Err(e) => {
                    self.stats.redis_errors.add(1);
                    first_error.get_or_insert(e);
                    if let Ok(m) = exchange::open(&msg, &self.keys.exchange) {
                        failed.extend(m.deltas().filter_map(Result::ok));
                    }
                }
            }
        }
        match first_error {
            None => {
                self.stats.redis_up.set(1);
                true
            }
            Some(e) => {
                self.stats.redis_up.set(0);
                let n = failed.len();
                let dropped = self.outbox.requeue(&mut failed);
                log::warn!(
                    "cluster: publish failed ({e}): {n} deltas kept for the next round, \
                     {dropped} dropped"
                );
                false
            }
        }
    }

    /// Rewrites this node's snapshot keys: its own peers, group by group, as signed exchange
    /// messages in a list per group (written under a scratch name, then renamed over the
    /// old one), kept for `tracker.peer_timeout_secs` past the next rewrite; and notes the
    /// node in the nodes key.
    async fn snapshot(&self, conn: &mut redis::cluster_async::ClusterConnection) -> bool {
        let now = hotpath_service::process_secs();
        let unix_now = (self.shared.unix_base + i64::from(now)) as u32;
        let groups = self.cfg.groups;
        let mut packer = Packer::new(self, unix_ms());
        let mut peers = 0u64;
        self.shared
            .swarms
            .export(self.outbox.origin, now as u16, unix_now, &mut |d| {
                peers += 1;
                packer.put(exchange::group_of(&d.info_hash, groups), d);
            });
        let ttl_ms = 1000 * (self.cfg.snapshot_secs + u64::from(self.shared.cfg.peer_timeout_secs));
        let prefix = &self.cfg.prefix;
        let node = self.outbox.origin;
        let mut bytes = 0u64;
        let writes = packer
            .finish()
            .into_iter()
            .enumerate()
            .map(|(g, messages)| {
                bytes += messages.iter().map(|(m, _)| m.len() as u64).sum::<u64>();
                let mut conn = conn.clone();
                let key = snapshot_key(prefix, g as u16, node);
                async move {
                    if messages.is_empty() {
                        return redis::cmd("DEL")
                            .arg(&key)
                            .query_async::<i64>(&mut conn)
                            .await
                            .map(drop);
                    }
                    let scratch = format!("{key}:new");
                    redis::cmd("DEL")
                        .arg(&scratch)
                        .query_async::<i64>(&mut conn)
                        .await?;
                    for chunk in messages.chunks(256) {
                        let mut push = redis::cmd("RPUSH");
                        push.arg(&scratch);
                        for (m, _) in chunk {
                            push.arg(m.as_slice());
                        }
                        push.query_async::<i64>(&mut conn).await?;
                    }
                    redis::cmd("PEXPIRE")
                        .arg(&scratch)
                        .arg(ttl_ms)
                        .query_async::<i64>(&mut conn)
                        .await?;
                    redis::cmd("RENAME")
                        .arg(&scratch)
                        .arg(&key)
                        .query_async::<()>(&mut conn)
                        .await
                }
            });
        let mut ok = true;
        for r in futures_util::future::join_all(writes).await {
            if let Err(e) = r {
                self.stats.redis_errors.add(1);
                if ok {
                    log::warn!("cluster: snapshot not written: {e}");
                }
                ok = false;
            }
        }
        let unix = i64::from(unix_now);
        let index = async {
            let key = nodes_key(prefix);
            redis::cmd("ZADD")
                .arg(&key)
                .arg(unix)
                .arg(node)
                .query_async::<i64>(&mut conn.clone())
                .await?;
            redis::cmd("ZREMRANGEBYSCORE")
                .arg(&key)
                .arg("-inf")
                .arg(unix - (ttl_ms / 1000) as i64)
                .query_async::<i64>(&mut conn.clone())
                .await
        };
        if let Err(e) = index.await {
            self.stats.redis_errors.add(1);
            log::warn!("cluster: snapshot not noted in {}: {e}", nodes_key(prefix));
            ok = false;
        }
        if ok {
            self.stats.snapshots.add(1);
            self.stats.snapshot_peers.set(peers);
            self.stats.snapshot_bytes.set(bytes);
        }
        ok
    }

    /// Fills the replica from every node's snapshot keys (this node's own too: its peers
    /// from before a restart); returns the messages read, or the first error.
    async fn fill(
        &self,
        conn: &mut redis::cluster_async::ClusterConnection,
    ) -> redis::RedisResult<usize> {
        let ttl = self.cfg.snapshot_secs + u64::from(self.shared.cfg.peer_timeout_secs);
        let since = (unix_ms() / 1000) as i64 - ttl as i64;
        let nodes: Vec<u8> = redis::cmd("ZRANGEBYSCORE")
            .arg(nodes_key(&self.cfg.prefix))
            .arg(since)
            .arg("+inf")
            .query_async(conn)
            .await?;
        let keys: Vec<String> = nodes
            .iter()
            .flat_map(|&node| (0..self.cfg.groups).map(move |g| (g, node)))
            .map(|(g, node)| snapshot_key(&self.cfg.prefix, g, node))
            .collect();
        // A few lists at a time, a page of each at a time: memory stays a few pages
        // whatever the snapshots hold. A list longer than a node's whole table could fill
        // is cut there (it is not one a node wrote).
        let most = self.shared.cfg.max_peers * 64 / self.cfg.max_message_bytes.max(1) + 16;
        let reads = keys.into_iter().map(|key| {
            let mut conn = conn.clone();
            async move { self.read_list(&mut conn, &key, most).await }
        });
        let mut read = 0;
        let mut pages = futures_util::stream::iter(reads).buffer_unordered(FILL_LISTS_AT_ONCE);
        while let Some(r) = pages.next().await {
            read += r?;
        }
        self.stats.fills.add(1);
        log::info!(
            "cluster: replica filled from the snapshots of nodes {nodes:?} ({read} messages)"
        );
        Ok(read)
    }

    /// Applies the snapshot list `key`, a page at a time, at most `most` messages; how many
    /// it read.
    async fn read_list(
        &self,
        conn: &mut redis::cluster_async::ClusterConnection,
        key: &str,
        most: usize,
    ) -> redis::RedisResult<usize> {
        let mut at = 0;
        loop {
            let page: Vec<Vec<u8>> = redis::cmd("LRANGE")
                .arg(key)
                .arg(at)
                .arg(at + FILL_PAGE - 1)
                .query_async(conn)
                .await?;
            let n = page.len();
            for msg in page {
                self.stats.received_bytes.add(msg.len() as u64);
                self.apply(&msg, true);
            }
            at += n;
            if n < FILL_PAGE {
                return Ok(at);
            }
            if at >= most {
                log::warn!(
                    "cluster: snapshot {key} cut at {at} messages (more than a node writes)"
                );
                self.stats.messages_refused.add(1);
                return Ok(at);
            }
        }
    }

    /// Raises every torrent's completed count to what the database holds (with this node's
    /// rows not yet written); nothing without a store or while it is out of reach.
    fn raise_completed_from_store(&self) {
        let Some(db) = self.shared.persist.as_ref().filter(|db| db.online()) else {
            return;
        };
        match db.with_replay(hotpath_tracker::persist::completed_counts) {
            Ok(counts) => {
                for (hash, n) in &counts {
                    let n = u32::try_from(*n).unwrap_or(u32::MAX);
                    self.shared.swarms.raise_completed(hash, n);
                }
                log::info!(
                    "cluster: completed counts of {} torrents checked against {}",
                    counts.len(),
                    db.name
                );
            }
            Err(e) => log::warn!("cluster: completed counts not read from {}: {e}", db.name),
        }
    }

    /// Publishes an empty message (a heartbeat) on every group's channel; false when one
    /// failed.
    async fn heartbeat(&self, conn: &mut redis::cluster_async::ClusterConnection) -> bool {
        let mut msg = Vec::with_capacity(exchange::HEADER + exchange::MAC);
        let start = exchange::begin(&mut msg, self.outbox.origin, unix_ms());
        exchange::seal(&mut msg, start, &self.keys.exchange);
        let sends = (0..self.cfg.groups).map(|g| {
            let mut conn = conn.clone();
            let ch = channel(&self.cfg.prefix, g);
            let msg = msg.clone();
            async move {
                redis::cmd("SPUBLISH")
                    .arg(&ch)
                    .arg(msg)
                    .query_async::<i64>(&mut conn)
                    .await
            }
        });
        let mut ok = true;
        for r in futures_util::future::join_all(sends).await {
            if let Err(e) = r {
                if ok {
                    log::warn!("cluster: Redis Cluster does not answer ({e})");
                }
                self.stats.redis_errors.add(1);
                ok = false;
            }
        }
        ok
    }

    /// Groups whose own heartbeat has not come back for `quiet` ms.
    fn deaf_groups(&self, quiet: u64) -> usize {
        let now = unix_ms();
        self.heard
            .iter()
            .filter(|h| now.saturating_sub(h.load(Ordering::Relaxed)) > quiet)
            .count()
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
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let timeout = Duration::from_millis(self.cfg.redis_timeout_ms);
        let client = redis::cluster::ClusterClientBuilder::new(nodes)
            .use_protocol(redis::ProtocolVersion::RESP3)
            .connection_timeout(timeout)
            .response_timeout(timeout)
            .push_sender(move |push: redis::PushInfo| {
                let Some(node) = node.upgrade() else {
                    return Err(());
                };
                if node.generation.load(Ordering::Relaxed) != generation {
                    return Ok(());
                }
                if push.kind == redis::PushKind::SMessage {
                    let mut data = push.data.into_iter();
                    let group = match data.next() {
                        Some(redis::Value::BulkString(ch)) => group_of_channel(&ch),
                        _ => None,
                    };
                    if let Some(redis::Value::BulkString(msg)) = data.next() {
                        node.receive(group, msg);
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
            let snapshot_every = Duration::from_secs(self.cfg.snapshot_secs);
            let mut conn = None;
            let mut logged_down = false;
            // Failures in a row on one connection: past a few, it is dropped and a new one
            // made from the seeds (its view of the cluster may be from before a failover).
            let mut failures = 0u32;
            // Filled at the start, and again after Redis was out of reach (what the other
            // nodes said meanwhile was missed).
            let mut need_fill = true;
            let mut last_snapshot = std::time::Instant::now();
            // Every second a heartbeat on every group; a group whose own heartbeat has not
            // come back for three is deaf: the node subscribes afresh.
            let mut last_beat = std::time::Instant::now();
            let mut subscribed_at = std::time::Instant::now();
            // After a fill that followed an outage, one more once every node has rewritten
            // its snapshot: what they heard while this node could not is in those.
            let mut refill_at: Option<std::time::Instant> = None;
            // The fill that comes next follows an outage (not the start, not the refill).
            let mut after_outage = false;
            while !stop.load(Ordering::Relaxed) {
                let step = match conn.as_mut() {
                    None => self.connect().await.map(|c| {
                        log::info!(
                            "cluster: node {} joined through {} ({} groups)",
                            self.outbox.origin,
                            self.cfg.redis.join(", "),
                            self.cfg.groups
                        );
                        self.stats.redis_up.set(1);
                        subscribed_at = std::time::Instant::now();
                        conn = Some(c);
                    }),
                    Some(c) if need_fill => self.fill(c).await.map(|_| {
                        need_fill = false;
                        if std::mem::take(&mut after_outage) {
                            // Snatches other nodes made while this one could not hear them
                            // are in the database: the apply thread raises the counts to
                            // what it holds (the database's client blocks: not here). And
                            // once more after every node's next snapshot.
                            self.raise_due.store(true, Ordering::Relaxed);
                            refill_at =
                                Some(std::time::Instant::now() + snapshot_every + 2 * every);
                        }
                        self.ready.store(true, Ordering::Relaxed);
                    }),
                    Some(c) => {
                        tokio::time::sleep(every).await;
                        need_fill = !self.publish(c).await;
                        after_outage |= need_fill;
                        if !need_fill && last_beat.elapsed() >= Duration::from_secs(1) {
                            last_beat = std::time::Instant::now();
                            if !self.heartbeat(c).await {
                                self.stats.redis_up.set(0);
                                need_fill = true;
                                after_outage = true;
                            } else if subscribed_at.elapsed() > Duration::from_secs(3) {
                                let deaf = self.deaf_groups(3000);
                                if deaf > 0 {
                                    log::warn!(
                                        "cluster: {deaf} channels silent for 3 s (a failover \
                                         not followed): subscribing afresh"
                                    );
                                    self.stats.redis_errors.add(1);
                                    conn = None;
                                    need_fill = true;
                                    after_outage = true;
                                    continue;
                                }
                            }
                        }
                        if need_fill && after_outage {
                            // The old socket may still deliver what Redis sent it during the
                            // outage (TCP retransmits once the link is back): a snatch counted
                            // from it and again from the database would count twice. A new
                            // connection (a new generation) drops all of it; the fill and the
                            // database give what was missed.
                            self.generation.fetch_add(1, Ordering::Relaxed);
                            conn = None;
                            continue;
                        }
                        if refill_at.is_some_and(|at| std::time::Instant::now() >= at) {
                            refill_at = None;
                            need_fill = true;
                        }
                        if !need_fill && last_snapshot.elapsed() >= snapshot_every {
                            last_snapshot = std::time::Instant::now();
                            self.snapshot(c).await;
                        }
                        Ok(())
                    }
                };
                match step {
                    Ok(()) => {
                        if conn.is_some() && !need_fill {
                            self.stats.redis_up.set(1);
                            logged_down = false;
                            failures = 0;
                        }
                    }
                    Err(e) => {
                        self.stats.redis_up.set(0);
                        self.stats.redis_errors.add(1);
                        after_outage = true;
                        failures += 1;
                        if failures >= 3 && conn.take().is_some() {
                            need_fill = true;
                            log::info!("cluster: connecting to Redis Cluster afresh");
                        }
                        if !logged_down {
                            log::warn!(
                                "cluster: Redis Cluster at {} not reached ({e}); this node \
                                 answers from its own memory and tries again every second",
                                self.cfg.redis.join(", ")
                            );
                            logged_down = true;
                        }
                        if !self.ready.swap(true, Ordering::Relaxed) {
                            log::warn!(
                                "cluster: ready without the other nodes' peers (they come \
                                 once Redis answers)"
                            );
                        }
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
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
        n.stats.collect(
            out,
            &n.outbox,
            &n.shared.swarms.peers_by_origin(),
            n.ready.load(Ordering::Relaxed),
        );
    }

    fn ready(&self) -> Result<(), String> {
        if self.0.ready.load(Ordering::Relaxed) {
            Ok(())
        } else {
            Err("cluster: filling this node's replica from the other nodes' snapshots".into())
        }
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
    fn the_secret_file_is_read_bounded_and_only_if_regular() {
        let dir = std::env::temp_dir().join(format!("hotpath-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("secret");
        std::fs::write(&file, "a shared secret of some length\nignored\n").unwrap();
        let cfg = |path: &std::path::Path| ClusterConfig {
            secret_file: path.display().to_string(),
            ..ClusterConfig::default()
        };
        let keys = Keys::load(&cfg(&file)).unwrap();
        let direct = Keys::from_secret("a shared secret of some length", "k").unwrap();
        assert_eq!(keys.exchange, direct.exchange);
        std::fs::write(&file, vec![b'x'; 5000]).unwrap();
        assert!(Keys::load(&cfg(&file)).is_err(), "larger than 4 KiB");
        for odd in ["/dev/zero", "/tmp"] {
            let e = Keys::load(&cfg(std::path::Path::new(odd))).unwrap_err();
            assert!(e.to_string().contains("not a regular file"), "{odd}: {e}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn channels_carry_their_group_as_hash_tag() {
        assert_eq!(channel("hotpath", 7), "hotpath:x:{7}");
        assert_eq!(group_of_channel(channel("a.b", 63).as_bytes()), Some(63));
        for bad in [
            &b"hotpath:x:7"[..],
            b"x:{}",
            b"x:{70000}",
            b"x:{7",
            b"x:{-1}",
        ] {
            assert_eq!(group_of_channel(bad), None);
        }
        assert_eq!(snapshot_key("p", 3, 2), "p:s:{3}:2");
    }

    #[test]
    fn packed_messages_stay_within_the_size_and_carry_every_delta_once() {
        let key = [5u8; 16];
        let mut p = Packer {
            origin: 4,
            sent_ms: 1,
            max: 1024,
            key: &key,
            groups: (0..3).map(|_| Group::default()).collect(),
        };
        for i in 0..200u32 {
            let mut h = [0u8; 20];
            h[..4].copy_from_slice(&i.to_le_bytes());
            p.put((i % 2) as u16, &Delta::v4(h, [127, 0, 0, 1, 0, 1], i));
        }
        let groups = p.finish();
        assert!(groups[2].is_empty());
        let mut seen = Vec::new();
        for (msg, n) in groups.iter().flatten() {
            assert!(msg.len() <= 1024);
            let m = exchange::open(msg, &key).unwrap();
            let ds: Vec<Delta> = m.deltas().map(Result::unwrap).collect();
            assert_eq!(ds.len(), *n);
            seen.extend(ds.iter().map(|d| d.at));
        }
        seen.sort();
        assert_eq!(seen, (0..200).collect::<Vec<u32>>());
    }
}
