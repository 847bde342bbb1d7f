//! What to run: the command line and an optional scenario file resolved into one [`Plan`].
//! Every flag is defined once here, with its help; a scenario file uses the same names, and a
//! flag given on the command line wins over the file.

use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::slo::{self, Slo};
use crate::template::{Template, VarSpec, Vars};
use crate::units::{parse_count, parse_duration};

/// `hotpath bench` command line.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct Args {
    /// Target: http://HOST[:PORT]/PATH?QUERY (templates allowed: {var}), or udp://HOST:PORT for
    /// the BEP 15 tracker mix. May come from --scenario instead.
    pub url: Option<String>,
    /// Connections (HTTP) or sockets (UDP), spread over the threads [default: 50 HTTP, 4 UDP].
    #[arg(short, long)]
    pub connections: Option<usize>,
    /// How long to measure, after the warm-up: 10s, 500ms, 2m [default: 10s].
    #[arg(short, long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Load applied before measuring, left out of every figure [default: 1s].
    #[arg(short, long, value_parser = parse_duration)]
    pub warmup: Option<Duration>,
    /// Open model: send this many requests per second in all, on schedule, and measure latency
    /// from the intended send time (coordinated omission corrected). Without it: closed loop,
    /// each connection sends its next request when the answer to the last one arrives.
    #[arg(short = 'R', long, value_parser = parse_count)]
    pub rate: Option<f64>,
    /// Load threads (each runs its own event loop) [default: 1].
    #[arg(short, long)]
    pub threads: Option<usize>,
    /// A request not answered within this long counts as a timeout error [default: 2s].
    #[arg(long, value_parser = parse_duration)]
    pub timeout: Option<Duration>,
    /// Open a new connection for every request (sends Connection: close).
    #[arg(long)]
    pub no_keepalive: bool,
    /// HTTP method [default: GET].
    #[arg(short, long)]
    pub method: Option<String>,
    /// Request body (a template; Content-Length is set).
    #[arg(short, long)]
    pub body: Option<String>,
    /// An extra header, `Name: value` (a template); may be repeated.
    #[arg(short = 'H', long = "header")]
    pub headers: Vec<String>,
    /// A template variable, NAME=KIND: range:LO-HI, list:a,b,c, random20 (20 random bytes,
    /// percent-encoded), zipf:S:POOL[:int] (a skewed pick from a pool); may be repeated.
    #[arg(long = "var")]
    pub vars: Vec<String>,
    /// UDP: requests in flight per socket in the closed loop [default: 32].
    #[arg(long)]
    pub window: Option<usize>,
    /// UDP: weights of connect:announce:scrape requests [default: 50:50:1].
    #[arg(long)]
    pub mix: Option<String>,
    /// UDP: torrents in the population, picked with a Zipf skew [default: 1000000].
    #[arg(long)]
    pub torrents: Option<u64>,
    /// UDP: peers in the population [default: 2000000].
    #[arg(long)]
    pub peers: Option<u64>,
    /// A scenario file (TOML) with any of these settings and more (several request kinds
    /// with weights, variables, the UDP population); flags given here win.
    #[arg(long)]
    pub scenario: Option<PathBuf>,
    /// Objectives, e.g. p99=2ms,errors=0,rate>=100000; a missed one exits with status 2.
    #[arg(long)]
    pub slo: Option<String>,
    /// The run fails (exit status 3) when more than this percent of outcomes are errors; a
    /// run in which no request was answered without error always fails [default: 1].
    #[arg(long, value_name = "PERCENT")]
    pub max_errors: Option<f64>,
    /// Print the report as JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Also write a self-contained HTML report with plots to this file.
    #[arg(long)]
    pub html: Option<PathBuf>,
    /// Seed of the random choices, so a load can be replayed [default: 1].
    #[arg(long)]
    pub seed: Option<u64>,
}

/// One kind of HTTP request in a scenario file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestSpec {
    /// HTTP method.
    #[serde(default = "default_method")]
    pub method: String,
    /// Path and query (a template); the URL's when absent.
    pub path: Option<String>,
    /// Extra headers (values are templates).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Body (a template).
    pub body: Option<String>,
    /// Relative weight among the request kinds.
    #[serde(default = "one")]
    pub weight: u32,
}

fn default_method() -> String {
    "GET".into()
}
fn one() -> u32 {
    1
}

/// The UDP tracker population and mix in a scenario file.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UdpSpec {
    /// Torrents in the population.
    pub torrents: u64,
    /// Zipf exponent of the torrent pick (hot torrents).
    pub zipf: f64,
    /// Peers in the population.
    pub peers: u64,
    /// Share of announces from seeders (left = 0).
    pub seeders: f64,
    /// numwant of each announce.
    pub numwant: i32,
    /// Most info hashes in one scrape (1..=this, uniformly).
    pub scrape_max: usize,
    /// Weight of connect requests.
    pub connect: u32,
    /// Weight of announce requests.
    pub announce: u32,
    /// Weight of scrape requests.
    pub scrape: u32,
    /// Requests in flight per socket (closed loop).
    pub window: usize,
    /// Bind each socket to its own 127.x.y.z source address when the target is loopback,
    /// so the server sees many clients.
    pub many_ips: bool,
}

impl Default for UdpSpec {
    fn default() -> Self {
        Self {
            torrents: 1_000_000,
            zipf: 1.0,
            peers: 2_000_000,
            seeders: 0.75,
            numwant: 30,
            scrape_max: 10,
            connect: 50,
            announce: 50,
            scrape: 1,
            window: 32,
            many_ips: true,
        }
    }
}

/// A scenario file: the command line's settings plus richer ones. A `[compare]` table (read by
/// bench/compare: which servers to start) and `name`/`description` are allowed and ignored.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// A short name.
    pub name: Option<String>,
    /// What the scenario shows.
    pub description: Option<String>,
    /// Target URL.
    pub url: Option<String>,
    /// Connections or sockets.
    pub connections: Option<usize>,
    /// Threads.
    pub threads: Option<usize>,
    /// Measured period.
    pub duration: Option<String>,
    /// Warm-up.
    pub warmup: Option<String>,
    /// Open-model rate (requests/s); 0 or absent: closed loop.
    pub rate: Option<f64>,
    /// Request timeout.
    pub timeout: Option<String>,
    /// Keep connections open between requests.
    pub keepalive: Option<bool>,
    /// Objectives.
    pub slo: Option<String>,
    /// Percent of outcomes that may be errors before the run fails (`--max-errors`).
    pub max_errors: Option<f64>,
    /// Random seed.
    pub seed: Option<u64>,
    /// Template variables.
    #[serde(default)]
    pub vars: BTreeMap<String, VarSpec>,
    /// HTTP request kinds.
    #[serde(default)]
    pub request: Vec<RequestSpec>,
    /// UDP tracker population and mix.
    pub udp: Option<UdpSpec>,
    /// For bench/compare.
    pub compare: Option<toml::Value>,
}

impl Scenario {
    /// Reads a scenario file; errors name the file and the key.
    pub fn load(path: &std::path::Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read scenario {}: {e}", path.display()))?;
        toml::from_str(&text).map_err(|e| format!("scenario {}: {e}", path.display()))
    }
}

/// A resolved HTTP request kind.
#[derive(Debug, Clone)]
pub struct HttpRequest {
    /// Method, as sent.
    pub method: String,
    /// Path and query.
    pub path: Template,
    /// Header lines (`Name: value`, filled).
    pub headers: Vec<(String, Template)>,
    /// Body.
    pub body: Option<Template>,
    /// Relative weight.
    pub weight: u32,
}

/// What is sent.
#[derive(Debug, Clone)]
pub enum Target {
    /// HTTP/1.1.
    Http {
        /// Server address.
        addr: SocketAddr,
        /// Host header value.
        host: String,
        /// Reuse connections.
        keepalive: bool,
        /// Request kinds.
        requests: Vec<HttpRequest>,
        /// Variables the templates use.
        vars: Vars,
    },
    /// BEP 15 UDP tracker mix.
    Udp {
        /// Server address.
        addr: SocketAddr,
        /// Population and mix.
        spec: UdpSpec,
    },
}

/// A resolved run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The URL as given.
    pub url: String,
    /// What to send.
    pub target: Target,
    /// Connections or sockets.
    pub connections: usize,
    /// Threads.
    pub threads: usize,
    /// Measured period.
    pub duration: Duration,
    /// Warm-up.
    pub warmup: Duration,
    /// Open-model rate, requests/s.
    pub rate: Option<f64>,
    /// Request timeout.
    pub timeout: Duration,
    /// Objectives.
    pub slos: Vec<Slo>,
    /// Percent of outcomes that may be errors before the run fails.
    pub max_error_pct: f64,
    /// Random seed.
    pub seed: u64,
    /// Scenario name, when one was used.
    pub scenario: Option<String>,
}

fn opt_duration(
    v: Option<Duration>,
    s: &Option<String>,
    key: &str,
) -> Result<Option<Duration>, String> {
    match (v, s) {
        (Some(d), _) => Ok(Some(d)),
        (None, Some(s)) => parse_duration(s)
            .map(Some)
            .map_err(|e| format!("{key}: {e}")),
        (None, None) => Ok(None),
    }
}

/// Splits `http://host:port/path` or `udp://host:port` into (scheme, host:port, path).
fn split_url(url: &str) -> Result<(&str, &str, &str), String> {
    let (scheme, rest) = url.split_once("://").ok_or_else(|| {
        format!("url `{url}`: expected http://HOST[:PORT]/PATH or udp://HOST:PORT")
    })?;
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, "/"),
    };
    if authority.is_empty() {
        return Err(format!("url `{url}`: no host"));
    }
    Ok((scheme, authority, path))
}

fn resolve(authority: &str, default_port: Option<u16>, url: &str) -> Result<SocketAddr, String> {
    let has_port = authority.rsplit_once(':').is_some_and(|(h, p)| {
        !p.is_empty()
            && p.bytes().all(|b| b.is_ascii_digit())
            && (!h.contains(':') || h.ends_with(']'))
    });
    let with_port = match (has_port, default_port) {
        (true, _) => authority.to_owned(),
        (false, Some(p)) => format!("{authority}:{p}"),
        (false, None) => return Err(format!("url `{url}`: a port is needed")),
    };
    with_port
        .to_socket_addrs()
        .map_err(|e| format!("url `{url}`: cannot resolve {with_port}: {e}"))?
        .next()
        .ok_or_else(|| format!("url `{url}`: {with_port} resolves to nothing"))
}

fn parse_mix(s: &str, spec: &mut UdpSpec) -> Result<(), String> {
    let w: Vec<u32> = s
        .split(':')
        .map(|p| {
            p.trim()
                .parse()
                .map_err(|_| format!("--mix `{s}`: expected CONNECT:ANNOUNCE:SCRAPE weights"))
        })
        .collect::<Result<_, _>>()?;
    let [c, a, sc] = w[..] else {
        return Err(format!(
            "--mix `{s}`: expected three weights, CONNECT:ANNOUNCE:SCRAPE"
        ));
    };
    (spec.connect, spec.announce, spec.scrape) = (c, a, sc);
    Ok(())
}

/// The HTTP target: variables, request kinds (the file's, or one from the command line), templates.
fn http_target(
    args: &Args,
    file: &Scenario,
    url: &str,
    authority: &str,
    path: &str,
    seed: u64,
) -> Result<Target, String> {
    let addr = resolve(authority, Some(80), url)?;
    let mut specs = file.vars.clone();
    for v in &args.vars {
        let (name, kind) = v
            .split_once('=')
            .ok_or_else(|| format!("--var `{v}`: expected NAME=KIND"))?;
        specs.insert(
            name.to_owned(),
            VarSpec::parse_cli(kind).map_err(|e| format!("--var {name}: {e}"))?,
        );
    }
    let vars = Vars::new(&specs, seed)?;
    let mut kinds = file.request.clone();
    if kinds.is_empty()
        || args.method.is_some()
        || args.body.is_some()
        || !args.headers.is_empty()
        || args.url.is_some()
    {
        // The command line describes one request kind (on top of the file's vars).
        let mut headers = BTreeMap::new();
        for h in &args.headers {
            let (n, v) = h
                .split_once(':')
                .ok_or_else(|| format!("--header `{h}`: expected `Name: value`"))?;
            headers.insert(n.trim().to_owned(), v.trim().to_owned());
        }
        let base = kinds.first().cloned();
        kinds = vec![RequestSpec {
            method: args
                .method
                .clone()
                .or(base.as_ref().map(|b| b.method.clone()))
                .unwrap_or_else(default_method),
            path: Some(path.to_owned()),
            headers: if headers.is_empty() {
                base.as_ref().map(|b| b.headers.clone()).unwrap_or_default()
            } else {
                headers
            },
            body: args.body.clone().or(base.and_then(|b| b.body)),
            weight: 1,
        }];
    }
    let mut requests = Vec::new();
    for (i, k) in kinds.iter().enumerate() {
        let what = format!("request[{i}]");
        if k.method.is_empty() || !k.method.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err(format!(
                "{what}.method: `{}` is not an HTTP method",
                k.method
            ));
        }
        let p = k.path.as_deref().unwrap_or(path);
        if !p.starts_with('/') {
            return Err(format!("{what}.path: `{p}` must start with /"));
        }
        let mut headers = Vec::new();
        for (n, v) in &k.headers {
            if n.is_empty() || n.bytes().any(|b| !(b.is_ascii_alphanumeric() || b == b'-')) {
                return Err(format!("{what}.headers: `{n}` is not a header name"));
            }
            headers.push((
                n.clone(),
                Template::parse(v, &vars, &format!("{what}.headers.{n}"))?,
            ));
        }
        requests.push(HttpRequest {
            method: k.method.clone(),
            path: Template::parse(p, &vars, &format!("{what}.path"))?,
            headers,
            body: k
                .body
                .as_deref()
                .map(|b| Template::parse(b, &vars, &format!("{what}.body")))
                .transpose()?,
            weight: k.weight,
        });
    }
    if requests.iter().all(|r| r.weight == 0) {
        return Err("request: every weight is 0".into());
    }
    Ok(Target::Http {
        addr,
        host: authority.to_owned(),
        keepalive: !args.no_keepalive && file.keepalive.unwrap_or(true),
        requests,
        vars,
    })
}

/// The UDP target: the file's population and mix with the command line's overrides, checked.
fn udp_target(args: &Args, file: &Scenario, url: &str, authority: &str) -> Result<Target, String> {
    let addr = resolve(authority, None, url)?;
    let mut spec = file.udp.clone().unwrap_or_default();
    if let Some(m) = &args.mix {
        parse_mix(m, &mut spec)?;
    }
    spec.window = args.window.unwrap_or(spec.window);
    spec.torrents = args.torrents.unwrap_or(spec.torrents);
    spec.peers = args.peers.unwrap_or(spec.peers);
    if spec.connect + spec.announce + spec.scrape == 0 {
        return Err("udp: connect, announce and scrape weights are all 0".into());
    }
    if spec.connect == 0 {
        return Err("udp.connect: must be above 0 (announces need a connection id)".into());
    }
    if spec.window == 0 || spec.window > 4096 {
        return Err("udp.window: must be between 1 and 4096".into());
    }
    if spec.torrents == 0 || spec.peers == 0 {
        return Err("udp.torrents and udp.peers must be at least 1".into());
    }
    if !(0.0..=1.0).contains(&spec.seeders) {
        return Err("udp.seeders: a share between 0 and 1".into());
    }
    if spec.scrape_max == 0 || spec.scrape_max > 74 {
        return Err("udp.scrape_max: between 1 and 74 (BEP 15's limit)".into());
    }
    crate::zipf::Zipf::new(spec.torrents, spec.zipf).map_err(|e| format!("udp.zipf: {e}"))?;
    Ok(Target::Udp { addr, spec })
}

impl Plan {
    /// Resolves the command line (and the scenario file it names) into a plan; errors name
    /// the flag or key.
    pub fn from_args(args: &Args) -> Result<Self, String> {
        let file = match &args.scenario {
            Some(p) => Scenario::load(p)?,
            None => Scenario::default(),
        };
        Self::resolve(args, file)
    }

    /// Resolves a command line over an already-read scenario.
    pub fn resolve(args: &Args, file: Scenario) -> Result<Self, String> {
        let url = args
            .url
            .clone()
            .or(file.url.clone())
            .ok_or("no target: give a URL (http://… or udp://…) or a --scenario with `url`")?;
        let (scheme, authority, path) = split_url(&url)?;
        let seed = args.seed.or(file.seed).unwrap_or(1);
        let udp = scheme == "udp";
        let connections = args
            .connections
            .or(file.connections)
            .unwrap_or(if udp { 4 } else { 50 });
        let threads = args.threads.or(file.threads).unwrap_or(1);
        if connections == 0 {
            return Err("--connections must be at least 1".into());
        }
        if threads == 0 || threads > connections {
            return Err(format!(
                "--threads must be between 1 and --connections ({connections})"
            ));
        }
        let duration = opt_duration(args.duration, &file.duration, "duration")?
            .unwrap_or(Duration::from_secs(10));
        if duration.is_zero() {
            return Err("--duration must be longer than zero".into());
        }
        if duration > Duration::from_secs(24 * 3600) {
            return Err("--duration: at most 24h".into());
        }
        let warmup =
            opt_duration(args.warmup, &file.warmup, "warmup")?.unwrap_or(Duration::from_secs(1));
        let timeout =
            opt_duration(args.timeout, &file.timeout, "timeout")?.unwrap_or(Duration::from_secs(2));
        if timeout.is_zero() {
            return Err("--timeout must be longer than zero".into());
        }
        let rate = args.rate.or(file.rate).filter(|r| *r > 0.0);
        let slos = match args.slo.as_ref().or(file.slo.as_ref()) {
            Some(s) => slo::parse(s)?,
            None => Vec::new(),
        };
        let max_error_pct = args.max_errors.or(file.max_errors).unwrap_or(1.0);
        if !(0.0..=100.0).contains(&max_error_pct) {
            return Err(format!(
                "--max-errors: {max_error_pct} is not a percent between 0 and 100"
            ));
        }
        let target = match scheme {
            "http" => http_target(args, &file, &url, authority, path, seed)?,
            "udp" => udp_target(args, &file, &url, authority)?,
            other => return Err(format!("url `{url}`: scheme `{other}` is not http or udp")),
        };
        Ok(Self {
            url,
            target,
            connections,
            threads,
            duration,
            warmup,
            rate,
            timeout,
            slos,
            max_error_pct,
            seed,
            scenario: file.name,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(url: &str) -> Args {
        Args {
            url: Some(url.into()),
            ..Args::default()
        }
    }

    #[test]
    fn defaults_and_urls() {
        let p = Plan::from_args(&args("http://127.0.0.1:8080/healthz")).unwrap();
        assert_eq!(
            (p.connections, p.threads, p.duration, p.rate),
            (50, 1, Duration::from_secs(10), None)
        );
        let Target::Http {
            addr,
            host,
            keepalive,
            requests,
            ..
        } = &p.target
        else {
            panic!()
        };
        assert_eq!(addr.port(), 8080);
        assert_eq!(host, "127.0.0.1:8080");
        assert!(keepalive);
        assert_eq!(requests.len(), 1);
        let p = Plan::from_args(&args("http://[::1]/")).unwrap();
        let Target::Http { addr, .. } = &p.target else {
            panic!()
        };
        assert_eq!(addr.to_string(), "[::1]:80");
        let p = Plan::from_args(&args("udp://127.0.0.1:6969")).unwrap();
        assert_eq!(p.connections, 4);
        assert!(matches!(p.target, Target::Udp { .. }));
        assert!(Plan::from_args(&args("udp://127.0.0.1"))
            .unwrap_err()
            .contains("port"));
        assert!(Plan::from_args(&args("ftp://x:1/"))
            .unwrap_err()
            .contains("scheme"));
        assert!(Plan::from_args(&Args::default())
            .unwrap_err()
            .contains("no target"));
    }

    #[test]
    fn flags_are_checked_by_name() {
        let mut a = args("http://127.0.0.1:1/a?x={x}");
        assert!(Plan::from_args(&a)
            .unwrap_err()
            .contains("request[0].path: `{x}`"));
        a.vars = vec!["x=range:1-3".into()];
        assert!(Plan::from_args(&a).is_ok());
        a.vars = vec!["x".into()];
        assert!(Plan::from_args(&a).unwrap_err().contains("--var"));
        let mut a = args("http://127.0.0.1:1/");
        a.threads = Some(60);
        assert!(Plan::from_args(&a).unwrap_err().contains("--threads"));
        let mut a = args("http://127.0.0.1:1/");
        a.headers = vec!["nocolon".into()];
        assert!(Plan::from_args(&a).unwrap_err().contains("--header"));
        let mut a = args("udp://127.0.0.1:1");
        a.mix = Some("1:2".into());
        assert!(Plan::from_args(&a).unwrap_err().contains("--mix"));
        a.mix = Some("0:1:0".into());
        assert!(Plan::from_args(&a).unwrap_err().contains("udp.connect"));
    }

    #[test]
    fn scenario_files_and_overrides() {
        let file: Scenario = toml::from_str(
            r#"
            name = "mix"
            url = "http://127.0.0.1:9/ignored"
            connections = 8
            duration = "3s"
            rate = 1000
            slo = "p99=5ms"
            [vars]
            h = { zipf = 1.1, pool = 1000 }
            u = { range = [1, 10] }
            [[request]]
            path = "/announce?info_hash={h}"
            weight = 9
            [[request]]
            method = "POST"
            path = "/click"
            body = "user={u}"
            headers = { Content-Type = "application/x-www-form-urlencoded" }
            [compare]
            servers = ["hotpath"]
            "#,
        )
        .unwrap();
        let p = Plan::resolve(&Args::default(), file.clone()).unwrap();
        assert_eq!(
            (p.connections, p.duration, p.rate),
            (8, Duration::from_secs(3), Some(1000.0))
        );
        assert_eq!(p.slos.len(), 1);
        assert_eq!(p.scenario.as_deref(), Some("mix"));
        let Target::Http { requests, .. } = &p.target else {
            panic!()
        };
        assert_eq!(requests.len(), 2);
        assert_eq!(requests[1].weight, 1);
        let over = Args {
            connections: Some(2),
            ..Args::default()
        };
        assert_eq!(Plan::resolve(&over, file).unwrap().connections, 2);
        let bad: Result<Scenario, _> = toml::from_str("conections = 3");
        assert!(bad.unwrap_err().to_string().contains("conections"));
    }
}
