//! The metrics registry. Each metric is declared once, as a [`Desc`] (name, help, type,
//! labels); at scrape time every part of the server adds what it counts to one [`Samples`],
//! which renders `/metrics` (Prometheus text), `/stats` (JSON) and the statsd lines
//! ([`statsd::Converter`]). A codec without I/O.
//!
//! Counting stays where it is cheapest: a worker's own counters are [`LocalCounter`]s (one
//! writer, a plain load and store: no locked instruction on the hot path), counters many
//! threads bump are [`Counter`]s. Only a scrape reads them.

pub mod statsd;

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

/// Log lines left out by every [`LogLimit`] (`hotpath_log_lines_suppressed_total`).
static LOG_LINES_SUPPRESSED: AtomicU64 = AtomicU64::new(0);

/// The declaration of [`log_lines_suppressed`]'s counter.
pub static LOG_LINES_SUPPRESSED_DESC: Desc = Desc::counter(
    "hotpath_log_lines_suppressed_total",
    "Log lines a client could trigger that were left out past their place's limit a second.",
);

/// Log lines left out so far by every [`LogLimit`].
pub fn log_lines_suppressed() -> u64 {
    LOG_LINES_SUPPRESSED.load(Ordering::Relaxed)
}

/// The bound on one place in the code that logs what a client can make happen (a failed
/// accept in a connection flood, a script's `hp.log`): at most `per_sec` lines a second; the
/// rest are left out and counted, and the next line written says how many.
#[derive(Debug)]
pub struct LogLimit {
    per_sec: u32,
    /// (unix second << 32) | lines written in that second.
    window: AtomicU64,
    /// Left out since the last line written.
    left_out: AtomicU64,
}

impl LogLimit {
    /// A limit of `per_sec` lines a second.
    pub const fn new(per_sec: u32) -> LogLimit {
        LogLimit {
            per_sec,
            window: AtomicU64::new(0),
            left_out: AtomicU64::new(0),
        }
    }

    /// `Some(n)` when a line may be written now, `n` being how many were left out before it;
    /// `None` when it is left out (and counted).
    pub fn allow(&self) -> Option<u64> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.allow_at(now)
    }

    fn allow_at(&self, now: u64) -> Option<u64> {
        let mut cur = self.window.load(Ordering::Relaxed);
        loop {
            let (sec, n) = (cur >> 32, cur & 0xffff_ffff);
            let next = if sec != now & 0xffff_ffff {
                (now << 32) | 1
            } else if n < u64::from(self.per_sec) {
                cur + 1
            } else {
                self.left_out.fetch_add(1, Ordering::Relaxed);
                LOG_LINES_SUPPRESSED.fetch_add(1, Ordering::Relaxed);
                return None;
            };
            match self
                .window
                .compare_exchange_weak(cur, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Some(self.left_out.swap(0, Ordering::Relaxed)),
                Err(seen) => cur = seen,
            }
        }
    }
}

/// `text` cut to at most `max` bytes (on a character boundary), saying how many were left
/// out: `… (N more bytes)`. For log lines that may quote what a client or a driver sent.
pub fn shortened(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let left = text.len() - end;
        text.truncate(end);
        text.push_str(&format!("… ({left} more bytes)"));
    }
    text
}

/// What a line written through a [`LogLimit`] adds about the lines left out before it:
/// nothing, or ` (N more like it left out of the log)`.
#[derive(Debug, Clone, Copy)]
pub struct LeftOut(pub u64);

impl std::fmt::Display for LeftOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            0 => Ok(()),
            n => write!(f, " ({n} more like it left out of the log)"),
        }
    }
}

/// Logs through a [`LogLimit`] of its own: `log_limited!(warn, 1, "accept failed: {e}")`
/// writes at most one such line a second, saying how many were left out before it.
#[macro_export]
macro_rules! log_limited {
    ($level:ident, $per_sec:expr, $($arg:tt)+) => {{
        static LIMIT: $crate::LogLimit = $crate::LogLimit::new($per_sec);
        if let Some(n) = LIMIT.allow() {
            ::log::$level!("{}{}", format_args!($($arg)+), $crate::LeftOut(n));
        }
    }};
}

/// A metric's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Type {
    /// Only grows (a restart starts it again at 0).
    Counter,
    /// Goes up and down.
    Gauge,
    /// Observations counted into buckets, with their sum and count.
    Histogram,
}

impl Type {
    fn name(self) -> &'static str {
        match self {
            Type::Counter => "counter",
            Type::Gauge => "gauge",
            Type::Histogram => "histogram",
        }
    }
}

/// A metric's declaration: written once, next to what it counts.
#[derive(Debug)]
pub struct Desc {
    /// The Prometheus name (`hotpath_…`; counters end in `_total`).
    pub name: &'static str,
    /// One line saying what it counts.
    pub help: &'static str,
    /// Its type.
    pub kind: Type,
    /// Its label names, in order; every sample gives a value for each.
    pub labels: &'static [&'static str],
    /// Its key in `/stats` when not the one made from its name (see [`Desc::stat_key`]).
    pub stat: Option<&'static str>,
}

impl Desc {
    /// A counter.
    pub const fn counter(name: &'static str, help: &'static str) -> Desc {
        Desc::new(name, help, Type::Counter)
    }

    /// A gauge.
    pub const fn gauge(name: &'static str, help: &'static str) -> Desc {
        Desc::new(name, help, Type::Gauge)
    }

    /// A histogram.
    pub const fn histogram(name: &'static str, help: &'static str) -> Desc {
        Desc::new(name, help, Type::Histogram)
    }

    const fn new(name: &'static str, help: &'static str, kind: Type) -> Desc {
        Desc {
            name,
            help,
            kind,
            labels: &[],
            stat: None,
        }
    }

    /// The same metric with these labels.
    pub const fn labels(mut self, labels: &'static [&'static str]) -> Desc {
        self.labels = labels;
        self
    }

    /// The same metric under this key in `/stats`.
    pub const fn stat(mut self, key: &'static str) -> Desc {
        self.stat = Some(key);
        self
    }

    /// Its key in `/stats` within `section`: the name without `hotpath_`, the section's
    /// `<section>_` and a counter's `_total`, unless declared otherwise.
    pub fn stat_key(&self, section: &str) -> &'static str {
        if let Some(key) = self.stat {
            return key;
        }
        let mut key = self.name.strip_prefix("hotpath_").unwrap_or(self.name);
        if !section.is_empty() {
            if let Some(rest) = key.strip_prefix(section).and_then(|r| r.strip_prefix('_')) {
                key = rest;
            }
        }
        key.strip_suffix("_total").unwrap_or(key)
    }
}

/// A counter many threads add to.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds `n`.
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    /// Takes `n` away (for gauges).
    #[inline]
    pub fn sub(&self, n: u64) {
        self.0.fetch_sub(n, Ordering::Relaxed);
    }

    /// Sets the value (for gauges).
    pub fn set(&self, n: u64) {
        self.0.store(n, Ordering::Relaxed);
    }

    /// Raises the value to `n` if it is lower.
    pub fn max(&self, n: u64) {
        self.0.fetch_max(n, Ordering::Relaxed);
    }

    /// The value.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A counter with one writer (a worker's own): a plain load and store, no locked instruction;
/// any thread may read it.
#[derive(Debug, Default)]
pub struct LocalCounter(AtomicU64);

impl LocalCounter {
    /// Adds `n`. Only the owning thread may call this.
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.store(
            self.0.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }

    /// Sets the value (for gauges). Only the owning thread may call this.
    #[inline]
    pub fn set(&self, n: u64) {
        self.0.store(n, Ordering::Relaxed);
    }

    /// The value.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A histogram's state at a scrape.
#[derive(Debug, Clone, PartialEq)]
pub struct Buckets {
    /// Upper bounds, ascending (the `+Inf` bucket is implied).
    pub bounds: &'static [f64],
    /// Observations per bucket, not cumulative: one more entry than `bounds` (the last is
    /// above every bound).
    pub counts: Vec<u64>,
    /// Sum of the observations.
    pub sum: f64,
}

impl Buckets {
    /// Observations in all.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }
}

/// A sample's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A counter's or gauge's.
    Number(f64),
    /// A histogram's.
    Histogram(Buckets),
}

/// One series of a metric.
#[derive(Debug, Clone)]
pub struct Point {
    /// Label values, in the order of the metric's [`Desc::labels`].
    pub labels: Vec<String>,
    /// Its value.
    pub value: Value,
}

/// A metric and its series at a scrape.
#[derive(Debug)]
pub struct Family {
    /// Its declaration.
    pub desc: &'static Desc,
    /// Its `/stats` section ("" for the top level).
    pub section: &'static str,
    /// Its series, in the order they were added.
    pub points: Vec<Point>,
}

/// What one scrape found, in the order it was added.
#[derive(Debug, Default)]
pub struct Samples {
    section: &'static str,
    families: Vec<Family>,
}

impl Samples {
    /// An empty scrape.
    pub fn new() -> Samples {
        Samples::default()
    }

    /// What is added next goes to this `/stats` section ("" for the top level).
    pub fn section(&mut self, name: &'static str) -> &mut Samples {
        self.section = name;
        self
    }

    /// Adds an unlabelled counter or gauge.
    pub fn add(&mut self, desc: &'static Desc, value: impl Into<Number>) -> &mut Samples {
        self.point(desc, &[], Value::Number(value.into().0))
    }

    /// Adds a series of a labelled counter or gauge: one value per label of `desc`.
    pub fn labeled(
        &mut self,
        desc: &'static Desc,
        labels: &[&str],
        value: impl Into<Number>,
    ) -> &mut Samples {
        self.point(desc, labels, Value::Number(value.into().0))
    }

    /// Adds a histogram's series.
    pub fn histogram(
        &mut self,
        desc: &'static Desc,
        labels: &[&str],
        buckets: Buckets,
    ) -> &mut Samples {
        debug_assert_eq!(buckets.counts.len(), buckets.bounds.len() + 1);
        self.point(desc, labels, Value::Histogram(buckets))
    }

    fn point(&mut self, desc: &'static Desc, labels: &[&str], value: Value) -> &mut Samples {
        debug_assert_eq!(
            labels.len(),
            desc.labels.len(),
            "{}: one value per label",
            desc.name
        );
        debug_assert_eq!(
            matches!(value, Value::Histogram(_)),
            desc.kind == Type::Histogram,
            "{}: a value of its type",
            desc.name
        );
        let labels = labels.iter().map(|l| l.to_string()).collect();
        self.family(desc).points.push(Point { labels, value });
        self
    }

    fn family(&mut self, desc: &'static Desc) -> &mut Family {
        // Series of one metric are added together: the last family is nearly always it.
        let at = self
            .families
            .iter()
            .rposition(|f| std::ptr::eq(f.desc, desc) || f.desc.name == desc.name);
        let i = match at {
            Some(i) => i,
            None => {
                self.families.push(Family {
                    desc,
                    section: self.section,
                    points: Vec::new(),
                });
                self.families.len() - 1
            }
        };
        &mut self.families[i]
    }

    /// The metrics, in the order they were first added.
    pub fn families(&self) -> &[Family] {
        &self.families
    }

    /// Renders the Prometheus text format (version 0.0.4).
    pub fn prometheus(&self, out: &mut String) {
        for f in &self.families {
            let d = f.desc;
            let _ = writeln!(out, "# HELP {} {}", d.name, escape_help(d.help));
            let _ = writeln!(out, "# TYPE {} {}", d.name, d.kind.name());
            for p in &f.points {
                match &p.value {
                    Value::Number(v) => {
                        out.push_str(d.name);
                        write_labels(out, d.labels, &p.labels, None);
                        let _ = writeln!(out, " {}", number(*v));
                    }
                    Value::Histogram(b) => {
                        let mut cumulative = 0;
                        for (i, count) in b.counts.iter().enumerate() {
                            cumulative += count;
                            let le = b
                                .bounds
                                .get(i)
                                .map_or("+Inf".to_string(), |b| b.to_string());
                            let _ = write!(out, "{}_bucket", d.name);
                            write_labels(out, d.labels, &p.labels, Some(&le));
                            let _ = writeln!(out, " {cumulative}");
                        }
                        let _ = write!(out, "{}_sum", d.name);
                        write_labels(out, d.labels, &p.labels, None);
                        let _ = writeln!(out, " {}", number(b.sum));
                        let _ = write!(out, "{}_count", d.name);
                        write_labels(out, d.labels, &p.labels, None);
                        let _ = writeln!(out, " {cumulative}");
                    }
                }
            }
        }
    }

    /// Renders `/stats`: a JSON object per section (the top level for ""), each metric under
    /// its [`Desc::stat_key`]; a labelled metric as objects nested by its label values, a
    /// histogram as its `count` and `sum`.
    pub fn stats(&self) -> serde_json::Value {
        use serde_json::{Map, Value as J};
        let mut doc = Map::new();
        for f in &self.families {
            let section = if f.section.is_empty() {
                &mut doc
            } else {
                match doc
                    .entry(f.section)
                    .or_insert_with(|| J::Object(Map::new()))
                {
                    J::Object(m) => m,
                    // A top-level figure named like a section: the section wins.
                    other => {
                        *other = J::Object(Map::new());
                        other.as_object_mut().expect("an object")
                    }
                }
            };
            let key = f.desc.stat_key(f.section);
            if f.desc.labels.is_empty() {
                if let Some(p) = f.points.first() {
                    section.insert(key.into(), json(&p.value));
                }
                continue;
            }
            let mut nested = Map::new();
            for p in &f.points {
                let mut at = &mut nested;
                let (last, path) = p.labels.split_last().expect("labelled");
                for l in path {
                    let next = at.entry(l.clone()).or_insert_with(|| J::Object(Map::new()));
                    if !next.is_object() {
                        *next = J::Object(Map::new());
                    }
                    at = next.as_object_mut().expect("an object");
                }
                at.insert(last.clone(), json(&p.value));
            }
            section.insert(key.into(), J::Object(nested));
        }
        J::Object(doc)
    }
}

/// A sample's number: integers stay exact in `/stats`.
#[derive(Debug, Clone, Copy)]
pub struct Number(f64);

macro_rules! number_from {
    ($($t:ty),*) => {
        $(impl From<$t> for Number {
            fn from(v: $t) -> Number {
                Number(v as f64)
            }
        })*
    };
}
number_from!(u8, u16, u32, u64, usize, i32, i64, f32, f64);

impl From<bool> for Number {
    fn from(v: bool) -> Number {
        Number(f64::from(u8::from(v)))
    }
}

fn json(v: &Value) -> serde_json::Value {
    match v {
        Value::Number(n) => json_number(*n),
        Value::Histogram(b) => serde_json::json!({
            "count": b.count(),
            "sum": json_number(b.sum),
        }),
    }
}

fn json_number(n: f64) -> serde_json::Value {
    if n.fract() == 0.0 && (0.0..9.0e15).contains(&n) {
        (n as u64).into()
    } else if n.fract() == 0.0 && (-9.0e15..0.0).contains(&n) {
        (n as i64).into()
    } else {
        serde_json::Number::from_f64(n).map_or(serde_json::Value::Null, Into::into)
    }
}

/// A value as Prometheus text writes it: integers without a fraction.
pub fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        format!("{v}")
    }
}

fn write_labels(out: &mut String, names: &[&str], values: &[String], le: Option<&str>) {
    if names.is_empty() && le.is_none() {
        return;
    }
    out.push('{');
    let mut first = true;
    for (n, v) in names.iter().zip(values) {
        if !first {
            out.push(',');
        }
        first = false;
        let _ = write!(out, "{n}=\"{}\"", escape_label(v));
    }
    if let Some(le) = le {
        if !first {
            out.push(',');
        }
        let _ = write!(out, "le=\"{le}\"");
    }
    out.push('}');
}

/// A label value as the text format quotes it: `\`, `"` and newlines escaped.
fn escape_label(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

/// A HELP text as the format takes it: `\` and newlines escaped.
fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_log_limit_writes_its_lines_a_second_then_says_how_many_it_left_out() {
        let limit = LogLimit::new(2);
        let before = log_lines_suppressed();
        assert_eq!(limit.allow_at(100), Some(0));
        assert_eq!(limit.allow_at(100), Some(0));
        for _ in 0..5 {
            assert_eq!(limit.allow_at(100), None);
        }
        // The next second's first line carries the count; the second's own go on.
        assert_eq!(limit.allow_at(101), Some(5));
        assert_eq!(limit.allow_at(101), Some(0));
        assert_eq!(limit.allow_at(101), None);
        assert_eq!(limit.allow_at(105), Some(1));
        assert!(log_lines_suppressed() >= before + 6);
        assert_eq!(LeftOut(0).to_string(), "");
        assert_eq!(
            LeftOut(3).to_string(),
            " (3 more like it left out of the log)"
        );
    }

    use super::*;

    static REQUESTS: Desc =
        Desc::counter("hotpath_requests_total", "Requests.").labels(&["protocol", "kind"]);
    static OPEN: Desc = Desc::gauge("hotpath_connections", "Open connections.");
    static FAILURES: Desc =
        Desc::counter("hotpath_store_flush_failures_total", "Failed batches.").stat("failures");
    static ROWS: Desc = Desc::counter("hotpath_store_rows_written_total", "Rows.");
    static LATENCY: Desc = Desc::histogram("hotpath_request_duration_seconds", "Time.");
    static NAMES: Desc = Desc::counter("hotpath_lua_counter_total", "Counters.").labels(&["name"]);

    fn sample() -> Samples {
        let mut s = Samples::new();
        s.labeled(&REQUESTS, &["http", "announce"], 10u64)
            .labeled(&REQUESTS, &["udp", "connect"], 2u64)
            .add(&OPEN, 3u64)
            .histogram(
                &LATENCY,
                &[],
                Buckets {
                    bounds: &[0.001, 0.01],
                    counts: vec![4, 1, 1],
                    sum: 2.5,
                },
            );
        s.section("store").add(&FAILURES, 1u64).add(&ROWS, 7u64);
        s.section("lua").labeled(&NAMES, &["a\"b\\c\nd"], 1u64);
        s
    }

    #[test]
    fn prometheus_text_has_one_help_and_type_per_metric_and_cumulative_buckets() {
        let mut out = String::new();
        sample().prometheus(&mut out);
        assert_eq!(
            out.matches("# TYPE hotpath_requests_total counter").count(),
            1
        );
        assert!(out.contains("hotpath_requests_total{protocol=\"udp\",kind=\"connect\"} 2\n"));
        assert!(out.contains("hotpath_connections 3\n"));
        assert!(out.contains("hotpath_request_duration_seconds_bucket{le=\"0.001\"} 4\n"));
        assert!(out.contains("hotpath_request_duration_seconds_bucket{le=\"0.01\"} 5\n"));
        assert!(out.contains("hotpath_request_duration_seconds_bucket{le=\"+Inf\"} 6\n"));
        assert!(out.contains("hotpath_request_duration_seconds_sum 2.5\n"));
        assert!(out.contains("hotpath_request_duration_seconds_count 6\n"));
        assert!(out.contains("hotpath_lua_counter_total{name=\"a\\\"b\\\\c\\nd\"} 1\n"));
        assert_eq!(out.matches("# TYPE hotpath_connections gauge").count(), 1);
    }

    #[test]
    fn stats_nest_labels_and_take_keys_from_names() {
        let v = sample().stats();
        assert_eq!(v["requests"]["http"]["announce"], 10);
        assert_eq!(v["connections"], 3);
        assert_eq!(v["request_duration_seconds"]["count"], 6);
        assert_eq!(v["store"]["failures"], 1);
        assert_eq!(v["store"]["rows_written"], 7);
        assert_eq!(v["lua"]["counter"]["a\"b\\c\nd"], 1);
    }

    #[test]
    fn local_counters_add() {
        let c = LocalCounter::default();
        c.add(2);
        c.add(3);
        assert_eq!(c.get(), 5);
    }
}
