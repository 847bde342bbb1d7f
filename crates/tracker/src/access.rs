//! The access list: which info hashes the tracker serves, from a file of hex hashes and/or the
//! database (its rows handed over by the tracker's reloader), swapped in whole on reload.
//! Workers keep their own `Arc` of the current list and check a generation counter per
//! request, so a request never takes a shared lock for it.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use hotpath_config::AccessListMode;
use hotpath_wire::query::Id20;

use crate::{BadLine, TrackerError};

/// The most bytes an access list file may have: 4 million lines of a 40-digit hash (a file
/// past it, or a path that names no regular file, is refused and the old list stays).
pub const MAX_ACCESS_LIST_BYTES: u64 = 4_000_000 * 41;

/// The shared, reloadable list.
#[derive(Debug)]
pub struct AccessList {
    mode: AccessListMode,
    path: String,
    generation: AtomicU64,
    /// The two sources, kept apart so that reloading one keeps the other.
    sources: Mutex<Sources>,
    current: Mutex<Arc<HashSet<Id20>>>,
}

#[derive(Debug, Default)]
struct Sources {
    file: HashSet<Id20>,
    database: HashSet<Id20>,
}

/// A worker's view of the list, refreshed when the generation moves.
#[derive(Debug)]
pub struct AccessView {
    generation: u64,
    hashes: Arc<HashSet<Id20>>,
}

/// Parses a list: one 40-character hex hash per line; blank lines and `#` comments allowed.
pub fn parse_list(text: &str) -> Result<HashSet<Id20>, BadLine> {
    let mut set = HashSet::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let bytes = line.as_bytes();
        let parsed = (bytes.len() == 40)
            .then(|| {
                let mut id = [0u8; 20];
                for (i, pair) in bytes.chunks(2).enumerate() {
                    let hex = std::str::from_utf8(pair).ok()?;
                    id[i] = u8::from_str_radix(hex, 16).ok()?;
                }
                Some(id)
            })
            .flatten();
        match parsed {
            Some(id) => {
                set.insert(id);
            }
            None => {
                let mut got = line.to_string();
                if got.len() > 80 {
                    let mut cut = 80;
                    while !got.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    got.truncate(cut);
                }
                return Err(BadLine { line: n + 1, got });
            }
        }
    }
    Ok(set)
}

impl AccessList {
    /// Loads the list named by the config (nothing when the mode is off).
    pub fn load(mode: AccessListMode, path: &str) -> Result<AccessList, TrackerError> {
        let list = AccessList {
            mode,
            path: path.to_string(),
            generation: AtomicU64::new(0),
            sources: Mutex::new(Sources::default()),
            current: Mutex::new(Arc::new(HashSet::new())),
        };
        if mode != AccessListMode::Off {
            list.reload()?;
        }
        Ok(list)
    }

    /// Whether and how the list applies (`access_list.mode`).
    pub fn mode(&self) -> AccessListMode {
        self.mode
    }

    /// Re-reads the file (if one is configured); on error the old list stays in force.
    /// Returns the size of the whole list.
    pub fn reload(&self) -> Result<usize, TrackerError> {
        if self.mode == AccessListMode::Off || self.path.is_empty() {
            return Ok(self.len());
        }
        let path = || self.path.clone();
        let text = hotpath_config::file::read_bounded_text(
            std::path::Path::new(&self.path),
            MAX_ACCESS_LIST_BYTES,
        )
        .map_err(|source| TrackerError::AccessRead {
            path: path(),
            source,
        })?;
        let set =
            parse_list(&text).map_err(|bad| TrackerError::AccessLine { path: path(), bad })?;
        Ok(self.swap(|s| s.file = set))
    }

    /// Replaces the hashes that come from the database; returns the size of the whole list.
    /// Nothing changes (and workers keep their view) when the rows are the same.
    pub fn set_database(&self, hashes: impl IntoIterator<Item = Id20>) -> usize {
        let set: HashSet<Id20> = hashes.into_iter().collect();
        if self.sources.lock().database == set {
            return self.len();
        }
        self.swap(|s| s.database = set)
    }

    fn swap(&self, change: impl FnOnce(&mut Sources)) -> usize {
        let mut sources = self.sources.lock();
        change(&mut sources);
        let union: HashSet<Id20> = sources.file.union(&sources.database).copied().collect();
        let n = union.len();
        *self.current.lock() = Arc::new(union);
        self.generation.fetch_add(1, Ordering::Release);
        n
    }

    /// A view for one worker.
    pub fn view(&self) -> AccessView {
        AccessView {
            generation: self.generation.load(Ordering::Acquire),
            hashes: self.current.lock().clone(),
        }
    }

    /// Why `info_hash` is refused, or `None` when it is served.
    pub fn check(&self, view: &mut AccessView, info_hash: &Id20) -> Option<&'static str> {
        if self.mode == AccessListMode::Off {
            return None;
        }
        let generation = self.generation.load(Ordering::Acquire);
        if generation != view.generation {
            *view = self.view();
        }
        let listed = view.hashes.contains(info_hash);
        match (self.mode, listed) {
            (AccessListMode::Allow, false) => Some("info_hash is not on this tracker's allow list"),
            (AccessListMode::Deny, true) => Some("info_hash is on this tracker's deny list"),
            _ => None,
        }
    }

    /// Hashes in the current list.
    pub fn len(&self) -> usize {
        self.current.lock().len()
    }

    /// Whether the current list is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_is_the_file_and_the_database_together() {
        let dir = std::env::temp_dir().join(format!("hotpath-access-{}", std::process::id()));
        std::fs::write(&dir, format!("{}\n", "aa".repeat(20))).unwrap();
        let list = AccessList::load(AccessListMode::Allow, dir.to_str().unwrap()).unwrap();
        let mut view = list.view();
        assert!(list.check(&mut view, &[0xaa; 20]).is_none());
        assert!(list.check(&mut view, &[0xbb; 20]).is_some());
        assert_eq!(list.set_database([[0xbb; 20], [0xcc; 20]]), 3);
        assert!(list.check(&mut view, &[0xbb; 20]).is_none());
        // Re-reading the file keeps the database's rows, and the other way round.
        std::fs::write(&dir, format!("{}\n", "dd".repeat(20))).unwrap();
        assert_eq!(list.reload().unwrap(), 3);
        assert!(list.check(&mut view, &[0xaa; 20]).is_some());
        assert_eq!(list.set_database([]), 1);
        assert!(list.check(&mut view, &[0xbb; 20]).is_some());
        assert!(list.check(&mut view, &[0xdd; 20]).is_none());
        std::fs::remove_file(dir).unwrap();
    }

    #[test]
    fn parses_and_names_bad_lines() {
        let good = "# comment\n\n0123456789abcdef0123456789ABCDEF01234567  # trailing\n";
        assert_eq!(parse_list(good).unwrap().len(), 1);
        let err = parse_list("0123\n").unwrap_err();
        assert_eq!((err.line, err.got.as_str()), (1, "0123"));
        let err = parse_list(&format!("{}\nzz{}\n", "a".repeat(40), "0".repeat(38))).unwrap_err();
        assert_eq!(err.line, 2);
        assert!(err.to_string().starts_with("line 2: expected"), "{err}");
        let long = "é".repeat(100);
        assert!(parse_list(&long).unwrap_err().got.len() <= 80);
    }
}
