//! A hash table for millions of small entries: the entries sit densely in fixed-size chunks,
//! and the hash table holds only their 32-bit positions.
//!
//! A hash table of whole entries is between 44 and 87 % full (it doubles when it fills), so an
//! entry of `S` bytes costs about `(S + 1) / 0.6` on average: 48 bytes for a 28-byte one. Here
//! the empty buckets hold 4-byte positions instead, and an entry costs `S + 5 / 0.6`: 36 bytes
//! for the same 28. The price is one more memory read per lookup (position, then entry).
//!
//! Removing an entry moves the last one into its place (so the chunks stay dense and no free
//! list is needed), which needs that entry's hash: the callers that remove pass the function
//! they hash with, as with hashbrown's own `HashTable`.
//!
//! Owns: [`Dense`]. Must not: do I/O.

use hashbrown::HashTable;

/// Entries per chunk (a power of two): every chunk but the last is full.
const CHUNK: usize = 1 << SHIFT;
const SHIFT: u32 = 10;

/// A hash table of `T`s, stored densely (see the module's notes).
#[derive(Debug)]
pub struct Dense<T> {
    index: HashTable<u32>,
    chunks: Vec<Vec<T>>,
    len: usize,
}

impl<T> Default for Dense<T> {
    fn default() -> Self {
        Dense {
            index: HashTable::new(),
            chunks: Vec::new(),
            len: 0,
        }
    }
}

/// The entry at position `i`.
fn at<T>(chunks: &[Vec<T>], i: u32) -> &T {
    let i = i as usize;
    &chunks[i >> SHIFT][i & (CHUNK - 1)]
}

impl<T> Dense<T> {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Entries its index has room for before it grows.
    pub fn capacity(&self) -> usize {
        self.index.capacity()
    }

    fn at_mut(&mut self, i: u32) -> &mut T {
        let i = i as usize;
        &mut self.chunks[i >> SHIFT][i & (CHUNK - 1)]
    }

    /// The entry of `hash` for which `eq` holds.
    pub fn find(&self, hash: u64, mut eq: impl FnMut(&T) -> bool) -> Option<&T> {
        let chunks = &self.chunks;
        let &i = self.index.find(hash, |&i| eq(at(chunks, i)))?;
        Some(at(chunks, i))
    }

    /// [`Dense::find`], to change the entry in place (not what it is hashed by).
    pub fn find_mut(&mut self, hash: u64, mut eq: impl FnMut(&T) -> bool) -> Option<&mut T> {
        let chunks = &self.chunks;
        let &i = self.index.find(hash, |&i| eq(at(chunks, i)))?;
        Some(self.at_mut(i))
    }

    /// Every entry whose hash may be `hash` (callers check which are theirs).
    pub fn iter_hash(&self, hash: u64) -> impl Iterator<Item = &T> {
        let chunks = &self.chunks;
        self.index.iter_hash(hash).map(move |&i| at(chunks, i))
    }

    /// Every entry, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.chunks.iter().flatten()
    }

    /// Adds an entry no other entry equals; `hasher` gives any entry's hash (the index may
    /// grow and rehash).
    pub fn insert_unique(&mut self, hash: u64, value: T, hasher: impl Fn(&T) -> u64) {
        let i = u32::try_from(self.len).expect("fewer than 2^32 entries in one table");
        match self.chunks.last_mut() {
            Some(last) if last.len() < CHUNK => {
                if last.len() == last.capacity() {
                    // Double up to a whole chunk, never past it.
                    let more = last.len().max(4).min(CHUNK - last.len());
                    last.reserve_exact(more);
                }
                last.push(value);
            }
            _ => {
                let mut chunk = Vec::with_capacity(4);
                chunk.push(value);
                self.chunks.push(chunk);
            }
        }
        self.len += 1;
        let chunks = &self.chunks;
        self.index
            .insert_unique(hash, i, |&j| hasher(at(chunks, j)));
    }

    /// Removes the entry of `hash` for which `eq` holds, and returns it.
    pub fn remove(
        &mut self,
        hash: u64,
        mut eq: impl FnMut(&T) -> bool,
        hasher: impl Fn(&T) -> u64,
    ) -> Option<T> {
        let chunks = &self.chunks;
        let (i, _) = self
            .index
            .find_entry(hash, |&i| eq(at(chunks, i)))
            .ok()?
            .remove();
        Some(self.unlink(i, &hasher))
    }

    /// Keeps only the entries for which `keep` holds.
    pub fn retain(&mut self, mut keep: impl FnMut(&T) -> bool, hasher: impl Fn(&T) -> u64) {
        let mut i = 0u32;
        while (i as usize) < self.len {
            let entry = at(&self.chunks, i);
            if keep(entry) {
                i += 1;
                continue;
            }
            // The last entry moves into `i`, which is looked at again.
            let h = hasher(entry);
            if let Ok(e) = self.index.find_entry(h, |&j| j == i) {
                e.remove();
            }
            self.unlink(i, &hasher);
        }
    }

    /// Takes out the entry at `i`, whose position the index no longer holds, moving the last
    /// entry into its place.
    fn unlink(&mut self, i: u32, hasher: &impl Fn(&T) -> u64) -> T {
        let last = (self.len - 1) as u32;
        let chunk = self
            .chunks
            .last_mut()
            .expect("a table with entries has a chunk");
        let mut value = chunk.pop().expect("the last chunk is never empty");
        if chunk.is_empty() {
            self.chunks.pop();
        }
        self.len -= 1;
        if i != last {
            let h = hasher(&value);
            let pos = self
                .index
                .find_mut(h, |&j| j == last)
                .expect("every entry's position is in the index");
            *pos = i;
            std::mem::swap(self.at_mut(i), &mut value);
        }
        value
    }

    /// Gives back what the index and the last chunk hold beyond their entries.
    pub fn shrink_to_fit(&mut self, hasher: impl Fn(&T) -> u64) {
        let chunks = &self.chunks;
        self.index.shrink_to_fit(|&j| hasher(at(chunks, j)));
        if let Some(last) = self.chunks.last_mut() {
            last.shrink_to_fit();
        }
        self.chunks.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A deliberately poor hash, so many entries share one and positions move among them.
    fn h(k: &(u32, u32)) -> u64 {
        u64::from(k.0 % 97)
    }

    #[test]
    fn it_agrees_with_a_map_through_random_inserts_removals_and_retains() {
        let mut t: Dense<(u32, u32)> = Dense::new();
        let mut model: HashMap<u32, u32> = HashMap::new();
        let mut rng = fastrand::Rng::with_seed(3);
        for step in 0..60_000u32 {
            let k = rng.u32(..5_000);
            match rng.u8(..10) {
                0..=5 => {
                    if let Some(e) = t.find_mut(h(&(k, 0)), |e| e.0 == k) {
                        e.1 = step;
                    } else {
                        t.insert_unique(h(&(k, 0)), (k, step), h);
                    }
                    model.insert(k, step);
                }
                6..=8 => {
                    let got = t.remove(h(&(k, 0)), |e| e.0 == k, h);
                    assert_eq!(got.map(|e| e.1), model.remove(&k));
                }
                _ => {
                    if step % 97 == 0 {
                        let m = rng.u32(2..9);
                        t.retain(|e| e.0 % m != 0, h);
                        model.retain(|k, _| k % m != 0);
                        t.shrink_to_fit(h);
                    }
                }
            }
            assert_eq!(t.len(), model.len());
        }
        for (k, v) in &model {
            assert_eq!(t.find(h(&(*k, 0)), |e| e.0 == *k), Some(&(*k, *v)));
        }
        let mut all: Vec<_> = t.iter().copied().collect();
        all.sort_unstable();
        let mut want: Vec<_> = model.into_iter().collect();
        want.sort_unstable();
        assert_eq!(all, want);
        // Every chunk but the last is full.
        let n = t.chunks.len();
        assert!(t.chunks[..n.saturating_sub(1)]
            .iter()
            .all(|c| c.len() == CHUNK && c.capacity() == CHUNK));
    }

    #[test]
    fn removing_everything_gives_the_chunks_back() {
        let mut t: Dense<(u32, u32)> = Dense::new();
        for k in 0..3_000 {
            t.insert_unique(h(&(k, 0)), (k, k), h);
        }
        assert_eq!(t.chunks.len(), 3);
        assert_eq!(
            t.iter_hash(h(&(5, 0))).filter(|e| e.0 % 97 == 5).count(),
            31
        );
        t.retain(|_| false, h);
        assert_eq!(t.len(), 0);
        assert!(t.chunks.is_empty());
        assert_eq!(t.find(h(&(5, 0)), |e| e.0 == 5), None);
    }
}
