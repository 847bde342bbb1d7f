//! The statsd exporter: every `statsd.interval_ms` the figures of /metrics go to a statsd
//! server over one connected UDP socket, made once and reused for every datagram (the Go
//! report's technique). The conversion ([`Converter`]) is a codec without I/O; [`run`] is
//! the thread.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hotpath_config::StatsdConfig;

use crate::metrics;
use crate::worker::Shared;

/// Turns Prometheus text into statsd lines, remembering counters between calls.
pub struct Converter {
    prefix: String,
    tags: bool,
    last: HashMap<String, f64>,
}

#[derive(Clone, Copy, PartialEq)]
enum Type {
    Counter,
    Gauge,
    /// A histogram or summary: `_count` and `_sum` go as counters, buckets and quantiles not.
    Distribution,
}

impl Converter {
    /// Names start with `prefix`; labels become name parts, or DogStatsD tags with `tags`.
    pub fn new(prefix: &str, tags: bool) -> Converter {
        Converter {
            prefix: prefix.to_string(),
            tags,
            last: HashMap::new(),
        }
    }

    /// Appends a line per sample of `text` to `out`: a counter as its increase since the last
    /// call (left out when 0; all of it after a reset), a gauge as its value.
    pub fn convert(&mut self, text: &str, out: &mut Vec<String>) {
        let mut types: HashMap<&str, Type> = HashMap::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let mut parts = rest.split_whitespace();
                if let (Some(name), Some(kind)) = (parts.next(), parts.next()) {
                    let t = match kind {
                        "counter" => Type::Counter,
                        "histogram" | "summary" => Type::Distribution,
                        _ => Type::Gauge,
                    };
                    types.insert(name, t);
                }
                continue;
            }
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(value) = value.parse::<f64>() else {
                continue;
            };
            let (name, labels) = match series.split_once('{') {
                Some((n, l)) => (n, l.strip_suffix('}').unwrap_or(l)),
                None => (series, ""),
            };
            let kind = match types.get(name) {
                Some(&t) => t,
                None => {
                    let base = name
                        .strip_suffix("_count")
                        .or_else(|| name.strip_suffix("_sum"));
                    match base.and_then(|b| types.get(b)) {
                        Some(Type::Distribution) => Type::Counter,
                        _ if name.ends_with("_bucket") => continue,
                        Some(_) | None => Type::Gauge,
                    }
                }
            };
            if kind == Type::Distribution {
                // Buckets and quantiles.
                continue;
            }
            let stat = self.name(name, labels);
            let (amount, unit) = match kind {
                Type::Counter => {
                    let before = self.last.insert(series.to_string(), value).unwrap_or(0.0);
                    let delta = if value >= before {
                        value - before
                    } else {
                        value
                    };
                    if delta == 0.0 {
                        continue;
                    }
                    (delta, "c")
                }
                _ => (value, "g"),
            };
            let mut l = stat.0;
            let _ = write!(l, ":{}|{unit}", number(amount));
            if !stat.1.is_empty() {
                let _ = write!(l, "|#{}", stat.1);
            }
            out.push(l);
        }
    }

    /// The statsd name (and tags) of a Prometheus series.
    fn name(&self, name: &str, labels: &str) -> (String, String) {
        let mut stat = self.prefix.clone();
        stat.push('.');
        stat.push_str(name.strip_prefix("hotpath_").unwrap_or(name));
        let mut tags = String::new();
        for pair in split_labels(labels) {
            let Some((k, v)) = pair.split_once('=') else {
                continue;
            };
            let v = clean(v.trim_matches('"'));
            if self.tags {
                if !tags.is_empty() {
                    tags.push(',');
                }
                let _ = write!(tags, "{}:{v}", clean(k));
            } else {
                stat.push('.');
                stat.push_str(&v);
            }
        }
        (stat, tags)
    }
}

/// Label pairs, split at the commas between them (not inside quoted values).
fn split_labels(labels: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, c) in labels.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => quoted = !quoted,
            ',' if !quoted => {
                out.push(&labels[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if start < labels.len() {
        out.push(&labels[start..]);
    }
    out
}

/// A name part or tag: what statsd servers take apart (`.`, `:`, `|`, `#`, `,`, `@`, spaces)
/// becomes `_`.
fn clean(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// Packs lines into datagrams of at most `max` bytes (a longer line goes alone).
pub fn packets(lines: &[String], max: usize) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = Vec::new();
    let mut cur: Vec<u8> = Vec::new();
    for l in lines {
        if !cur.is_empty() && cur.len() + 1 + l.len() > max {
            out.push(std::mem::take(&mut cur));
        }
        if !cur.is_empty() {
            cur.push(b'\n');
        }
        cur.extend_from_slice(l.as_bytes());
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Resolves `statsd.address` and makes the one socket, connected to it.
pub fn connect(cfg: &StatsdConfig) -> std::io::Result<(UdpSocket, SocketAddr)> {
    use std::net::ToSocketAddrs as _;
    let to = cfg
        .address
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no address"))?;
    let local: SocketAddr = if to.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = UdpSocket::bind(local)?;
    socket.connect(to)?;
    Ok((socket, to))
}

/// The exporter's thread: pushes every interval until `stop`, then once more.
pub fn run(cfg: StatsdConfig, socket: UdpSocket, shared: Arc<Shared>, stop: Arc<AtomicBool>) {
    let mut conv = Converter::new(&cfg.prefix, cfg.tags);
    let interval = Duration::from_millis(cfg.interval_ms);
    let mut last_error: Option<Instant> = None;
    let mut lines = Vec::new();
    loop {
        let next = Instant::now() + interval;
        while Instant::now() < next && !stop.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(50).min(interval));
        }
        // Read before the figures are: a stop that comes while this push is under way gets
        // one more push after it, so nothing counted before the stop is left out.
        let stopping = stop.load(Ordering::Acquire);
        let mut text = String::with_capacity(8192);
        metrics::write_prometheus(&shared.totals(), &mut text);
        shared.service.write_metrics(&mut text);
        lines.clear();
        conv.convert(&text, &mut lines);
        for p in packets(&lines, cfg.max_packet_bytes) {
            if let Err(e) = socket.send(&p) {
                // Nobody listening (ICMP refused) or a full buffer: try again next time.
                if last_error.is_none_or(|t| t.elapsed() > Duration::from_secs(60)) {
                    log::warn!("statsd: cannot send to {}: {e}", cfg.address);
                    last_error = Some(Instant::now());
                }
                break;
            }
        }
        if stopping {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# HELP hotpath_requests_total Requests.\n\
        # TYPE hotpath_requests_total counter\n\
        hotpath_requests_total{protocol=\"http\",kind=\"announce\",result=\"ok\"} 10\n\
        hotpath_requests_total{protocol=\"http\",kind=\"health\",result=\"ok\"} 0\n\
        # TYPE hotpath_connections gauge\n\
        hotpath_connections 3\n\
        # TYPE hotpath_request_duration_seconds histogram\n\
        hotpath_request_duration_seconds_bucket{le=\"0.001\"} 9\n\
        hotpath_request_duration_seconds_sum 0.5\n\
        hotpath_request_duration_seconds_count 10\n\
        # TYPE hotpath_lua_counter_total counter\n\
        hotpath_lua_counter_total{name=\"a,b.c\"} 2\n";

    #[test]
    fn counters_go_as_increases_gauges_as_values() {
        let mut c = Converter::new("hp", false);
        let mut out = Vec::new();
        c.convert(TEXT, &mut out);
        assert_eq!(
            out,
            [
                "hp.requests_total.http.announce.ok:10|c",
                "hp.connections:3|g",
                "hp.request_duration_seconds_sum:0.5|c",
                "hp.request_duration_seconds_count:10|c",
                "hp.lua_counter_total.a_b_c:2|c",
            ]
        );
        // The next push: only what grew; a counter that went down (a restart) goes whole.
        let later = TEXT
            .replace("result=\"ok\"} 10", "result=\"ok\"} 15")
            .replace("_count 10", "_count 4");
        out.clear();
        c.convert(&later, &mut out);
        assert_eq!(
            out,
            [
                "hp.requests_total.http.announce.ok:5|c",
                "hp.connections:3|g",
                "hp.request_duration_seconds_count:4|c",
            ]
        );
    }

    #[test]
    fn labels_as_tags_and_packets_within_the_size() {
        let mut c = Converter::new("hotpath", true);
        let mut out = Vec::new();
        c.convert(TEXT, &mut out);
        assert_eq!(
            out[0],
            "hotpath.requests_total:10|c|#protocol:http,kind:announce,result:ok"
        );
        let lines: Vec<String> = (0..100).map(|i| format!("hotpath.x{i}:1|c")).collect();
        let ps = packets(&lines, 512);
        assert!(ps.len() > 1 && ps.iter().all(|p| p.len() <= 512));
        let joined: Vec<String> = ps
            .iter()
            .flat_map(|p| {
                String::from_utf8(p.clone())
                    .unwrap()
                    .lines()
                    .map(String::from)
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(joined, lines, "nothing lost or reordered");
    }
}
