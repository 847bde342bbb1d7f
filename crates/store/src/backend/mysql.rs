//! MySQL and MariaDB, through the synchronous `mysql` client, with connect, read and write
//! timeouts so that a dead or stalled server turns into an error and a retry, not a hang.
//! Batches go over the text protocol with the values in the statement (see
//! [`Dialect::upsert_literal`]): a prepared statement of thousands of placeholders costs a
//! round trip and a column definition per placeholder, 17 % of the announce rate in the
//! persistence benchmark.

use std::time::Duration;

use mysql::prelude::Queryable;
use mysql::{Conn, Opts, OptsBuilder, TxOpts};

use super::{
    db_error, loaded_time, user_lookups, Backend, Dialect, StoredTorrent, UserRow, Written,
};
use crate::merge::{Batch, Key, PopupUserRow};
use crate::migrations::Migration;
use crate::{Fault, StoreError};

const D: Dialect = Dialect::Mysql;

pub(crate) struct Mysql {
    opts: Opts,
    conn: Option<Conn>,
}

impl Mysql {
    pub(crate) fn new(url: &str) -> Result<Mysql, String> {
        let opts = Opts::from_url(url).map_err(|e| e.to_string())?;
        let opts = OptsBuilder::from_opts(opts)
            .tcp_connect_timeout(Some(Duration::from_secs(5)))
            .read_timeout(Some(Duration::from_secs(60)))
            .write_timeout(Some(Duration::from_secs(60)))
            .into();
        Ok(Mysql { opts, conn: None })
    }

    fn with<T>(
        &mut self,
        f: impl FnOnce(&mut Conn) -> Result<T, mysql::Error>,
    ) -> Result<T, StoreError> {
        if self.conn.is_none() {
            let c = Conn::new(self.opts.clone()).map_err(|e| {
                db_error(
                    D,
                    format!("cannot connect: {}", super::chain(&e)),
                    fault(&e),
                )
            })?;
            self.conn = Some(c);
        }
        let r = f(self.conn.as_mut().expect("connected"));
        r.map_err(|e| {
            self.conn = None;
            let what = match &e {
                mysql::Error::MySqlError(s) => {
                    format!("ERROR {} ({}): {}", s.code, s.state, s.message)
                }
                e => super::chain(e),
            };
            db_error(D, what, fault(&e))
        })
    }
}

/// What an error means for a write. Lock waits, deadlocks, too many connections and a server
/// shutting down may pass, as lost connections and I/O errors may; values the server refuses
/// (a string its character set cannot hold or its column cannot fit, a number out of range,
/// a constraint, a trigger's SIGNAL) are the rows' own; other server errors need a person.
fn fault(e: &mysql::Error) -> Fault {
    match e {
        mysql::Error::MySqlError(s) => match s.code {
            1205 | 1213 | 1040 | 1053 | 1927 | 2006 | 2013 => Fault::Transient,
            1048 | 1062 | 1264 | 1292 | 1300 | 1366 | 1406 | 1451 | 1452 | 1644 | 3819 | 4025 => {
                Fault::Refused
            }
            _ => Fault::Setup,
        },
        _ => Fault::Transient,
    }
}

impl Backend for Mysql {
    fn dialect(&self) -> Dialect {
        D
    }

    fn applied_migrations(&mut self) -> Result<Vec<(u32, i64)>, StoreError> {
        self.with(|c| {
            let exists: Option<i64> = c.query_first(
                "SELECT COUNT(*) FROM information_schema.tables \
                 WHERE table_schema = DATABASE() AND table_name = 'hp_schema'",
            )?;
            if exists.unwrap_or(0) == 0 {
                return Ok(Vec::new());
            }
            c.query("SELECT version, applied_at FROM hp_schema ORDER BY version")
        })
    }

    fn apply_migration(&mut self, m: &Migration) -> Result<(), StoreError> {
        self.with(|c| {
            for sql in m.mysql {
                c.query_drop(sql)?;
            }
            c.exec_drop(
                "INSERT INTO hp_schema (version, name, applied_at) VALUES (?, ?, ?)",
                (m.version, m.name, crate::unix_now()),
            )
        })
    }

    fn write_batch(&mut self, batch: &Batch, commit: bool) -> Result<Written, StoreError> {
        self.with(|c| {
            let mut tx = c.start_transaction(TxOpts::default())?;
            let mut w = Written::default();
            let mut seqs = &batch.seqs[..];
            for chunk in batch.torrents.chunks(D.rows_per_statement()) {
                let [rows, positions] = D.upsert_literal(chunk, seqs);
                tx.query_drop(rows)?;
                if !seqs.is_empty() {
                    tx.query_drop(positions)?;
                    seqs = &[];
                }
                w.statements += 1;
                w.rows += chunk.len() as u64;
            }
            if !seqs.is_empty() {
                tx.query_drop(D.upsert_literal(&[], seqs)[1].as_str())?;
            }
            let rows = [
                batch.popup_users.len(),
                batch.popup_daily.len(),
                batch.popup_events.len(),
            ];
            for (sql, n) in D.popup_literals(batch).into_iter().zip(rows) {
                if let Some(sql) = sql {
                    tx.query_drop(sql)?;
                    w.statements += 1;
                    w.rows += n as u64;
                }
            }
            // Script rows may be large: statements of at most ~4 MiB, well under the
            // server's max_allowed_packet.
            for (sql, n) in D.lua_literals(batch, 4 << 20) {
                tx.query_drop(sql)?;
                w.statements += 1;
                w.rows += n as u64;
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
        self.with(|c| c.query("SELECT worker, seq FROM hp_journal"))
    }

    fn torrents(&mut self, each: &mut dyn FnMut(Key, StoredTorrent)) -> Result<(), StoreError> {
        self.with(|c| {
            let rows: Vec<(Vec<u8>, i64, i64, i64, i64, i64)> = c.query(
                "SELECT info_hash, completed, seeders, leechers, first_seen, last_active FROM hp_torrents",
            )?;
            for (hash, completed, seeders, leechers, first_seen, last_active) in rows {
                if let Ok(key) = Key::try_from(hash.as_slice()) {
                    each(
                        key,
                        StoredTorrent {
                            completed: completed as u64,
                            seeders: seeders as u32,
                            leechers: leechers as u32,
                            first_seen,
                            last_active,
                        },
                    );
                }
            }
            Ok(())
        })
    }

    fn access_list(&mut self) -> Result<Vec<Key>, StoreError> {
        self.with(|c| {
            let rows: Vec<Vec<u8>> = c.query("SELECT info_hash FROM hp_access_list")?;
            Ok(rows
                .iter()
                .filter_map(|h| Key::try_from(h.as_slice()).ok())
                .collect())
        })
    }

    fn popups(&mut self) -> Result<Vec<(u32, String)>, StoreError> {
        self.with(|c| c.query("SELECT id, definition FROM hp_popups ORDER BY id"))
    }

    fn popup_users(&mut self, users: &[&str]) -> Result<Vec<UserRow>, StoreError> {
        self.with(|c| {
            let mut out = Vec::new();
            for lookup in user_lookups(users) {
                let rows: Vec<(String, u32, i64, i64, i64, i64)> =
                    c.exec(D.select_popup_users(lookup.len()), lookup)?;
                out.extend(
                    rows.into_iter()
                        .map(|(user, popup, next, shows, action, at)| {
                            let row = PopupUserRow {
                                next_eligible: loaded_time(next),
                                shows: shows as u32,
                                last_action: action as u8,
                                updated_at: at as u32,
                            };
                            (user, popup, row)
                        }),
                );
            }
            Ok(out)
        })
    }

    fn popup_user_ids(&mut self, each: &mut dyn FnMut(&str)) -> Result<(), StoreError> {
        self.with(|c| {
            for row in c.query_iter(super::POPUP_USER_IDS)? {
                let user: String =
                    mysql::from_row_opt(row?).map_err(|e| mysql::Error::FromRowError(e.0))?;
                each(&user);
            }
            Ok(())
        })
    }

    fn save_popup(&mut self, id: u32, definition: &str, updated_at: i64) -> Result<(), StoreError> {
        self.with(|c| c.exec_drop(D.save_popup(), (id, definition, updated_at)))
    }

    fn lua_counter(
        &mut self,
        table: &str,
        key: &str,
        column: &str,
    ) -> Result<Option<i64>, StoreError> {
        self.with(|c| {
            c.exec_first(
                "SELECT value FROM hp_lua_counters WHERE tbl = ? AND k = ? AND col = ?",
                (table, key, column),
            )
        })
    }

    fn lua_rows(&mut self, table: &str, limit: usize) -> Result<Vec<(u32, String)>, StoreError> {
        self.with(|c| {
            let rows: Vec<(i64, String)> = c.exec(
                "SELECT at, data FROM hp_lua_rows WHERE tbl = ? ORDER BY id LIMIT ?",
                (table, limit as u64),
            )?;
            Ok(rows.into_iter().map(|(at, d)| (at as u32, d)).collect())
        })
    }

    fn claim_writer(&mut self) -> Result<(), StoreError> {
        // GET_LOCK names are server-wide: the lock is this database's.
        let held = self.with(|c| {
            super::wait_for_writer_lock(D, || {
                let got: Option<Option<i64>> =
                    c.query_first("SELECT GET_LOCK(CONCAT('hotpath:', DATABASE()), 0)")?;
                Ok(got.flatten() == Some(1))
            })
        })?;
        if held {
            Ok(())
        } else {
            Err(db_error(D, super::WRITER_LOCK_HELD, Fault::Setup))
        }
    }

    fn popup_daily(&mut self, day: u32) -> Result<Vec<(u32, u64)>, StoreError> {
        self.with(|c| {
            let rows: Vec<(u32, i64)> = c.exec(
                "SELECT popup_id, shows FROM hp_popup_daily WHERE day = ?",
                (day,),
            )?;
            Ok(rows.into_iter().map(|(p, n)| (p, n as u64)).collect())
        })
    }

    fn popup_event_counts(&mut self) -> Result<Vec<(u32, u8, u64)>, StoreError> {
        self.with(|c| {
            let rows: Vec<(u32, i64, i64)> = c.query(super::POPUP_EVENT_COUNTS)?;
            Ok(rows
                .into_iter()
                .map(|(p, a, n)| (p, a as u8, n as u64))
                .collect())
        })
    }

    fn execute(&mut self, sql: &str) -> Result<(), StoreError> {
        self.with(|c| c.query_drop(sql))
    }
}
