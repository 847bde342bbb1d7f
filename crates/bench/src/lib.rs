//! `hotpath bench`: a load generator that must never be the bottleneck and never flatter the
//! server. It speaks HTTP/1.1 (keep-alive or a connection per request, templated GETs and POSTs)
//! and the BEP 15 UDP tracker mix, in a closed loop or an open model whose latencies count from
//! each request's intended send time (coordinated omission corrected), and reports HdrHistogram
//! percentiles, throughput and errors per second, errors by class, its own CPU use and the
//! objectives given with `--slo`, as text, JSON or a self-contained HTML page.
//!
//! It depends on the wire codecs only, never on the server: it measures hotpath and its peers
//! alike. Threads share nothing while the load runs; each records alone and the records are
//! merged at the end.

#![forbid(unsafe_code)]

pub mod alarm;
pub mod clock;
pub mod html;
pub mod http;
pub mod plan;
pub mod progress;
pub mod report;
pub mod slo;
pub mod stats;
pub mod template;
pub mod udp;
pub mod units;
pub mod zipf;

pub use plan::{Args, Plan, Scenario, Target};
pub use report::Report;

use std::sync::Arc;

use crate::clock::Schedule;
use crate::progress::Progress;
use crate::report::{Cpu, Meta};
use crate::stats::Recorder;

/// Why a run could not be made.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The command line or scenario is wrong.
    #[error("{0}")]
    Plan(String),
    /// A socket or thread could not be set up.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The cause.
        source: std::io::Error,
    },
}

/// Whose CPU time [`cpu_times`] reads: this process's, or the calling thread's.
pub use nix::sys::resource::UsageWho;

/// CPU seconds (user, system) of `who`, to the microsecond; zeros when they cannot be read.
pub fn cpu_times(who: UsageWho) -> (f64, f64) {
    use nix::sys::resource::getrusage;
    match getrusage(who) {
        Ok(u) => {
            let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
            (secs(u.user_time()), secs(u.system_time()))
        }
        Err(_) => (0.0, 0.0),
    }
}

/// Splits `n` into `parts` nearly equal shares.
fn share(n: usize, parts: usize, i: usize) -> usize {
    n / parts + usize::from(i < n % parts)
}

/// Runs a plan to its end and returns the report.
pub fn run(plan: &Plan) -> Result<Report, BenchError> {
    run_with(plan, false)
}

/// [`run`], with a live progress line on standard error once a second when `live`.
pub fn run_with(plan: &Plan, live: bool) -> Result<Report, BenchError> {
    let schedule = Schedule::new(plan.warmup, plan.duration);
    let progress = live.then(|| Arc::new(Progress::default()));
    let timeout = plan.timeout.as_nanos() as u64;
    let threads = plan.threads;
    let (cpu0, records) = std::thread::scope(|scope| {
        let mut handles = Vec::new();
        let mut first = 0;
        for t in 0..threads {
            let conns = share(plan.connections, threads, t);
            let rate = plan
                .rate
                .map(|r| r * conns as f64 / plan.connections as f64);
            let seed = plan.seed.wrapping_mul(0x9E37_79B9).wrapping_add(t as u64);
            let progress = progress.clone();
            let first_socket = first;
            first += conns;
            let h = std::thread::Builder::new()
                .name(format!("bench-{t}"))
                .spawn_scoped(scope, move || -> std::io::Result<Recorder> {
                    match &plan.target {
                        Target::Http {
                            addr,
                            host,
                            keepalive,
                            requests,
                            vars,
                        } => http::run(&http::HttpLoad {
                            addr: *addr,
                            host,
                            keepalive: *keepalive,
                            requests,
                            vars,
                            connections: conns,
                            rate,
                            timeout,
                            schedule,
                            seed,
                            progress,
                        }),
                        Target::Udp { addr, spec } => udp::run(&udp::UdpLoad {
                            addr: *addr,
                            spec,
                            sockets: conns,
                            first_socket,
                            rate,
                            timeout,
                            schedule,
                            seed,
                            progress,
                        }),
                    }
                })
                .map_err(|e| BenchError::Io {
                    context: "cannot start a load thread".into(),
                    source: e,
                });
            handles.push(h);
        }
        // Sample this process's CPU time at the start and end of the measured period.
        let until = |t: u64| {
            let left = schedule
                .instant(t)
                .saturating_duration_since(std::time::Instant::now());
            std::thread::sleep(left);
        };
        let cpu0 = match &progress {
            Some(p) => show_progress(p, &schedule),
            None => {
                until(schedule.measure_from);
                cpu_times(UsageWho::RUSAGE_SELF)
            }
        };
        let records: Vec<Result<Recorder, BenchError>> = handles
            .into_iter()
            .map(|h| {
                h?.join()
                    .map_err(|_| BenchError::Io {
                        context: "a load thread panicked".into(),
                        source: std::io::Error::other("panic"),
                    })?
                    .map_err(|e| BenchError::Io {
                        context: format!("load against {}", plan.url),
                        source: e,
                    })
            })
            .collect();
        (cpu0, records)
    });
    let cpu1 = cpu_times(UsageWho::RUSAGE_SELF);
    let mut merged = Recorder::new(schedule.measure_from, schedule.end);
    for r in records {
        merged.merge(&r?);
    }
    let cpu = Cpu {
        user_secs: ((cpu1.0 - cpu0.0) * 1000.0).round() / 1000.0,
        system_secs: ((cpu1.1 - cpu0.1) * 1000.0).round() / 1000.0,
        sent_per_cpu_sec: 0.0,
    };
    Ok(Report::new(&merged, Meta { plan, cpu }))
}

/// Shows the progress line once a second until the run ends (cleared then); returns this
/// process's CPU time at the start of the measured period.
fn show_progress(p: &Progress, schedule: &Schedule) -> (f64, f64) {
    use std::io::Write as _;
    let mut err = std::io::stderr();
    let mut cpu0 = None;
    let mut start = p.read();
    let mut before = start.clone();
    let mut t_before = schedule.now();
    loop {
        let now = schedule.now();
        if cpu0.is_none() && now >= schedule.measure_from {
            cpu0 = Some(cpu_times(UsageWho::RUSAGE_SELF));
            start = p.read();
        }
        if now >= schedule.end {
            break;
        }
        // Wake at the next whole second of the run, or at the start of the measured period.
        let next = (now / 1_000_000_000 + 1) * 1_000_000_000;
        let next = if now < schedule.measure_from {
            next.min(schedule.measure_from)
        } else {
            next
        }
        .min(schedule.end);
        std::thread::sleep(
            schedule
                .instant(next)
                .saturating_duration_since(std::time::Instant::now()),
        );
        let t = schedule.now();
        let reading = p.read();
        let warmup = t < schedule.measure_from;
        let secs = if warmup {
            t as f64 / 1e9
        } else {
            (t - schedule.measure_from) as f64 / 1e9
        };
        let dt = (t - t_before) as f64 / 1e9;
        let at = progress::At {
            secs,
            of: (schedule.end - schedule.measure_from) as f64 / 1e9,
            warmup,
        };
        let text = progress::line(&reading, &before, &start, dt, at);
        let _ = write!(err, "\r\x1b[2K{text}");
        let _ = err.flush();
        before = reading;
        t_before = t;
    }
    let _ = write!(err, "\r\x1b[2K");
    let _ = err.flush();
    cpu0.unwrap_or_else(|| cpu_times(UsageWho::RUSAGE_SELF))
}

/// What `hotpath bench` ends with.
pub enum Exit {
    /// Every objective met (or none given).
    Met,
    /// An objective was missed.
    Missed,
    /// The run measured nothing worth reading: no request answered without error, or more
    /// errors than `--max-errors` allows (the reason is printed).
    Failed,
}

/// The whole command: resolve, run, print, write the HTML file; says whether objectives held.
pub fn command(args: &Args) -> Result<Exit, BenchError> {
    let plan = Plan::from_args(args).map_err(BenchError::Plan)?;
    // A live line only for a person watching: on a terminal, and never with --json.
    let live = !args.json && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let report = run_with(&plan, live)?;
    if args.json {
        println!("{}", report.to_json());
    } else {
        print!("{}", report.to_text());
    }
    if let Some(path) = &args.html {
        std::fs::write(path, html::render(&report)).map_err(|e| BenchError::Io {
            context: format!("cannot write {}", path.display()),
            source: e,
        })?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(why) = &report.failed {
        eprintln!("hotpath bench: the run failed: {why}");
        return Ok(Exit::Failed);
    }
    Ok(if report.slo_met {
        Exit::Met
    } else {
        Exit::Missed
    })
}
