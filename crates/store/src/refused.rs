//! Rows the database refuses, set aside so that the rest are written.
//!
//! A batch fails whole when one of its rows holds a value its database cannot store (a NUL
//! byte in PostgreSQL text, a string too long for a MySQL column, a constraint or trigger the
//! site added). Retrying cannot help, and holding the batch would hold every change after it.
//! So when a write fails with [`Fault::Refused`], the flusher finds the refused rows by trying
//! halves of the batch in transactions it rolls back ([`find_refused`]), appends them to
//! `data_dir/refused.jsonl` (one JSON object per line, with the database's message; fsynced),
//! and writes the rest together with the journal positions ([`write`]). `hotpath db refused`
//! lists them and `hotpath db refused --replay` writes them again once the cause is fixed
//! ([`replay`]).
//!
//! A line: `{"refused_at":…, "database":…, "error":…, "table":"hp_popup_users", "row":{…},
//! "journal":[[worker, seq], …]}`. `journal` is the batch's journal positions: a crash between
//! the append and the commit replays the batch and appends its refused rows again, and the
//! replay drops such a line when an identical table, row and journal came before it.
//!
//! Owns: the row selection of a [`Batch`] by position, the rows' JSON, the search, the file.
//! Must not: talk to a database except through the closure it is given.

use std::io::Write as _;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::backend::{Backend, Written};
use crate::batch::Batch;
use crate::table::{Rows, Table};
use crate::{Fault, StoreError};

/// The file under `store.data_dir`.
pub const FILE: &str = "refused.jsonl";

/// The journal number under which a replay of refused rows records itself in `hp_journal`,
/// so that a replay cut short by a crash is not written twice (the largest number every
/// database's signed 32-bit `worker` column holds; workers count from 0).
pub const REPLAY_JOURNAL: u32 = i32::MAX as u32;

/// The refused-rows file of a data directory.
pub fn path(data_dir: &Path) -> PathBuf {
    data_dir.join(FILE)
}

impl Batch {
    /// The rows numbered `range` (part after part, in order), without journal positions.
    pub fn select(&self, range: Range<usize>) -> Batch {
        let mut out = Batch::default();
        let mut at = 0;
        for p in &self.parts {
            let lo = range.start.saturating_sub(at).min(p.len());
            let hi = range.end.saturating_sub(at).min(p.len());
            if hi > lo {
                out.parts.push(p.slice(lo..hi));
            }
            at += p.len();
        }
        out
    }

    /// This batch without the rows numbered in `gone`, sorted (journal positions kept).
    pub fn without(&self, gone: &[usize]) -> Batch {
        let mut n = 0usize;
        let mut out = self.clone();
        for p in &mut out.parts {
            p.retain(|| {
                let keep = gone.binary_search(&n).is_err();
                n += 1;
                keep
            });
        }
        out.parts.retain(|p| !p.is_empty());
        out
    }

    /// Row `i` as `(table, columns)` in JSON.
    pub fn row_json(&self, i: usize) -> (&'static str, Value) {
        match self.select(i..i + 1).parts.first() {
            Some(p) => (p.table.name, p.row_json(0)),
            None => ("", Value::Null),
        }
    }

    /// A one-row batch from a refused row's table and JSON (see [`Batch::row_json`]), the
    /// table one of `tables`.
    pub fn from_row_json(
        tables: &[&'static Table],
        table: &str,
        row: &Value,
    ) -> Result<Batch, String> {
        let Some(t) = tables.iter().find(|t| t.name == table) else {
            return Err(format!("unknown table {table:?}"));
        };
        let mut b = Batch::default();
        b.push(Rows::from_json(t, row)?);
        Ok(b)
    }
}

/// Finds the rows of `batch` that `write` refuses ([`Fault::Refused`]) by trying halves,
/// recursively: about two tries per refused row per halving, each rolled back by `write`.
/// Returns each refused row's number with the database's message; stops at the first error
/// of another kind (a lost connection: the flusher retries the whole batch later).
pub fn find_refused(
    batch: &Batch,
    write: &mut dyn FnMut(&Batch) -> Result<(), StoreError>,
) -> Result<Vec<(usize, String)>, StoreError> {
    fn search(
        batch: &Batch,
        range: Range<usize>,
        write: &mut dyn FnMut(&Batch) -> Result<(), StoreError>,
        out: &mut Vec<(usize, String)>,
    ) -> Result<(), StoreError> {
        match write(&batch.select(range.clone())) {
            Ok(()) => Ok(()),
            Err(e) if e.fault() == Some(Fault::Refused) => {
                if range.len() == 1 {
                    out.push((range.start, e.to_string()));
                    return Ok(());
                }
                let mid = range.start + range.len() / 2;
                search(batch, range.start..mid, write, out)?;
                search(batch, mid..range.end, write, out)
            }
            Err(e) => Err(e),
        }
    }
    let mut out = Vec::new();
    let rows = batch.rows();
    if rows > 0 {
        search(batch, 0..rows, write, &mut out)?;
    }
    Ok(out)
}

/// Writes `batch` with `backend`; when the database refuses it for a value, sets the refused
/// rows aside in `file` (fsynced before anything else is written), leaves the rest in `batch`
/// and writes it with the journal positions. Returns what the database reported and how many
/// rows were set aside. On an error, `batch` is what is still to write (without any rows
/// already set aside, so they are never set aside twice).
///
/// The file holds at most `max_bytes` (`store.refused_max_bytes`): refused rows that would
/// take it past that are dropped instead, logged and counted in [`SetAside::dropped`], so an
/// attacker who finds a value the database refuses cannot fill the disk with it.
pub fn write(
    backend: &mut dyn Backend,
    file: &Path,
    database: &str,
    batch: &mut Batch,
    max_bytes: u64,
) -> Result<(Written, SetAside), StoreError> {
    let first = match backend.write(batch) {
        Ok(written) => return Ok((written, SetAside::default())),
        Err(e) if e.fault() == Some(Fault::Refused) => e,
        Err(e) => return Err(e),
    };
    let refused = find_refused(batch, &mut |part| backend.try_write(part))?;
    if refused.is_empty() {
        return Err(StoreError::Db {
            backend: backend.dialect().name(),
            what: format!("{first} (the batch is refused, though each of its rows alone is taken)"),
            fault: Fault::Setup,
        });
    }
    let kept = append(file, database, batch, &refused, max_bytes)
        .map_err(|e| crate::journal_error(file, e))?;
    let (table, row) = batch.row_json(refused[0].0);
    if kept {
        log::error!(
            "{database}: refused {} of {} rows for their values; set aside in {} (`hotpath db \
             refused` lists them), the rest are written. The first: {table} {row}: {}",
            refused.len(),
            batch.rows(),
            file.display(),
            refused[0].1
        );
    } else {
        log::error!(
            "{database}: refused {} of {} rows for their values; {} is at \
             store.refused_max_bytes ({max_bytes}), so they are DROPPED (`hotpath db refused \
             --replay` empties it once the cause is fixed); the rest are written. The first: \
             {table} {row}: {}",
            refused.len(),
            batch.rows(),
            file.display(),
            refused[0].1
        );
    }
    let gone: Vec<usize> = refused.iter().map(|r| r.0).collect();
    *batch = batch.without(&gone);
    let written = backend.write(batch)?;
    let n = refused.len();
    Ok((
        written,
        if kept {
            SetAside {
                kept: n,
                dropped: 0,
            }
        } else {
            SetAside {
                kept: 0,
                dropped: n,
            }
        },
    ))
}

/// What [`write`] did with the rows the database refused.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SetAside {
    /// Rows appended to the file.
    pub kept: usize,
    /// Rows dropped: the file was at its bound.
    pub dropped: usize,
}

/// Opens `file` for appending under an exclusive lock, making sure the lock is on the file
/// the path names now (a replay renames the file away under the same lock).
fn open_locked(file: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::MetadataExt as _;
    loop {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(file)?;
        f.lock()?;
        match std::fs::metadata(file) {
            Ok(m) if m.ino() == f.metadata()?.ino() => return Ok(f),
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Appends the refused rows of `batch` to `file` and fsyncs it; `Ok(false)`, writing
/// nothing, when that would take the file past `max_bytes`.
pub fn append(
    file: &Path,
    database: &str,
    batch: &Batch,
    refused: &[(usize, String)],
    max_bytes: u64,
) -> std::io::Result<bool> {
    let mut text = String::new();
    let now = crate::unix_now();
    for (i, error) in refused {
        let (table, row) = batch.row_json(*i);
        let line = json!({
            "refused_at": now,
            "database": database,
            "error": error,
            "table": table,
            "row": row,
            "journal": batch.seqs,
        });
        text.push_str(&line.to_string());
        text.push('\n');
    }
    let mut f = open_locked(file)?;
    if f.metadata()?.len().saturating_add(text.len() as u64) > max_bytes {
        return Ok(false);
    }
    f.write_all(text.as_bytes())?;
    f.sync_data()?;
    Ok(true)
}

/// What [`replay`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Replayed {
    /// Entries read.
    pub entries: usize,
    /// Entries dropped as copies of an earlier one (a crash between set-aside and commit).
    pub copies: usize,
    /// Rows written (after merging rows of one key).
    pub written: usize,
    /// Rows refused again (back in the file).
    pub refused: usize,
    /// Lines that are not entries (kept in `refused.bad-lines.jsonl`).
    pub bad_lines: usize,
}

/// Writes the refused rows of `data_dir` again, once their cause is fixed (a constraint
/// dropped, a value edited in the file): rows of one key merge as the flusher merges them,
/// rows refused again go back to the file, and the write records itself in `hp_journal`
/// under [`REPLAY_JOURNAL`] so that a replay cut short is finished, never written twice, by
/// the next one. Safe beside a running server: it takes the file under the lock the flusher
/// appends under, and the flusher then starts a new file.
pub fn replay(
    backend: &mut dyn Backend,
    tables: &[&'static Table],
    data_dir: &Path,
    database: &str,
) -> Result<Replayed, StoreError> {
    let file = path(data_dir);
    let done = backend
        .journal_positions()?
        .into_iter()
        .find(|(w, _)| *w == REPLAY_JOURNAL)
        .map_or(0, |(_, s)| s);
    let taken = |n: u64| data_dir.join(format!("refused-replay-{n}.jsonl"));
    // A replay that committed, then stopped before deleting its file.
    let _ = std::fs::remove_file(taken(done));
    let next = taken(done + 1);
    if !next.exists() {
        match std::fs::metadata(&file) {
            Ok(m) if m.len() > 0 => {}
            _ => return Ok(Replayed::default()),
        }
        let f = open_locked(&file).map_err(|e| crate::journal_error(&file, e))?;
        std::fs::rename(&file, &next).map_err(|e| crate::journal_error(&next, e))?;
        drop(f);
    }
    let (entries, bad) = read(&next).map_err(|e| crate::journal_error(&next, e))?;
    let mut out = Replayed {
        entries: entries.len(),
        bad_lines: bad.len(),
        ..Replayed::default()
    };
    if !bad.is_empty() {
        let text = std::fs::read_to_string(&next).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let mut keep = String::new();
        for (n, why) in &bad {
            log::warn!("{}: line {n}: {why}; kept aside", next.display());
            keep.push_str(lines.get(n - 1).copied().unwrap_or(""));
            keep.push('\n');
        }
        let aside = data_dir.join("refused.bad-lines.jsonl");
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&aside)
            .map_err(|e| crate::journal_error(&aside, e))?;
        f.write_all(keep.as_bytes())
            .and_then(|()| f.sync_data())
            .map_err(|e| crate::journal_error(&aside, e))?;
    }
    // Copies dropped (the later of two identical entries), the rest merged in file order:
    // newest last.
    let mut seen = std::collections::HashSet::new();
    let mut rows = Vec::with_capacity(entries.len());
    for e in &entries {
        if !seen.insert((e.table.as_str(), e.row.to_string(), e.journal.to_string())) {
            out.copies += 1;
            continue;
        }
        match Batch::from_row_json(tables, &e.table, &e.row) {
            Ok(one) => rows.extend(one.parts),
            Err(why) => {
                return Err(StoreError::Schema(format!(
                    "{} line {}: {why}; fix or remove the line",
                    next.display(),
                    e.line
                )))
            }
        }
    }
    let mut batch = Batch::concat(rows);
    batch.covered(REPLAY_JOURNAL, done + 1);
    // Rows refused again go back whole: the file was just emptied of them.
    let (_, set_aside) = write(backend, &file, database, &mut batch, u64::MAX)?;
    out.written = batch.rows();
    out.refused = set_aside.kept;
    let _ = std::fs::remove_file(&next);
    Ok(out)
}

/// One line of a refused-rows file, read back.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The line's number (from 1).
    pub line: usize,
    /// The table.
    pub table: String,
    /// The row's columns.
    pub row: Value,
    /// Why the database refused it.
    pub error: String,
    /// The batch's journal positions.
    pub journal: Value,
}

/// A line of a refused-rows file that is not an entry: its number and why.
pub type BadLine = (usize, String);

/// Reads a refused-rows file: its entries, and the lines that are not entries (with why).
pub fn read(file: &Path) -> std::io::Result<(Vec<Entry>, Vec<BadLine>)> {
    match std::fs::read_to_string(file) {
        Ok(text) => Ok(parse(&text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((Vec::new(), Vec::new())),
        Err(e) => Err(e),
    }
}

/// A refused-rows file's text: its entries, and the lines that are not entries (with why).
pub fn parse(text: &str) -> (Vec<Entry>, Vec<BadLine>) {
    let (mut entries, mut bad) = (Vec::new(), Vec::new());
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = match serde_json::from_str(line) {
            Ok(v) => v,
            Err(e) => {
                bad.push((n + 1, format!("not JSON: {e}")));
                continue;
            }
        };
        let (Some(table), Some(row)) = (v.get("table").and_then(Value::as_str), v.get("row"))
        else {
            bad.push((n + 1, "no `table` or `row`".into()));
            continue;
        };
        entries.push(Entry {
            line: n + 1,
            table: table.to_string(),
            row: row.clone(),
            error: v
                .get("error")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            journal: v.get("journal").cloned().unwrap_or(Value::Null),
        });
    }
    (entries, bad)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::examples::{COUNTS, LOG, STATS};
    use crate::table::{Rows, Table, Value as V};

    /// The tables of [`mixed`].
    const TABLES: [&Table; 3] = [&COUNTS, &LOG, &STATS];

    /// Rows of three tables; those of user "bad" are refused by [`refuses_bad`].
    fn mixed() -> Batch {
        let users = ["a", "bad", "c", "d"];
        let mut counts = Rows::new(&COUNTS);
        let mut log = Rows::new(&LOG);
        for (i, user) in users.iter().enumerate() {
            let at = V::Int(100 + i as i64);
            counts.push([
                "t".into(),
                (*user).into(),
                "n".into(),
                V::Int(1),
                at.clone(),
            ]);
            log.push([at, (*user).into(), V::Int(1), V::Int(1)]);
        }
        let mut stats = Rows::new(&STATS);
        stats.push([
            V::Blob([7; 20].into()),
            V::Int(1),
            V::Int(2),
            V::Int(3),
            V::Int(5),
            V::Int(5),
        ]);
        let mut b = Batch::default();
        for rows in [counts, log, stats] {
            b.push(rows);
        }
        b.seqs = vec![(0, 12)];
        b.changes = 9;
        b
    }

    fn refuses_bad(b: &Batch) -> Result<(), StoreError> {
        let bad = b
            .parts
            .iter()
            .any(|p| p.values().iter().any(|v| v.text() == "bad"));
        if bad {
            Err(StoreError::Db {
                backend: "test",
                what: "refused".into(),
                fault: Fault::Refused,
            })
        } else {
            Ok(())
        }
    }

    #[test]
    fn the_search_finds_exactly_the_refused_rows() {
        let b = mixed();
        let mut tries = 0;
        let found = find_refused(&b, &mut |part| {
            tries += 1;
            refuses_bad(part)
        })
        .unwrap();
        let tables: Vec<_> = found.iter().map(|(i, _)| b.row_json(*i).0).collect();
        assert_eq!(tables, ["t_counts", "t_log"]);
        assert!(tries <= 2 * 2 * 4 + 1, "{tries} tries");
        let rest = b.without(&found.iter().map(|r| r.0).collect::<Vec<_>>());
        assert_eq!(rest.rows(), b.rows() - 2);
        assert_eq!(rest.seqs, vec![(0, 12)], "the journal position stays");
        refuses_bad(&rest).unwrap();
    }

    #[test]
    fn a_transient_error_stops_the_search() {
        let b = mixed();
        let e = find_refused(&b, &mut |_| {
            Err(StoreError::Db {
                backend: "test",
                what: "connection reset".into(),
                fault: Fault::Transient,
            })
        })
        .unwrap_err();
        assert!(e.retryable());
    }

    #[test]
    fn every_row_round_trips_through_its_json() {
        let b = mixed();
        for i in 0..b.rows() {
            let (table, row) = b.row_json(i);
            let back = Batch::from_row_json(&TABLES, table, &row).unwrap();
            assert_eq!(back, b.select(i..i + 1), "row {i} of {table}");
        }
        assert!(Batch::from_row_json(&TABLES, "t_counts", &json!({"k": 3})).is_err());
        assert!(Batch::from_row_json(&TABLES, "nope", &json!({})).is_err());
    }

    /// An empty directory of the test's own, and the refused-rows file in it.
    fn scratch(name: &str) -> (PathBuf, PathBuf) {
        let dir = std::env::temp_dir().join(format!("hp-refused-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file = path(&dir);
        (dir, file)
    }

    #[test]
    fn the_file_keeps_the_rows_and_the_reason_readable() {
        let (dir, file) = scratch("file");
        let b = mixed();
        assert!(append(
            &file,
            "postgres://x",
            &b,
            &[(1, "NUL \u{0} here".into())],
            1 << 20
        )
        .unwrap());
        std::fs::OpenOptions::new()
            .append(true)
            .open(&file)
            .unwrap()
            .write_all(b"garbage\n")
            .unwrap();
        let (entries, bad) = read(&file).unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].error, "NUL \u{0} here");
        assert_eq!(entries[0].journal, json!([[0, 12]]));
        assert_eq!(bad.len(), 1);
        let back = Batch::from_row_json(&TABLES, &entries[0].table, &entries[0].row).unwrap();
        assert_eq!(back, b.select(1..2));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The file stops at its bound: what would pass it is not written (the caller drops
    /// and counts it), what fits still is.
    #[test]
    fn the_file_stops_at_its_bound() {
        let (dir, file) = scratch("bound");
        let b = mixed();
        let row = [(1, "refused".to_string())];
        assert!(append(&file, "db", &b, &row, 1 << 20).unwrap());
        let one = std::fs::metadata(&file).unwrap().len();
        assert!(append(&file, "db", &b, &row, 2 * one + 10).unwrap());
        assert!(!append(&file, "db", &b, &row, 2 * one + 10).unwrap());
        assert_eq!(std::fs::metadata(&file).unwrap().len(), 2 * one);
        assert!(!append(&file, "db", &b, &row, 0).unwrap());
        assert_eq!(read(&file).unwrap().0.len(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
