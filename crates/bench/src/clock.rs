//! The run's clock: nanoseconds since one shared start instant, and the schedule every load
//! thread follows (warm-up, measured period, end).

use std::time::{Duration, Instant};

/// The shared start and the phases of a run.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    epoch: Instant,
    /// End of the warm-up (ns since the start).
    pub measure_from: u64,
    /// End of the run (ns since the start).
    pub end: u64,
}

impl Schedule {
    /// A schedule starting now.
    pub fn new(warmup: Duration, duration: Duration) -> Self {
        let measure_from = warmup.as_nanos() as u64;
        Self {
            epoch: Instant::now(),
            measure_from,
            end: measure_from + duration.as_nanos() as u64,
        }
    }

    /// Nanoseconds since the start.
    #[inline]
    pub fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// The instant `t` ns after the start.
    pub fn instant(&self, t: u64) -> Instant {
        self.epoch + Duration::from_nanos(t)
    }
}

/// The open model's timetable for one connection or thread: request k is due at
/// `first + k * interval`.
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    /// Time of the next request due (ns since the start).
    pub next: u64,
    /// Nanoseconds between requests.
    pub interval: u64,
}

impl Pace {
    /// `share` of the whole `rate` (requests/s), starting at `offset` ns.
    pub fn new(rate: f64, share: f64, offset: u64) -> Self {
        let interval = (1e9 / (rate * share)).max(1.0) as u64;
        Self {
            next: offset,
            interval,
        }
    }

    /// Takes the next due time and moves on.
    #[inline]
    pub fn take(&mut self) -> u64 {
        let t = self.next;
        self.next += self.interval;
        t
    }

    /// Requests due before `end` that were never taken.
    pub fn missed(&self, end: u64) -> u64 {
        if self.next >= end {
            0
        } else {
            (end - self.next).div_ceil(self.interval)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pace_counts_missed_slots() {
        let mut p = Pace::new(1000.0, 0.5, 0); // 500/s: one every 2 ms
        assert_eq!(p.interval, 2_000_000);
        assert_eq!(p.take(), 0);
        assert_eq!(p.take(), 2_000_000);
        assert_eq!(p.missed(4_000_000), 0);
        assert_eq!(p.missed(4_000_001), 1);
        assert_eq!(p.missed(10_000_000), 3);
    }
}
