//! The databases behind the store: one [`Backend`] trait, the SQL each dialect needs, and
//! [`connect`], which picks the backend from the URL's scheme.
//!
//! Every backend connects lazily and drops its connection after an error, so the next call
//! (the flusher's retry) reconnects: a restarted database server is picked up without help.

mod mysql;
mod postgres;
mod sqlite;

use std::path::Path;
use std::time::Duration;

use crate::merge::{Batch, Key, PopupUserRow, TorrentRow};
use crate::migrations::Migration;
use crate::{Fault, StoreError};

/// An SQL dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// SQLite (embedded).
    Sqlite,
    /// PostgreSQL.
    Postgres,
    /// MySQL or MariaDB.
    Mysql,
}

impl Dialect {
    /// The name used in logs and errors.
    pub fn name(self) -> &'static str {
        match self {
            Dialect::Sqlite => "sqlite",
            Dialect::Postgres => "postgres",
            Dialect::Mysql => "mysql",
        }
    }

    /// Most rows in one multi-row statement: under each server's limit of bound parameters
    /// (SQLite 32766, PostgreSQL and MySQL 65535) at six parameters a row.
    pub fn rows_per_statement(self) -> usize {
        match self {
            Dialect::Sqlite => 5000,
            Dialect::Postgres | Dialect::Mysql => 10000,
        }
    }

    /// Splits `rows` rows into statement sizes that repeat from batch to batch, so prepared
    /// statements are parsed once and reused: full statements of [`rows_per_statement`]
    /// (rounded down to a power of two), then one per set bit of the rest (at most one of
    /// each power of two). Parsing a fresh 100-row upsert costs SQLite as much as running it.
    ///
    /// [`rows_per_statement`]: Dialect::rows_per_statement
    pub fn statement_sizes(self, mut rows: usize) -> impl Iterator<Item = usize> {
        let full = 1 << self.rows_per_statement().ilog2();
        std::iter::from_fn(move || {
            let n = if rows >= full {
                full
            } else if rows > 0 {
                1 << rows.ilog2()
            } else {
                return None;
            };
            rows -= n;
            Some(n)
        })
    }

    fn placeholder(self, out: &mut String, n: usize) {
        use std::fmt::Write as _;
        match self {
            Dialect::Postgres => {
                let _ = write!(out, "${n}");
            }
            Dialect::Sqlite | Dialect::Mysql => out.push('?'),
        }
    }

    /// `INSERT … VALUES (…), (…) <upsert tail>` for `rows` rows of `cols` columns.
    fn multi_insert(self, head: &str, cols: usize, rows: usize, tail: &str) -> String {
        let mut sql = String::with_capacity(head.len() + tail.len() + rows * cols * 4);
        sql.push_str(head);
        let mut n = 0;
        for r in 0..rows {
            sql.push_str(if r == 0 { " VALUES (" } else { ", (" });
            for c in 0..cols {
                if c > 0 {
                    sql.push(',');
                }
                n += 1;
                self.placeholder(&mut sql, n);
            }
            sql.push(')');
        }
        sql.push(' ');
        sql.push_str(tail);
        sql
    }

    /// The upsert of `rows` torrent rows: counts add, snapshots replace, `last_active` only
    /// moves forward, `first_seen` is kept.
    pub fn upsert_torrents(self, rows: usize) -> String {
        self.multi_insert(TORRENTS_HEAD, 6, rows, self.torrents_tail())
    }

    /// What an upsert of torrent rows does on a conflict.
    fn torrents_tail(self) -> &'static str {
        match self {
            Dialect::Sqlite => {
                "ON CONFLICT (info_hash) DO UPDATE SET completed = hp_torrents.completed + excluded.completed, \
                 seeders = excluded.seeders, leechers = excluded.leechers, \
                 last_active = max(hp_torrents.last_active, excluded.last_active)"
            }
            Dialect::Postgres => {
                "ON CONFLICT (info_hash) DO UPDATE SET completed = hp_torrents.completed + excluded.completed, \
                 seeders = excluded.seeders, leechers = excluded.leechers, \
                 last_active = GREATEST(hp_torrents.last_active, excluded.last_active)"
            }
            Dialect::Mysql => {
                "ON DUPLICATE KEY UPDATE completed = completed + VALUES(completed), \
                 seeders = VALUES(seeders), leechers = VALUES(leechers), \
                 last_active = GREATEST(last_active, VALUES(last_active))"
            }
        }
    }

    /// The upsert of `rows` journal positions (they only move forward).
    pub fn upsert_journal(self, rows: usize) -> String {
        self.multi_insert(JOURNAL_HEAD, 2, rows, self.journal_tail())
    }

    /// The same upserts with the values written into the text (integers and hex byte
    /// strings only, so nothing needs escaping): for MySQL, whose prepared statements cost a
    /// round trip and a column definition per placeholder.
    pub fn upsert_literal(
        self,
        batch_rows: &[(Key, TorrentRow)],
        seqs: &[(u32, u64)],
    ) -> [String; 2] {
        use std::fmt::Write as _;
        let mut t = String::with_capacity(TORRENTS_HEAD.len() + batch_rows.len() * 80);
        t.push_str(TORRENTS_HEAD);
        for (i, (k, r)) in batch_rows.iter().enumerate() {
            t.push_str(if i == 0 { " VALUES (X'" } else { ", (X'" });
            for b in k {
                let _ = write!(t, "{b:02x}");
            }
            let _ = write!(
                t,
                "',{},{},{},{},{})",
                r.completed, r.seeders, r.leechers, r.first_seen, r.last_active
            );
        }
        t.push(' ');
        t.push_str(self.torrents_tail());
        let mut j = String::from(JOURNAL_HEAD);
        for (i, (w, s)) in seqs.iter().enumerate() {
            let _ = write!(j, "{}({w},{s})", if i == 0 { " VALUES " } else { ", " });
        }
        j.push(' ');
        j.push_str(self.journal_tail());
        [t, j]
    }

    /// The upsert of `rows` per-user popup states (the newest replaces the stored one).
    pub fn upsert_popup_users(self, rows: usize) -> String {
        self.multi_insert(POPUP_USERS_HEAD, 6, rows, self.popup_users_tail())
    }

    fn popup_users_tail(self) -> &'static str {
        match self {
            Dialect::Sqlite | Dialect::Postgres => {
                "ON CONFLICT (user_id, popup_id) DO UPDATE SET next_eligible = excluded.next_eligible, \
                 shows = excluded.shows, last_action = excluded.last_action, updated_at = excluded.updated_at"
            }
            Dialect::Mysql => {
                "ON DUPLICATE KEY UPDATE next_eligible = VALUES(next_eligible), shows = VALUES(shows), \
                 last_action = VALUES(last_action), updated_at = VALUES(updated_at)"
            }
        }
    }

    /// The upsert of `rows` daily show counts (they add).
    pub fn upsert_popup_daily(self, rows: usize) -> String {
        self.multi_insert(POPUP_DAILY_HEAD, 3, rows, self.popup_daily_tail())
    }

    fn popup_daily_tail(self) -> &'static str {
        match self {
            Dialect::Sqlite | Dialect::Postgres => {
                "ON CONFLICT (popup_id, day) DO UPDATE SET shows = hp_popup_daily.shows + excluded.shows"
            }
            Dialect::Mysql => "ON DUPLICATE KEY UPDATE shows = shows + VALUES(shows)",
        }
    }

    /// The insert of `rows` popup events.
    pub fn insert_popup_events(self, rows: usize) -> String {
        self.multi_insert(POPUP_EVENTS_HEAD, 4, rows, "")
    }

    /// The insert of `rows` rows of script tables.
    pub fn insert_lua_rows(self, rows: usize) -> String {
        self.multi_insert(LUA_ROWS_HEAD, 3, rows, "")
    }

    /// The upsert of `rows` script counters (they add; the latest second stays).
    pub fn upsert_lua_counters(self, rows: usize) -> String {
        self.multi_insert(LUA_COUNTERS_HEAD, 5, rows, self.lua_counters_tail())
    }

    fn lua_counters_tail(self) -> &'static str {
        match self {
            Dialect::Sqlite => {
                "ON CONFLICT (tbl, k, col) DO UPDATE SET value = hp_lua_counters.value + excluded.value, \
                 updated_at = max(hp_lua_counters.updated_at, excluded.updated_at)"
            }
            Dialect::Postgres => {
                "ON CONFLICT (tbl, k, col) DO UPDATE SET value = hp_lua_counters.value + excluded.value, \
                 updated_at = GREATEST(hp_lua_counters.updated_at, excluded.updated_at)"
            }
            Dialect::Mysql => {
                "ON DUPLICATE KEY UPDATE value = value + VALUES(value), \
                 updated_at = GREATEST(updated_at, VALUES(updated_at))"
            }
        }
    }

    /// The script tables' statements of one batch with the values written in (MySQL; text
    /// as hex strings, so nothing needs escaping), each at most about `max_bytes` long:
    /// `(statement, rows)`.
    pub fn lua_literals(self, batch: &Batch, max_bytes: usize) -> Vec<(String, usize)> {
        use std::fmt::Write as _;
        let hex = |out: &mut String, s: &str| {
            out.push_str("X'");
            for b in s.bytes() {
                let _ = write!(out, "{b:02x}");
            }
            out.push('\'');
        };
        let mut out = Vec::new();
        let mut flush = |sql: &mut String, n: &mut usize, tail: &str| {
            if *n > 0 {
                sql.push(' ');
                sql.push_str(tail);
                out.push((std::mem::take(sql), *n));
                *n = 0;
            }
        };
        let (mut sql, mut n) = (String::new(), 0);
        for r in &batch.lua_rows {
            sql.push_str(if n == 0 { LUA_ROWS_HEAD } else { "," });
            sql.push_str(if n == 0 { " VALUES (" } else { "(" });
            hex(&mut sql, &r.table);
            let _ = write!(sql, ",{},", r.at);
            hex(&mut sql, &r.data);
            sql.push(')');
            n += 1;
            if sql.len() >= max_bytes {
                flush(&mut sql, &mut n, "");
            }
        }
        flush(&mut sql, &mut n, "");
        let tail = self.lua_counters_tail();
        for ((table, key, column), (delta, at)) in &batch.lua_counts {
            sql.push_str(if n == 0 { LUA_COUNTERS_HEAD } else { "," });
            sql.push_str(if n == 0 { " VALUES (" } else { "(" });
            hex(&mut sql, table);
            sql.push(',');
            hex(&mut sql, key);
            sql.push(',');
            hex(&mut sql, column);
            let _ = write!(sql, ",{delta},{at})");
            n += 1;
            if sql.len() >= max_bytes {
                flush(&mut sql, &mut n, tail);
            }
        }
        flush(&mut sql, &mut n, tail);
        out
    }

    /// The popup tables' statements of one batch with the values written in (MySQL; user
    /// ids as hex strings, so nothing needs escaping): users, daily counts, events; `None`
    /// for a table with nothing to write.
    pub fn popup_literals(self, batch: &Batch) -> [Option<String>; 3] {
        use std::fmt::Write as _;
        let hex = |s: &str| {
            s.bytes().fold(String::new(), |mut h, b| {
                let _ = write!(h, "{b:02x}");
                h
            })
        };
        let users = batch.popup_users.iter().map(|((user, popup), r)| {
            format!(
                "(X'{}',{popup},{},{},{},{})",
                hex(user),
                stored_time(r.next_eligible),
                r.shows,
                r.last_action,
                r.updated_at
            )
        });
        let daily = batch
            .popup_daily
            .iter()
            .map(|((popup, day), n)| format!("({popup},{day},{n})"));
        let events = batch
            .popup_events
            .iter()
            .map(|e| format!("({},X'{}',{},{})", e.at, hex(&e.user), e.popup, e.action));
        let statement = |head: &str, tuples: Vec<String>, tail: &str| {
            (!tuples.is_empty()).then(|| format!("{head} VALUES {} {tail}", tuples.join(", ")))
        };
        [
            statement(POPUP_USERS_HEAD, users.collect(), self.popup_users_tail()),
            statement(POPUP_DAILY_HEAD, daily.collect(), self.popup_daily_tail()),
            statement(POPUP_EVENTS_HEAD, events.collect(), ""),
        ]
    }

    /// What an upsert of journal positions does on a conflict.
    fn journal_tail(self) -> &'static str {
        match self {
            Dialect::Sqlite => {
                "ON CONFLICT (worker) DO UPDATE SET seq = max(hp_journal.seq, excluded.seq)"
            }
            Dialect::Postgres => {
                "ON CONFLICT (worker) DO UPDATE SET seq = GREATEST(hp_journal.seq, excluded.seq)"
            }
            Dialect::Mysql => "ON DUPLICATE KEY UPDATE seq = GREATEST(seq, VALUES(seq))",
        }
    }

    /// The table of applied migrations, created when missing.
    pub fn create_schema_table(self) -> &'static str {
        match self {
            Dialect::Sqlite | Dialect::Postgres => {
                "CREATE TABLE IF NOT EXISTS hp_schema (version INTEGER PRIMARY KEY, \
                 name TEXT NOT NULL, applied_at BIGINT NOT NULL)"
            }
            Dialect::Mysql => {
                "CREATE TABLE IF NOT EXISTS hp_schema (version INTEGER PRIMARY KEY, \
                 name VARCHAR(255) NOT NULL, applied_at BIGINT NOT NULL) ENGINE=InnoDB"
            }
        }
    }
}

const TORRENTS_HEAD: &str =
    "INSERT INTO hp_torrents (info_hash, completed, seeders, leechers, first_seen, last_active)";
const JOURNAL_HEAD: &str = "INSERT INTO hp_journal (worker, seq)";
const POPUP_USERS_HEAD: &str =
    "INSERT INTO hp_popup_users (user_id, popup_id, next_eligible, shows, last_action, updated_at)";
/// Every user id with popup state, once each (an index scan: the key starts with it).
pub const POPUP_USER_IDS: &str = "SELECT DISTINCT user_id FROM hp_popup_users";

/// A user's state for one popup as read back: `(user, popup, state)`.
pub type UserRow = (String, u32, PopupUserRow);

/// The `IN` list sizes of a user-state lookup: each lookup is padded (repeating its last user)
/// to one of these, so a driver prepares at most four statements for any number of users.
pub const USER_LOOKUP_SIZES: [usize; 4] = [1, 8, 64, 512];

/// Splits `users` into lookups of [`USER_LOOKUP_SIZES`], each padded with its last user.
pub fn user_lookups<'a>(users: &[&'a str]) -> Vec<Vec<&'a str>> {
    let max = USER_LOOKUP_SIZES[USER_LOOKUP_SIZES.len() - 1];
    users
        .chunks(max)
        .map(|chunk| {
            let size = USER_LOOKUP_SIZES
                .iter()
                .copied()
                .find(|&s| s >= chunk.len())
                .unwrap_or(max);
            let mut v = chunk.to_vec();
            v.resize(size, chunk[chunk.len() - 1]);
            v
        })
        .collect()
}

impl Dialect {
    /// The lookup of `n` users' popup state (`n` placeholders).
    pub fn select_popup_users(self, n: usize) -> String {
        let mut sql = String::from(
            "SELECT user_id, popup_id, next_eligible, shows, last_action, updated_at \
             FROM hp_popup_users WHERE user_id IN (",
        );
        for i in 1..=n {
            if i > 1 {
                sql.push(',');
            }
            self.placeholder(&mut sql, i);
        }
        sql.push(')');
        sql
    }

    /// The upsert of one popup definition.
    pub fn save_popup(self) -> &'static str {
        match self {
            Dialect::Sqlite => {
                "INSERT INTO hp_popups (id, definition, updated_at) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (id) DO UPDATE SET definition = excluded.definition, \
                 updated_at = excluded.updated_at"
            }
            Dialect::Postgres => {
                "INSERT INTO hp_popups (id, definition, updated_at) VALUES ($1, $2, $3) \
                 ON CONFLICT (id) DO UPDATE SET definition = excluded.definition, \
                 updated_at = excluded.updated_at"
            }
            Dialect::Mysql => {
                "INSERT INTO hp_popups (id, definition, updated_at) VALUES (?, ?, ?) \
                 ON DUPLICATE KEY UPDATE definition = VALUES(definition), \
                 updated_at = VALUES(updated_at)"
            }
        }
    }
}

/// How long a writing connection waits for the database's writer lock.
pub const WRITER_WAIT: Duration = Duration::from_secs(30);
/// Why a store could not start on a database.
pub const WRITER_LOCK_HELD: &str = "another connection holds hotpath's writer lock on this \
     database (another hotpath process, or a killed one's connection still finishing): one \
     hotpath per database";
/// The writer lock's key (PostgreSQL advisory locks are per database already).
pub const WRITER_LOCK_PG: i64 = 0x0068_6f74_7061_7468;

/// Polls `try_lock` until it takes the lock or [`WRITER_WAIT`] passes; says when it starts
/// waiting, so a second process is not silent for half a minute.
pub fn wait_for_writer_lock<E>(
    dialect: Dialect,
    mut try_lock: impl FnMut() -> Result<bool, E>,
) -> Result<bool, E> {
    let deadline = std::time::Instant::now() + WRITER_WAIT;
    let mut said = false;
    loop {
        if try_lock()? {
            if said {
                log::info!("{}: writer lock taken", dialect.name());
            }
            return Ok(true);
        }
        if !said {
            said = true;
            log::warn!(
                "{}: waiting up to {} s for hotpath's writer lock: {WRITER_LOCK_HELD}",
                dialect.name(),
                WRITER_WAIT.as_secs()
            );
        }
        if std::time::Instant::now() >= deadline {
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

const POPUP_DAILY_HEAD: &str = "INSERT INTO hp_popup_daily (popup_id, day, shows)";
const LUA_ROWS_HEAD: &str = "INSERT INTO hp_lua_rows (tbl, at, data)";
const LUA_COUNTERS_HEAD: &str = "INSERT INTO hp_lua_counters (tbl, k, col, value, updated_at)";
const POPUP_EVENT_COUNTS: &str = "SELECT popup_id, action, COUNT(*) FROM hp_popup_events \
     GROUP BY popup_id, action ORDER BY popup_id, action";
const POPUP_EVENTS_HEAD: &str = "INSERT INTO hp_popup_events (at, user_id, popup_id, action)";

/// A unix time as stored (64-bit signed; "never", `u64::MAX`, becomes `i64::MAX`).
pub fn stored_time(t: u64) -> i64 {
    i64::try_from(t).unwrap_or(i64::MAX)
}

/// A stored time read back (`i64::MAX` is "never" again; negatives are 0).
pub fn loaded_time(t: i64) -> u64 {
    if t == i64::MAX {
        u64::MAX
    } else {
        u64::try_from(t).unwrap_or(0)
    }
}

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

/// What a write did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Written {
    /// Statements sent (the upserts, not BEGIN/COMMIT).
    pub statements: u64,
    /// Rows written.
    pub rows: u64,
}

/// One database. Calls block; only the flusher and start-up call them, never a request.
pub trait Backend: Send {
    /// The dialect.
    fn dialect(&self) -> Dialect;

    /// `(version, applied_at)` of every applied migration (none when `hp_schema` is missing:
    /// reading never creates it).
    fn applied_migrations(&mut self) -> Result<Vec<(u32, i64)>, StoreError>;

    /// Applies one migration and records it, in one transaction where the database allows
    /// (MySQL commits each DDL statement by itself).
    fn apply_migration(&mut self, m: &Migration) -> Result<(), StoreError>;

    /// Writes a batch in one transaction: its rows and its journal positions, together, so
    /// the database never has one without the other.
    fn write(&mut self, batch: &Batch) -> Result<Written, StoreError> {
        self.write_batch(batch, true)
    }

    /// Writes a batch as [`Backend::write`] would, then rolls it back: whether the database
    /// takes it (the flusher's search for the rows it refuses; see [`crate::refused`]).
    fn try_write(&mut self, batch: &Batch) -> Result<(), StoreError> {
        self.write_batch(batch, false).map(|_| ())
    }

    /// Writes a batch in one transaction, committed or (`commit` false) rolled back.
    fn write_batch(&mut self, batch: &Batch, commit: bool) -> Result<Written, StoreError>;

    /// `(journal, last sequence written)` of every journal.
    fn journal_positions(&mut self) -> Result<Vec<(u32, u64)>, StoreError>;

    /// Calls `each` for every stored torrent.
    fn torrents(&mut self, each: &mut dyn FnMut(Key, StoredTorrent)) -> Result<(), StoreError>;

    /// The info hashes in `hp_access_list`.
    fn access_list(&mut self) -> Result<Vec<Key>, StoreError>;

    /// Every popup definition in `hp_popups`: `(id, JSON text)`.
    fn popups(&mut self) -> Result<Vec<(u32, String)>, StoreError>;

    /// The users' state per popup, from `hp_popup_users`: `(user, popup, state)` rows, in
    /// as few statements as [`user_lookups`] allows.
    fn popup_users(&mut self, users: &[&str]) -> Result<Vec<UserRow>, StoreError>;

    /// One user's state per popup.
    fn popup_user(&mut self, user: &str) -> Result<Vec<(u32, PopupUserRow)>, StoreError> {
        let rows = self.popup_users(&[user])?;
        Ok(rows.into_iter().map(|(_, p, r)| (p, r)).collect())
    }

    /// Calls `each` with every user id that has popup state, streaming (millions of rows
    /// are not held at once).
    fn popup_user_ids(&mut self, each: &mut dyn FnMut(&str)) -> Result<(), StoreError>;

    /// Creates or replaces popup `id`'s definition (JSON text), stamped `updated_at`.
    fn save_popup(&mut self, id: u32, definition: &str, updated_at: i64) -> Result<(), StoreError>;

    /// Shows per popup on UTC day `day` (unix seconds / 86400), from `hp_popup_daily`.
    fn popup_daily(&mut self, day: u32) -> Result<Vec<(u32, u64)>, StoreError>;

    /// `(popup, action, events)` over the whole event log (shows, clicks, closes per popup).
    fn popup_event_counts(&mut self) -> Result<Vec<(u32, u8, u64)>, StoreError>;

    /// A script counter's stored value (`hp.store.add`), if it has one.
    fn lua_counter(
        &mut self,
        table: &str,
        key: &str,
        column: &str,
    ) -> Result<Option<i64>, StoreError>;

    /// A script table's rows (`hp.store.enqueue`), oldest first: `(unix second, JSON text)`,
    /// at most `limit`.
    fn lua_rows(&mut self, table: &str, limit: usize) -> Result<Vec<(u32, String)>, StoreError>;

    /// Takes the database's writer lock on this connection before the store reads anything,
    /// waiting up to [`WRITER_WAIT`] for it; held while the connection lasts (a start-up
    /// guard: it is not taken again after a reconnect). A killed process's connection may
    /// still be committing its last batch after the process is gone; it holds the lock until
    /// the database has finished with it, so a restarted store reads the journal positions
    /// once that batch is in or out, never half-way, and a second process on the same
    /// database waits, then stops with an error.
    fn claim_writer(&mut self) -> Result<(), StoreError> {
        Ok(())
    }

    /// Runs one statement outside any batch (tests, tools).
    fn execute(&mut self, sql: &str) -> Result<(), StoreError>;
}

/// Opens the backend a URL names; `sqlite://` paths are taken as given (relative ones from the
/// working directory); an empty URL means `data_dir/hotpath.db`. Nothing is contacted yet.
pub fn connect(url: &str, data_dir: &Path) -> Result<Box<dyn Backend>, StoreError> {
    let bad = |why: &str| StoreError::Url {
        url: redact(url),
        why: why.to_string(),
    };
    if url.is_empty() {
        return Ok(Box::new(sqlite::Sqlite::new(data_dir.join(DEFAULT_FILE))));
    }
    if let Some(path) = url.strip_prefix("sqlite://") {
        if path.is_empty() {
            return Err(bad("names no file (sqlite://PATH)"));
        }
        return Ok(Box::new(sqlite::Sqlite::new(path.into())));
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok(Box::new(postgres::Postgres::new(url).map_err(|e| bad(&e))?));
    }
    if url.starts_with("mysql://") {
        return Ok(Box::new(mysql::Mysql::new(url).map_err(|e| bad(&e))?));
    }
    Err(bad(
        "unknown scheme: use sqlite://, postgres:// or mysql://",
    ))
}

/// The SQLite file a `store.url` names (`None` for a server database).
pub fn sqlite_file(url: &str, data_dir: &Path) -> Option<std::path::PathBuf> {
    match url {
        "" => Some(data_dir.join(DEFAULT_FILE)),
        url => url.strip_prefix("sqlite://").map(Into::into),
    }
}

/// The SQLite file in `store.data_dir` that an empty `store.url` means.
pub const DEFAULT_FILE: &str = "hotpath.db";

/// The database a `store.url` names, for logs and errors: the URL without its password, or
/// the default SQLite file when it is empty.
pub fn display_name(url: &str, data_dir: &str) -> String {
    match url {
        "" => format!("sqlite://{data_dir}/{DEFAULT_FILE}"),
        url => redact(url),
    }
}

/// The URL without its password, for logs and errors.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (auth, host) = match rest.rsplit_once('@') {
        Some((a, h)) => (a, h),
        None => return url.to_string(),
    };
    match auth.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_string(),
    }
}

/// A database error, with what it means for the write that met it (see [`Fault`]).
pub(crate) fn db_error(dialect: Dialect, what: impl std::fmt::Display, fault: Fault) -> StoreError {
    StoreError::Db {
        backend: dialect.name(),
        what: what.to_string(),
        fault,
    }
}

/// An error with every cause under it (`error connecting to server: Connection refused`),
/// where drivers print only the outermost (`db error`).
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = cause.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_row_statements_number_their_placeholders() {
        let pg = Dialect::Postgres.upsert_journal(2);
        assert!(pg.starts_with(
            "INSERT INTO hp_journal (worker, seq) VALUES ($1,$2), ($3,$4) ON CONFLICT"
        ));
        let my = Dialect::Mysql.upsert_torrents(2);
        assert!(my.contains("VALUES (?,?,?,?,?,?), (?,?,?,?,?,?) ON DUPLICATE KEY"));
        let sq = Dialect::Sqlite.upsert_torrents(1);
        assert_eq!(sq.matches('?').count(), 6);
    }

    #[test]
    fn statement_sizes_repeat_and_cover_every_row() {
        let sizes: Vec<_> = Dialect::Sqlite.statement_sizes(4096 * 2 + 100).collect();
        assert_eq!(sizes, vec![4096, 4096, 64, 32, 4]);
        for n in [0, 1, 7, 4095, 4096, 50_000] {
            let sizes: Vec<_> = Dialect::Postgres.statement_sizes(n).collect();
            assert_eq!(sizes.iter().sum::<usize>(), n);
            assert!(sizes.iter().all(|s| s.is_power_of_two()));
            assert!(sizes.len() <= n / 8192 + 14);
        }
    }

    #[test]
    fn literal_upserts_carry_hex_keys_and_integers() {
        let row = TorrentRow {
            completed: 2,
            seeders: 3,
            leechers: 4,
            first_seen: 5,
            last_active: 6,
        };
        let [t, j] =
            Dialect::Mysql.upsert_literal(&[([0xab; 20], row), ([1; 20], row)], &[(0, 9), (1, 3)]);
        let hex = "ab".repeat(20);
        assert!(
            t.contains(&format!(
                "VALUES (X'{hex}',2,3,4,5,6), (X'{}',2,3,4,5,6) ON DUPLICATE",
                "01".repeat(20)
            )),
            "{t}"
        );
        assert!(j.contains("VALUES (0,9), (1,3) ON DUPLICATE KEY"), "{j}");
    }

    #[test]
    fn passwords_never_reach_logs() {
        assert_eq!(
            redact("mysql://root:secret@127.0.0.1:3306/test"),
            "mysql://root:***@127.0.0.1:3306/test"
        );
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact("sqlite://data/x.db"), "sqlite://data/x.db");
    }

    #[test]
    fn urls_pick_backends_or_say_what_is_wrong() {
        let dir = Path::new("/nonexistent");
        assert_eq!(connect("", dir).unwrap().dialect(), Dialect::Sqlite);
        assert_eq!(
            connect("sqlite://x.db", dir).unwrap().dialect(),
            Dialect::Sqlite
        );
        assert_eq!(
            connect("postgres://u@127.0.0.1/test", dir)
                .unwrap()
                .dialect(),
            Dialect::Postgres
        );
        assert_eq!(
            connect("mysql://root@127.0.0.1/test", dir)
                .unwrap()
                .dialect(),
            Dialect::Mysql
        );
        let e = connect("redis://x", dir).err().unwrap().to_string();
        assert!(e.contains("unknown scheme"), "{e}");
        assert!(connect("sqlite://", dir).is_err());
    }
}
