//! The live progress line of a run on a terminal: answers per second, p99 so far and errors,
//! once a second on standard error. The load threads add what they record to a [`Progress`]
//! in batches (a few atomic additions every 200 ms or 512 answers, never one per request);
//! the main thread reads it. Latency is kept in coarse logarithmic buckets (four per
//! doubling, so a quantile is known to within 25 %): enough for a line that moves, while the
//! report's figures come from the threads' own exact histograms.

use std::sync::atomic::{AtomicU64, Ordering};

/// Buckets: four per power of two of nanoseconds, up to 2^40 ns (18 minutes).
const BUCKETS: usize = 160;
/// A thread hands over what it counted at least this often...
const FLUSH_NS: u64 = 200_000_000;
/// ...or after this many events.
const FLUSH_EVENTS: u32 = 512;

fn bucket(ns: u64) -> usize {
    let ns = ns.max(1);
    let log2 = 63 - ns.leading_zeros() as usize;
    // The two bits below the leading one split each doubling in four.
    let frac = if log2 >= 2 {
        ((ns >> (log2 - 2)) & 3) as usize
    } else {
        ((ns << (2 - log2)) & 3) as usize
    };
    (log2 * 4 + frac).min(BUCKETS - 1)
}

/// The upper bound of bucket `i`, in nanoseconds.
fn bucket_top(i: usize) -> f64 {
    let (log2, quarter) = (i / 4, i % 4);
    2f64.powi(log2 as i32) * (5 + quarter) as f64 / 4.0
}

/// What every load thread has handed over so far.
#[derive(Debug)]
pub struct Progress {
    ok: AtomicU64,
    errors: AtomicU64,
    latency: Vec<AtomicU64>,
}

impl Default for Progress {
    fn default() -> Self {
        Progress {
            ok: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            latency: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

/// A reading of [`Progress`].
#[derive(Debug, Clone, Default)]
pub struct Reading {
    /// Answers without error.
    pub ok: u64,
    /// Errors.
    pub errors: u64,
    latency: Vec<u64>,
}

impl Progress {
    /// What has been handed over until now.
    pub fn read(&self) -> Reading {
        Reading {
            ok: self.ok.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            latency: self
                .latency
                .iter()
                .map(|b| b.load(Ordering::Relaxed))
                .collect(),
        }
    }
}

impl Reading {
    /// The `q` quantile of the latencies between `since` and this reading, in nanoseconds
    /// (the top of its bucket); `None` when none was recorded.
    pub fn quantile_since(&self, since: &Reading, q: f64) -> Option<f64> {
        let counts: Vec<u64> = self
            .latency
            .iter()
            .enumerate()
            .map(|(i, n)| n - since.latency.get(i).copied().unwrap_or(0))
            .collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = (q * total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, n) in counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(bucket_top(i));
            }
        }
        Some(bucket_top(BUCKETS - 1))
    }
}

/// One thread's counts not yet handed over.
#[derive(Debug, Clone)]
pub struct Pending {
    to: std::sync::Arc<Progress>,
    ok: u64,
    errors: u64,
    latency: Vec<u32>,
    events: u32,
    last: u64,
}

impl Pending {
    /// Counts for `to`.
    pub fn new(to: std::sync::Arc<Progress>) -> Pending {
        Pending {
            to,
            ok: 0,
            errors: 0,
            latency: vec![0; BUCKETS],
            events: 0,
            last: 0,
        }
    }

    /// An answer with `latency_ns`, at `now`.
    #[inline]
    pub fn ok(&mut self, latency_ns: u64, now: u64) {
        self.ok += 1;
        self.latency[bucket(latency_ns)] += 1;
        self.event(now);
    }

    /// An error, at `now`.
    #[inline]
    pub fn error(&mut self, now: u64) {
        self.errors += 1;
        self.event(now);
    }

    #[inline]
    fn event(&mut self, now: u64) {
        self.events += 1;
        if self.events >= FLUSH_EVENTS || now.saturating_sub(self.last) >= FLUSH_NS {
            self.flush(now);
        }
    }

    /// Hands everything over.
    pub fn flush(&mut self, now: u64) {
        self.to.ok.fetch_add(self.ok, Ordering::Relaxed);
        self.to.errors.fetch_add(self.errors, Ordering::Relaxed);
        for (i, n) in self.latency.iter_mut().enumerate() {
            if *n > 0 {
                self.to.latency[i].fetch_add(u64::from(*n), Ordering::Relaxed);
                *n = 0;
            }
        }
        self.ok = 0;
        self.errors = 0;
        self.events = 0;
        self.last = now;
    }
}

/// Where a run is, for its progress line.
#[derive(Debug, Clone, Copy)]
pub struct At {
    /// Seconds into the measured period, or into the warm-up.
    pub secs: f64,
    /// Seconds the measured period lasts.
    pub of: f64,
    /// Whether the warm-up is still on.
    pub warmup: bool,
}

/// The progress line at `at`, from two readings `dt` seconds apart and the reading at the
/// measured period's start.
pub fn line(now: &Reading, before: &Reading, start: &Reading, dt: f64, at: At) -> String {
    let rate = (now.ok - before.ok) as f64 / dt.max(1e-3);
    let p99 = now
        .quantile_since(start, 0.99)
        .map_or("-".to_string(), |ns| crate::units::fmt_micros(ns / 1e3));
    let errors = now.errors - start.errors;
    let rate = crate::report::group(rate as u64);
    if at.warmup {
        format!("  warm-up {:.0}s  {rate:>9}/s answered", at.secs)
    } else {
        format!(
            "  {:.0}s of {}s  {rate:>9}/s answered  p99 {p99} so far  {} errors",
            at.secs,
            at.of,
            crate::report::group(errors)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn buckets_rise_with_latency_and_bound_it_within_a_quarter() {
        let mut last = 0;
        for ns in [
            1u64,
            2,
            3,
            5,
            100,
            1_000,
            1_500,
            65_000,
            1_000_000,
            60_000_000_000,
        ] {
            let b = bucket(ns);
            assert!(b >= last, "{ns}");
            assert!(
                bucket_top(b) >= ns as f64,
                "{ns} under the top of its bucket"
            );
            assert!(
                bucket_top(b) <= ns as f64 * 1.2 + 2.0,
                "{ns}: {}",
                bucket_top(b)
            );
            last = b;
        }
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn threads_hand_over_in_batches_and_quantiles_come_from_the_difference() {
        let p = Arc::new(Progress::default());
        let mut a = Pending::new(p.clone());
        let start = p.read();
        a.flush(0);
        // 99 fast answers and one slow, within 200 ms: nothing handed over yet.
        for i in 0..99 {
            a.ok(10_000, 1 + i);
        }
        a.ok(5_000_000, 150);
        a.error(151);
        assert_eq!(p.read().ok, 0);
        // Time passes: the next event hands everything over.
        a.ok(10_000, FLUSH_NS + 1);
        let r = p.read();
        assert_eq!((r.ok, r.errors), (101, 1));
        let p50 = r.quantile_since(&start, 0.5).unwrap();
        assert!((10_000.0..12_000.0).contains(&p50), "{p50}");
        let max = r.quantile_since(&start, 1.0).unwrap();
        assert!((5_000_000.0..6_000_000.0).contains(&max), "{max}");
        assert_eq!(r.quantile_since(&r, 0.99), None);
        let at = At {
            secs: 2.0,
            of: 10.0,
            warmup: false,
        };
        let text = line(&r, &start, &start, 1.0, at);
        assert!(text.contains("2s of 10s"), "{text}");
        assert!(
            text.contains("101/s answered") && text.contains("1 errors"),
            "{text}"
        );
    }
}
