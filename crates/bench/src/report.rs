//! A run's figures as one value: printed as text for people, as JSON for scripts, and as a
//! self-contained HTML page with plots (see [`crate::html`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::slo::{self, Figures, Outcome};
use crate::stats::Recorder;
use crate::units::{fmt_micros, fmt_nanos};

/// The standard latency quantiles reported.
pub const QUANTILES: [(&str, f64); 6] = [
    ("p50", 0.5),
    ("p90", 0.9),
    ("p99", 0.99),
    ("p99.9", 0.999),
    ("p99.99", 0.9999),
    ("max", 1.0),
];

/// Latency figures in microseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    /// Mean.
    pub mean: f64,
    /// Quantiles by name (p50 … max).
    #[serde(flatten)]
    pub quantiles: BTreeMap<String, f64>,
}

impl Latency {
    fn of(h: &Histogram<u64>) -> Self {
        let quantiles = QUANTILES
            .iter()
            .map(|(name, q)| (name.to_string(), us(h, *q)))
            .collect();
        Self {
            mean: round(h.mean() / 1e3),
            quantiles,
        }
    }

    /// A quantile by name, in microseconds.
    pub fn get(&self, name: &str) -> f64 {
        self.quantiles.get(name).copied().unwrap_or(f64::NAN)
    }
}

fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn us(h: &Histogram<u64>, q: f64) -> f64 {
    if h.is_empty() {
        return 0.0;
    }
    round(h.value_at_quantile(q) as f64 / 1e3)
}

/// Request counts over the measured period.
#[derive(Debug, Clone, Serialize)]
pub struct Counts {
    /// Requests sent in the measured period: `ok` + `failed` + `in_flight`.
    pub sent: u64,
    /// Of those, answered without error.
    pub ok: u64,
    /// Of those, ended in an error.
    pub failed: u64,
    /// Of those, still unanswered when the run ended.
    pub in_flight: u64,
    /// Errors of every class: `failed` and `stray`.
    pub errors: u64,
    /// Errors that end no request sent (an ICMP refusal, an answer to no request in flight).
    pub stray: u64,
    /// Sent more than 1 ms after their intended time (open model).
    pub late: u64,
    /// Due but never sent (open model).
    pub unsent: u64,
    /// Connections opened (HTTP), warm-up included.
    pub connects: u64,
    /// Requests sent again on a new connection because the server had closed the kept-alive
    /// one (HTTP).
    pub reconnects: u64,
}

/// One second of the measured period.
#[derive(Debug, Clone, Serialize)]
pub struct Tick {
    /// Seconds since the end of the warm-up.
    pub second: usize,
    /// Answered requests.
    pub ok: u64,
    /// Errors.
    pub errors: u64,
    /// Median latency, us.
    pub p50_us: f64,
    /// 99th percentile, us.
    pub p99_us: f64,
    /// Slowest, us.
    pub max_us: f64,
}

/// The load generator's own CPU use over the measured period.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Cpu {
    /// User CPU seconds.
    pub user_secs: f64,
    /// System CPU seconds.
    pub system_secs: f64,
    /// Requests sent per CPU second of the load generator: its own speed.
    pub sent_per_cpu_sec: f64,
}

/// Everything a run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The tool and its version.
    pub tool: String,
    /// The scenario's name, when one was used.
    pub scenario: Option<String>,
    /// The target.
    pub url: String,
    /// `http` or `udp`.
    pub protocol: String,
    /// `closed` (as fast as answers come) or `open` (a fixed rate).
    pub model: String,
    /// The open model's rate, requests/s.
    pub target_rate: Option<f64>,
    /// Connections (HTTP) or sockets (UDP).
    pub connections: usize,
    /// Load threads.
    pub threads: usize,
    /// Whether HTTP connections were reused.
    pub keepalive: Option<bool>,
    /// Warm-up left out, seconds.
    pub warmup_secs: f64,
    /// Measured period, seconds.
    pub duration_secs: f64,
    /// Request counts.
    pub requests: Counts,
    /// Answered requests per second.
    pub rate: f64,
    /// Latency from the intended send time (coordinated-omission corrected), us; `null` when
    /// no request was answered without error (there is no latency to report).
    pub latency_us: Option<Latency>,
    /// Latency from the actual send time, us (equal to `latency_us` in the closed loop).
    pub service_time_us: Option<Latency>,
    /// The latency distribution: (percentile, us) points for plotting.
    pub percentiles: Vec<(f64, f64)>,
    /// Errors by class.
    pub errors: BTreeMap<String, u64>,
    /// Per-second figures.
    pub timeline: Vec<Tick>,
    /// The load generator's CPU use.
    pub cpu: Cpu,
    /// Objectives and how the run did.
    pub slo: Vec<Outcome>,
    /// Whether every objective was met.
    pub slo_met: bool,
    /// Why the run failed, when it did: no request answered without error, or more errors
    /// than `--max-errors` allows (`hotpath bench` then exits with status 3).
    pub failed: Option<String>,
}

/// What a report is built from besides the merged record.
pub struct Meta<'a> {
    /// The plan.
    pub plan: &'a crate::Plan,
    /// CPU use over the measured period.
    pub cpu: Cpu,
}

/// The percentile points plotted: dense where tails live (90, 99, 99.9 …).
fn curve(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    if h.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    // x = -log10(1 - q) from 0 (p0) to 5 (p99.999), 20 steps a decade.
    for i in 0..=100 {
        let x = i as f64 / 20.0;
        let q = 1.0 - 10f64.powf(-x);
        out.push((round(q * 100.0 * 1000.0) / 1000.0, us(h, q)));
    }
    out.push((100.0, us(h, 1.0)));
    out
}

impl Report {
    /// Builds the report from the merged record.
    pub fn new(rec: &Recorder, meta: Meta<'_>) -> Self {
        let plan = meta.plan;
        let secs = plan.duration.as_secs_f64();
        let (protocol, keepalive) = match &plan.target {
            crate::Target::Http { keepalive, .. } => ("http", Some(*keepalive)),
            crate::Target::Udp { .. } => ("udp", None),
        };
        let rate = rec.ok as f64 / secs;
        let errors = rec.error_count();
        let mut quantile: Vec<(f64, f64)> = QUANTILES
            .iter()
            .map(|(_, q)| (*q, rec.latency.value_at_quantile(*q) as f64))
            .collect();
        for q in slo::quantiles(&plan.slos) {
            quantile.push((q, rec.latency.value_at_quantile(q) as f64));
        }
        if rec.ok == 0 {
            // No latency was measured: a latency objective cannot be met by an empty record.
            for q in &mut quantile {
                q.1 = f64::NAN;
            }
        }
        let figures = Figures {
            quantile,
            mean: if rec.ok == 0 {
                f64::NAN
            } else {
                rec.latency.mean()
            },
            errors,
            sent: rec.sent,
            late: rec.late,
            unsent: rec.unsent,
            rate,
        };
        let slo = slo::check(&plan.slos, &figures);
        let cpu_secs = meta.cpu.user_secs + meta.cpu.system_secs;
        let cpu = Cpu {
            sent_per_cpu_sec: if cpu_secs > 0.0 {
                (rec.sent as f64 / cpu_secs).round()
            } else {
                0.0
            },
            ..meta.cpu
        };
        let timeline = rec
            .seconds
            .iter()
            .enumerate()
            .take(secs.ceil() as usize)
            .map(|(second, s)| Tick {
                second,
                ok: s.responses,
                errors: s.errors,
                p50_us: us(&s.latency, 0.5),
                p99_us: us(&s.latency, 0.99),
                max_us: us(&s.latency, 1.0),
            })
            .collect();
        Self {
            tool: format!("hotpath bench {}", env!("CARGO_PKG_VERSION")),
            scenario: plan.scenario.clone(),
            url: plan.url.clone(),
            protocol: protocol.into(),
            model: if plan.rate.is_some() {
                "open"
            } else {
                "closed"
            }
            .into(),
            target_rate: plan.rate,
            connections: plan.connections,
            threads: plan.threads,
            keepalive,
            warmup_secs: plan.warmup.as_secs_f64(),
            duration_secs: secs,
            requests: Counts {
                sent: rec.sent,
                ok: rec.ok,
                failed: rec.failed,
                in_flight: rec.in_flight(),
                errors,
                stray: rec.stray,
                late: rec.late,
                unsent: rec.unsent,
                connects: rec.connects,
                reconnects: rec.reconnects,
            },
            rate: rate.round(),
            latency_us: (rec.ok > 0).then(|| Latency::of(&rec.latency)),
            service_time_us: (rec.ok > 0).then(|| Latency::of(&rec.service)),
            percentiles: curve(&rec.latency),
            errors: rec.errors.clone(),
            timeline,
            cpu,
            slo_met: slo.iter().all(|o| o.met),
            slo,
            failed: failure(rec.ok, errors, plan.max_error_pct),
        }
    }

    /// The report as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report serializes")
    }

    /// The report as text for a terminal.
    pub fn to_text(&self) -> String {
        let mut t = String::new();
        let model = match self.target_rate {
            Some(r) => format!("open model at {} requests/s", group(r as u64)),
            None => "closed loop".into(),
        };
        let conns = match (self.protocol.as_str(), self.connections) {
            ("udp", 1) => "socket",
            ("udp", _) => "sockets",
            (_, 1) => "connection",
            _ => "connections",
        };
        let _ = writeln!(
            t,
            "{}{} : {model}, {} {conns}, {} thread{}, {}s measured after {}s warm-up{}",
            self.scenario
                .as_ref()
                .map(|s| format!("[{s}] "))
                .unwrap_or_default(),
            self.url,
            self.connections,
            self.threads,
            if self.threads == 1 { "" } else { "s" },
            self.duration_secs,
            self.warmup_secs,
            match self.keepalive {
                Some(false) => ", a new connection per request",
                _ => "",
            }
        );
        let r = &self.requests;
        let _ = writeln!(
            t,
            "  requests  {} sent = {} ok + {} errors + {} in flight at the end  =>  {}/s",
            group(r.sent),
            group(r.ok),
            group(r.failed),
            group(r.in_flight),
            group(self.rate as u64)
        );
        if r.stray > 0 {
            let _ = writeln!(
                t,
                "  stray     {} errors that end no request sent (refusals, answers to no request)",
                group(r.stray)
            );
        }
        if self.model == "open" {
            let _ = writeln!(
                t,
                "  schedule  {} sent late (>1ms), {} never sent",
                group(r.late),
                group(r.unsent)
            );
        }
        let line = |name: &str, l: &Latency| {
            let mut s = format!("  {name:<9} mean {}", fmt_micros(l.mean));
            for (q, _) in QUANTILES {
                let _ = write!(s, "  {q} {}", fmt_micros(l.get(q)));
            }
            s
        };
        match (&self.latency_us, &self.service_time_us) {
            (Some(latency), Some(service)) => {
                let _ = writeln!(t, "{}", line("latency", latency));
                if self.model == "open" {
                    let _ = writeln!(t, "{}", line("service", service));
                    let _ = writeln!(t, "            (latency counts from each request's intended send time; service time from the actual send)");
                }
            }
            _ => {
                let _ = writeln!(t, "  latency   none: no request was answered without error");
            }
        }
        if r.connects > 0 {
            let _ = writeln!(t, "  connects  {} (warm-up included)", group(r.connects));
        }
        if r.reconnects > 0 {
            let _ = writeln!(
                t,
                "  reconnects {}: the server closed kept-alive connections without saying so; those requests went again on new connections",
                group(r.reconnects)
            );
        }
        if !self.errors.is_empty() {
            let _ = writeln!(t, "  errors");
            for (class, n) in &self.errors {
                let _ = writeln!(t, "    {:>10}  {class}", group(*n));
            }
        }
        let _ = writeln!(
            t,
            "  load cpu  {:.2}s user + {:.2}s system  =>  {} requests sent per CPU-second",
            self.cpu.user_secs,
            self.cpu.system_secs,
            group(self.cpu.sent_per_cpu_sec as u64)
        );
        if let Some(why) = &self.failed {
            let _ = writeln!(t, "  FAILED    {why}");
        }
        for o in &self.slo {
            let actual = slo_actual(o);
            let _ = writeln!(
                t,
                "  slo       {:<20} {:<10} {}",
                o.slo.text,
                actual,
                if o.met { "met" } else { "MISSED" }
            );
        }
        t
    }
}

/// Why a run with `ok` answers and `errors` errors failed, if it did: nothing answered
/// without error, or errors over `max_pct` percent of all outcomes.
pub fn failure(ok: u64, errors: u64, max_pct: f64) -> Option<String> {
    if ok == 0 {
        return Some(format!(
            "no request was answered without error ({} errors): the run measured nothing",
            group(errors)
        ));
    }
    let pct = errors as f64 * 100.0 / (ok + errors) as f64;
    (pct > max_pct).then(|| {
        format!(
            "{pct:.2}% of outcomes were errors ({} of {}), over --max-errors {max_pct}%",
            group(errors),
            group(ok + errors)
        )
    })
}

/// An objective's measured value, in its metric's unit.
pub fn slo_actual(o: &Outcome) -> String {
    if o.actual.is_nan() {
        return "none".into();
    }
    match o.slo.metric {
        slo::Metric::Quantile(_) | slo::Metric::Mean => fmt_nanos(o.actual as u64),
        slo::Metric::ErrorPercent => format!("{:.3}%", o.actual),
        _ => group(o.actual as u64),
    }
}

/// 1234567 -> "1,234,567".
pub fn group(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_fails_when_nothing_was_answered_or_errors_pass_the_limit() {
        assert!(failure(0, 0, 1.0)
            .unwrap()
            .contains("no request was answered"));
        assert!(failure(0, 5, 100.0).unwrap().contains("(5 errors)"));
        assert_eq!(failure(99, 1, 1.0), None, "1 % is allowed at 1 %");
        let why = failure(98, 2, 1.0).unwrap();
        assert!(
            why.contains("2.00% of outcomes were errors (2 of 100)"),
            "{why}"
        );
        assert_eq!(failure(1, 1_000_000, 100.0), None);
    }

    #[test]
    fn grouping() {
        assert_eq!(group(0), "0");
        assert_eq!(group(999), "999");
        assert_eq!(group(1000), "1,000");
        assert_eq!(group(1234567), "1,234,567");
    }

    #[test]
    fn percentile_curve_reaches_the_tail() {
        let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
        for i in 1..=100_000u64 {
            h.record(i * 1000).unwrap();
        }
        let c = curve(&h);
        assert_eq!(c.first().unwrap().0, 0.0);
        assert_eq!(c.last().unwrap().0, 100.0);
        assert!(c.windows(2).all(|w| w[0].1 <= w[1].1));
        let p99 = c.iter().find(|(p, _)| (*p - 99.0).abs() < 1e-9).unwrap().1;
        assert!((p99 - 99_000.0).abs() < 100.0, "{p99}");
    }
}
