//! statsd lines from a scrape: a counter goes as its increase since the last push (`|c`), a
//! gauge as its value (`|g`), a histogram as its `_sum` and `_count` increases (its buckets
//! stay in Prometheus). Labels become name parts, or DogStatsD tags.

use std::collections::HashMap;
use std::fmt::Write as _;

use crate::{Samples, Type, Value};

/// Turns scrapes into statsd lines, remembering counters between calls.
pub struct Converter {
    prefix: String,
    tags: bool,
    last: HashMap<String, f64>,
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

    /// Appends a line per series of `samples` to `out`: a counter as its increase since the
    /// last call (left out when 0; all of it after a reset), a gauge as its value.
    pub fn convert(&mut self, samples: &Samples, out: &mut Vec<String>) {
        for f in samples.families() {
            let d = f.desc;
            for p in &f.points {
                let pairs: Vec<(&str, &str)> = d
                    .labels
                    .iter()
                    .copied()
                    .zip(p.labels.iter().map(String::as_str))
                    .collect();
                match (&p.value, d.kind) {
                    (Value::Number(v), Type::Counter) => self.counter(d.name, &pairs, *v, out),
                    (Value::Number(v), _) => {
                        let (name, tags) = self.name(d.name, &pairs);
                        out.push(line(name, *v, "g", &tags));
                    }
                    (Value::Histogram(b), _) => {
                        let sum = format!("{}_sum", d.name);
                        let count = format!("{}_count", d.name);
                        self.counter(&sum, &pairs, b.sum, out);
                        self.counter(&count, &pairs, b.count() as f64, out);
                    }
                }
            }
        }
    }

    fn counter(&mut self, name: &str, pairs: &[(&str, &str)], value: f64, out: &mut Vec<String>) {
        let (stat, tags) = self.name(name, pairs);
        let series = format!("{stat}|{tags}");
        let before = self.last.insert(series, value).unwrap_or(0.0);
        let delta = if value >= before {
            value - before
        } else {
            value
        };
        if delta != 0.0 {
            out.push(line(stat, delta, "c", &tags));
        }
    }

    /// The statsd name (and tags) of a series.
    fn name(&self, name: &str, pairs: &[(&str, &str)]) -> (String, String) {
        let mut stat = self.prefix.clone();
        stat.push('.');
        stat.push_str(name.strip_prefix("hotpath_").unwrap_or(name));
        let mut tags = String::new();
        for (k, v) in pairs {
            let v = clean(v);
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

fn line(mut stat: String, amount: f64, unit: &str, tags: &str) -> String {
    let _ = write!(stat, ":{}|{unit}", number(amount));
    if !tags.is_empty() {
        let _ = write!(stat, "|#{tags}");
    }
    stat
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Buckets, Desc};

    static REQUESTS: Desc = Desc::counter("hotpath_requests_total", "Requests.")
        .labels(&["protocol", "kind", "result"]);
    static OPEN: Desc = Desc::gauge("hotpath_connections", "Open connections.");
    static LATENCY: Desc = Desc::histogram("hotpath_request_duration_seconds", "Time.");
    static NAMES: Desc = Desc::counter("hotpath_lua_counter_total", "Counters.").labels(&["name"]);

    fn scrape(ok: u64, count: u64) -> Samples {
        let mut s = Samples::new();
        s.labeled(&REQUESTS, &["http", "announce", "ok"], ok)
            .labeled(&REQUESTS, &["http", "health", "ok"], 0u64)
            .add(&OPEN, 3u64)
            .histogram(
                &LATENCY,
                &[],
                Buckets {
                    bounds: &[0.001],
                    counts: vec![count - 1, 1],
                    sum: if count == 10 { 0.5 } else { 0.7 },
                },
            )
            .labeled(&NAMES, &["a,b.c"], 2u64);
        s
    }

    #[test]
    fn counters_go_as_increases_gauges_as_values() {
        let mut c = Converter::new("hp", false);
        let mut out = Vec::new();
        c.convert(&scrape(10, 10), &mut out);
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
        out.clear();
        c.convert(&scrape(15, 4), &mut out);
        assert_eq!(out[0], "hp.requests_total.http.announce.ok:5|c");
        assert_eq!(out[1], "hp.connections:3|g");
        assert!(out[2].starts_with("hp.request_duration_seconds_sum:0.19999"));
        assert_eq!(out[3], "hp.request_duration_seconds_count:4|c");
        assert_eq!(out.len(), 4);
    }

    #[test]
    fn labels_as_tags_and_packets_within_the_size() {
        let mut c = Converter::new("hotpath", true);
        let mut out = Vec::new();
        c.convert(&scrape(10, 10), &mut out);
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
