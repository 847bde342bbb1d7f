//! Show tokens already answered: one show yields at most one click and one close.
//!
//! A token is valid for `popups.token_ttl_secs` after its show, so an answer must be
//! remembered that long, and no longer. Two generations of a set do it: answers go into the
//! current one; every `ttl` seconds the current becomes the previous and the previous is
//! dropped, so an answer is kept between one and two lifetimes (a token answered at `now` has
//! its show at most `ttl` before, and expires at most `ttl` after). Both together hold at most
//! `popups.max_spent_tokens` answers; beyond it events are refused with a 503 until a
//! generation passes (reported in `/metrics`), never accepted unchecked.
//!
//! An answer is the show (user, popup, show second) and the action, hashed with a key drawn
//! at start: 8 bytes each, and a client cannot aim two answers at one entry.

use std::hash::{BuildHasher as _, Hasher as _};

use hashbrown::HashSet;
use parking_lot::Mutex;

/// What [`Spent::spend`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spend {
    /// Not answered before: now it is.
    Fresh,
    /// This show already had this answer.
    Replay,
    /// The set is full: refuse for now.
    Full,
}

/// The answered shows.
pub struct Spent {
    gens: Mutex<Gens>,
    keys: std::hash::RandomState,
    ttl: u64,
    cap: usize,
}

struct Gens {
    current: HashSet<u64>,
    previous: HashSet<u64>,
    /// Unix second the current generation began.
    since: u64,
}

impl Spent {
    /// Remembers answers for `ttl` seconds (to two), at most `cap` at once.
    pub fn new(ttl: u64, cap: usize) -> Spent {
        Spent {
            gens: Mutex::new(Gens {
                current: HashSet::new(),
                previous: HashSet::new(),
                since: 0,
            }),
            keys: std::hash::RandomState::new(),
            ttl: ttl.max(1),
            cap,
        }
    }

    fn key(&self, user: &str, popup: u32, shown_at: u64, action: u8) -> u64 {
        let mut h = self.keys.build_hasher();
        h.write(user.as_bytes());
        h.write_u8(0xff);
        h.write_u32(popup);
        h.write_u64(shown_at);
        h.write_u8(action);
        h.finish()
    }

    /// Records answer `action` to the show of `popup` to `user` at `shown_at`, unless it was
    /// recorded before (a replay) or there is no room.
    pub fn spend(&self, user: &str, popup: u32, shown_at: u64, action: u8, now: u64) -> Spend {
        let key = self.key(user, popup, shown_at, action);
        let mut g = self.gens.lock();
        if now >= g.since.saturating_add(self.ttl) {
            // A whole lifetime since the last turn: what the previous held has expired.
            let expired_too = now >= g.since.saturating_add(2 * self.ttl);
            g.previous = std::mem::take(&mut g.current);
            if expired_too {
                g.previous.clear();
            }
            g.since = now;
        }
        if g.current.contains(&key) || g.previous.contains(&key) {
            return Spend::Replay;
        }
        if g.current.len() + g.previous.len() >= self.cap {
            return Spend::Full;
        }
        g.current.insert(key);
        Spend::Fresh
    }

    /// Forgets an answer recorded by [`Spent::spend`] that was then not counted (the user's
    /// state could not be loaded, so the client is told to try again).
    pub fn unspend(&self, user: &str, popup: u32, shown_at: u64, action: u8) {
        let key = self.key(user, popup, shown_at, action);
        self.gens.lock().current.remove(&key);
    }

    /// Answers remembered.
    pub fn len(&self) -> usize {
        let g = self.gens.lock();
        g.current.len() + g.previous.len()
    }

    /// Whether none is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_answer_counts_once_per_show() {
        let s = Spent::new(100, 1000);
        assert_eq!(s.spend("u", 1, 50, 2, 60), Spend::Fresh);
        assert_eq!(s.spend("u", 1, 50, 2, 61), Spend::Replay);
        assert_eq!(
            s.spend("u", 1, 50, 3, 61),
            Spend::Fresh,
            "a close after the click"
        );
        assert_eq!(s.spend("u", 1, 50, 3, 62), Spend::Replay);
        assert_eq!(s.spend("u", 1, 70, 2, 80), Spend::Fresh, "another show");
        assert_eq!(s.spend("v", 1, 50, 2, 80), Spend::Fresh, "another user");
        assert_eq!(s.spend("u", 2, 50, 2, 80), Spend::Fresh, "another popup");
        s.unspend("u", 2, 50, 2);
        assert_eq!(s.spend("u", 2, 50, 2, 81), Spend::Fresh, "given back");
    }

    #[test]
    fn answers_are_kept_a_lifetime_and_then_dropped() {
        let ttl = 100;
        let s = Spent::new(ttl, 1000);
        assert_eq!(s.spend("u", 1, 0, 2, 0), Spend::Fresh);
        // Replayed up to the token's last valid second: still refused.
        for now in [1, 99, 100, 150, 199] {
            assert_eq!(s.spend("u", 1, 0, 2, now), Spend::Replay, "at {now}");
        }
        for i in 0..10 {
            s.spend("x", i, 300, 2, 300);
        }
        for i in 0..10 {
            s.spend("y", i, 500, 2, 500);
        }
        assert_eq!(
            s.len(),
            10,
            "two lifetimes on, only the newest generation is left"
        );
    }

    #[test]
    fn a_full_set_refuses_rather_than_forgets() {
        let s = Spent::new(1000, 3);
        for i in 0..3 {
            assert_eq!(s.spend("u", i, 1, 2, 1), Spend::Fresh);
        }
        assert_eq!(s.spend("u", 9, 1, 2, 2), Spend::Full);
        assert_eq!(s.spend("u", 0, 1, 2, 2), Spend::Replay);
    }
}
