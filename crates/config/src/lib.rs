//! hotpath's configuration: one typed tree of sections, each field with its default and a doc
//! comment, from which `hotpath config` prints a commented TOML file.
//!
//! Owns: parsing a TOML file into [`Config`], rejecting unknown keys and invalid values with an
//! error that names the key, and generating the commented defaults; reading the files an
//! operator names with a bound ([`file`]). Must not: do any I/O beyond reading files.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

pub mod file;
mod validate;
pub use validate::MAX_EXCHANGE_MESSAGE;

/// The most bytes a config file may have.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// A configuration error. Every variant names the key it is about.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file's path as given.
        path: String,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// The text is not TOML.
    #[error("not TOML: {message}")]
    Syntax {
        /// What the parser expected.
        message: String,
    },
    /// A key is unknown, or a value has the wrong type.
    #[error("config key `{key}`: {message}")]
    Parse {
        /// The dotted path of the key (`lua.routes[0].script`).
        key: String,
        /// What is wrong with it.
        message: String,
    },
    /// A value parsed but makes no sense.
    #[error("config key `{key}`: {message}")]
    Invalid {
        /// The dotted path of the key.
        key: &'static str,
        /// What is wrong with it and what is allowed.
        message: String,
    },
    /// What a key names cannot be used: a script that does not compile, a file that cannot be
    /// read (found by the checks `serve` makes before it starts anything).
    #[error("config key `{key}`: {message}")]
    Check {
        /// The dotted path of the key.
        key: String,
        /// What is wrong.
        message: String,
    },
}

impl ConfigError {
    /// The key it is about, if any.
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::Read { .. } | ConfigError::Syntax { .. } => None,
            ConfigError::Parse { key, .. } | ConfigError::Check { key, .. } => Some(key),
            ConfigError::Invalid { key, .. } => Some(key),
        }
    }
}

/// Errors reported at most for one file (a file of nothing but mistakes says enough by then).
const MAX_ERRORS: usize = 50;

/// A place in a config file: 1-based line and column (in characters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pos {
    /// The line.
    pub line: usize,
    /// The column.
    pub column: usize,
}

/// Every error found in one config file, each with its place when known. Shown one per line,
/// as `FILE:LINE:COLUMN: error`.
#[derive(Debug)]
pub struct ConfigErrors {
    /// The file, when the text came from one.
    pub file: Option<String>,
    /// The errors, in the order of the file (syntax, then keys, then values).
    pub errors: Vec<(Option<Pos>, ConfigError)>,
}

impl ConfigErrors {
    /// Adds `errors`, each placed at its key in `text` when it names one that is there (the
    /// text is parsed once for all of them).
    pub fn push_keys(&mut self, text: &str, errors: impl IntoIterator<Item = ConfigError>) {
        let mut doc = None;
        for error in errors {
            let doc = doc.get_or_insert_with(|| toml_edit::ImDocument::parse(text).ok());
            let at = error
                .key()
                .zip(doc.as_ref())
                .and_then(|(key, d)| span_of(d, &parse_key(key), text, false));
            self.errors.push((at, error));
        }
    }

    /// Puts the errors in the order of the file (those without a place last).
    fn sort(&mut self) {
        self.errors
            .sort_by_key(|(at, _)| at.map_or((usize::MAX, 0), |p| (p.line, p.column)));
    }

    /// `Ok(value)` when no error was found.
    pub fn into_result<T>(self, value: T) -> Result<T, ConfigErrors> {
        if self.errors.is_empty() {
            Ok(value)
        } else {
            Err(self)
        }
    }
}

impl std::fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (at, e)) in self.errors.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            match (&self.file, at, e) {
                // The read error names the file itself.
                (_, _, ConfigError::Read { .. }) => write!(f, "{e}")?,
                (Some(file), Some(at), _) => write!(f, "{file}:{}:{}: {e}", at.line, at.column)?,
                (Some(file), None, _) => write!(f, "{file}: {e}")?,
                (None, Some(at), _) => write!(f, "line {}, column {}: {e}", at.line, at.column)?,
                (None, None, _) => write!(f, "{e}")?,
            }
        }
        if self.errors.len() > 1 {
            write!(f, "\n{} errors", self.errors.len())?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// One step of a key's path: a table key or an array index.
#[derive(Debug, Clone)]
enum Segment {
    Key(String),
    Index(usize),
}

fn segment(s: &serde_path_to_error::Segment) -> Option<Segment> {
    match s {
        serde_path_to_error::Segment::Map { key } => Some(Segment::Key(key.clone())),
        serde_path_to_error::Segment::Seq { index } => Some(Segment::Index(*index)),
        _ => None,
    }
}

/// The path of a dotted key with indexes, as errors name them: `lua.routes[0].script`.
fn parse_key(key: &str) -> Vec<Segment> {
    let mut out = Vec::new();
    for part in key.split('.') {
        let (name, mut rest) = part.split_once('[').map_or((part, ""), |(n, r)| (n, r));
        if !name.is_empty() {
            out.push(Segment::Key(name.to_string()));
        }
        while let Some((index, after)) = rest.split_once(']') {
            if let Ok(i) = index.parse() {
                out.push(Segment::Index(i));
            }
            rest = after.strip_prefix('[').unwrap_or("");
        }
    }
    out
}

/// Where `key` (`section.key`, `lua.routes[0].script`) is written in `text`, if it is.
pub fn locate(text: &str, key: &str) -> Option<Pos> {
    let doc = toml_edit::ImDocument::parse(text).ok()?;
    span_of(&doc, &parse_key(key), text, false)
}

/// The place of the deepest part of `path` that `doc` holds: its value or table, or with
/// `at_key` the last key itself.
fn span_of(
    doc: &toml_edit::ImDocument<&str>,
    path: &[Segment],
    text: &str,
    at_key: bool,
) -> Option<Pos> {
    let mut item = doc.as_item();
    let mut best = None;
    for (n, seg) in path.iter().enumerate() {
        let next = match seg {
            Segment::Key(k) => item.get(k.as_str()),
            Segment::Index(i) => item.get(*i),
        };
        if let (true, Segment::Key(k), Some(t)) = (at_key, seg, item.as_table_like()) {
            if n + 1 == path.len() {
                if let Some(span) = t.key(k).and_then(|k| k.span()) {
                    return Some(position(text, span.start));
                }
            }
        }
        let Some(next) = next else { break };
        item = next;
        let span = match item {
            toml_edit::Item::Table(t) => t.span(),
            toml_edit::Item::Value(v) => v.span(),
            toml_edit::Item::ArrayOfTables(a) => a.span(),
            toml_edit::Item::None => None,
        };
        if let Some(span) = span {
            best = Some(span.start);
        }
    }
    best.map(|at| position(text, at))
}

/// The line and column of byte `at` in `text`.
fn position(text: &str, at: usize) -> Pos {
    let at = at.min(text.len());
    let before = text.get(..at).unwrap_or(text);
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    Pos {
        line: before.matches('\n').count() + 1,
        column: before[line_start..].chars().count() + 1,
    }
}

/// Takes `path` out of `table`; false when it is not there (nothing more can be learnt).
fn remove(table: &mut toml::Table, path: &[Segment]) -> bool {
    fn go(v: &mut toml::Value, path: &[Segment]) -> bool {
        match (path, v) {
            ([Segment::Key(k)], toml::Value::Table(t)) => t.remove(k).is_some(),
            ([Segment::Index(i)], toml::Value::Array(a)) if *i < a.len() => {
                a.remove(*i);
                true
            }
            ([Segment::Key(k), rest @ ..], toml::Value::Table(t)) => match t.get_mut(k) {
                Some(next) => go(next, rest),
                None => false,
            },
            ([Segment::Index(i), rest @ ..], toml::Value::Array(a)) => match a.get_mut(*i) {
                Some(next) => go(next, rest),
                None => false,
            },
            _ => false,
        }
    }
    let mut root = toml::Value::Table(std::mem::take(table));
    // An error about a whole value (a wrong type in an array) names the array's element; one
    // about a table's missing field names the table: either is taken out whole.
    let done = !path.is_empty() && go(&mut root, path);
    if let toml::Value::Table(t) = root {
        *table = t;
    }
    done
}

/// Defines one config section: the struct (with serde defaults and `deny_unknown_fields`), its
/// `Default`, and the list of its fields with their doc comments, used to print commented TOML.
macro_rules! section {
    (
        $(#[doc = $sdoc:literal])*
        pub struct $name:ident {
            $(
                $(#[doc = $doc:literal])*
                pub $field:ident : $ty:ty = $default:expr,
            )*
        }
    ) => {
        $(#[doc = $sdoc])*
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        #[serde(default, deny_unknown_fields)]
        pub struct $name {
            $( $(#[doc = $doc])* pub $field: $ty, )*
        }

        impl Default for $name {
            fn default() -> Self {
                Self { $( $field: $default, )* }
            }
        }

        impl Section for $name {
            const DOC: &'static str = concat!($($sdoc, "\n",)*);
            const FIELDS: &'static [(&'static str, &'static str)] =
                &[ $( (stringify!($field), concat!($($doc, "\n",)*)) ),* ];
        }
    };
}

/// A config section: its doc comment and its fields' names and doc comments, in order.
pub trait Section: Serialize {
    /// The section's doc comment.
    const DOC: &'static str;
    /// `(field name, doc comment)` for every field, in declaration order.
    const FIELDS: &'static [(&'static str, &'static str)];
}

section! {
    /// The network server: worker threads, sockets, HTTP limits and timeouts.
    pub struct ServerConfig {
        /// Worker threads, each with its own event loop and its own SO_REUSEPORT sockets.
        /// 0 means one per CPU this process may run on.
        pub workers: usize = 0,
        /// Listen backlog of every TCP listener. Linux caps it at net.core.somaxconn.
        pub backlog: u32 = 4096,
        /// Open TCP connections one worker keeps at most; further ones are accepted and closed
        /// at once (and counted) so the backlog does not fill with connections nobody serves.
        pub max_connections_per_worker: usize = 8192,
        /// Open TCP connections one client address may hold across all workers (IPv6
        /// addresses are counted by their /64); further ones are closed at once and counted.
        /// High enough for a NAT of ordinary size, low enough that one address cannot take
        /// every connection slot.
        pub max_connections_per_ip: usize = 256,
        /// Open TCP connections the IPv6 addresses of one /48 (what one customer is
        /// commonly given: 65,536 /64s) may hold together, so a few customers cannot take
        /// every slot from their many /64s. Four /64s' worth.
        pub max_connections_per_48: usize = 1024,
        /// Networks of the balancers in front (e.g. ["10.0.0.0/24"]) whose HTTP connections
        /// begin with a PROXY protocol header (HAProxy's `send-proxy-v2`; version 1 is read
        /// too) naming the client: requests from such a connection count as the client's
        /// (its address in answers, the per-address limits, logs). A connection from these
        /// networks without the header is refused; from anywhere else, a header is a bad
        /// request. Empty: no PROXY protocol. Read at start.
        pub proxy_protocol_from: Vec<IpNet> = Vec::new(),
        /// Megabytes all connections' read and output buffers may take together. Past it, a
        /// connection's unsent answers are held to 16 KiB (reading stops until the client
        /// reads) and a request that would need a larger read buffer gets 503; normal
        /// requests go on. Each open connection also costs about 5 KiB outside this budget.
        pub max_buffer_mb: usize = 256,
        /// Seconds a keep-alive connection may sit idle between requests before it is closed.
        pub idle_timeout_secs: u64 = 60,
        /// Seconds a client has to send a whole request head once it has started one
        /// (slowloris protection). Also bounds how long a response may take to drain.
        pub header_timeout_secs: u64 = 10,
        /// Largest request head (request line and headers) in bytes; larger ones get 431.
        pub max_header_bytes: usize = 8192,
        /// Most header lines in one request; more get 431.
        pub max_headers: usize = 32,
        /// Longest request target (path and query) in bytes; longer ones get 414.
        pub max_url_bytes: usize = 4096,
        /// Largest request body in bytes (Content-Length); larger ones get 413.
        pub max_body_bytes: usize = 65536,
        /// Bytes of unsent responses one connection may hold before hotpath stops reading
        /// from it until the client reads (bounds memory under pipelining).
        pub max_output_bytes: usize = 262144,
        /// Datagrams read with one recvmmsg call and answered with one sendmmsg call; with
        /// io_uring, receives each UDP socket keeps in flight.
        pub udp_batch: usize = 64,
        /// How the UDP sockets are driven: "epoll" (readiness, recvmmsg/sendmmsg batches),
        /// "io_uring" (multishot receives into provided buffers; refuses to start where the
        /// kernel does not allow it) or "auto" (io_uring where allowed, else epoll). epoll
        /// stays the default while io_uring measures no better (TUNING.md, "udp").
        pub udp_io: UdpIo = UdpIo::Epoll,
        /// SO_RCVBUF of every UDP socket in bytes (capped by net.core.rmem_max).
        pub udp_recv_buffer: usize = 8388608,
        /// SO_SNDBUF of every UDP socket in bytes (capped by net.core.wmem_max).
        pub udp_send_buffer: usize = 8388608,
        /// The same as log.access_log = "-" (an access log on standard error), kept for
        /// configs written before log.access_log.
        pub access_log: bool = false,
        /// Seconds shutdown waits for in-flight requests and unsent responses before exiting.
        pub shutdown_grace_secs: u64 = 5,
        /// Nice value (0-19) of the store's flusher thread (bulk work under no lock a worker
        /// waits on for long): the workers answer first and the flush takes the idle time,
        /// so it does not hold up answers on a busy core. At saturation writes fall behind,
        /// bounded by store.max_queue_rows and store.journal_max_bytes. Sweepers and loaders
        /// keep the workers' priority. 0: the flusher too.
        pub background_nice: u32 = 10,
    }
}

section! {
    /// Addresses to listen on. An empty list turns that listener off.
    pub struct ListenConfig {
        /// HTTP tracker (and /healthz) listeners.
        pub http: Vec<SocketAddr> = vec![SocketAddr::from(([0, 0, 0, 0], 6969))],
        /// UDP tracker (BEP 15) listeners.
        pub udp: Vec<SocketAddr> = vec![SocketAddr::from(([0, 0, 0, 0], 6969))],
        /// Also listen on the IPv6 wildcard ([::]) at the port of every 0.0.0.0 address above,
        /// when this host has IPv6. The IPv6 sockets are IPv6-only.
        pub ipv6: bool = true,
        /// Admin listeners: /metrics (Prometheus text), /stats (JSON) and /healthz.
        /// Keep them on loopback or a private network.
        pub admin: Vec<SocketAddr> = vec![SocketAddr::from(([127, 0, 0, 1], 9090))],
        /// HTTPS listeners: the HTTP listeners' routes (announces, scrapes, WebTorrent's
        /// wss://) over TLS, with the certificate of [tls]. listen.ipv6 applies as to http.
        pub https: Vec<SocketAddr> = Vec::new(),
    }
}

section! {
    /// The BitTorrent tracker (HTTP per BEP 3/7/23/48 and UDP per BEP 15/41).
    pub struct TrackerConfig {
        /// Seconds clients are told to wait between announces (`interval`).
        pub interval_secs: u32 = 1800,
        /// Seconds clients must wait at least between announces (`min interval`).
        pub min_interval_secs: u32 = 900,
        /// Random jitter added to `interval`, in percent of it, spreading re-announces out.
        pub interval_jitter_percent: u32 = 10,
        /// Peers returned when the client does not send `numwant`.
        pub numwant_default: u32 = 50,
        /// Most peers returned to one announce, whatever `numwant` says.
        pub numwant_max: u32 = 200,
        /// Seconds after its last announce that a peer is dropped. Must exceed `interval_secs`.
        pub peer_timeout_secs: u32 = 2700,
        /// Seconds one pass of the expiry sweeper takes over all torrents; it visits one shard
        /// at a time, so requests are never stalled by it.
        pub sweep_interval_secs: u32 = 60,
        /// Shards of the torrent table (a power of two); each has its own short lock.
        pub shards: usize = 256,
        /// Most torrents with peers. Announces for new torrents beyond it get a failure
        /// reason. With the caps below this bounds swarm memory (TUNING.md, "Bounds").
        pub max_torrents: usize = 2_000_000,
        /// Most peers in all torrents together. New peers beyond it get the peer list but are
        /// not added (nor counted), so no announce fails for it.
        pub max_peers: usize = 16_000_000,
        /// Most peers in one torrent. New peers beyond it get the peer list but are not added.
        pub max_peers_per_torrent: usize = 200_000,
        /// Most peers one client address (IPv6: one /64) may have in one torrent; announces
        /// past it get a failure reason. Enough for a NAT of ordinary size, too few for one
        /// host to fill a swarm with made-up ports.
        pub max_peers_per_ip: usize = 64,
        /// The same for all the /64s of one IPv6 /48 (one customer) together: a network
        /// cannot fill a swarm from its 65,536 /64s either.
        pub max_peers_per_ip_48: usize = 256,
        /// Torrents one client address (IPv6: one /64) may hold alone, as the only client
        /// in them: a new torrent from an address at it gets a failure reason, so a flood of
        /// made-up info hashes from one place stops at its own share and never makes the
        /// tracker full for others. A torrent another client joins is no longer counted.
        /// One sixteenth of max_torrents: far past a seedbox's lone torrents.
        pub max_torrents_per_address: usize = 125_000,
        /// The same for all the /64s of one IPv6 /48 (one customer) together.
        pub max_torrents_per_48: usize = 500_000,
        /// Peers one client address (IPv6: one /64) may have in all torrents together: a
        /// new peer from an address at it gets a failure reason, so joining every torrent
        /// with made-up ports from one place stops at its own share and never fills
        /// max_peers for others. One sixty-fourth of max_peers: a seedbox seeding 100,000
        /// torrents from one address is well within it.
        pub max_peers_per_address: usize = 250_000,
        /// The same for all the /64s of one IPv6 /48 (one customer) together.
        pub max_peers_per_48: usize = 1_000_000,
        /// Completed-download counts kept for torrents whose last peer left (their swarms
        /// are freed), so scrapes still report them; past it, arbitrary ones are dropped from
        /// memory (the database keeps every count).
        pub max_idle_torrents: usize = 2_000_000,
        /// Keep every peer's 20-byte peer id, so that non-compact (compact=0) responses carry
        /// `peer id`. Costs 20 bytes per IPv4 peer; off, compact=0 answers as if no_peer_id=1.
        pub keep_peer_ids: bool = false,
        /// Answer a scrape that names no info hash with every torrent ("full scrape").
        pub full_scrape: bool = false,
        /// Most info hashes in one HTTP scrape (UDP's limit is 74 by its packet size).
        pub max_scrape_hashes: usize = 128,
        /// Accept BEP 7's `ipv6=` parameter: an IPv4 client may also give an IPv6 address,
        /// handed to IPv6 peers (the peer is still counted once). Only global unicast
        /// addresses are taken. Off by default, as opentracker: anyone could point a swarm
        /// at a third party.
        pub accept_ipv6_param: bool = false,
        /// Accept BEP 3's `ip=` parameter: the client's address is the one it gives instead
        /// of the connection's. Only global unicast addresses are taken. Off by default, for
        /// the same reason; behind a proxy use `real_ip_header` instead.
        pub accept_ip_param: bool = false,
        /// Header holding the client's address when the connection comes from a trusted proxy
        /// (e.g. "X-Forwarded-For"; its last entry is used). Empty: always use the socket's.
        pub real_ip_header: String = String::new(),
        /// Networks whose connections may set `real_ip_header` (e.g. ["127.0.0.1/32"]).
        pub trusted_proxies: Vec<IpNet> = Vec::new(),
        /// Seconds between writes of every swarm's seeders and leechers to the store
        /// (completed downloads are written within `store.flush_interval_ms`).
        pub snapshot_interval_secs: u32 = 60,
        /// Days after which hp_torrents forgets a torrent with no completed download and no
        /// activity (deleted once an hour). A torrent only ever seen with one peer and no
        /// completed download is not written at all: it has nothing worth keeping, and
        /// made-up info hashes would only fill the table.
        pub forget_torrents_after_days: u32 = 30,
        /// On a graceful shutdown, save every swarm to `store.data_dir` and load it at the
        /// next start with the peers' remaining lifetimes, so a restart empties no swarm.
        pub persist_swarms: bool = true,
        /// "open" (any client, any torrent) or "private": every announce names a registered
        /// user by a passkey and a registered torrent, as `[private]` says.
        pub mode: TrackerMode = TrackerMode::Open,
    }
}

/// How UDP sockets are driven (`server.udp_io`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UdpIo {
    /// io_uring where the kernel has and allows it, else epoll.
    Auto,
    /// io_uring, or refuse to start.
    IoUring,
    /// epoll readiness with recvmmsg and sendmmsg batches.
    Epoll,
}

/// Who the tracker serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TrackerMode {
    /// Anyone, for any torrent the access list allows.
    Open,
    /// Registered users (by passkey), for registered torrents.
    Private,
}

/// The names of an XBT preset, whose releases differ in the torrents table, its id and the
/// peers table.
macro_rules! xbt_names {
    ($torrents:literal, $id:literal, $peers:literal) => {
        [
            ("users", "xbt_users"),
            ("users.id", "uid"),
            ("users.passkey", "torrent_pass"),
            // XBT's derived passkeys: the user's version of them, and the site's secret in the
            // settings table. A column or table the site lacks is read as absent.
            ("users.passkey_version", "torrent_pass_version"),
            ("config", "xbt_config"),
            // Per user: seconds after a torrent's ctime before they may download it, and how
            // many of their clients may download one torrent at once (0: no limit).
            ("users.wait_time", "wait_time"),
            ("users.peers_limit", "peers_limit"),
            ("torrents.ctime", "ctime"),
            // Written when xbt_config turns log_announce or log_scrape on.
            ("announce_log", "xbt_announce_log"),
            ("scrape_log", "xbt_scrape_log"),
            // Commented out in XBT's own schema: a site that has it names it.
            ("users.can_leech", ""),
            ("torrents", $torrents),
            ("torrents.id", $id),
            ("torrents.info_hash", "info_hash"),
            ("torrents.flags", "flags"),
            ("users.uploaded", "uploaded"),
            ("users.downloaded", "downloaded"),
            ("torrents.seeders", "seeders"),
            ("torrents.leechers", "leechers"),
            ("torrents.completed", "completed"),
            ("peers", $peers),
            ("peers.torrent_id", $id),
            ("totals", "xbt_users"),
            ("totals.id", "uid"),
            ("totals.uploaded", "uploaded"),
            ("totals.downloaded", "downloaded"),
        ]
    };
}

/// Where a private tracker reads its users and torrents: a preset of table and column names
/// (each overridable in `private.names`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PrivateSchema {
    /// hotpath's own tables, made by its migrations (README, "Private tracker").
    Hotpath,
    /// XBT Tracker's tables since 2019 (`xbt_users`, `xbt_torrents`).
    Xbt,
    /// XBT Tracker's tables before 2019 (`xbt_users`, `xbt_files` keyed by `fid`).
    #[serde(rename = "xbt_files")]
    XbtFiles,
    /// TorrentPier's tables (`bb_bt_users`, `bb_bt_torrents`).
    Torrentpier,
    /// Gazelle's tables, as its tracker Ocelot reads and writes them (`users_main`,
    /// `torrents`, `users_leech_stats`, `torrents_leech_stats`, `xbt_files_users`, …).
    Gazelle,
    /// UNIT3D's tables, as its tracker UNIT3D-Announce reads and writes them (`users`,
    /// `groups`, `torrents`, `peers`, `history`, …).
    Unit3d,
}

impl PrivateSchema {
    /// The preset's names: `(logical name, name in the database)`.
    pub fn names(self) -> &'static [(&'static str, &'static str)] {
        match self {
            PrivateSchema::Hotpath => &[
                ("users", "hp_users"),
                ("users.id", "user_id"),
                ("users.passkey", "passkey"),
                ("users.can_leech", "can_leech"),
                // 1: removed through the push API (or by the site): not served.
                ("users.removed", "removed"),
                ("users.updated_at", "updated_at"),
                ("torrents", "hp_private_torrents"),
                ("torrents.id", "torrent_id"),
                ("torrents.info_hash", "info_hash"),
                ("torrents.download_pct", "download_pct"),
                ("torrents.upload_pct", "upload_pct"),
                ("torrents.removed", "removed"),
                ("torrents.updated_at", "updated_at"),
                ("totals", "hp_user_totals"),
                ("totals.id", "user_id"),
                ("totals.uploaded", "uploaded"),
                ("totals.downloaded", "downloaded"),
                ("totals.updated_at", "updated_at"),
            ],
            PrivateSchema::Xbt => &xbt_names!("xbt_torrents", "tid", "xbt_peers"),
            PrivateSchema::XbtFiles => &xbt_names!("xbt_files", "fid", "xbt_files_users"),
            PrivateSchema::Torrentpier => &[
                ("users", "bb_bt_users"),
                ("users.id", "user_id"),
                ("users.passkey", "auth_key"),
                ("torrents", "bb_bt_torrents"),
                ("torrents.id", "topic_id"),
                ("torrents.info_hash", "info_hash"),
                ("torrents.tor_type", "tor_type"),
                ("torrents.poster_id", "poster_id"),
                ("peers", "bb_bt_tracker"),
                ("totals", "bb_bt_users"),
                ("totals.id", "user_id"),
                ("totals.uploaded", "u_up_total"),
                ("totals.downloaded", "u_down_total"),
                // Counted as uploaded in TorrentPier's ratio.
                ("totals.uploaded_release", "u_up_release"),
                ("totals.uploaded_bonus", "u_up_bonus"),
            ],
            PrivateSchema::Gazelle => &[
                // Served while `Enabled` is '1'; a user `Visible` '0' or whose `IP` is
                // 127.0.0.1 is IP-protected: no address of theirs is written.
                ("users", "users_main"),
                ("users.id", "ID"),
                ("users.passkey", "torrent_pass"),
                ("users.can_leech", "can_leech"),
                ("users.enabled", "Enabled"),
                ("users.visible", "Visible"),
                ("users.ip", "IP"),
                // FreeTorrent: '0' normal, '1' freeleech, '2' neutral (nothing counted).
                ("torrents", "torrents"),
                ("torrents.id", "ID"),
                ("torrents.info_hash", "info_hash"),
                ("torrents.free", "FreeTorrent"),
                ("totals", "users_leech_stats"),
                ("totals.id", "UserID"),
                ("totals.uploaded", "Uploaded"),
                ("totals.downloaded", "Downloaded"),
                // Seeders, leechers, snatches, balance and last_action per torrent.
                ("torrent_stats", "torrents_leech_stats"),
                // A row per client (uid, fid, peer_id), a row per snatch.
                ("peers", "xbt_files_users"),
                ("snatches", "xbt_snatched"),
                // Freeleech tokens (rows with Expired 0), and what each saved.
                ("tokens", "users_freeleeches"),
                // Peer id prefixes of the only clients allowed (none listed: any).
                ("clients", "xbt_client_whitelist"),
            ],
            PrivateSchema::Unit3d => &[
                // Served while `deleted_at` is NULL and the user's group is not banned,
                // validating or disabled.
                ("users", "users"),
                ("users.id", "id"),
                ("users.passkey", "passkey"),
                ("users.can_leech", "can_download"),
                ("users.group_id", "group_id"),
                ("users.deleted_at", "deleted_at"),
                // Group rules: download slots, immunity, freeleech and double upload.
                ("groups", "groups"),
                // Served while `status` is 1 (approved) and `deleted_at` is NULL; `free` is
                // the percent of freeleech (0 to 100), `doubleup` double upload.
                ("torrents", "torrents"),
                ("torrents.id", "id"),
                ("torrents.info_hash", "info_hash"),
                ("torrents.free", "free"),
                ("torrents.doubleup", "doubleup"),
                ("torrents.status", "status"),
                ("torrents.deleted_at", "deleted_at"),
                ("torrents.seeders", "seeders"),
                ("torrents.leechers", "leechers"),
                ("torrents.completed", "times_completed"),
                ("totals", "users"),
                ("totals.id", "id"),
                ("totals.uploaded", "uploaded"),
                ("totals.downloaded", "downloaded"),
                // A row per client, and per user and torrent (what hit-and-run rules read).
                ("peers", "peers"),
                ("history", "history"),
                // Freeleech on one torrent for a user, for a user everywhere, and featured
                // torrents (freeleech and double upload for everyone).
                ("tokens", "freeleech_tokens"),
                ("personal", "personal_freeleeches"),
                ("featured", "featured_torrents"),
                // Peer id prefixes refused.
                ("clients", "blacklist_clients"),
                // Each (user, info hash) a user announced that the site does not have, as
                // UNIT3D's own announce controller records it for its staff and the user.
                ("unregistered", "unregistered_info_hashes"),
            ],
        }
    }

    /// Whether a site's tables may lack logical name `key`'s column (named "" then: a user
    /// may leech, a torrent counts as normal, every poll reads every row; in the XBT presets,
    /// users have derived passkeys only, at version 0, or none).
    pub fn optional(self, key: &str) -> bool {
        let xbt = matches!(self, PrivateSchema::Xbt | PrivateSchema::XbtFiles);
        (xbt && matches!(
            key,
            "users.passkey"
                | "users.passkey_version"
                | "users.wait_time"
                | "users.peers_limit"
                | "torrents.ctime"
                | "announce_log"
                | "scrape_log"
                | "config"
        )) || matches!(
            key,
            "users.can_leech"
                | "users.removed"
                | "torrents.removed"
                | "users.updated_at"
                | "torrents.updated_at"
                | "torrents.flags"
                | "torrents.tor_type"
                | "torrents.poster_id"
                | "torrents.download_pct"
                | "torrents.upload_pct"
                | "totals.updated_at"
                | "totals.uploaded_release"
                | "totals.uploaded_bonus"
                | "users.enabled"
                | "users.visible"
                | "users.ip"
                | "torrents.free"
                | "torrents.doubleup"
                | "torrents.status"
                | "torrents.deleted_at"
                | "users.group_id"
                | "users.deleted_at"
        )
    }

    /// The query parameter that carries the passkey when `private.passkey_param` is empty.
    pub fn passkey_param(self) -> &'static str {
        match self {
            PrivateSchema::Torrentpier => "uk",
            _ => "passkey",
        }
    }
}

/// A port or an inclusive range of ports, written "6881" or "6881-6889".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct PortRange {
    /// The first port.
    pub first: u16,
    /// The last port (`first` for one port).
    pub last: u16,
}

impl PortRange {
    /// Whether `port` is in the range.
    pub fn contains(self, port: u16) -> bool {
        (self.first..=self.last).contains(&port)
    }
}

impl TryFrom<String> for PortRange {
    type Error = String;
    fn try_from(s: String) -> Result<PortRange, String> {
        let bad = || format!("{s:?} is not a port or a range of ports like \"6881-6889\"");
        let (a, b) = s.split_once('-').unwrap_or((&s, &s));
        let port = |t: &str| t.trim().parse::<u16>().map_err(|_| bad());
        let (first, last) = (port(a)?, port(b)?);
        if first > last {
            return Err(bad());
        }
        Ok(PortRange { first, last })
    }
}

impl From<PortRange> for String {
    fn from(r: PortRange) -> String {
        if r.first == r.last {
            r.first.to_string()
        } else {
            format!("{}-{}", r.first, r.last)
        }
    }
}

/// Which info hashes the tracker serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AccessListMode {
    /// Every info hash is served.
    Off,
    /// Only the info hashes in the file are served.
    Allow,
    /// Every info hash but those in the file is served.
    Deny,
}

section! {
    /// The access list: a file of hex info hashes, one per line, reloaded on SIGHUP, and/or
    /// the database table hp_access_list; the list is what both hold.
    pub struct AccessListConfig {
        /// "off", "allow" (only listed hashes are served) or "deny" (listed hashes are refused).
        pub mode: AccessListMode = AccessListMode::Off,
        /// The file of 40-character hex info hashes; `#` starts a comment. Empty: no file.
        /// A relative path is taken from the config file's directory.
        pub path: String = String::new(),
        /// Also list the info hashes in the database table hp_access_list (needs the store).
        pub database: bool = false,
        /// Seconds between reads of hp_access_list (SIGHUP reads it too).
        pub reload_secs: u32 = 60,
    }
}

section! {
    /// Private mode (`tracker.mode = "private"`): only users known by their passkey may
    /// announce, and only for registered torrents. Users and torrents are read from the
    /// store's database, in the tables of the schema preset, at start and every
    /// `poll_secs`. The passkey is taken from the path (`/PASSKEY/announce`,
    /// `/announce/PASSKEY`), from the query parameter `passkey_param`, or over UDP from BEP
    /// 41's URL data (`udp://host:port/PASSKEY/announce`).
    pub struct PrivateConfig {
        /// "hotpath" (hp_users, hp_private_torrents, made by hotpath's migrations), "xbt"
        /// (xbt_users, xbt_torrents), "xbt_files" (XBT before 2019: xbt_users, xbt_files),
        /// "torrentpier" (bb_bt_users, bb_bt_torrents), "gazelle" (users_main, torrents, as
        /// Ocelot has them) or "unit3d" (users, groups, torrents, as UNIT3D-Announce has
        /// them).
        pub schema: PrivateSchema = PrivateSchema::Hotpath,
        /// Table and column names that differ from the preset's, by logical name, e.g.
        /// { users = "members", "users.passkey" = "pk" } (README lists each preset's names);
        /// "" for an optional column the site's table lacks (e.g. "users.can_leech").
        pub names: std::collections::BTreeMap<String, String> = Default::default(),
        /// The query parameter that may carry the passkey. Empty: the preset's ("uk" for
        /// torrentpier, "passkey" otherwise).
        pub passkey_param: String = String::new(),
        /// Seconds between reads of the users and torrents tables (the hotpath schema reads
        /// only rows whose updated_at changed, and every row each tenth time).
        pub poll_secs: u32 = 60,
        /// Most users held; rows past it are left out and counted
        /// (hotpath_private_rows_skipped_total).
        pub max_users: usize = 10_000_000,
        /// Most registered torrents held; rows past it are left out and counted.
        pub max_torrents: usize = 10_000_000,
        /// Peer id prefixes of the only clients allowed (e.g. ["-TR", "-qB", "-lt"]). Empty:
        /// any client not denied.
        pub peer_id_allow: Vec<String> = Vec::new(),
        /// Peer id prefixes of clients refused (checked before the allow list).
        pub peer_id_deny: Vec<String> = Vec::new(),
        /// Ports peers may not announce (e.g. ["1-1023", "6881-6889"]).
        pub port_deny: Vec<PortRange> = Vec::new(),
        /// Clients (peer ids) one user may run on one torrent at once; a further one is
        /// refused until one stops or times out.
        pub max_peers_per_user_torrent: u16 = 3,
        /// A known client announcing again sooner than the minimum interval
        /// (tracker.min_interval_secs, or the one pushed) is still accounted but gets no
        /// peers, and over HTTP a `warning message` saying how long to wait. Started,
        /// completed and stopped announces are never held back.
        pub enforce_min_interval: bool = true,
        /// The fastest a client is believed to move data, in bytes per second, each way:
        /// an announce credits at most this times the seconds since the client's last
        /// announce (and at most max_credit_per_announce_bytes), whatever its counters
        /// claim. A counter that goes down credits nothing, and the rise after it is held
        /// to the same bound. What is cut is not credited: it is counted in /metrics,
        /// logged, and flagged per user and torrent (`suspicious` in hotpath's own tables).
        /// The default, 10 Gbit/s, is a fast seedbox's line.
        pub max_rate_bytes_per_sec: u64 = 1_250_000_000,
        /// The most one announce credits each way, however long since the client's last
        /// (4 TiB: about an hour at the default rate).
        pub max_credit_per_announce_bytes: u64 = 4 << 40,
        /// Bearer token of the push API on the admin listener (`/admin/tracker/…`:
        /// users, passkeys, torrents, freeleech, tokens, client lists, intervals). Empty:
        /// the push API answers 403.
        pub admin_token: String = String::new(),
        /// The site's secret for its own tracker API on the admin listener, so the site's
        /// calls reach hotpath unchanged. Gazelle: its TRACKER_SECRET (Ocelot's
        /// site_password), for Ocelot's update API at `/<site_secret>/update?action=…`.
        /// UNIT3D: UNIT3D-Announce's APIKEY (its TRACKER_KEY), for its JSON API at
        /// `/announce/<site_secret>/…`. 16 to 128 letters, digits, `-`, `.`, `_` or `~`.
        /// Empty: off.
        pub site_secret: String = String::new(),
        /// Gazelle: its TRACKER_REPORTKEY (Ocelot's report_password), for Ocelot's report
        /// API at `/<report_secret>/report?get=stats|user|prom_stats|jemalloc`, which the
        /// site's tracker pages read. Same characters as `site_secret`. Empty: off.
        pub report_secret: String = String::new(),
        /// Unknown passkeys and wrong push API tokens one client address (IPv6: one /64)
        /// may send in a minute. Past it, every passkey or token it sends is refused (a
        /// `failure reason`, or 429) until its minute is over, the right ones too, so
        /// guessing learns nothing; counted in /metrics.
        pub max_auth_failures_per_min: u32 = 30,
        /// Freeleech tokens (a user's freeleech on one torrent) held at once; a further one
        /// is refused with 507 until some are removed or expire.
        pub max_tokens: usize = 1_000_000,
        /// Users with personal freeleech held at once; a further one is refused with 507.
        pub max_personal_freeleech: usize = 100_000,
        /// Leech slots: torrents one user may download at once (TorrentPier's
        /// limit_leech_count). An announce that would start another is refused until one
        /// completes, stops or times out; seeding is never limited. 0: no limit.
        pub leech_slots: u32 = 0,
        /// Leech slots by ratio, as TorrentPier's rating tiers: { "0.4" = 1, "0.5" = 2 }
        /// gives a user whose ratio (uploaded / downloaded, read from the site's totals,
        /// `totals` in the preset's names, every poll) is below 0.4 one slot, below 0.5
        /// two; the lowest tier the ratio is under applies, else `leech_slots`.
        pub ratio_tiers: std::collections::BTreeMap<String, u32> = Default::default(),
        /// Bytes a user must have downloaded before `ratio_tiers` apply to them
        /// (TorrentPier: 10 GiB, 10737418240).
        pub ratio_min_downloaded: u64 = 0,
    }
}

impl PrivateConfig {
    /// `ratio_tiers` as (ratio, slots), lowest ratio first (keys that do not parse, which
    /// validation refuses, left out).
    pub fn tiers(&self) -> Vec<(f64, u16)> {
        let mut t: Vec<(f64, u16)> = self
            .ratio_tiers
            .iter()
            .filter_map(|(r, &n)| Some((r.parse().ok()?, u16::try_from(n).ok()?)))
            .collect();
        t.sort_by(|a, b| a.0.total_cmp(&b.0));
        t
    }

    /// Whether users have leech slots (`leech_slots` or `ratio_tiers` set).
    pub fn limits_leeching(&self) -> bool {
        self.leech_slots > 0 || !self.ratio_tiers.is_empty()
    }

    /// The name in the database of logical name `key` (e.g. "users.passkey"): the override
    /// in `names`, or the preset's.
    pub fn name(&self, key: &str) -> Option<&str> {
        let n = match self.names.get(key) {
            Some(n) => n,
            None => self.schema.names().iter().find(|(k, _)| *k == key)?.1,
        };
        // "": a column the site's tables lack.
        Some(n).filter(|n| !n.is_empty())
    }

    /// The query parameter that may carry the passkey.
    pub fn passkey_param(&self) -> &str {
        if self.passkey_param.is_empty() {
            self.schema.passkey_param()
        } else {
            &self.passkey_param
        }
    }
}

section! {
    /// Persistence: changes are journaled locally before they are acknowledged and written
    /// behind, merged and batched, to a database (SQLite by default, PostgreSQL or MySQL).
    pub struct StoreConfig {
        /// Keep state across restarts. Off: nothing is written and nothing survives a restart.
        pub enabled: bool = true,
        /// Directory (made if missing) for the journal, the swarm snapshot and the default
        /// SQLite file. Relative paths are taken from the working directory.
        pub data_dir: String = "data".into(),
        /// The database: "sqlite://PATH" (a relative PATH is taken from the working
        /// directory), "postgres://USER@HOST:PORT/DB" or "mysql://USER:PASSWORD@HOST:PORT/DB".
        /// Empty: the SQLite file hotpath.db in data_dir.
        pub url: String = String::new(),
        /// Apply pending schema migrations at start. Off: start refuses an outdated schema
        /// (run `hotpath db migrate`).
        pub migrate: bool = true,
        /// Refuse to start when a server database (PostgreSQL, MySQL) cannot be reached.
        /// Off: the server starts without it, journals every change, refuses only what needs a
        /// database read (popup users not in memory get 503), and connects, migrates and
        /// replays the journal once the database answers. Credentials, schema and SQLite
        /// errors stop the start either way.
        pub require_db_at_start: bool = false,
        /// Milliseconds between flushes of merged changes to the database.
        pub flush_interval_ms: u64 = 1000,
        /// Rows (distinct keys) pending that trigger a flush before the interval ends.
        /// 0: 250000 on SQLite, 50000 on PostgreSQL and MySQL. SQLite, in this process,
        /// rewrites much the same pages of a big table per flush however many rows it
        /// carries, so fewer, larger flushes cost it less; a database server on the same
        /// host takes a large flush as a burst of CPU that answers wait behind.
        pub batch_rows: usize = 0,
        /// Milliseconds between fsyncs of the journal, done by a background thread (0: each
        /// worker fsyncs before every acknowledgement, at a cost in latency).
        /// A killed process loses nothing either way; a power loss may lose this much.
        pub journal_fsync_ms: u64 = 1000,
        /// Bytes the journal may hold on disk while the database is behind or down. At the
        /// limit, requests that must be journaled are refused with a clear error.
        pub journal_max_bytes: u64 = 1 << 30,
        /// Rows (distinct keys, and popup events) the queue may hold in memory while the
        /// database is behind or down. At the limit, requests that must be recorded are
        /// refused as when the journal is full, so memory stays bounded.
        pub max_queue_rows: usize = 4_000_000,
        /// Bytes per journal segment file; confirmed segments are deleted.
        pub journal_segment_bytes: u64 = 16 << 20,
        /// Longest pause in milliseconds between retries of a failed flush (the pause doubles
        /// from 100 ms up to this, with jitter).
        pub retry_max_ms: u64 = 30000,
        /// Seconds a graceful shutdown waits for the database to take what is pending; what
        /// remains stays in the journal and is replayed at the next start.
        pub shutdown_drain_secs: u64 = 30,
        /// Bytes data_dir/refused.jsonl (rows the database refuses for their values, set
        /// aside so the rest are written) may reach. Rows refused beyond it are dropped,
        /// logged and counted (hotpath_store_refused_dropped_rows_total);
        /// `hotpath db refused --replay` empties the file once the cause is fixed.
        pub refused_max_bytes: u64 = 256 << 20,
    }
}

impl StoreConfig {
    /// Whether `url` names SQLite (the default, `data_dir/hotpath.db`, when empty).
    pub fn is_sqlite(&self) -> bool {
        self.url.is_empty() || self.url.starts_with("sqlite://")
    }

    /// `batch_rows`, with 0 resolved by the database (see the key).
    pub fn batch_rows(&self) -> usize {
        match self.batch_rows {
            0 if self.is_sqlite() => 250_000,
            0 => 50_000,
            n => n,
        }
    }
}

section! {
    /// The popup service: `GET /v1/popup` decides which popup (if any) a user sees, `POST
    /// /v1/popup/events` records clicks and closes, `/admin/popups` (on the admin listener)
    /// manages the popups.
    /// Popups live in the database (`hp_popups`); shows and answers go through the journal.
    pub struct PopupsConfig {
        /// Serve the popup API (needs the store: store.enabled = true).
        pub enabled: bool = false,
        /// Bearer token of the admin API (`Authorization: Bearer TOKEN`). Empty: the admin
        /// API answers 403.
        pub admin_token: String = String::new(),
        /// Wrong admin tokens one client address (IPv6: one /64) may send in a minute; past
        /// it, every token it sends gets 429 until its minute is over (counted in /metrics).
        pub max_auth_failures_per_min: u32 = 30,
        /// Secret that signs show tokens (so a click or close names a real show). Empty: a
        /// random secret is made once and kept in store.data_dir/popups.secret.
        pub token_secret: String = String::new(),
        /// Seconds a show token stays valid for a click or close.
        pub token_ttl_secs: u64 = 7 * 86_400,
        /// No longer used: a show's click and close are now known from the user's state,
        /// which is journaled and stored with each answer, so no table of answered tokens
        /// is kept (a replay gets 409, after a restart too). Kept so that older config
        /// files load.
        pub max_spent_tokens: usize = 4_000_000,
        /// Milliseconds between reads of the popup table, so popups edited in the database
        /// directly reach every worker (admin API changes are seen at once).
        pub reload_ms: u64 = 500,
        /// Users whose state is kept in memory; beyond it, those idle longest are dropped
        /// (their state is in the database and is loaded again on their next request).
        pub max_users: usize = 2_000_000,
        /// Days after which a user's state for a popup they were only shown (never clicked
        /// or closed), whose cooldown is over, is deleted from hp_popup_users (once an
        /// hour): made-up user ids leave no rows for good. Their shows count toward a
        /// popup's max_shows until then.
        pub forget_idle_users_after_days: u32 = 90,
        /// Days of the event log (hp_popup_events) kept; older events are deleted once an
        /// hour.
        pub keep_events_days: u32 = 90,
        /// Users whose state may be waiting to be loaded at once; beyond it, new users get
        /// 503 until the database catches up.
        pub max_loading: usize = 65_536,
        /// Users loaded per database round trip.
        pub load_batch: usize = 512,
    }
}

section! {
    /// Lua routes: requests to these paths are answered by a Lua script's `handle(req)`
    /// (Lua 5.4; one VM per worker; every script compiled once, at start and on reload by
    /// SIGHUP). A route is `{ path = "/echo", script = "echo.lua" }`, with
    /// `prefix = true` to serve every path under it and `methods = ["GET", "POST"]` to allow
    /// only those (any by default). Paths the tracker or the popup service serve are theirs.
    pub struct LuaConfig {
        /// The routes (script paths are relative to the config file's directory).
        pub routes: Vec<LuaRoute> = Vec::new(),
        /// VM instructions one request may run before it is stopped with a 500 (a runaway
        /// loop costs the worker at most this). Counted once a request has run 1-2 ms of CPU
        /// time (scripts run without the count hook, which slows every instruction, until then),
        /// and from the start in coroutines.
        pub max_instructions: u64 = 10_000_000,
        /// Milliseconds one request may run before it is stopped with a 500.
        pub max_ms: u64 = 100,
        /// Megabytes of memory each worker's Lua VM may hold; an allocation beyond it fails
        /// the request with a 500.
        pub max_memory_mb: u64 = 64,
        /// Send a script's error message in the 500's body (otherwise it is only logged).
        pub debug_errors: bool = false,
        /// Give scripts Lua's whole standard library: files (`io`), processes and the
        /// environment (`os.execute`, `os.exit`, `os.getenv`), `require` of any path, `dofile`,
        /// `loadfile` and bytecode. Off, scripts get the base library without them, `string`,
        /// `table`, `math`, `utf8`, `coroutine`, `os.time`, `os.clock`, `os.date` and
        /// `os.difftime`, and `require` of modules in `lua.module_dir` (see README). A start-up
        /// warning says when it is on.
        pub unsafe_stdlib: bool = false,
        /// Where `require("name")` finds modules (`name.lua`; `a.b` is `a/b.lua`); empty:
        /// the directory of the first route's script. A relative path is taken from the config
        /// file's directory.
        pub module_dir: String = String::new(),
        /// Keys `hp.shared` (the dictionary all workers share) holds at most; beyond it, the
        /// least recently used go.
        pub shared_max_keys: usize = 100_000,
        /// Megabytes of keys and values `hp.shared` holds at most; beyond it, the least
        /// recently used go.
        pub shared_max_mb: u64 = 16,
        /// Connected UDP sockets `hp.udp.send` keeps per worker, one per remote address;
        /// beyond it the idlest is closed. 0: a new socket for every message (only to
        /// measure what the pool saves).
        pub udp_max_sockets: usize = 64,
        /// Seconds an unused pooled UDP socket stays open.
        pub udp_idle_secs: u64 = 60,
        /// Milliseconds an `hp.tcp.request` exchange may take (connect, send, answer) unless
        /// the script gives its own `timeout_ms`.
        pub tcp_timeout_ms: u64 = 1000,
        /// Idle connections `hp.tcp.request` keeps per worker and remote, for reuse.
        pub tcp_max_idle: usize = 8,
        /// Seconds an idle pooled TCP connection stays open.
        pub tcp_idle_secs: u64 = 60,
        /// Requests that may wait for a worker's TCP exchanges at once; beyond it
        /// `hp.tcp.request` fails at once ("too many requests wait").
        pub tcp_max_waiting: usize = 1024,
    }
}

section! {
    /// statsd: pushes the figures of /metrics to a statsd server every interval, over one
    /// connected UDP socket made once (counters as their increase since the last push, gauges
    /// as they are; labels become parts of the name, or DogStatsD tags), besides /metrics.
    pub struct StatsdConfig {
        /// Push to statsd.
        pub enabled: bool = false,
        /// The statsd server, host:port (resolved once, at start).
        pub address: String = "127.0.0.1:8125".into(),
        /// Milliseconds between pushes (and one more at shutdown).
        pub interval_ms: u64 = 10_000,
        /// The first part of every name (e.g. hotpath.requests_total.http.announce.ok).
        pub prefix: String = "hotpath".into(),
        /// Labels as DogStatsD tags (`name:1|c|#kind:announce`) instead of parts of the name.
        pub tags: bool = false,
        /// The largest datagram; lines are packed into as few as fit.
        pub max_packet_bytes: usize = 1432,
    }
}

section! {
    /// Cluster mode: several hotpath nodes serve one set of swarms (the open tracker, HTTP and
    /// UDP). Every node keeps every swarm in memory and answers from it; each tells the others
    /// of the announces it takes through Redis Cluster's sharded pub/sub, signed with the
    /// shared secret, and merges theirs: nothing on the request path waits for the network.
    /// UDP connection ids are keyed by the secret, so any node accepts an id another issued.
    /// Not yet with private mode, popups or Lua routes (`config --check` says so).
    pub struct ClusterConfig {
        /// Run as a node of a cluster (off: one process, exactly as without this section).
        pub enabled: bool = false,
        /// This node's id, 1-255, different on every node (the origin of its peers).
        pub node_id: u8 = 1,
        /// Redis Cluster seed nodes, host:port (any reachable one finds the rest).
        pub redis: Vec<String> = vec!["127.0.0.1:7000".into()],
        /// The secret every node shares (at least 16 characters): it signs the exchange and
        /// keys UDP connection ids. Prefer `secret_file`.
        pub secret: String = String::new(),
        /// A file whose first line is the secret (relative to this config file's directory).
        pub secret_file: String = String::new(),
        /// The first part of the channels' names (several clusters may share one Redis).
        pub prefix: String = "hotpath".into(),
        /// Milliseconds between publishes of this node's deltas.
        pub publish_ms: u64 = 100,
        /// Groups of info hashes, one channel each (spread over the Redis masters by the
        /// channels' hash tags). Every node must use the same number.
        pub groups: u16 = 64,
        /// Deltas waiting to be published at most; past it new ones are dropped (counted in
        /// /metrics: the other nodes learn of those peers at their next announce).
        pub max_pending_deltas: usize = 262_144,
        /// The largest message this node publishes; a group's deltas take as many as needed.
        pub max_message_bytes: usize = 65_536,
        /// Messages received and not yet applied at most; past it they are dropped (counted).
        pub max_inbound_messages: usize = 4096,
        /// Milliseconds to wait for Redis (connect and each command) before counting it down.
        pub redis_timeout_ms: u64 = 2000,
        /// Seconds between rewrites of this node's snapshot keys in Redis (its own peers, one
        /// list per group, kept for tracker.peer_timeout_secs more): a node that starts, or
        /// comes back after Redis was out of reach, fills its replica from every node's
        /// before `/healthz` says it is ready.
        pub snapshot_secs: u64 = 120,
    }
}

section! {
    /// WebTorrent: browsers (and other WebRTC peers) join swarms over WebSocket, on the HTTP
    /// listeners: an upgrade on `/announce` (and, in private mode, on the passkey's announce
    /// path). The tracker relays their WebRTC offers and answers; it never hands out
    /// addresses. Every bound below is counted in /metrics when it is hit.
    pub struct WebTorrentConfig {
        /// Take WebSocket upgrades on the announce paths.
        pub enabled: bool = true,
        /// The longest message (after its fragments are joined); longer ones close the
        /// connection (1009).
        pub max_message_bytes: usize = 65_536,
        /// The longest frame; longer ones close the connection (1009) from their header.
        pub max_frame_bytes: usize = 65_536,
        /// Offers relayed per announce at most (the reference client sends 5 at most); the
        /// rest are dropped and counted.
        pub max_offers_per_announce: usize = 10,
        /// The longest session description (offer or answer) relayed; an announce with a
        /// longer one is refused.
        pub max_sdp_bytes: usize = 16_384,
        /// Seconds an offer waits for its answer: an answer is relayed only to the peer
        /// whose offer it answers, and only within this time.
        pub offer_lifetime_secs: u32 = 120,
        /// Offers of one peer waiting for an answer at most; past it its new offers are
        /// dropped (counted) until answers come or the old ones expire.
        pub max_pending_offers_per_peer: usize = 50,
        /// Unsent bytes one connection may hold; a peer that does not read is disconnected
        /// when messages for it would go past this (counted).
        pub max_output_bytes: usize = 262_144,
        /// Seconds a connection may stay silent before it is closed (clients announce every
        /// interval_secs, and answer the pings sent after half of this).
        pub idle_timeout_secs: u32 = 300,
        /// Seconds a connection may leave sent bytes unread before it is closed.
        pub send_timeout_secs: u32 = 30,
        /// Peers per swarm at most; past it a new peer gets the swarm's counts but is not
        /// kept, and its offers are dropped (counted).
        pub max_peers_per_swarm: usize = 5_000,
        /// Swarms at most.
        pub max_swarms: usize = 1_000_000,
        /// Swarms one connection may be in at most (the reference client uses one
        /// connection for all its torrents).
        pub max_swarms_per_connection: usize = 256,
        /// Seconds between announces the tracker asks for.
        pub interval_secs: u32 = 120,
    }
}

section! {
    /// TLS for listen.https (rustls; TLS 1.3 and 1.2, ALPN http/1.1). The certificate and key
    /// are read again on SIGHUP: new connections get the new ones, open ones keep theirs,
    /// and a pair that does not load leaves the old one in force (logged).
    pub struct TlsConfig {
        /// The certificate chain, PEM, leaf first (relative to this config file's
        /// directory).
        pub cert_file: String = String::new(),
        /// Its private key, PEM (PKCS#8, PKCS#1 or SEC1).
        pub key_file: String = String::new(),
        /// Sessions kept for resumption by session id (TLS 1.2 and 1.3) at most, for all
        /// workers; 0 turns resumption by id off.
        pub session_cache: usize = 20_000,
        /// Resumption by session ticket too (the key rotates every 6 hours, kept only in
        /// memory): a returning client skips the full handshake without a cache entry.
        pub tickets: bool = true,
    }
}

section! {
    /// Logging: what goes to standard error (the journal, under systemd) and the access log.
    pub struct LogConfig {
        /// The least severe messages written: "error", "warn", "info", "debug" or "trace",
        /// optionally with levels per module after it ("info,hotpath_store=debug"). RUST_LOG,
        /// when set, wins over this, and --log-level on the command line over both.
        pub level: String = "info".into(),
        /// "text": a line per message, `[time LEVEL module] message`; under systemd (standard
        /// error is the journal) without the time, which the journal adds, and with the level
        /// as a syslog priority (`<3>` for errors) so that `journalctl -p` sees it. "json": a
        /// JSON object per line, {"ts", "level", "target", "msg"}.
        pub format: LogFormat = LogFormat::Text,
        /// The access log, a line per HTTP request: "" none, "-" standard error, or a file
        /// (relative to the working directory), appended to, and opened again on SIGHUP and
        /// SIGUSR1 (for logrotate). Written by a background thread, never on the request
        /// path; lines are dropped and counted (hotpath_access_log_dropped_total) when it
        /// falls behind. In log.format's form: `time address "METHOD path?query" status
        /// bytes microseconds`, or a JSON object.
        pub access_log: String = String::new(),
    }
}

/// How log lines are written (`log.format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// A line of text per message.
    Text,
    /// A JSON object per line.
    Json,
}

impl LogConfig {
    /// Where access log lines go: none, standard error, or a file.
    pub fn access_target(&self, server: &ServerConfig) -> AccessLog {
        match self.access_log.as_str() {
            "" if server.access_log => AccessLog::Stderr,
            "" => AccessLog::Off,
            "-" => AccessLog::Stderr,
            path => AccessLog::File(PathBuf::from(path)),
        }
    }
}

/// Where access log lines go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccessLog {
    /// Nowhere.
    Off,
    /// Standard error, with the other log lines.
    Stderr,
    /// A file of their own.
    File(PathBuf),
}

/// Whether `spec` is a log level list as `log.level` takes it: directives split by commas,
/// each `LEVEL` or `MODULE=LEVEL`. The reason when not.
pub fn check_log_level(spec: &str) -> Result<(), String> {
    const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];
    if spec.trim().is_empty() {
        return Err("must name a level (error, warn, info, debug, trace or off)".into());
    }
    for d in spec.split(',').map(str::trim) {
        let (module, level) = d.split_once('=').unwrap_or(("", d));
        let module_ok = module.is_empty() && !d.contains('=')
            || !module.is_empty()
                && module
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
        if !module_ok || !LEVELS.contains(&level.to_ascii_lowercase().as_str()) {
            return Err(format!(
                "{d:?} is not LEVEL or MODULE=LEVEL (levels: error, warn, info, debug, trace, off)"
            ));
        }
    }
    Ok(())
}

/// One Lua route.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LuaRoute {
    /// The path, e.g. `/echo`.
    pub path: String,
    /// Serve every path that starts with `path` too (the longest matching prefix wins; an
    /// exact route wins over prefixes).
    #[serde(default)]
    pub prefix: bool,
    /// The methods allowed (others get 405); empty: any.
    #[serde(default)]
    pub methods: Vec<String>,
    /// The script: a Lua file that defines a global function `handle(req)`. A relative path
    /// is taken from the config file's directory.
    pub script: String,
}

/// The whole configuration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Network server settings.
    pub server: ServerConfig,
    /// Listen addresses.
    pub listen: ListenConfig,
    /// Tracker settings.
    pub tracker: TrackerConfig,
    /// Access list settings.
    pub access_list: AccessListConfig,
    /// Private tracker mode.
    pub private: PrivateConfig,
    /// Persistence settings.
    pub store: StoreConfig,
    /// The popup service.
    pub popups: PopupsConfig,
    /// Lua routes.
    pub lua: LuaConfig,
    /// The statsd exporter.
    pub statsd: StatsdConfig,
    /// Logging.
    pub log: LogConfig,
    /// Cluster mode.
    pub cluster: ClusterConfig,
    /// WebTorrent over WebSocket.
    pub webtorrent: WebTorrentConfig,
    /// TLS for the HTTPS listeners.
    pub tls: TlsConfig,
}

impl Config {
    /// Reads, parses and validates a config file; every error found, each with its place.
    /// Relative paths of files the config names (Lua scripts, `lua.module_dir`, the access
    /// list) are then taken from the file's directory; `store.data_dir` and a relative SQLite
    /// URL stay relative to the working directory.
    pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
        Config::load_with(path, |_| Vec::new())
    }

    /// [`Config::load`], with `check` run on the config as soon as its keys parse (even when
    /// some values make no sense) to find more problems, as (key, what is wrong): all are
    /// reported together, in the order of the file.
    pub fn load_with(
        path: &Path,
        check: impl FnOnce(&Config) -> Vec<(String, String)>,
    ) -> Result<Config, ConfigErrors> {
        let file = path.display().to_string();
        let text =
            file::read_bounded_text(path, MAX_CONFIG_BYTES).map_err(|source| ConfigErrors {
                file: Some(file.clone()),
                errors: vec![(
                    None,
                    ConfigError::Read {
                        path: file.clone(),
                        source,
                    },
                )],
            })?;
        let (config, mut errors) = Config::read(&text);
        errors.file = Some(file);
        let Some(mut config) = config else {
            return Err(errors);
        };
        if let Some(dir) = path.parent() {
            config.resolve_paths(dir);
        }
        let checks = check(&config);
        errors.push_keys(
            &text,
            checks
                .into_iter()
                .map(|(key, message)| ConfigError::Check { key, message }),
        );
        errors.sort();
        errors.into_result(config)
    }

    /// Parses and validates TOML text. Keys left out take their defaults. Every error is
    /// reported, each with its line and column: a syntax error alone (the parser cannot go
    /// past it), otherwise every unknown key and value of the wrong type, then every value
    /// that makes no sense.
    pub fn parse(text: &str) -> Result<Config, ConfigErrors> {
        let (config, mut errors) = Config::read(text);
        errors.sort();
        match config {
            Some(c) => errors.into_result(c),
            None => Err(errors),
        }
    }

    /// The config in `text` when its keys parse (with defaults for the rest), and every error.
    fn read(text: &str) -> (Option<Config>, ConfigErrors) {
        let mut errors = ConfigErrors {
            file: None,
            errors: Vec::new(),
        };
        let mut table: toml::Table = match toml::from_str(text) {
            Ok(t) => t,
            Err(e) => {
                let at = e.span().map(|s| position(text, s.start));
                let message = e.message().trim().lines().collect::<Vec<_>>().join("; ");
                errors.errors.push((at, ConfigError::Syntax { message }));
                return (None, errors);
            }
        };
        let doc = toml_edit::ImDocument::parse(text).ok();
        // One wrong key at a time: note it, take it out, and read the rest again.
        let config = loop {
            let value = toml::Value::Table(table.clone());
            match serde_path_to_error::deserialize::<_, Config>(value) {
                Ok(c) => break Some(c),
                Err(e) => {
                    let path: Vec<Segment> = e.path().iter().filter_map(segment).collect();
                    let key = e.path().to_string();
                    let message = e.into_inner().message().trim().to_string();
                    // An unknown key is shown where it is written; a bad value, at the value.
                    let at_key = message.starts_with("unknown field");
                    let at = doc.as_ref().and_then(|d| span_of(d, &path, text, at_key));
                    errors
                        .errors
                        .push((at, ConfigError::Parse { key, message }));
                    if errors.errors.len() >= MAX_ERRORS || !remove(&mut table, &path) {
                        break None;
                    }
                }
            }
        };
        if let Some(config) = &config {
            // A value that did not parse was taken out, and its default (or what is left of
            // its list) stands in for it: a problem that names its key is a follow-on of that
            // error (`lua.routes` "needs an HTTP listener" after a malformed `listen.http`),
            // not one of its own.
            let failed: Vec<String> = errors
                .errors
                .iter()
                .filter_map(|(_, e)| match e {
                    ConfigError::Parse { key, .. } => Some(key.split('[').next()?.to_string()),
                    _ => None,
                })
                .filter(|k| !k.is_empty())
                .collect();
            let follow_on = |e: &ConfigError| {
                let text = e.to_string();
                failed.iter().any(|k| text.contains(k.as_str()))
            };
            errors.push_keys(
                text,
                config.problems().into_iter().filter(|e| !follow_on(e)),
            );
        }
        (config, errors)
    }

    /// Takes relative paths of the files this config names from `dir`.
    pub fn resolve_paths(&mut self, dir: &Path) {
        let resolve = |p: &mut String| {
            if !p.is_empty() && Path::new(p.as_str()).is_relative() {
                *p = dir.join(p.as_str()).display().to_string();
            }
        };
        for r in &mut self.lua.routes {
            resolve(&mut r.script);
        }
        resolve(&mut self.lua.module_dir);
        resolve(&mut self.access_list.path);
        resolve(&mut self.cluster.secret_file);
        resolve(&mut self.tls.cert_file);
        resolve(&mut self.tls.key_file);
    }

    /// Checks values that parse but make no sense; the first problem (see
    /// [`Config::problems`] for all of them).
    pub fn validate(&self) -> Result<(), ConfigError> {
        match self.problems().into_iter().next() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Every value that parses but makes no sense, in the order of the sections.
    pub fn problems(&self) -> Vec<ConfigError> {
        validate::all(self)
    }

    /// The keys (`section.key`; a list such as `lua.routes` as one key) whose values differ
    /// between `self` and `other`, sorted.
    pub fn changed_keys(&self, other: &Config) -> Vec<String> {
        let (a, b) = (self.to_value(), other.to_value());
        let mut out = Vec::new();
        for (section, av) in a.as_table().into_iter().flatten() {
            let bv = &b[section.as_str()];
            match (av.as_table(), bv.as_table()) {
                (Some(at), Some(bt)) => {
                    for (key, v) in at {
                        if bt.get(key) != Some(v) {
                            out.push(format!("{section}.{key}"));
                        }
                    }
                }
                _ if av != bv => out.push(section.clone()),
                _ => {}
            }
        }
        out
    }

    /// `self` with the values `other` has for `keys` (as [`Config::changed_keys`] names them).
    pub fn with_keys_of(&self, other: &Config, keys: &[&str]) -> Config {
        let (mut a, b) = (self.to_value(), other.to_value());
        for key in keys {
            let (section, name) = key.split_once('.').unwrap_or((key, ""));
            let v = if name.is_empty() {
                b.get(section).cloned()
            } else {
                b.get(section).and_then(|t| t.get(name)).cloned()
            };
            let (Some(v), Some(t)) = (v, a.as_table_mut()) else {
                continue;
            };
            if name.is_empty() {
                t.insert(section.to_string(), v);
            } else if let Some(st) = t.get_mut(section).and_then(toml::Value::as_table_mut) {
                st.insert(name.to_string(), v);
            }
        }
        a.try_into().expect("a config's own values make a config")
    }

    fn to_value(&self) -> toml::Value {
        toml::Value::try_from(self).expect("a config serializes")
    }

    /// The defaults as a TOML file with every key commented, generated from the types.
    pub fn default_toml() -> String {
        Config::default().to_commented_toml()
    }

    /// This configuration as a TOML file with a comment on every section and key.
    pub fn to_commented_toml(&self) -> String {
        let mut out = String::from(
            "# hotpath configuration. Every key is optional; these are the defaults.\n\
             # Generated by `hotpath config`.\n",
        );
        write_section(&mut out, "server", &self.server);
        write_section(&mut out, "listen", &self.listen);
        write_section(&mut out, "tracker", &self.tracker);
        write_section(&mut out, "access_list", &self.access_list);
        write_section(&mut out, "private", &self.private);
        write_section(&mut out, "store", &self.store);
        write_section(&mut out, "popups", &self.popups);
        write_section(&mut out, "lua", &self.lua);
        write_section(&mut out, "statsd", &self.statsd);
        write_section(&mut out, "log", &self.log);
        write_section(&mut out, "cluster", &self.cluster);
        out
    }
}

fn write_comment(out: &mut String, doc: &str) {
    for line in doc.lines() {
        let _ = writeln!(out, "#{}", line.trim_end());
    }
}

fn write_section<S: Section>(out: &mut String, name: &str, section: &S) {
    out.push('\n');
    write_comment(out, S::DOC);
    let _ = writeln!(out, "[{name}]");
    let table = toml::Table::try_from(section).expect("config sections serialize to tables");
    for (field, doc) in S::FIELDS {
        write_comment(out, doc);
        let value = table
            .get(*field)
            .expect("every config field serializes to a value");
        let _ = writeln!(out, "{field} = {value}");
    }
}

/// The number of worker threads to run for `configured` (0 = one per available CPU).
pub fn effective_workers(configured: usize) -> usize {
    if configured > 0 {
        return configured;
    }
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[cfg(test)]
mod tests {
    #[test]
    fn changed_keys_name_what_differs_and_with_keys_of_takes_only_those() {
        let a = Config::default();
        let b = Config::parse(
            "[server]\nworkers = 3\n[tracker]\ninterval_secs = 1200\n[[lua.routes]]\npath = \"/e\"\nscript = \"e.lua\"\n",
        )
        .unwrap();
        assert_eq!(
            a.changed_keys(&b),
            ["lua.routes", "server.workers", "tracker.interval_secs"]
        );
        assert!(a.changed_keys(&a).is_empty());
        let c = a.with_keys_of(&b, &["tracker.interval_secs"]);
        assert_eq!(c.tracker.interval_secs, 1200);
        assert_eq!(c.server.workers, a.server.workers);
        assert_eq!(c.changed_keys(&b), ["lua.routes", "server.workers"]);
    }

    use super::*;

    #[test]
    fn commented_defaults_parse_back_to_defaults() {
        let text = Config::default_toml();
        assert!(text.contains("# Listen backlog"), "{text}");
        assert_eq!(Config::parse(&text).unwrap(), Config::default());
    }

    #[test]
    fn every_field_has_a_comment() {
        fn check<S: Section>() {
            assert!(!S::DOC.trim().is_empty());
            for (name, doc) in S::FIELDS {
                assert!(!doc.trim().is_empty(), "field {name} has no doc comment");
            }
        }
        check::<ServerConfig>();
        check::<ListenConfig>();
        check::<TrackerConfig>();
        check::<AccessListConfig>();
        check::<PrivateConfig>();
        check::<StoreConfig>();
        check::<PopupsConfig>();
        check::<LuaConfig>();
        check::<StatsdConfig>();
    }

    #[test]
    fn empty_file_is_the_defaults() {
        assert_eq!(Config::parse("").unwrap(), Config::default());
    }

    #[test]
    fn unknown_key_is_named() {
        let err = Config::parse("[server]\nworkrs = 2\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("workrs"), "{err}");
        assert!(err.contains("server"), "{err}");
        let err = Config::parse("[serverx]\n").unwrap_err().to_string();
        assert!(err.contains("serverx"), "{err}");
    }

    #[test]
    fn wrong_type_is_named() {
        let err = Config::parse("[tracker]\nnumwant_max = \"lots\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("tracker.numwant_max"), "{err}");
        let err = Config::parse("[listen]\nhttp = [\"nope\"]\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("listen.http"), "{err}");
        let err = Config::parse("[access_list]\nmode = \"maybe\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("access_list.mode"), "{err}");
    }

    #[test]
    fn every_error_of_a_file_is_placed_and_in_its_order() {
        let text = "[server]\nworkerz = 2\nworkers = \"four\"\nbacklog = 0\n\n[srever]\nx = 1\n\n\
                    [listen]\nhttp = [\"1.2.3.4:5\",\n  \"nonsense\"]\n\n\
                    [[lua.routes]]\npath = \"/x\"\n";
        let e = Config::parse(text).unwrap_err();
        let got: Vec<(usize, usize, String)> = e
            .errors
            .iter()
            .map(|(at, e)| {
                let at = at.expect("placed");
                (at.line, at.column, e.key().unwrap_or("").to_string())
            })
            .collect();
        let want = [
            (2, 1, "server.workerz"),
            (3, 11, "server.workers"),
            (4, 11, "server.backlog"),
            (6, 2, "srever"),
            (11, 3, "listen.http[1]"),
            (13, 1, "lua.routes[0]"),
        ];
        let want: Vec<(usize, usize, String)> = want
            .iter()
            .map(|(l, c, k)| (*l, *c, k.to_string()))
            .collect();
        assert_eq!(got, want, "{e}");
        let shown = e.to_string();
        assert!(
            shown.starts_with("line 2, column 1: config key `server.workerz`"),
            "{shown}"
        );
        assert!(shown.contains("missing field `script`"), "{shown}");
        assert!(shown.ends_with("6 errors"), "{shown}");

        // Syntax: one error (the parser stops there), placed, on one line.
        let e = Config::parse("[server]\nworkers = 2\nbacklog = \n").unwrap_err();
        assert_eq!(e.errors.len(), 1);
        assert_eq!(
            e.errors[0].0,
            Some(Pos {
                line: 3,
                column: 11
            })
        );
        assert!(matches!(e.errors[0].1, ConfigError::Syntax { .. }));
        assert!(!e.to_string().contains('\n'), "{e}");

        // A file of nothing but mistakes: reported up to a bound, and fast.
        let many: String = (0..5000).map(|i| format!("[server]\nk{i} = 1\n")).collect();
        assert!(Config::parse(&many).is_err());
        let many: String = (0..5000).map(|i| format!("k{i} = 1\n")).collect();
        let e = Config::parse(&many).unwrap_err();
        assert_eq!(e.errors.len(), MAX_ERRORS);
    }

    #[test]
    fn keys_are_located_in_tables_and_arrays_of_tables() {
        let text = "[store]\nurl = \"x\"\n\n[[lua.routes]]\npath = \"/a\"\nscript = \"a.lua\"\n\n\
                    [[lua.routes]]\npath = \"/b\"\n  script = \"b.lua\"\n";
        assert_eq!(locate(text, "store.url"), Some(Pos { line: 2, column: 7 }));
        assert_eq!(
            locate(text, "lua.routes[1].script"),
            Some(Pos {
                line: 10,
                column: 12
            })
        );
        assert_eq!(locate(text, "lua.routes[0].script").unwrap().line, 6);
        // A key left out: the deepest part that is there (its table); nothing, not there.
        assert_eq!(
            locate(text, "store.data_dir"),
            Some(Pos { line: 1, column: 1 })
        );
        assert_eq!(locate(text, "popups.enabled"), None);
        assert_eq!(locate("not toml [", "store.url"), None);
    }

    #[test]
    fn relative_paths_are_taken_from_the_config_files_directory() {
        let dir = std::env::temp_dir().join(format!("hotpath-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("h.toml");
        std::fs::write(
            &file,
            "[access_list]\npath = \"list.txt\"\n[lua]\nmodule_dir = \"/abs\"\n\
             [[lua.routes]]\npath = \"/a\"\nscript = \"lua/a.lua\"\n[store]\ndata_dir = \"data\"\n",
        )
        .unwrap();
        let c = Config::load(&file).unwrap();
        assert_eq!(
            c.lua.routes[0].script,
            dir.join("lua/a.lua").display().to_string()
        );
        assert_eq!(
            c.access_list.path,
            dir.join("list.txt").display().to_string()
        );
        assert_eq!(c.lua.module_dir, "/abs");
        assert_eq!(
            c.store.data_dir, "data",
            "the data directory stays the working directory's"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn batch_rows_left_at_0_follow_the_database() {
        let rows = |toml: &str| Config::parse(toml).unwrap().store.batch_rows();
        assert_eq!(rows(""), 250_000);
        assert_eq!(rows("[store]\nurl = \"sqlite://x.db\"\n"), 250_000);
        assert_eq!(
            rows("[store]\nurl = \"mysql://root@127.0.0.1/t\"\n"),
            50_000
        );
        assert_eq!(rows("[store]\nurl = \"postgres://u@h/d\"\n"), 50_000);
        assert_eq!(rows("[store]\nbatch_rows = 7\n"), 7);
        // The queue's bound is checked against the resolved size.
        let err = Config::parse("[store]\nmax_queue_rows = 400000\n").unwrap_err();
        assert!(err.to_string().contains("store.max_queue_rows"), "{err}");
        let c = Config::parse("[store]\nmax_queue_rows = 400000\nurl = \"mysql://r@h/d\"\n");
        assert!(c.unwrap().problems().is_empty());
    }

    #[test]
    fn listeners_that_overlap_are_refused_and_others_pass() {
        let errors = |listen: &str| -> Vec<String> {
            match Config::parse(&format!("[listen]\n{listen}")) {
                Ok(_) => Vec::new(),
                Err(e) => e.errors.iter().map(|(_, e)| e.to_string()).collect(),
            }
        };
        for (listen, key) in [
            // The admin API on the public port, as a reader of README might try it.
            (
                "http = [\"0.0.0.0:6969\"]\nadmin = [\"0.0.0.0:6969\"]\n",
                "listen.admin",
            ),
            (
                "http = [\"0.0.0.0:6969\"]\nadmin = [\"127.0.0.1:6969\"]\n",
                "listen.admin",
            ),
            // listen.ipv6 adds [::]:6969 beside 0.0.0.0:6969.
            (
                "http = [\"0.0.0.0:6969\"]\nadmin = [\"[::1]:6969\"]\n",
                "listen.admin",
            ),
            (
                "http = [\"127.0.0.1:80\", \"127.0.0.1:80\"]\n",
                "listen.http",
            ),
            (
                "udp = [\"0.0.0.0:6969\", \"10.0.0.1:6969\"]\n",
                "listen.udp",
            ),
        ] {
            let e = errors(listen);
            assert!(
                e.len() == 1 && e[0].contains(&format!("`{key}`")) && e[0].contains("overlaps"),
                "{listen}: {e:?}"
            );
        }
        for listen in [
            // TCP and UDP on one port; port 0 (the kernel picks); other addresses or families.
            "http = [\"0.0.0.0:6969\"]\nudp = [\"0.0.0.0:6969\"]\n",
            "http = [\"127.0.0.1:0\"]\nadmin = [\"127.0.0.1:0\"]\n",
            "http = [\"127.0.0.1:80\"]\nadmin = [\"127.0.0.2:80\"]\n",
            "http = [\"0.0.0.0:80\"]\nadmin = [\"[::1]:80\"]\nipv6 = false\n",
            // [::] written out beside 0.0.0.0 is what listen.ipv6 would add: one socket.
            "http = [\"0.0.0.0:80\", \"[::]:80\"]\n",
        ] {
            assert_eq!(errors(listen), Vec::<String>::new(), "{listen}");
        }
    }

    #[test]
    fn a_value_that_does_not_parse_brings_no_follow_on_errors() {
        let e = Config::parse(
            "[listen]\nhttp = [\"nonsense\"]\n[[lua.routes]]\npath = \"/x\"\nscript = \"x.lua\"\n\
             [popups]\nenabled = true\n[tracker]\nshards = 100\n",
        )
        .unwrap_err();
        let keys: Vec<String> = e
            .errors
            .iter()
            .map(|(_, e)| e.key().unwrap_or_default().to_string())
            .collect();
        // Not `lua.routes` or `popups.enabled` "needs an HTTP listener": the one wrong value,
        // and the problem that has nothing to do with it.
        assert_eq!(keys, ["listen.http[0]", "tracker.shards"]);
    }

    #[test]
    fn every_problem_is_reported_not_only_the_first() {
        let c = Config::parse("").unwrap();
        assert!(c.problems().is_empty());
        let mut c = c;
        c.server.backlog = 0;
        c.tracker.shards = 100;
        c.store.batch_rows = 2_000_000;
        c.lua.max_ms = 0;
        let keys: Vec<String> = c
            .problems()
            .iter()
            .map(|e| match e {
                ConfigError::Invalid { key, .. } => key.to_string(),
                other => panic!("{other}"),
            })
            .collect();
        assert_eq!(
            keys,
            [
                "server.backlog",
                "tracker.shards",
                "store.batch_rows",
                "lua.max_ms"
            ]
        );
        assert_eq!(
            c.validate().unwrap_err().to_string(),
            "config key `server.backlog`: must be between 1 and 1048576"
        );
    }

    #[test]
    fn invalid_values_are_named() {
        let on = "[cluster]\nenabled = true\nsecret = \"0123456789abcdef\"\n";
        let cluster = [
            ("node_id = 0\n", "cluster.node_id"),
            ("redis = []\n", "cluster.redis"),
            ("redis = [\"no-port\"]\n", "cluster.redis"),
            ("redis = [\"h:0\"]\n", "cluster.redis"),
            ("prefix = \"a{b}\"\n", "cluster.prefix"),
            ("publish_ms = 1\n", "cluster.publish_ms"),
            ("groups = 0\n", "cluster.groups"),
            ("max_pending_deltas = 0\n", "cluster.max_pending_deltas"),
            ("max_message_bytes = 100\n", "cluster.max_message_bytes"),
            ("max_inbound_messages = 0\n", "cluster.max_inbound_messages"),
            ("redis_timeout_ms = 5\n", "cluster.redis_timeout_ms"),
            ("secret_file = \"s\"\n", "cluster.secret"),
        ];
        for (line, key) in cluster {
            let text = format!("{on}{line}");
            let err = Config::parse(&text).unwrap_err().to_string();
            assert!(err.contains(key), "{text}: {err}");
        }
        for (text, key) in [
            ("[cluster]\nenabled = true\n", "cluster.secret_file"),
            (
                "[cluster]\nenabled = true\nsecret = \"short\"\n",
                "cluster.secret",
            ),
            (
                &format!("{on}[tracker]\nmode = \"private\"\n") as &str,
                "not yet with tracker.mode",
            ),
            (
                &format!("{on}[popups]\nenabled = true\n"),
                "not yet with popups",
            ),
        ] {
            let err = Config::parse(text).unwrap_err().to_string();
            assert!(err.contains(key), "{text}: {err}");
        }
        // Off, nothing in the section is checked; on and complete, it passes.
        Config::parse("[cluster]\nnode_id = 0\n").unwrap();
        Config::parse(on).unwrap();
        let cases = [
            (
                "[tracker]\nnumwant_default = 500\n",
                "tracker.numwant_default",
            ),
            ("[tracker]\nshards = 100\n", "tracker.shards"),
            (
                "[tracker]\npeer_timeout_secs = 10\n",
                "tracker.peer_timeout_secs",
            ),
            ("[server]\nbacklog = 0\n", "server.backlog"),
            ("[access_list]\nmode = \"allow\"\n", "access_list.path"),
            (
                "[access_list]\ndatabase = true\n[store]\nenabled = false\n",
                "access_list.database",
            ),
            ("[store]\nurl = \"redis://x\"\n", "store.url"),
            (
                "[store]\nflush_interval_ms = 0\n",
                "store.flush_interval_ms",
            ),
            ("[store]\nbatch_rows = 1000001\n", "store.batch_rows"),
            (
                "[store]\nenabled = false\n[popups]\nenabled = true\n",
                "popups.enabled",
            ),
            ("[popups]\nadmin_token = \"short\"\n", "popups.admin_token"),
            (
                "[listen]\nadmin = []\n[popups]\nadmin_token = \"0123456789abcdef0123\"\n",
                "popups.admin_token",
            ),
            ("[private]\nadmin_token = \"short\"\n", "private.admin_token"),
            (
                "[private]\nschema = \"gazelle\"\nsite_secret = \"short\"\n",
                "private.site_secret",
            ),
            (
                "[private]\nschema = \"gazelle\"\nsite_secret = \"has/slashes/in/it/0000\"\n",
                "private.site_secret",
            ),
            (
                "[private]\nsite_secret = \"0123456789abcdef0123456789abcdef\"\n",
                "private.site_secret",
            ),
            (
                "[private]\nschema = \"unit3d\"\nreport_secret = \"0123456789abcdef0123\"\n",
                "private.report_secret",
            ),
            (
                "[private]\nschema = \"gazelle\"\nreport_secret = \"bad secret 0123456789\"\n",
                "private.report_secret",
            ),
            (
                "[private]\nschema = \"gazelle\"\nadmin_token = \"0123456789abcdef\"\n\
                 report_secret = \"0123456789abcdef\"\n",
                "private.report_secret",
            ),
            ("[popups]\nreload_ms = 5\n", "popups.reload_ms"),
            ("[popups]\nload_batch = 0\n", "popups.load_batch"),
            (
                "[[lua.routes]]\npath = \"echo\"\nscript = \"e.lua\"\n",
                "lua.routes",
            ),
            (
                "[[lua.routes]]\npath = \"/e\"\nscript = \"e.lua\"\nmethods = [\"get\"]\n",
                "lua.routes",
            ),
            (
                "[[lua.routes]]\npath = \"/e\"\nscript = \"a.lua\"\n[[lua.routes]]\npath = \"/e\"\nscript = \"b.lua\"\n",
                "lua.routes",
            ),
            ("[lua]\nmax_ms = 0\n", "lua.max_ms"),
            (
                "[statsd]\nenabled = true\naddress = \"localhost\"\n",
                "statsd.address",
            ),
            ("[statsd]\nprefix = \"a b\"\n", "statsd.prefix"),
            ("[log]\nlevel = \"inf\"\n", "log.level"),
            ("[log]\nlevel = \"info,=debug\"\n", "log.level"),
            ("[log]\nlevel = \"\"\n", "log.level"),
            ("[log]\nformat = \"xml\"\n", "log.format"),
            ("[lua]\nmax_memory_mb = 0\n", "lua.max_memory_mb"),
            (
                "[store]\njournal_max_bytes = 100\n",
                "store.journal_max_bytes",
            ),
            (
                "[store]\nenabled = true\ndata_dir = \"\"\n",
                "store.data_dir",
            ),
            (
                "[tracker]\nsnapshot_interval_secs = 0\n",
                "tracker.snapshot_interval_secs",
            ),
            (
                "[tracker]\nreal_ip_header = \"X-Real-IP\"\n",
                "tracker.trusted_proxies",
            ),
            ("[listen]\nhttp = []\nudp = []\n", "listen"),
            (
                "[tracker]\nmode = \"private\"\n[store]\nenabled = false\n",
                "tracker.mode",
            ),
            ("[tracker]\nmode = \"closed\"\n", "tracker.mode"),
            ("[private]\nschema = \"ocelot\"\n", "private.schema"),
            (
                "[private]\nnames = { \"users.pass\" = \"pk\" }\n",
                "private.names",
            ),
            (
                "[private]\nnames = { users = \"u; DROP TABLE x\" }\n",
                "private.names",
            ),
            (
                "[private]\nnames = { \"users.passkey\" = \"\" }\n",
                "private.names",
            ),
            (
                "[private]\nschema = \"xbt\"\nnames = { \"torrents.tor_type\" = \"t\" }\n",
                "private.names",
            ),
            ("[private]\npasskey_param = \"info_hash\"\n", "private.passkey_param"),
            ("[private]\npasskey_param = \"a&b\"\n", "private.passkey_param"),
            ("[private]\npoll_secs = 0\n", "private.poll_secs"),
            ("[private]\nport_deny = [\"10-1\"]\n", "private.port_deny[0]"),
            ("[private]\nport_deny = [\"70000\"]\n", "private.port_deny[0]"),
            ("[private]\npeer_id_deny = [\"\"]\n", "private.peer_id_deny"),
            (
                "[private]\nratio_tiers = { \"half\" = 1 }\n",
                "private.ratio_tiers",
            ),
            (
                "[private]\nratio_tiers = { \"-1\" = 1 }\n",
                "private.ratio_tiers",
            ),
            (
                "[private]\nratio_tiers = { \"0.5\" = 0 }\n",
                "private.ratio_tiers",
            ),
            ("[private]\nleech_slots = 70000\n", "private.leech_slots"),
        ];
        for (text, key) in cases {
            let err = Config::parse(text).unwrap_err().to_string();
            assert!(err.contains(&format!("`{key}`")), "{text}: {err}");
        }
    }

    #[test]
    fn private_names_fall_back_to_the_preset_and_ports_parse() {
        let c = Config::parse(
            "[tracker]\nmode = \"private\"\n[private]\nschema = \"torrentpier\"\n\
             names = { users = \"site.bb_bt_users\" }\nport_deny = [\"6881-6889\", \"25\"]\n",
        )
        .unwrap();
        assert_eq!(c.tracker.mode, TrackerMode::Private);
        assert_eq!(c.private.name("users"), Some("site.bb_bt_users"));
        assert_eq!(c.private.name("users.passkey"), Some("auth_key"));
        assert_eq!(c.private.name("users.can_leech"), None);
        assert_eq!(c.private.passkey_param(), "uk");
        let ports = &c.private.port_deny;
        assert!(ports[0].contains(6885) && !ports[0].contains(6890));
        assert!(ports[1].contains(25) && !ports[1].contains(26));
        // They print back as written.
        let again = Config::parse(&c.to_commented_toml()).unwrap();
        assert_eq!(again, c);
        let c = Config::parse("[private]\nnames = { \"users.can_leech\" = \"\" }\n").unwrap();
        assert_eq!(
            c.private.name("users.can_leech"),
            None,
            "a column the site lacks"
        );
        let c = Config::parse(
            "[private]\nleech_slots = 8\nratio_tiers = { \"0.6\" = 3, \"0.4\" = 1, \"0.5\" = 2 }\n",
        )
        .unwrap();
        assert_eq!(c.private.tiers(), [(0.4, 1), (0.5, 2), (0.6, 3)]);
        assert!(c.private.limits_leeching());
        assert_eq!(Config::parse(&c.to_commented_toml()).unwrap(), c);
        let c = Config::parse("[private]\nschema = \"xbt_files\"\n").unwrap();
        assert_eq!(c.private.name("torrents.id"), Some("fid"));
        assert_eq!(c.private.passkey_param(), "passkey");
    }

    #[test]
    fn values_override_defaults() {
        let c = Config::parse(
            "[server]\nworkers = 3\n[tracker]\ntrusted_proxies = [\"10.0.0.0/8\"]\nreal_ip_header = \"X-Forwarded-For\"\n",
        )
        .unwrap();
        assert_eq!(c.server.workers, 3);
        assert_eq!(c.tracker.trusted_proxies.len(), 1);
        assert_eq!(c.tracker.numwant_max, 200);
    }
}
