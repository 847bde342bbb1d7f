//! PostgreSQL, through the synchronous `postgres` client (the flusher is one thread; an async
//! runtime would buy nothing). Connects with a 5 s timeout and TCP keepalives, and sets a
//! statement timeout, so a dead or stalled server turns into an error and a retry, not a hang.

use std::time::Duration;

use std::collections::HashMap;

use postgres::types::ToSql;
use postgres::{Client, NoTls, Statement};

use super::{db_error, Backend, Dialect, StoredTorrent, Written};
use crate::merge::{Batch, Key};
use crate::migrations::Migration;
use crate::StoreError;

const D: Dialect = Dialect::Postgres;

pub(crate) struct Postgres {
    config: postgres::Config,
    client: Option<Conn>,
}

/// A connection and the upserts prepared on it, by row count (see
/// [`Dialect::statement_sizes`]): prepared once, not parsed and planned per batch.
struct Conn {
    client: Client,
    upserts: HashMap<usize, Statement>,
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
                .map_err(|e| db_error(D, format!("cannot connect: {e}"), true))?;
            self.client = Some(Conn {
                client,
                upserts: HashMap::new(),
            });
        }
        let r = f(self.client.as_mut().expect("connected"));
        r.map_err(|e| {
            self.client = None;
            // Syntax, schema and data errors need a person; anything else (a lost connection,
            // a deadlock, a server shutting down, a timeout) may pass.
            let retry = e.code().is_none_or(|c| {
                let c = c.code();
                !(c.starts_with("42") || c.starts_with("22") || c.starts_with("23"))
            });
            db_error(D, e, retry)
        })
    }
}

impl Backend for Postgres {
    fn dialect(&self) -> Dialect {
        D
    }

    fn applied_migrations(&mut self) -> Result<Vec<(u32, i64)>, StoreError> {
        self.with(|c| {
            c.batch_execute(D.create_schema_table())?;
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

    fn write(&mut self, batch: &Batch) -> Result<Written, StoreError> {
        self.with_conn(|c| {
            let mut tx = c.client.transaction()?;
            let mut w = Written::default();
            let mut rest = &batch.torrents[..];
            for n in D.statement_sizes(rest.len()) {
                let (chunk, tail) = rest.split_at(n);
                rest = tail;
                let st = match c.upserts.get(&n) {
                    Some(st) => st.clone(),
                    None => {
                        let st = tx.prepare(&D.upsert_torrents(n))?;
                        c.upserts.insert(n, st.clone());
                        st
                    }
                };
                let mut vals: Vec<Param> = Vec::with_capacity(chunk.len() * 6);
                for (k, r) in chunk {
                    vals.push(Box::new(k.to_vec()));
                    vals.push(Box::new(r.completed as i64));
                    vals.push(Box::new(i64::from(r.seeders)));
                    vals.push(Box::new(i64::from(r.leechers)));
                    vals.push(Box::new(i64::from(r.first_seen)));
                    vals.push(Box::new(i64::from(r.last_active)));
                }
                let refs: Vec<&(dyn ToSql + Sync)> = vals.iter().map(|v| v.as_ref()).collect();
                tx.execute(&st, &refs)?;
                w.statements += 1;
                w.rows += chunk.len() as u64;
            }
            if !batch.seqs.is_empty() {
                let mut vals: Vec<Param> = Vec::with_capacity(batch.seqs.len() * 2);
                for &(j, s) in &batch.seqs {
                    vals.push(Box::new(j as i32));
                    vals.push(Box::new(s as i64));
                }
                let refs: Vec<&(dyn ToSql + Sync)> = vals.iter().map(|v| v.as_ref()).collect();
                tx.execute(&D.upsert_journal(batch.seqs.len()), &refs)?;
            }
            tx.commit()?;
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

    fn execute(&mut self, sql: &str) -> Result<(), StoreError> {
        self.with(|c| c.batch_execute(sql))
    }
}
