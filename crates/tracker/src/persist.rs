//! What the tracker keeps across restarts, through the write-behind store: completed downloads
//! (journaled by the handlers before the answer, see [`crate::handler`]) and, from here, every
//! swarm's seeders and leechers on an interval (`tracker.snapshot_interval_secs`; snapshots are
//! not journaled: a crash loses at most one interval of them).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hotpath_store::Change;

use crate::Shared;

/// Changes handed to the store at a time, so a snapshot of many torrents needs little memory.
const CHUNK: usize = 4096;

/// Hands the store every swarm's counts (torrents with peers only) every
/// `tracker.snapshot_interval_secs`, until `stop`.
pub fn snapshotter(shared: Arc<Shared>, stop: Arc<AtomicBool>) {
    let Some(db) = shared.persist.clone() else {
        return;
    };
    let every = Duration::from_secs(u64::from(shared.cfg.snapshot_interval_secs));
    let mut due = Instant::now() + every;
    while !stop.load(Ordering::Acquire) {
        if Instant::now() < due {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        due += every;
        let at = (shared.unix_base + i64::from(hotpath_service::process_secs())) as u32;
        let mut changes = Vec::with_capacity(CHUNK);
        shared.store.for_each(&mut |hash, c| {
            if c.seeders + c.leechers == 0 {
                return;
            }
            changes.push(Change::Torrent {
                info_hash: *hash,
                completed: 0,
                seeders: c.seeders,
                leechers: c.leechers,
                at,
            });
            if changes.len() == CHUNK {
                db.submit(&changes);
                changes.clear();
            }
        });
        db.submit(&changes);
    }
}
