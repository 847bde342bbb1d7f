//! A user id as the service keeps it in its tables: inside the entry when short (most ids
//! are), so finding or comparing a user reads the entry only, not a second allocation somewhere
//! else in memory, and keeping one allocates nothing.
//!
//! Owns: [`UserId`]. Must not: check what an id may hold (the API does, before).

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};

/// Bytes of a user id kept inline.
pub const INLINE: usize = 22;

/// A user id: at most [`INLINE`] bytes inline, longer ones on the heap. Made only from a
/// `&str` ([`UserId::new`]), so its bytes are always UTF-8 and its length in range.
#[derive(Clone)]
pub struct UserId(Repr);

#[derive(Clone)]
enum Repr {
    /// Length and bytes.
    Inline(u8, [u8; INLINE]),
    /// A longer id.
    Heap(Box<str>),
}

impl UserId {
    /// The id `user`.
    pub fn new(user: &str) -> UserId {
        match u8::try_from(user.len()) {
            Ok(n) if user.len() <= INLINE => {
                let mut bytes = [0; INLINE];
                bytes[..user.len()].copy_from_slice(user.as_bytes());
                UserId(Repr::Inline(n, bytes))
            }
            _ => UserId(Repr::Heap(user.into())),
        }
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            // Made from a `&str` of this length (`new`), so these bytes are UTF-8; the check
            // is a short loop over at most 22 bytes.
            Repr::Inline(..) => std::str::from_utf8(self.as_bytes()).unwrap_or_default(),
            Repr::Heap(s) => s,
        }
    }

    /// The id's bytes (compared without the UTF-8 check of [`UserId::as_str`]).
    pub fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline(n, bytes) => &bytes[..usize::from(*n)],
            Repr::Heap(s) => s.as_bytes(),
        }
    }

    /// Heap bytes it holds besides itself.
    pub fn heap(&self) -> usize {
        match &self.0 {
            Repr::Inline(..) => 0,
            Repr::Heap(s) => s.len().next_multiple_of(8),
        }
    }
}

impl From<&str> for UserId {
    fn from(user: &str) -> UserId {
        UserId::new(user)
    }
}

impl AsRef<str> for UserId {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

/// Hashes and compares as its `str` (so a map keyed by it is searched with a `&str`).
impl Borrow<str> for UserId {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl Hash for UserId {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl PartialEq for UserId {
    fn eq(&self, other: &UserId) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for UserId {}

impl PartialOrd for UserId {
    fn partial_cmp(&self, other: &UserId) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for UserId {
    fn cmp(&self, other: &UserId) -> std::cmp::Ordering {
        // Byte order is `str`'s order.
        self.as_bytes().cmp(other.as_bytes())
    }
}

impl fmt::Debug for UserId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn short_ids_are_inline_long_ones_on_the_heap_and_both_act_as_their_str() {
        let h = std::collections::hash_map::RandomState::new();
        for user in [
            "",
            "u",
            "é-user",
            &"x".repeat(INLINE),
            &"y".repeat(INLINE + 1),
        ] {
            let id = UserId::new(user);
            assert_eq!(id.as_str(), user);
            assert_eq!(matches!(id.0, Repr::Inline(..)), user.len() <= INLINE);
            assert_eq!(id.heap() > 0, user.len() > INLINE);
            assert_eq!(h.hash_one(&id), h.hash_one(user), "hashes as its str");
            assert_eq!(id, UserId::new(user));
            assert_eq!(format!("{id:?}"), format!("{user:?}"));
        }
        assert!(UserId::new("a") < UserId::new("b"));
        assert!(UserId::new(&"z".repeat(30)) > UserId::new("a"));
        // A multi-byte character ending exactly at the inline limit.
        let edge = format!("{}é", "a".repeat(INLINE - 2));
        assert_eq!(UserId::new(&edge).as_str(), edge);
    }
}
