//! PostgreSQL, through the synchronous `postgres` client (the flusher is one thread; an async
//! runtime would buy nothing). Connects with a 5 s timeout and TCP keepalives, and sets a
//! statement timeout, so a dead or stalled server turns into an error and a retry, not a hang.

use std::time::Duration;

use std::collections::HashMap;

use postgres::types::{IsNull, ToSql, Type};
use postgres::{Client, NoTls, Statement};

use super::{db_error, Backend, Dialect, Written};
use crate::batch::Batch;
use crate::table::Value;
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
    /// Reads, by their text (at most 64: services' reads are a handful of fixed texts).
    reads: HashMap<String, Statement>,
}

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

    /// Takes the session's advisory lock `key`, waiting up to [`super::WRITER_WAIT`]; `held`
    /// says why it failed when another session keeps it.
    fn advisory_lock(&mut self, key: i64, held: &'static str) -> Result<(), StoreError> {
        let got = self.with(|c| {
            super::wait_for_writer_lock(D, || {
                let row = c.query_one("SELECT pg_try_advisory_lock($1)", &[&key])?;
                Ok(row.get::<_, bool>(0))
            })
        })?;
        if got {
            Ok(())
        } else {
            Err(db_error(D, held, Fault::Setup))
        }
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
                reads: HashMap::new(),
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
        // A value this client cannot bind is the row's own, as the server's 22xxx are.
        let ours = std::error::Error::source(e).is_some_and(|s| s.is::<OutOfRange>());
        return if ours {
            Fault::Refused
        } else {
            Fault::Transient
        };
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

/// A value bound to a column of whatever integer width the table has: PostgreSQL checks a
/// parameter's type against its column's. A value out of the column's range is refused
/// ([`Fault::Refused`]), as MySQL refuses it.
impl ToSql for Value {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self {
            Value::Null => Ok(IsNull::Yes),
            Value::Int(v) => match *ty {
                Type::INT8 => v.to_sql(ty, out),
                Type::INT4 => i32::try_from(*v)
                    .map_err(|_| OutOfRange(*v, "INTEGER"))?
                    .to_sql(ty, out),
                Type::INT2 => i16::try_from(*v)
                    .map_err(|_| OutOfRange(*v, "SMALLINT"))?
                    .to_sql(ty, out),
                _ => v.to_sql(ty, out),
            },
            Value::Text(t) => (&**t).to_sql(ty, out),
            Value::Blob(b) => (&**b).to_sql(ty, out),
        }
    }

    fn accepts(ty: &Type) -> bool {
        <i64 as ToSql>::accepts(ty)
            || <i32 as ToSql>::accepts(ty)
            || <i16 as ToSql>::accepts(ty)
            || <&str as ToSql>::accepts(ty)
            || <&[u8] as ToSql>::accepts(ty)
    }

    postgres::types::to_sql_checked!();
}

/// An integer too large for its column.
#[derive(Debug)]
struct OutOfRange(i64, &'static str);

impl std::fmt::Display for OutOfRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} is out of range for a column of type {}",
            self.0, self.1
        )
    }
}

impl std::error::Error for OutOfRange {}

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

    fn apply_migration(
        &mut self,
        statements: &[&str],
        record: &str,
        params: &[Value],
    ) -> Result<(), StoreError> {
        let record = D.numbered(record);
        self.with(|c| {
            let mut tx = c.transaction()?;
            for sql in statements {
                tx.batch_execute(sql)?;
            }
            let refs: Vec<&(dyn ToSql + Sync)> =
                params.iter().map(|v| v as &(dyn ToSql + Sync)).collect();
            tx.execute(&*record, &refs)?;
            tx.commit()
        })
    }

    fn query(
        &mut self,
        sql: &str,
        params: &[Value],
        each: &mut dyn FnMut(&[Value]),
    ) -> Result<(), StoreError> {
        use postgres::fallible_iterator::FallibleIterator as _;
        let sql = D.numbered(sql);
        self.with_conn(|c| {
            let st = match c.reads.get(&*sql) {
                Some(st) => st.clone(),
                None => {
                    let st = c.client.prepare(&sql)?;
                    if c.reads.len() < 64 {
                        c.reads.insert(sql.to_string(), st.clone());
                    }
                    st
                }
            };
            let refs = params.iter().map(|v| v as &(dyn ToSql + Sync));
            let mut rows = c.client.query_raw(&st, refs)?;
            let mut vals = Vec::new();
            while let Some(row) = rows.next()? {
                vals.clear();
                for (i, col) in row.columns().iter().enumerate() {
                    let ty = col.type_();
                    let v = if *ty == Type::INT2 {
                        row.try_get::<_, Option<i16>>(i)?
                            .map(|v| Value::Int(v.into()))
                    } else if *ty == Type::INT4 {
                        row.try_get::<_, Option<i32>>(i)?
                            .map(|v| Value::Int(v.into()))
                    } else if *ty == Type::INT8 {
                        row.try_get::<_, Option<i64>>(i)?.map(Value::Int)
                    } else if *ty == Type::BYTEA {
                        row.try_get::<_, Option<Vec<u8>>>(i)?
                            .map(|v| Value::Blob(v.into()))
                    } else {
                        // Text, and any other type read as text.
                        row.try_get::<_, Option<String>>(i)?
                            .map(|v| Value::Text(v.into()))
                    };
                    vals.push(v.unwrap_or(Value::Null));
                }
                each(&vals);
            }
            Ok(())
        })
    }

    fn execute_with(&mut self, sql: &str, params: &[Value]) -> Result<(), StoreError> {
        let sql = D.numbered(sql);
        self.with(|c| {
            if params.is_empty() {
                c.batch_execute(&sql)
            } else {
                let refs: Vec<&(dyn ToSql + Sync)> =
                    params.iter().map(|v| v as &(dyn ToSql + Sync)).collect();
                c.execute(&*sql, &refs).map(|_| ())
            }
        })
    }

    fn write_batch(&mut self, batch: &Batch, commit: bool) -> Result<Written, StoreError> {
        self.with_conn(|c| {
            let mut tx = c.client.transaction()?;
            let mut w = Written::default();
            let journal = batch.journal_rows();
            for rows in batch.parts.iter().chain([&journal]) {
                let width = rows.table.width();
                let mut rest = rows.values();
                for n in D.statement_sizes(rows.len(), width) {
                    let st = match c.upserts.get(&(rows.table.name, n)) {
                        Some(st) => st.clone(),
                        None => {
                            let st = tx.prepare(&D.insert(rows.table, n))?;
                            c.upserts.insert((rows.table.name, n), st.clone());
                            st
                        }
                    };
                    let (chunk, tail) = rest.split_at(n * width);
                    rest = tail;
                    let refs: Vec<&(dyn ToSql + Sync)> =
                        chunk.iter().map(|v| v as &(dyn ToSql + Sync)).collect();
                    tx.execute(&st, &refs)?;
                    if rows.table.name != journal.table.name {
                        w.statements += 1;
                        w.rows += n as u64;
                    }
                }
            }
            if commit {
                tx.commit()?;
            } else {
                tx.rollback()?;
            }
            Ok(w)
        })
    }

    fn claim_migrations(&mut self) -> Result<(), StoreError> {
        self.advisory_lock(super::MIGRATION_LOCK_PG, super::MIGRATION_LOCK_HELD)
    }

    fn release_migrations(&mut self) -> Result<(), StoreError> {
        let key = super::MIGRATION_LOCK_PG;
        self.with(|c| {
            c.query_one("SELECT pg_advisory_unlock($1)", &[&key])
                .map(drop)
        })
    }

    fn claim_writer(&mut self, node: u8) -> Result<(), StoreError> {
        self.advisory_lock(
            super::WRITER_LOCK_PG + i64::from(node),
            super::WRITER_LOCK_HELD,
        )
    }
}
