//! Checks of values that parse but make no sense, one function per section, each reporting
//! every problem it finds (the key's full name and what is allowed).

use crate::{
    AccessListMode, ClusterConfig, Config, ConfigError, ServerConfig, StatsdConfig, StoreConfig,
    TrackerConfig, TrackerMode,
};

/// The problems found so far.
#[derive(Default)]
pub(crate) struct Problems(pub(crate) Vec<ConfigError>);

impl Problems {
    fn bad(&mut self, key: &'static str, message: impl Into<String>) {
        self.0.push(ConfigError::Invalid {
            key,
            message: message.into(),
        });
    }

    /// `key`'s value must lie in `lo..=hi`.
    fn within<T: PartialOrd + std::fmt::Display>(&mut self, key: &'static str, v: T, lo: T, hi: T) {
        if v < lo || v > hi {
            self.bad(key, format!("must be between {lo} and {hi}"));
        }
    }
}

/// Whether `a` is `host:port` with a host and a port above 0.
fn host_port(a: &str) -> bool {
    a.rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|n| n > 0))
}

/// Every problem of `c`, section by section.
pub(crate) fn all(c: &Config) -> Vec<ConfigError> {
    let mut p = Problems::default();
    server(&c.server, &mut p);
    tracker(&c.tracker, &mut p);
    access_list(c, &mut p);
    private(c, &mut p);
    store(&c.store, &mut p);
    popups(c, &mut p);
    lua(c, &mut p);
    statsd(&c.statsd, &mut p);
    if let Err(e) = crate::check_log_level(&c.log.level) {
        p.bad("log.level", e);
    }
    listen(c, &mut p);
    cluster(c, &mut p);
    webtorrent(&c.webtorrent, &mut p);
    p.0
}

/// The largest exchange message a node may be set to publish (`cluster.max_message_bytes`):
/// Redis takes far larger, but a message is one allocation on every node that reads it.
pub const MAX_EXCHANGE_MESSAGE: usize = 1 << 20;

/// `[cluster]`.
fn cluster(c: &Config, p: &mut Problems) {
    let cl: &ClusterConfig = &c.cluster;
    if !cl.enabled {
        return;
    }
    if cl.node_id == 0 {
        p.bad("cluster.node_id", "must be between 1 and 255");
    }
    if cl.redis.is_empty() {
        p.bad(
            "cluster.redis",
            "needs at least one Redis Cluster node, host:port",
        );
    }
    for a in cl.redis.iter().filter(|a| !host_port(a)) {
        p.bad("cluster.redis", format!("{a:?} must be host:port"));
    }
    match (cl.secret.is_empty(), cl.secret_file.is_empty()) {
        (true, true) => p.bad(
            "cluster.secret_file",
            "cluster mode needs the shared secret: set cluster.secret_file (or cluster.secret)",
        ),
        (false, false) => p.bad(
            "cluster.secret",
            "set cluster.secret or cluster.secret_file, not both",
        ),
        (false, true) if cl.secret.trim().len() < 16 => {
            p.bad("cluster.secret", "must be at least 16 characters")
        }
        _ => {}
    }
    let prefix_ok = !cl.prefix.is_empty()
        && cl.prefix.len() <= 64
        && cl
            .prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
    if !prefix_ok {
        p.bad(
            "cluster.prefix",
            "must be 1-64 letters, digits, _, . and - (no braces: they pick Redis hash slots)",
        );
    }
    p.within("cluster.publish_ms", cl.publish_ms, 10, 10_000);
    p.within("cluster.groups", cl.groups, 1, 16_384);
    p.within(
        "cluster.max_pending_deltas",
        cl.max_pending_deltas,
        1,
        1 << 26,
    );
    p.within(
        "cluster.max_message_bytes",
        cl.max_message_bytes,
        1024,
        MAX_EXCHANGE_MESSAGE,
    );
    p.within(
        "cluster.max_inbound_messages",
        cl.max_inbound_messages,
        1,
        1 << 20,
    );
    p.within("cluster.snapshot_secs", cl.snapshot_secs, 5, 3600);
    p.within("cluster.redis_timeout_ms", cl.redis_timeout_ms, 100, 60_000);
    // Their state is not exchanged yet: each node would answer from its own.
    if c.tracker.mode == TrackerMode::Private {
        p.bad(
            "cluster.enabled",
            "not yet with tracker.mode = \"private\" (users' accounting is not shared between nodes)",
        );
    }
    if c.popups.enabled {
        p.bad(
            "cluster.enabled",
            "not yet with popups.enabled (its users' state is not shared between nodes)",
        );
    }
    if !c.lua.routes.is_empty() {
        p.bad(
            "cluster.enabled",
            "not yet with lua.routes (their shared state is not shared between nodes)",
        );
    }
}

/// `[server]`.
fn server(s: &ServerConfig, p: &mut Problems) {
    if s.workers > 1024 {
        p.bad("server.workers", "at most 1024 (0 = one per CPU)");
    }
    if s.backlog == 0 || s.backlog > 1 << 20 {
        p.bad("server.backlog", "must be between 1 and 1048576");
    }
    if s.max_connections_per_worker == 0 {
        p.bad("server.max_connections_per_worker", "must be at least 1");
    }
    if s.max_connections_per_48 < s.max_connections_per_ip {
        p.bad(
            "server.max_connections_per_48",
            "must be at least server.max_connections_per_ip",
        );
    }
    if s.max_connections_per_ip == 0 {
        p.bad("server.max_connections_per_ip", "must be at least 1");
    }
    if s.max_buffer_mb == 0 || s.max_buffer_mb > 1 << 20 {
        p.bad("server.max_buffer_mb", "must be between 1 and 1048576");
    }
    if s.idle_timeout_secs == 0 {
        p.bad("server.idle_timeout_secs", "must be at least 1");
    }
    if s.header_timeout_secs == 0 {
        p.bad("server.header_timeout_secs", "must be at least 1");
    }
    if !(256..=1 << 20).contains(&s.max_header_bytes) {
        p.bad("server.max_header_bytes", "must be between 256 and 1048576");
    }
    if !(4..=256).contains(&s.max_headers) {
        p.bad("server.max_headers", "must be between 4 and 256");
    }
    if s.max_url_bytes < 64 || s.max_url_bytes > s.max_header_bytes {
        p.bad(
            "server.max_url_bytes",
            "must be at least 64 and at most server.max_header_bytes",
        );
    }
    if s.background_nice > 19 {
        p.bad("server.background_nice", "must be between 0 and 19");
    }
    if s.max_body_bytes > 64 << 20 {
        p.bad("server.max_body_bytes", "at most 67108864");
    }
    if s.max_output_bytes < 4096 {
        p.bad("server.max_output_bytes", "must be at least 4096");
    }
    if !(1..=1024).contains(&s.udp_batch) {
        p.bad("server.udp_batch", "must be between 1 and 1024");
    }
}

/// `[tracker]`.
fn tracker(t: &TrackerConfig, p: &mut Problems) {
    if t.interval_secs == 0 {
        p.bad("tracker.interval_secs", "must be at least 1");
    }
    if t.min_interval_secs > t.interval_secs {
        p.bad(
            "tracker.min_interval_secs",
            "must not exceed tracker.interval_secs",
        );
    }
    if t.interval_jitter_percent > 50 {
        p.bad("tracker.interval_jitter_percent", "at most 50");
    }
    for (key, v) in [
        ("tracker.max_torrents", t.max_torrents),
        ("tracker.max_peers", t.max_peers),
        ("tracker.max_peers_per_torrent", t.max_peers_per_torrent),
        ("tracker.max_peers_per_ip", t.max_peers_per_ip),
        ("tracker.max_peers_per_ip_48", t.max_peers_per_ip_48),
        (
            "tracker.max_torrents_per_address",
            t.max_torrents_per_address,
        ),
        ("tracker.max_torrents_per_48", t.max_torrents_per_48),
        ("tracker.max_peers_per_address", t.max_peers_per_address),
        ("tracker.max_peers_per_48", t.max_peers_per_48),
        ("tracker.max_idle_torrents", t.max_idle_torrents),
    ] {
        if v == 0 {
            p.bad(key, "must be at least 1 (every cap is finite)");
        }
    }
    if t.numwant_max > 10_000 {
        p.bad("tracker.numwant_max", "at most 10000");
    }
    if t.numwant_default > t.numwant_max {
        p.bad(
            "tracker.numwant_default",
            "must not exceed tracker.numwant_max",
        );
    }
    // Peer ages are kept as 16-bit seconds; a timeout of 12 h leaves room for wrap-around.
    if t.peer_timeout_secs <= t.interval_secs || t.peer_timeout_secs > 43_200 {
        p.bad(
            "tracker.peer_timeout_secs",
            "must exceed tracker.interval_secs and be at most 43200 (12 h)",
        );
    }
    if t.sweep_interval_secs == 0 || t.sweep_interval_secs > 3600 {
        p.bad("tracker.sweep_interval_secs", "must be between 1 and 3600");
    }
    if !t.shards.is_power_of_two() || t.shards > 65536 {
        p.bad("tracker.shards", "must be a power of two, at most 65536");
    }
    if t.max_scrape_hashes == 0 || t.max_scrape_hashes > 10_000 {
        p.bad("tracker.max_scrape_hashes", "must be between 1 and 10000");
    }
    if !t.real_ip_header.is_empty() {
        let valid = t
            .real_ip_header
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !valid {
            p.bad(
                "tracker.real_ip_header",
                "must be a header name like X-Forwarded-For",
            );
        }
        if t.trusted_proxies.is_empty() {
            p.bad(
                "tracker.trusted_proxies",
                "must name the proxy networks when tracker.real_ip_header is set",
            );
        }
    }
    if !(1..=36_500).contains(&t.forget_torrents_after_days) {
        p.bad("tracker.forget_torrents_after_days", "must be 1 to 36500");
    }
    if t.snapshot_interval_secs == 0 {
        p.bad("tracker.snapshot_interval_secs", "must be at least 1");
    }
}

/// `[access_list]`, and the store it may need.
fn access_list(c: &Config, p: &mut Problems) {
    let al = &c.access_list;
    if al.mode != AccessListMode::Off && al.path.is_empty() && !al.database {
        p.bad(
            "access_list.path",
            "must name a file when access_list.mode is not off (or set access_list.database)",
        );
    }
    if al.database && !c.store.enabled {
        p.bad(
            "access_list.database",
            "needs the store (store.enabled = true)",
        );
    }
    if al.reload_secs == 0 {
        p.bad("access_list.reload_secs", "must be at least 1");
    }
}

/// A table or column name: letters, digits and `_`, not starting with a digit, with at most
/// one `.` (a schema-qualified table). Nothing else reaches SQL text from the config.
pub(crate) fn is_sql_name(s: &str) -> bool {
    let part = |p: &str| {
        !p.is_empty()
            && p.len() <= 64
            && !p.starts_with(|c: char| c.is_ascii_digit())
            && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    };
    match s.split_once('.') {
        Some((a, b)) => part(a) && part(b),
        None => part(s),
    }
}

/// `[private]`, and what private mode needs.
fn private(c: &Config, p: &mut Problems) {
    let pr = &c.private;
    if c.tracker.mode == TrackerMode::Private && !c.store.enabled {
        p.bad(
            "tracker.mode",
            "private mode reads users and torrents from the database: it needs the store \
             (store.enabled = true)",
        );
    }
    let known = pr.schema.names();
    for (key, name) in &pr.names {
        if !known.iter().any(|(k, _)| k == key) {
            let list: Vec<&str> = known.iter().map(|(k, _)| *k).collect();
            p.bad(
                "private.names",
                format!(
                    "{key:?} is not a name of the {:?} schema (it has {})",
                    pr.schema,
                    list.join(", ")
                ),
            );
        } else if name.is_empty() && !pr.schema.optional(key) {
            p.bad(
                "private.names",
                format!("{key} may not be empty: the tracker cannot work without it"),
            );
        } else if !name.is_empty() && !is_sql_name(name) {
            p.bad(
                "private.names",
                format!(
                    "{key} = {name:?}: a name is letters, digits and _ (not first), \
                     with at most one . between two such parts"
                ),
            );
        }
    }
    let param = &pr.passkey_param;
    const ANNOUNCE_PARAMS: [&str; 12] = [
        "info_hash",
        "peer_id",
        "port",
        "uploaded",
        "downloaded",
        "left",
        "event",
        "compact",
        "numwant",
        "ip",
        "ipv6",
        "key",
    ];
    if !param.is_empty()
        && (param.len() > 32
            || !param
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            || ANNOUNCE_PARAMS.contains(&param.as_str()))
    {
        p.bad(
            "private.passkey_param",
            "must be up to 32 letters, digits, _ or -, and not an announce parameter",
        );
    }
    if !(1..=86_400).contains(&pr.poll_secs) {
        p.bad("private.poll_secs", "must be between 1 and 86400");
    }
    if pr.max_users == 0 {
        p.bad("private.max_users", "must be at least 1");
    }
    if pr.max_torrents == 0 {
        p.bad("private.max_torrents", "must be at least 1");
    }
    if pr.max_peers_per_user_torrent == 0 {
        p.bad("private.max_peers_per_user_torrent", "must be at least 1");
    }
    if pr.max_rate_bytes_per_sec == 0 {
        p.bad("private.max_rate_bytes_per_sec", "must be at least 1");
    }
    if pr.max_credit_per_announce_bytes == 0 {
        p.bad(
            "private.max_credit_per_announce_bytes",
            "must be at least 1",
        );
    }
    if !pr.admin_token.is_empty() && pr.admin_token.len() < 16 {
        p.bad(
            "private.admin_token",
            "must be at least 16 characters (or empty)",
        );
    }
    let path_safe = |b: u8| b.is_ascii_alphanumeric() || b"-._~".contains(&b);
    for (key, secret, schemas, needs) in [
        (
            "private.site_secret",
            &pr.site_secret,
            &[crate::PrivateSchema::Gazelle, crate::PrivateSchema::Unit3d][..],
            "the site's own API serves Gazelle's or UNIT3D's tables: set private.schema = \
             \"gazelle\" or \"unit3d\"",
        ),
        (
            "private.report_secret",
            &pr.report_secret,
            &[crate::PrivateSchema::Gazelle][..],
            "Ocelot's report API serves Gazelle's tracker pages: set private.schema = \
             \"gazelle\"",
        ),
    ] {
        if secret.is_empty() {
            continue;
        }
        if secret.len() < 16 || secret.len() > 128 || !secret.bytes().all(path_safe) {
            p.bad(
                key,
                "must be 16 to 128 letters, digits, '-', '.', '_' or '~', as the site's secret \
                 (or empty)",
            );
        }
        if !schemas.contains(&pr.schema) {
            p.bad(key, needs);
        }
        if *secret == pr.admin_token {
            p.bad(
                key,
                "must differ from private.admin_token: each guards its own API",
            );
        }
    }
    for (below, slots) in &pr.ratio_tiers {
        match below.parse::<f64>() {
            Ok(r) if r > 0.0 && r <= 1000.0 => {}
            _ => p.bad(
                "private.ratio_tiers",
                format!("{below:?}: each key is a ratio above 0 and at most 1000, e.g. \"0.5\""),
            ),
        }
        if !(1..=65_535).contains(slots) {
            p.bad(
                "private.ratio_tiers",
                format!("{below:?} = {slots}: slots must be between 1 and 65535"),
            );
        }
    }
    if pr.leech_slots > 65_535 {
        p.bad("private.leech_slots", "must be at most 65535 (0: no limit)");
    }
    for (key, list) in [
        ("private.peer_id_allow", &pr.peer_id_allow),
        ("private.peer_id_deny", &pr.peer_id_deny),
    ] {
        if list.iter().any(|s| s.is_empty() || s.len() > 20) {
            p.bad(key, "every prefix must be 1 to 20 bytes");
        }
    }
}

/// `[store]`.
fn store(st: &StoreConfig, p: &mut Problems) {
    if st.enabled && st.data_dir.is_empty() {
        p.bad(
            "store.data_dir",
            "must name a directory when the store is enabled",
        );
    }
    const SCHEMES: [&str; 4] = ["sqlite://", "postgres://", "postgresql://", "mysql://"];
    if !st.url.is_empty() && !SCHEMES.iter().any(|p| st.url.starts_with(p)) {
        p.bad(
            "store.url",
            "must start with sqlite://, postgres://, postgresql:// or mysql:// (or be empty for data_dir/hotpath.db)",
        );
    }
    if !(10..=600_000).contains(&st.flush_interval_ms) {
        p.bad("store.flush_interval_ms", "must be between 10 and 600000");
    }
    if st.batch_rows > 1_000_000 {
        p.bad(
            "store.batch_rows",
            "must be at most 1000000 (0 picks by database)",
        );
    }
    if st.max_queue_rows < 2 * st.batch_rows() {
        p.bad(
            "store.max_queue_rows",
            format!(
                "must be at least twice store.batch_rows ({} here)",
                st.batch_rows()
            ),
        );
    }
    if st.journal_segment_bytes < 1 << 16 {
        p.bad("store.journal_segment_bytes", "must be at least 65536");
    }
    if st.journal_max_bytes < 2 * st.journal_segment_bytes {
        p.bad(
            "store.journal_max_bytes",
            "must be at least twice store.journal_segment_bytes",
        );
    }
    if st.retry_max_ms < 100 {
        p.bad("store.retry_max_ms", "must be at least 100");
    }
}

/// `[popups]`, and the store and listener they need.
fn popups(c: &Config, p: &mut Problems) {
    let po = &c.popups;
    if po.enabled && !c.store.enabled {
        p.bad("popups.enabled", "needs the store (store.enabled = true)");
    }
    if po.enabled && c.listen.http.is_empty() {
        p.bad("popups.enabled", "needs an HTTP listener (listen.http)");
    }
    if !po.admin_token.is_empty() && po.admin_token.len() < 16 {
        p.bad(
            "popups.admin_token",
            "must be at least 16 characters (or empty)",
        );
    }
    if !po.token_secret.is_empty() && po.token_secret.len() < 16 {
        p.bad(
            "popups.token_secret",
            "must be at least 16 characters (or empty)",
        );
    }
    if po.token_ttl_secs < 60 {
        p.bad("popups.token_ttl_secs", "must be at least 60");
    }
    if !(100..=600_000).contains(&po.reload_ms) {
        p.bad("popups.reload_ms", "must be between 100 and 600000");
    }
    for (key, days) in [
        (
            "popups.forget_idle_users_after_days",
            po.forget_idle_users_after_days,
        ),
        ("popups.keep_events_days", po.keep_events_days),
    ] {
        if !(1..=36_500).contains(&days) {
            p.bad(key, "must be 1 to 36500");
        }
    }
    if po.max_users < 1000 {
        p.bad("popups.max_users", "must be at least 1000");
    }
    if po.max_loading == 0 {
        p.bad("popups.max_loading", "must be at least 1");
    }
    if !(1..=4096).contains(&po.load_batch) {
        p.bad("popups.load_batch", "must be between 1 and 4096");
    }
}

/// `[lua]` and its routes.
fn lua(c: &Config, p: &mut Problems) {
    let l = &c.lua;
    if !l.routes.is_empty() && c.listen.http.is_empty() {
        p.bad("lua.routes", "needs an HTTP listener (listen.http)");
    }
    let mut seen = std::collections::HashSet::new();
    for (i, r) in l.routes.iter().enumerate() {
        let what = |m: &str| format!("route {} ({}): {m}", i + 1, r.path);
        if !r.path.starts_with('/') || r.path.contains(['?', '#', ' ']) {
            p.bad(
                "lua.routes",
                what("path must start with / and hold no ?, # or space"),
            );
        }
        if r.script.is_empty() {
            p.bad("lua.routes", what("script is empty"));
        }
        if let Some(m) = r
            .methods
            .iter()
            .find(|m| m.is_empty() || !m.bytes().all(|b| b.is_ascii_uppercase()))
        {
            p.bad(
                "lua.routes",
                what(&format!("method {m:?} is not an upper-case method name")),
            );
        }
        if !seen.insert((r.path.as_str(), r.prefix)) {
            p.bad("lua.routes", what("the same path is routed twice"));
        }
    }
    if l.max_instructions < 1000 {
        p.bad("lua.max_instructions", "must be at least 1000");
    }
    if !(1..=60_000).contains(&l.max_ms) {
        p.bad("lua.max_ms", "must be between 1 and 60000");
    }
    if !(1..=65_536).contains(&l.max_memory_mb) {
        p.bad("lua.max_memory_mb", "must be between 1 and 65536");
    }
    if l.shared_max_keys == 0 {
        p.bad("lua.shared_max_keys", "must be at least 1");
    }
    if !(1..=65_536).contains(&l.shared_max_mb) {
        p.bad("lua.shared_max_mb", "must be between 1 and 65536");
    }
    if l.udp_max_sockets > 65_536 {
        p.bad("lua.udp_max_sockets", "must be at most 65536");
    }
    if l.udp_idle_secs == 0 {
        p.bad("lua.udp_idle_secs", "must be at least 1");
    }
    if !(1..=60_000).contains(&l.tcp_timeout_ms) {
        p.bad("lua.tcp_timeout_ms", "must be between 1 and 60000");
    }
    if l.tcp_idle_secs == 0 {
        p.bad("lua.tcp_idle_secs", "must be at least 1");
    }
    if l.tcp_max_waiting == 0 {
        p.bad("lua.tcp_max_waiting", "must be at least 1");
    }
}

/// `[statsd]`.
fn statsd(sd: &StatsdConfig, p: &mut Problems) {
    if sd.enabled && !host_port(&sd.address) {
        p.bad("statsd.address", "must be host:port");
    }
    if !(100..=3_600_000).contains(&sd.interval_ms) {
        p.bad("statsd.interval_ms", "must be between 100 and 3600000");
    }
    if sd.prefix.is_empty()
        || !sd
            .prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
    {
        p.bad("statsd.prefix", "must be letters, digits, _, . and - only");
    }
    if !(512..=65_000).contains(&sd.max_packet_bytes) {
        p.bad("statsd.max_packet_bytes", "must be between 512 and 65000");
    }
}

/// `[listen]`: something to serve on.
fn listen(c: &Config, p: &mut Problems) {
    let l = &c.listen;
    if l.http.is_empty() && l.https.is_empty() && l.udp.is_empty() {
        p.bad(
            "listen",
            "at least one of listen.http, listen.https and listen.udp is needed",
        );
    }
    // The admin APIs are served on the admin listener only: a secret set for one of them
    // with no admin listener guards nothing that can be reached.
    if l.admin.is_empty() {
        for (key, secret) in [
            ("popups.admin_token", &c.popups.admin_token),
            ("private.admin_token", &c.private.admin_token),
            ("private.site_secret", &c.private.site_secret),
            ("private.report_secret", &c.private.report_secret),
        ] {
            if !secret.is_empty() {
                p.bad(
                    key,
                    "its API is served on the admin listener, and listen.admin is empty",
                );
            }
        }
    }
    // Every listener binds with SO_REUSEPORT, so two that overlap both bind, and the kernel
    // splits connections between them at random: an admin listener on a public port would
    // answer /metrics, or the push API, to the world one time in two. HTTP and admin share
    // TCP; UDP has its own ports.
    let tcp = named(
        &[
            ("listen.http", &l.http),
            ("listen.https", &l.https),
            ("listen.admin", &l.admin),
        ],
        l.ipv6,
    );
    if !l.https.is_empty() {
        for (key, file) in [
            ("tls.cert_file", &c.tls.cert_file),
            ("tls.key_file", &c.tls.key_file),
        ] {
            if file.is_empty() {
                p.bad(
                    key,
                    "listen.https needs a certificate and its key: set this file",
                );
            }
        }
    }
    let udp = named(&[("listen.udp", &l.udp)], l.ipv6);
    for sockets in [tcp, udp] {
        for (j, (key, b)) in sockets.iter().enumerate() {
            if let Some((other, a)) = sockets[..j].iter().find(|(_, a)| overlap(a, b)) {
                let implied = if l.ipv6 && b.ip().is_unspecified() && b.is_ipv6() {
                    " (listen.ipv6 adds [::] beside 0.0.0.0)"
                } else {
                    ""
                };
                p.bad(
                    key,
                    format!(
                        "{b} overlaps {a} of {other}{implied}: both would bind (SO_REUSEPORT) \
                         and split the connections between them; give each its own port"
                    ),
                );
            }
        }
    }
}

/// The sockets listed under each key, with the `[::]` that `listen.ipv6` adds at the port of
/// each `0.0.0.0` of the public listeners (the admin listener gets none).
fn named(
    lists: &[(&'static str, &Vec<std::net::SocketAddr>)],
    ipv6: bool,
) -> Vec<(&'static str, std::net::SocketAddr)> {
    let mut out = Vec::new();
    for &(key, addrs) in lists {
        out.extend(addrs.iter().map(|a| (key, *a)));
        if ipv6 && key != "listen.admin" {
            let wild = std::net::Ipv6Addr::UNSPECIFIED;
            out.extend(
                addrs
                    .iter()
                    .filter(|a| a.is_ipv4() && a.ip().is_unspecified())
                    .map(|a| std::net::SocketAddr::from((wild, a.port())))
                    .filter(|v6| !addrs.contains(v6))
                    .map(|v6| (key, v6)),
            );
        }
    }
    out
}

/// Whether two sockets of one transport take the same connections: the same port (0 lets the
/// kernel pick one, so never), one address family (IPv6 sockets are IPv6-only), and the same
/// address or either the wildcard.
fn overlap(a: &std::net::SocketAddr, b: &std::net::SocketAddr) -> bool {
    a.port() != 0
        && a.port() == b.port()
        && a.is_ipv4() == b.is_ipv4()
        && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

/// `[webtorrent]`.
fn webtorrent(w: &crate::WebTorrentConfig, p: &mut Problems) {
    p.within(
        "webtorrent.max_message_bytes",
        w.max_message_bytes,
        1024,
        16 << 20,
    );
    p.within(
        "webtorrent.max_frame_bytes",
        w.max_frame_bytes,
        1024,
        16 << 20,
    );
    p.within(
        "webtorrent.max_offers_per_announce",
        w.max_offers_per_announce,
        0,
        100,
    );
    p.within("webtorrent.max_sdp_bytes", w.max_sdp_bytes, 256, 1 << 20);
    p.within(
        "webtorrent.offer_lifetime_secs",
        w.offer_lifetime_secs,
        1,
        3600,
    );
    p.within(
        "webtorrent.max_pending_offers_per_peer",
        w.max_pending_offers_per_peer,
        1,
        10_000,
    );
    p.within(
        "webtorrent.max_output_bytes",
        w.max_output_bytes,
        4096,
        64 << 20,
    );
    p.within(
        "webtorrent.idle_timeout_secs",
        w.idle_timeout_secs,
        2,
        86_400,
    );
    p.within("webtorrent.send_timeout_secs", w.send_timeout_secs, 1, 3600);
    p.within(
        "webtorrent.max_peers_per_swarm",
        w.max_peers_per_swarm,
        1,
        1_000_000,
    );
    p.within("webtorrent.max_swarms", w.max_swarms, 1, 100_000_000);
    p.within(
        "webtorrent.max_swarms_per_connection",
        w.max_swarms_per_connection,
        1,
        65_536,
    );
    p.within("webtorrent.interval_secs", w.interval_secs, 10, 86_400);
    if w.max_message_bytes > 0 && w.max_sdp_bytes > w.max_message_bytes {
        p.bad(
            "webtorrent.max_sdp_bytes",
            "must not exceed webtorrent.max_message_bytes",
        );
    }
}
