//! Service-level objectives checked after a run: `p99=2ms,errors=0,rate>=100000`. A missed one
//! sets a non-zero exit code, so a script or CI job can gate on it.
//!
//! Metrics: latency quantiles `p50 p90 p99 p99.9 p99.99 max mean` (with a unit: ns, us, ms, s),
//! `errors` (a count, or a share of requests with `%`), `late` and `unsent` (counts), `rate`
//! (answered requests per second). `=` means "at most" for all but `rate`, where it means "at
//! least"; `<`, `<=`, `>`, `>=` say it outright.

use serde::Serialize;

use crate::units::{parse_count, parse_duration};

/// What an objective measures.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Metric {
    /// A latency quantile (0..=1), in nanoseconds.
    Quantile(f64),
    /// Mean latency, in nanoseconds.
    Mean,
    /// Errors, a count.
    Errors,
    /// Errors as a percentage of requests sent.
    ErrorPercent,
    /// Requests sent late (open model).
    Late,
    /// Requests never sent (open model).
    Unsent,
    /// Answered requests per second.
    Rate,
}

/// A comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Op {
    /// Strictly below.
    #[serde(rename = "<")]
    Lt,
    /// At most.
    #[serde(rename = "<=")]
    Le,
    /// Strictly above.
    #[serde(rename = ">")]
    Gt,
    /// At least.
    #[serde(rename = ">=")]
    Ge,
}

/// One objective.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Slo {
    /// As written.
    pub text: String,
    /// What it measures.
    pub metric: Metric,
    /// The comparison.
    pub op: Op,
    /// The threshold, in the metric's unit (nanoseconds for latencies).
    pub threshold: f64,
}

/// The figures objectives are checked against.
#[derive(Debug, Clone, Default)]
pub struct Figures {
    /// Latency at a quantile, in nanoseconds.
    pub quantile: Vec<(f64, f64)>,
    /// Mean latency, ns.
    pub mean: f64,
    /// Errors.
    pub errors: u64,
    /// Requests sent.
    pub sent: u64,
    /// Late requests.
    pub late: u64,
    /// Unsent requests.
    pub unsent: u64,
    /// Answered requests per second.
    pub rate: f64,
}

/// An objective and how the run did against it.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    /// The objective.
    pub slo: Slo,
    /// The measured value, in the metric's unit.
    pub actual: f64,
    /// Whether it was met.
    pub met: bool,
}

/// Parses a comma-separated list of objectives.
pub fn parse(spec: &str) -> Result<Vec<Slo>, String> {
    spec.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(parse_one)
        .collect()
}

fn parse_one(text: &str) -> Result<Slo, String> {
    let at = text.find(['<', '>', '=']).ok_or_else(|| {
        format!("slo `{text}`: expected METRIC=VALUE, METRIC<=VALUE or METRIC>=VALUE")
    })?;
    let (name, rest) = text.split_at(at);
    let (op, value) = if let Some(v) = rest.strip_prefix("<=") {
        (Some(Op::Le), v)
    } else if let Some(v) = rest.strip_prefix(">=") {
        (Some(Op::Ge), v)
    } else if let Some(v) = rest.strip_prefix('<') {
        (Some(Op::Lt), v)
    } else if let Some(v) = rest.strip_prefix('>') {
        (Some(Op::Gt), v)
    } else {
        (None, &rest[1..])
    };
    let name = name.trim();
    let value = value.trim();
    let latency = |v: &str| -> Result<f64, String> {
        parse_duration(v)
            .map(|d| d.as_nanos() as f64)
            .map_err(|e| format!("slo `{text}`: {e}"))
    };
    let count = |v: &str| parse_count(v).map_err(|e| format!("slo `{text}`: {e}"));
    let (metric, threshold) = match name {
        "max" => (Metric::Quantile(1.0), latency(value)?),
        "mean" => (Metric::Mean, latency(value)?),
        "errors" => match value.strip_suffix('%') {
            Some(p) => (Metric::ErrorPercent, count(p)?),
            None => (Metric::Errors, count(value)?),
        },
        "late" => (Metric::Late, count(value)?),
        "unsent" => (Metric::Unsent, count(value)?),
        "rate" => (Metric::Rate, count(value)?),
        q if q.starts_with('p') => {
            let pct: f64 = q[1..]
                .parse()
                .ok()
                .filter(|p| (0.0..=100.0).contains(p))
                .ok_or_else(|| format!("slo `{text}`: `{q}` is not a percentile like p99 or p99.9"))?;
            // Rounded so p99.9 is exactly the 0.999 the report computes.
            (Metric::Quantile((pct * 1e7).round() / 1e9), latency(value)?)
        }
        other => {
            return Err(format!(
                "slo `{text}`: unknown metric `{other}` (p50, p99, p99.9, max, mean, errors, late, unsent, rate)"
            ))
        }
    };
    let op = op.unwrap_or(if metric == Metric::Rate {
        Op::Ge
    } else {
        Op::Le
    });
    Ok(Slo {
        text: text.to_owned(),
        metric,
        op,
        threshold,
    })
}

/// Checks each objective against the figures.
pub fn check(slos: &[Slo], f: &Figures) -> Vec<Outcome> {
    slos.iter()
        .map(|slo| {
            let actual = match slo.metric {
                Metric::Quantile(q) => f
                    .quantile
                    .iter()
                    .find(|(k, _)| (*k - q).abs() < 1e-12)
                    .map(|(_, v)| *v)
                    .unwrap_or(f64::NAN),
                Metric::Mean => f.mean,
                Metric::Errors => f.errors as f64,
                Metric::ErrorPercent => {
                    if f.sent == 0 {
                        0.0
                    } else {
                        100.0 * f.errors as f64 / f.sent as f64
                    }
                }
                Metric::Late => f.late as f64,
                Metric::Unsent => f.unsent as f64,
                Metric::Rate => f.rate,
            };
            let met = match slo.op {
                Op::Lt => actual < slo.threshold,
                Op::Le => actual <= slo.threshold,
                Op::Gt => actual > slo.threshold,
                Op::Ge => actual >= slo.threshold,
            };
            Outcome {
                slo: slo.clone(),
                actual,
                met,
            }
        })
        .collect()
}

/// The quantiles a run must report for these objectives (beyond the standard ones).
pub fn quantiles(slos: &[Slo]) -> impl Iterator<Item = f64> + '_ {
    slos.iter().filter_map(|s| match s.metric {
        Metric::Quantile(q) => Some(q),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_forms() {
        let s =
            parse("p99=2ms, errors=0,rate>=100k, p99.9<500us,max<=1s,errors=0.5%,mean<1ms,late=0")
                .unwrap();
        assert_eq!(s.len(), 8);
        assert_eq!(
            (s[0].metric, s[0].op, s[0].threshold),
            (Metric::Quantile(0.99), Op::Le, 2e6)
        );
        assert_eq!(
            (s[1].metric, s[1].op, s[1].threshold),
            (Metric::Errors, Op::Le, 0.0)
        );
        assert_eq!(
            (s[2].metric, s[2].op, s[2].threshold),
            (Metric::Rate, Op::Ge, 1e5)
        );
        assert_eq!(
            (s[3].metric, s[3].op, s[3].threshold),
            (Metric::Quantile(0.999), Op::Lt, 5e5)
        );
        assert_eq!((s[4].metric, s[4].threshold), (Metric::Quantile(1.0), 1e9));
        assert_eq!((s[5].metric, s[5].threshold), (Metric::ErrorPercent, 0.5));
        assert_eq!(s[6].metric, Metric::Mean);
        assert_eq!(s[7].metric, Metric::Late);
        // `rate=N` means at least N.
        assert_eq!(parse("rate=5").unwrap()[0].op, Op::Ge);
    }

    #[test]
    fn rejects_nonsense_with_the_reason() {
        assert!(parse("p99").unwrap_err().contains("expected METRIC"));
        assert!(parse("p101=1ms").unwrap_err().contains("not a percentile"));
        assert!(parse("latency=1ms").unwrap_err().contains("unknown metric"));
        assert!(parse("p99=fast").unwrap_err().contains("not a duration"));
        assert!(parse("errors=some").unwrap_err().contains("not a number"));
    }

    #[test]
    fn checks_against_figures() {
        let f = Figures {
            quantile: vec![(0.5, 1e5), (0.99, 3e6), (1.0, 9e6)],
            mean: 2e5,
            errors: 2,
            sent: 1000,
            late: 0,
            unsent: 0,
            rate: 120_000.0,
        };
        let out = check(
            &parse("p99=2ms,errors=0,rate>=100000,errors<=0.5%,p50<1ms,max>10ms").unwrap(),
            &f,
        );
        let met: Vec<bool> = out.iter().map(|o| o.met).collect();
        assert_eq!(met, [false, false, true, true, true, false]);
        assert_eq!(out[0].actual, 3e6);
        assert!((out[3].actual - 0.2).abs() < 1e-9);
        // A quantile the run did not compute is never met.
        assert!(!check(&parse("p75=1s").unwrap(), &f)[0].met);
    }
}
