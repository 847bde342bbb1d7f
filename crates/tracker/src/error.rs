//! The tracker's errors: what can stop it from starting or from reloading its access list.
//! Answers to clients never carry these (they get a BitTorrent `failure reason`).

use hotpath_store::StoreError;

/// Why the tracker could not start, or a reload left the old access list in force.
#[derive(Debug, thiserror::Error)]
pub enum TrackerError {
    /// The access list file could not be read.
    #[error("access list {path}: {source}")]
    AccessRead {
        /// The file (`access_list.path`).
        path: String,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// A line of the access list file is not an info hash.
    #[error("access list {path}: {bad}")]
    AccessLine {
        /// The file (`access_list.path`).
        path: String,
        /// The line and what it held.
        #[source]
        bad: BadLine,
    },
    /// `access_list.database` is on but the store is off.
    #[error("access_list.database needs the store (store.enabled = true)")]
    AccessNeedsStore,
    /// The completed counts could not be read back from the database.
    #[error("completed counts from {db}: {source}")]
    Restore {
        /// The database, for the log (no password).
        db: String,
        /// The store's error.
        #[source]
        source: StoreError,
    },
    /// Private mode without the store.
    #[error("tracker.mode = \"private\" needs the store (store.enabled = true)")]
    PrivateNeedsStore,
    /// A private tracker's users and torrents could not be read.
    /// (The store's error is in the message, not a source, so a chain prints it once.)
    #[error(
        "private: users and torrents from {db}: {cause} (check private.schema and private.names)"
    )]
    PrivateDb {
        /// The database, for the log (no password).
        db: String,
        /// The store's error.
        cause: StoreError,
    },
    /// The push log could not be read, or rewritten.
    #[error("private: push log {}: {source}", path.display())]
    PushLog {
        /// The file.
        path: std::path::PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// The access list's rows could not be read from the database.
    #[error("access list from {db}: {source}")]
    AccessDb {
        /// The database, for the log (no password).
        db: String,
        /// The store's error.
        #[source]
        source: StoreError,
    },
}

/// A line of an access list that is not a 40-character hex info hash.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: expected a 40-character hex info hash, got {got:?}")]
pub struct BadLine {
    /// The line number, from 1.
    pub line: usize,
    /// What the line held (without its comment), cut to 80 bytes.
    pub got: String,
}
