//! A precise wake-up for the event loop. epoll's own timeout counts whole milliseconds, too
//! coarse for an open-model schedule with requests due every few microseconds, so the loops
//! arm a timerfd (nanosecond resolution) registered in the same poll instead.

use std::os::fd::{AsFd, AsRawFd};
use std::time::Duration;

use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};

use crate::clock::Schedule;

/// The token the alarm's readiness arrives with.
pub const ALARM: Token = Token(usize::MAX);

/// A one-shot timer on the loop's poll.
pub struct Alarm {
    fd: TimerFd,
    /// The time it is armed for (ns since the start), to skip re-arming for the same time.
    armed: u64,
}

impl Alarm {
    /// A disarmed alarm registered with `registry`.
    pub fn new(registry: &Registry) -> std::io::Result<Self> {
        let fd = TimerFd::new(
            ClockId::CLOCK_MONOTONIC,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )?;
        registry.register(
            &mut SourceFd(&fd.as_fd().as_raw_fd()),
            ALARM,
            Interest::READABLE,
        )?;
        Ok(Self { fd, armed: 0 })
    }

    /// Wakes the poll at `at` (ns since the start); at once if that has passed.
    pub fn arm(&mut self, at: u64, schedule: &Schedule) -> std::io::Result<()> {
        if at == self.armed {
            return Ok(());
        }
        self.armed = at;
        let left = at.saturating_sub(schedule.now()).max(1);
        self.fd.set(
            Expiration::OneShot(TimeSpec::from_duration(Duration::from_nanos(left))),
            TimerSetTimeFlags::empty(),
        )?;
        Ok(())
    }
}
