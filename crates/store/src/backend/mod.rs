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

use crate::merge::{Batch, Key, PopupUserRow};
use crate::migrations::Migration;
use crate::table::{Merge, Rows, Table, Type, Value};
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

    /// `INSERT INTO <table> (<columns>)`.
    fn insert_head(table: &Table) -> String {
        let names: Vec<&str> = table.columns.iter().map(|c| c.name).collect();
        format!("INSERT INTO {} ({})", table.name, names.join(", "))
    }

    /// What an insert into `table` does when a row of its key is there already, by its
    /// columns' rules (see [`Merge`]); nothing for an append-only table.
    pub fn conflict(self, table: &Table) -> String {
        let keys = table.keys();
        if keys == 0 {
            return String::new();
        }
        let t = table.name;
        let mut set = Vec::new();
        for c in &table.columns[keys..] {
            let n = c.name;
            let expr = match (self, c.merge) {
                (_, Merge::Key | Merge::Keep) => continue,
                (Dialect::Mysql, Merge::Replace) => format!("{n} = VALUES({n})"),
                (Dialect::Mysql, Merge::Add) => format!("{n} = {n} + VALUES({n})"),
                (Dialect::Mysql, Merge::Max) => format!("{n} = GREATEST({n}, VALUES({n}))"),
                (_, Merge::Replace) => format!("{n} = excluded.{n}"),
                (_, Merge::Add) => format!("{n} = {t}.{n} + excluded.{n}"),
                (Dialect::Sqlite, Merge::Max) => format!("{n} = max({t}.{n}, excluded.{n})"),
                (_, Merge::Max) => format!("{n} = GREATEST({t}.{n}, excluded.{n})"),
            };
            set.push(expr);
        }
        let key: Vec<&str> = table.columns[..keys].iter().map(|c| c.name).collect();
        match self {
            Dialect::Mysql if set.is_empty() => {
                format!("ON DUPLICATE KEY UPDATE {0} = {0}", key[0])
            }
            Dialect::Mysql => format!("ON DUPLICATE KEY UPDATE {}", set.join(", ")),
            _ if set.is_empty() => format!("ON CONFLICT ({}) DO NOTHING", key.join(", ")),
            _ => format!(
                "ON CONFLICT ({}) DO UPDATE SET {}",
                key.join(", "),
                set.join(", ")
            ),
        }
    }

    /// The insert (an upsert, for a table with a key) of `rows` rows of `table`, with
    /// placeholders.
    pub fn insert(self, table: &Table, rows: usize) -> String {
        let head = Self::insert_head(table);
        self.multi_insert(&head, table.width(), rows, &self.conflict(table))
    }

    /// The inserts of `rows` with the values written into the text (integers, and text and
    /// bytes as hex strings, so nothing needs escaping), each of at most
    /// [`rows_per_statement`](Dialect::rows_per_statement) rows and about `max_bytes`:
    /// `(statement, rows)`. For MySQL, whose prepared statements cost a round trip and a
    /// column definition per placeholder.
    pub fn literal_inserts(self, rows: &Rows, max_bytes: usize) -> Vec<(String, usize)> {
        use std::fmt::Write as _;
        let head = Self::insert_head(rows.table);
        let tail = self.conflict(rows.table);
        let mut out = Vec::new();
        let (mut sql, mut n) = (String::new(), 0);
        for row in rows.iter() {
            sql.push_str(if n == 0 { &head } else { "," });
            sql.push_str(if n == 0 { " VALUES (" } else { "(" });
            for (i, v) in row.iter().enumerate() {
                if i > 0 {
                    sql.push(',');
                }
                match v {
                    Value::Null => sql.push_str("NULL"),
                    Value::Int(i) => {
                        let _ = write!(sql, "{i}");
                    }
                    Value::Text(_) | Value::Blob(_) => {
                        sql.push_str("X'");
                        for b in v.bytes() {
                            let _ = write!(sql, "{b:02x}");
                        }
                        sql.push('\'');
                    }
                }
            }
            sql.push(')');
            n += 1;
            if n == self.rows_per_statement() || sql.len() >= max_bytes {
                sql.push(' ');
                sql.push_str(&tail);
                out.push((std::mem::take(&mut sql), n));
                n = 0;
            }
        }
        if n > 0 {
            sql.push(' ');
            sql.push_str(&tail);
            out.push((sql, n));
        }
        out
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

/// Every user id with popup state, once each (an index scan: the key starts with it).
const POPUP_USER_IDS: &str = "SELECT DISTINCT user_id FROM hp_popup_users";

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
    /// `sql` with its `?` placeholders as this dialect numbers them (`$1`, `$2`, ... for
    /// PostgreSQL). Statements given to [`Backend::query`] use `?` and no `?` in literals.
    pub fn numbered(self, sql: &str) -> std::borrow::Cow<'_, str> {
        if self != Dialect::Postgres || !sql.contains('?') {
            return sql.into();
        }
        let mut out = String::with_capacity(sql.len() + 8);
        let mut n = 0;
        for ch in sql.chars() {
            if ch == '?' {
                n += 1;
                self.placeholder(&mut out, n);
            } else {
                out.push(ch);
            }
        }
        out.into()
    }
}

/// The lookup of `n` users' popup state (`n` placeholders).
fn select_popup_users(n: usize) -> String {
    format!(
        "SELECT user_id, popup_id, next_eligible, shows, last_action, updated_at \
         FROM hp_popup_users WHERE user_id IN ({})",
        vec!["?"; n].join(",")
    )
}

/// `hp_popups`: popup definitions (the admin API writes them one at a time).
pub static POPUPS: Table = Table {
    name: "hp_popups",
    columns: &[
        crate::table::col("id", Type::Int, Merge::Key),
        crate::table::col("definition", Type::Text, Merge::Replace),
        crate::table::col("updated_at", Type::Int, Merge::Replace),
    ],
    keeps_older: None,
};

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

/// One database. Calls block; only the flusher, start-up and services' loaders call them,
/// never a request.
///
/// A backend implements the primitives (migrations, batches, [`query`](Backend::query),
/// [`execute_with`](Backend::execute_with)); every read is written once, over them.
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

    /// Runs a query whose placeholders are `?` (see [`Dialect::numbered`]) with `params`,
    /// calling `each` with every row's values as they arrive (millions of rows are not held
    /// at once). Integer columns come back as [`Value::Int`], text as [`Value::Text`] (bytes
    /// that are not UTF-8 replaced), binary as [`Value::Blob`], NULL as [`Value::Null`].
    fn query(
        &mut self,
        sql: &str,
        params: &[Value],
        each: &mut dyn FnMut(&[Value]),
    ) -> Result<(), StoreError>;

    /// Runs one statement whose placeholders are `?` with `params`, outside any batch.
    fn execute_with(&mut self, sql: &str, params: &[Value]) -> Result<(), StoreError>;

    /// Runs one statement outside any batch (tests, tools).
    fn execute(&mut self, sql: &str) -> Result<(), StoreError> {
        self.execute_with(sql, &[])
    }

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

    /// `(journal, last sequence written)` of every journal.
    fn journal_positions(&mut self) -> Result<Vec<(u32, u64)>, StoreError> {
        let mut out = Vec::new();
        self.query("SELECT worker, seq FROM hp_journal", &[], &mut |r| {
            out.push((r[0].int() as u32, r[1].int() as u64));
        })?;
        Ok(out)
    }

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

    /// Every popup definition in `hp_popups`: `(id, JSON text)`.
    fn popups(&mut self) -> Result<Vec<(u32, String)>, StoreError> {
        let mut out = Vec::new();
        self.query(
            "SELECT id, definition FROM hp_popups ORDER BY id",
            &[],
            &mut |r| out.push((r[0].int() as u32, r[1].text().to_string())),
        )?;
        Ok(out)
    }

    /// The users' state per popup, from `hp_popup_users`: `(user, popup, state)` rows, in
    /// as few statements as [`user_lookups`] allows.
    fn popup_users(&mut self, users: &[&str]) -> Result<Vec<UserRow>, StoreError> {
        let mut out = Vec::new();
        for lookup in user_lookups(users) {
            let params: Vec<Value> = lookup.iter().map(|u| Value::from(*u)).collect();
            self.query(&select_popup_users(lookup.len()), &params, &mut |r| {
                let (user, popup, state) = PopupUserRow::from_row(r);
                out.push((user.to_string(), popup, state));
            })?;
        }
        Ok(out)
    }

    /// One user's state per popup.
    fn popup_user(&mut self, user: &str) -> Result<Vec<(u32, PopupUserRow)>, StoreError> {
        let rows = self.popup_users(&[user])?;
        Ok(rows.into_iter().map(|(_, p, r)| (p, r)).collect())
    }

    /// Calls `each` with every user id that has popup state, streaming (millions of rows
    /// are not held at once).
    fn popup_user_ids(&mut self, each: &mut dyn FnMut(&str)) -> Result<(), StoreError> {
        self.query(POPUP_USER_IDS, &[], &mut |r| each(r[0].text()))
    }

    /// Creates or replaces popup `id`'s definition (JSON text), stamped `updated_at`.
    fn save_popup(&mut self, id: u32, definition: &str, updated_at: i64) -> Result<(), StoreError> {
        let sql = self.dialect().insert(&POPUPS, 1);
        self.execute_with(
            &sql,
            &[id.into(), definition.into(), Value::Int(updated_at)],
        )
    }

    /// Shows per popup on UTC day `day` (unix seconds / 86400), from `hp_popup_daily`.
    fn popup_daily(&mut self, day: u32) -> Result<Vec<(u32, u64)>, StoreError> {
        let mut out = Vec::new();
        self.query(
            "SELECT popup_id, shows FROM hp_popup_daily WHERE day = ?",
            &[day.into()],
            &mut |r| out.push((r[0].int() as u32, r[1].int() as u64)),
        )?;
        Ok(out)
    }

    /// `(popup, action, events)` over the whole event log (shows, clicks, closes per popup).
    fn popup_event_counts(&mut self) -> Result<Vec<(u32, u8, u64)>, StoreError> {
        let mut out = Vec::new();
        self.query(
            "SELECT popup_id, action, COUNT(*) FROM hp_popup_events \
             GROUP BY popup_id, action ORDER BY popup_id, action",
            &[],
            &mut |r| out.push((r[0].int() as u32, r[1].int() as u8, r[2].int() as u64)),
        )?;
        Ok(out)
    }

    /// A script counter's stored value (`hp.store.add`), if it has one.
    fn lua_counter(
        &mut self,
        table: &str,
        key: &str,
        column: &str,
    ) -> Result<Option<i64>, StoreError> {
        let mut out = None;
        self.query(
            "SELECT value FROM hp_lua_counters WHERE tbl = ? AND k = ? AND col = ?",
            &[table.into(), key.into(), column.into()],
            &mut |r| out = Some(r[0].int()),
        )?;
        Ok(out)
    }

    /// A script table's rows (`hp.store.enqueue`), oldest first: `(unix second, JSON text)`,
    /// at most `limit`.
    fn lua_rows(&mut self, table: &str, limit: usize) -> Result<Vec<(u32, String)>, StoreError> {
        let mut out = Vec::new();
        self.query(
            "SELECT at, data FROM hp_lua_rows WHERE tbl = ? ORDER BY id LIMIT ?",
            &[
                table.into(),
                Value::Int(limit.min(i64::MAX as usize) as i64),
            ],
            &mut |r| out.push((r[0].int() as u32, r[1].text().to_string())),
        )?;
        Ok(out)
    }
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
        use crate::batch::JOURNAL;
        use crate::merge::TORRENTS;
        let pg = Dialect::Postgres.insert(&JOURNAL, 2);
        assert_eq!(
            pg,
            "INSERT INTO hp_journal (worker, seq) VALUES ($1,$2), ($3,$4) ON CONFLICT (worker) \
             DO UPDATE SET seq = GREATEST(hp_journal.seq, excluded.seq)"
        );
        let my = Dialect::Mysql.insert(&TORRENTS, 2);
        assert!(my.contains("VALUES (?,?,?,?,?,?), (?,?,?,?,?,?) ON DUPLICATE KEY"));
        assert!(my.ends_with(
            "UPDATE completed = completed + VALUES(completed), seeders = VALUES(seeders), \
             leechers = VALUES(leechers), last_active = GREATEST(last_active, VALUES(last_active))"
        ));
        let sq = Dialect::Sqlite.insert(&TORRENTS, 1);
        assert_eq!(sq.matches('?').count(), 6);
        assert!(sq.contains("last_active = max(hp_torrents.last_active, excluded.last_active)"));
        assert!(!sq.contains("first_seen ="), "first_seen is kept");
        let events = Dialect::Postgres.insert(&crate::merge::POPUP_EVENTS, 1);
        assert!(events.ends_with("VALUES ($1,$2,$3,$4) "), "{events}");
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
    fn literal_inserts_carry_hex_and_integers_and_split() {
        use crate::merge::LUA_COUNTERS;
        let mut rows = Rows::new(&LUA_COUNTERS);
        for key in ["a'b", "c"] {
            rows.push([
                "t".into(),
                key.into(),
                "n".into(),
                Value::Int(-2),
                Value::Int(9),
            ]);
        }
        let all = Dialect::Mysql.literal_inserts(&rows, 1 << 20);
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].1, 2);
        assert!(
            all[0].0.contains(
                "VALUES (X'74',X'612762',X'6e',-2,9),(X'74',X'63',X'6e',-2,9) ON DUPLICATE"
            ),
            "{}",
            all[0].0
        );
        let split = Dialect::Mysql.literal_inserts(&rows, 10);
        assert_eq!(split.iter().map(|s| s.1).collect::<Vec<_>>(), [1, 1]);
        assert!(split.iter().all(|s| s
            .0
            .contains("ON DUPLICATE KEY UPDATE value = value + VALUES(value)")));
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
