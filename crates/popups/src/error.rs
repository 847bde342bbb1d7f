//! The popup service's errors: what stops it from starting, or a catalog poll from taking.
//! A client's bad request is not one of these: its message (naming the field) is the body of
//! a 4xx answer, and the codecs ([`crate::model`], [`crate::api`]) return it as text.

use std::path::PathBuf;

use hotpath_store::StoreError;

/// Why the popup service could not start, or a poll of the catalog left it as it was.
#[derive(Debug, thiserror::Error)]
pub enum PopupsError {
    /// The token secret file is too short to sign with.
    #[error("{}: shorter than 16 bytes", path.display())]
    SecretTooShort {
        /// `data_dir/popups.secret`.
        path: PathBuf,
    },
    /// The token secret file could not be read or written.
    #[error("{}: {source}", path.display())]
    Secret {
        /// `data_dir/popups.secret`.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// No random bytes for a new secret.
    #[error("random secret: {0}")]
    Random(getrandom::Error),
    /// The catalog or today's shows could not be read.
    #[error("{what}: {source}")]
    Store {
        /// What was being read.
        what: &'static str,
        /// The store's error.
        #[source]
        source: StoreError,
    },
}

impl PopupsError {
    pub(crate) fn store(what: &'static str) -> impl FnOnce(StoreError) -> PopupsError {
        move |source| PopupsError::Store { what, source }
    }
}
