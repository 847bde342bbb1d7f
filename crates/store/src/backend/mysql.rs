//! MySQL and MariaDB, through the synchronous `mysql` client, with connect, read and write
//! timeouts so that a dead or stalled server turns into an error and a retry, not a hang.
//! Batches go over the text protocol with the values in the statement (see
//! [`Dialect::literal_inserts`]): a prepared statement of thousands of placeholders costs a
//! round trip and a column definition per placeholder, 17 % of the announce rate in the
//! persistence benchmark.

use std::time::Duration;

use mysql::prelude::Queryable;
use mysql::{Conn, Opts, OptsBuilder, TxOpts};

use super::{db_error, Backend, Dialect, Written};
use crate::batch::Batch;
use crate::table::Value;
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

    /// Takes the lock `hotpath:<database><suffix>` (GET_LOCK names are server-wide: the
    /// database's name keeps databases apart), waiting up to [`super::WRITER_WAIT`]; `held`
    /// says why it failed when another session keeps it.
    fn named_lock(&mut self, suffix: &str, held: &'static str) -> Result<(), StoreError> {
        let got = self.with(|c| {
            super::wait_for_writer_lock(D, || {
                let got: Option<Option<i64>> = c.exec_first(
                    "SELECT GET_LOCK(CONCAT('hotpath:', DATABASE(), ?), 0)",
                    (suffix,),
                )?;
                Ok(got.flatten() == Some(1))
            })
        })?;
        if got {
            Ok(())
        } else {
            Err(db_error(D, held, Fault::Setup))
        }
    }
}

/// What an error means for a write. Lock waits, deadlocks, too many connections and a server
/// shutting down may pass, as lost connections and I/O errors may; values the server refuses
/// are the rows' own: every error of SQLSTATE class 22 (data: a number out of range, such as
/// `BIGINT value is out of range` when a counter's sum overflows, a string too long, a bad
/// date) or 23 (a constraint), and the codes MySQL reports under the general state `HY000`
/// or a warning's state in strict mode (a string its character set cannot hold, a truncated
/// value, a trigger's SIGNAL, a CHECK). Other server errors need a person.
fn fault(e: &mysql::Error) -> Fault {
    match e {
        mysql::Error::MySqlError(s) => fault_of(s.code, &s.state),
        _ => Fault::Transient,
    }
}

/// [`fault`] of a server error's code and SQLSTATE.
fn fault_of(code: u16, state: &str) -> Fault {
    match code {
        1205 | 1213 | 1040 | 1053 | 1927 | 2006 | 2013 => Fault::Transient,
        1048 | 1062 | 1264 | 1265 | 1292 | 1300 | 1366 | 1406 | 1451 | 1452 | 1644 | 1690
        | 3819 | 4025 => Fault::Refused,
        _ if state.starts_with("22") || state.starts_with("23") => Fault::Refused,
        _ => Fault::Setup,
    }
}

/// Where a migration names the server's byte-exact collation.
const EXACT: &str = "{bin}";

/// The server's utf8mb4 collation that compares byte for byte without padding with spaces:
/// MariaDB's `utf8mb4_nopad_bin`, MySQL 8's `utf8mb4_0900_bin`; else `utf8mb4_bin`, byte for
/// byte but blind to trailing spaces (MySQL 5.7).
fn exact_collation(c: &mut Conn) -> Result<String, mysql::Error> {
    let have: Vec<String> = c.query(
        "SELECT COLLATION_NAME FROM information_schema.COLLATIONS \
         WHERE COLLATION_NAME IN ('utf8mb4_nopad_bin', 'utf8mb4_0900_bin') \
         ORDER BY COLLATION_NAME DESC",
    )?;
    Ok(have
        .into_iter()
        .next()
        .unwrap_or_else(|| "utf8mb4_bin".into()))
}

/// Parameters as the driver takes them.
fn to_mysql(params: &[Value]) -> Vec<mysql::Value> {
    params
        .iter()
        .map(|v| match v {
            Value::Null => mysql::Value::NULL,
            Value::Int(i) => mysql::Value::Int(*i),
            Value::Text(_) | Value::Blob(_) => mysql::Value::Bytes(v.bytes().to_vec()),
        })
        .collect()
}

/// A value read back: integers as integers, binary columns (character set 63) as bytes,
/// other strings as text, dates and times as text as MySQL writes them
/// (`YYYY-MM-DD HH:MM:SS`, `[-]HHH:MM:SS`; a site's `deleted_at` is read as "set").
fn from_mysql(v: Option<&mysql::Value>, col: &mysql::Column) -> Value {
    match v {
        None | Some(mysql::Value::NULL) => Value::Null,
        Some(mysql::Value::Int(i)) => Value::Int(*i),
        Some(mysql::Value::UInt(u)) => Value::Int(i64::try_from(*u).unwrap_or(i64::MAX)),
        Some(mysql::Value::Float(f)) => Value::Int(*f as i64),
        Some(mysql::Value::Double(f)) => Value::Int(*f as i64),
        Some(mysql::Value::Bytes(b)) if col.character_set() == 63 => Value::Blob(b[..].into()),
        Some(mysql::Value::Bytes(b)) => Value::Text(String::from_utf8_lossy(b).into()),
        Some(mysql::Value::Date(y, mo, d, h, mi, s, _)) => {
            Value::Text(format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}").into())
        }
        Some(mysql::Value::Time(neg, days, h, mi, s, _)) => {
            let hours = u64::from(*days) * 24 + u64::from(*h);
            let sign = if *neg { "-" } else { "" };
            Value::Text(format!("{sign}{hours:02}:{mi:02}:{s:02}").into())
        }
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

    fn apply_migration(
        &mut self,
        statements: &[&str],
        record: &str,
        params: &[Value],
    ) -> Result<(), StoreError> {
        self.with(|c| {
            let mut bin = None;
            for sql in statements {
                if sql.contains(EXACT) {
                    if bin.is_none() {
                        bin = Some(exact_collation(c)?);
                    }
                    let bin = bin.as_deref().unwrap_or("utf8mb4_bin");
                    c.query_drop(sql.replace(EXACT, bin))?;
                } else {
                    c.query_drop(sql)?;
                }
            }
            c.exec_drop(record, mysql::Params::Positional(to_mysql(params)))
        })
    }

    fn query(
        &mut self,
        sql: &str,
        params: &[Value],
        each: &mut dyn FnMut(&[Value]),
    ) -> Result<(), StoreError> {
        self.with(|c| {
            let mut result = c.exec_iter(sql, mysql::Params::Positional(to_mysql(params)))?;
            let mut vals = Vec::new();
            while let Some(set) = result.iter() {
                for row in set {
                    let row = row?;
                    vals.clear();
                    for (i, col) in row.columns_ref().iter().enumerate() {
                        vals.push(from_mysql(row.as_ref(i), col));
                    }
                    each(&vals);
                }
            }
            Ok(())
        })
    }

    fn execute_with(&mut self, sql: &str, params: &[Value]) -> Result<(), StoreError> {
        self.with(|c| {
            if params.is_empty() {
                c.query_drop(sql)
            } else {
                c.exec_drop(sql, mysql::Params::Positional(to_mysql(params)))
            }
        })
    }

    fn write_batch(&mut self, batch: &Batch, commit: bool) -> Result<Written, StoreError> {
        self.with(|c| {
            let mut tx = c.start_transaction(TxOpts::default())?;
            let mut w = Written::default();
            // Text may be large (script rows): statements of at most ~4 MiB, well under the
            // server's max_allowed_packet.
            for rows in &batch.parts {
                for (sql, n) in D.literal_inserts(rows, 4 << 20) {
                    tx.query_drop(sql)?;
                    w.statements += 1;
                    w.rows += n as u64;
                }
            }
            for (sql, _) in D.literal_inserts(&batch.journal_rows(), 4 << 20) {
                tx.query_drop(sql)?;
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
        self.named_lock(":migrations", super::MIGRATION_LOCK_HELD)
    }

    fn release_migrations(&mut self) -> Result<(), StoreError> {
        self.with(|c| {
            c.query_drop("SELECT RELEASE_LOCK(CONCAT('hotpath:', DATABASE(), ':migrations'))")
        })
    }

    fn claim_writer(&mut self, node: u8) -> Result<(), StoreError> {
        let suffix = if node == 0 {
            String::new()
        } else {
            format!(":{node}")
        };
        self.named_lock(&suffix, super::WRITER_LOCK_HELD)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_the_server_refuses_is_the_rows_fault_whatever_its_code() {
        // An overflowing `+=` (the error that once held every write behind one row), a
        // string too long, a truncation, a constraint, and a code this list never named in
        // the data and constraint classes.
        for (code, state) in [
            (1690, "22003"),
            (1406, "22001"),
            (1265, "01000"),
            (1062, "23000"),
            (9999, "22999"),
            (9998, "23999"),
        ] {
            assert_eq!(fault_of(code, state), Fault::Refused, "{code} {state}");
        }
        assert_eq!(fault_of(1213, "40001"), Fault::Transient);
        assert_eq!(fault_of(1146, "42S02"), Fault::Setup);
    }
}
