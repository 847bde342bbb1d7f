//! The store's errors, by layer ([`StoreError`]), and what a service may not store
//! ([`Unstorable`]).
//!
//! Owns: [`StoreError`], [`Fault`], [`Unstorable`]. Must not: do I/O.

use std::path::Path;

/// Store errors, by layer; [`StoreError::retryable`] says whether trying again may help.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// `store.url` cannot be used.
    #[error("store.url {url:?}: {why}")]
    Url {
        /// The URL, password hidden.
        url: String,
        /// What is wrong.
        why: String,
    },
    /// The database refused or failed.
    #[error("{backend}: {what}")]
    Db {
        /// Which backend.
        backend: &'static str,
        /// What happened: the database's own message and code.
        what: String,
        /// What the error means for the write that met it.
        fault: Fault,
    },
    /// The journal could not be read or written.
    #[error("journal {path}: {source}")]
    Journal {
        /// The file or directory.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The database schema does not fit this build.
    #[error("schema: {0}")]
    Schema(String),
    /// The store started without its database and has not reached it yet: reads wait until
    /// it has, and the journal's records it lacks are replayed (see [`Store::open`]).
    #[error("{name} not reached since start (the journal keeps every change meanwhile): {why}")]
    Offline {
        /// The database, for the message.
        name: String,
        /// The last attempt's error.
        why: String,
    },
}

impl StoreError {
    /// Whether trying again may help (a lost connection, a timeout, a deadlock).
    pub fn retryable(&self) -> bool {
        match self {
            StoreError::Db { fault, .. } => *fault == Fault::Transient,
            StoreError::Journal { .. } | StoreError::Offline { .. } => true,
            StoreError::Url { .. } | StoreError::Schema(_) => false,
        }
    }

    /// What a database error means for the write that met it; `None` for other errors.
    pub fn fault(&self) -> Option<Fault> {
        match self {
            StoreError::Db { fault, .. } => Some(*fault),
            _ => None,
        }
    }
}

/// What a database error means for the write that met it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// A lost connection, a timeout, a deadlock, a full disk: the same write may pass later.
    Transient,
    /// The database refused a value of the write (a NUL byte in text, a string too long for
    /// its column, a constraint): no retry can pass, but the other rows can. The flusher
    /// finds the rows and sets them aside (see [`dead_letter`]).
    Refused,
    /// The schema, the SQL, the credentials: a person must act. The flusher keeps the batch
    /// and retries with backoff, never dropping it.
    Setup,
}

pub(crate) fn journal_error(path: &Path, source: std::io::Error) -> StoreError {
    StoreError::Journal {
        path: path.display().to_string(),
        source,
    }
}

/// Why a string cannot be kept as text by every database the store writes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unstorable {
    /// Longer than the column.
    TooLong,
    /// A NUL byte: PostgreSQL refuses it in `TEXT`, and the whole batch with it would fail.
    Nul,
}

impl Unstorable {
    /// The reason, for a message that names the field first.
    pub fn message(self) -> &'static str {
        match self {
            Unstorable::TooLong => "too long",
            Unstorable::Nul => "contains a NUL byte, which a database cannot keep as text",
        }
    }
}

/// Why `text` cannot be kept as text by every database the store writes to, if it cannot
/// (more than `max_bytes` bytes, or a NUL byte). Callers check what a client sends against it
/// on the way in, so no change the database would refuse is journaled; what slips through
/// anyway is set aside by the flusher ([`refused`]).
pub fn unstorable(text: &str, max_bytes: usize) -> Option<Unstorable> {
    if text.len() > max_bytes {
        Some(Unstorable::TooLong)
    } else if text.as_bytes().contains(&0) {
        Some(Unstorable::Nul)
    } else {
        None
    }
}
