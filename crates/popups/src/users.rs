//! Per-user state in memory: for every user seen lately, their state per popup. Sharded
//! behind short locks (a user's requests may arrive on any worker). A user not in memory is
//! loaded from the database by the loader thread, never by a worker: the first request parks
//! until the load is in, and the user then stays (with no state, for a user the database does
//! not know: the negative cache). Bounded by `popups.max_users`: those idle longest are
//! dropped, which is safe because everything they did is in the database or in the queue the
//! loader reads through.
//!
//! Beside it, the known set: a 64-bit hash of every user who has state anywhere (read from the
//! database once at start, then kept as users get state). Once it is complete, a user outside
//! it is new and starts with no state at once: no query, no wait. A hash collision only costs
//! one needless query.

use std::hash::BuildHasher;
use std::mem::size_of;
use std::sync::atomic::{AtomicBool, Ordering};

use hashbrown::hash_table::Entry as TableEntry;
use hashbrown::HashTable;
use hotpath_store::Counter;
use parking_lot::Mutex;
use smallvec::SmallVec;

use crate::decide::Seen;
use crate::user_id::UserId;

const SHARDS: usize = 64;
/// Seconds after a change during which a user is never dropped: the change may still be on
/// its way from the worker's journal into the store's queue.
const SETTLE_SECS: u32 = 3;

/// A user's state per popup id: one inline (most users have seen one popup, if any), more on
/// the heap.
pub type SeenList = SmallVec<[(u32, Seen); 1]>;

/// One user's state.
#[derive(Debug, Default, Clone)]
pub struct UserState {
    /// Per popup id.
    pub seen: SeenList,
    /// Process second of the last request.
    pub touched: u32,
    /// Process second of the last change (0: none since it came into memory).
    pub changed: u32,
}

impl UserState {
    /// The state for popup `id`, if the user has any (decisions take the whole list).
    #[cfg(test)]
    pub fn get(&self, id: u32) -> Option<Seen> {
        self.seen.iter().find(|(p, _)| *p == id).map(|(_, s)| *s)
    }

    /// The state for popup `id`, made if missing.
    pub fn entry(&mut self, id: u32) -> &mut Seen {
        let i = match self.seen.iter().position(|(p, _)| *p == id) {
            Some(i) => i,
            None => {
                self.seen.push((id, Seen::default()));
                self.seen.len() - 1
            }
        };
        &mut self.seen[i].1
    }
}

enum Slot {
    Ready(UserState),
    /// Being loaded; these workers have requests parked on it.
    Loading(Vec<u16>),
    /// The load failed; requests get an error until this process second.
    Failed(u32),
}

/// One user in the table.
struct Entry {
    key: UserId,
    slot: Slot,
}

impl Entry {
    /// Heap bytes the entry holds besides its place in the table.
    fn heap(&self) -> usize {
        self.key.heap()
            + match &self.slot {
                Slot::Ready(s) if s.seen.spilled() => s.seen.capacity() * size_of::<(u32, Seen)>(),
                Slot::Ready(_) | Slot::Failed(_) => 0,
                Slot::Loading(w) => w.capacity() * size_of::<u16>(),
            }
    }
}

/// Table bytes per entry (the entry and hashbrown's control byte).
const ENTRY_BYTES: usize = size_of::<Entry>() + 1;

#[derive(Default)]
struct Shard {
    map: HashTable<Entry>,
    heap: usize,
    /// Hashes of the users of this shard with state anywhere (the hash is its own hash).
    known: HashTable<u64>,
}

/// Adds hash `h` to a known set.
fn know(known: &mut HashTable<u64>, h: u64) {
    if let TableEntry::Vacant(v) = known.entry(h, |&k| k == h, |&k| k) {
        v.insert(h);
    }
}

/// What a lookup found.
#[derive(Debug, PartialEq, Eq)]
pub enum Found<R> {
    /// The state is in memory; the closure ran on it.
    Ready(R),
    /// Not in memory: queue a load (this worker now waits on it).
    Load,
    /// A load is under way (this worker now waits on it too).
    Loading,
    /// The last load failed a moment ago.
    Failed,
}

/// The user table.
pub struct Users {
    shards: Box<[Mutex<Shard>]>,
    hasher: hashbrown::DefaultHashBuilder,
    /// Users dropped to stay under the cap.
    pub evicted: Counter,
    /// The known set holds every user with state in the database.
    known_complete: AtomicBool,
    /// New users started without a query.
    pub fresh: Counter,
}

impl Default for Users {
    fn default() -> Self {
        Users {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            hasher: hashbrown::DefaultHashBuilder::default(),
            evicted: Counter::default(),
            known_complete: AtomicBool::new(false),
            fresh: Counter::default(),
        }
    }
}

impl Users {
    /// The user's hash, computed once per call: it picks the shard (from bits the table
    /// itself does not use for placing entries), finds the entry and is the known set's key.
    fn hash(&self, user: &[u8]) -> u64 {
        self.hasher.hash_one(user)
    }

    fn shard(&self, user: &str) -> (&Mutex<Shard>, u64) {
        let h = self.hash(user.as_bytes());
        (&self.shards[((h >> 32) as usize) % SHARDS], h)
    }

    /// The table's entry for `user` (hash `h`).
    fn entry<'a>(
        &self,
        map: &'a mut HashTable<Entry>,
        user: &str,
        h: u64,
    ) -> TableEntry<'a, Entry> {
        map.entry(
            h,
            |e| e.key.as_bytes() == user.as_bytes(),
            |e| self.hash(e.key.as_bytes()),
        )
    }

    /// Adds a user with state in the database to the known set.
    pub fn add_known(&self, user: &str) {
        let (shard, h) = self.shard(user);
        know(&mut shard.lock().known, h);
    }

    /// Marks the known set complete: users outside it are new from now on.
    pub fn known_complete(&self) {
        self.known_complete.store(true, Ordering::Release);
    }

    /// Users in the known set.
    pub fn known(&self) -> usize {
        self.shards.iter().map(|s| s.lock().known.len()).sum()
    }

    /// Runs `f` on the user's state when it is in memory (at process second `now`, with
    /// `changed` telling whether `f` changed it); otherwise records that `worker` waits
    /// for it and says whether a load must be queued.
    pub fn with<R>(
        &self,
        user: &str,
        worker: u16,
        now: u32,
        f: impl FnOnce(&mut UserState) -> (R, bool),
    ) -> Found<R> {
        let (shard, h) = self.shard(user);
        let mut shard = shard.lock();
        let shard = &mut *shard;
        // One lookup: the entry found, or the one made for a user not in memory.
        let entry = match self.entry(&mut shard.map, user, h) {
            TableEntry::Occupied(o) => o.into_mut(),
            TableEntry::Vacant(v) => {
                let slot = if self.known_complete.load(Ordering::Acquire)
                    && shard.known.find(h, |&k| k == h).is_none()
                {
                    // New: nothing to load.
                    self.fresh.add(1);
                    Slot::Ready(UserState::default())
                } else {
                    Slot::Failed(0)
                };
                let entry = Entry {
                    key: UserId::new(user),
                    slot,
                };
                shard.heap += entry.heap();
                v.insert(entry).into_mut()
            }
        };
        match &mut entry.slot {
            Slot::Ready(state) => {
                let before = state.seen.spilled().then(|| state.seen.capacity());
                state.touched = now;
                let (r, changed) = f(state);
                if changed {
                    if state.changed == 0 {
                        // First change in memory: the user may be new to the known set.
                        know(&mut shard.known, h);
                    }
                    state.changed = now.max(1);
                }
                let after = state.seen.spilled().then(|| state.seen.capacity());
                if before != after {
                    shard.heap += after.unwrap_or(0) * size_of::<(u32, Seen)>();
                    shard.heap -= before.unwrap_or(0) * size_of::<(u32, Seen)>();
                }
                Found::Ready(r)
            }
            Slot::Loading(waiters) => {
                if !waiters.contains(&worker) {
                    let before = waiters.capacity();
                    waiters.push(worker);
                    shard.heap += (waiters.capacity() - before) * size_of::<u16>();
                }
                Found::Loading
            }
            Slot::Failed(until) if now < *until => Found::Failed,
            // Not in memory (or its failed load may be tried again): load it.
            failed => {
                *failed = Slot::Loading(vec![worker]);
                shard.heap += size_of::<u16>();
                Found::Load
            }
        }
    }

    /// Forgets a load that could not be queued (the queue is full).
    pub fn cancel(&self, user: &str) {
        let (shard, h) = self.shard(user);
        let mut shard = shard.lock();
        let shard = &mut *shard;
        if let TableEntry::Occupied(o) = self.entry(&mut shard.map, user, h) {
            if let Slot::Loading(_) = o.get().slot {
                let (old, _) = o.remove();
                shard.heap -= old.heap();
            }
        }
    }

    /// Stores a loaded user's state (or the failure, until process second `failed_until`)
    /// and returns the workers waiting for it.
    pub fn loaded(&self, user: &str, state: Result<UserState, u32>) -> Vec<u16> {
        let (shard, h) = self.shard(user);
        let mut shard = shard.lock();
        let shard = &mut *shard;
        let slot = match state {
            Ok(s) => Slot::Ready(s),
            Err(until) => Slot::Failed(until),
        };
        match self.entry(&mut shard.map, user, h) {
            TableEntry::Occupied(mut o) => {
                let entry = o.get_mut();
                shard.heap -= entry.heap();
                let old = std::mem::replace(&mut entry.slot, slot);
                shard.heap += entry.heap();
                match old {
                    Slot::Loading(w) => w,
                    // Not loading (cannot happen: only the loader replaces a loading slot);
                    // the state just loaded is as new as any.
                    _ => Vec::new(),
                }
            }
            TableEntry::Vacant(v) => {
                let entry = Entry {
                    key: UserId::new(user),
                    slot,
                };
                shard.heap += entry.heap();
                v.insert(entry);
                Vec::new()
            }
        }
    }

    /// Users in memory (with state or known to have none).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().map.len()).sum()
    }

    /// Whether no user is in memory.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes the table takes: every bucket hashbrown allocated plus what entries hold on
    /// the heap.
    pub fn bytes(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let s = s.lock();
                s.map.capacity() * ENTRY_BYTES
                    + s.heap
                    + s.known.capacity() * (size_of::<u64>() + 1)
            })
            .sum()
    }

    /// Drops users idle longest until at most `max` are in memory (10 % below it, so this
    /// runs rarely), never one changed in the last seconds or one being loaded. Returns
    /// how many were dropped.
    pub fn evict(&self, max: usize, now: u32) -> usize {
        if self.len() <= max {
            return 0;
        }
        let keep = max - max / 10;
        let per_shard = keep / SHARDS;
        let mut dropped = 0;
        let mut touched = Vec::new();
        for shard in self.shards.iter() {
            let mut shard = shard.lock();
            let excess = shard.map.len().saturating_sub(per_shard);
            if excess == 0 {
                continue;
            }
            touched.clear();
            touched.extend(shard.map.iter().filter_map(|e| match &e.slot {
                Slot::Ready(u) if now.saturating_sub(u.changed) >= SETTLE_SECS => Some(u.touched),
                Slot::Failed(_) => Some(0),
                _ => None,
            }));
            if touched.is_empty() {
                continue;
            }
            let nth = excess.min(touched.len()) - 1;
            let (_, cutoff, _) = touched.select_nth_unstable(nth);
            let cutoff = *cutoff;
            // Everyone idle since before the cutoff goes (fewer than `excess`), then users
            // idle since exactly the cutoff until `excess` are gone.
            let below = touched.iter().filter(|&&t| t < cutoff).count();
            let mut ties = excess.saturating_sub(below);
            let mut gone = 0;
            let mut freed = 0;
            shard.map.retain(|e| {
                let doomed = match &e.slot {
                    Slot::Ready(u) if now.saturating_sub(u.changed) >= SETTLE_SECS => {
                        u.touched < cutoff || (u.touched == cutoff && ties > 0)
                    }
                    Slot::Failed(_) => true,
                    _ => false,
                };
                if doomed {
                    if let Slot::Ready(u) = &e.slot {
                        if u.touched == cutoff {
                            ties -= 1;
                        }
                    }
                    gone += 1;
                    freed += e.heap();
                }
                !doomed
            });
            shard.heap -= freed;
            dropped += gone;
            shard.map.shrink_to(0, |e| self.hash(e.key.as_bytes()));
        }
        self.evicted.add(dropped as u64);
        dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(state: &mut UserState) -> ((), bool) {
        state.entry(1).shows += 1;
        ((), true)
    }

    #[test]
    fn a_user_loads_once_and_waiters_are_told() {
        let users = Users::default();
        assert_eq!(users.with("alice", 0, 10, shown), Found::Load);
        assert_eq!(users.with("alice", 1, 10, shown), Found::Loading);
        assert_eq!(users.with("alice", 1, 10, shown), Found::Loading);
        let mut waiters = users.loaded("alice", Ok(UserState::default()));
        waiters.sort();
        assert_eq!(waiters, [0, 1]);
        assert_eq!(users.with("alice", 0, 11, shown), Found::Ready(()));
        assert_eq!(
            users.with("alice", 0, 11, |s| (s.get(1).unwrap().shows, false)),
            Found::Ready(1)
        );
        // A failed load answers errors for a moment, then loads again.
        assert_eq!(users.with("bob", 0, 10, shown), Found::Load);
        assert_eq!(users.loaded("bob", Err(12)), [0]);
        assert_eq!(users.with("bob", 0, 11, shown), Found::Failed);
        assert_eq!(users.with("bob", 0, 12, shown), Found::Load);
        users.cancel("bob");
        assert_eq!(users.with("bob", 0, 12, shown), Found::Load);
        assert_eq!(users.len(), 2);
        assert!(users.bytes() > 2 * ENTRY_BYTES);
    }

    #[test]
    fn once_the_known_set_is_complete_new_users_need_no_load() {
        let users = Users::default();
        users.add_known("old");
        assert_eq!(
            users.with("new", 0, 1, |_| ((), false)),
            Found::Load,
            "not complete yet"
        );
        users.cancel("new");
        users.known_complete();
        assert_eq!(
            users.with("new", 0, 1, |s| (s.seen.len(), false)),
            Found::Ready(0)
        );
        assert_eq!(
            users.with("old", 0, 1, shown),
            Found::Load,
            "known: its state is loaded"
        );
        // A user who gets state joins the known set, so after eviction it is loaded again.
        assert_eq!(users.with("fresh", 0, 1, shown), Found::Ready(()));
        assert_eq!(users.known(), 2);
        assert_eq!(users.evict(1000, 100), 0);
        assert_eq!(users.fresh.get(), 2);
    }

    #[test]
    fn ids_inline_and_on_the_heap_are_told_apart() {
        let users = Users::default();
        users.known_complete();
        // Up to 22 bytes an id is kept in the entry; longer ones on the heap.
        let ids = ["", "a", &"a".repeat(22), &"a".repeat(23), &"é".repeat(150)];
        for (i, id) in ids.iter().enumerate() {
            let shows = u32::try_from(i).unwrap() + 1;
            for _ in 0..shows {
                assert_eq!(users.with(id, 0, 5, shown), Found::Ready(()));
            }
        }
        let empty = users.bytes();
        for (i, id) in ids.iter().enumerate() {
            let shows = users.with(id, 0, 6, |s| (s.get(1).unwrap().shows, false));
            assert_eq!(shows, Found::Ready(u32::try_from(i).unwrap() + 1), "{id:?}");
        }
        assert_eq!(users.len(), ids.len());
        // Two more popups seen spill a user's list to the heap, and the bytes say so.
        users.with("a", 0, 7, |s| {
            s.entry(2);
            s.entry(3);
            ((), true)
        });
        assert!(users.bytes() >= empty + 3 * size_of::<(u32, Seen)>());
    }

    #[test]
    fn eviction_drops_the_idle_and_spares_the_recently_changed_and_loading() {
        let users = Users::default();
        for i in 0..3000u32 {
            let name = format!("u{i}");
            assert_eq!(users.with(&name, 0, 0, shown), Found::Load);
            users.loaded(&name, Ok(UserState::default()));
            // Users 0..1000 idle since second 1; the rest used at 100; 2900.. changed at 100.
            let at = if i < 1000 { 1 } else { 100 };
            users.with(&name, 0, at, |_| ((), i >= 2900));
        }
        assert_eq!(users.with("loading", 0, 100, shown), Found::Load);
        let before = users.bytes();
        let dropped = users.evict(2000, 101);
        assert!(dropped >= 1001, "dropped {dropped}");
        assert!(users.len() <= 2000, "{}", users.len());
        assert!(users.bytes() < before);
        for i in (2900..3000).step_by(7) {
            assert!(
                matches!(
                    users.with(&format!("u{i}"), 0, 101, |_| ((), false)),
                    Found::Ready(())
                ),
                "u{i} changed a moment ago and stays"
            );
        }
        assert_eq!(users.with("loading", 1, 101, shown), Found::Loading);
        let idle_left = (0..1000)
            .filter(|i| {
                matches!(
                    users.with(&format!("u{i}"), 0, 102, |_| ((), false)),
                    Found::Ready(())
                )
            })
            .count();
        assert!(idle_left < 100, "the idle go first: {idle_left} left");
        assert_eq!(users.evict(10_000, 200), 0);
    }
}
