//! Changes and the merge queue: what services hand the store, and how many changes to one key
//! become one row to write.
//!
//! Owns: [`Change`] (with its journal encoding), [`TorrentRow`] and the merge rules, and
//! [`Pending`], the per-key map the flusher drains into sorted [`Batch`]es. Must not: do I/O.

// hashbrown's default hasher: these maps are keyed by data the workers merge on every commit.
use hashbrown::HashMap;
use smallvec::SmallVec;

pub use crate::batch::Batch;
use crate::table::{col, Merge, Rows, Table, Type, Value};

/// A 20-byte key (an info hash).
pub type Key = [u8; 20];

/// One change a service hands the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A torrent's counts at `at`, and downloads it completed since the last change.
    Torrent {
        /// The info hash.
        info_hash: Key,
        /// Completed downloads to add.
        completed: u32,
        /// Seeders now.
        seeders: u32,
        /// Leechers now.
        leechers: u32,
        /// Unix seconds of the change.
        at: u32,
    },
    /// A popup shown to a user, or the user's click or close: the user's state for that
    /// popup after it (absolute, so the newest wins), and one line of the event log.
    Popup {
        /// The user id (at most [`MAX_USER_LEN`] bytes).
        user: Box<str>,
        /// The popup id.
        popup: u32,
        /// What happened: [`SHOWN`], [`CLICK`] or [`CLOSE`].
        action: u8,
        /// Unix second from which the user may see the popup again (`u64::MAX`: never).
        next_eligible: u64,
        /// Times the user has been shown the popup, this one included.
        shows: u32,
        /// Unix seconds of the event.
        at: u32,
    },
    /// A row a script appends to one of its tables (`hp.store.enqueue`).
    LuaRow {
        /// The script's table name (at most [`MAX_NAME_LEN`] bytes).
        table: Box<str>,
        /// Unix seconds.
        at: u32,
        /// The row, as JSON text (at most [`MAX_ROW_LEN`] bytes).
        data: Box<str>,
    },
    /// A number a script adds to a counter (`hp.store.add`): a column of a keyed row.
    LuaAdd {
        /// The script's table name (at most [`MAX_NAME_LEN`] bytes).
        table: Box<str>,
        /// The row's key (at most [`MAX_USER_LEN`] bytes).
        key: Box<str>,
        /// The column (at most [`MAX_NAME_LEN`] bytes).
        column: Box<str>,
        /// What to add.
        delta: i64,
        /// Unix seconds.
        at: u32,
    },
}

/// The longest table or column name of a script's change.
pub const MAX_NAME_LEN: usize = 64;
/// The longest row a script may append.
pub const MAX_ROW_LEN: usize = 65_536;

/// [`Change::Popup`]'s action: shown.
pub const SHOWN: u8 = 1;
/// [`Change::Popup`]'s action: clicked.
pub const CLICK: u8 = 2;
/// [`Change::Popup`]'s action: closed.
pub const CLOSE: u8 = 3;
/// The longest user id a change carries.
pub const MAX_USER_LEN: usize = 255;

const TAG_TORRENT: u8 = 1;
const TAG_POPUP: u8 = 2;
const TAG_LUA_ROW: u8 = 3;
const TAG_LUA_ADD: u8 = 4;
/// Encoded size of a [`Change::LuaRow`] without its table and data.
const LUA_ROW_FIXED: usize = 1 + 4 + 1 + 4;
/// Encoded size of a [`Change::LuaAdd`] without its names and key.
const LUA_ADD_FIXED: usize = 1 + 8 + 4 + 1 + 1 + 1;
/// Encoded size of a [`Change::Popup`] without its user id.
const POPUP_FIXED: usize = 1 + 4 + 1 + 8 + 4 + 4 + 1;
/// Encoded size of a [`Change::Torrent`].
pub const TORRENT_LEN: usize = 1 + 20 + 16;

impl Change {
    /// Bytes of its journal encoding.
    pub fn encoded_len(&self) -> usize {
        match self {
            Change::Torrent { .. } => TORRENT_LEN,
            Change::Popup { user, .. } => POPUP_FIXED + user.len().min(MAX_USER_LEN),
            Change::LuaRow { table, data, .. } => {
                LUA_ROW_FIXED + table.len().min(MAX_NAME_LEN) + data.len().min(MAX_ROW_LEN)
            }
            Change::LuaAdd {
                table, key, column, ..
            } => {
                LUA_ADD_FIXED
                    + table.len().min(MAX_NAME_LEN)
                    + key.len().min(MAX_USER_LEN)
                    + column.len().min(MAX_NAME_LEN)
            }
        }
    }

    /// Appends the change's journal encoding to `out`. A user id is cut at
    /// [`MAX_USER_LEN`] bytes (callers refuse longer ones before).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Change::Torrent {
                info_hash,
                completed,
                seeders,
                leechers,
                at,
            } => {
                out.push(TAG_TORRENT);
                out.extend_from_slice(info_hash);
                for v in [completed, seeders, leechers, at] {
                    out.extend_from_slice(&v.to_le_bytes());
                }
            }
            Change::Popup {
                user,
                popup,
                action,
                next_eligible,
                shows,
                at,
            } => {
                out.push(TAG_POPUP);
                out.extend_from_slice(&popup.to_le_bytes());
                out.push(*action);
                out.extend_from_slice(&next_eligible.to_le_bytes());
                out.extend_from_slice(&shows.to_le_bytes());
                out.extend_from_slice(&at.to_le_bytes());
                let user = &user.as_bytes()[..user.len().min(MAX_USER_LEN)];
                out.push(user.len() as u8);
                out.extend_from_slice(user);
            }
            Change::LuaRow { table, at, data } => {
                let table = cut(table, MAX_NAME_LEN);
                let data = cut(data, MAX_ROW_LEN);
                out.push(TAG_LUA_ROW);
                out.extend_from_slice(&at.to_le_bytes());
                out.push(table.len() as u8);
                out.extend_from_slice(&(data.len() as u32).to_le_bytes());
                out.extend_from_slice(table);
                out.extend_from_slice(data);
            }
            Change::LuaAdd {
                table,
                key,
                column,
                delta,
                at,
            } => {
                let (table, key, column) = (
                    cut(table, MAX_NAME_LEN),
                    cut(key, MAX_USER_LEN),
                    cut(column, MAX_NAME_LEN),
                );
                out.push(TAG_LUA_ADD);
                out.extend_from_slice(&delta.to_le_bytes());
                out.extend_from_slice(&at.to_le_bytes());
                for part in [table, key, column] {
                    out.push(part.len() as u8);
                }
                for part in [table, key, column] {
                    out.extend_from_slice(part);
                }
            }
        }
    }

    /// Decodes every change in a journal record's payload; `None` when it is malformed.
    pub fn decode_all(mut payload: &[u8], each: &mut dyn FnMut(Change)) -> Option<()> {
        let u32_at = |b: &[u8], i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        while let Some(&tag) = payload.first() {
            match tag {
                TAG_TORRENT if payload.len() >= TORRENT_LEN => {
                    let b = &payload[..TORRENT_LEN];
                    each(Change::Torrent {
                        info_hash: b[1..21].try_into().unwrap(),
                        completed: u32_at(b, 21),
                        seeders: u32_at(b, 25),
                        leechers: u32_at(b, 29),
                        at: u32_at(b, 33),
                    });
                    payload = &payload[TORRENT_LEN..];
                }
                TAG_POPUP if payload.len() >= POPUP_FIXED => {
                    let b = payload;
                    let len = POPUP_FIXED + usize::from(b[POPUP_FIXED - 1]);
                    let user = std::str::from_utf8(b.get(POPUP_FIXED..len)?).ok()?;
                    each(Change::Popup {
                        popup: u32_at(b, 1),
                        action: b[5],
                        next_eligible: u64::from_le_bytes(b[6..14].try_into().unwrap()),
                        shows: u32_at(b, 14),
                        at: u32_at(b, 18),
                        user: user.into(),
                    });
                    payload = &payload[len..];
                }
                TAG_LUA_ROW if payload.len() >= LUA_ROW_FIXED => {
                    let b = payload;
                    let table_len = usize::from(b[5]);
                    let data_len = u32_at(b, 6) as usize;
                    // Longer than `encode` writes: not a record of ours.
                    if table_len > MAX_NAME_LEN || data_len > MAX_ROW_LEN {
                        return None;
                    }
                    let table_end = LUA_ROW_FIXED + table_len;
                    let end = table_end.checked_add(data_len)?;
                    each(Change::LuaRow {
                        at: u32_at(b, 1),
                        table: std::str::from_utf8(b.get(LUA_ROW_FIXED..table_end)?)
                            .ok()?
                            .into(),
                        data: std::str::from_utf8(b.get(table_end..end)?).ok()?.into(),
                    });
                    payload = &payload[end..];
                }
                TAG_LUA_ADD if payload.len() >= LUA_ADD_FIXED => {
                    let b = payload;
                    let lens = [13, 14, 15].map(|i| usize::from(b[i]));
                    if lens[0] > MAX_NAME_LEN || lens[1] > MAX_USER_LEN || lens[2] > MAX_NAME_LEN {
                        return None;
                    }
                    let mut at = LUA_ADD_FIXED;
                    let mut parts: [&str; 3] = [""; 3];
                    for (part, len) in parts.iter_mut().zip(lens) {
                        *part = std::str::from_utf8(b.get(at..at + len)?).ok()?;
                        at += len;
                    }
                    each(Change::LuaAdd {
                        delta: i64::from_le_bytes(b[1..9].try_into().unwrap()),
                        at: u32_at(b, 9),
                        table: parts[0].into(),
                        key: parts[1].into(),
                        column: parts[2].into(),
                    });
                    payload = &payload[at..];
                }
                _ => return None,
            }
        }
        Some(())
    }
}

/// At most `max` bytes of `s`, cut at a character boundary (callers refuse longer ones before).
fn cut(s: &str, max: usize) -> &[u8] {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s.as_bytes()[..end]
}

/// A row a script appended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LuaRow {
    /// The script's table.
    pub table: Box<str>,
    /// Unix seconds.
    pub at: u32,
    /// The row as JSON text.
    pub data: Box<str>,
}

/// A script's counter: (table, key, column).
pub type LuaCounter = (Box<str>, Box<str>, Box<str>);

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

/// One user's state for one popup, as the flusher upserts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PopupUserRow {
    /// Unix second from which the popup may be shown again (`u64::MAX`: never).
    pub next_eligible: u64,
    /// Times shown.
    pub shows: u32,
    /// The last action ([`SHOWN`], [`CLICK`], [`CLOSE`]).
    pub last_action: u8,
    /// Unix seconds of that action.
    pub updated_at: u32,
}

impl PopupUserRow {
    /// A row of [`POPUP_USERS`]: `(user, popup, state)`.
    pub fn from_row(row: &[Value]) -> (&str, u32, PopupUserRow) {
        let state = PopupUserRow {
            next_eligible: crate::backend::loaded_time(row[2].int()),
            shows: row[3].int() as u32,
            last_action: row[4].int() as u8,
            updated_at: row[5].int() as u32,
        };
        (row[0].text(), row[1].int() as u32, state)
    }

    /// The order of a user's states for one popup: later second, then more shows, then an
    /// answer after the show it answers. Several workers (and, replayed, several journals)
    /// may hold changes of one user, and no order among them is kept: this one is.
    pub(crate) fn order(&self) -> (u32, u32, bool) {
        (self.updated_at, self.shows, self.last_action != SHOWN)
    }
}

/// One line of the popup event log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PopupEvent {
    /// Unix seconds.
    pub at: u32,
    /// The user id.
    pub user: Box<str>,
    /// The popup id.
    pub popup: u32,
    /// [`SHOWN`], [`CLICK`] or [`CLOSE`].
    pub action: u8,
}

/// A user's pending rows per popup: one inline (a user mostly changes one popup between
/// two flushes), more on the heap.
type UserRows = SmallVec<[(u32, PopupUserRow); 1]>;

/// Merged changes not yet written, and how far each worker's journal they cover.
#[derive(Debug, Default)]
pub struct Pending {
    torrents: HashMap<Key, TorrentRow>,
    /// Per user, per popup: the newest state (keyed by user so a user's pending state is
    /// one lookup when the popup service loads it).
    popup_users: HashMap<Box<str>, UserRows>,
    /// Rows in `popup_users`.
    popup_user_rows: usize,
    /// The event log, in arrival order.
    popup_events: Vec<PopupEvent>,
    /// Per (popup, UTC day): shows to add.
    popup_daily: HashMap<(u32, u32), u64>,
    /// Rows scripts appended, in arrival order.
    lua_rows: Vec<LuaRow>,
    /// Per script counter: what to add, and the second of the latest change.
    lua_counts: HashMap<LuaCounter, (i64, u32)>,
    /// Per journal (worker), the last record sequence merged here.
    seqs: HashMap<u32, u64>,
    /// Changes merged since the last take (for the metrics).
    changes: u64,
}

impl Pending {
    /// An empty queue with room for as much as `like` holds, so the next interval's changes
    /// merge without the tables growing (a growing table rehashes everything it holds, on
    /// the worker that commits).
    pub fn with_room_of(like: &Pending) -> Pending {
        Pending {
            torrents: HashMap::with_capacity(like.torrents.len()),
            popup_users: HashMap::with_capacity(like.popup_users.len()),
            popup_user_rows: 0,
            popup_events: Vec::with_capacity(like.popup_events.len()),
            popup_daily: HashMap::with_capacity(like.popup_daily.len()),
            lua_rows: Vec::new(),
            lua_counts: HashMap::with_capacity(like.lua_counts.len()),
            seqs: HashMap::with_capacity(like.seqs.len()),
            changes: 0,
        }
    }

    /// Merges one change (taken, so its user id moves into the event log uncopied).
    pub fn apply(&mut self, change: Change) {
        self.changes += 1;
        match change {
            Change::Torrent {
                info_hash,
                completed,
                seeders,
                leechers,
                at,
            } => {
                let row = TorrentRow {
                    completed: u64::from(completed),
                    seeders,
                    leechers,
                    first_seen: at,
                    last_active: at,
                };
                self.torrents
                    .entry(info_hash)
                    .and_modify(|r| r.merge_newer(&row))
                    .or_insert(row);
            }
            Change::Popup {
                user,
                popup,
                action,
                next_eligible,
                shows,
                at,
            } => {
                let row = PopupUserRow {
                    next_eligible,
                    shows,
                    last_action: action,
                    updated_at: at,
                };
                self.put_popup_user(&user, popup, row);
                self.popup_events.push(PopupEvent {
                    at,
                    user,
                    popup,
                    action,
                });
                if action == SHOWN {
                    *self.popup_daily.entry((popup, at / 86_400)).or_insert(0) += 1;
                }
            }
            Change::LuaRow { table, at, data } => self.lua_rows.push(LuaRow { table, at, data }),
            Change::LuaAdd {
                table,
                key,
                column,
                delta,
                at,
            } => self.add_lua_count((table, key, column), delta, at),
        }
    }

    fn add_lua_count(&mut self, counter: LuaCounter, delta: i64, at: u32) {
        let c = self.lua_counts.entry(counter).or_insert((0, at));
        c.0 = c.0.saturating_add(delta);
        c.1 = c.1.max(at);
    }

    /// Sets a user's state for a popup unless the state held is later (see
    /// [`PopupUserRow::order`]); of two equal in order, the one merged last wins.
    fn put_popup_user(&mut self, user: &str, popup: u32, row: PopupUserRow) {
        let rows = match self.popup_users.get_mut(user) {
            Some(rows) => rows,
            None => self.popup_users.entry(user.into()).or_default(),
        };
        match rows.iter_mut().find(|(p, _)| *p == popup) {
            Some((_, r)) => {
                if row.order() >= r.order() {
                    *r = row;
                }
            }
            None => {
                rows.push((popup, row));
                self.popup_user_rows += 1;
            }
        }
    }

    /// A user's pending state per popup (written to the database by the next flush).
    pub fn popup_user(&self, user: &str) -> &[(u32, PopupUserRow)] {
        self.popup_users
            .get(user)
            .map_or(&[], |rows| rows.as_slice())
    }

    /// The users with pending state.
    pub fn popup_user_names(&self) -> impl Iterator<Item = &str> + '_ {
        self.popup_users.keys().map(|u| &**u)
    }

    /// `(popup, action)` of every pending event.
    pub fn popup_event_keys(&self) -> impl Iterator<Item = (u32, u8)> + '_ {
        self.popup_events.iter().map(|e| (e.popup, e.action))
    }

    /// Shows pending per popup on UTC day `day`.
    pub fn popup_daily(&self, day: u32) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.popup_daily
            .iter()
            .filter(move |((_, d), _)| *d == day)
            .map(|((p, _), n)| (*p, *n))
    }

    /// Records that journal `journal` is merged up to record `seq`.
    pub fn covered(&mut self, journal: u32, seq: u64) {
        let s = self.seqs.entry(journal).or_insert(0);
        *s = (*s).max(seq);
    }

    /// Distinct rows pending.
    pub fn rows(&self) -> usize {
        self.torrents.len()
            + self.popup_user_rows
            + self.popup_events.len()
            + self.popup_daily.len()
            + self.lua_rows.len()
            + self.lua_counts.len()
    }

    /// `(torrent, completed downloads pending)` for every torrent with some.
    pub fn completed_rows(&self) -> impl Iterator<Item = (Key, u64)> + '_ {
        self.torrents
            .iter()
            .filter(|(_, r)| r.completed > 0)
            .map(|(k, r)| (*k, r.completed))
    }

    /// Empties the queue into a batch sorted by key.
    pub fn take(&mut self) -> Batch {
        std::mem::take(self).into_batch()
    }

    /// This queue as a batch sorted by key. The flusher swaps the queue out under the lock
    /// (`std::mem::take`, O(1)) and sorts it after letting go, so workers never wait for a sort.
    pub fn into_batch(self) -> Batch {
        let mut b = Batch {
            parts: Vec::new(),
            seqs: self.seqs.into_iter().collect(),
            changes: self.changes,
        };
        b.seqs.sort_unstable();
        let mut torrents: Vec<_> = self.torrents.into_iter().collect();
        torrents.sort_unstable_by_key(|r| r.0);
        let mut rows = Rows::with_capacity(&TORRENTS, torrents.len());
        for (k, r) in torrents {
            rows.push(r.row(&k));
        }
        b.push(rows);
        let mut users: Vec<_> = self.popup_users.into_iter().collect();
        users.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut rows = Rows::with_capacity(&POPUP_USERS, self.popup_user_rows);
        for (user, mut states) in users {
            states.sort_unstable_by_key(|s| s.0);
            for (popup, r) in states {
                rows.push([
                    Value::Text(user.clone()),
                    popup.into(),
                    Value::Int(crate::backend::stored_time(r.next_eligible)),
                    r.shows.into(),
                    u32::from(r.last_action).into(),
                    r.updated_at.into(),
                ]);
            }
        }
        b.push(rows);
        let mut rows = Rows::with_capacity(&POPUP_EVENTS, self.popup_events.len());
        for e in self.popup_events {
            rows.push([
                e.at.into(),
                Value::Text(e.user),
                e.popup.into(),
                u32::from(e.action).into(),
            ]);
        }
        b.push(rows);
        let mut daily: Vec<_> = self.popup_daily.into_iter().collect();
        daily.sort_unstable();
        let mut rows = Rows::with_capacity(&POPUP_DAILY, daily.len());
        for ((popup, day), n) in daily {
            rows.push([popup.into(), day.into(), Value::Int(n as i64)]);
        }
        b.push(rows);
        let mut rows = Rows::with_capacity(&LUA_ROWS, self.lua_rows.len());
        for r in self.lua_rows {
            rows.push([Value::Text(r.table), r.at.into(), Value::Text(r.data)]);
        }
        b.push(rows);
        let mut counts: Vec<_> = self.lua_counts.into_iter().collect();
        counts.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut rows = Rows::with_capacity(&LUA_COUNTERS, counts.len());
        for ((t, k, c), (delta, at)) in counts {
            rows.push([
                Value::Text(t),
                Value::Text(k),
                Value::Text(c),
                Value::Int(delta),
                at.into(),
            ]);
        }
        b.push(rows);
        b
    }
}

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
    keeps_older: None,
};

/// `hp_popup_users`: a user's state per popup; of two, the later in [`PopupUserRow::order`]
/// stays.
pub static POPUP_USERS: Table = Table {
    name: "hp_popup_users",
    columns: &[
        col("user_id", Type::Text, Merge::Key),
        col("popup_id", Type::Int, Merge::Key),
        col("next_eligible", Type::Int, Merge::Replace),
        col("shows", Type::Int, Merge::Replace),
        col("last_action", Type::Int, Merge::Replace),
        col("updated_at", Type::Int, Merge::Replace),
    ],
    keeps_older: Some(|older, newer| {
        PopupUserRow::from_row(older).2.order() > PopupUserRow::from_row(newer).2.order()
    }),
};

/// `hp_popup_events`: the event log.
pub static POPUP_EVENTS: Table = Table {
    name: "hp_popup_events",
    columns: &[
        col("at", Type::Int, Merge::Keep),
        col("user_id", Type::Text, Merge::Keep),
        col("popup_id", Type::Int, Merge::Keep),
        col("action", Type::Int, Merge::Keep),
    ],
    keeps_older: None,
};

/// `hp_popup_daily`: shows per popup per UTC day.
pub static POPUP_DAILY: Table = Table {
    name: "hp_popup_daily",
    columns: &[
        col("popup_id", Type::Int, Merge::Key),
        col("day", Type::Int, Merge::Key),
        col("shows", Type::Int, Merge::Add),
    ],
    keeps_older: None,
};

/// `hp_lua_rows`: rows scripts append.
pub static LUA_ROWS: Table = Table {
    name: "hp_lua_rows",
    columns: &[
        col("tbl", Type::Text, Merge::Keep),
        col("at", Type::Int, Merge::Keep),
        col("data", Type::Text, Merge::Keep),
    ],
    keeps_older: None,
};

/// `hp_lua_counters`: counters scripts add to.
pub static LUA_COUNTERS: Table = Table {
    name: "hp_lua_counters",
    columns: &[
        col("tbl", Type::Text, Merge::Key),
        col("k", Type::Text, Merge::Key),
        col("col", Type::Text, Merge::Key),
        col("value", Type::Int, Merge::Add),
        col("updated_at", Type::Int, Merge::Max),
    ],
    keeps_older: None,
};

/// Every table the services write behind.
pub static TABLES: [&Table; 6] = [
    &TORRENTS,
    &POPUP_USERS,
    &POPUP_EVENTS,
    &POPUP_DAILY,
    &LUA_ROWS,
    &LUA_COUNTERS,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_changes_round_trip_and_counters_add() {
        let changes = vec![
            Change::LuaRow {
                table: "checkins".into(),
                at: 5,
                data: "{\"user\":\"ü\"}".into(),
            },
            Change::LuaAdd {
                table: "places".into(),
                key: "café".into(),
                column: "visits".into(),
                delta: -3,
                at: 6,
            },
            Change::LuaAdd {
                table: "places".into(),
                key: "café".into(),
                column: "visits".into(),
                delta: 10,
                at: 4,
            },
        ];
        let mut buf = Vec::new();
        for c in &changes {
            c.encode(&mut buf);
        }
        assert_eq!(
            buf.len(),
            changes.iter().map(Change::encoded_len).sum::<usize>()
        );
        let mut back = Vec::new();
        Change::decode_all(&buf, &mut |c| back.push(c)).unwrap();
        assert_eq!(back, changes);
        for cut in 1..buf.len() {
            let mut n = 0;
            let whole = Change::decode_all(&buf[..cut], &mut |_| n += 1).is_some();
            assert!(
                !whole || n < changes.len(),
                "a cut record is never taken whole"
            );
        }
        let mut p = Pending::default();
        for c in changes {
            p.apply(c);
        }
        assert_eq!(p.rows(), 2);
        let b = p.take();
        assert_eq!(b.part(&LUA_ROWS).unwrap().len(), 1);
        assert_eq!(
            b.part(&LUA_COUNTERS).unwrap().row(0)[3..],
            [Value::Int(7), Value::Int(6)],
            "deltas add; the latest second stays"
        );
    }

    fn t(key: u8, completed: u32, seeders: u32, at: u32) -> Change {
        Change::Torrent {
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
        let mut back = Vec::new();
        Change::decode_all(&buf, &mut |c| back.push(c)).unwrap();
        assert_eq!(back, changes);
        assert!(Change::decode_all(&buf[..buf.len() - 1], &mut |_| {}).is_none());
        assert!(Change::decode_all(&[9, 1, 2], &mut |_| {}).is_none());
    }

    /// Found by the journal fuzz target: a record naming a column longer than `encode` writes
    /// decoded, and would have been written to the database past the names' limit.
    #[test]
    fn records_longer_than_encode_writes_are_refused() {
        let add = |table: usize, key: usize, column: usize| {
            let mut b = vec![TAG_LUA_ADD];
            b.extend_from_slice(&(-3i64).to_le_bytes());
            b.extend_from_slice(&9u32.to_le_bytes());
            b.extend_from_slice(&[table as u8, key as u8, column as u8]);
            b.extend(std::iter::repeat_n(b'Y', table + key + column));
            b
        };
        assert!(Change::decode_all(&add(9, 0, MAX_NAME_LEN), &mut |_| {}).is_some());
        assert!(Change::decode_all(&add(9, 0, MAX_NAME_LEN + 1), &mut |_| {}).is_none());
        assert!(Change::decode_all(&add(MAX_NAME_LEN + 1, 0, 1), &mut |_| {}).is_none());
        let row = |table: usize, data: usize| {
            let mut b = vec![TAG_LUA_ROW];
            b.extend_from_slice(&9u32.to_le_bytes());
            b.push(table as u8);
            b.extend_from_slice(&(data as u32).to_le_bytes());
            b.extend(std::iter::repeat_n(b'{', table + data));
            b
        };
        assert!(Change::decode_all(&row(MAX_NAME_LEN, MAX_ROW_LEN), &mut |_| {}).is_some());
        assert!(Change::decode_all(&row(MAX_NAME_LEN + 1, 1), &mut |_| {}).is_none());
        assert!(Change::decode_all(&row(1, MAX_ROW_LEN + 1), &mut |_| {}).is_none());
    }

    fn pop(user: &str, popup: u32, action: u8, next: u64, shows: u32, at: u32) -> Change {
        Change::Popup {
            user: user.into(),
            popup,
            action,
            next_eligible: next,
            shows,
            at,
        }
    }

    #[test]
    fn popup_changes_round_trip_and_merge_into_state_log_and_daily_counts() {
        let changes = vec![
            pop("alice", 7, SHOWN, 1_000, 1, 86_400 + 10),
            t(1, 1, 1, 5),
            pop("alice", 7, CLICK, u64::MAX, 1, 86_400 + 20),
            pop("bob", 7, SHOWN, 2_000, 3, 2 * 86_400),
        ];
        let mut buf = Vec::new();
        for c in &changes {
            c.encode(&mut buf);
        }
        assert_eq!(
            buf.len(),
            changes.iter().map(Change::encoded_len).sum::<usize>()
        );
        let mut back = Vec::new();
        Change::decode_all(&buf, &mut |c| back.push(c)).unwrap();
        assert_eq!(back, changes);
        assert!(Change::decode_all(&buf[..buf.len() - 1], &mut |_| {}).is_none());

        let mut p = Pending::default();
        for c in &changes {
            p.apply(c.clone());
        }
        assert_eq!(p.rows(), 1 + 2 + 3 + 2);
        let mut b = p.take();
        p.apply(pop("alice", 7, CLOSE, 5_000, 1, 3 * 86_400));
        b.merge(p.take());
        // The newest state wins, the log keeps every event in order, shows per day add.
        let users = b.part(&POPUP_USERS).unwrap();
        let alice = users.row(0);
        assert_eq!(alice[0], Value::from("alice"), "sorted by user");
        assert_eq!(
            alice[2..5],
            [5_000u32.into(), 1u32.into(), u32::from(CLOSE).into()]
        );
        let actions: Vec<i64> = b
            .part(&POPUP_EVENTS)
            .unwrap()
            .iter()
            .map(|e| e[3].int())
            .collect();
        assert_eq!(actions, [SHOWN, CLICK, SHOWN, CLOSE].map(i64::from));
        let daily: Vec<_> = b
            .part(&POPUP_DAILY)
            .unwrap()
            .iter()
            .map(|r| r.to_vec())
            .collect();
        assert_eq!(
            daily,
            [[7u32, 1, 1], [7, 2, 1]].map(|r| r.map(Value::from).to_vec())
        );

        // A failed batch put under newer changes keeps a state that orders later.
        let mut failed = Pending::default();
        failed.apply(pop("dan", 1, CLICK, 70, 2, 500));
        let mut failed = failed.take();
        let mut newer = Pending::default();
        newer.apply(pop("dan", 1, SHOWN, 60, 1, 400));
        failed.merge(newer.take());
        assert_eq!(failed.part(&POPUP_USERS).unwrap().row(0)[2], Value::Int(70));

        // Merged out of order (two workers' journals, replayed one after the other), a
        // user's state still ends at the latest: later second, more shows, answer after show.
        let mut p = Pending::default();
        for c in [
            pop("carol", 1, SHOWN, 50, 2, 100),
            pop("carol", 1, CLICK, 900, 2, 100),
            pop("carol", 1, SHOWN, 40, 1, 100),
            pop("carol", 1, CLOSE, 60, 1, 99),
        ] {
            p.apply(c);
        }
        let b = p.take();
        let carol = b.part(&POPUP_USERS).unwrap().row(0);
        assert_eq!(
            carol[2..5],
            [900u32.into(), 2u32.into(), u32::from(CLICK).into()]
        );
    }

    #[test]
    fn changes_to_one_key_merge_into_one_row() {
        let mut p = Pending::default();
        p.apply(t(7, 1, 3, 200));
        p.apply(t(7, 1, 5, 100));
        p.apply(t(7, 0, 4, 300));
        p.apply(t(1, 1, 1, 50));
        p.covered(0, 9);
        p.covered(0, 4);
        p.covered(2, 1);
        assert_eq!(p.rows(), 2);
        assert!(p.completed_rows().any(|r| r == ([7; 20], 2)));
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
        let mut p = Pending::default();
        p.apply(t(7, 2, 3, 100));
        p.apply(t(8, 1, 1, 100));
        p.covered(1, 5);
        let mut b = p.take();
        p.apply(t(7, 1, 9, 200));
        p.covered(1, 6);
        b.merge(p.take());
        assert_eq!(b.seqs, vec![(1, 6)]);
        assert_eq!(b.changes, 3);
        let t = b.part(&TORRENTS).unwrap();
        assert_eq!(t.row(0)[1..], [3u32, 9, 10, 100, 200].map(Value::from));
        assert_eq!(t.row(1)[1], Value::Int(1));
    }
}
