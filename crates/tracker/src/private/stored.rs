//! Private mode as the write-behind store knows it: each accounted announce is an
//! [`AccountChange`] (journal tag 5), merged per user and per (user, torrent) and written as
//! `+=` deltas and the latest state.
//!
//! | table | columns | what |
//! |---|---|---|
//! | `hp_users` | `user_id` PK (1 to 4294967295), `passkey` (1 to 64 letters and digits) unique, `can_leech` (0 or 1), `updated_at` (unix s) | the site's users, read by a private tracker (`private.schema = "hotpath"`); set `updated_at` on every change so the next poll reads it |
//! | `hp_private_torrents` | `torrent_id` PK, `info_hash` (20 bytes) unique, `download_pct` (0 free, 50 half, 100), `upload_pct` (100, 200 double), `updated_at` | the torrents a private tracker serves and how they are credited |
//! | `hp_user_totals` | `user_id` PK, `uploaded`, `downloaded` (credited), `uploaded_raw`, `downloaded_raw` (as reported), `updated_at` | each user's totals, added to |
//! | `hp_user_torrents` | (`user_id`, `torrent_id`) PK, the four counts as above, `remaining` (bytes left at the last announce), `seeding` (0 or 1), `active` (0 once stopped), `announces`, `completed` (downloads finished), `completed_at` (unix s of the last), `updated_at` | each user's traffic and state per torrent: the snatch list is the rows with `completed` > 0 |
//!
//! Owns: [`AccountChange`], [`AccountQueue`], the tables and [`PRIVATE`]. Must not: do I/O.

use std::any::Any;

use hashbrown::HashMap;
use hotpath_store::migrations::Migration;
use hotpath_store::table::{col, Merge, Rows, Table, Type, Value};
use hotpath_store::{Encode, Queue, Service};

/// Private mode's journal tag.
const TAG: u8 = 5;

/// Encoded size of an [`AccountChange`].
pub const ACCOUNT_LEN: usize = 1 + 4 + 4 + 6 * 8 + 1 + 4;

/// One accounted announce.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AccountChange {
    /// The user's id.
    pub user: u32,
    /// The torrent's id.
    pub torrent: u32,
    /// Bytes uploaded, credited (after the torrent's factor).
    pub uploaded: u64,
    /// Bytes downloaded, credited.
    pub downloaded: u64,
    /// Bytes uploaded, as reported.
    pub uploaded_raw: u64,
    /// Bytes downloaded, as reported.
    pub downloaded_raw: u64,
    /// Bytes left.
    pub remaining: u64,
    /// Downloads this announce completed (0 or 1).
    pub completed: u64,
    /// Bit 0: seeding; bit 1: stopped.
    pub flags: u8,
    /// Unix seconds.
    pub at: u32,
}

impl AccountChange {
    /// Seeding.
    pub const SEEDING: u8 = 1;
    /// Stopped.
    pub const STOPPED: u8 = 2;

    /// Decodes the change at the start of `b` and its length; `None` when it is not one.
    pub fn decode(b: &[u8]) -> Option<(AccountChange, usize)> {
        if *b.first()? != TAG || b.len() < ACCOUNT_LEN {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
        let c = AccountChange {
            user: u32_at(1),
            torrent: u32_at(5),
            uploaded: u64_at(9),
            downloaded: u64_at(17),
            uploaded_raw: u64_at(25),
            downloaded_raw: u64_at(33),
            remaining: u64_at(41),
            completed: u64_at(49),
            flags: b[57],
            at: u32_at(58),
        };
        Some((c, ACCOUNT_LEN))
    }
}

impl Encode for AccountChange {
    fn encoded_len(&self) -> usize {
        ACCOUNT_LEN
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.push(TAG);
        out.extend_from_slice(&self.user.to_le_bytes());
        out.extend_from_slice(&self.torrent.to_le_bytes());
        for v in [
            self.uploaded,
            self.downloaded,
            self.uploaded_raw,
            self.downloaded_raw,
            self.remaining,
            self.completed,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.push(self.flags);
        out.extend_from_slice(&self.at.to_le_bytes());
    }
}

/// Counts that add, per user or per (user, torrent).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counts {
    uploaded: u64,
    downloaded: u64,
    uploaded_raw: u64,
    downloaded_raw: u64,
}

impl Counts {
    fn of(c: &AccountChange) -> Counts {
        Counts {
            uploaded: c.uploaded,
            downloaded: c.downloaded,
            uploaded_raw: c.uploaded_raw,
            downloaded_raw: c.downloaded_raw,
        }
    }

    fn add(&mut self, o: Counts) {
        self.uploaded = self.uploaded.saturating_add(o.uploaded);
        self.downloaded = self.downloaded.saturating_add(o.downloaded);
        self.uploaded_raw = self.uploaded_raw.saturating_add(o.uploaded_raw);
        self.downloaded_raw = self.downloaded_raw.saturating_add(o.downloaded_raw);
    }

    fn values(self) -> [Value; 4] {
        [
            self.uploaded,
            self.downloaded,
            self.uploaded_raw,
            self.downloaded_raw,
        ]
        .map(|v| Value::Int(v.min(i64::MAX as u64) as i64))
    }
}

/// A user's merged state on one torrent.
#[derive(Debug, Clone, Copy, Default)]
struct OnTorrent {
    counts: Counts,
    remaining: u64,
    flags: u8,
    announces: u64,
    completed: u64,
    completed_at: u32,
    at: u32,
}

/// The merge queue: totals per user, state per (user, torrent).
#[derive(Debug, Default)]
pub struct AccountQueue {
    users: HashMap<u32, (Counts, u32)>,
    on_torrents: HashMap<(u32, u32), OnTorrent>,
}

impl Queue for AccountQueue {
    fn apply(&mut self, bytes: &[u8]) -> Option<usize> {
        let (c, len) = AccountChange::decode(bytes)?;
        let u = self.users.entry(c.user).or_default();
        u.0.add(Counts::of(&c));
        u.1 = u.1.max(c.at);
        let t = self.on_torrents.entry((c.user, c.torrent)).or_default();
        t.counts.add(Counts::of(&c));
        t.announces = t.announces.saturating_add(1);
        t.completed = t.completed.saturating_add(c.completed);
        if c.completed > 0 {
            t.completed_at = t.completed_at.max(c.at);
        }
        // The state of the latest announce wins (journals replay in order per worker; a
        // user's announces on one torrent a second apart may come through two workers).
        if c.at >= t.at {
            t.remaining = c.remaining;
            t.flags = c.flags;
            t.at = c.at;
        }
        Some(len)
    }

    fn rows(&self) -> usize {
        self.users.len() + self.on_torrents.len()
    }

    fn take(&mut self) -> Vec<Rows> {
        let mut users: Vec<_> = self.users.drain().collect();
        users.sort_unstable_by_key(|u| u.0);
        let mut rows = Rows::with_capacity(&USER_TOTALS, users.len());
        for (id, (c, at)) in users {
            let [a, b, c, d] = c.values();
            rows.push([id.into(), a, b, c, d, at.into()]);
        }
        let mut ts: Vec<_> = self.on_torrents.drain().collect();
        ts.sort_unstable_by_key(|t| t.0);
        let mut trows = Rows::with_capacity(&USER_TORRENTS, ts.len());
        for ((user, torrent), t) in ts {
            let [a, b, c, d] = t.counts.values();
            let int = |v: u64| Value::Int(v.min(i64::MAX as u64) as i64);
            trows.push([
                user.into(),
                torrent.into(),
                a,
                b,
                c,
                d,
                int(t.remaining),
                Value::Int(i64::from(t.flags & AccountChange::SEEDING)),
                Value::Int(i64::from(t.flags & AccountChange::STOPPED == 0)),
                int(t.announces),
                int(t.completed),
                t.completed_at.into(),
                t.at.into(),
            ]);
        }
        vec![rows, trows]
    }

    fn empty_like(&self) -> Box<dyn Queue> {
        Box::new(AccountQueue {
            users: HashMap::with_capacity(self.users.len()),
            on_torrents: HashMap::with_capacity(self.on_torrents.len()),
        })
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// `hp_user_totals`.
pub static USER_TOTALS: Table = Table {
    name: "hp_user_totals",
    columns: &[
        col("user_id", Type::Int, Merge::Key),
        col("uploaded", Type::Int, Merge::Add),
        col("downloaded", Type::Int, Merge::Add),
        col("uploaded_raw", Type::Int, Merge::Add),
        col("downloaded_raw", Type::Int, Merge::Add),
        col("updated_at", Type::Int, Merge::Max),
    ],
    update_only: false,
    keeps_older: None,
};

/// `hp_user_torrents`.
pub static USER_TORRENTS: Table = Table {
    name: "hp_user_torrents",
    columns: &[
        col("user_id", Type::Int, Merge::Key),
        col("torrent_id", Type::Int, Merge::Key),
        col("uploaded", Type::Int, Merge::Add),
        col("downloaded", Type::Int, Merge::Add),
        col("uploaded_raw", Type::Int, Merge::Add),
        col("downloaded_raw", Type::Int, Merge::Add),
        col("remaining", Type::Int, Merge::Replace),
        col("seeding", Type::Int, Merge::Replace),
        col("active", Type::Int, Merge::Replace),
        col("announces", Type::Int, Merge::Add),
        col("completed", Type::Int, Merge::Add),
        col("completed_at", Type::Int, Merge::Max),
        col("updated_at", Type::Int, Merge::Max),
    ],
    // Of two rows of one key (a failed batch under newer changes, replays of two workers'
    // journals), the state of the later announce stays; the counts add either way.
    update_only: false,
    keeps_older: None,
};

/// Private mode, as the store knows it.
pub static PRIVATE: Service = Service {
    name: "private",
    tags: &[TAG],
    tables: &[&USER_TOTALS, &USER_TORRENTS],
    queue: || Box::<AccountQueue>::default(),
    migrations: &[Migration {
        version: 1,
        name: "private users, torrents and accounting",
        sqlite: &[
            "CREATE TABLE hp_users (user_id INTEGER PRIMARY KEY, passkey TEXT NOT NULL UNIQUE, \
             can_leech INTEGER NOT NULL DEFAULT 1, updated_at INTEGER NOT NULL DEFAULT 0)",
            "CREATE INDEX hp_users_updated ON hp_users (updated_at)",
            "CREATE TABLE hp_private_torrents (torrent_id INTEGER PRIMARY KEY, \
             info_hash BLOB NOT NULL UNIQUE, download_pct INTEGER NOT NULL DEFAULT 100, \
             upload_pct INTEGER NOT NULL DEFAULT 100, updated_at INTEGER NOT NULL DEFAULT 0)",
            "CREATE INDEX hp_private_torrents_updated ON hp_private_torrents (updated_at)",
            "CREATE TABLE hp_user_totals (user_id INTEGER PRIMARY KEY, \
             uploaded INTEGER NOT NULL DEFAULT 0, downloaded INTEGER NOT NULL DEFAULT 0, \
             uploaded_raw INTEGER NOT NULL DEFAULT 0, downloaded_raw INTEGER NOT NULL DEFAULT 0, \
             updated_at INTEGER NOT NULL DEFAULT 0)",
            "CREATE TABLE hp_user_torrents (user_id INTEGER NOT NULL, torrent_id INTEGER NOT NULL, \
             uploaded INTEGER NOT NULL DEFAULT 0, downloaded INTEGER NOT NULL DEFAULT 0, \
             uploaded_raw INTEGER NOT NULL DEFAULT 0, downloaded_raw INTEGER NOT NULL DEFAULT 0, \
             remaining INTEGER NOT NULL DEFAULT 0, seeding INTEGER NOT NULL DEFAULT 0, \
             active INTEGER NOT NULL DEFAULT 0, announces INTEGER NOT NULL DEFAULT 0, \
             completed INTEGER NOT NULL DEFAULT 0, completed_at INTEGER NOT NULL DEFAULT 0, \
             updated_at INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (user_id, torrent_id))",
            "CREATE INDEX hp_user_torrents_torrent ON hp_user_torrents (torrent_id)",
        ],
        postgres: &[
            "CREATE TABLE hp_users (user_id BIGINT PRIMARY KEY, passkey TEXT NOT NULL UNIQUE, \
             can_leech SMALLINT NOT NULL DEFAULT 1, updated_at BIGINT NOT NULL DEFAULT 0)",
            "CREATE INDEX hp_users_updated ON hp_users (updated_at)",
            "CREATE TABLE hp_private_torrents (torrent_id BIGINT PRIMARY KEY, \
             info_hash BYTEA NOT NULL UNIQUE, download_pct INTEGER NOT NULL DEFAULT 100, \
             upload_pct INTEGER NOT NULL DEFAULT 100, updated_at BIGINT NOT NULL DEFAULT 0)",
            "CREATE INDEX hp_private_torrents_updated ON hp_private_torrents (updated_at)",
            "CREATE TABLE hp_user_totals (user_id BIGINT PRIMARY KEY, \
             uploaded BIGINT NOT NULL DEFAULT 0, downloaded BIGINT NOT NULL DEFAULT 0, \
             uploaded_raw BIGINT NOT NULL DEFAULT 0, downloaded_raw BIGINT NOT NULL DEFAULT 0, \
             updated_at BIGINT NOT NULL DEFAULT 0)",
            "CREATE TABLE hp_user_torrents (user_id BIGINT NOT NULL, torrent_id BIGINT NOT NULL, \
             uploaded BIGINT NOT NULL DEFAULT 0, downloaded BIGINT NOT NULL DEFAULT 0, \
             uploaded_raw BIGINT NOT NULL DEFAULT 0, downloaded_raw BIGINT NOT NULL DEFAULT 0, \
             remaining BIGINT NOT NULL DEFAULT 0, seeding BIGINT NOT NULL DEFAULT 0, \
             active BIGINT NOT NULL DEFAULT 0, announces BIGINT NOT NULL DEFAULT 0, \
             completed BIGINT NOT NULL DEFAULT 0, completed_at BIGINT NOT NULL DEFAULT 0, \
             updated_at BIGINT NOT NULL DEFAULT 0, PRIMARY KEY (user_id, torrent_id))",
            "CREATE INDEX hp_user_torrents_torrent ON hp_user_torrents (torrent_id)",
        ],
        mysql: &[
            "CREATE TABLE hp_users (user_id BIGINT PRIMARY KEY, \
             passkey VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL UNIQUE, \
             can_leech SMALLINT NOT NULL DEFAULT 1, updated_at BIGINT NOT NULL DEFAULT 0, \
             INDEX hp_users_updated (updated_at)) ENGINE=InnoDB",
            "CREATE TABLE hp_private_torrents (torrent_id BIGINT PRIMARY KEY, \
             info_hash BINARY(20) NOT NULL UNIQUE, download_pct INT NOT NULL DEFAULT 100, \
             upload_pct INT NOT NULL DEFAULT 100, updated_at BIGINT NOT NULL DEFAULT 0, \
             INDEX hp_private_torrents_updated (updated_at)) ENGINE=InnoDB",
            "CREATE TABLE hp_user_totals (user_id BIGINT PRIMARY KEY, \
             uploaded BIGINT NOT NULL DEFAULT 0, downloaded BIGINT NOT NULL DEFAULT 0, \
             uploaded_raw BIGINT NOT NULL DEFAULT 0, downloaded_raw BIGINT NOT NULL DEFAULT 0, \
             updated_at BIGINT NOT NULL DEFAULT 0) ENGINE=InnoDB",
            "CREATE TABLE hp_user_torrents (user_id BIGINT NOT NULL, torrent_id BIGINT NOT NULL, \
             uploaded BIGINT NOT NULL DEFAULT 0, downloaded BIGINT NOT NULL DEFAULT 0, \
             uploaded_raw BIGINT NOT NULL DEFAULT 0, downloaded_raw BIGINT NOT NULL DEFAULT 0, \
             remaining BIGINT NOT NULL DEFAULT 0, seeding SMALLINT NOT NULL DEFAULT 0, \
             active SMALLINT NOT NULL DEFAULT 0, announces BIGINT NOT NULL DEFAULT 0, \
             completed BIGINT NOT NULL DEFAULT 0, completed_at BIGINT NOT NULL DEFAULT 0, \
             updated_at BIGINT NOT NULL DEFAULT 0, PRIMARY KEY (user_id, torrent_id), \
             INDEX hp_user_torrents_torrent (torrent_id)) ENGINE=InnoDB",
        ],
    }],
};

#[cfg(test)]
mod tests {
    use super::*;
    use hotpath_store::queue::Queues;

    fn change(user: u32, torrent: u32, up: u64, at: u32) -> AccountChange {
        AccountChange {
            user,
            torrent,
            uploaded: up,
            downloaded: up / 2,
            uploaded_raw: up * 2,
            downloaded_raw: up,
            remaining: u64::from(at),
            completed: 0,
            flags: AccountChange::SEEDING,
            at,
        }
    }

    #[test]
    fn encoding_round_trips_and_rejects_others() {
        let c = AccountChange {
            completed: 1,
            flags: 3,
            ..change(7, 9, u64::MAX / 4, 1234)
        };
        let mut b = Vec::new();
        c.encode(&mut b);
        assert_eq!(b.len(), ACCOUNT_LEN);
        assert_eq!(AccountChange::decode(&b), Some((c, ACCOUNT_LEN)));
        assert!(AccountChange::decode(&b[..ACCOUNT_LEN - 1]).is_none());
        b[0] = 1;
        assert!(AccountQueue::default().apply(&b).is_none());
    }

    #[test]
    fn hostile_counts_saturate_instead_of_overflowing() {
        // A journal anyone could write: counts at the top of their range merge, saturated.
        let mut q = Queues::new(&[&PRIVATE]).unwrap();
        let top = AccountChange {
            completed: u64::MAX,
            ..change(1, 2, u64::MAX / 2, 9)
        };
        q.push(&top).unwrap();
        q.push(&top).unwrap();
        let b = q.take();
        let t = b.part(&USER_TORRENTS).unwrap();
        assert_eq!(t.row(0)[10], Value::Int(i64::MAX), "completed");
        assert_eq!(t.row(0)[4], Value::Int(i64::MAX), "uploaded_raw");
    }

    #[test]
    fn deltas_add_per_user_and_per_torrent_and_the_latest_state_wins() {
        let mut q = Queues::new(&[&PRIVATE]).unwrap();
        q.push(&change(1, 10, 100, 50)).unwrap();
        q.push(&change(1, 11, 10, 40)).unwrap();
        q.push(&AccountChange {
            completed: 1,
            flags: AccountChange::STOPPED,
            ..change(1, 10, 1000, 60)
        })
        .unwrap();
        // An older announce replayed after a newer one adds its counts, not its state.
        q.push(&change(1, 10, 1, 55)).unwrap();
        assert_eq!(q.rows(), 3);
        let b = q.take();
        let users = b.part(&USER_TOTALS).unwrap();
        assert_eq!(users.len(), 1);
        assert_eq!(
            users.row(0)[1..],
            [1111i64, 555, 2222, 1111, 60].map(Value::Int)
        );
        let t = b.part(&USER_TORRENTS).unwrap();
        assert_eq!(t.len(), 2);
        let ten = t.row(0);
        assert_eq!(ten[1], Value::Int(10));
        assert_eq!(ten[2], Value::Int(1101));
        assert_eq!(
            ten[6..],
            [60i64, 0, 0, 3, 1, 60, 60].map(Value::Int),
            "remaining, seeding, active, announces, completed, completed_at, updated_at"
        );
    }
}
