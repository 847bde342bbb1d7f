//! `hp.shared`: one dictionary all workers share, as OpenResty's shared dict: strings, numbers
//! and booleans under string keys, each with an optional time to live, bounded in keys and in
//! bytes. Beyond a bound the least recently used keys go. Sharded behind short locks; the
//! bounds and the recency order are per shard (each holds 1/16 of them), so what goes first is
//! the least recently used of its shard.

use hotpath_metrics::Counter;
use std::hash::BuildHasher;
use std::time::{Duration, Instant};

use lru::LruCache;
use parking_lot::Mutex;

const SHARDS: usize = 16;
/// The longest key.
pub const MAX_KEY_BYTES: usize = 1024;
/// What an entry costs besides its key and value bytes (the table's slot and links).
const ENTRY_OVERHEAD: usize = 64;

/// A value in the dictionary.
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    /// A string (any bytes).
    Str(Box<[u8]>),
    /// An integer.
    Int(i64),
    /// A float.
    Num(f64),
    /// A boolean.
    Bool(bool),
}

impl Val {
    fn bytes(&self) -> usize {
        match self {
            Val::Str(s) => s.len(),
            _ => 0,
        }
    }
}

struct Item {
    val: Val,
    expires: Option<Instant>,
}

impl Item {
    fn live(&self, now: Instant) -> bool {
        self.expires.is_none_or(|e| now < e)
    }
}

struct Shard {
    map: LruCache<Box<str>, Item>,
    bytes: usize,
}

/// Why a change was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SharedError {
    /// The key is empty or longer than [`MAX_KEY_BYTES`].
    BadKey,
    /// The key and value alone are larger than a shard may hold.
    TooLarge,
    /// `incr` on a value that is not a number.
    NotANumber,
    /// `incr` on a missing key without an initial value.
    NotFound,
}

impl std::fmt::Display for SharedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SharedError::BadKey => "bad key (empty or longer than 1024 bytes)",
            SharedError::TooLarge => "value too large for the dictionary",
            SharedError::NotANumber => "not a number",
            SharedError::NotFound => "not found",
        })
    }
}

/// The dictionary.
pub struct SharedDict {
    shards: Box<[Mutex<Shard>]>,
    hasher: hashbrown::DefaultHashBuilder,
    max_keys: usize,
    max_bytes: usize,
    /// Keys dropped to stay within the bounds.
    pub evictions: Counter,
}

fn entry_bytes(key: &str, val: &Val) -> usize {
    key.len() + val.bytes() + ENTRY_OVERHEAD
}

impl SharedDict {
    /// A dictionary of at most `max_keys` keys and `max_bytes` bytes of keys and values.
    pub fn new(max_keys: usize, max_bytes: usize) -> SharedDict {
        SharedDict {
            shards: (0..SHARDS)
                .map(|_| {
                    Mutex::new(Shard {
                        map: LruCache::unbounded(),
                        bytes: 0,
                    })
                })
                .collect(),
            hasher: hashbrown::DefaultHashBuilder::default(),
            max_keys: max_keys.div_ceil(SHARDS).max(1),
            max_bytes: max_bytes.div_ceil(SHARDS).max(1),
            evictions: Counter::default(),
        }
    }

    fn shard(&self, key: &str) -> Result<&Mutex<Shard>, SharedError> {
        if key.is_empty() || key.len() > MAX_KEY_BYTES {
            return Err(SharedError::BadKey);
        }
        Ok(&self.shards[(self.hasher.hash_one(key) as usize) % SHARDS])
    }

    /// The value under `key`, if it is there and has not expired (it becomes the most
    /// recently used).
    pub fn get(&self, key: &str) -> Result<Option<Val>, SharedError> {
        let mut shard = self.shard(key)?.lock();
        let now = Instant::now();
        match shard.map.get(key) {
            Some(item) if item.live(now) => Ok(Some(item.val.clone())),
            Some(_) => {
                remove(&mut shard, key);
                Ok(None)
            }
            None => Ok(None),
        }
    }

    /// Sets `key` to `val`, to expire after `ttl` (never when `None`).
    pub fn set(&self, key: &str, val: Val, ttl: Option<Duration>) -> Result<(), SharedError> {
        let mut shard = self.shard(key)?.lock();
        let now = Instant::now();
        self.put(&mut shard, key, val, ttl.map(|t| now + t))
    }

    /// Adds `delta` to the number under `key` and returns the sum. A missing (or expired)
    /// key starts from `init` (and expires after `init_ttl`), or is an error without one.
    pub fn incr(
        &self,
        key: &str,
        delta: Val,
        init: Option<Val>,
        init_ttl: Option<Duration>,
    ) -> Result<Val, SharedError> {
        let mut shard = self.shard(key)?.lock();
        let now = Instant::now();
        if let Some(item) = shard.map.get_mut(key).filter(|i| i.live(now)) {
            let sum = add(&item.val, &delta)?;
            item.val = sum.clone();
            return Ok(sum);
        }
        let init = init.ok_or(SharedError::NotFound)?;
        let sum = add(&init, &delta)?;
        self.put(&mut shard, key, sum.clone(), init_ttl.map(|t| now + t))?;
        Ok(sum)
    }

    /// Removes `key`; whether it was there.
    pub fn delete(&self, key: &str) -> Result<bool, SharedError> {
        let mut shard = self.shard(key)?.lock();
        Ok(remove(&mut shard, key))
    }

    /// Keys held (expired ones not yet dropped included).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().map.len()).sum()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of keys and values held, with a fixed cost per entry.
    pub fn bytes(&self) -> usize {
        self.shards.iter().map(|s| s.lock().bytes).sum()
    }

    fn put(
        &self,
        shard: &mut Shard,
        key: &str,
        val: Val,
        expires: Option<Instant>,
    ) -> Result<(), SharedError> {
        let size = entry_bytes(key, &val);
        if size > self.max_bytes {
            return Err(SharedError::TooLarge);
        }
        remove(shard, key);
        shard.bytes += size;
        shard.map.put(key.into(), Item { val, expires });
        let mut evicted = 0;
        while shard.map.len() > self.max_keys || shard.bytes > self.max_bytes {
            let (k, item) = shard.map.pop_lru().expect("over a bound, so not empty");
            shard.bytes -= entry_bytes(&k, &item.val);
            evicted += 1;
        }
        if evicted > 0 {
            self.evictions.add(evicted);
        }
        Ok(())
    }
}

fn remove(shard: &mut Shard, key: &str) -> bool {
    match shard.map.pop(key) {
        Some(item) => {
            shard.bytes -= entry_bytes(key, &item.val);
            true
        }
        None => false,
    }
}

fn add(a: &Val, b: &Val) -> Result<Val, SharedError> {
    Ok(match (a, b) {
        (Val::Int(x), Val::Int(y)) => match x.checked_add(*y) {
            Some(s) => Val::Int(s),
            None => Val::Num(*x as f64 + *y as f64),
        },
        (Val::Int(x), Val::Num(y)) => Val::Num(*x as f64 + y),
        (Val::Num(x), Val::Int(y)) => Val::Num(x + *y as f64),
        (Val::Num(x), Val::Num(y)) => Val::Num(x + y),
        _ => return Err(SharedError::NotANumber),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> Val {
        Val::Str(v.as_bytes().into())
    }

    #[test]
    fn get_set_incr_delete() {
        let d = SharedDict::new(1000, 1 << 20);
        assert_eq!(d.get("a"), Ok(None));
        d.set("a", s("x"), None).unwrap();
        assert_eq!(d.get("a"), Ok(Some(s("x"))));
        assert_eq!(
            d.incr("a", Val::Int(1), None, None),
            Err(SharedError::NotANumber)
        );
        assert_eq!(
            d.incr("n", Val::Int(1), None, None),
            Err(SharedError::NotFound)
        );
        assert_eq!(
            d.incr("n", Val::Int(2), Some(Val::Int(10)), None),
            Ok(Val::Int(12))
        );
        assert_eq!(d.incr("n", Val::Num(0.5), None, None), Ok(Val::Num(12.5)));
        assert_eq!(d.delete("n"), Ok(true));
        assert_eq!(d.delete("n"), Ok(false));
        assert_eq!(d.get(""), Err(SharedError::BadKey));
        assert_eq!(d.get(&"k".repeat(1025)), Err(SharedError::BadKey));
        assert_eq!(d.len(), 1);
        d.delete("a").unwrap();
        assert_eq!((d.len(), d.bytes()), (0, 0), "bytes are given back");
    }

    #[test]
    fn keys_expire() {
        let d = SharedDict::new(1000, 1 << 20);
        d.set("t", Val::Bool(true), Some(Duration::from_millis(30)))
            .unwrap();
        d.incr(
            "c",
            Val::Int(1),
            Some(Val::Int(0)),
            Some(Duration::from_millis(30)),
        )
        .unwrap();
        assert_eq!(d.get("t"), Ok(Some(Val::Bool(true))));
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(d.get("t"), Ok(None));
        // An expired counter starts again from its initial value.
        assert_eq!(
            d.incr("c", Val::Int(1), Some(Val::Int(0)), None),
            Ok(Val::Int(1))
        );
    }

    #[test]
    fn least_recently_used_go_first_within_the_bounds() {
        // 16 keys per shard at most: of 4,000 keys (every shard overflows) 256 stay.
        let d = SharedDict::new(256, 1 << 20);
        for i in 0..4000 {
            d.set(&format!("k{i}"), Val::Int(i), None).unwrap();
            // k0 stays in use.
            assert!(d.get("k0").unwrap().is_some(), "k0 was used last, at {i}");
        }
        assert_eq!(d.len(), 256);
        assert_eq!(d.evictions.get(), 4000 - 256);
        assert!(d.get("k1").unwrap().is_none(), "the oldest unused went");
        assert!(d.get("k3999").unwrap().is_some(), "the newest stays");
        // Bytes: 16 shards of 4 KiB; a value larger than a shard is refused.
        let d = SharedDict::new(1000, 64 << 10);
        assert_eq!(
            d.set("big", s(&"x".repeat(5000)), None),
            Err(SharedError::TooLarge)
        );
        for i in 0..200 {
            d.set(&format!("v{i}"), s(&"y".repeat(1000)), None).unwrap();
        }
        assert!(d.bytes() <= 64 << 10, "{}", d.bytes());
    }
}
