//! What the push API sets beside the site's tables: the client lists, the site-wide factors,
//! personal freeleech and freeleech tokens ([`Policy`]), and the log that keeps them across
//! restarts ([`PushLog`]: one JSON change per line, synced before a push is answered,
//! rewritten as the state it amounts to once it grows past twice that).
//!
//! Factors combine as the most generous: a download counts at the lowest of the torrent's,
//! the site's and 0 for a user with personal freeleech or a token on the torrent; an upload
//! at the highest of the torrent's and the site's, except on a neutral torrent (its own
//! upload factor 0), where nothing counts.
//!
//! Owns: [`Policy`], [`PushLog`]. Must not: touch the registries (the caller applies user
//! and torrent changes), or do I/O outside [`PushLog`].

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};

use hashbrown::HashMap;

use super::push::{decode_line, encode_line, Push};
use super::Rules;

/// The push API's state.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Client and port rules (the client lists may be pushed).
    pub rules: Rules,
    /// Site-wide percent of downloaded bytes credited.
    pub download_pct: u16,
    /// Site-wide percent of uploaded bytes credited.
    pub upload_pct: u16,
    /// Users with personal freeleech, and the unix second it ends (0: none).
    personal: HashMap<u32, u32>,
    /// Freeleech tokens by (user, torrent), and the unix second each ends (0: none).
    tokens: HashMap<(u32, u32), u32>,
    /// The intervals pushed (interval, min interval), if any.
    pub intervals: Option<(u32, u32)>,
    /// Whether the client lists were pushed (the log then keeps them).
    clients_pushed: bool,
    /// The unix second of the last pass dropping expired entries.
    purged_at: Option<u32>,
    max_tokens: usize,
    max_personal: usize,
}

/// A change the policy has no room for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoRoom(pub String);

fn live(until: u32, at: u32) -> bool {
    until == 0 || at < until
}

impl Policy {
    /// The policy of the config: its rules, factors of 100, no freeleech, at most
    /// `max_tokens` tokens and `max_personal` users with personal freeleech.
    pub fn new(rules: Rules, max_tokens: usize, max_personal: usize) -> Policy {
        Policy {
            rules,
            download_pct: 100,
            upload_pct: 100,
            personal: HashMap::new(),
            tokens: HashMap::new(),
            intervals: None,
            clients_pushed: false,
            purged_at: None,
            max_tokens,
            max_personal,
        }
    }

    /// The factors (download, upload percent) of `user`'s traffic on a torrent credited at
    /// (`download_pct`, `upload_pct`), at unix second `at`.
    pub fn factors(&self, user: u32, torrent: u32, pcts: (u16, u16), at: u32) -> (u16, u16) {
        let mut down = pcts.0.min(self.download_pct);
        // A neutral torrent (upload 0, Gazelle's FreeTorrent '2') counts nothing, whatever
        // the site-wide factors.
        let up = match pcts.1 {
            0 => 0,
            own => own.max(self.upload_pct),
        };
        if down > 0 {
            let free = self.personal.get(&user).is_some_and(|&u| live(u, at))
                || self
                    .tokens
                    .get(&(user, torrent))
                    .is_some_and(|&u| live(u, at));
            if free {
                down = 0;
            }
        }
        (down, up)
    }

    /// The end of `user`'s personal freeleech (0: none), if they have it.
    pub fn personal_until(&self, user: u32) -> Option<u32> {
        self.personal.get(&user).copied()
    }

    /// Tokens held.
    pub fn tokens(&self) -> usize {
        self.tokens.len()
    }

    /// Users with personal freeleech.
    pub fn personal(&self) -> usize {
        self.personal.len()
    }

    /// Whether `ops` (the policy's changes among them) fit, applied in order: tokens and
    /// personal freeleech within their caps. At a cap, expired entries are dropped first
    /// (a pass over them all, at most once per second).
    pub fn room_for(&mut self, ops: &[Push], at: u32) -> Result<(), NoRoom> {
        let (mut tokens, mut personal) = (0, 0);
        for op in ops {
            match op {
                Push::Token { user, torrent, .. }
                    if !self.tokens.contains_key(&(*user, *torrent)) =>
                {
                    tokens += 1
                }
                Push::PersonalFreeleech { user, .. } if !self.personal.contains_key(user) => {
                    personal += 1
                }
                _ => {}
            }
        }
        let over = |p: &Policy| {
            p.tokens.len() + tokens > p.max_tokens || p.personal.len() + personal > p.max_personal
        };
        if over(self) && self.purged_at != Some(at) {
            self.purged_at = Some(at);
            self.tokens.retain(|_, &mut u| live(u, at));
            self.personal.retain(|_, &mut u| live(u, at));
        }
        if self.tokens.len() + tokens > self.max_tokens {
            return Err(NoRoom(format!(
                "{} freeleech tokens are held (private.max_tokens)",
                self.max_tokens
            )));
        }
        if self.personal.len() + personal > self.max_personal {
            return Err(NoRoom(format!(
                "{} users have personal freeleech (private.max_personal_freeleech)",
                self.max_personal
            )));
        }
        Ok(())
    }

    /// Applies one change (the registries' changes are not the policy's and are left out).
    /// A token or personal freeleech past its cap is left out: [`Policy::room_for`] makes
    /// room first.
    pub fn apply(&mut self, op: &Push) {
        match op {
            Push::Freeleech {
                download_pct,
                upload_pct,
            } => {
                self.download_pct = *download_pct;
                self.upload_pct = *upload_pct;
            }
            Push::PersonalFreeleech { user, until } => {
                if self.personal.len() < self.max_personal || self.personal.contains_key(user) {
                    self.personal.insert(*user, *until);
                }
            }
            Push::RemovePersonalFreeleech { user } => {
                self.personal.remove(user);
            }
            Push::Token {
                user,
                torrent,
                until,
            } => {
                let key = (*user, *torrent);
                if self.tokens.len() < self.max_tokens || self.tokens.contains_key(&key) {
                    self.tokens.insert(key, *until);
                }
            }
            Push::RemoveToken { user, torrent } => {
                self.tokens.remove(&(*user, *torrent));
            }
            Push::Clients { allow, deny } => {
                let bytes = |v: &[String]| v.iter().map(|s| s.as_bytes().into()).collect();
                self.rules.peer_id_allow = bytes(allow);
                self.rules.peer_id_deny = bytes(deny);
                self.clients_pushed = true;
            }
            Push::Intervals {
                interval_secs,
                min_interval_secs,
            } => self.intervals = Some((*interval_secs, *min_interval_secs)),
            Push::User { .. }
            | Push::RemoveUser { .. }
            | Push::Torrent { .. }
            | Push::RemoveTorrent { .. } => {}
        }
    }

    /// The changes that rebuild what was pushed (expired entries left out).
    pub fn snapshot(&self, at: u32) -> Vec<Push> {
        let text = |v: &[Box<[u8]>]| {
            v.iter()
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .collect()
        };
        let mut ops = vec![Push::Freeleech {
            download_pct: self.download_pct,
            upload_pct: self.upload_pct,
        }];
        if self.clients_pushed {
            ops.push(Push::Clients {
                allow: text(&self.rules.peer_id_allow),
                deny: text(&self.rules.peer_id_deny),
            });
        }
        if let Some((interval_secs, min_interval_secs)) = self.intervals {
            ops.push(Push::Intervals {
                interval_secs,
                min_interval_secs,
            });
        }
        let personal = self.personal.iter().filter(|(_, &u)| live(u, at));
        ops.extend(personal.map(|(&user, &until)| Push::PersonalFreeleech { user, until }));
        let tokens = self.tokens.iter().filter(|(_, &u)| live(u, at));
        ops.extend(tokens.map(|(&(user, torrent), &until)| Push::Token {
            user,
            torrent,
            until,
        }));
        ops
    }
}

/// Longest line the log reads; a longer one is skipped.
const MAX_LINE: u64 = 256 * 1024;

/// The push log, `private-push.jsonl` in the store's data directory.
#[derive(Debug)]
pub struct PushLog {
    path: PathBuf,
    file: File,
    /// Records in the file.
    records: usize,
}

/// What a log held when it was opened.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Replayed {
    /// Changes taken.
    pub taken: usize,
    /// Lines left out: not a change (a torn last line after a crash, damage, a line past
    /// 256 KiB), or a change the caller had no room for.
    pub skipped: usize,
}

impl PushLog {
    /// The log's file name in the data directory.
    pub const FILE: &'static str = "private-push.jsonl";

    /// Opens (or makes) the log in `dir` and hands `take` each change it holds, in order,
    /// one at a time (a log of any size is read in bounded memory); `take` says whether it
    /// had room for it.
    pub fn open(dir: &Path, take: &mut dyn FnMut(Push) -> bool) -> io::Result<(PushLog, Replayed)> {
        let path = dir.join(Self::FILE);
        let mut replayed = Replayed::default();
        // Whether the file ends inside a line (a write torn by a crash): the next record
        // must start on a line of its own.
        let mut torn = false;
        if let Ok(f) = File::open(&path) {
            let mut r = BufReader::new(f);
            let mut line = Vec::new();
            loop {
                line.clear();
                let n = (&mut r).take(MAX_LINE).read_until(b'\n', &mut line)?;
                if n == 0 {
                    break;
                }
                torn = line.last() != Some(&b'\n');
                if torn && n as u64 == MAX_LINE {
                    // Too long: skip to the end of the line.
                    loop {
                        line.clear();
                        let m = (&mut r).take(MAX_LINE).read_until(b'\n', &mut line)?;
                        torn = line.last() != Some(&b'\n');
                        if m == 0 || !torn {
                            break;
                        }
                    }
                    replayed.skipped += 1;
                    continue;
                }
                if decode_line(&line).is_some_and(&mut *take) {
                    replayed.taken += 1;
                } else {
                    replayed.skipped += 1;
                }
            }
        }
        let mut file = OpenOptions::new().create(true).append(true).open(&path)?;
        if torn {
            file.write_all(b"\n")?;
        }
        let records = replayed.taken;
        Ok((
            PushLog {
                path,
                file,
                records,
            },
            replayed,
        ))
    }

    /// Appends `ops` (the policy's changes among them) and syncs them to disk.
    pub fn append(&mut self, ops: &[Push]) -> io::Result<()> {
        let mut buf = Vec::new();
        let mut n = 0;
        for op in ops.iter().filter(|op| !op.is_registry()) {
            encode_line(op, &mut buf);
            n += 1;
        }
        if n == 0 {
            return Ok(());
        }
        self.file.write_all(&buf)?;
        self.file.sync_data()?;
        self.records += n;
        Ok(())
    }

    /// Whether the log holds over twice the records of a state of `live` changes.
    pub fn wants_compaction(&self, live: usize) -> bool {
        self.records > 2 * live + 64
    }

    /// Rewrites the log as `state` (written beside it, synced, then renamed over it).
    pub fn compact(&mut self, state: &[Push]) -> io::Result<()> {
        let tmp = self.path.with_extension("jsonl.tmp");
        let mut buf = Vec::new();
        for op in state {
            encode_line(op, &mut buf);
        }
        let mut f = File::create(&tmp)?;
        f.write_all(&buf)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &self.path)?;
        if let Some(dir) = self.path.parent() {
            File::open(dir)?.sync_all()?;
        }
        self.file = OpenOptions::new().append(true).open(&self.path)?;
        self.records = state.len();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Policy {
        Policy::new(Rules::default(), 2, 1)
    }

    #[test]
    fn the_most_generous_factor_wins() {
        let mut p = policy();
        assert_eq!(p.factors(1, 2, (100, 100), 10), (100, 100));
        assert_eq!(p.factors(1, 2, (50, 200), 10), (50, 200));
        p.apply(&Push::Freeleech {
            download_pct: 0,
            upload_pct: 150,
        });
        assert_eq!(p.factors(1, 2, (50, 200), 10), (0, 200));
        assert_eq!(p.factors(1, 2, (100, 100), 10), (0, 150));
        assert_eq!(p.factors(1, 2, (0, 0), 10), (0, 0), "neutral stays neutral");
        p.apply(&Push::Freeleech {
            download_pct: 100,
            upload_pct: 100,
        });
        p.apply(&Push::Token {
            user: 1,
            torrent: 2,
            until: 20,
        });
        assert_eq!(p.factors(1, 2, (100, 100), 19), (0, 100), "token on 2");
        assert_eq!(p.factors(1, 3, (100, 100), 19), (100, 100), "not on 3");
        assert_eq!(p.factors(2, 2, (100, 100), 19), (100, 100), "not user 2's");
        assert_eq!(p.factors(1, 2, (100, 100), 20), (100, 100), "expired");
        p.apply(&Push::PersonalFreeleech { user: 4, until: 0 });
        assert_eq!(p.factors(4, 9, (50, 100), u32::MAX), (0, 100));
        p.apply(&Push::RemovePersonalFreeleech { user: 4 });
        assert_eq!(p.factors(4, 9, (50, 100), 11), (50, 100));
    }

    #[test]
    fn caps_hold_and_expired_entries_make_room() {
        let mut p = policy();
        let token = |user, until| Push::Token {
            user,
            torrent: 1,
            until,
        };
        let ops = [token(1, 0), token(2, 15)];
        assert_eq!(p.room_for(&ops, 10), Ok(()));
        for op in &ops {
            p.apply(op);
        }
        assert!(p.room_for(&[token(3, 0)], 10).is_err(), "two held");
        assert!(
            p.room_for(&[token(1, 5)], 10).is_ok(),
            "a change of one held"
        );
        assert!(p.room_for(&[token(3, 0)], 15).is_ok(), "one has expired");
        p.apply(&token(3, 0));
        assert_eq!(p.tokens(), 2, "the expired one made room");
        let personal = |user| Push::PersonalFreeleech { user, until: 0 };
        p.apply(&personal(1));
        assert!(p.room_for(&[personal(2)], 1).is_err());
        assert!(p
            .room_for(&[Push::RemovePersonalFreeleech { user: 1 }], 1)
            .is_ok());
    }

    #[test]
    fn the_log_replays_what_was_pushed_and_compacts() {
        let dir = std::env::temp_dir().join(format!("hp-pushlog-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (mut log, replayed) = PushLog::open(&dir, &mut |_| true).unwrap();
        assert_eq!(replayed, Replayed::default());
        let mut p = Policy::new(Rules::default(), 100, 100);
        let ops: Vec<Push> = (1..=40)
            .map(|user| Push::Token {
                user,
                torrent: 7,
                until: 0,
            })
            .chain((1..=40).map(|user| Push::RemoveToken { user, torrent: 7 }))
            .chain([
                Push::User {
                    id: 1,
                    passkey: "abc".into(),
                    can_leech: true,
                },
                Push::Token {
                    user: 9,
                    torrent: 9,
                    until: 0,
                },
            ])
            .collect();
        log.append(&ops).unwrap();
        for op in &ops {
            p.apply(op);
        }
        assert_eq!(log.records, 81, "the user is not logged");
        // A torn line, as a crash mid-write leaves, and a line of damage.
        let path = dir.join(PushLog::FILE);
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"garbage\n{\"op\":\"tok").unwrap();
        drop((f, log));
        let (mut log, replayed) = PushLog::open(&dir, &mut |_| true).unwrap();
        assert_eq!((replayed.taken, replayed.skipped), (81, 2));
        // What comes after the torn line is a line of its own.
        log.append(&[Push::RemoveToken {
            user: 9,
            torrent: 8,
        }])
        .unwrap();
        drop(log);
        let mut q = Policy::new(Rules::default(), 100, 100);
        let (mut log, replayed) = PushLog::open(&dir, &mut |op| {
            q.apply(&op);
            true
        })
        .unwrap();
        assert_eq!((replayed.taken, replayed.skipped), (82, 2));
        assert_eq!(q.tokens(), 1);
        assert_eq!(q.factors(9, 9, (100, 100), 1), (0, 100));
        let state = q.snapshot(1);
        assert!(log.wants_compaction(state.len()));
        log.compact(&state).unwrap();
        let mut read = Vec::new();
        let (_, replayed) = PushLog::open(&dir, &mut |op| {
            read.push(op);
            true
        })
        .unwrap();
        assert_eq!((&read, replayed.skipped), (&state, 0));
        // A line past 256 KiB at the end, torn: skipped, and the next record starts afresh.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&vec![b'x'; 300 * 1024]).unwrap();
        drop(f);
        let (mut log, replayed) = PushLog::open(&dir, &mut |_| true).unwrap();
        assert_eq!(replayed.skipped, 1);
        log.append(&[Push::RemoveToken {
            user: 1,
            torrent: 1,
        }])
        .unwrap();
        let (_, replayed) = PushLog::open(&dir, &mut |_| true).unwrap();
        assert_eq!((replayed.taken, replayed.skipped), (state.len() + 1, 1));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
