//! A registry of what a private tracker knows by a byte key: users by passkey, torrents by
//! info hash. Announces read it from every worker; the poller and the push API write it.
//!
//! Entries live in shards (each a hash table behind a short read-write lock) chosen by the
//! key's hash; a writers-only map from each entry's database id to its key's hash lets a row
//! whose key changed (a new passkey) move, and an entry be removed by id, without a second
//! copy of the key. Keys and ids are both unique: a key taken by another id moves to it.
//!
//! Keys are held inline (no allocation per entry) and hashed to 32 bits, which the ids map
//! keeps: a user is a 40-byte entry and a torrent a 36-byte one, stored densely
//! ([`Dense`](crate::dense::Dense): the shard's hash table holds 4-byte positions), plus 8
//! bytes in the ids map (71 bytes per entry in all at a million of each, measured with the
//! `private_memory` example; 69 before a torrent kept TorrentPier's `tor_type`). Keys that
//! hash alike are still told apart by comparing them.
//!
//! Owns: [`Registry`], [`Passkey`]. Must not: do I/O.

use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use hashbrown::{DefaultHashBuilder, HashMap};
use parking_lot::{Mutex, RwLock};

use crate::dense::Dense;

/// Shards of a registry (a power of two).
const SHARDS: usize = 64;

/// What an entry carries: at least its database id.
pub trait Entry: Copy + PartialEq + Send + Sync {
    /// The row's id in the site's database.
    fn id(&self) -> u32;
}

/// A key: what the bytes an entry is found by are held as, inline.
pub trait Key: Copy + Eq + Hash + Send + Sync + Sized {
    /// The key of these bytes.
    fn of(bytes: &[u8]) -> Self;
}

impl<const N: usize> Key for [u8; N] {
    fn of(bytes: &[u8]) -> Self {
        let mut k = [0; N];
        let n = bytes.len().min(N);
        k[..n].copy_from_slice(&bytes[..n]);
        k
    }
}

/// A passkey as a registry holds it: up to 32 bytes as they are, padded with zeros (a
/// passkey is letters and digits, so no key ends in a zero byte); a longer one (33 to 64
/// bytes) as a marker byte (0xff, never a passkey's) and a 128-bit keyed hash of it, so two
/// long passkeys can meet only by chance (1 in 2^64 at a billion users) and no one can make
/// them meet: the key is random per process. Every preset's passkeys fit whole (XBT's and
/// Gazelle's are 32 characters, TorrentPier's at most 20).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Passkey([u8; 32]);

impl Passkey {
    const HASHED: u8 = 0xff;

    /// The passkey's bytes, when it is held whole (`None` for one held as a hash).
    pub fn text(&self) -> Option<&[u8]> {
        if self.0[0] == Self::HASHED {
            return None;
        }
        let n = self.0.iter().position(|&b| b == 0).unwrap_or(32);
        Some(&self.0[..n])
    }
}

impl std::fmt::Debug for Passkey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.text() {
            Some(t) => write!(f, "Passkey({:?})", String::from_utf8_lossy(t)),
            None => f.write_str("Passkey(hashed)"),
        }
    }
}

impl Key for Passkey {
    fn of(bytes: &[u8]) -> Self {
        let mut k = [0; 32];
        if bytes.len() <= 32 {
            k[..bytes.len()].copy_from_slice(bytes);
            return Passkey(k);
        }
        static SECRET: OnceLock<[u64; 2]> = OnceLock::new();
        let [k0, k1] = *SECRET.get_or_init(super::random_key);
        let mut h = siphasher::sip128::SipHasher13::new_with_keys(k0, k1);
        h.write(bytes);
        k[0] = Self::HASHED;
        k[1..17].copy_from_slice(&siphasher::sip128::Hasher128::finish128(&h).as_bytes());
        Passkey(k)
    }
}

type Shard<K, V> = RwLock<Dense<(K, V)>>;

/// Entries by key, and their keys by id.
pub struct Registry<K, V> {
    shards: Box<[Shard<K, V>]>,
    /// id -> 32-bit hash of its key. Taken by writers only, before any shard.
    ids: Mutex<HashMap<u32, u32>>,
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

    /// The key's hash as the ids map keeps it.
    fn hash32(&self, key: &K) -> u32 {
        self.hasher.hash_one(key) as u32
    }

    fn hash(&self, key: &K) -> u64 {
        spread(self.hash32(key))
    }

    fn shard(&self, hash: u64) -> &Shard<K, V> {
        &self.shards[(hash >> 58) as usize & (SHARDS - 1)]
    }

    /// The entry of `key`.
    pub fn get(&self, key: &[u8]) -> Option<V> {
        let key = K::of(key);
        let h = self.hash(&key);
        self.shard(h)
            .read()
            .find(h, |(k, _)| *k == key)
            .map(|(_, v)| *v)
    }

    /// The entry of database id `id` and its key.
    pub fn by_id(&self, id: u32) -> Option<(K, V)> {
        let h = spread(*self.ids.lock().get(&id)?);
        let shard = self.shard(h).read();
        shard.find(h, |(_, v)| v.id() == id).copied()
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
    fn remove_in(&self, ids: &mut HashMap<u32, u32>, id: u32) -> bool {
        let Some(h) = ids.remove(&id).map(spread) else {
            return false;
        };
        let mut shard = self.shard(h).write();
        if shard
            .remove(h, |(_, v)| v.id() == id, |(k, _)| self.hash(k))
            .is_some()
        {
            self.len.fetch_sub(1, Ordering::Relaxed);
        }
        true
    }

    /// Sets the entry of `key` to `v`: an entry of `v`'s id under another key is moved, and
    /// an entry of another id under `key` gives the key up. Returns whether it is new.
    pub fn put(&self, key: &[u8], v: V) -> Result<bool, Full> {
        self.put_key(K::of(key), v)
    }

    /// [`Registry::put`] of a key already made.
    pub fn put_key(&self, key: K, v: V) -> Result<bool, Full> {
        let mut ids = self.ids.lock();
        let h32 = self.hash32(&key);
        let h = spread(h32);
        let moved = match ids.get(&v.id()) {
            Some(&old) if old != h32 => self.remove_in(&mut ids, v.id()),
            Some(_) => {
                // Same hash: the same key, unless two keys collide; then the old one goes.
                let same = self
                    .shard(h)
                    .read()
                    .find(h, |(k, e)| e.id() == v.id() && *k == key)
                    .is_some();
                !same && self.remove_in(&mut ids, v.id())
            }
            None => false,
        };
        let mut shard = self.shard(h).write();
        match shard.find_mut(h, |(k, _)| *k == key) {
            Some((_, e)) => {
                if e.id() != v.id() {
                    ids.remove(&e.id());
                }
                *e = v;
                ids.insert(v.id(), h32);
                Ok(moved)
            }
            None => {
                if self.len() >= self.max {
                    return Err(Full);
                }
                shard.insert_unique(h, (key, v), |(k, _)| self.hash(k));
                self.len.fetch_add(1, Ordering::Relaxed);
                ids.insert(v.id(), h32);
                Ok(true)
            }
        }
    }

    /// Whether `key` does not hold `v` now (a put of it would change something).
    pub fn differs(&self, key: &K, v: &V) -> bool {
        let h = spread(self.hash32(key));
        self.shard(h)
            .read()
            .find(h, |(k, e)| k == key && e == v)
            .is_none()
    }

    /// Removes the entry of database id `id`; whether there was one.
    pub fn remove_id(&self, id: u32) -> bool {
        let mut ids = self.ids.lock();
        self.remove_in(&mut ids, id)
    }

    /// Replaces every entry with `rows` (a full read of the table): entries not in it go.
    /// Rows past the cap, and rows whose key or id an earlier row took, are left out.
    pub fn replace_all(&self, rows: impl IntoIterator<Item = (K, V)>) -> Replaced {
        let mut ids = self.ids.lock();
        let mut fresh: Vec<Dense<(K, V)>> = (0..SHARDS).map(|_| Dense::new()).collect();
        let mut new_ids: HashMap<u32, u32> = HashMap::with_capacity(ids.len());
        let (mut n, mut skipped, mut same) = (0, 0, 0);
        for (k, v) in rows {
            let h32 = self.hash32(&k);
            let h = spread(h32);
            let i = (h >> 58) as usize & (SHARDS - 1);
            let shard = &mut fresh[i];
            let taken = shard.find(h, |(o, _)| *o == k).is_some();
            if n >= self.max || taken || new_ids.contains_key(&v.id()) {
                skipped += 1;
                continue;
            }
            if self.shards[i]
                .read()
                .find(h, |(o, e)| *o == k && *e == v)
                .is_some()
            {
                same += 1;
            }
            new_ids.insert(v.id(), h32);
            shard.insert_unique(h, (k, v), |(k, _)| self.hash(k));
            n += 1;
        }
        let gone = ids.keys().filter(|id| !new_ids.contains_key(*id)).count();
        for (slot, table) in self.shards.iter().zip(fresh) {
            *slot.write() = table;
        }
        *ids = new_ids;
        self.len.store(n, Ordering::Relaxed);
        Replaced {
            skipped,
            changed: n - same,
            gone,
        }
    }
}

/// What a full read did to a registry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Replaced {
    /// Rows left out: past the cap, or with a key or id an earlier row took.
    pub skipped: usize,
    /// Entries new or changed (key or value).
    pub changed: usize,
    /// Ids held before the read and not after.
    pub gone: usize,
}

/// A 32-bit hash spread over 64 bits: the table picks buckets by the low bits and keeps the
/// top seven as tags, the registry picks shards by the top six.
fn spread(h: u32) -> u64 {
    (u64::from(h) | u64::from(h) << 32).wrapping_mul(0x9e37_79b9_7f4a_7c15)
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

    type R = Registry<Passkey, U>;

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
        assert_eq!(r.by_id(3).map(|(k, _)| k), Some(Passkey::of(b"bbbb")));
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
            (Passkey::of(b"x"), U(5, 0)),
            (Passkey::of(b"x"), U(6, 0)),
            (Passkey::of(b"y"), U(5, 0)),
            (Passkey::of(b"z"), U(7, 0)),
            (Passkey::of(b"w"), U(8, 0)),
        ];
        assert_eq!(
            r.replace_all(rows).skipped,
            3,
            "a taken key, a taken id, one past the cap"
        );
        assert_eq!(r.len(), 2);
        assert_eq!(r.get(b"a"), None, "what the table no longer holds is gone");
        assert_eq!(r.get(b"x"), Some(U(5, 0)));
        assert_eq!(r.get(b"z"), Some(U(7, 0)));
        assert!(r.by_id(6).is_none());
    }

    /// A full read says what it changed: rows new or changed, and ids no longer held.
    #[test]
    fn a_full_read_counts_what_changed() {
        let r = R::new(10);
        let row = |k: &[u8], id, v| (Passkey::of(k), U(id, v));
        let first = r.replace_all([row(b"a", 1, 0), row(b"b", 2, 0), row(b"c", 3, 0)]);
        assert_eq!((first.changed, first.gone), (3, 0));
        let same = r.replace_all([row(b"a", 1, 0), row(b"b", 2, 0), row(b"c", 3, 0)]);
        assert_eq!(same, Replaced::default(), "the same rows change nothing");
        // User 1 changes, 2 gets a new key, 3 goes, 4 comes.
        let next = r.replace_all([row(b"a", 1, 9), row(b"bb", 2, 0), row(b"d", 4, 0)]);
        assert_eq!((next.changed, next.gone, next.skipped), (3, 1, 0));
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
        let busy = r.shards.iter().filter(|s| s.read().len() > 0).count();
        assert_eq!(busy, SHARDS);
    }

    #[test]
    fn passkeys_are_held_whole_up_to_32_bytes_and_longer_ones_as_a_keyed_hash() {
        let k32 = [b'a'; 32];
        let k31 = [b'a'; 31];
        assert_eq!(Passkey::of(&k32).text(), Some(&k32[..]));
        assert_eq!(Passkey::of(&k31).text(), Some(&k31[..]));
        assert_ne!(
            Passkey::of(&k32),
            Passkey::of(&k31),
            "a prefix is another key"
        );
        assert_eq!(Passkey::of(b"").text(), Some(&b""[..]));
        let long = [b'b'; 64];
        let mut other = long;
        other[63] = b'c';
        assert_eq!(Passkey::of(&long).text(), None);
        assert_eq!(Passkey::of(&long), Passkey::of(&long));
        assert_ne!(
            Passkey::of(&long),
            Passkey::of(&other),
            "the last byte counts"
        );
        assert_ne!(Passkey::of(&long[..33]), Passkey::of(&long[..34]));
        let r = R::new(10);
        r.put(&long, U(1, 0)).unwrap();
        r.put(&other, U(2, 0)).unwrap();
        r.put(&k32, U(3, 0)).unwrap();
        assert_eq!(r.get(&long), Some(U(1, 0)));
        assert_eq!(r.get(&other), Some(U(2, 0)));
        assert_eq!(r.get(&long[..63]), None);
        assert_eq!(r.get(&k32), Some(U(3, 0)));
        assert_eq!(r.get(&k31), None);
        assert_eq!(r.by_id(1).map(|(k, _)| k.text().is_none()), Some(true));
    }

    #[test]
    fn keys_whose_hashes_meet_are_still_told_apart() {
        // Keys are hashed to 32 bits: among half a million, some pair shares a hash (all but
        // certainly: about 29 are expected). Both must find their own entry and go by id.
        let r = R::new(10);
        let key = |i: u32| format!("{i:032x}");
        let mut seen = HashMap::new();
        let (a, b) = (0..500_000u32)
            .find_map(|i| {
                let h = r.hash32(&Passkey::of(key(i).as_bytes()));
                seen.insert(h, i).map(|j| (j, i))
            })
            .expect("a pair of keys with one hash");
        r.put(key(a).as_bytes(), U(1, 0)).unwrap();
        r.put(key(b).as_bytes(), U(2, 0)).unwrap();
        r.put(b"other", U(3, 0)).unwrap();
        assert_eq!(r.get(key(a).as_bytes()), Some(U(1, 0)));
        assert_eq!(r.get(key(b).as_bytes()), Some(U(2, 0)));
        // User 1 takes user 2's key (same hash as its own): its old key goes, user 2 loses it.
        assert_eq!(r.put(key(b).as_bytes(), U(1, 5)), Ok(true));
        assert_eq!(r.get(key(a).as_bytes()), None);
        assert_eq!(r.get(key(b).as_bytes()), Some(U(1, 5)));
        assert!(r.by_id(2).is_none());
        assert_eq!(r.len(), 2);
        assert_eq!(r.put(key(a).as_bytes(), U(2, 0)), Ok(true));
        assert!(r.remove_id(1));
        assert_eq!(r.get(key(b).as_bytes()), None);
        assert_eq!(r.get(key(a).as_bytes()), Some(U(2, 0)));
        assert_eq!(
            r.by_id(2).map(|(k, _)| k),
            Some(Passkey::of(key(a).as_bytes()))
        );
    }
}
