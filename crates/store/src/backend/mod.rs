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

use crate::batch::Batch;
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

    /// Most bound parameters in one statement: SQLite's limit (32766 since 3.32) and the
    /// 16-bit parameter count of PostgreSQL's and MySQL's protocols (65535).
    pub fn max_parameters(self) -> usize {
        match self {
            Dialect::Sqlite => 32766,
            Dialect::Postgres | Dialect::Mysql => 65535,
        }
    }

    /// Most rows in one multi-row statement of a table `width` columns wide: 5000 (SQLite)
    /// or 10000 rows, fewer when the table is so wide that they would pass
    /// [`max_parameters`](Dialect::max_parameters).
    pub fn rows_per_statement(self, width: usize) -> usize {
        let cap = match self {
            Dialect::Sqlite => 5000,
            Dialect::Postgres | Dialect::Mysql => 10000,
        };
        cap.min(self.max_parameters() / width.max(1)).max(1)
    }

    /// Splits `rows` rows of a table `width` columns wide into statement sizes that repeat
    /// from batch to batch, so prepared statements are parsed once and reused: full
    /// statements of [`rows_per_statement`] (rounded down to a power of two), then one per
    /// set bit of the rest (at most one of each power of two). Parsing a fresh 100-row upsert
    /// costs SQLite as much as running it.
    ///
    /// [`rows_per_statement`]: Dialect::rows_per_statement
    pub fn statement_sizes(self, mut rows: usize, width: usize) -> impl Iterator<Item = usize> {
        let full = 1 << self.rows_per_statement(width).ilog2();
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

    /// `name` quoted for this dialect (a schema-qualified name part by part), so a column
    /// named like a reserved word (XBT's `left`) is written as it is. Names come from
    /// declarations or from a config that allows only letters, digits, `_` and `.`.
    pub fn quote(self, name: &str) -> String {
        let q = if self == Dialect::Mysql { '`' } else { '"' };
        let mut out = String::with_capacity(name.len() + 4);
        for (i, part) in name.split('.').enumerate() {
            if i > 0 {
                out.push('.');
            }
            out.push(q);
            out.push_str(part);
            out.push(q);
        }
        out
    }

    /// The SQL type a placeholder of `ty` is cast to in an update's `VALUES` list, where
    /// PostgreSQL has no column to infer it from.
    fn cast(ty: Type) -> &'static str {
        match ty {
            Type::Int => "::BIGINT",
            Type::Text => "::TEXT",
            Type::Blob => "::BYTEA",
        }
    }

    /// `(…), (…)`: `rows` rows of `table`'s placeholders, numbered from 1.
    fn placeholders(self, table: &Table, rows: usize) -> String {
        let cast = self == Dialect::Postgres && table.update_only;
        let mut sql = String::with_capacity(rows * table.width() * 6);
        let mut n = 0;
        for r in 0..rows {
            sql.push_str(if r == 0 { "(" } else { ", (" });
            for (i, c) in table.columns.iter().enumerate() {
                if i > 0 {
                    sql.push(',');
                }
                n += 1;
                self.placeholder(&mut sql, n);
                if cast {
                    sql.push_str(Self::cast(c.ty));
                }
            }
            sql.push(')');
        }
        sql
    }

    /// `INSERT INTO <table> (<columns>)`.
    fn insert_head(self, table: &Table) -> String {
        let names: Vec<String> = table.columns.iter().map(|c| self.quote(c.name)).collect();
        format!(
            "INSERT INTO {} ({})",
            self.quote(table.name),
            names.join(", ")
        )
    }

    /// What an insert into `table` does when a row of its key is there already, by its
    /// columns' rules (see [`Merge`]); nothing for an append-only table.
    pub fn conflict(self, table: &Table) -> String {
        let keys = table.keys();
        if keys == 0 {
            return String::new();
        }
        let t = self.quote(table.name);
        let mut set = Vec::new();
        for c in &table.columns[keys..] {
            let n = self.quote(c.name);
            let expr = match (self, c.merge) {
                (_, Merge::Key | Merge::Keep) => continue,
                (Dialect::Mysql, Merge::Replace) => format!("{n} = VALUES({n})"),
                (Dialect::Mysql, Merge::Add) => format!("{n} = {n} + VALUES({n})"),
                (Dialect::Mysql, Merge::Max) => format!("{n} = GREATEST({n}, VALUES({n}))"),
                (_, Merge::Replace) => format!("{n} = excluded.{n}"),
                (Dialect::Sqlite, Merge::Add) => format!("{n} = hp_add({t}.{n}, excluded.{n})"),
                (_, Merge::Add) => format!("{n} = {t}.{n} + excluded.{n}"),
                (Dialect::Sqlite, Merge::Max) => format!("{n} = max({t}.{n}, excluded.{n})"),
                (_, Merge::Max) => format!("{n} = GREATEST({t}.{n}, excluded.{n})"),
                (Dialect::Mysql, Merge::First) => format!("{n} = COALESCE({n}, VALUES({n}))"),
                (_, Merge::First) => format!("{n} = COALESCE({t}.{n}, excluded.{n})"),
            };
            set.push(expr);
        }
        let key: Vec<String> = table.columns[..keys]
            .iter()
            .map(|c| self.quote(c.name))
            .collect();
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

    /// The `SET` list of an update of `table` from the rows `hp_v` (a NULL leaves its column
    /// as it is), and the `WHERE` (or `ON`) condition matching `hp_t`'s key.
    fn update_set(self, table: &Table) -> (String, String) {
        let keys = table.keys();
        // MySQL's multi-table UPDATE names the target's columns through its alias.
        let target = if self == Dialect::Mysql { "hp_t." } else { "" };
        let set: Vec<String> = table.columns[keys..]
            .iter()
            .filter(|c| c.merge != Merge::Keep)
            .map(|c| {
                let n = self.quote(c.name);
                let (t, v) = (format!("hp_t.{n}"), format!("hp_v.{n}"));
                let expr = match c.merge {
                    Merge::Add if self == Dialect::Sqlite => {
                        format!("hp_add({t}, COALESCE({v}, 0))")
                    }
                    Merge::Add => format!("{t} + COALESCE({v}, 0)"),
                    Merge::Max if self == Dialect::Sqlite => {
                        format!("max({t}, COALESCE({v}, {t}))")
                    }
                    Merge::Max => format!("GREATEST({t}, COALESCE({v}, {t}))"),
                    Merge::First => format!("COALESCE({t}, {v})"),
                    _ => format!("COALESCE({v}, {t})"),
                };
                format!("{target}{n} = {expr}")
            })
            .collect();
        let on: Vec<String> = table.columns[..keys]
            .iter()
            .map(|c| {
                let n = self.quote(c.name);
                format!("hp_t.{n} = hp_v.{n}")
            })
            .collect();
        (set.join(", "), on.join(" AND "))
    }

    /// The update of an [`update_only`](Table::update_only) table from `values`, its rows as
    /// a `VALUES` list (SQLite, PostgreSQL) or `SELECT … UNION ALL SELECT …` (MySQL).
    fn update(self, table: &Table, values: &str) -> String {
        let (set, on) = self.update_set(table);
        let t = self.quote(table.name);
        let names: Vec<String> = table.columns.iter().map(|c| self.quote(c.name)).collect();
        let names = names.join(", ");
        match self {
            Dialect::Sqlite => format!(
                "WITH hp_v ({names}) AS (VALUES {values}) UPDATE {t} AS hp_t SET {set} \
                 FROM hp_v WHERE {on}"
            ),
            Dialect::Postgres => format!(
                "UPDATE {t} AS hp_t SET {set} FROM (VALUES {values}) AS hp_v ({names}) \
                 WHERE {on}"
            ),
            Dialect::Mysql => {
                format!("UPDATE {t} AS hp_t JOIN ({values}) AS hp_v ON {on} SET {set}")
            }
        }
    }

    /// The insert (an upsert, for a table with a key; an update, for an update-only table)
    /// of `rows` rows of `table`, with placeholders.
    pub fn insert(self, table: &Table, rows: usize) -> String {
        let values = self.placeholders(table, rows);
        if table.update_only {
            return self.update(table, &values);
        }
        format!(
            "{} VALUES {values} {}",
            self.insert_head(table),
            self.conflict(table)
        )
    }

    /// The inserts (or updates) of `rows` with the values written into the text (integers,
    /// and text and bytes as hex strings, so nothing needs escaping), each of at most
    /// [`rows_per_statement`](Dialect::rows_per_statement) rows and about `max_bytes`:
    /// `(statement, rows)`. For MySQL, whose prepared statements cost a round trip and a
    /// column definition per placeholder.
    pub fn literal_inserts(self, rows: &Rows, max_bytes: usize) -> Vec<(String, usize)> {
        use std::fmt::Write as _;
        let table = rows.table;
        // An update lists its rows as SELECTs (the first naming the columns) on MySQL.
        let selects = table.update_only && self == Dialect::Mysql;
        let names: Vec<String> = table.columns.iter().map(|c| self.quote(c.name)).collect();
        let finish = |values: &str| {
            if table.update_only {
                self.update(table, values)
            } else {
                format!(
                    "{} VALUES {values} {}",
                    self.insert_head(table),
                    self.conflict(table)
                )
            }
        };
        let mut out = Vec::new();
        let (mut values, mut n) = (String::new(), 0);
        for row in rows.iter() {
            values.push_str(match (selects, n) {
                (true, 0) => "SELECT ",
                (true, _) => " UNION ALL SELECT ",
                (false, 0) => "(",
                (false, _) => ",(",
            });
            for (i, v) in row.iter().enumerate() {
                if i > 0 {
                    values.push(',');
                }
                match v {
                    Value::Null => values.push_str("NULL"),
                    Value::Int(i) => {
                        let _ = write!(values, "{i}");
                    }
                    Value::Text(_) | Value::Blob(_) => {
                        values.push_str("X'");
                        for b in v.bytes() {
                            let _ = write!(values, "{b:02x}");
                        }
                        values.push('\'');
                    }
                }
                if selects && n == 0 {
                    values.push_str(" AS ");
                    values.push_str(&names[i]);
                }
            }
            if !selects {
                values.push(')');
            }
            n += 1;
            if n == self.rows_per_statement(table.width()) || values.len() >= max_bytes {
                out.push((finish(&values), n));
                values.clear();
                n = 0;
            }
        }
        if n > 0 {
            out.push((finish(&values), n));
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

/// How long a writing connection waits for the database's writer lock.
pub const WRITER_WAIT: Duration = Duration::from_secs(30);
/// Why a store could not start on a database.
pub const WRITER_LOCK_HELD: &str = "another connection holds hotpath's writer lock on this \
     database (another hotpath process, or a killed one's connection still finishing): one \
     hotpath per database";
/// The writer lock's key (PostgreSQL advisory locks are per database already).
pub const WRITER_LOCK_PG: i64 = 0x0068_6f74_7061_7468;
/// The migration lock's key (PostgreSQL); the writer locks of nodes 0-255 are above it.
pub const MIGRATION_LOCK_PG: i64 = WRITER_LOCK_PG - 1;
/// Why a store could not migrate.
pub const MIGRATION_LOCK_HELD: &str = "another hotpath holds the migration lock on this \
     database for too long";

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

    /// Runs a migration's `statements` and the statement `record` (with `?` placeholders for
    /// `params`) that records it, in one transaction where the database allows (MySQL commits
    /// each DDL statement by itself).
    fn apply_migration(
        &mut self,
        statements: &[&str],
        record: &str,
        params: &[Value],
    ) -> Result<(), StoreError>;

    /// Writes a batch in one transaction: its rows and its journal positions, together, so
    /// the database never has one without the other.
    ///
    /// A batch with a value no backend can keep (see [`Batch::refusal`]) is refused here,
    /// before the database sees it, as the database would refuse it ([`Fault::Refused`]).
    fn write(&mut self, batch: &Batch) -> Result<Written, StoreError> {
        refuse_unstorable(self.dialect(), batch)?;
        self.write_batch(batch, true)
    }

    /// Writes a batch as [`Backend::write`] would, then rolls it back: whether the database
    /// takes it (the flusher's search for the rows it refuses; see [`crate::refused`]).
    fn try_write(&mut self, batch: &Batch) -> Result<(), StoreError> {
        refuse_unstorable(self.dialect(), batch)?;
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
    /// Node `node` of a cluster (1-255) takes a lock of its own, so nodes share a database;
    /// node 0 is a process outside cluster mode.
    fn claim_writer(&mut self, _node: u8) -> Result<(), StoreError> {
        Ok(())
    }

    /// Takes the database-wide migration lock, waiting up to [`WRITER_WAIT`]: the nodes of a
    /// cluster start together on one database, and one migrates while the others wait.
    fn claim_migrations(&mut self) -> Result<(), StoreError> {
        Ok(())
    }

    /// Lets the migration lock go.
    fn release_migrations(&mut self) -> Result<(), StoreError> {
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
/// The refusal of a batch that holds a value no backend can keep, as `dialect`'s error.
fn refuse_unstorable(dialect: Dialect, batch: &Batch) -> Result<(), StoreError> {
    match batch.refusal() {
        Some(why) => Err(db_error(dialect, why, Fault::Refused)),
        None => Ok(()),
    }
}

pub(crate) fn db_error(dialect: Dialect, what: impl std::fmt::Display, fault: Fault) -> StoreError {
    StoreError::Db {
        backend: dialect.name(),
        what: shortened(what.to_string()),
        fault,
    }
}

/// Longest error text kept: a driver may quote a whole statement of thousands of rows.
const MAX_ERROR_LEN: usize = 1000;

/// `what`, cut to about [`MAX_ERROR_LEN`] bytes (on a character boundary) with the length
/// left out said.
fn shortened(what: String) -> String {
    hotpath_metrics::shortened(what, MAX_ERROR_LEN)
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
        use crate::examples::{LOG, STATS};
        let pg = Dialect::Postgres.insert(&JOURNAL, 2);
        assert_eq!(
            pg,
            "INSERT INTO \"hp_journal\" (\"worker\", \"seq\") VALUES ($1,$2), ($3,$4) ON CONFLICT \
             (\"worker\") DO UPDATE SET \"seq\" = GREATEST(\"hp_journal\".\"seq\", excluded.\"seq\")"
        );
        let my = Dialect::Mysql.insert(&STATS, 2);
        assert!(my.contains("VALUES (?,?,?,?,?,?), (?,?,?,?,?,?) ON DUPLICATE KEY"));
        assert!(my.ends_with(
            "UPDATE `total` = `total` + VALUES(`total`), `a` = VALUES(`a`), `b` = VALUES(`b`), \
             `last_seen` = GREATEST(`last_seen`, VALUES(`last_seen`))"
        ));
        let sq = Dialect::Sqlite.insert(&STATS, 1);
        assert_eq!(sq.matches('?').count(), 6);
        assert!(sq.contains(r#""last_seen" = max("t_stats"."last_seen", excluded."last_seen")"#));
        assert!(!sq.contains(r#""first_seen" ="#), "first_seen is kept");
        let events = Dialect::Postgres.insert(&LOG, 1);
        assert!(events.ends_with("VALUES ($1,$2,$3,$4) "), "{events}");
    }

    #[test]
    fn a_first_column_is_set_only_where_it_is_null() {
        static DONE: Table = Table {
            name: "t_done",
            columns: &[
                crate::table::col("k", Type::Int, Merge::Key),
                crate::table::col("done_at", Type::Int, Merge::First),
            ],
            update_only: false,
            keeps_older: None,
        };
        assert_eq!(
            Dialect::Mysql.conflict(&DONE),
            "ON DUPLICATE KEY UPDATE `done_at` = COALESCE(`done_at`, VALUES(`done_at`))"
        );
        assert_eq!(
            Dialect::Postgres.conflict(&DONE),
            "ON CONFLICT (\"k\") DO UPDATE SET \"done_at\" = COALESCE(\"t_done\".\"done_at\", \
             excluded.\"done_at\")"
        );
        let (set, _) = Dialect::Sqlite.update_set(&DONE);
        assert_eq!(
            set,
            "\"done_at\" = COALESCE(hp_t.\"done_at\", hp_v.\"done_at\")"
        );
    }

    /// A site's table: the store updates rows that are there and fills no other column.
    static SITE: Table = Table {
        name: "site.users",
        columns: &[
            crate::table::col("uid", Type::Int, Merge::Key),
            crate::table::col("left", Type::Int, Merge::Replace),
            crate::table::col("uploaded", Type::Int, Merge::Add),
            crate::table::col("mtime", Type::Int, Merge::Max),
        ],
        update_only: true,
        keeps_older: None,
    };

    #[test]
    fn update_only_tables_update_and_quote_reserved_names() {
        let pg = Dialect::Postgres.insert(&SITE, 2);
        assert_eq!(
            pg,
            "UPDATE \"site\".\"users\" AS hp_t SET \"left\" = COALESCE(hp_v.\"left\", hp_t.\"left\"), \
             \"uploaded\" = hp_t.\"uploaded\" + COALESCE(hp_v.\"uploaded\", 0), \"mtime\" = \
             GREATEST(hp_t.\"mtime\", COALESCE(hp_v.\"mtime\", hp_t.\"mtime\")) FROM (VALUES \
             ($1::BIGINT,$2::BIGINT,$3::BIGINT,$4::BIGINT), ($5::BIGINT,$6::BIGINT,$7::BIGINT,\
             $8::BIGINT)) AS hp_v (\"uid\", \"left\", \"uploaded\", \"mtime\") WHERE hp_t.\"uid\" = \
             hp_v.\"uid\""
        );
        let sq = Dialect::Sqlite.insert(&SITE, 1);
        assert!(
            sq.starts_with(
                "WITH hp_v (\"uid\", \"left\", \"uploaded\", \"mtime\") AS \
             (VALUES (?,?,?,?)) UPDATE \"site\".\"users\" AS hp_t SET"
            ),
            "{sq}"
        );
        assert!(sq.contains("max(hp_t.\"mtime\", COALESCE(hp_v.\"mtime\", hp_t.\"mtime\"))"));
        let mut rows = Rows::new(&SITE);
        rows.push([Value::Int(1), Value::Null, Value::Int(5), Value::Int(9)]);
        rows.push([Value::Int(2), Value::Int(0), Value::Null, Value::Int(9)]);
        let my = Dialect::Mysql.literal_inserts(&rows, 1 << 20);
        assert_eq!(
            my[0].0,
            "UPDATE `site`.`users` AS hp_t JOIN (SELECT 1 AS `uid`,NULL AS `left`,5 AS \
             `uploaded`,9 AS `mtime` UNION ALL SELECT 2,0,NULL,9) AS hp_v ON hp_t.`uid` = \
             hp_v.`uid` SET hp_t.`left` = COALESCE(hp_v.`left`, hp_t.`left`), hp_t.`uploaded` = \
             hp_t.`uploaded` + COALESCE(hp_v.`uploaded`, 0), hp_t.`mtime` = \
             GREATEST(hp_t.`mtime`, COALESCE(hp_v.`mtime`, hp_t.`mtime`))"
        );
    }

    #[test]
    fn statement_sizes_repeat_and_cover_every_row() {
        let sizes: Vec<_> = Dialect::Sqlite.statement_sizes(4096 * 2 + 100, 6).collect();
        assert_eq!(sizes, vec![4096, 4096, 64, 32, 4]);
        for n in [0, 1, 7, 4095, 4096, 50_000] {
            let sizes: Vec<_> = Dialect::Postgres.statement_sizes(n, 6).collect();
            assert_eq!(sizes.iter().sum::<usize>(), n);
            assert!(sizes.iter().all(|s| s.is_power_of_two()));
            assert!(sizes.len() <= n / 8192 + 14);
        }
    }

    #[test]
    fn long_errors_are_cut() {
        let e = db_error(Dialect::Sqlite, "é".repeat(5000), Fault::Refused);
        let text = e.to_string();
        assert!(text.len() < MAX_ERROR_LEN + 100, "{}", text.len());
        assert!(text.ends_with("(9000 more bytes)"), "{text}");
        let short = db_error(Dialect::Sqlite, "no such table: x", Fault::Setup);
        assert!(short.to_string().contains("no such table: x"));
    }

    #[test]
    fn no_statement_binds_more_parameters_than_its_server_takes() {
        // A wide table (13 columns, as hp_user_torrents) once made 4096-row statements of
        // 53,248 parameters: SQLite refused every flush of that many rows, for good.
        for d in [Dialect::Sqlite, Dialect::Postgres, Dialect::Mysql] {
            for width in 1..=80 {
                let most = d.statement_sizes(100_000, width).max().unwrap();
                assert!(most * width <= d.max_parameters(), "{d:?} {width}");
                assert!(most >= 256, "{d:?} {width}: {most} rows");
            }
        }
        assert_eq!(Dialect::Sqlite.statement_sizes(5000, 13).max(), Some(2048));
    }

    #[test]
    fn literal_inserts_carry_hex_and_integers_and_split() {
        use crate::examples::COUNTS;
        let mut rows = Rows::new(&COUNTS);
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
            .contains("ON DUPLICATE KEY UPDATE `value` = `value` + VALUES(`value`)")));
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
