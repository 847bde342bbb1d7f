//! Tables of every shape the store writes, for its own unit tests: the store names no service,
//! so its tests declare their own.

use crate::table::{col, Merge, Table, Type};

/// Keyed by a blob: a count added to, snapshots replaced, the first time kept, the last the
/// greater.
pub static STATS: Table = Table {
    name: "t_stats",
    columns: &[
        col("k", Type::Blob, Merge::Key),
        col("total", Type::Int, Merge::Add),
        col("a", Type::Int, Merge::Replace),
        col("b", Type::Int, Merge::Replace),
        col("first_seen", Type::Int, Merge::Keep),
        col("last_seen", Type::Int, Merge::Max),
    ],
    update_only: false,
    keeps_older: None,
};

/// A log: no key, every row appended.
pub static LOG: Table = Table {
    name: "t_log",
    columns: &[
        col("at", Type::Int, Merge::Keep),
        col("who", Type::Text, Merge::Keep),
        col("what", Type::Int, Merge::Keep),
        col("how", Type::Int, Merge::Keep),
    ],
    update_only: false,
    keeps_older: None,
};

/// Keyed by three texts: a value added to, the time the greater.
pub static COUNTS: Table = Table {
    name: "t_counts",
    columns: &[
        col("tbl", Type::Text, Merge::Key),
        col("k", Type::Text, Merge::Key),
        col("col", Type::Text, Merge::Key),
        col("value", Type::Int, Merge::Add),
        col("updated_at", Type::Int, Merge::Max),
    ],
    update_only: false,
    keeps_older: None,
};
