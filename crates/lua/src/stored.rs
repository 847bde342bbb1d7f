//! The Lua routes as the write-behind store knows them: their changes (journal tags 3 and 4),
//! the queue that keeps appended rows and adds counters, their tables, and their reads of the
//! database.
//!
//! Owns: [`LuaChange`] and its journal encoding, [`LuaQueue`], [`LUA_ROWS`],
//! [`LUA_COUNTERS`], [`LUA`] and [`LuaDb`]. Must not: do I/O outside [`LuaDb`].

use std::any::Any;

// hashbrown's default hasher: this map is keyed by data the workers merge on every commit.
use hashbrown::HashMap;
use hotpath_store::queue::cut;
use hotpath_store::table::{col, Merge, Rows, Table, Type, Value};
use hotpath_store::{Backend, Encode, Queue, Service, StoreError};

/// The longest table or column name of a script's change.
pub const MAX_NAME_LEN: usize = 64;
/// The longest row a script may append.
pub const MAX_ROW_LEN: usize = 65_536;
/// The longest counter key a script may add to.
pub const MAX_KEY_LEN: usize = 255;

const TAG_ROW: u8 = 3;
const TAG_ADD: u8 = 4;
/// Encoded size of a [`LuaChange::Row`] without its table and data.
const ROW_FIXED: usize = 1 + 4 + 1 + 4;
/// Encoded size of a [`LuaChange::Add`] without its names and key.
const ADD_FIXED: usize = 1 + 8 + 4 + 1 + 1 + 1;

/// A change a script makes through `hp.store`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LuaChange {
    /// A row a script appends to one of its tables (`hp.store.enqueue`).
    Row {
        /// The script's table name (at most [`MAX_NAME_LEN`] bytes).
        table: Box<str>,
        /// Unix seconds.
        at: u32,
        /// The row, as JSON text (at most [`MAX_ROW_LEN`] bytes).
        data: Box<str>,
    },
    /// A number a script adds to a counter (`hp.store.add`): a column of a keyed row.
    Add {
        /// The script's table name (at most [`MAX_NAME_LEN`] bytes).
        table: Box<str>,
        /// The row's key (at most [`MAX_KEY_LEN`] bytes).
        key: Box<str>,
        /// The column (at most [`MAX_NAME_LEN`] bytes).
        column: Box<str>,
        /// What to add.
        delta: i64,
        /// Unix seconds.
        at: u32,
    },
}

impl LuaChange {
    /// Decodes the change at the start of `b` and its length; `None` when it is not one.
    pub fn decode(b: &[u8]) -> Option<(LuaChange, usize)> {
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        match *b.first()? {
            TAG_ROW if b.len() >= ROW_FIXED => {
                let table_len = usize::from(b[5]);
                let data_len = u32_at(6) as usize;
                // Longer than `encode` writes: not a record of ours.
                if table_len > MAX_NAME_LEN || data_len > MAX_ROW_LEN {
                    return None;
                }
                let table_end = ROW_FIXED + table_len;
                let end = table_end.checked_add(data_len)?;
                let change = LuaChange::Row {
                    at: u32_at(1),
                    table: std::str::from_utf8(b.get(ROW_FIXED..table_end)?)
                        .ok()?
                        .into(),
                    data: std::str::from_utf8(b.get(table_end..end)?).ok()?.into(),
                };
                Some((change, end))
            }
            TAG_ADD if b.len() >= ADD_FIXED => {
                let lens = [13, 14, 15].map(|i| usize::from(b[i]));
                if lens[0] > MAX_NAME_LEN || lens[1] > MAX_KEY_LEN || lens[2] > MAX_NAME_LEN {
                    return None;
                }
                let mut at = ADD_FIXED;
                let mut parts: [&str; 3] = [""; 3];
                for (part, len) in parts.iter_mut().zip(lens) {
                    *part = std::str::from_utf8(b.get(at..at + len)?).ok()?;
                    at += len;
                }
                let change = LuaChange::Add {
                    delta: i64::from_le_bytes(b[1..9].try_into().unwrap()),
                    at: u32_at(9),
                    table: parts[0].into(),
                    key: parts[1].into(),
                    column: parts[2].into(),
                };
                Some((change, at))
            }
            _ => None,
        }
    }
}

impl Encode for LuaChange {
    fn encoded_len(&self) -> usize {
        match self {
            LuaChange::Row { table, data, .. } => {
                ROW_FIXED + table.len().min(MAX_NAME_LEN) + data.len().min(MAX_ROW_LEN)
            }
            LuaChange::Add {
                table, key, column, ..
            } => {
                ADD_FIXED
                    + table.len().min(MAX_NAME_LEN)
                    + key.len().min(MAX_KEY_LEN)
                    + column.len().min(MAX_NAME_LEN)
            }
        }
    }

    /// Names, keys and rows are cut at their bounds (callers refuse longer ones before).
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            LuaChange::Row { table, at, data } => {
                let table = cut(table, MAX_NAME_LEN);
                let data = cut(data, MAX_ROW_LEN);
                out.push(TAG_ROW);
                out.extend_from_slice(&at.to_le_bytes());
                out.push(table.len() as u8);
                out.extend_from_slice(&(data.len() as u32).to_le_bytes());
                out.extend_from_slice(table);
                out.extend_from_slice(data);
            }
            LuaChange::Add {
                table,
                key,
                column,
                delta,
                at,
            } => {
                let (table, key, column) = (
                    cut(table, MAX_NAME_LEN),
                    cut(key, MAX_KEY_LEN),
                    cut(column, MAX_NAME_LEN),
                );
                out.push(TAG_ADD);
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

/// The Lua routes' queue: rows scripts append and counters they add to.
#[derive(Debug, Default)]
pub struct LuaQueue {
    /// Rows scripts appended, in arrival order.
    rows: Vec<LuaRow>,
    /// Per script counter: what to add, and the second of the latest change.
    counts: HashMap<LuaCounter, (i64, u32)>,
}

impl Queue for LuaQueue {
    fn apply(&mut self, bytes: &[u8]) -> Option<usize> {
        match LuaChange::decode(bytes)? {
            (LuaChange::Row { table, at, data }, len) => {
                self.rows.push(LuaRow { table, at, data });
                Some(len)
            }
            (
                LuaChange::Add {
                    table,
                    key,
                    column,
                    delta,
                    at,
                },
                len,
            ) => {
                let c = self.counts.entry((table, key, column)).or_insert((0, at));
                c.0 = c.0.saturating_add(delta);
                c.1 = c.1.max(at);
                Some(len)
            }
        }
    }

    fn rows(&self) -> usize {
        self.rows.len() + self.counts.len()
    }

    fn take(&mut self) -> Vec<Rows> {
        let mut appended = Rows::with_capacity(&LUA_ROWS, self.rows.len());
        for r in self.rows.drain(..) {
            appended.push([Value::Text(r.table), r.at.into(), Value::Text(r.data)]);
        }
        let mut counts: Vec<_> = self.counts.drain().collect();
        counts.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut counters = Rows::with_capacity(&LUA_COUNTERS, counts.len());
        for ((t, k, c), (delta, at)) in counts {
            counters.push([
                Value::Text(t),
                Value::Text(k),
                Value::Text(c),
                Value::Int(delta),
                at.into(),
            ]);
        }
        vec![appended, counters]
    }

    fn empty_like(&self) -> Box<dyn Queue> {
        Box::new(LuaQueue {
            rows: Vec::new(),
            counts: HashMap::with_capacity(self.counts.len()),
        })
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The Lua routes, as the store knows them. Their tables were created by the store's
/// migration 4, before services had their own; they have none of their own yet.
pub static LUA: Service = Service {
    name: "lua",
    tags: &[TAG_ROW, TAG_ADD],
    tables: &[&LUA_ROWS, &LUA_COUNTERS],
    queue: &|| Box::<LuaQueue>::default(),
    migrations: &[],
};

/// `hp_lua_rows`: rows scripts append.
pub static LUA_ROWS: Table = Table {
    name: "hp_lua_rows",
    columns: &[
        col("tbl", Type::Text, Merge::Keep).max_bytes(MAX_NAME_LEN),
        col("at", Type::Int, Merge::Keep),
        col("data", Type::Text, Merge::Keep).max_bytes(MAX_ROW_LEN),
    ],
    update_only: false,
    keeps_older: None,
};

/// `hp_lua_counters`: counters scripts add to.
pub static LUA_COUNTERS: Table = Table {
    name: "hp_lua_counters",
    columns: &[
        col("tbl", Type::Text, Merge::Key).max_bytes(MAX_NAME_LEN),
        col("k", Type::Text, Merge::Key).max_bytes(MAX_KEY_LEN),
        col("col", Type::Text, Merge::Key).max_bytes(MAX_NAME_LEN),
        col("value", Type::Int, Merge::Add),
        col("updated_at", Type::Int, Merge::Max),
    ],
    update_only: false,
    keeps_older: None,
};

/// The Lua routes' reads of the database, over any [`Backend`].
pub trait LuaDb: Backend {
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

impl<B: Backend + ?Sized> LuaDb for B {}

#[cfg(test)]
mod tests {
    use super::*;
    use hotpath_store::queue::{decode_all, Queues};

    #[test]
    fn script_changes_round_trip_and_counters_add() {
        let changes = vec![
            LuaChange::Row {
                table: "checkins".into(),
                at: 5,
                data: "{\"user\":\"ü\"}".into(),
            },
            LuaChange::Add {
                table: "places".into(),
                key: "café".into(),
                column: "visits".into(),
                delta: -3,
                at: 6,
            },
            LuaChange::Add {
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
            changes.iter().map(Encode::encoded_len).sum::<usize>()
        );
        assert_eq!(decode_all(&buf, LuaChange::decode), Some(changes.clone()));
        for cut in 1..buf.len() {
            let whole = decode_all(&buf[..cut], LuaChange::decode)
                .is_some_and(|c| c.len() == changes.len());
            assert!(!whole, "a cut record is never taken whole");
        }
        let mut p = Queues::new(&[&LUA]).unwrap();
        for c in changes {
            p.push(&c).unwrap();
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

    /// Found by the journal fuzz target: a record naming a column longer than `encode` writes
    /// decoded, and would have been written to the database past the names' limit.
    #[test]
    fn records_longer_than_encode_writes_are_refused() {
        let add = |table: usize, key: usize, column: usize| {
            let mut b = vec![TAG_ADD];
            b.extend_from_slice(&(-3i64).to_le_bytes());
            b.extend_from_slice(&9u32.to_le_bytes());
            b.extend_from_slice(&[table as u8, key as u8, column as u8]);
            b.extend(std::iter::repeat_n(b'Y', table + key + column));
            b
        };
        assert!(decode_all(&add(9, 0, MAX_NAME_LEN), LuaChange::decode).is_some());
        assert!(decode_all(&add(9, 0, MAX_NAME_LEN + 1), LuaChange::decode).is_none());
        assert!(decode_all(&add(MAX_NAME_LEN + 1, 0, 1), LuaChange::decode).is_none());
        let row = |table: usize, data: usize| {
            let mut b = vec![TAG_ROW];
            b.extend_from_slice(&9u32.to_le_bytes());
            b.push(table as u8);
            b.extend_from_slice(&(data as u32).to_le_bytes());
            b.extend(std::iter::repeat_n(b'{', table + data));
            b
        };
        assert!(decode_all(&row(MAX_NAME_LEN, MAX_ROW_LEN), LuaChange::decode).is_some());
        assert!(decode_all(&row(MAX_NAME_LEN + 1, 1), LuaChange::decode).is_none());
        assert!(decode_all(&row(1, MAX_ROW_LEN + 1), LuaChange::decode).is_none());
    }
}
