//! The tracker's side of the swarm exchange between cluster nodes (see
//! [`hotpath_wire::exchange`] for the messages and the `hotpath-cluster` crate for Redis):
//! workers append a delta per accepted announce to an outbox of their own, without waiting
//! for anything; the publisher takes the outboxes every `cluster.publish_ms`; deltas from
//! other nodes are merged into the swarm table.
//!
//! Every outbox is bounded: past `cluster.max_pending_deltas` in all, new deltas are dropped
//! and counted (the other nodes then learn of those peers at their next announce).

use std::sync::atomic::{AtomicUsize, Ordering};

use hotpath_metrics::Counter;
use hotpath_wire::exchange::Delta;
use parking_lot::Mutex;

use crate::table::{Merged, SwarmTable};

/// Outboxes, so workers rarely meet on one lock.
const STRIPES: usize = 16;

/// The deltas this node has yet to publish.
#[derive(Debug)]
pub struct Exchange {
    /// This node's id (the origin of its deltas).
    pub origin: u8,
    outboxes: Box<[Mutex<Vec<Delta>>]>,
    /// Deltas held in all outboxes at most.
    cap: usize,
    pending: AtomicUsize,
    /// Deltas queued by workers.
    pub queued: Counter,
    /// Deltas dropped because the outboxes were full.
    pub dropped: Counter,
}

impl Exchange {
    /// Outboxes for node `origin`, holding `max_pending` deltas in all.
    pub fn new(origin: u8, max_pending: usize) -> Self {
        Self {
            origin,
            outboxes: (0..STRIPES).map(|_| Mutex::new(Vec::new())).collect(),
            cap: max_pending,
            pending: AtomicUsize::new(0),
            queued: Counter::default(),
            dropped: Counter::default(),
        }
    }

    /// Queues a delta from worker `worker`; drops it (counted) when the outboxes are full.
    pub fn push(&self, worker: usize, d: Delta) {
        if self.pending.fetch_add(1, Ordering::Relaxed) >= self.cap {
            self.pending.fetch_sub(1, Ordering::Relaxed);
            self.dropped.add(1);
            return;
        }
        self.outboxes[worker % STRIPES].lock().push(d);
        self.queued.add(1);
    }

    /// Moves every queued delta to the end of `into`.
    pub fn take(&self, into: &mut Vec<Delta>) {
        for o in self.outboxes.iter() {
            let mut o = o.lock();
            self.pending.fetch_sub(o.len(), Ordering::Relaxed);
            into.append(&mut o);
        }
    }

    /// Puts back deltas that could not be published (a Redis master down), as room allows;
    /// returns how many were dropped (and counts them).
    pub fn requeue(&self, deltas: &mut Vec<Delta>) -> usize {
        let room = self
            .cap
            .saturating_sub(self.pending.load(Ordering::Relaxed));
        let drop = deltas.len().saturating_sub(room);
        // The oldest go first: the newer ones carry the peers' latest state.
        deltas.drain(..drop);
        self.dropped.add(drop as u64);
        self.pending.fetch_add(deltas.len(), Ordering::Relaxed);
        self.outboxes[0].lock().append(deltas);
        drop
    }

    /// Deltas waiting to be published.
    pub fn pending(&self) -> usize {
        self.pending.load(Ordering::Relaxed)
    }
}

/// What applying other nodes' deltas did, by result.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    /// Peers added.
    pub added: u64,
    /// Peers updated.
    pub updated: u64,
    /// Peers removed by tombstones.
    pub removed: u64,
    /// Deltas older than what the table holds, already expired, or from the future.
    pub stale: u64,
    /// Deltas a cap refused.
    pub full: u64,
}

impl Applied {
    fn count(&mut self, m: Merged) {
        match m {
            Merged::Added => self.added += 1,
            Merged::Updated => self.updated += 1,
            Merged::Removed => self.removed += 1,
            Merged::Stale => self.stale += 1,
            Merged::Full => self.full += 1,
        }
    }
}

/// Merges a delta from node `origin` into `table` at process second `now` (unix second
/// `unix_now`): its time becomes a process second; a delta older than `timeout`, or more
/// than `skew` seconds ahead of this node's clock, is stale.
pub fn apply(
    table: &dyn SwarmTable,
    d: &Delta,
    origin: u8,
    (now, unix_now): (u32, u32),
    timeout: u16,
    skew: u32,
    applied: &mut Applied,
) {
    if d.at > unix_now.saturating_add(skew) {
        applied.count(Merged::Stale);
        return;
    }
    // A peer seen a little after this node's clock (skew) counts as seen now.
    let age = unix_now.saturating_sub(d.at);
    if age >= u32::from(timeout) {
        applied.count(Merged::Stale);
        return;
    }
    // Process seconds wrap (ages are taken with wrapping arithmetic, and the timeout is far
    // below the wrap), so a peer seen before this process started is seen "before 0".
    let now = now as u16;
    let seen = now.wrapping_sub(age as u16);
    applied.count(table.merge(d, origin, seen, now));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{Caps, Table};

    #[test]
    fn outboxes_are_bounded_and_requeue_keeps_the_newest() {
        let x = Exchange::new(1, 3);
        for i in 0..5u32 {
            x.push(i as usize, Delta::v4([1; 20], [127, 0, 0, 1, 0, 1], i));
        }
        assert_eq!((x.queued.get(), x.dropped.get(), x.pending()), (3, 2, 3));
        let mut out = Vec::new();
        x.take(&mut out);
        assert_eq!(out.len(), 3);
        assert_eq!(x.pending(), 0);
        x.push(0, Delta::v4([2; 20], [127, 0, 0, 1, 0, 2], 9));
        // Room for two of the three put back: the oldest goes.
        assert_eq!(x.requeue(&mut out), 1);
        let mut again = Vec::new();
        x.take(&mut again);
        let ats: Vec<u32> = again.iter().map(|d| d.at).collect();
        assert_eq!(ats.len(), 3);
        assert!(ats.contains(&9) && !ats.contains(&0));
    }

    #[test]
    fn apply_turns_times_into_ages_and_refuses_the_old_and_the_future() {
        let t = Table::<0, 1>::new(1, Caps::LARGE).with_origin(1);
        let mut a = Applied::default();
        let d = Delta::v4([3; 20], [127, 0, 0, 2, 0, 1], 10_000);
        // Now: process second 500, unix 10_010; timeout 100.
        apply(&t, &d, 2, (500, 10_010), 100, 5, &mut a);
        assert_eq!(a.added, 1);
        let old = Delta { at: 9_900, ..d };
        apply(&t, &old, 2, (500, 10_010), 100, 5, &mut a);
        let future = Delta { at: 10_020, ..d };
        apply(&t, &future, 2, (500, 10_010), 100, 5, &mut a);
        assert_eq!(a.stale, 2);
        // A little ahead (within the skew) counts as now.
        let ahead = Delta { at: 10_012, ..d };
        apply(&t, &ahead, 2, (500, 10_010), 100, 5, &mut a);
        assert_eq!(a.updated, 1);
        assert_eq!(t.scrape(&[3; 20]).leechers, 1);
        // A peer last seen before this process started (a node started 10 s ago, a peer
        // seen 50 s ago) is kept, and expires when its time comes.
        let young = Table::<0, 1>::new(1, Caps::LARGE).with_origin(1);
        let old_peer = Delta { at: 9_960, ..d };
        apply(&young, &old_peer, 2, (10, 10_010), 100, 5, &mut a);
        assert_eq!(a.added, 2);
        young.sweep(0, 59, 100);
        assert_eq!(young.totals().peers, 1);
        young.sweep(0, 61, 100);
        assert_eq!(young.totals().peers, 0);
    }
}
