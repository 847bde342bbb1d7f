//! The access list: which info hashes the tracker serves, read from a file of hex hashes and
//! swapped in whole on reload. Workers keep their own `Arc` of the current list and check a
//! generation counter per request, so a request never takes a shared lock for it.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use hotpath_config::AccessListMode;
use hotpath_wire::query::Id20;

/// The shared, reloadable list.
#[derive(Debug)]
pub struct AccessList {
    mode: AccessListMode,
    path: String,
    generation: AtomicU64,
    current: Mutex<Arc<HashSet<Id20>>>,
}

/// A worker's view of the list, refreshed when the generation moves.
#[derive(Debug)]
pub struct AccessView {
    generation: u64,
    hashes: Arc<HashSet<Id20>>,
}

/// Parses a list: one 40-character hex hash per line; blank lines and `#` comments allowed.
pub fn parse_list(text: &str) -> Result<HashSet<Id20>, String> {
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
                return Err(format!(
                    "line {}: expected a 40-character hex info hash, got {line:?}",
                    n + 1
                ))
            }
        }
    }
    Ok(set)
}

impl AccessList {
    /// Loads the list named by the config (nothing when the mode is off).
    pub fn load(mode: AccessListMode, path: &str) -> Result<AccessList, String> {
        let list = AccessList {
            mode,
            path: path.to_string(),
            generation: AtomicU64::new(0),
            current: Mutex::new(Arc::new(HashSet::new())),
        };
        if mode != AccessListMode::Off {
            list.reload()?;
        }
        Ok(list)
    }

    /// Re-reads the file; on error the old list stays in force.
    pub fn reload(&self) -> Result<usize, String> {
        if self.mode == AccessListMode::Off {
            return Ok(0);
        }
        let text = std::fs::read_to_string(&self.path)
            .map_err(|e| format!("access list {}: {e}", self.path))?;
        let set = parse_list(&text).map_err(|e| format!("access list {}: {e}", self.path))?;
        let n = set.len();
        *self.current.lock() = Arc::new(set);
        self.generation.fetch_add(1, Ordering::Release);
        Ok(n)
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
    fn parses_and_names_bad_lines() {
        let good = "# comment\n\n0123456789abcdef0123456789ABCDEF01234567  # trailing\n";
        assert_eq!(parse_list(good).unwrap().len(), 1);
        let err = parse_list("0123\n").unwrap_err();
        assert!(err.starts_with("line 1:"), "{err}");
        let err = parse_list(&format!("{}\nzz{}\n", "a".repeat(40), "0".repeat(38))).unwrap_err();
        assert!(err.starts_with("line 2:"), "{err}");
    }
}
