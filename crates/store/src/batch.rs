//! A batch: what one flush writes in one transaction, the rows of every table and the journal
//! positions they cover.
//!
//! Owns: [`Batch`], its merge (a failed batch under what was queued since) and [`JOURNAL`].
//! Must not: do I/O, name a service.

use crate::table::{col, Merge, Rows, Table, Type, Value};

/// `hp_journal`: per journal, the last record the database holds.
pub static JOURNAL: Table = Table {
    name: "hp_journal",
    columns: &[
        col("worker", Type::Int, Merge::Key),
        col("seq", Type::Int, Merge::Max),
    ],
    update_only: false,
    keeps_older: None,
};

/// Rows of several tables, sorted by key within each, and the journal positions they cover.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Batch {
    /// Rows per table, at most one part per table, none empty.
    pub parts: Vec<Rows>,
    /// `(journal, last sequence)` for every journal with records in this batch, sorted.
    pub seqs: Vec<(u32, u64)>,
    /// Changes merged into this batch.
    pub changes: u64,
}

impl Batch {
    /// Rows to write.
    pub fn rows(&self) -> usize {
        self.parts.iter().map(Rows::len).sum()
    }

    /// Why a database may not be handed this batch: the first row that holds a value no
    /// backend can keep (see [`Rows::refusal`]).
    pub fn refusal(&self) -> Option<String> {
        self.parts.iter().find_map(Rows::refusal)
    }

    /// Whether there is nothing to write (no rows and no journal position to confirm).
    pub fn is_empty(&self) -> bool {
        self.rows() == 0 && self.seqs.is_empty()
    }

    /// The rows of `table`, if any.
    pub fn part(&self, table: &Table) -> Option<&Rows> {
        self.parts.iter().find(|p| p.table.name == table.name)
    }

    /// Each row of `table` (none when the batch has none).
    pub fn rows_of<'a>(&'a self, table: &Table) -> impl Iterator<Item = &'a [Value]> + 'a {
        self.part(table).into_iter().flat_map(|r| r.iter())
    }

    /// Adds rows (none: nothing is added).
    pub fn push(&mut self, rows: Rows) {
        if rows.is_empty() {
            return;
        }
        match self
            .parts
            .iter_mut()
            .find(|p| p.table.name == rows.table.name)
        {
            Some(p) => p.merge(rows),
            None => self.parts.push(rows),
        }
    }

    /// The rows of `parts`, in order (each later row newer), merged per table in one pass
    /// each: a long list of one-row parts (a refused-rows file replayed) costs no more than
    /// one batch of as many rows.
    pub fn concat(parts: Vec<Rows>) -> Batch {
        let mut b = Batch::default();
        for rows in parts {
            match b.parts.iter_mut().find(|p| p.table.name == rows.table.name) {
                Some(p) => p.append(rows),
                None => b.parts.push(rows),
            }
        }
        for p in &mut b.parts {
            p.fold();
        }
        b.parts.retain(|p| !p.is_empty());
        b
    }

    /// Records that journal `journal` is covered up to record `seq`.
    pub fn covered(&mut self, journal: u32, seq: u64) {
        match self.seqs.binary_search_by_key(&journal, |s| s.0) {
            Ok(i) => self.seqs[i].1 = self.seqs[i].1.max(seq),
            Err(i) => self.seqs.insert(i, (journal, seq)),
        }
    }

    /// Folds a newer batch into this one: rows merge per table by their columns' rules,
    /// journal positions take the later.
    pub fn merge(&mut self, newer: Batch) {
        for rows in newer.parts {
            self.push(rows);
        }
        for (j, s) in newer.seqs {
            self.covered(j, s);
        }
        self.changes += newer.changes;
    }

    /// The journal positions as rows of [`JOURNAL`].
    pub fn journal_rows(&self) -> Rows {
        let mut rows = Rows::with_capacity(&JOURNAL, self.seqs.len());
        for &(j, s) in &self.seqs {
            rows.push([
                Value::Int(i64::from(j)),
                Value::Int(i64::try_from(s).unwrap_or(i64::MAX)),
            ]);
        }
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_merge_their_parts_and_positions() {
        let mut a = Batch::default();
        let mut r = Rows::new(&JOURNAL);
        r.push([Value::Int(1), Value::Int(5)]);
        a.push(r.clone());
        a.push(Rows::new(&JOURNAL));
        a.covered(3, 9);
        a.covered(1, 2);
        a.changes = 2;
        let mut b = Batch::default();
        let mut r2 = Rows::new(&JOURNAL);
        r2.push([Value::Int(1), Value::Int(4)]);
        r2.push([Value::Int(0), Value::Int(4)]);
        b.push(r2);
        b.covered(3, 7);
        b.changes = 1;
        a.merge(b);
        assert_eq!(a.parts.len(), 1);
        assert_eq!(a.rows(), 2);
        assert_eq!(a.part(&JOURNAL).unwrap().row(1)[1], Value::Int(5), "max");
        assert_eq!(a.seqs, vec![(1, 2), (3, 9)]);
        assert_eq!(a.changes, 3);
        assert_eq!(a.journal_rows().len(), 2);
    }

    #[test]
    fn one_row_parts_concat_into_one_merged_part_in_order() {
        let parts: Vec<Rows> = (0..10_000i64)
            .map(|i| {
                let mut r = Rows::new(&JOURNAL);
                r.push([Value::Int(i % 3), Value::Int(i)]);
                r
            })
            .collect();
        let b = Batch::concat(parts);
        assert_eq!(b.parts.len(), 1);
        let rows: Vec<_> = b.parts[0]
            .iter()
            .map(|r| (r[0].int(), r[1].int()))
            .collect();
        assert_eq!(rows, vec![(0, 9_999), (1, 9_997), (2, 9_998)]);
        assert!(Batch::concat(vec![Rows::new(&JOURNAL)]).parts.is_empty());
    }
}
