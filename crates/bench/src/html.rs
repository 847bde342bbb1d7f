//! The HTML report: one self-contained page (inline CSS and SVG, no scripts, nothing fetched)
//! with the figures, the latency distribution by percentile, throughput and latency over time,
//! errors by class and the objectives.

use std::fmt::Write as _;

use crate::report::{group, slo_actual, Report, QUANTILES};
use crate::units::fmt_micros;

const W: f64 = 760.0;
const H: f64 = 300.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 30.0;
const BOTTOM: f64 = 45.0;

/// Escapes text for HTML.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            _ => out.push(c),
        }
    }
    out
}

/// A "nice" axis top and step for values up to `max`.
fn nice(max: f64) -> (f64, f64) {
    if max <= 0.0 || !max.is_finite() {
        return (1.0, 0.25);
    }
    let raw = max / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    ((max / step).ceil() * step, step)
}

struct Series<'a> {
    name: &'a str,
    color: &'a str,
    points: Vec<(f64, f64)>,
}

/// How a chart's y axis maps values.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Scale {
    /// From 0, in even steps.
    Linear,
    /// By powers of ten, so a p50 of 50 us and a max of 40 ms both read (latencies).
    Log,
}

/// The decades a log axis spans for positive values `lo..=hi`: (first, last) powers of ten.
fn decades(lo: f64, hi: f64) -> (i32, i32) {
    let lo = if lo > 0.0 && lo.is_finite() { lo } else { 1.0 };
    let hi = if hi > lo && hi.is_finite() { hi } else { lo };
    let first = lo.log10().floor() as i32;
    let last = (hi.log10().ceil() as i32).max(first + 1);
    (first, last)
}

/// An SVG line chart; `xticks` are (value, label) pairs.
fn chart(
    title: &str,
    y_label: &str,
    y_fmt: &dyn Fn(f64) -> String,
    xticks: &[(f64, String)],
    x_max: f64,
    scale: Scale,
    series: &[Series<'_>],
) -> String {
    let values = || series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
    let y_max_raw = values().fold(0.0, f64::max);
    let y_min_pos = values().filter(|v| *v > 0.0).fold(f64::INFINITY, f64::min);
    let (y_max, y_step) = nice(y_max_raw * 1.05);
    let (d0, d1) = decades(y_min_pos, y_max_raw);
    let x_max = if x_max > 0.0 { x_max } else { 1.0 };
    let px = |x: f64| LEFT + (W - LEFT - RIGHT) * (x / x_max);
    let span = H - TOP - BOTTOM;
    let py = |y: f64| match scale {
        Scale::Linear => TOP + span * (1.0 - y / y_max),
        Scale::Log => {
            // Values at or below the lowest decade sit on the axis.
            let l = y.max(10f64.powi(d0)).log10();
            TOP + span * (1.0 - (l - f64::from(d0)) / f64::from(d1 - d0))
        }
    };
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" aria-label="{t}"><text x="{LEFT}" y="18" class="title">{t}</text>"#,
        t = escape(title)
    );
    let yticks: Vec<f64> = match scale {
        Scale::Linear => {
            let mut v = Vec::new();
            let mut y = 0.0;
            while y <= y_max + y_step / 2.0 {
                v.push(y);
                y += y_step;
            }
            v
        }
        Scale::Log => (d0..=d1).map(|d| 10f64.powi(d)).collect(),
    };
    for y in yticks {
        let _ = write!(
            s,
            r#"<line x1="{LEFT}" x2="{x2}" y1="{yy:.1}" y2="{yy:.1}" class="grid"/><text x="{tx}" y="{ty:.1}" class="ytick">{label}</text>"#,
            x2 = W - RIGHT,
            yy = py(y),
            tx = LEFT - 6.0,
            ty = py(y) + 4.0,
            label = escape(&y_fmt(y))
        );
    }
    for (x, label) in xticks {
        // A label at the right edge ends there rather than centring past the picture.
        let anchor = if *x >= x_max {
            " style=\"text-anchor:end\""
        } else {
            ""
        };
        let _ = write!(
            s,
            r#"<line x1="{xx:.1}" x2="{xx:.1}" y1="{TOP}" y2="{yb}" class="grid"/><text x="{xx:.1}" y="{ty}" class="xtick"{anchor}>{l}</text>"#,
            xx = px(*x),
            yb = H - BOTTOM,
            ty = H - BOTTOM + 16.0,
            l = escape(label)
        );
    }
    let _ = write!(
        s,
        r#"<text x="14" y="{cy}" class="ylabel" transform="rotate(-90 14 {cy})">{l}</text>"#,
        cy = (TOP + H - BOTTOM) / 2.0,
        l = escape(y_label)
    );
    for (k, ser) in series.iter().enumerate() {
        if ser.points.is_empty() {
            continue;
        }
        let pts: Vec<String> = ser
            .points
            .iter()
            .map(|(x, y)| format!("{:.1},{:.1}", px(x.min(x_max)), py(*y)))
            .collect();
        let _ = write!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="2"/>"#,
            pts.join(" "),
            ser.color
        );
        let lx = LEFT
            + 10.0
            + series[..k]
                .iter()
                .map(|s| 30.0 + 6.5 * s.name.len() as f64)
                .sum::<f64>();
        let _ = write!(
            s,
            r#"<rect x="{lx}" y="{ly}" width="12" height="4" fill="{c}"/><text x="{tx}" y="{ty}" class="legend">{n}</text>"#,
            ly = H - 14.0,
            c = ser.color,
            tx = lx + 16.0,
            ty = H - 9.0,
            n = escape(ser.name)
        );
    }
    s.push_str("</svg>");
    s
}

/// x position of a percentile on the tail-stretching axis.
fn tail_x(pct: f64) -> f64 {
    let rest = (1.0 - pct / 100.0).max(1e-5);
    -rest.log10()
}

/// The whole page.
pub fn render(r: &Report) -> String {
    let mut p = String::new();
    headline(&mut p, r);
    latency_chart(&mut p, r);
    timeline_charts(&mut p, r);
    figures(&mut p, r);
    errors_and_objectives(&mut p, r);
    let _ = writeln!(p, "<p class=\"sub\">{}</p></body></html>", escape(&r.tool));
    p
}

/// The title and the headline figures.
fn headline(p: &mut String, r: &Report) {
    let title = format!(
        "hotpath bench: {}",
        r.scenario.clone().unwrap_or_else(|| r.url.clone())
    );
    let _ = write!(
        p,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>{}</style></head><body>",
        escape(&title),
        STYLE
    );
    let _ = write!(
        p,
        "<h1>{}</h1><p class=\"sub\">{}</p>",
        escape(&title),
        escape(r.to_text().lines().next().unwrap_or_default())
    );
    // A run that failed, or missed an objective, says so before any figure.
    if let Some(why) = &r.failed {
        let _ = write!(p, "<p class=\"missed\">FAILED: {}</p>", escape(why));
    } else if !r.slo_met {
        let missed: Vec<String> = r
            .slo
            .iter()
            .filter(|o| !o.met)
            .map(|o| o.slo.text.clone())
            .collect();
        let _ = write!(
            p,
            "<p class=\"missed\">Objectives missed: {}</p>",
            escape(&missed.join(", "))
        );
    }
    // Headline figures.
    let _ = write!(
        p,
        "<div class=\"cards\"><div><b>{}</b><span>answered/s</span></div><div><b>{}</b><span>p50</span></div><div><b>{}</b><span>p99</span></div><div><b>{}</b><span>p99.9</span></div><div><b>{}</b><span>max</span></div><div><b>{}</b><span>errors</span></div><div><b>{}</b><span>sent per load CPU-s</span></div></div>",
        group(r.rate as u64),
        lat(r, "p50"),
        lat(r, "p99"),
        lat(r, "p99.9"),
        lat(r, "max"),
        group(r.requests.errors),
        group(r.cpu.sent_per_cpu_sec as u64),
    );
}

/// A latency quantile for a card, or a dash when nothing was answered.
fn lat(r: &Report, q: &str) -> String {
    r.latency_us
        .as_ref()
        .map_or_else(|| "-".into(), |l| fmt_micros(l.get(q)))
}

/// Latency by percentile, on an axis that stretches the tail.
fn latency_chart(p: &mut String, r: &Report) {
    let (Some(_), Some(service)) = (&r.latency_us, &r.service_time_us) else {
        p.push_str("<h2>Latency by percentile</h2><p class=\"missed\">No request was answered without error: there is no latency to show.</p>");
        return;
    };
    let ticks: Vec<(f64, String)> = ["0%", "90%", "99%", "99.9%", "99.99%", "99.999%"]
        .iter()
        .enumerate()
        .map(|(i, l)| (i as f64, l.to_string()))
        .collect();
    let mut series = vec![Series {
        name: if r.model == "open" {
            "latency (from intended time)"
        } else {
            "latency"
        },
        color: "#1f6feb",
        points: r
            .percentiles
            .iter()
            .map(|(q, v)| (tail_x(*q), *v))
            .collect(),
    }];
    if r.model == "open" {
        // The service-time curve, from its quantiles, for contrast.
        series.push(Series {
            name: "service time (from actual send)",
            color: "#d29922",
            points: QUANTILES
                .iter()
                .map(|(n, q)| (tail_x(q * 100.0), service.get(n)))
                .collect(),
        });
    }
    p.push_str("<h2>Latency by percentile</h2><p class=\"sub\">log scale: each line up is ten times slower</p>");
    p.push_str(&chart(
        "latency by percentile",
        "latency",
        &fmt_micros,
        &ticks,
        5.0,
        Scale::Log,
        &series,
    ));
}

/// Throughput and latency, second by second.
fn timeline_charts(p: &mut String, r: &Report) {
    let secs = r.timeline.len() as f64;
    let step = ((secs / 10.0).ceil()).max(1.0) as usize;
    let xt: Vec<(f64, String)> = (0..=r.timeline.len())
        .step_by(step)
        .map(|s| (s as f64, format!("{s}s")))
        .collect();
    let at = |f: &dyn Fn(&crate::report::Tick) -> f64| -> Vec<(f64, f64)> {
        r.timeline
            .iter()
            .map(|t| (t.second as f64 + 0.5, f(t)))
            .collect()
    };
    p.push_str("<h2>Throughput over time</h2>");
    p.push_str(&chart(
        "answered and failed requests per second",
        "requests/s",
        &|v| group(v as u64),
        &xt,
        secs,
        Scale::Linear,
        &[
            Series {
                name: "ok/s",
                color: "#1a7f37",
                points: at(&|t| t.ok as f64),
            },
            Series {
                name: "errors/s",
                color: "#cf222e",
                points: at(&|t| t.errors as f64),
            },
        ],
    ));
    p.push_str("<h2>Latency over time</h2>");
    p.push_str(&chart(
        "latency per second",
        "latency",
        &fmt_micros,
        &xt,
        secs,
        Scale::Log,
        &[
            Series {
                name: "p50",
                color: "#1f6feb",
                points: at(&|t| t.p50_us),
            },
            Series {
                name: "p99",
                color: "#8250df",
                points: at(&|t| t.p99_us),
            },
            Series {
                name: "max",
                color: "#cf222e",
                points: at(&|t| t.max_us),
            },
        ],
    ));
}

/// The latency quantiles and the request counts.
fn figures(p: &mut String, r: &Report) {
    p.push_str("<h2>Figures</h2><table><tr><th></th><th>mean</th>");
    for (q, _) in QUANTILES {
        let _ = write!(p, "<th>{q}</th>");
    }
    p.push_str("</tr>");
    let mut rows = vec![("latency", r.latency_us.as_ref())];
    if r.model == "open" {
        rows.push(("service time", r.service_time_us.as_ref()));
    }
    for (name, l) in rows {
        let Some(l) = l else {
            let _ = write!(
                p,
                "<tr><td>{name}</td><td colspan=\"{}\">none: no request was answered without error</td></tr>",
                QUANTILES.len() + 1
            );
            continue;
        };
        let _ = write!(p, "<tr><td>{name}</td><td>{}</td>", fmt_micros(l.mean));
        for (q, _) in QUANTILES {
            let _ = write!(p, "<td>{}</td>", fmt_micros(l.get(q)));
        }
        p.push_str("</tr>");
    }
    p.push_str("</table><table>");
    let c = &r.requests;
    for (k, v) in [
        ("sent", c.sent),
        ("of those, answered ok", c.ok),
        ("of those, ended in an error", c.failed),
        ("of those, in flight at the end", c.in_flight),
        ("errors that end no request sent", c.stray),
        ("sent late", c.late),
        ("never sent", c.unsent),
        ("connections opened (warm-up included)", c.connects),
        (
            "sent again after the server closed a kept-alive connection",
            c.reconnects,
        ),
    ] {
        let _ = write!(p, "<tr><td>{k}</td><td>{}</td></tr>", group(v));
    }
    let _ = write!(
        p,
        "<tr><td>load generator CPU</td><td>{:.2}s user, {:.2}s system</td></tr></table>",
        r.cpu.user_secs, r.cpu.system_secs
    );
}

/// Error classes and the scenario's objectives, when there are any.
fn errors_and_objectives(p: &mut String, r: &Report) {
    if !r.errors.is_empty() {
        p.push_str("<h2>Errors</h2><table>");
        for (class, n) in &r.errors {
            let _ = write!(
                p,
                "<tr><td>{}</td><td>{}</td></tr>",
                escape(class),
                group(*n)
            );
        }
        p.push_str("</table>");
    }
    if !r.slo.is_empty() {
        p.push_str("<h2>Objectives</h2><table>");
        for o in &r.slo {
            let actual = slo_actual(o);
            let _ = write!(
                p,
                "<tr><td>{}</td><td>{}</td><td class=\"{}\">{}</td></tr>",
                escape(&o.slo.text),
                escape(&actual),
                if o.met { "met" } else { "missed" },
                if o.met { "met" } else { "missed" }
            );
        }
        p.push_str("</table>");
    }
}

const STYLE: &str = "body{font:14px system-ui,sans-serif;margin:24px;color:#1f2328;max-width:820px}\
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:24px 0 6px}.sub{color:#57606a;margin:0 0 12px}\
.cards{display:flex;flex-wrap:wrap;gap:8px}.cards div{border:1px solid #d0d7de;border-radius:6px;padding:8px 12px;min-width:80px}\
.cards b{display:block;font-size:18px}.cards span{color:#57606a;font-size:12px}\
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #d0d7de;padding:4px 10px;text-align:right}\
td:first-child{text-align:left}.met{color:#1a7f37}.missed{color:#cf222e;font-weight:bold}\
svg{display:block;margin:4px 0}svg .grid{stroke:#eaeef2}svg text{font:11px system-ui,sans-serif;fill:#57606a}\
svg .title{font-size:13px;fill:#1f2328}svg .ytick{text-anchor:end}svg .xtick{text-anchor:middle}svg .ylabel{text-anchor:middle}";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_axes() {
        assert_eq!(nice(0.0), (1.0, 0.25));
        assert_eq!(nice(93.0), (100.0, 20.0));
        assert_eq!(nice(1200.0), (1250.0, 250.0));
        assert_eq!(escape("<a&\"b\">"), "&lt;a&amp;&quot;b&quot;&gt;");
        assert!((tail_x(99.0) - 2.0).abs() < 1e-9);
        assert!((tail_x(100.0) - 5.0).abs() < 1e-9);
        assert_eq!(decades(48.0, 41_000.0), (1, 5));
        assert_eq!(decades(0.0, 0.0), (0, 1));
        assert_eq!(decades(100.0, 100.0), (2, 3));
    }
}
