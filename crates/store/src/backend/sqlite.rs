//! SQLite, the embedded default: one file in WAL mode, `synchronous = NORMAL` (a commit is
//! durable against a crash of hotpath; the journal covers the rest), no server.

use std::path::PathBuf;
use std::time::Duration;

use rusqlite::{params_from_iter, Connection};

use super::{db_error, Backend, Dialect, Written};
use crate::batch::Batch;
use crate::table::{Rows, Value};
use crate::{Fault, StoreError};
use rusqlite::types::ValueRef;

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
                // A multi-row statement in a transaction keeps a statement journal (a copy
                // of each page it changes, to undo just that statement). Past 64 KiB SQLite
                // moved it to a temporary file, written page by page: a flush of scattered
                // upserts wrote most pages twice. It is bounded by the pages one statement
                // touches (4,096 rows at most); no query here sorts more than it returns.
                c.pragma_update(None, "temp_store", "MEMORY")?;
                add_checked(&c)?;
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
    // `hp_add`'s refusal: SQLite reports a function's error as SQLITE_ERROR whatever code the
    // function set, so its message's prefix tells it.
    if let rusqlite::Error::SqliteFailure(_, Some(msg)) = e {
        if msg.starts_with(ADD_REFUSED) {
            return Fault::Refused;
        }
    }
    match e.sqlite_error_code() {
        Some(
            C::DatabaseBusy | C::DatabaseLocked | C::DiskFull | C::SystemIoFailure | C::CannotOpen,
        ) => Fault::Transient,
        Some(C::ConstraintViolation | C::TooBig | C::TypeMismatch) => Fault::Refused,
        _ => Fault::Setup,
    }
}

/// How `hp_add`'s refusals begin (see [`fault`]).
const ADD_REFUSED: &str = "hp_add: ";

/// Registers `hp_add(a, b)`, the sum a counter column's upsert writes ([`Merge::Add`]):
/// SQLite's own `+` turns a sum past the 64-bit range into a REAL and stores it in the integer
/// column without a word, where PostgreSQL and MySQL refuse the row (`22003`). `hp_add` adds
/// exactly and refuses such a sum with an error that [`fault`] takes as the row's, so the
/// flusher sets the row aside ([`Fault::Refused`]) on SQLite as on the others. A NULL gives
/// NULL, as `+` does; a value that is not an integer (a REAL an older build let in) is refused
/// too.
///
/// [`Merge::Add`]: crate::table::Merge::Add
fn add_checked(c: &Connection) -> rusqlite::Result<()> {
    use rusqlite::functions::FunctionFlags;
    c.create_scalar_function(
        "hp_add",
        2,
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC,
        |ctx| {
            let (a, b) = (ctx.get_raw(0), ctx.get_raw(1));
            match (a, b) {
                (ValueRef::Null, _) | (_, ValueRef::Null) => Ok(None),
                (ValueRef::Integer(x), ValueRef::Integer(y)) => match x.checked_add(y) {
                    Some(sum) => Ok(Some(sum)),
                    None => Err(rusqlite::Error::UserFunctionError(
                        format!(
                            "{ADD_REFUSED}integer out of range: {x} + {y} leaves the 64-bit range"
                        )
                        .into(),
                    )),
                },
                _ => Err(rusqlite::Error::UserFunctionError(
                    format!("{ADD_REFUSED}a counter holds {a:?}, not an integer, to add {b:?} to")
                        .into(),
                )),
            }
        },
    )
}

impl rusqlite::ToSql for crate::table::Value {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use crate::table::Value as V;
        use rusqlite::types::{ToSqlOutput, ValueRef};
        Ok(ToSqlOutput::Borrowed(match self {
            V::Null => ValueRef::Null,
            V::Int(i) => ValueRef::Integer(*i),
            V::Text(t) => ValueRef::Text(t.as_bytes()),
            V::Blob(b) => ValueRef::Blob(b),
        }))
    }
}

/// Writes `rows` with statements of repeating sizes (see [`Dialect::statement_sizes`]), each
/// prepared once per connection.
fn put(tx: &rusqlite::Transaction<'_>, w: &mut Written, rows: &Rows) -> rusqlite::Result<()> {
    let width = rows.table.width();
    let mut rest = rows.values();
    for n in D.statement_sizes(rows.len(), width) {
        let (chunk, tail) = rest.split_at(n * width);
        rest = tail;
        tx.prepare_cached(&D.insert(rows.table, n))?
            .execute(params_from_iter(chunk))?;
        w.statements += 1;
        w.rows += n as u64;
    }
    Ok(())
}

impl Backend for Sqlite {
    fn claim_writer(&mut self, _node: u8) -> Result<(), StoreError> {
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

    fn apply_migration(
        &mut self,
        statements: &[&str],
        record: &str,
        params: &[Value],
    ) -> Result<(), StoreError> {
        self.with(|c| {
            let tx = c.transaction()?;
            for sql in statements {
                tx.execute(sql, [])?;
            }
            tx.execute(record, params_from_iter(params))?;
            tx.commit()
        })
    }

    fn query(
        &mut self,
        sql: &str,
        params: &[Value],
        each: &mut dyn FnMut(&[Value]),
    ) -> Result<(), StoreError> {
        self.with(|c| {
            let mut st = c.prepare_cached(sql)?;
            let n = st.column_count();
            let mut rows = st.query(params_from_iter(params))?;
            let mut vals = Vec::with_capacity(n);
            while let Some(r) = rows.next()? {
                vals.clear();
                for i in 0..n {
                    vals.push(match r.get_ref(i)? {
                        ValueRef::Null => Value::Null,
                        ValueRef::Integer(v) => Value::Int(v),
                        ValueRef::Real(v) => Value::Int(v as i64),
                        ValueRef::Text(t) => Value::Text(String::from_utf8_lossy(t).into()),
                        ValueRef::Blob(b) => Value::Blob(b.into()),
                    });
                }
                each(&vals);
            }
            Ok(())
        })
    }

    fn execute_with(&mut self, sql: &str, params: &[Value]) -> Result<(), StoreError> {
        self.with(|c| {
            if params.is_empty() {
                c.execute_batch(sql)
            } else {
                c.execute(sql, params_from_iter(params)).map(|_| ())
            }
        })
    }

    fn write_batch(&mut self, batch: &Batch, commit: bool) -> Result<Written, StoreError> {
        self.with(|c| {
            let tx = c.transaction()?;
            let mut w = Written::default();
            for rows in &batch.parts {
                put(&tx, &mut w, rows)?;
            }
            if !batch.seqs.is_empty() {
                let rows = batch.journal_rows();
                tx.prepare_cached(&D.insert(rows.table, rows.len()))?
                    .execute(params_from_iter(rows.values()))?;
            }
            if commit {
                tx.commit()?;
            } else {
                tx.rollback()?;
            }
            Ok(w)
        })
    }
}
