//! A registry of what a private tracker knows by a byte key: users by passkey, torrents by
//! info hash. Announces read it from every worker; the poller and the push API write it.
//!
//! Entries live in shards (each a hash table behind a short read-write lock) chosen by the
//! key's hash; a writers-only map from each entry's database id to its key's hash lets a row
//! whose key changed (a new passkey) move, and an entry be removed by id, without a second
//! copy of the key. Keys and ids are both unique: a key taken by another id moves to it.
//!
//! Owns: [`Registry`]. Must not: do I/O.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicUsize, Ordering};

use hashbrown::{DefaultHashBuilder, HashMap, HashTable};
use parking_lot::{Mutex, RwLock};

/// Shards of a registry (a power of two).
const SHARDS: usize = 64;

/// What an entry carries: at least its database id.
pub trait Entry: Copy + Send + Sync {
    /// The row's id in the site's database.
    fn id(&self) -> u32;
}

/// A key: the bytes it is found by.
pub trait Key: AsRef<[u8]> + Send + Sync + Sized {
    /// The key of these bytes.
    fn of(bytes: &[u8]) -> Self;
}

impl Key for Box<[u8]> {
    fn of(bytes: &[u8]) -> Self {
        bytes.into()
    }
}

impl Key for [u8; 20] {
    fn of(bytes: &[u8]) -> Self {
        let mut k = [0; 20];
        let n = bytes.len().min(20);
        k[..n].copy_from_slice(&bytes[..n]);
        k
    }
}

type Shard<K, V> = RwLock<HashTable<(K, V)>>;

/// Entries by key, and their keys by id.
pub struct Registry<K, V> {
    shards: Box<[Shard<K, V>]>,
    /// id -> hash of its key. Taken by writers only, before any shard.
    ids: Mutex<HashMap<u32, u64>>,
    hasher: DefaultHashBuilder,
    max: usize,
    len: AtomicUsize,
}

/// A registry holds as many entries as it may.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full;

impl<K: Key, V: Entry> Registry<K, V> {
    /// An empty registry of at most `max` entries.
    pub fn new(max: usize) -> Self {
        Registry {
            shards: (0..SHARDS).map(|_| RwLock::default()).collect(),
            ids: Mutex::default(),
            hasher: DefaultHashBuilder::default(),
            max,
            len: AtomicUsize::new(0),
        }
    }

    fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    fn shard(&self, hash: u64) -> &Shard<K, V> {
        &self.shards[(hash >> 58) as usize & (SHARDS - 1)]
    }

    /// The entry of `key`.
    pub fn get(&self, key: &[u8]) -> Option<V> {
        let h = self.hash(key);
        self.shard(h)
            .read()
            .find(h, |(k, _)| k.as_ref() == key)
            .map(|(_, v)| *v)
    }

    /// The entry of database id `id` and its key.
    pub fn by_id(&self, id: u32) -> Option<(K, V)>
    where
        K: Clone,
    {
        let h = *self.ids.lock().get(&id)?;
        let shard = self.shard(h).read();
        shard.find(h, |(_, v)| v.id() == id).cloned()
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// The most entries it may hold.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes the entry of `id` from its shard (`ids` locked by the caller).
    fn remove_in(&self, ids: &mut HashMap<u32, u64>, id: u32) -> bool {
        let Some(h) = ids.remove(&id) else {
            return false;
        };
        let mut shard = self.shard(h).write();
        if let Ok(e) = shard.find_entry(h, |(_, v)| v.id() == id) {
            e.remove();
            self.len.fetch_sub(1, Ordering::Relaxed);
        }
        true
    }

    /// Sets the entry of `key` to `v`: an entry of `v`'s id under another key is moved, and
    /// an entry of another id under `key` gives the key up. Returns whether it is new.
    pub fn put(&self, key: &[u8], v: V) -> Result<bool, Full> {
        let mut ids = self.ids.lock();
        let h = self.hash(key);
        let moved = match ids.get(&v.id()) {
            Some(&old) if old != h => self.remove_in(&mut ids, v.id()),
            Some(&old) => {
                // Same hash: the same key, unless two keys collide; then the old one goes.
                let same = self
                    .shard(old)
                    .read()
                    .find(h, |(k, e)| e.id() == v.id() && k.as_ref() == key)
                    .is_some();
                !same && self.remove_in(&mut ids, v.id())
            }
            None => false,
        };
        let mut shard = self.shard(h).write();
        match shard.find_mut(h, |(k, _)| k.as_ref() == key) {
            Some((_, e)) => {
                if e.id() != v.id() {
                    ids.remove(&e.id());
                }
                *e = v;
                ids.insert(v.id(), h);
                Ok(moved)
            }
            None => {
                if self.len() >= self.max {
                    return Err(Full);
                }
                shard.insert_unique(h, (K::of(key), v), |(k, _)| self.hash(k.as_ref()));
                self.len.fetch_add(1, Ordering::Relaxed);
                ids.insert(v.id(), h);
                Ok(true)
            }
        }
    }

    /// Removes the entry of database id `id`; whether there was one.
    pub fn remove_id(&self, id: u32) -> bool {
        let mut ids = self.ids.lock();
        self.remove_in(&mut ids, id)
    }

    /// Replaces every entry with `rows` (a full read of the table): entries not in it go.
    /// Rows past the cap, and rows whose key or id an earlier row took, are left out; returns
    /// how many were.
    pub fn replace_all(&self, rows: impl IntoIterator<Item = (K, V)>) -> usize {
        let mut ids = self.ids.lock();
        let mut fresh: Vec<HashTable<(K, V)>> = (0..SHARDS).map(|_| HashTable::new()).collect();
        let mut new_ids: HashMap<u32, u64> = HashMap::with_capacity(ids.len());
        let (mut n, mut skipped) = (0, 0);
        for (k, v) in rows {
            let h = self.hash(k.as_ref());
            let shard = &mut fresh[(h >> 58) as usize & (SHARDS - 1)];
            let taken = shard.find(h, |(o, _)| o.as_ref() == k.as_ref()).is_some();
            if n >= self.max || taken || new_ids.contains_key(&v.id()) {
                skipped += 1;
                continue;
            }
            new_ids.insert(v.id(), h);
            shard.insert_unique(h, (k, v), |(k, _)| self.hash(k.as_ref()));
            n += 1;
        }
        for (slot, table) in self.shards.iter().zip(fresh) {
            *slot.write() = table;
        }
        *ids = new_ids;
        self.len.store(n, Ordering::Relaxed);
        skipped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    struct U(u32, u8);

    impl Entry for U {
        fn id(&self) -> u32 {
            self.0
        }
    }

    type R = Registry<Box<[u8]>, U>;

    #[test]
    fn a_changed_key_moves_and_a_taken_key_changes_hands() {
        let r = R::new(10);
        assert_eq!(r.put(b"aaaa", U(1, 0)), Ok(true));
        assert_eq!(r.put(b"bbbb", U(2, 0)), Ok(true));
        assert_eq!(r.put(b"aaaa", U(1, 7)), Ok(false), "updated in place");
        assert_eq!(r.get(b"aaaa"), Some(U(1, 7)));
        // User 1's passkey changes: the old one stops working at once.
        assert_eq!(r.put(b"cccc", U(1, 7)), Ok(true));
        assert_eq!(r.get(b"aaaa"), None);
        assert_eq!(r.get(b"cccc"), Some(U(1, 7)));
        assert_eq!(r.len(), 2);
        // A key given to another id: the former holder loses it.
        assert_eq!(r.put(b"bbbb", U(3, 0)), Ok(false));
        assert_eq!(r.get(b"bbbb"), Some(U(3, 0)));
        assert!(r.by_id(2).is_none());
        assert_eq!(r.by_id(3).map(|(k, _)| k), Some(b"bbbb".to_vec().into()));
        assert!(r.remove_id(3));
        assert!(!r.remove_id(3));
        assert_eq!(r.get(b"bbbb"), None);
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn the_cap_holds_for_puts_and_full_reads() {
        let r = R::new(2);
        r.put(b"a", U(1, 0)).unwrap();
        r.put(b"b", U(2, 0)).unwrap();
        assert_eq!(r.put(b"c", U(3, 0)), Err(Full));
        assert_eq!(r.put(b"b", U(2, 1)), Ok(false), "updates still land");
        let rows = [
            (b"x".to_vec().into(), U(5, 0)),
            (b"x".to_vec().into(), U(6, 0)),
            (b"y".to_vec().into(), U(5, 0)),
            (b"z".to_vec().into(), U(7, 0)),
            (b"w".to_vec().into(), U(8, 0)),
        ];
        assert_eq!(
            r.replace_all(rows),
            3,
            "a taken key, a taken id, one past the cap"
        );
        assert_eq!(r.len(), 2);
        assert_eq!(r.get(b"a"), None, "what the table no longer holds is gone");
        assert_eq!(r.get(b"x"), Some(U(5, 0)));
        assert_eq!(r.get(b"z"), Some(U(7, 0)));
        assert!(r.by_id(6).is_none());
    }

    #[test]
    fn many_entries_spread_and_are_all_found() {
        let r = R::new(100_000);
        for i in 0..10_000u32 {
            r.put(format!("key{i}").as_bytes(), U(i, 0)).unwrap();
        }
        for i in (0..10_000u32).step_by(7) {
            assert_eq!(r.get(format!("key{i}").as_bytes()), Some(U(i, 0)));
        }
        let busy = r.shards.iter().filter(|s| !s.read().is_empty()).count();
        assert_eq!(busy, SHARDS);
    }
}
