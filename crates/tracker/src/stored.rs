//! The tracker as the write-behind store knows it: its change (journal tag 1), the queue that
//! merges changes per torrent, the table they are written to, and its reads of the database.
//!
//! Owns: [`TorrentChange`] and its journal encoding, [`TorrentQueue`], [`TORRENTS`],
//! [`TRACKER`] and [`TrackerDb`]. Must not: do I/O outside [`TrackerDb`].

use std::any::Any;

// hashbrown's default hasher: this map is keyed by data the workers merge on every commit.
use hashbrown::HashMap;
use hotpath_store::table::{col, Merge, Rows, Table, Type, Value};
use hotpath_store::{Backend, Encode, Queue, Service, StoreError};

/// A 20-byte key (an info hash).
pub type Key = [u8; 20];

/// The tracker's journal tag.
const TAG: u8 = 1;

/// Encoded size of a [`TorrentChange`].
pub const TORRENT_LEN: usize = 1 + 20 + 16;

/// A torrent's counts at `at`, and downloads it completed since the last change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TorrentChange {
    /// The info hash.
    pub info_hash: Key,
    /// Completed downloads to add.
    pub completed: u32,
    /// Seeders now.
    pub seeders: u32,
    /// Leechers now.
    pub leechers: u32,
    /// Unix seconds of the change.
    pub at: u32,
}

impl TorrentChange {
    /// Decodes the change at the start of `b` and its length; `None` when it is not one.
    pub fn decode(b: &[u8]) -> Option<(TorrentChange, usize)> {
        if *b.first()? != TAG || b.len() < TORRENT_LEN {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        let change = TorrentChange {
            info_hash: b[1..21].try_into().unwrap(),
            completed: u32_at(21),
            seeders: u32_at(25),
            leechers: u32_at(29),
            at: u32_at(33),
        };
        Some((change, TORRENT_LEN))
    }
}

impl Encode for TorrentChange {
    fn encoded_len(&self) -> usize {
        TORRENT_LEN
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.push(TAG);
        out.extend_from_slice(&self.info_hash);
        for v in [self.completed, self.seeders, self.leechers, self.at] {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
}

/// One torrent's merged change: the row the flusher upserts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TorrentRow {
    /// Completed downloads to add to the stored count.
    pub completed: u64,
    /// Seeders at the latest change.
    pub seeders: u32,
    /// Leechers at the latest change.
    pub leechers: u32,
    /// Unix seconds of the earliest change (the row's `first_seen` when it is new).
    pub first_seen: u32,
    /// Unix seconds of the latest change.
    pub last_active: u32,
}

impl TorrentRow {
    /// The row of [`TORRENTS`] for torrent `key`.
    pub fn row(&self, key: &Key) -> [Value; 6] {
        [
            Value::Blob((*key).into()),
            Value::Int(self.completed as i64),
            self.seeders.into(),
            self.leechers.into(),
            self.first_seen.into(),
            self.last_active.into(),
        ]
    }

    /// Folds a newer row into this one: counts add, the newer snapshot wins, times widen.
    pub fn merge_newer(&mut self, newer: &TorrentRow) {
        self.completed += newer.completed;
        self.seeders = newer.seeders;
        self.leechers = newer.leechers;
        self.first_seen = self.first_seen.min(newer.first_seen);
        self.last_active = self.last_active.max(newer.last_active);
    }
}

/// The tracker's queue: per torrent, its merged change.
#[derive(Debug, Default)]
pub struct TorrentQueue {
    torrents: HashMap<Key, TorrentRow>,
}

impl Queue for TorrentQueue {
    fn apply(&mut self, bytes: &[u8]) -> Option<usize> {
        let (c, len) = TorrentChange::decode(bytes)?;
        let row = TorrentRow {
            completed: u64::from(c.completed),
            seeders: c.seeders,
            leechers: c.leechers,
            first_seen: c.at,
            last_active: c.at,
        };
        self.torrents
            .entry(c.info_hash)
            .and_modify(|r| r.merge_newer(&row))
            .or_insert(row);
        Some(len)
    }

    fn rows(&self) -> usize {
        self.torrents.len()
    }

    fn take(&mut self) -> Vec<Rows> {
        let mut torrents: Vec<_> = self.torrents.drain().collect();
        torrents.sort_unstable_by_key(|r| r.0);
        let mut rows = Rows::with_capacity(&TORRENTS, torrents.len());
        for (k, r) in torrents {
            rows.push(r.row(&k));
        }
        vec![rows]
    }

    fn empty_like(&self) -> Box<dyn Queue> {
        Box::new(TorrentQueue {
            torrents: HashMap::with_capacity(self.torrents.len()),
        })
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The tracker, as the store knows it. Its tables were created by the store's migrations 1
/// and 2, before services had their own; it has none of its own (private mode's are in
/// [`crate::private::stored`]).
pub static TRACKER: Service = Service {
    name: "tracker",
    tags: &[TAG],
    tables: &[&TORRENTS],
    queue: &|| Box::<TorrentQueue>::default(),
    migrations: &[],
};

/// `hp_torrents`.
pub static TORRENTS: Table = Table {
    name: "hp_torrents",
    columns: &[
        col("info_hash", Type::Blob, Merge::Key),
        col("completed", Type::Int, Merge::Add),
        col("seeders", Type::Int, Merge::Replace),
        col("leechers", Type::Int, Merge::Replace),
        col("first_seen", Type::Int, Merge::Keep),
        col("last_active", Type::Int, Merge::Max),
    ],
    update_only: false,
    keeps_older: None,
};

/// A torrent as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredTorrent {
    /// Completed downloads.
    pub completed: u64,
    /// Seeders at the last snapshot.
    pub seeders: u32,
    /// Leechers at the last snapshot.
    pub leechers: u32,
    /// Unix seconds first seen.
    pub first_seen: i64,
    /// Unix seconds last active.
    pub last_active: i64,
}

/// The tracker's reads of the database, over any [`Backend`].
pub trait TrackerDb: Backend {
    /// Calls `each` for every stored torrent (rows whose key is not 20 bytes are skipped).
    fn torrents(&mut self, each: &mut dyn FnMut(Key, StoredTorrent)) -> Result<(), StoreError> {
        self.query(
            "SELECT info_hash, completed, seeders, leechers, first_seen, last_active \
             FROM hp_torrents",
            &[],
            &mut |r| {
                if let Ok(key) = Key::try_from(r[0].bytes()) {
                    each(
                        key,
                        StoredTorrent {
                            completed: r[1].int() as u64,
                            seeders: r[2].int() as u32,
                            leechers: r[3].int() as u32,
                            first_seen: r[4].int(),
                            last_active: r[5].int(),
                        },
                    );
                }
            },
        )
    }

    /// Deletes the torrents with no completed download whose last activity was before unix
    /// second `before` (see `tracker.forget_torrents_after_days`).
    fn forget_idle_torrents(&mut self, before: i64) -> Result<(), StoreError> {
        self.execute_with(
            "DELETE FROM hp_torrents WHERE completed = 0 AND last_active < ?",
            &[Value::Int(before)],
        )
    }

    /// The info hashes in `hp_access_list` (rows whose key is not 20 bytes are skipped).
    fn access_list(&mut self) -> Result<Vec<Key>, StoreError> {
        let mut out = Vec::new();
        self.query("SELECT info_hash FROM hp_access_list", &[], &mut |r| {
            if let Ok(k) = Key::try_from(r[0].bytes()) {
                out.push(k);
            }
        })?;
        Ok(out)
    }
}

impl<B: Backend + ?Sized> TrackerDb for B {}

#[cfg(test)]
mod tests {
    use super::*;
    use hotpath_store::queue::Queues;

    fn t(key: u8, completed: u32, seeders: u32, at: u32) -> TorrentChange {
        TorrentChange {
            info_hash: [key; 20],
            completed,
            seeders,
            leechers: seeders + 1,
            at,
        }
    }

    #[test]
    fn encoding_round_trips_and_rejects_garbage() {
        let changes = [t(1, 1, 2, 100), t(2, 0, 9, u32::MAX)];
        let mut buf = Vec::new();
        for c in &changes {
            c.encode(&mut buf);
        }
        assert_eq!(buf.len(), 2 * TORRENT_LEN);
        assert_eq!(TorrentChange::decode(&buf), Some((changes[0], TORRENT_LEN)));
        assert_eq!(
            TorrentChange::decode(&buf[TORRENT_LEN..]),
            Some((changes[1], TORRENT_LEN))
        );
        assert!(TorrentChange::decode(&buf[..TORRENT_LEN - 1]).is_none());
        assert!(TorrentChange::decode(&[9, 1, 2]).is_none());
        // Another service's tag is not read as the tracker's, whatever follows it.
        buf[0] = 2;
        assert!(TorrentQueue::default().apply(&buf).is_none());
    }

    #[test]
    fn changes_to_one_key_merge_into_one_row() {
        let mut p = Queues::new(&[&TRACKER]).unwrap();
        p.push(&t(7, 1, 3, 200)).unwrap();
        p.push(&t(7, 1, 5, 100)).unwrap();
        p.push(&t(7, 0, 4, 300)).unwrap();
        p.push(&t(1, 1, 1, 50)).unwrap();
        p.covered(0, 9);
        p.covered(0, 4);
        p.covered(2, 1);
        assert_eq!(p.rows(), 2);
        let b = p.take();
        assert_eq!(b.changes, 4);
        assert_eq!(b.seqs, vec![(0, 9), (2, 1)]);
        // Sorted by key; counts add; the latest snapshot wins; times widen.
        let t = b.part(&TORRENTS).unwrap();
        assert_eq!(t.row(0)[0], Value::Blob([1; 20].into()));
        assert_eq!(t.row(1)[1..], [2u32, 4, 5, 100, 300].map(Value::from));
        assert_eq!(p.rows(), 0);
        assert!(p.take().is_empty());
    }

    #[test]
    fn a_restored_batch_loses_nothing_and_newer_snapshots_win() {
        let mut p = Queues::new(&[&TRACKER]).unwrap();
        p.push(&t(7, 2, 3, 100)).unwrap();
        p.push(&t(8, 1, 1, 100)).unwrap();
        p.covered(1, 5);
        let mut b = p.take();
        p.push(&t(7, 1, 9, 200)).unwrap();
        p.covered(1, 6);
        b.merge(p.take());
        assert_eq!(b.seqs, vec![(1, 6)]);
        assert_eq!(b.changes, 3);
        let t = b.part(&TORRENTS).unwrap();
        assert_eq!(t.row(0)[1..], [3u32, 9, 10, 100, 200].map(Value::from));
        assert_eq!(t.row(1)[1], Value::Int(1));
    }
}
