//! Tables as the store writes them: a service declares each table it writes behind once (its
//! columns, their types and how a later row of one key meets the stored one), and hands the
//! store rows of [`Value`]s. From that declaration alone the store builds every dialect's
//! upsert, merges rows of one key (a failed batch under the changes queued since, refused
//! rows replayed), and turns a row into the JSON of `refused.jsonl` and back.
//!
//! Owns: [`Value`], [`Table`], [`Rows`] and their merge. Must not: do I/O, name a service.

use std::collections::HashMap;

use serde_json::{json, Value as Json};

/// One value of a row.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Value {
    /// SQL NULL (read back from a column a site left empty; the store writes none).
    Null,
    /// A 64-bit signed integer (counts, times, ids).
    Int(i64),
    /// UTF-8 text.
    Text(Box<str>),
    /// Bytes (info hashes).
    Blob(Box<[u8]>),
}

impl Value {
    /// The integer, or 0 for another type.
    pub fn int(&self) -> i64 {
        match self {
            Value::Int(v) => *v,
            _ => 0,
        }
    }

    /// The text, or "" for another type.
    pub fn text(&self) -> &str {
        match self {
            Value::Text(t) => t,
            _ => "",
        }
    }

    /// The bytes (of a blob or a text), or none for an integer.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Value::Blob(b) => b,
            Value::Text(t) => t.as_bytes(),
            Value::Int(_) | Value::Null => &[],
        }
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Value {
        Value::Int(v)
    }
}

impl From<u32> for Value {
    fn from(v: u32) -> Value {
        Value::Int(i64::from(v))
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::Text(v.into())
    }
}

impl From<Box<str>> for Value {
    fn from(v: Box<str>) -> Value {
        Value::Text(v)
    }
}

/// A column's type, as every dialect stores it (see the migrations for each one's DDL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Type {
    /// An integer column (SQLite INTEGER, PostgreSQL SMALLINT/INTEGER/BIGINT, MySQL too).
    Int,
    /// A text column (TEXT, VARCHAR).
    Text,
    /// A binary column (BLOB, BYTEA, BINARY); `refused.jsonl` shows it as hex.
    Blob,
}

/// How a later row of one key meets the stored row, per column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merge {
    /// Part of the key (the table's leading columns).
    Key,
    /// The first value stays (a `first_seen`; also every column of an append-only table).
    Keep,
    /// The later value replaces it (a snapshot, a state).
    Replace,
    /// The values add (counts, deltas).
    Add,
    /// The larger stays (a last-seen time, a journal position).
    Max,
    /// The first value that is not NULL stays: a NULL is filled once, then kept (a
    /// `completed_at` set by the first download that finishes).
    First,
}

/// One column of a [`Table`].
#[derive(Debug, Clone, Copy)]
pub struct Column {
    /// Its name in the database.
    pub name: &'static str,
    /// Its type.
    pub ty: Type,
    /// How a later row's value meets the stored one.
    pub merge: Merge,
    /// The most bytes a text or binary value may have ([`DEFAULT_MAX_BYTES`] unless the
    /// declaration says otherwise with [`Column::max_bytes`]): a longer value, or a text with a
    /// NUL byte, is refused by the store before any database sees it, so every backend
    /// refuses the same rows (see [`Rows::refusal`]). Unused for integers.
    pub max_bytes: usize,
}

/// The most bytes of a text or binary column unless its declaration says otherwise: what a
/// MySQL `VARCHAR(255)` holds whatever the characters.
pub const DEFAULT_MAX_BYTES: usize = 255;

/// A column (for [`Table`] declarations).
pub const fn col(name: &'static str, ty: Type, merge: Merge) -> Column {
    Column {
        name,
        ty,
        merge,
        max_bytes: DEFAULT_MAX_BYTES,
    }
}

impl Column {
    /// This column, holding text or bytes of at most `max` bytes.
    pub const fn max_bytes(self, max: usize) -> Column {
        Column {
            max_bytes: max,
            ..self
        }
    }
}

/// Whether the older of two rows of one key stays (see [`Table::keeps_older`]).
pub type KeepsOlder = fn(older: &[Value], newer: &[Value]) -> bool;

/// A table a service writes behind. Its leading [`Merge::Key`] columns are its primary key;
/// a table without any is append-only (each row is inserted; an auto-increment id, not
/// listed, numbers them).
///
/// A table marked [`update_only`](Table::update_only) belongs to someone else (a site's users
/// table, whose other columns the store cannot fill): its rows update the row of their key
/// where there is one and are dropped where there is none, and a [`Value::Null`] leaves its
/// column as it is.
#[derive(Debug)]
pub struct Table {
    /// Its name in the database.
    pub name: &'static str,
    /// The columns the store writes, key columns first.
    pub columns: &'static [Column],
    /// Rows only update the rows already there (see above); it must have a key.
    pub update_only: bool,
    /// For a table whose rows are states that may arrive out of order (several workers'
    /// journals replayed one after the other): whether the `older` of two rows of one key
    /// stays though the newer came later. `None`: the later always wins, per column rule.
    pub keeps_older: Option<KeepsOlder>,
}

impl Table {
    /// How many leading columns form the key (0: append-only).
    pub fn keys(&self) -> usize {
        self.columns
            .iter()
            .take_while(|c| c.merge == Merge::Key)
            .count()
    }

    /// Values per row.
    pub fn width(&self) -> usize {
        self.columns.len()
    }

    /// Folds `newer` into `older`, column by column (both rows of this table, one key).
    fn merge_row(&self, older: &mut [Value], newer: &mut [Value]) {
        // The older state stays, but counts still add and maxima still rise.
        let keep = self.keeps_older.is_some_and(|keep| keep(older, newer));
        for ((c, o), n) in self.columns.iter().zip(older).zip(newer) {
            match c.merge {
                Merge::Key | Merge::Keep => {}
                Merge::Replace if keep => {}
                // A NULL (an update-only table's "as it is") does not replace a value.
                Merge::Replace if *n != Value::Null => std::mem::swap(o, n),
                Merge::Replace => {}
                Merge::Add => *o = Value::Int(o.int().saturating_add(n.int())),
                Merge::Max => {
                    if *n > *o {
                        std::mem::swap(o, n);
                    }
                }
                Merge::First if keep => {}
                Merge::First => {
                    if *o == Value::Null {
                        std::mem::swap(o, n);
                    }
                }
            }
        }
    }
}

/// Rows of one table, as the store writes them: `table.width()` values per row.
#[derive(Debug, Clone)]
pub struct Rows {
    /// The table.
    pub table: &'static Table,
    values: Vec<Value>,
}

impl PartialEq for Rows {
    fn eq(&self, other: &Rows) -> bool {
        self.table.name == other.table.name && self.values == other.values
    }
}

impl Eq for Rows {}

impl Rows {
    /// No rows of `table`.
    pub fn new(table: &'static Table) -> Rows {
        Rows {
            table,
            values: Vec::new(),
        }
    }

    /// Room for `rows` rows of `table`.
    pub fn with_capacity(table: &'static Table, rows: usize) -> Rows {
        Rows {
            table,
            values: Vec::with_capacity(rows * table.width()),
        }
    }

    /// Appends a row: exactly `table.width()` values, in column order.
    pub fn push<const N: usize>(&mut self, row: [Value; N]) {
        assert_eq!(N, self.table.width(), "a row of {}", self.table.name);
        self.values.extend(row);
    }

    /// Rows held.
    pub fn len(&self) -> usize {
        self.values.len() / self.table.width()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Row `i`.
    pub fn row(&self, i: usize) -> &[Value] {
        let w = self.table.width();
        &self.values[i * w..(i + 1) * w]
    }

    /// Every row, in order.
    pub fn iter(&self) -> std::slice::ChunksExact<'_, Value> {
        self.values.chunks_exact(self.table.width())
    }

    /// Every value, row after row.
    pub fn values(&self) -> &[Value] {
        &self.values
    }

    /// Why no database the store writes to may be handed these rows, if one of them holds a
    /// value its column cannot keep: a text or binary value longer than the column's
    /// [`max_bytes`](Column::max_bytes), or a text with a NUL byte (PostgreSQL refuses it,
    /// SQLite and MySQL would keep it). The store checks every batch with it before the
    /// database sees it, so the three backends refuse the same rows.
    pub fn refusal(&self) -> Option<String> {
        for row in self.iter() {
            for (c, v) in self.table.columns.iter().zip(row) {
                let why = match v {
                    Value::Text(t) => crate::unstorable(t, c.max_bytes).map(|u| u.message()),
                    Value::Blob(b) if b.len() > c.max_bytes => Some("too long"),
                    _ => None,
                };
                if let Some(why) = why {
                    return Some(format!(
                        "{}.{}: {why} ({} bytes; the column holds at most {})",
                        self.table.name,
                        c.name,
                        v.bytes().len(),
                        c.max_bytes
                    ));
                }
            }
        }
        None
    }

    /// The rows numbered `range`.
    pub fn slice(&self, range: std::ops::Range<usize>) -> Rows {
        let w = self.table.width();
        Rows {
            table: self.table,
            values: self.values[range.start * w..range.end * w].to_vec(),
        }
    }

    /// Keeps the rows for which `keep` (called once per row, in order) says so.
    pub fn retain(&mut self, mut keep: impl FnMut() -> bool) {
        let w = self.table.width();
        let mut kept = Vec::with_capacity(self.values.len());
        for row in std::mem::take(&mut self.values).chunks_exact(w) {
            if keep() {
                kept.extend_from_slice(row);
            }
        }
        self.values = kept;
    }

    /// Appends `newer`'s rows as they are, unmerged (see [`Rows::merge`]).
    pub(crate) fn append(&mut self, newer: Rows) {
        self.values.extend(newer.values);
    }

    /// Folds `newer` (rows of the same table, queued after these) into these: appended to an
    /// append-only table; merged per key by the columns' rules otherwise, sorted by key.
    pub fn merge(&mut self, newer: Rows) {
        self.values.extend(newer.values);
        self.fold();
    }

    /// Merges every row into the first row of its key, in order (each later row is newer),
    /// and sorts the rows by key (so concurrent writers lock rows in one order): one pass,
    /// whatever the number of rows. An append-only table keeps every row, in order.
    pub(crate) fn fold(&mut self) {
        let (keys, w) = (self.table.keys(), self.table.width());
        if keys == 0 {
            return;
        }
        let mut rows: Vec<Vec<Value>> = Vec::with_capacity(self.len());
        let mut at: HashMap<Vec<Value>, usize> = HashMap::with_capacity(self.len());
        for row in std::mem::take(&mut self.values).chunks_exact(w) {
            match at.get(&row[..keys]) {
                Some(&i) => self.table.merge_row(&mut rows[i], &mut row.to_vec()),
                None => {
                    at.insert(row[..keys].to_vec(), rows.len());
                    rows.push(row.to_vec());
                }
            }
        }
        rows.sort_unstable_by(|a, b| a[..keys].cmp(&b[..keys]));
        self.values = rows.into_iter().flatten().collect();
    }

    /// Row `i` as JSON: integers as numbers, text as strings, blobs as hex.
    pub fn row_json(&self, i: usize) -> Json {
        let mut obj = serde_json::Map::new();
        for (c, v) in self.table.columns.iter().zip(self.row(i)) {
            let j = match v {
                Value::Null => Json::Null,
                Value::Int(n) => json!(n),
                Value::Text(t) => json!(t),
                Value::Blob(b) => json!(hex(b)),
            };
            obj.insert(c.name.to_string(), j);
        }
        Json::Object(obj)
    }

    /// One row of `table` from its JSON (see [`Rows::row_json`]); an integer past `i64`
    /// (a time of "never" written by an older build) is taken as `i64::MAX`.
    pub fn from_json(table: &'static Table, row: &Json) -> Result<Rows, String> {
        let name = table.name;
        let mut values = Vec::with_capacity(table.width());
        for c in table.columns {
            let v = row.get(c.name);
            let value = match c.ty {
                Type::Int => v
                    .and_then(|v| v.as_i64().or_else(|| v.as_u64().map(|_| i64::MAX)))
                    .map(Value::Int)
                    .ok_or_else(|| {
                        format!("{name}: `{}` is missing or not a whole number", c.name)
                    })?,
                Type::Text => v
                    .and_then(Json::as_str)
                    .map(|s| Value::Text(s.into()))
                    .ok_or_else(|| format!("{name}: `{}` is missing or not a string", c.name))?,
                Type::Blob => v
                    .and_then(Json::as_str)
                    .and_then(unhex)
                    .map(|b| Value::Blob(b.into()))
                    .ok_or_else(|| format!("{name}: `{}` is missing or not hex digits", c.name))?,
            };
            values.push(value);
        }
        Ok(Rows { table, values })
    }
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut h, b| {
        let _ = write!(h, "{b:02x}");
        h
    })
}

/// The bytes of hex text (an even number of hex digits).
fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.is_ascii() {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    static COUNTS: Table = Table {
        name: "t_counts",
        columns: &[
            col("k", Type::Blob, Merge::Key),
            col("n", Type::Int, Merge::Add),
            col("now", Type::Int, Merge::Replace),
            col("first", Type::Int, Merge::Keep),
            col("last", Type::Int, Merge::Max),
        ],
        update_only: false,
        keeps_older: None,
    };
    static LOG: Table = Table {
        name: "t_log",
        columns: &[col("what", Type::Text, Merge::Keep)],
        update_only: false,
        keeps_older: None,
    };

    fn counts(rows: &[(u8, i64, i64, i64)]) -> Rows {
        let mut r = Rows::new(&COUNTS);
        for &(k, n, now, at) in rows {
            r.push([
                Value::Blob(vec![k; 2].into()),
                n.into(),
                now.into(),
                at.into(),
                at.into(),
            ]);
        }
        r
    }

    #[test]
    fn rows_of_one_key_merge_by_their_columns_rules_and_stay_sorted() {
        let mut older = counts(&[(9, 1, 5, 100), (2, 3, 1, 50)]);
        older.merge(counts(&[(9, 2, 7, 200), (1, 1, 1, 300), (9, 4, 8, 150)]));
        assert_eq!(older.len(), 3);
        assert_eq!(older.row(0)[0], Value::Blob(vec![1; 2].into()), "sorted");
        let nine = older.row(2);
        assert_eq!(
            nine[1..].to_vec(),
            vec![
                Value::Int(7),
                Value::Int(8),
                Value::Int(100),
                Value::Int(200)
            ],
            "added, replaced, kept, max"
        );
        let mut log = Rows::new(&LOG);
        log.push(["a".into()]);
        let mut later = Rows::new(&LOG);
        later.push(["b".into()]);
        later.push(["a".into()]);
        log.merge(later);
        assert_eq!(
            log.len(),
            3,
            "an append-only table keeps every row, in order"
        );
        assert_eq!(log.row(2)[0], Value::from("a"));
    }

    #[test]
    fn a_first_column_is_filled_once_then_kept() {
        static DONE: Table = Table {
            name: "t_done",
            columns: &[
                col("k", Type::Int, Merge::Key),
                col("done_at", Type::Int, Merge::First),
            ],
            update_only: false,
            keeps_older: None,
        };
        let rows = |at: &[Value]| {
            let mut r = Rows::new(&DONE);
            for v in at {
                r.push([Value::Int(1), v.clone()]);
            }
            r
        };
        let mut r = rows(&[Value::Null]);
        r.merge(rows(&[
            Value::Null,
            Value::Int(7),
            Value::Null,
            Value::Int(9),
        ]));
        assert_eq!(r.len(), 1);
        assert_eq!(r.row(0)[1], Value::Int(7), "the first value, then kept");
    }

    #[test]
    fn rows_round_trip_through_json_and_bad_json_is_named() {
        let rows = counts(&[(0xab, -3, 1, i64::MAX)]);
        let j = rows.row_json(0);
        assert_eq!(j["k"], "abab");
        assert_eq!(Rows::from_json(&COUNTS, &j).unwrap(), rows);
        let mut old = j.clone();
        old["last"] = json!(u64::MAX);
        assert_eq!(
            Rows::from_json(&COUNTS, &old).unwrap().row(0)[4],
            Value::Int(i64::MAX)
        );
        let mut bad = j.clone();
        bad["k"] = json!("abz");
        let e = Rows::from_json(&COUNTS, &bad).unwrap_err();
        assert!(e.contains("`k`"), "{e}");
        bad["k"] = json!(3);
        assert!(Rows::from_json(&COUNTS, &bad).is_err());
    }
}
