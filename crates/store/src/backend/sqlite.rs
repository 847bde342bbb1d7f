//! SQLite, the embedded default: one file in WAL mode, `synchronous = NORMAL` (a commit is
//! durable against a crash of hotpath; the journal covers the rest), no server.

use std::path::PathBuf;
use std::time::Duration;

use rusqlite::types::Value;
use rusqlite::{params_from_iter, Connection};

use super::{
    db_error, loaded_time, stored_time, user_lookups, Backend, Dialect, StoredTorrent, UserRow,
    Written,
};
use crate::merge::{Batch, Key, PopupUserRow};
use crate::migrations::Migration;
use crate::{Fault, StoreError};

const D: Dialect = Dialect::Sqlite;

pub(crate) struct Sqlite {
    path: PathBuf,
    conn: Option<Connection>,
    /// `<file>-hotpath-writer`, locked while this backend lives once it claims the writer
    /// (see [`Backend::claim_writer`]): two stores with their own data_dir on one SQLite file
    /// would number their journals over each other's positions.
    writer: Option<std::fs::File>,
}

impl Sqlite {
    pub(crate) fn new(path: PathBuf) -> Sqlite {
        Sqlite {
            path,
            conn: None,
            writer: None,
        }
    }

    /// The writer lock's file beside the database file.
    fn writer_path(&self) -> PathBuf {
        let mut name = self.path.as_os_str().to_owned();
        name.push("-hotpath-writer");
        PathBuf::from(name)
    }

    fn conn(&mut self) -> Result<&mut Connection, StoreError> {
        if self.conn.is_none() {
            if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)
                    .map_err(|e| db_error(D, format!("{}: {e}", dir.display()), Fault::Setup))?;
            }
            let open = || -> rusqlite::Result<Connection> {
                let c = Connection::open(&self.path)?;
                c.busy_timeout(Duration::from_secs(5))?;
                // Room for every statement size (see `Dialect::statement_sizes`).
                c.set_prepared_statement_cache_capacity(32);
                c.pragma_update(None, "journal_mode", "WAL")?;
                c.pragma_update(None, "synchronous", "NORMAL")?;
                Ok(c)
            };
            let c = open()
                .map_err(|e| db_error(D, format!("{}: {}", self.path.display(), e), fault(&e)))?;
            self.conn = Some(c);
        }
        Ok(self.conn.as_mut().expect("just opened"))
    }

    /// Runs `f` on the connection; an error drops the connection so the next call reopens.
    fn with<T>(
        &mut self,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<T>,
    ) -> Result<T, StoreError> {
        let r = f(self.conn()?);
        r.map_err(|e| {
            self.conn = None;
            db_error(D, &e, fault(&e))
        })
    }
}

/// What an error means for a write: a busy or locked file, a full disk and I/O trouble may
/// pass; a constraint (a CHECK, a trigger's `RAISE(ABORT)`), a value too big or of the wrong
/// type is the row's own; anything else (a missing table, a read-only file) needs a person.
fn fault(e: &rusqlite::Error) -> Fault {
    use rusqlite::ErrorCode as C;
    match e.sqlite_error_code() {
        Some(
            C::DatabaseBusy | C::DatabaseLocked | C::DiskFull | C::SystemIoFailure | C::CannotOpen,
        ) => Fault::Transient,
        Some(C::ConstraintViolation | C::TooBig | C::TypeMismatch) => Fault::Refused,
        _ => Fault::Setup,
    }
}

/// Writes `rows` with statements of repeating sizes (see [`Dialect::statement_sizes`]), each
/// prepared once per connection.
fn put<T>(
    tx: &rusqlite::Transaction<'_>,
    w: &mut Written,
    rows: &[T],
    sql: impl Fn(usize) -> String,
    values: impl Fn(&T, &mut Vec<Value>),
) -> rusqlite::Result<()> {
    let mut rest = rows;
    let mut vals = Vec::new();
    for n in D.statement_sizes(rows.len()) {
        let (chunk, tail) = rest.split_at(n);
        rest = tail;
        vals.clear();
        for r in chunk {
            values(r, &mut vals);
        }
        tx.prepare_cached(&sql(n))?
            .execute(params_from_iter(vals.drain(..)))?;
        w.statements += 1;
        w.rows += n as u64;
    }
    Ok(())
}

impl Backend for Sqlite {
    fn claim_writer(&mut self) -> Result<(), StoreError> {
        if self.writer.is_some() {
            return Ok(());
        }
        self.conn()?;
        let path = self.writer_path();
        let io = |e: std::io::Error| db_error(D, format!("{}: {e}", path.display()), Fault::Setup);
        let file = std::fs::File::create(&path).map_err(io)?;
        let held = super::wait_for_writer_lock(D, || match file.try_lock() {
            Ok(()) => Ok(true),
            Err(std::fs::TryLockError::WouldBlock) => Ok(false),
            Err(std::fs::TryLockError::Error(e)) => Err(io(e)),
        })?;
        if !held {
            return Err(db_error(D, super::WRITER_LOCK_HELD, Fault::Setup));
        }
        self.writer = Some(file);
        Ok(())
    }

    fn dialect(&self) -> Dialect {
        D
    }

    fn applied_migrations(&mut self) -> Result<Vec<(u32, i64)>, StoreError> {
        self.with(|c| {
            let exists: bool = c.query_row(
                "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'hp_schema')",
                [],
                |r| r.get(0),
            )?;
            if !exists {
                return Ok(Vec::new());
            }
            let mut st = c.prepare("SELECT version, applied_at FROM hp_schema ORDER BY version")?;
            let rows = st.query_map([], |r| Ok((r.get::<_, u32>(0)?, r.get::<_, i64>(1)?)))?;
            rows.collect()
        })
    }

    fn apply_migration(&mut self, m: &Migration) -> Result<(), StoreError> {
        self.with(|c| {
            let tx = c.transaction()?;
            for sql in m.sqlite {
                tx.execute(sql, [])?;
            }
            tx.execute(
                "INSERT INTO hp_schema (version, name, applied_at) VALUES (?1, ?2, ?3)",
                rusqlite::params![m.version, m.name, crate::unix_now()],
            )?;
            tx.commit()
        })
    }

    fn write_batch(&mut self, batch: &Batch, commit: bool) -> Result<Written, StoreError> {
        self.with(|c| {
            let tx = c.transaction()?;
            let mut w = Written::default();
            put(
                &tx,
                &mut w,
                &batch.torrents,
                |n| D.upsert_torrents(n),
                |(k, r), v| {
                    v.extend([
                        Value::Blob(k.to_vec()),
                        (r.completed as i64).into(),
                        i64::from(r.seeders).into(),
                        i64::from(r.leechers).into(),
                        i64::from(r.first_seen).into(),
                        i64::from(r.last_active).into(),
                    ])
                },
            )?;
            put(
                &tx,
                &mut w,
                &batch.popup_users,
                |n| D.upsert_popup_users(n),
                |((u, p), r), v| {
                    v.extend([
                        Value::Text(u.to_string()),
                        i64::from(*p).into(),
                        stored_time(r.next_eligible).into(),
                        i64::from(r.shows).into(),
                        i64::from(r.last_action).into(),
                        i64::from(r.updated_at).into(),
                    ])
                },
            )?;
            put(
                &tx,
                &mut w,
                &batch.popup_daily,
                |n| D.upsert_popup_daily(n),
                |((p, d), n), v| {
                    v.extend([
                        i64::from(*p).into(),
                        i64::from(*d).into(),
                        (*n as i64).into(),
                    ])
                },
            )?;
            put(
                &tx,
                &mut w,
                &batch.popup_events,
                |n| D.insert_popup_events(n),
                |e, v| {
                    v.extend([
                        i64::from(e.at).into(),
                        Value::Text(e.user.to_string()),
                        i64::from(e.popup).into(),
                        i64::from(e.action).into(),
                    ])
                },
            )?;
            put(
                &tx,
                &mut w,
                &batch.lua_rows,
                |n| D.insert_lua_rows(n),
                |r, v| {
                    v.extend([
                        Value::Text(r.table.to_string()),
                        i64::from(r.at).into(),
                        Value::Text(r.data.to_string()),
                    ])
                },
            )?;
            put(
                &tx,
                &mut w,
                &batch.lua_counts,
                |n| D.upsert_lua_counters(n),
                |((t, k, c), (delta, at)), v| {
                    v.extend([
                        Value::Text(t.to_string()),
                        Value::Text(k.to_string()),
                        Value::Text(c.to_string()),
                        (*delta).into(),
                        i64::from(*at).into(),
                    ])
                },
            )?;
            if !batch.seqs.is_empty() {
                let mut st = tx.prepare_cached(&D.upsert_journal(batch.seqs.len()))?;
                let params = batch
                    .seqs
                    .iter()
                    .flat_map(|&(j, s)| [i64::from(j), s as i64]);
                st.execute(params_from_iter(params))?;
            }
            if commit {
                tx.commit()?;
            } else {
                tx.rollback()?;
            }
            Ok(w)
        })
    }

    fn journal_positions(&mut self) -> Result<Vec<(u32, u64)>, StoreError> {
        self.with(|c| {
            let mut st = c.prepare("SELECT worker, seq FROM hp_journal")?;
            let rows = st.query_map([], |r| {
                Ok((r.get::<_, u32>(0)?, r.get::<_, i64>(1)? as u64))
            })?;
            rows.collect()
        })
    }

    fn torrents(&mut self, each: &mut dyn FnMut(Key, StoredTorrent)) -> Result<(), StoreError> {
        self.with(|c| {
            let mut st = c.prepare(
                "SELECT info_hash, completed, seeders, leechers, first_seen, last_active FROM hp_torrents",
            )?;
            let mut rows = st.query([])?;
            while let Some(r) = rows.next()? {
                let hash: Vec<u8> = r.get(0)?;
                let Ok(key) = Key::try_from(hash.as_slice()) else {
                    continue;
                };
                each(
                    key,
                    StoredTorrent {
                        completed: r.get::<_, i64>(1)? as u64,
                        seeders: r.get::<_, i64>(2)? as u32,
                        leechers: r.get::<_, i64>(3)? as u32,
                        first_seen: r.get(4)?,
                        last_active: r.get(5)?,
                    },
                );
            }
            Ok(())
        })
    }

    fn access_list(&mut self) -> Result<Vec<Key>, StoreError> {
        self.with(|c| {
            let mut st = c.prepare("SELECT info_hash FROM hp_access_list")?;
            let rows = st.query_map([], |r| r.get::<_, Vec<u8>>(0))?;
            let mut out = Vec::new();
            for h in rows {
                if let Ok(k) = Key::try_from(h?.as_slice()) {
                    out.push(k);
                }
            }
            Ok(out)
        })
    }

    fn popups(&mut self) -> Result<Vec<(u32, String)>, StoreError> {
        self.with(|c| {
            let mut st = c.prepare("SELECT id, definition FROM hp_popups ORDER BY id")?;
            let rows = st.query_map([], |r| Ok((r.get::<_, u32>(0)?, r.get::<_, String>(1)?)))?;
            rows.collect()
        })
    }

    fn popup_users(&mut self, users: &[&str]) -> Result<Vec<UserRow>, StoreError> {
        self.with(|c| {
            let mut out = Vec::new();
            for lookup in user_lookups(users) {
                let mut st = c.prepare_cached(&D.select_popup_users(lookup.len()))?;
                let rows = st.query_map(rusqlite::params_from_iter(&lookup), |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, u32>(1)?,
                        PopupUserRow {
                            next_eligible: loaded_time(r.get(2)?),
                            shows: r.get::<_, i64>(3)? as u32,
                            last_action: r.get::<_, i64>(4)? as u8,
                            updated_at: r.get::<_, i64>(5)? as u32,
                        },
                    ))
                })?;
                for row in rows {
                    out.push(row?);
                }
            }
            Ok(out)
        })
    }

    fn popup_user_ids(&mut self, each: &mut dyn FnMut(&str)) -> Result<(), StoreError> {
        self.with(|c| {
            let mut st = c.prepare(super::POPUP_USER_IDS)?;
            let mut rows = st.query([])?;
            while let Some(row) = rows.next()? {
                each(row.get_ref(0)?.as_str().unwrap_or_default());
            }
            Ok(())
        })
    }

    fn save_popup(&mut self, id: u32, definition: &str, updated_at: i64) -> Result<(), StoreError> {
        self.with(|c| {
            c.execute(
                D.save_popup(),
                rusqlite::params![id, definition, updated_at],
            )
            .map(|_| ())
        })
    }

    fn lua_counter(
        &mut self,
        table: &str,
        key: &str,
        column: &str,
    ) -> Result<Option<i64>, StoreError> {
        self.with(|c| {
            let mut st = c.prepare_cached(
                "SELECT value FROM hp_lua_counters WHERE tbl = ?1 AND k = ?2 AND col = ?3",
            )?;
            let mut rows = st.query_map([table, key, column], |r| r.get::<_, i64>(0))?;
            rows.next().transpose()
        })
    }

    fn lua_rows(&mut self, table: &str, limit: usize) -> Result<Vec<(u32, String)>, StoreError> {
        self.with(|c| {
            let mut st = c.prepare_cached(
                "SELECT at, data FROM hp_lua_rows WHERE tbl = ?1 ORDER BY id LIMIT ?2",
            )?;
            let rows = st.query_map(rusqlite::params![table, limit as i64], |r| {
                Ok((r.get::<_, i64>(0)? as u32, r.get::<_, String>(1)?))
            })?;
            rows.collect()
        })
    }

    fn popup_daily(&mut self, day: u32) -> Result<Vec<(u32, u64)>, StoreError> {
        self.with(|c| {
            let mut st = c.prepare("SELECT popup_id, shows FROM hp_popup_daily WHERE day = ?1")?;
            let rows = st.query_map([day], |r| {
                Ok((r.get::<_, u32>(0)?, r.get::<_, i64>(1)? as u64))
            })?;
            rows.collect()
        })
    }

    fn popup_event_counts(&mut self) -> Result<Vec<(u32, u8, u64)>, StoreError> {
        self.with(|c| {
            let mut st = c.prepare(super::POPUP_EVENT_COUNTS)?;
            let rows = st.query_map([], |r| {
                Ok((
                    r.get::<_, u32>(0)?,
                    r.get::<_, i64>(1)? as u8,
                    r.get::<_, i64>(2)? as u64,
                ))
            })?;
            rows.collect()
        })
    }

    fn execute(&mut self, sql: &str) -> Result<(), StoreError> {
        self.with(|c| c.execute_batch(sql))
    }
}
