//! SQLite, the embedded default: one file in WAL mode, `synchronous = NORMAL` (a commit is
//! durable against a crash of hotpath; the journal covers the rest), no server.

use std::path::PathBuf;
use std::time::Duration;

use rusqlite::{params_from_iter, Connection};

use super::{db_error, Backend, Dialect, StoredTorrent, Written};
use crate::merge::{Batch, Key};
use crate::migrations::Migration;
use crate::StoreError;

const D: Dialect = Dialect::Sqlite;

pub(crate) struct Sqlite {
    path: PathBuf,
    conn: Option<Connection>,
}

impl Sqlite {
    pub(crate) fn new(path: PathBuf) -> Sqlite {
        Sqlite { path, conn: None }
    }

    fn conn(&mut self) -> Result<&mut Connection, StoreError> {
        if self.conn.is_none() {
            if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)
                    .map_err(|e| db_error(D, format!("{}: {e}", dir.display()), false))?;
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
            let c =
                open().map_err(|e| db_error(D, format!("{}: {e}", self.path.display()), true))?;
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
            let retry = matches!(
                e.sqlite_error_code(),
                Some(
                    rusqlite::ErrorCode::DatabaseBusy
                        | rusqlite::ErrorCode::DatabaseLocked
                        | rusqlite::ErrorCode::DiskFull
                        | rusqlite::ErrorCode::SystemIoFailure
                        | rusqlite::ErrorCode::CannotOpen
                )
            );
            db_error(D, e, retry)
        })
    }
}

impl Backend for Sqlite {
    fn dialect(&self) -> Dialect {
        D
    }

    fn applied_migrations(&mut self) -> Result<Vec<(u32, i64)>, StoreError> {
        self.with(|c| {
            c.execute(D.create_schema_table(), [])?;
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

    fn write(&mut self, batch: &Batch) -> Result<Written, StoreError> {
        self.with(|c| {
            let tx = c.transaction()?;
            let mut w = Written::default();
            let mut rest = &batch.torrents[..];
            for n in D.statement_sizes(rest.len()) {
                let (chunk, tail) = rest.split_at(n);
                rest = tail;
                let mut st = tx.prepare_cached(&D.upsert_torrents(n))?;
                let params = chunk.iter().flat_map(|(k, r)| {
                    [
                        rusqlite::types::Value::Blob(k.to_vec()),
                        (r.completed as i64).into(),
                        i64::from(r.seeders).into(),
                        i64::from(r.leechers).into(),
                        i64::from(r.first_seen).into(),
                        i64::from(r.last_active).into(),
                    ]
                });
                st.execute(params_from_iter(params))?;
                w.statements += 1;
                w.rows += chunk.len() as u64;
            }
            if !batch.seqs.is_empty() {
                let mut st = tx.prepare_cached(&D.upsert_journal(batch.seqs.len()))?;
                let params = batch
                    .seqs
                    .iter()
                    .flat_map(|&(j, s)| [i64::from(j), s as i64]);
                st.execute(params_from_iter(params))?;
            }
            tx.commit()?;
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

    fn execute(&mut self, sql: &str) -> Result<(), StoreError> {
        self.with(|c| c.execute_batch(sql))
    }
}
