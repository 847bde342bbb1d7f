//! What one load thread records: HdrHistograms of latency (from the intended send time, so a
//! stalled server cannot hide behind a waiting load generator) and of service time (from the
//! actual send), responses and errors per second, errors by class. Threads record alone and
//! are merged at the end; nothing is shared while the load runs.

use std::collections::BTreeMap;

use std::sync::Arc;

use hdrhistogram::Histogram;

use crate::progress::{Pending, Progress};

/// Longest latency recorded exactly; longer ones are clamped to it (one minute).
pub const MAX_LATENCY_NS: u64 = 60_000_000_000;
/// Most distinct error classes kept; the rest are counted under "other".
pub const MAX_ERROR_CLASSES: usize = 64;
/// A request sent this much after its intended time counts as late (open model).
pub const LATE_AFTER_NS: u64 = 1_000_000;

fn histogram(sigfig: u8) -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_NS, sigfig).expect("valid histogram bounds")
}

/// One second of the measured period.
#[derive(Debug, Clone)]
pub struct Second {
    /// Responses completed in this second.
    pub responses: u64,
    /// Errors in this second.
    pub errors: u64,
    /// Latencies completed in this second (2 significant digits).
    pub latency: Histogram<u64>,
}

impl Second {
    fn new() -> Self {
        Self {
            responses: 0,
            errors: 0,
            latency: histogram(2),
        }
    }
}

/// One thread's record. Times are nanoseconds since the run's start; anything that ends
/// before `measure_from` (the warm-up) or after `measure_to` is left out.
#[derive(Debug, Clone)]
pub struct Recorder {
    measure_from: u64,
    measure_to: u64,
    /// Latency from the intended send time (coordinated-omission corrected).
    pub latency: Histogram<u64>,
    /// Latency from the actual send time (what a closed-loop tool would report).
    pub service: Histogram<u64>,
    /// Per-second figures.
    pub seconds: Vec<Second>,
    /// Errors by class.
    pub errors: BTreeMap<String, u64>,
    /// Requests sent in the measured period. Each ends as one of `ok` or `failed`, or is
    /// still in flight when the run ends: outcomes are counted by their request's send time.
    pub sent: u64,
    /// Requests sent in the measured period and answered without error.
    pub ok: u64,
    /// Requests sent in the measured period that ended in an error.
    pub failed: u64,
    /// Errors in the measured period that end no request sent (an ICMP refusal, an answer
    /// to no request in flight).
    pub stray: u64,
    /// Requests sent more than [`LATE_AFTER_NS`] after their intended time.
    pub late: u64,
    /// Requests whose intended time came before the end but that were never sent.
    pub unsent: u64,
    /// Connections opened (HTTP), from the first (warm-up included).
    pub connects: u64,
    /// Kept-alive connections the server closed while a request was being sent on them; the
    /// request went again on a new connection.
    pub reconnects: u64,
    /// Counts for the live progress line, when one is shown.
    progress: Option<Pending>,
}

impl Recorder {
    /// A recorder for the period `measure_from..measure_to` (ns since the start).
    pub fn new(measure_from: u64, measure_to: u64) -> Self {
        Self {
            measure_from,
            measure_to,
            latency: histogram(3),
            service: histogram(3),
            seconds: Vec::new(),
            errors: BTreeMap::new(),
            sent: 0,
            ok: 0,
            failed: 0,
            stray: 0,
            late: 0,
            unsent: 0,
            connects: 0,
            reconnects: 0,
            progress: None,
        }
    }

    /// The same recorder, handing its counts over to `progress` too (when given).
    pub fn with_progress(mut self, progress: Option<Arc<Progress>>) -> Self {
        self.progress = progress.map(Pending::new);
        self
    }

    /// Whether `t` falls in the measured period.
    #[inline]
    pub fn measured(&self, t: u64) -> bool {
        t >= self.measure_from && t < self.measure_to
    }

    fn second(&mut self, now: u64) -> &mut Second {
        let i = ((now - self.measure_from) / 1_000_000_000) as usize;
        while self.seconds.len() <= i {
            self.seconds.push(Second::new());
        }
        &mut self.seconds[i]
    }

    /// Counts a request sent at `sent` that was meant to go at `intended`.
    #[inline]
    pub fn sent(&mut self, intended: u64, sent: u64) {
        if self.measured(sent) {
            self.sent += 1;
            if sent.saturating_sub(intended) > LATE_AFTER_NS {
                self.late += 1;
            }
        }
    }

    /// Records a successful response, completed at `now`, to a request sent at `sent` that
    /// was meant to go at `intended`: in the totals when it was sent in the measured period,
    /// in the second it completed in when that one is.
    #[inline]
    pub fn ok(&mut self, intended: u64, sent: u64, now: u64) {
        let corrected = now.saturating_sub(intended).clamp(1, MAX_LATENCY_NS);
        if let Some(p) = &mut self.progress {
            p.ok(corrected, now);
        }
        if self.measured(sent) {
            let service = now.saturating_sub(sent).clamp(1, MAX_LATENCY_NS);
            self.ok += 1;
            // In range by the clamp, so recording cannot fail.
            let _ = self.latency.record(corrected);
            let _ = self.service.record(service);
        }
        if self.measured(now) {
            let s = self.second(now);
            s.responses += 1;
            let _ = s.latency.record(corrected);
        }
    }

    /// Records that the request sent at `sent` ended in an error of `class` at `now`.
    pub fn failed(&mut self, class: &str, sent: u64, now: u64) {
        if let Some(p) = &mut self.progress {
            p.error(now);
        }
        if self.measured(now) {
            self.second(now).errors += 1;
        }
        if self.measured(sent) {
            self.failed += 1;
            self.class(class);
        }
    }

    /// Records an error of `class` at `now` that ends no request sent.
    pub fn error(&mut self, class: &str, now: u64) {
        if let Some(p) = &mut self.progress {
            p.error(now);
        }
        if !self.measured(now) {
            return;
        }
        self.second(now).errors += 1;
        self.stray += 1;
        self.class(class);
    }

    fn class(&mut self, class: &str) {
        if let Some(n) = self.errors.get_mut(class) {
            *n += 1;
        } else if self.errors.len() < MAX_ERROR_CLASSES {
            self.errors.insert(class.to_owned(), 1);
        } else {
            *self.errors.entry("other".to_owned()).or_insert(0) += 1;
        }
    }

    /// Counts a connection opened (warm-up included: the connections a kept-alive load
    /// opens at its start are connections it opened).
    pub fn connected(&mut self) {
        self.connects += 1;
    }

    /// Counts a request sent again because the server closed its kept-alive connection.
    pub fn reconnected(&mut self, now: u64) {
        if self.measured(now) {
            self.reconnects += 1;
        }
    }

    /// Adds another thread's record to this one.
    pub fn merge(&mut self, other: &Recorder) {
        let _ = self.latency.add(&other.latency);
        let _ = self.service.add(&other.service);
        for (i, s) in other.seconds.iter().enumerate() {
            while self.seconds.len() <= i {
                self.seconds.push(Second::new());
            }
            let mine = &mut self.seconds[i];
            mine.responses += s.responses;
            mine.errors += s.errors;
            let _ = mine.latency.add(&s.latency);
        }
        for (class, n) in &other.errors {
            *self.errors.entry(class.clone()).or_insert(0) += n;
        }
        self.sent += other.sent;
        self.ok += other.ok;
        self.failed += other.failed;
        self.stray += other.stray;
        self.late += other.late;
        self.unsent += other.unsent;
        self.connects += other.connects;
        self.reconnects += other.reconnects;
    }

    /// Errors of every class.
    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }

    /// Requests sent in the measured period and not ended when the run ended.
    pub fn in_flight(&self) -> u64 {
        self.sent.saturating_sub(self.ok + self.failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const S: u64 = 1_000_000_000;

    #[test]
    fn outcomes_count_by_their_requests_send_time() {
        let mut r = Recorder::new(S, 3 * S);
        // Sent in the warm-up, answered in the period: the warm-up's, in no total; its
        // second still shows the answer.
        r.sent(S / 2, S / 2);
        r.ok(S / 2, S / 2, S + MS);
        r.failed("timeout", S / 2, S + 2 * MS);
        assert_eq!((r.sent, r.ok, r.failed, r.in_flight()), (0, 0, 0, 0));
        assert_eq!((r.seconds[0].responses, r.seconds[0].errors), (1, 1));
        assert!(r.errors.is_empty());
        // Sent in the period: answered, failed, or left in flight.
        for t in [S + 10 * MS, S + 20 * MS, S + 30 * MS, 3 * S - MS] {
            r.sent(t, t);
        }
        r.ok(S + 10 * MS, S + 10 * MS, S + 11 * MS);
        r.failed("http 5xx", S + 20 * MS, S + 21 * MS);
        r.error("answer to no request in flight", 2 * S);
        assert_eq!(
            (r.sent, r.ok, r.failed, r.in_flight(), r.stray),
            (4, 1, 1, 2, 1)
        );
        assert_eq!(r.error_count(), 2);
        // An answer after the period to a request sent in it counts; the second it came in
        // is not one of the period's.
        r.ok(3 * S - MS, 3 * S - MS, 3 * S + MS);
        assert_eq!((r.ok, r.in_flight()), (2, 1));
        assert_eq!(r.seconds.len(), 2);
    }

    #[test]
    fn percentiles_of_a_known_distribution() {
        let mut r = Recorder::new(0, 100 * S);
        // 1..=1000 microseconds, once each.
        for i in 1..=1000u64 {
            r.ok(0, 0, i * 1000);
        }
        let p = |q: f64| r.latency.value_at_quantile(q) as f64 / 1000.0;
        assert!((p(0.5) - 500.0).abs() <= 1.0, "{}", p(0.5));
        assert!((p(0.99) - 990.0).abs() <= 1.0, "{}", p(0.99));
        assert!((p(1.0) - 1000.0).abs() <= 1.0);
        assert!((r.latency.mean() / 1000.0 - 500.5).abs() < 1.0);
        assert_eq!(r.ok, 1000);
    }

    #[test]
    fn warm_up_and_tail_are_left_out() {
        let mut r = Recorder::new(2 * S, 5 * S);
        r.sent(S, S);
        r.ok(S, S, S + MS);
        r.error("timeout", S);
        r.sent(3 * S, 3 * S);
        r.ok(3 * S, 3 * S, 3 * S + MS);
        r.error("timeout", 4 * S);
        r.ok(5 * S, 5 * S, 5 * S + MS);
        assert_eq!((r.sent, r.ok, r.error_count()), (1, 1, 1));
        assert_eq!(r.seconds.len(), 3);
        assert_eq!(r.seconds[1].responses, 1);
        assert_eq!(r.seconds[2].errors, 1);
    }

    /// Coordinated omission: a server that stalls for one second while requests are due every
    /// millisecond. The corrected latency (from the intended time) shows the stall for the
    /// requests that waited; the service time (from the actual send) does not.
    #[test]
    fn a_stall_shows_in_corrected_latency_only() {
        let mut r = Recorder::new(0, 100 * S);
        let mut now = 0;
        for k in 0..3000u64 {
            let intended = k * MS;
            let send = now.max(intended);
            r.sent(intended, send);
            // Every answer takes 100 us, except the one sent at 1 s, which takes a whole second.
            let took = if k == 1000 { S } else { 100_000 };
            now = send + took;
            r.ok(intended, send, now);
        }
        let corrected_p99 = r.latency.value_at_quantile(0.99);
        let service_p99 = r.service.value_at_quantile(0.99);
        assert!(service_p99 < MS, "service p99 {service_p99}");
        assert!(corrected_p99 > 500 * MS, "corrected p99 {corrected_p99}");
        assert!(r.latency.max() >= S);
        // The ~1000 requests due during the stall, and those queued behind them while the
        // backlog drained at 0.9 ms a request, were sent late: 1000 / (1 - 0.1) ~ 1111.
        assert!((1100..1120).contains(&r.late), "late {}", r.late);
    }

    #[test]
    fn merge_and_bounded_classes() {
        let mut a = Recorder::new(0, 10 * S);
        let mut b = Recorder::new(0, 10 * S);
        a.ok(0, 0, MS);
        b.ok(0, 0, 3 * S);
        for i in 0..100 {
            b.error(&format!("class {i}"), S);
        }
        a.merge(&b);
        assert_eq!(a.ok, 2);
        assert_eq!(a.seconds.len(), 4);
        assert_eq!(a.errors.len(), MAX_ERROR_CLASSES + 1);
        assert_eq!(a.errors["other"], 100 - MAX_ERROR_CLASSES as u64);
        assert_eq!(a.error_count(), 100);
    }
}
