//! PostgreSQL, through the synchronous `postgres` client (the flusher is one thread; an async
//! runtime would buy nothing). Connects with a 5 s timeout and TCP keepalives, and sets a
//! statement timeout, so a dead or stalled server turns into an error and a retry, not a hang.

use std::time::Duration;

use std::collections::HashMap;

use postgres::types::ToSql;
use postgres::{Client, NoTls, Statement};

use super::{
    db_error, loaded_time, stored_time, user_lookups, Backend, Dialect, StoredTorrent, UserRow,
    Written,
};
use crate::merge::{Batch, Key, PopupUserRow};
use crate::migrations::Migration;
use crate::{Fault, StoreError};

const D: Dialect = Dialect::Postgres;

pub(crate) struct Postgres {
    config: postgres::Config,
    client: Option<Conn>,
}

/// A connection and the statements prepared on it (upserts and lookups), by row count (see
/// [`Dialect::statement_sizes`]): prepared once, not parsed and planned per batch.
struct Conn {
    client: Client,
    upserts: HashMap<(&'static str, usize), Statement>,
}

type Param = Box<dyn ToSql + Sync>;

impl Postgres {
    pub(crate) fn new(url: &str) -> Result<Postgres, String> {
        let mut config: postgres::Config = url.parse().map_err(|e| format!("{e}"))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(5));
        }
        config.keepalives(true);
        config.keepalives_idle(Duration::from_secs(10));
        if config.get_options().is_none() {
            config.options("-c statement_timeout=60000");
        }
        config.application_name("hotpath");
        Ok(Postgres {
            config,
            client: None,
        })
    }

    fn with<T>(
        &mut self,
        f: impl FnOnce(&mut Client) -> Result<T, postgres::Error>,
    ) -> Result<T, StoreError> {
        self.with_conn(|c| f(&mut c.client))
    }

    fn with_conn<T>(
        &mut self,
        f: impl FnOnce(&mut Conn) -> Result<T, postgres::Error>,
    ) -> Result<T, StoreError> {
        if self.client.is_none() {
            let client = self
                .config
                .connect(NoTls)
                .map_err(|e| db_error(D, format!("cannot connect: {}", describe(&e)), fault(&e)))?;
            self.client = Some(Conn {
                client,
                upserts: HashMap::new(),
            });
        }
        let r = f(self.client.as_mut().expect("connected"));
        r.map_err(|e| {
            self.client = None;
            db_error(D, describe(&e), fault(&e))
        })
    }
}

/// What an error means for a write, by SQLSTATE class: data exceptions (22) and integrity
/// violations (23) are the rows' own; syntax and schema (42), credentials (28), a missing
/// database or schema (3D, 3F) need a person; anything else (a lost connection, a deadlock,
/// a server shutting down, a timeout) may pass.
fn fault(e: &postgres::Error) -> Fault {
    let Some(code) = e.code() else {
        return Fault::Transient;
    };
    match &code.code()[..2] {
        "22" | "23" => Fault::Refused,
        "42" | "28" | "3D" | "3F" => Fault::Setup,
        _ => Fault::Transient,
    }
}

/// The server's own message, code and details (the client's `Display` says only `db error`),
/// or the cause of a client-side error (`error connecting to server: Connection refused`).
fn describe(e: &postgres::Error) -> String {
    let Some(db) = e.as_db_error() else {
        return super::chain(e);
    };
    let mut out = format!("{} {}: {}", db.severity(), db.code().code(), db.message());
    for (what, v) in [
        ("detail", db.detail()),
        ("hint", db.hint()),
        ("table", db.table()),
        ("column", db.column()),
        ("constraint", db.constraint()),
    ] {
        if let Some(v) = v {
            out.push_str(&format!("; {what}: {v}"));
        }
    }
    out
}

impl Backend for Postgres {
    fn dialect(&self) -> Dialect {
        D
    }

    fn applied_migrations(&mut self) -> Result<Vec<(u32, i64)>, StoreError> {
        self.with(|c| {
            let exists: bool = c
                .query_one("SELECT to_regclass('hp_schema') IS NOT NULL", &[])?
                .get(0);
            if !exists {
                return Ok(Vec::new());
            }
            let rows = c.query(
                "SELECT version, applied_at FROM hp_schema ORDER BY version",
                &[],
            )?;
            Ok(rows
                .iter()
                .map(|r| (r.get::<_, i32>(0) as u32, r.get::<_, i64>(1)))
                .collect())
        })
    }

    fn apply_migration(&mut self, m: &Migration) -> Result<(), StoreError> {
        self.with(|c| {
            let mut tx = c.transaction()?;
            for sql in m.postgres {
                tx.batch_execute(sql)?;
            }
            tx.execute(
                "INSERT INTO hp_schema (version, name, applied_at) VALUES ($1, $2, $3)",
                &[&(m.version as i32), &m.name, &crate::unix_now()],
            )?;
            tx.commit()
        })
    }

    fn write_batch(&mut self, batch: &Batch, commit: bool) -> Result<Written, StoreError> {
        self.with_conn(|c| {
            let mut tx = c.client.transaction()?;
            let mut w = Written::default();
            let cache = &mut c.upserts;
            let mut put = |tx: &mut postgres::Transaction<'_>,
                           table: &'static str,
                           rows: usize,
                           sql: &dyn Fn(usize) -> String,
                           values: &dyn Fn(usize, &mut Vec<Param>)|
             -> Result<(), postgres::Error> {
                let mut start = 0;
                for n in D.statement_sizes(rows) {
                    let st = match cache.get(&(table, n)) {
                        Some(st) => st.clone(),
                        None => {
                            let st = tx.prepare(&sql(n))?;
                            cache.insert((table, n), st.clone());
                            st
                        }
                    };
                    let mut vals: Vec<Param> = Vec::new();
                    for i in start..start + n {
                        values(i, &mut vals);
                    }
                    start += n;
                    let refs: Vec<&(dyn ToSql + Sync)> = vals.iter().map(|v| v.as_ref()).collect();
                    tx.execute(&st, &refs)?;
                    w.statements += 1;
                    w.rows += n as u64;
                }
                Ok(())
            };
            let t = &batch.torrents;
            put(
                &mut tx,
                "torrents",
                t.len(),
                &|n| D.upsert_torrents(n),
                &|i, v| {
                    let (k, r) = &t[i];
                    v.push(Box::new(k.to_vec()));
                    v.push(Box::new(r.completed as i64));
                    v.push(Box::new(i64::from(r.seeders)));
                    v.push(Box::new(i64::from(r.leechers)));
                    v.push(Box::new(i64::from(r.first_seen)));
                    v.push(Box::new(i64::from(r.last_active)));
                },
            )?;
            let u = &batch.popup_users;
            put(
                &mut tx,
                "popup_users",
                u.len(),
                &|n| D.upsert_popup_users(n),
                &|i, v| {
                    let ((user, popup), r) = &u[i];
                    v.push(Box::new(user.to_string()));
                    v.push(Box::new(*popup as i32));
                    v.push(Box::new(stored_time(r.next_eligible)));
                    v.push(Box::new(i64::from(r.shows)));
                    v.push(Box::new(i16::from(r.last_action)));
                    v.push(Box::new(i64::from(r.updated_at)));
                },
            )?;
            let d = &batch.popup_daily;
            put(
                &mut tx,
                "popup_daily",
                d.len(),
                &|n| D.upsert_popup_daily(n),
                &|i, v| {
                    let ((popup, day), n) = d[i];
                    v.push(Box::new(popup as i32));
                    v.push(Box::new(day as i32));
                    v.push(Box::new(n as i64));
                },
            )?;
            let e = &batch.popup_events;
            put(
                &mut tx,
                "popup_events",
                e.len(),
                &|n| D.insert_popup_events(n),
                &|i, v| {
                    let ev = &e[i];
                    v.push(Box::new(i64::from(ev.at)));
                    v.push(Box::new(ev.user.to_string()));
                    v.push(Box::new(ev.popup as i32));
                    v.push(Box::new(i16::from(ev.action)));
                },
            )?;
            let r = &batch.lua_rows;
            put(
                &mut tx,
                "lua_rows",
                r.len(),
                &|n| D.insert_lua_rows(n),
                &|i, v| {
                    v.push(Box::new(r[i].table.to_string()));
                    v.push(Box::new(i64::from(r[i].at)));
                    v.push(Box::new(r[i].data.to_string()));
                },
            )?;
            let l = &batch.lua_counts;
            put(
                &mut tx,
                "lua_counts",
                l.len(),
                &|n| D.upsert_lua_counters(n),
                &|i, v| {
                    let ((t, k, c), (delta, at)) = &l[i];
                    v.push(Box::new(t.to_string()));
                    v.push(Box::new(k.to_string()));
                    v.push(Box::new(c.to_string()));
                    v.push(Box::new(*delta));
                    v.push(Box::new(i64::from(*at)));
                },
            )?;
            if !batch.seqs.is_empty() {
                let mut vals: Vec<Param> = Vec::with_capacity(batch.seqs.len() * 2);
                for &(j, s) in &batch.seqs {
                    vals.push(Box::new(j as i32));
                    vals.push(Box::new(s as i64));
                }
                let refs: Vec<&(dyn ToSql + Sync)> = vals.iter().map(|v| v.as_ref()).collect();
                tx.execute(&D.upsert_journal(batch.seqs.len()), &refs)?;
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
            let rows = c.query("SELECT worker, seq FROM hp_journal", &[])?;
            Ok(rows
                .iter()
                .map(|r| (r.get::<_, i32>(0) as u32, r.get::<_, i64>(1) as u64))
                .collect())
        })
    }

    fn torrents(&mut self, each: &mut dyn FnMut(Key, StoredTorrent)) -> Result<(), StoreError> {
        self.with(|c| {
            let rows = c.query(
                "SELECT info_hash, completed, seeders, leechers, first_seen, last_active FROM hp_torrents",
                &[],
            )?;
            for r in &rows {
                let hash: Vec<u8> = r.get(0);
                if let Ok(key) = Key::try_from(hash.as_slice()) {
                    each(
                        key,
                        StoredTorrent {
                            completed: r.get::<_, i64>(1) as u64,
                            seeders: r.get::<_, i64>(2) as u32,
                            leechers: r.get::<_, i64>(3) as u32,
                            first_seen: r.get(4),
                            last_active: r.get(5),
                        },
                    );
                }
            }
            Ok(())
        })
    }

    fn access_list(&mut self) -> Result<Vec<Key>, StoreError> {
        self.with(|c| {
            let rows = c.query("SELECT info_hash FROM hp_access_list", &[])?;
            Ok(rows
                .iter()
                .filter_map(|r| Key::try_from(r.get::<_, Vec<u8>>(0).as_slice()).ok())
                .collect())
        })
    }

    fn popups(&mut self) -> Result<Vec<(u32, String)>, StoreError> {
        self.with(|c| {
            let rows = c.query("SELECT id, definition FROM hp_popups ORDER BY id", &[])?;
            Ok(rows
                .iter()
                .map(|r| (r.get::<_, i32>(0) as u32, r.get::<_, String>(1)))
                .collect())
        })
    }

    fn popup_users(&mut self, users: &[&str]) -> Result<Vec<UserRow>, StoreError> {
        self.with_conn(|c| {
            let mut out = Vec::new();
            for lookup in user_lookups(users) {
                let params: Vec<&(dyn ToSql + Sync)> =
                    lookup.iter().map(|u| u as &(dyn ToSql + Sync)).collect();
                let st = match c.upserts.get(&("popup_users_lookup", lookup.len())) {
                    Some(st) => st.clone(),
                    None => {
                        let st = c.client.prepare(&D.select_popup_users(lookup.len()))?;
                        c.upserts
                            .insert(("popup_users_lookup", lookup.len()), st.clone());
                        st
                    }
                };
                for r in c.client.query(&st, &params)? {
                    out.push((
                        r.get::<_, String>(0),
                        r.get::<_, i32>(1) as u32,
                        PopupUserRow {
                            next_eligible: loaded_time(r.get(2)),
                            shows: r.get::<_, i64>(3) as u32,
                            last_action: r.get::<_, i16>(4) as u8,
                            updated_at: r.get::<_, i64>(5) as u32,
                        },
                    ));
                }
            }
            Ok(out)
        })
    }

    fn popup_user_ids(&mut self, each: &mut dyn FnMut(&str)) -> Result<(), StoreError> {
        use postgres::fallible_iterator::FallibleIterator as _;
        self.with(|c| {
            let mut rows = c.query_raw(super::POPUP_USER_IDS, std::iter::empty::<&str>())?;
            while let Some(row) = rows.next()? {
                each(row.get::<_, &str>(0));
            }
            Ok(())
        })
    }

    fn save_popup(&mut self, id: u32, definition: &str, updated_at: i64) -> Result<(), StoreError> {
        self.with(|c| {
            c.execute(D.save_popup(), &[&(id as i32), &definition, &updated_at])
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
            let rows = c.query(
                "SELECT value FROM hp_lua_counters WHERE tbl = $1 AND k = $2 AND col = $3",
                &[&table, &key, &column],
            )?;
            Ok(rows.first().map(|r| r.get::<_, i64>(0)))
        })
    }

    fn lua_rows(&mut self, table: &str, limit: usize) -> Result<Vec<(u32, String)>, StoreError> {
        self.with(|c| {
            let rows = c.query(
                "SELECT at, data FROM hp_lua_rows WHERE tbl = $1 ORDER BY id LIMIT $2",
                &[&table, &(limit as i64)],
            )?;
            Ok(rows
                .iter()
                .map(|r| (r.get::<_, i64>(0) as u32, r.get::<_, String>(1)))
                .collect())
        })
    }

    fn claim_writer(&mut self) -> Result<(), StoreError> {
        let held = self.with(|c| {
            super::wait_for_writer_lock(D, || {
                let row =
                    c.query_one("SELECT pg_try_advisory_lock($1)", &[&super::WRITER_LOCK_PG])?;
                Ok(row.get::<_, bool>(0))
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
            let rows = c.query(
                "SELECT popup_id, shows FROM hp_popup_daily WHERE day = $1",
                &[&(day as i32)],
            )?;
            Ok(rows
                .iter()
                .map(|r| (r.get::<_, i32>(0) as u32, r.get::<_, i64>(1) as u64))
                .collect())
        })
    }

    fn popup_event_counts(&mut self) -> Result<Vec<(u32, u8, u64)>, StoreError> {
        self.with(|c| {
            let rows = c.query(super::POPUP_EVENT_COUNTS, &[])?;
            Ok(rows
                .iter()
                .map(|r| {
                    let popup = r.get::<_, i32>(0) as u32;
                    (popup, r.get::<_, i16>(1) as u8, r.get::<_, i64>(2) as u64)
                })
                .collect())
        })
    }

    fn execute(&mut self, sql: &str) -> Result<(), StoreError> {
        self.with(|c| c.batch_execute(sql))
    }
}
