//! Private mode as the write-behind store knows it: each accounted announce is an
//! [`AccountChange`] (journal tag 5, or 6 with its client for a preset that keeps a row per
//! client), merged per user, per (user, torrent), per torrent and per client, and written as
//! `+=` deltas and the latest state into the preset's tables: hotpath's own (below, made by
//! [`PRIVATE`]'s migration), XBT's or TorrentPier's (the site's: [`service`] makes a service
//! writing them under `[private]`'s names, with no migration). A [`CountsChange`] (tag 7,
//! submitted without the journal) carries a swarm's seeders and leechers for XBT's torrents
//! table.
//!
//! | table | columns | what |
//! |---|---|---|
//! | `hp_users` | `user_id` PK (1 to 4294967295), `passkey` (1 to 64 letters and digits) unique, `can_leech` (0 or 1), `removed` (1: not served), `updated_at` (unix s) | the site's users, read by a private tracker (`private.schema = "hotpath"`); set `updated_at` on every change so the next poll reads it; the push API writes the users it sets and removes ([`RegistryChange`], tag 9) |
//! | `hp_private_torrents` | `torrent_id` PK, `info_hash` (20 bytes) unique, `download_pct` (0 free, 50 half, 100), `upload_pct` (100, 200 double), `removed`, `updated_at` | the torrents a private tracker serves and how they are credited; the push API's likewise |
//! | `hp_user_totals` | `user_id` PK, `uploaded`, `downloaded` (credited), `uploaded_raw`, `downloaded_raw` (as reported), `updated_at` | each user's totals, added to |
//! | `hp_user_torrents` | (`user_id`, `torrent_id`) PK, the four counts as above, `remaining` (bytes left at the last announce), `seeding` (0 or 1), `active` (0 once stopped), `announces`, `completed` (downloads finished), `completed_at` (unix s of the last), `suspicious` (as above), `updated_at` | each user's traffic and state per torrent: the snatch list is the rows with `completed` > 0 |
//!
//! Owns: [`AccountChange`], [`CountsChange`], [`AccountQueue`], the tables, [`PRIVATE`] and
//! [`service`]. Must not: do I/O.

use std::any::Any;
use std::net::IpAddr;

use hashbrown::HashMap;
use hotpath_config::{PrivateConfig, PrivateSchema};
use hotpath_store::migrations::Migration;
use hotpath_store::table::{col, Column, Merge, Rows, Table, Type, Value};
use hotpath_store::{Encode, Queue, Service};

/// An accounted announce.
const TAG: u8 = 5;
/// An accounted announce with its client (for a preset that writes peer rows).
const TAG_CLIENT: u8 = 6;
/// A torrent's seeders and leechers (a snapshot, submitted without the journal).
const TAG_COUNTS: u8 = 7;
/// A user or torrent the push API changed (hotpath's own preset writes it).
const TAG_REGISTRY: u8 = 9;
/// An announce or a scrape for XBT's logs (`log_announce`, `log_scrape`).
const TAG_LOG: u8 = 10;
/// An accounted announce with its client and the seconds since the client's last announce
/// (what tag 6 carries, and Gazelle's `timespent`), when there are some: a client's first
/// announce, with none, is tag 6, so each change has one encoding.
const TAG_CLIENT_SINCE: u8 = 11;

/// Encoded size of an [`AccountChange`] without its client.
pub const ACCOUNT_LEN: usize = 1 + 4 + 4 + 6 * 8 + 1 + 4;
/// Encoded size of a [`Client`].
const CLIENT_LEN: usize = 20 + 16 + 1 + 2 + 8 + 8 + 4 + 4;
/// Most bytes an [`AccountChange`] takes in the journal (with its client and its seconds).
pub const ACCOUNT_MAX_LEN: usize = ACCOUNT_LEN + CLIENT_LEN + 4;
/// Encoded size of a [`CountsChange`].
const COUNTS_LEN: usize = 1 + 4 * 4;

/// The client behind an accounted announce, for the presets that keep a row per client
/// (TorrentPier's `bb_bt_tracker`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Client {
    /// Its peer id.
    pub peer_id: [u8; 20],
    /// Its address.
    pub ip: IpAddr,
    /// Its port.
    pub port: u16,
    /// Its `uploaded` counter as reported.
    pub uploaded: u64,
    /// Its `downloaded` counter as reported.
    pub downloaded: u64,
    /// Bytes per second uploaded since its last announce.
    pub speed_up: u32,
    /// Bytes per second downloaded since.
    pub speed_down: u32,
    /// Seconds since its last announce (0 for a new client, and in a change journaled
    /// before they were kept).
    pub since: u32,
}

/// One accounted announce.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AccountChange {
    /// The user's id.
    pub user: u32,
    /// The torrent's id.
    pub torrent: u32,
    /// Bytes uploaded, credited (after the torrent's factor).
    pub uploaded: u64,
    /// Bytes downloaded, credited.
    pub downloaded: u64,
    /// Bytes uploaded, as reported.
    pub uploaded_raw: u64,
    /// Bytes downloaded, as reported.
    pub downloaded_raw: u64,
    /// Bytes left.
    pub remaining: u64,
    /// Downloads this announce completed (0 or 1).
    pub completed: u64,
    /// Bit 0: seeding; bit 1: stopped; bit 2: the torrent's uploader; bit 3: suspicious (its
    /// counters claimed more than the credit bound, which is what it credits); bits 4-5: the
    /// torrent's TorrentPier `tor_type` (0 in a change journaled before it was kept).
    pub flags: u8,
    /// Unix seconds.
    pub at: u32,
    /// The client, where the preset keeps a row per client.
    pub client: Option<Client>,
}

impl AccountChange {
    /// Seeding.
    pub const SEEDING: u8 = 1;
    /// Stopped.
    pub const STOPPED: u8 = 2;
    /// The torrent's uploader (TorrentPier's `releaser`).
    pub const RELEASER: u8 = 4;
    /// Its counters claimed more than the credit bound allows (see
    /// [`crate::private::ledger::CreditBound`]): `suspicious` in hotpath's own tables.
    pub const SUSPICIOUS: u8 = 8;
    /// Where the torrent's TorrentPier `tor_type` sits in the flags (two bits).
    pub const TOR_TYPE_SHIFT: u8 = 4;
    /// The user is IP-protected (Gazelle): no address of theirs is written.
    pub const PROTECTED: u8 = 64;
    /// A freeleech token of the site's (Gazelle) made the download free: what it saved is
    /// written to the token, and a completion ends it.
    pub const TOKEN: u8 = 128;
    /// The user's group is immune to hit-and-run rules (UNIT3D's `history.immune`); the bit
    /// of [`AccountChange::PROTECTED`], which only Gazelle's tables read.
    pub const IMMUNE: u8 = 64;

    /// Decodes the change at the start of `b` and its length; `None` when it is not one.
    pub fn decode(b: &[u8]) -> Option<(AccountChange, usize)> {
        let tag = *b.first()?;
        let len = match tag {
            TAG => ACCOUNT_LEN,
            TAG_CLIENT => ACCOUNT_LEN + CLIENT_LEN,
            TAG_CLIENT_SINCE => ACCOUNT_MAX_LEN,
            _ => return None,
        };
        if b.len() < len {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
        let client = if tag != TAG {
            let c = ACCOUNT_LEN;
            let ip: [u8; 16] = b[c + 20..c + 36].try_into().unwrap();
            // One encoding per client: an IPv4 address padded with zeros, a family of 0 or 1.
            let ip = match b[c + 36] {
                0 if ip[4..].iter().all(|&x| x == 0) => {
                    IpAddr::from(<[u8; 4]>::try_from(&ip[..4]).unwrap())
                }
                1 => IpAddr::from(ip),
                _ => return None,
            };
            Some(Client {
                peer_id: b[c..c + 20].try_into().unwrap(),
                ip,
                port: u16::from_le_bytes([b[c + 37], b[c + 38]]),
                uploaded: u64_at(c + 39),
                downloaded: u64_at(c + 47),
                speed_up: u32_at(c + 55),
                speed_down: u32_at(c + 59),
                since: match tag {
                    // One encoding per change: seconds of 0 are tag 6's.
                    TAG_CLIENT_SINCE if u32_at(c + 63) == 0 => return None,
                    TAG_CLIENT_SINCE => u32_at(c + 63),
                    _ => 0,
                },
            })
        } else {
            None
        };
        let c = AccountChange {
            user: u32_at(1),
            torrent: u32_at(5),
            uploaded: u64_at(9),
            downloaded: u64_at(17),
            uploaded_raw: u64_at(25),
            downloaded_raw: u64_at(33),
            remaining: u64_at(41),
            completed: u64_at(49),
            flags: b[57],
            at: u32_at(58),
            client,
        };
        Some((c, len))
    }
}

impl Encode for AccountChange {
    fn encoded_len(&self) -> usize {
        match self.client {
            Some(c) if c.since > 0 => ACCOUNT_MAX_LEN,
            Some(_) => ACCOUNT_LEN + CLIENT_LEN,
            None => ACCOUNT_LEN,
        }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.push(match self.client {
            Some(c) if c.since > 0 => TAG_CLIENT_SINCE,
            Some(_) => TAG_CLIENT,
            None => TAG,
        });
        out.extend_from_slice(&self.user.to_le_bytes());
        out.extend_from_slice(&self.torrent.to_le_bytes());
        for v in [
            self.uploaded,
            self.downloaded,
            self.uploaded_raw,
            self.downloaded_raw,
            self.remaining,
            self.completed,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.push(self.flags);
        out.extend_from_slice(&self.at.to_le_bytes());
        if let Some(c) = &self.client {
            out.extend_from_slice(&c.peer_id);
            let (ip, v6) = match c.ip {
                IpAddr::V4(a) => {
                    let mut ip = [0; 16];
                    ip[..4].copy_from_slice(&a.octets());
                    (ip, 0)
                }
                IpAddr::V6(a) => (a.octets(), 1),
            };
            out.extend_from_slice(&ip);
            out.push(v6);
            out.extend_from_slice(&c.port.to_le_bytes());
            out.extend_from_slice(&c.uploaded.to_le_bytes());
            out.extend_from_slice(&c.downloaded.to_le_bytes());
            out.extend_from_slice(&c.speed_up.to_le_bytes());
            out.extend_from_slice(&c.speed_down.to_le_bytes());
            if c.since > 0 {
                out.extend_from_slice(&c.since.to_le_bytes());
            }
        }
    }
}

/// A torrent's seeders and leechers now (for the presets that keep them in the torrents
/// table: XBT's). Submitted every `tracker.snapshot_interval_secs`, not journaled: the next
/// snapshot writes it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CountsChange {
    /// The torrent's id.
    pub torrent: u32,
    /// Seeders now.
    pub seeders: u32,
    /// Leechers now.
    pub leechers: u32,
    /// Unix seconds.
    pub at: u32,
}

impl CountsChange {
    /// Decodes the change at the start of `b` and its length; `None` when it is not one.
    pub fn decode(b: &[u8]) -> Option<(CountsChange, usize)> {
        if *b.first()? != TAG_COUNTS || b.len() < COUNTS_LEN {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        let c = CountsChange {
            torrent: u32_at(1),
            seeders: u32_at(5),
            leechers: u32_at(9),
            at: u32_at(13),
        };
        Some((c, COUNTS_LEN))
    }
}

impl Encode for CountsChange {
    fn encoded_len(&self) -> usize {
        COUNTS_LEN
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.push(TAG_COUNTS);
        for v in [self.torrent, self.seeders, self.leechers, self.at] {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
}

/// A user or torrent the push API changed, in hotpath's own preset: written into `hp_users`
/// or `hp_private_torrents` as the push API's answer promises, so the next full read of the
/// tables keeps it and a restart finds it (journal tag 9; the site presets' tables are the
/// site's, and their queues read and drop it). A removal keeps the row, marked `removed`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryChange {
    /// A user set, or removed.
    User {
        /// The user's id.
        id: u32,
        /// The passkey (1 to 64 letters and digits).
        passkey: String,
        /// Whether the user may download.
        can_leech: bool,
        /// Removed: not served until set again.
        removed: bool,
        /// Unix seconds.
        at: u32,
    },
    /// A torrent set, or removed.
    Torrent {
        /// The torrent's id.
        id: u32,
        /// Its info hash.
        info_hash: [u8; 20],
        /// Percent of downloaded bytes credited.
        download_pct: u16,
        /// Percent of uploaded bytes credited.
        upload_pct: u16,
        /// Removed: not served until set again.
        removed: bool,
        /// Unix seconds.
        at: u32,
    },
}

impl RegistryChange {
    const TORRENT: u8 = 1;
    const REMOVED: u8 = 2;

    /// Its id, and whether it is a torrent's.
    fn key(&self) -> (bool, u32) {
        match *self {
            RegistryChange::User { id, .. } => (false, id),
            RegistryChange::Torrent { id, .. } => (true, id),
        }
    }

    /// Decodes the change at the start of `b` and its length; `None` when it is not one (a
    /// malformed passkey included).
    pub fn decode(b: &[u8]) -> Option<(RegistryChange, usize)> {
        if *b.first()? != TAG_REGISTRY || b.len() < 10 {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        let (kind, id, at) = (b[1], u32_at(2), u32_at(6));
        if kind & !(Self::TORRENT | Self::REMOVED) != 0 || id == 0 {
            return None;
        }
        let removed = kind & Self::REMOVED != 0;
        if kind & Self::TORRENT != 0 {
            let rest = b.get(10..34)?;
            let c = RegistryChange::Torrent {
                id,
                info_hash: rest[..20].try_into().unwrap(),
                download_pct: u16::from_le_bytes([rest[20], rest[21]]),
                upload_pct: u16::from_le_bytes([rest[22], rest[23]]),
                removed,
                at,
            };
            return Some((c, 34));
        }
        let (&can_leech, &n) = (b.get(10)?, b.get(11)?);
        if can_leech > 1 {
            return None;
        }
        let end = 12 + usize::from(n);
        let passkey = hotpath_wire::passkey::check(b.get(12..end)?).ok()?;
        let c = RegistryChange::User {
            id,
            passkey: String::from_utf8(passkey.to_vec()).ok()?,
            can_leech: can_leech != 0,
            removed,
            at,
        };
        Some((c, end))
    }
}

impl Encode for RegistryChange {
    fn encoded_len(&self) -> usize {
        match self {
            RegistryChange::User { passkey, .. } => 12 + passkey.len(),
            RegistryChange::Torrent { .. } => 34,
        }
    }

    /// A passkey is written as it is: callers pass one [`hotpath_wire::passkey::check`] took.
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(TAG_REGISTRY);
        let (kind, removed, at) = match *self {
            RegistryChange::User { removed, at, .. } => (0, removed, at),
            RegistryChange::Torrent { removed, at, .. } => (Self::TORRENT, removed, at),
        };
        out.push(kind | if removed { Self::REMOVED } else { 0 });
        out.extend_from_slice(&self.key().1.to_le_bytes());
        out.extend_from_slice(&at.to_le_bytes());
        match self {
            RegistryChange::User {
                passkey, can_leech, ..
            } => {
                out.push(u8::from(*can_leech));
                out.push(passkey.len() as u8);
                out.extend_from_slice(passkey.as_bytes());
            }
            RegistryChange::Torrent {
                info_hash,
                download_pct,
                upload_pct,
                ..
            } => {
                out.extend_from_slice(info_hash);
                out.extend_from_slice(&download_pct.to_le_bytes());
                out.extend_from_slice(&upload_pct.to_le_bytes());
            }
        }
    }
}

/// An announce or a scrape of a known user, for XBT's `xbt_announce_log` and
/// `xbt_scrape_log` (journal tag 10), written when `xbt_config` turns `log_announce` or
/// `log_scrape` on, as XBT writes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogChange {
    /// The client's address, 16 bytes (IPv4 mapped; written in 4, as XBT writes it).
    pub ip: [u8; 16],
    /// The user's id.
    pub uid: u32,
    /// Unix seconds.
    pub at: u32,
    /// The announce (`None`: a scrape).
    pub announce: Option<LoggedAnnounce>,
}

/// What an announce's log row holds beside the address, user and time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoggedAnnounce {
    /// Its port.
    pub port: u16,
    /// XBT's event number: 0 none, 1 completed, 2 started, 3 stopped.
    pub event: u8,
    /// The torrent.
    pub info_hash: [u8; 20],
    /// The client's peer id.
    pub peer_id: [u8; 20],
    /// Its counters as reported.
    pub downloaded: u64,
    /// Bytes left.
    pub left: u64,
    /// Its counter as reported.
    pub uploaded: u64,
}

impl LogChange {
    /// Bytes of a scrape's log change; an announce's adds [`LogChange::ANNOUNCE`].
    const SCRAPE: usize = 1 + 1 + 16 + 4 + 4;
    /// Bytes an announce adds.
    const ANNOUNCE: usize = 2 + 1 + 20 + 20 + 3 * 8;
    /// Most bytes one takes in the journal.
    pub const MAX_LEN: usize = Self::SCRAPE + Self::ANNOUNCE;

    /// Decodes the change at the start of `b` and its length; `None` when it is not one.
    pub fn decode(b: &[u8]) -> Option<(LogChange, usize)> {
        if *b.first()? != TAG_LOG || b.len() < Self::SCRAPE {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
        let mut c = LogChange {
            ip: b[2..18].try_into().unwrap(),
            uid: u32_at(18),
            at: u32_at(22),
            announce: None,
        };
        match b[1] {
            0 => Some((c, Self::SCRAPE)),
            1 => {
                let a = b.get(Self::SCRAPE..Self::MAX_LEN)?;
                let event = a[2];
                if event > 3 {
                    return None;
                }
                let at = |i: usize| Self::SCRAPE + i;
                c.announce = Some(LoggedAnnounce {
                    port: u16::from_le_bytes([a[0], a[1]]),
                    event,
                    info_hash: a[3..23].try_into().unwrap(),
                    peer_id: a[23..43].try_into().unwrap(),
                    downloaded: u64_at(at(43)),
                    left: u64_at(at(51)),
                    uploaded: u64_at(at(59)),
                });
                Some((c, Self::MAX_LEN))
            }
            _ => None,
        }
    }
}

impl Encode for LogChange {
    fn encoded_len(&self) -> usize {
        Self::SCRAPE
            + if self.announce.is_some() {
                Self::ANNOUNCE
            } else {
                0
            }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.push(TAG_LOG);
        out.push(u8::from(self.announce.is_some()));
        out.extend_from_slice(&self.ip);
        out.extend_from_slice(&self.uid.to_le_bytes());
        out.extend_from_slice(&self.at.to_le_bytes());
        if let Some(a) = &self.announce {
            out.extend_from_slice(&a.port.to_le_bytes());
            out.push(a.event);
            out.extend_from_slice(&a.info_hash);
            out.extend_from_slice(&a.peer_id);
            for v in [a.downloaded, a.left, a.uploaded] {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
    }
}

/// Counts that add, per user or per (user, torrent).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counts {
    uploaded: u64,
    downloaded: u64,
    uploaded_raw: u64,
    downloaded_raw: u64,
    /// Announces whose claim was cut to the credit bound.
    suspicious: u64,
}

impl Counts {
    fn of(c: &AccountChange) -> Counts {
        Counts {
            uploaded: c.uploaded,
            downloaded: c.downloaded,
            uploaded_raw: c.uploaded_raw,
            downloaded_raw: c.downloaded_raw,
            suspicious: u64::from(c.flags & AccountChange::SUSPICIOUS != 0),
        }
    }

    fn add(&mut self, o: Counts) {
        self.uploaded = self.uploaded.saturating_add(o.uploaded);
        self.downloaded = self.downloaded.saturating_add(o.downloaded);
        self.uploaded_raw = self.uploaded_raw.saturating_add(o.uploaded_raw);
        self.downloaded_raw = self.downloaded_raw.saturating_add(o.downloaded_raw);
        self.suspicious = self.suspicious.saturating_add(o.suspicious);
    }

    fn values(self) -> [Value; 4] {
        [
            self.uploaded,
            self.downloaded,
            self.uploaded_raw,
            self.downloaded_raw,
        ]
        .map(int)
    }
}

/// A count as the databases hold it (signed 64 bits, saturated).
fn int(v: u64) -> Value {
    Value::Int(v.min(i64::MAX as u64) as i64)
}

/// A user's merged state on one torrent.
#[derive(Debug, Clone, Copy, Default)]
struct OnTorrent {
    counts: Counts,
    remaining: u64,
    flags: u8,
    announces: u64,
    completed: u64,
    completed_at: u32,
    at: u32,
    /// UNIT3D's history: the latest client's counters and peer id, and seconds seeded.
    client: Option<Client>,
    seedtime: u64,
}

/// A torrent's merged counts (XBT's torrents table, Gazelle's `torrents_leech_stats`).
#[derive(Debug, Clone, Copy, Default)]
struct TorrentState {
    /// Seeders and leechers of the latest snapshot, if one came.
    counts: Option<(u32, u32)>,
    completed: u64,
    /// Bytes uploaded less bytes downloaded, as reported (Gazelle's `Balance`).
    balance: i64,
    at: u32,
}

/// One client's merged row (TorrentPier's `bb_bt_tracker`).
#[derive(Debug, Clone, Copy)]
struct ClientRow {
    client: Option<Client>,
    counts: Counts,
    /// Announces merged (Gazelle's `announced`), and their seconds since the client's last
    /// (its `timespent`).
    announces: u64,
    timespent: u64,
    remaining: u64,
    flags: u8,
    at: u32,
}

/// The tables a preset writes.
#[derive(Debug)]
enum Writes {
    /// `hp_user_totals`, `hp_user_torrents`.
    Hotpath,
    /// XBT's users (`+=`), peers (upserted) and torrents (counts) tables.
    Xbt {
        users: &'static Table,
        peers: &'static Table,
        torrents: &'static Table,
        announce_log: &'static Table,
        scrape_log: &'static Table,
    },
    /// TorrentPier's `bb_bt_tracker`, a row per client (upserted); the site's cron adds
    /// `up_add`/`down_add` to the users' totals and deletes rows whose `update_time` is old.
    Torrentpier { tracker: &'static Table },
    /// Gazelle's, as Ocelot writes them: users' totals (`+=`), torrents' stats, a row per
    /// client (upserted), a row per snatch, and what each freeleech token saved.
    Gazelle {
        users: &'static Table,
        stats: &'static Table,
        peers: &'static Table,
        snatches: &'static Table,
        tokens: &'static Table,
    },
    /// UNIT3D's, as UNIT3D-Announce writes them: users' totals (`+=`), torrents' counts, a
    /// row per client and a `history` row per user and torrent (upserted).
    Unit3d {
        users: &'static Table,
        torrents: &'static Table,
        peers: &'static Table,
        history: &'static Table,
    },
}

/// Seconds between two announces of a seeding client past which the time between them is
/// not counted as seeding (UNIT3D-Announce's default `ACTIVE_PEER_TTL`).
const SEEDTIME_TTL: u32 = 7200;

/// The merge queue: totals per user, state per (user, torrent), counts per torrent and rows
/// per client, written as the preset's tables take them.
#[derive(Debug)]
pub struct AccountQueue {
    writes: &'static Writes,
    users: HashMap<u32, (Counts, u32)>,
    on_torrents: HashMap<(u32, u32), OnTorrent>,
    torrents: HashMap<u32, TorrentState>,
    clients: HashMap<(u32, u32, [u8; 20]), ClientRow>,
    /// Pushed users and torrents, the latest per id (hotpath's own preset).
    pushed: HashMap<(bool, u32), RegistryChange>,
    /// Announces and scrapes for XBT's logs, in order.
    logs: Vec<LogChange>,
    /// Gazelle's snatches (user, torrent, unix second, address or "" when protected), in
    /// order.
    snatches: Vec<(u32, u32, u32, String)>,
    /// Gazelle's freeleech tokens used: bytes downloaded under each, and whether a
    /// completion ended it.
    tokens: HashMap<(u32, u32), (u64, bool)>,
}

impl Default for AccountQueue {
    fn default() -> AccountQueue {
        AccountQueue::new(&Writes::Hotpath)
    }
}

impl AccountQueue {
    fn new(writes: &'static Writes) -> AccountQueue {
        AccountQueue {
            writes,
            users: HashMap::new(),
            on_torrents: HashMap::new(),
            torrents: HashMap::new(),
            clients: HashMap::new(),
            pushed: HashMap::new(),
            logs: Vec::new(),
            snatches: Vec::new(),
            tokens: HashMap::new(),
        }
    }

    /// Merges an accounted announce into the maps its preset writes from (this runs on the
    /// workers' commits: nothing a preset does not write is kept).
    fn account(&mut self, c: &AccountChange) {
        let counts = Counts::of(c);
        match self.writes {
            Writes::Torrentpier { .. } => return self.client_row(c, counts),
            Writes::Gazelle { .. } => return self.gazelle(c, counts),
            Writes::Unit3d { .. } => return self.unit3d(c, counts),
            _ => {}
        }
        let u = self.users.entry(c.user).or_default();
        u.0.add(counts);
        u.1 = u.1.max(c.at);
        let t = self.on_torrents.entry((c.user, c.torrent)).or_default();
        t.counts.add(counts);
        t.announces = t.announces.saturating_add(1);
        t.completed = t.completed.saturating_add(c.completed);
        if c.completed > 0 {
            t.completed_at = t.completed_at.max(c.at);
        }
        // The state of the latest announce wins (journals replay in order per worker; a
        // user's announces on one torrent a second apart may come through two workers).
        if c.at >= t.at {
            t.remaining = c.remaining;
            t.flags = c.flags;
            t.at = c.at;
        }
        if c.completed > 0 && matches!(self.writes, Writes::Xbt { .. }) {
            let s = self.torrents.entry(c.torrent).or_default();
            s.completed = s.completed.saturating_add(c.completed);
            s.at = s.at.max(c.at);
        }
    }

    /// TorrentPier: merges an accounted announce into its client's row. A change journaled
    /// without its client (by another preset's run) still credits: a row of its own, stopped,
    /// which the site's cron counts and deletes.
    fn client_row(&mut self, c: &AccountChange, counts: Counts) {
        let id = c.client.map_or([0; 20], |k| k.peer_id);
        let r = self
            .clients
            .entry((c.torrent, c.user, id))
            .or_insert(ClientRow {
                client: None,
                counts: Counts::default(),
                announces: 0,
                timespent: 0,
                remaining: 0,
                flags: AccountChange::STOPPED,
                at: 0,
            });
        r.counts.add(counts);
        r.announces = r.announces.saturating_add(1);
        r.timespent = r
            .timespent
            .saturating_add(c.client.map_or(0, |k| u64::from(k.since)));
        if c.at >= r.at {
            r.client = c.client;
            r.remaining = c.remaining;
            r.flags = c.flags
                | if c.client.is_none() {
                    AccountChange::STOPPED
                } else {
                    0
                };
            r.at = c.at;
        }
    }

    /// Gazelle: merges an accounted announce into the user's totals, the client's row, the
    /// torrent's stats, its snatch and the token it used.
    fn gazelle(&mut self, c: &AccountChange, counts: Counts) {
        let u = self.users.entry(c.user).or_default();
        u.0.add(counts);
        u.1 = u.1.max(c.at);
        self.client_row(c, counts);
        let t = self.torrents.entry(c.torrent).or_default();
        t.completed = t.completed.saturating_add(c.completed);
        let signed = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        t.balance = t
            .balance
            .saturating_add(signed(c.uploaded_raw))
            .saturating_sub(signed(c.downloaded_raw));
        t.at = t.at.max(c.at);
        if c.flags & AccountChange::TOKEN != 0 {
            let k = self.tokens.entry((c.user, c.torrent)).or_default();
            k.0 = k.0.saturating_add(c.downloaded_raw);
            k.1 |= c.completed > 0;
        }
        if c.completed > 0 {
            let ip = gazelle_ip(c);
            self.snatches.push((c.user, c.torrent, c.at, ip));
        }
    }

    /// UNIT3D: merges an accounted announce into the user's totals, the client's row, the
    /// torrent's completions and the user's history on the torrent.
    fn unit3d(&mut self, c: &AccountChange, counts: Counts) {
        let u = self.users.entry(c.user).or_default();
        u.0.add(counts);
        u.1 = u.1.max(c.at);
        self.client_row(c, counts);
        if c.completed > 0 {
            let t = self.torrents.entry(c.torrent).or_default();
            t.completed = t.completed.saturating_add(c.completed);
            t.at = t.at.max(c.at);
        }
        let h = self.on_torrents.entry((c.user, c.torrent)).or_default();
        h.counts.add(counts);
        h.announces = h.announces.saturating_add(1);
        if c.completed > 0 && h.completed_at == 0 {
            h.completed_at = c.at;
        }
        h.completed = h.completed.saturating_add(c.completed);
        // Seeded since the client's last announce: it seeds now and did not just finish.
        if let Some(k) = c.client {
            let seeding = c.flags & AccountChange::SEEDING != 0 && c.completed == 0;
            if seeding && k.since <= SEEDTIME_TTL {
                h.seedtime = h.seedtime.saturating_add(u64::from(k.since));
            }
        }
        if c.at >= h.at {
            h.remaining = c.remaining;
            h.flags = c.flags;
            h.at = c.at;
            h.client = c.client.or(h.client);
        }
    }

    /// The users' credited bytes, a row (id, uploaded, downloaded) each, of a site's table
    /// that adds them (Gazelle's, UNIT3D's).
    fn credited_rows(&mut self, table: &'static Table) -> Rows {
        let mut users: Vec<_> = self.users.drain().collect();
        users.sort_unstable_by_key(|u| u.0);
        let mut rows = Rows::with_capacity(table, users.len());
        for (id, (c, _)) in users {
            rows.push([id.into(), int(c.uploaded), int(c.downloaded)]);
        }
        rows
    }

    /// The torrents' merged counts, by id.
    fn drain_torrents(&mut self) -> Vec<(u32, TorrentState)> {
        let mut tors: Vec<_> = self.torrents.drain().collect();
        tors.sort_unstable_by_key(|t| t.0);
        tors
    }

    fn unit3d_rows(
        &mut self,
        [users_t, torrents_t, peers_t, history_t]: [&'static Table; 4],
    ) -> Vec<Rows> {
        let urows = self.credited_rows(users_t);
        let tors = self.drain_torrents();
        let mut trows = Rows::with_capacity(torrents_t, tors.len());
        for (id, t) in tors {
            let (s, l) = t
                .counts
                .map_or((Value::Null, Value::Null), |(s, l)| (s.into(), l.into()));
            trows.push([id.into(), s, l, int(t.completed)]);
        }
        let mut cs: Vec<_> = self.clients.drain().collect();
        cs.sort_unstable_by_key(|c| c.0);
        let mut prows = Rows::with_capacity(peers_t, cs.len());
        for ((torrent, user, peer_id), r) in cs {
            let Some(k) = r.client else {
                // A change journaled without its client (another preset's run): its traffic
                // is in the history and the user's totals, and no client row is made.
                continue;
            };
            let ip = match k.ip {
                IpAddr::V4(a) => Value::Blob(a.octets().into()),
                IpAddr::V6(a) => Value::Blob(a.octets().into()),
            };
            let at = Value::from(&*datetime(r.at));
            prows.push([
                user.into(),
                torrent.into(),
                Value::Blob(peer_id.into()),
                ip,
                u32::from(k.port).into(),
                Value::from(&*agent(&k.peer_id)),
                int(k.uploaded),
                int(k.downloaded),
                int(r.remaining),
                Value::Int(i64::from(r.flags & AccountChange::SEEDING)),
                // Active and visible until stopped, as UNIT3D-Announce writes them.
                Value::Int(i64::from(r.flags & AccountChange::STOPPED == 0)),
                Value::Int(i64::from(r.flags & AccountChange::STOPPED == 0)),
                at.clone(),
                at,
            ]);
        }
        let mut hs: Vec<_> = self.on_torrents.drain().collect();
        hs.sort_unstable_by_key(|h| h.0);
        let mut hrows = Rows::with_capacity(history_t, hs.len());
        for ((user, torrent), h) in hs {
            let (up, down, id) = h
                .client
                .map_or((0, 0, [0; 20]), |k| (k.uploaded, k.downloaded, k.peer_id));
            let at = Value::from(&*datetime(h.at));
            let completed_at = match h.completed_at {
                0 => Value::Null,
                t => Value::from(&*datetime(t)),
            };
            hrows.push([
                user.into(),
                torrent.into(),
                Value::from(&*agent(&id)),
                int(h.counts.uploaded),
                int(h.counts.uploaded_raw),
                int(up),
                int(h.counts.downloaded),
                int(h.counts.downloaded_raw),
                int(down),
                Value::Int(i64::from(h.flags & AccountChange::SEEDING)),
                Value::Int(i64::from(h.flags & AccountChange::STOPPED == 0)),
                int(h.seedtime),
                Value::Int(i64::from(h.flags & AccountChange::IMMUNE != 0)),
                at.clone(),
                at,
                completed_at,
            ]);
        }
        vec![urows, trows, prows, hrows]
    }

    fn gazelle_rows(
        &mut self,
        [users_t, stats_t, peers_t, snatches_t, tokens_t]: [&'static Table; 5],
    ) -> Vec<Rows> {
        let urows = self.credited_rows(users_t);
        let tors = self.drain_torrents();
        let mut trows = Rows::with_capacity(stats_t, tors.len());
        for (id, t) in tors {
            let (s, l) = t
                .counts
                .map_or((Value::Null, Value::Null), |(s, l)| (s.into(), l.into()));
            // As Ocelot sets it: the time of a count with seeders (UTC), else as it was.
            let last_action = match t.counts {
                Some((seeders, _)) if seeders > 0 => Value::from(&*datetime(t.at)),
                _ => Value::Null,
            };
            trows.push([
                id.into(),
                s,
                l,
                int(t.completed),
                Value::Int(t.balance),
                last_action,
            ]);
        }
        let mut cs: Vec<_> = self.clients.drain().collect();
        cs.sort_unstable_by_key(|c| c.0);
        let mut prows = Rows::with_capacity(peers_t, cs.len());
        for ((torrent, user, peer_id), r) in cs {
            let (up, down, su, sd) = r.client.map_or((0, 0, 0, 0), |k| {
                (k.uploaded, k.downloaded, k.speed_up, k.speed_down)
            });
            let change = AccountChange {
                flags: r.flags,
                client: r.client,
                ..AccountChange::default()
            };
            prows.push([
                user.into(),
                torrent.into(),
                Value::Blob(peer_id.into()),
                Value::Int(i64::from(r.flags & AccountChange::STOPPED == 0)),
                int(r.announces),
                int(up),
                int(down),
                int(r.remaining),
                su.into(),
                sd.into(),
                int(r.timespent),
                Value::from(&*gazelle_ip(&change)),
                r.at.into(),
            ]);
        }
        let mut srows = Rows::with_capacity(snatches_t, self.snatches.len());
        for (user, torrent, at, ip) in self.snatches.drain(..) {
            srows.push([user.into(), torrent.into(), at.into(), Value::from(&*ip)]);
        }
        let mut ks: Vec<_> = self.tokens.drain().collect();
        ks.sort_unstable_by_key(|k| k.0);
        let mut krows = Rows::with_capacity(tokens_t, ks.len());
        for ((user, torrent), (downloaded, ended)) in ks {
            krows.push([
                user.into(),
                torrent.into(),
                int(downloaded),
                if ended { Value::Int(1) } else { Value::Null },
            ]);
        }
        vec![urows, trows, prows, srows, krows]
    }

    fn hotpath_rows(&mut self) -> Vec<Rows> {
        let mut users: Vec<_> = self.users.drain().collect();
        users.sort_unstable_by_key(|u| u.0);
        let mut rows = Rows::with_capacity(&USER_TOTALS, users.len());
        for (id, (c, at)) in users {
            let suspicious = int(c.suspicious);
            let [a, b, c, d] = c.values();
            rows.push([id.into(), a, b, c, d, suspicious, at.into()]);
        }
        let mut ts: Vec<_> = self.on_torrents.drain().collect();
        ts.sort_unstable_by_key(|t| t.0);
        let mut trows = Rows::with_capacity(&USER_TORRENTS, ts.len());
        for ((user, torrent), t) in ts {
            let [a, b, c, d] = t.counts.values();
            trows.push([
                user.into(),
                torrent.into(),
                a,
                b,
                c,
                d,
                int(t.remaining),
                Value::Int(i64::from(t.flags & AccountChange::SEEDING)),
                Value::Int(i64::from(t.flags & AccountChange::STOPPED == 0)),
                int(t.announces),
                int(t.completed),
                t.completed_at.into(),
                int(t.counts.suspicious),
                t.at.into(),
            ]);
        }
        let mut pushed: Vec<_> = self.pushed.drain().collect();
        pushed.sort_unstable_by_key(|p| p.0);
        let mut set_users = Rows::with_capacity(&USERS, 0);
        let mut set_torrents = Rows::with_capacity(&TORRENTS, 0);
        for (_, c) in pushed {
            match c {
                RegistryChange::User {
                    id,
                    passkey,
                    can_leech,
                    removed,
                    at,
                } => set_users.push([
                    id.into(),
                    Value::from(&*passkey),
                    Value::Int(i64::from(can_leech)),
                    Value::Int(i64::from(removed)),
                    at.into(),
                ]),
                RegistryChange::Torrent {
                    id,
                    info_hash,
                    download_pct,
                    upload_pct,
                    removed,
                    at,
                } => set_torrents.push([
                    id.into(),
                    Value::Blob(info_hash.into()),
                    u32::from(download_pct).into(),
                    u32::from(upload_pct).into(),
                    Value::Int(i64::from(removed)),
                    at.into(),
                ]),
            }
        }
        vec![rows, trows, set_users, set_torrents]
    }

    fn xbt_rows(
        &mut self,
        users_t: &'static Table,
        peers_t: &'static Table,
        torrents_t: &'static Table,
    ) -> Vec<Rows> {
        let mut users: Vec<_> = self.users.drain().collect();
        users.sort_unstable_by_key(|u| u.0);
        let mut urows = Rows::with_capacity(users_t, users.len());
        for (id, (c, _)) in users {
            urows.push([id.into(), int(c.uploaded), int(c.downloaded)]);
        }
        let mut ts: Vec<_> = self.on_torrents.drain().collect();
        ts.sort_unstable_by_key(|t| (t.0 .1, t.0 .0));
        let mut prows = Rows::with_capacity(peers_t, ts.len());
        for ((user, torrent), t) in ts {
            prows.push([
                torrent.into(),
                user.into(),
                Value::Int(i64::from(t.flags & AccountChange::STOPPED == 0)),
                int(t.completed),
                int(t.counts.downloaded_raw),
                int(t.remaining),
                int(t.counts.uploaded_raw),
                t.at.into(),
            ]);
        }
        let mut tors: Vec<_> = self.torrents.drain().collect();
        tors.sort_unstable_by_key(|t| t.0);
        let mut trows = Rows::with_capacity(torrents_t, tors.len());
        for (id, t) in tors {
            let (s, l) = t
                .counts
                .map_or((Value::Null, Value::Null), |(s, l)| (s.into(), l.into()));
            trows.push([id.into(), s, l, int(t.completed), t.at.into()]);
        }
        vec![urows, prows, trows]
    }

    /// XBT's announce and scrape logs, a row each, in order.
    fn log_rows(&mut self, announce_t: &'static Table, scrape_t: &'static Table) -> Vec<Rows> {
        let mut announces = Rows::with_capacity(announce_t, 0);
        let mut scrapes = Rows::with_capacity(scrape_t, 0);
        for c in self.logs.drain(..) {
            // As XBT writes it: an IPv4 address in 4 bytes, an IPv6 one in 16.
            let ip = match std::net::Ipv6Addr::from(c.ip).to_ipv4_mapped() {
                Some(v4) => Value::Blob(v4.octets().into()),
                None => Value::Blob(c.ip.into()),
            };
            match c.announce {
                Some(a) => announces.push([
                    ip,
                    u32::from(a.port).into(),
                    u32::from(a.event).into(),
                    Value::Blob(a.info_hash.into()),
                    Value::Blob(a.peer_id.into()),
                    int(a.downloaded),
                    int(a.left),
                    int(a.uploaded),
                    c.uid.into(),
                    c.at.into(),
                ]),
                None => scrapes.push([ip, c.uid.into(), c.at.into()]),
            }
        }
        vec![announces, scrapes]
    }

    fn torrentpier_rows(&mut self, table: &'static Table) -> Vec<Rows> {
        let mut cs: Vec<_> = self
            .clients
            .drain()
            .map(|((t, u, id), r)| (peer_hash(t, u, &id), t, u, r))
            .collect();
        cs.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut rows = Rows::with_capacity(table, cs.len());
        for (hash, torrent, user, r) in cs {
            let stopped = r.flags & AccountChange::STOPPED != 0;
            let seeder = Value::Int(i64::from(r.flags & AccountChange::SEEDING));
            let (ip, ipv6, port, peer_id, up, down, su, sd) = match r.client {
                Some(c) => {
                    // As TorrentPier's announcer writes them (its `ip2long`): the address
                    // as one decimal number, in `ip` for IPv4, in `ipv6` for IPv6.
                    let (v4, v6) = match c.ip {
                        IpAddr::V4(a) => (Value::from(&*u32::from(a).to_string()), Value::Null),
                        IpAddr::V6(a) => (Value::Null, Value::from(&*u128::from(a).to_string())),
                    };
                    (
                        v4,
                        v6,
                        Value::from(u32::from(c.port)),
                        Value::from(&*printable(&c.peer_id)),
                        int(c.uploaded),
                        int(c.downloaded),
                        Value::from(c.speed_up),
                        Value::from(c.speed_down),
                    )
                }
                None => (
                    Value::Null,
                    Value::Null,
                    Value::Int(0),
                    Value::from(""),
                    Value::Int(0),
                    Value::Int(0),
                    Value::Int(0),
                    Value::Int(0),
                ),
            };
            rows.push([
                Value::from(&*hash),
                torrent.into(),
                user.into(),
                peer_id,
                ip,
                ipv6,
                port,
                seeder.clone(),
                Value::Int(i64::from(r.flags & AccountChange::RELEASER != 0)),
                Value::Int(i64::from(r.flags >> AccountChange::TOR_TYPE_SHIFT & 3)),
                up,
                down,
                int(r.remaining),
                su,
                sd,
                int(r.counts.uploaded),
                int(r.counts.downloaded),
                // A stopped client's row is left for the site's cron to count and delete.
                if stopped { Value::Int(0) } else { r.at.into() },
                seeder,
            ]);
        }
        vec![rows]
    }
}

/// The address Gazelle's tables get for a change's client: its IPv4 address as text, or ""
/// for an IP-protected user, an IPv6 address (Gazelle's column holds 15 characters; Ocelot
/// serves IPv4 only) and a change without its client.
fn gazelle_ip(c: &AccountChange) -> String {
    match c.client {
        Some(Client {
            ip: IpAddr::V4(a), ..
        }) if c.flags & AccountChange::PROTECTED == 0 => a.to_string(),
        _ => String::new(),
    }
}

/// The client a peer id names, for UNIT3D's `agent` (hotpath keeps no User-Agent): the
/// peer id's printable prefix up to its 8th byte (`-qB4650-`), trailing dots and dashes
/// of a peer id of another style trimmed.
fn agent(peer_id: &[u8; 20]) -> String {
    let p = printable(peer_id);
    p[..8].trim_end_matches('.').to_string()
}

/// Unix second `at` as a UTC `YYYY-MM-DD HH:MM:SS`, as a DATETIME column takes it.
fn datetime(at: u32) -> String {
    hotpath_wire::http::civil_time(i64::from(at))
}

/// A client's key in `bb_bt_tracker` (32 characters): its torrent and user in hex, then a
/// hash of its peer id, so rows of two users never meet and one client keeps its row across
/// restarts.
pub fn peer_hash(torrent: u32, user: u32, peer_id: &[u8; 20]) -> String {
    use std::hash::Hasher as _;
    // A fixed key: the row must be found again after a restart. Collisions could only merge
    // two clients of one user on one torrent.
    let mut h = siphasher::sip::SipHasher13::new_with_keys(0x6870_7065_6572, 0x726f_7773);
    h.write(peer_id);
    format!("{torrent:08x}{user:08x}{:016x}", h.finish())
}

/// A peer id as text a site's VARCHAR takes: printable ASCII kept, any other byte as `.`.
fn printable(peer_id: &[u8; 20]) -> String {
    peer_id
        .iter()
        .map(|&b| {
            if (0x20..0x7f).contains(&b) {
                b as char
            } else {
                '.'
            }
        })
        .collect()
}

impl Queue for AccountQueue {
    fn apply(&mut self, bytes: &[u8]) -> Option<usize> {
        if let Some((c, len)) = CountsChange::decode(bytes) {
            // Only XBT's torrents table and Gazelle's stats keep them; another preset reads
            // them and drops them.
            if !matches!(
                self.writes,
                Writes::Xbt { .. } | Writes::Gazelle { .. } | Writes::Unit3d { .. }
            ) {
                return Some(len);
            }
            let s = self.torrents.entry(c.torrent).or_default();
            if c.at >= s.at || s.counts.is_none() {
                s.counts = Some((c.seeders, c.leechers));
            }
            s.at = s.at.max(c.at);
            return Some(len);
        }
        if let Some((c, len)) = LogChange::decode(bytes) {
            // Only XBT's tables have logs.
            if matches!(self.writes, Writes::Xbt { .. }) {
                self.logs.push(c);
            }
            return Some(len);
        }
        if let Some((c, len)) = RegistryChange::decode(bytes) {
            // Only hotpath's own tables take them; a site preset's are the site's.
            if matches!(self.writes, Writes::Hotpath) {
                self.pushed.insert(c.key(), c);
            }
            return Some(len);
        }
        let (c, len) = AccountChange::decode(bytes)?;
        self.account(&c);
        Some(len)
    }

    fn rows(&self) -> usize {
        match self.writes {
            Writes::Hotpath => self.users.len() + self.on_torrents.len() + self.pushed.len(),
            Writes::Xbt { .. } => {
                self.users.len() + self.on_torrents.len() + self.torrents.len() + self.logs.len()
            }
            Writes::Torrentpier { .. } => self.clients.len(),
            Writes::Gazelle { .. } => {
                self.users.len()
                    + self.torrents.len()
                    + self.clients.len()
                    + self.snatches.len()
                    + self.tokens.len()
            }
            Writes::Unit3d { .. } => {
                self.users.len() + self.torrents.len() + self.clients.len() + self.on_torrents.len()
            }
        }
    }

    fn take(&mut self) -> Vec<Rows> {
        match *self.writes {
            Writes::Hotpath => self.hotpath_rows(),
            Writes::Xbt {
                users,
                peers,
                torrents,
                announce_log,
                scrape_log,
            } => {
                let mut rows = self.xbt_rows(users, peers, torrents);
                rows.extend(self.log_rows(announce_log, scrape_log));
                rows
            }
            Writes::Torrentpier { tracker } => self.torrentpier_rows(tracker),
            Writes::Gazelle {
                users,
                stats,
                peers,
                snatches,
                tokens,
            } => self.gazelle_rows([users, stats, peers, snatches, tokens]),
            Writes::Unit3d {
                users,
                torrents,
                peers,
                history,
            } => self.unit3d_rows([users, torrents, peers, history]),
        }
    }

    fn empty_like(&self) -> Box<dyn Queue> {
        Box::new(AccountQueue {
            writes: self.writes,
            users: HashMap::with_capacity(self.users.len()),
            on_torrents: HashMap::with_capacity(self.on_torrents.len()),
            torrents: HashMap::with_capacity(self.torrents.len()),
            clients: HashMap::with_capacity(self.clients.len()),
            pushed: HashMap::new(),
            logs: Vec::new(),
            snatches: Vec::new(),
            tokens: HashMap::new(),
        })
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Leaks `s` (a name from the config, made once per preset and names).
fn leak(s: &str) -> &'static str {
    Box::leak(s.to_string().into_boxed_str())
}

/// A table of leaked `columns`.
fn table(name: &str, columns: Vec<Column>, update_only: bool) -> &'static Table {
    Box::leak(Box::new(Table {
        name: leak(name),
        columns: Box::leak(columns.into_boxed_slice()),
        update_only,
        keeps_older: None,
    }))
}

/// The service of a site preset's names.
fn site_service(c: &PrivateConfig) -> &'static Service {
    let name = |k: &str| c.name(k).expect("every site preset names what it writes");
    let (service_name, writes, tables): (&'static str, Writes, Vec<&'static Table>) = match c.schema
    {
        PrivateSchema::Hotpath => return &PRIVATE,
        PrivateSchema::Xbt | PrivateSchema::XbtFiles => {
            let users = table(
                name("users"),
                vec![
                    col(leak(name("users.id")), Type::Int, Merge::Key),
                    col(leak(name("users.uploaded")), Type::Int, Merge::Add),
                    col(leak(name("users.downloaded")), Type::Int, Merge::Add),
                ],
                true,
            );
            let peers = table(
                name("peers"),
                vec![
                    col(leak(name("peers.torrent_id")), Type::Int, Merge::Key),
                    col("uid", Type::Int, Merge::Key),
                    col("active", Type::Int, Merge::Replace),
                    col("completed", Type::Int, Merge::Add),
                    col("downloaded", Type::Int, Merge::Add),
                    col("left", Type::Int, Merge::Replace),
                    col("uploaded", Type::Int, Merge::Add),
                    col("mtime", Type::Int, Merge::Max),
                ],
                false,
            );
            let torrents = table(
                name("torrents"),
                vec![
                    col(leak(name("torrents.id")), Type::Int, Merge::Key),
                    col(leak(name("torrents.seeders")), Type::Int, Merge::Replace),
                    col(leak(name("torrents.leechers")), Type::Int, Merge::Replace),
                    col(leak(name("torrents.completed")), Type::Int, Merge::Add),
                    col("mtime", Type::Int, Merge::Max),
                ],
                true,
            );
            // XBT's log tables, append-only (their `id` is the database's).
            let keep = Merge::Keep;
            // Named "": never written (the log settings stay off).
            let log_name = |k: &str, default| c.name(k).unwrap_or(default);
            let announce_log = table(
                log_name("announce_log", "xbt_announce_log"),
                vec![
                    col("ipv6", Type::Blob, keep).max_bytes(16),
                    col("port", Type::Int, keep),
                    col("event", Type::Int, keep),
                    col("info_hash", Type::Blob, keep).max_bytes(20),
                    col("peer_id", Type::Blob, keep).max_bytes(20),
                    col("downloaded", Type::Int, keep),
                    col("left0", Type::Int, keep),
                    col("uploaded", Type::Int, keep),
                    col("uid", Type::Int, keep),
                    col("mtime", Type::Int, keep),
                ],
                false,
            );
            let scrape_log = table(
                log_name("scrape_log", "xbt_scrape_log"),
                vec![
                    col("ipv6", Type::Blob, keep).max_bytes(16),
                    col("uid", Type::Int, keep),
                    col("mtime", Type::Int, keep),
                ],
                false,
            );
            (
                "private_xbt",
                Writes::Xbt {
                    users,
                    peers,
                    torrents,
                    announce_log,
                    scrape_log,
                },
                vec![users, peers, torrents, announce_log, scrape_log],
            )
        }
        PrivateSchema::Torrentpier => {
            let r = Merge::Replace;
            let tracker = table(
                name("peers"),
                vec![
                    col("peer_hash", Type::Text, Merge::Key),
                    col("topic_id", Type::Int, r),
                    col("user_id", Type::Int, r),
                    col("peer_id", Type::Text, r),
                    col("ip", Type::Text, r),
                    col("ipv6", Type::Text, r),
                    col("port", Type::Int, r),
                    col("seeder", Type::Int, r),
                    col("releaser", Type::Int, r),
                    col("tor_type", Type::Int, r),
                    col("uploaded", Type::Int, r),
                    col("downloaded", Type::Int, r),
                    col("remain", Type::Int, r),
                    col("speed_up", Type::Int, r),
                    col("speed_down", Type::Int, r),
                    col("up_add", Type::Int, Merge::Add),
                    col("down_add", Type::Int, Merge::Add),
                    col("update_time", Type::Int, r),
                    col("complete", Type::Int, r),
                ],
                false,
            );
            (
                "private_torrentpier",
                Writes::Torrentpier { tracker },
                vec![tracker],
            )
        }
        PrivateSchema::Gazelle => {
            let (r, add) = (Merge::Replace, Merge::Add);
            // Rows the site makes with the user and the torrent: only updated.
            let users = table(
                name("totals"),
                vec![
                    col(leak(name("totals.id")), Type::Int, Merge::Key),
                    col(leak(name("totals.uploaded")), Type::Int, add),
                    col(leak(name("totals.downloaded")), Type::Int, add),
                ],
                true,
            );
            let stats = table(
                name("torrent_stats"),
                vec![
                    col("TorrentID", Type::Int, Merge::Key),
                    col("Seeders", Type::Int, r),
                    col("Leechers", Type::Int, r),
                    col("Snatched", Type::Int, add),
                    col("Balance", Type::Int, add),
                    col("last_action", Type::Text, r),
                ],
                true,
            );
            let peers = table(
                name("peers"),
                vec![
                    col("uid", Type::Int, Merge::Key),
                    col("fid", Type::Int, Merge::Key),
                    col("peer_id", Type::Blob, Merge::Key).max_bytes(20),
                    col("active", Type::Int, r),
                    col("announced", Type::Int, add),
                    col("uploaded", Type::Int, r),
                    col("downloaded", Type::Int, r),
                    col("remaining", Type::Int, r),
                    col("upspeed", Type::Int, r),
                    col("downspeed", Type::Int, r),
                    col("timespent", Type::Int, add),
                    col("ip", Type::Text, r).max_bytes(15),
                    col("mtime", Type::Int, Merge::Max),
                ],
                false,
            );
            let keep = Merge::Keep;
            let snatches = table(
                name("snatches"),
                vec![
                    col("uid", Type::Int, keep),
                    col("fid", Type::Int, keep),
                    col("tstamp", Type::Int, keep),
                    col("IP", Type::Text, keep).max_bytes(15),
                ],
                false,
            );
            let tokens = table(
                name("tokens"),
                vec![
                    col("UserID", Type::Int, Merge::Key),
                    col("TorrentID", Type::Int, Merge::Key),
                    col("Downloaded", Type::Int, add),
                    col("Expired", Type::Int, r),
                ],
                true,
            );
            (
                "private_gazelle",
                Writes::Gazelle {
                    users,
                    stats,
                    peers,
                    snatches,
                    tokens,
                },
                vec![users, stats, peers, snatches, tokens],
            )
        }
        PrivateSchema::Unit3d => {
            let (r, add, keep) = (Merge::Replace, Merge::Add, Merge::Keep);
            // The site makes users and torrents: their rows are only updated.
            let users = table(
                name("totals"),
                vec![
                    col(leak(name("totals.id")), Type::Int, Merge::Key),
                    col(leak(name("totals.uploaded")), Type::Int, add),
                    col(leak(name("totals.downloaded")), Type::Int, add),
                ],
                true,
            );
            let torrents = table(
                name("torrents"),
                vec![
                    col(leak(name("torrents.id")), Type::Int, Merge::Key),
                    col(leak(name("torrents.seeders")), Type::Int, r),
                    col(leak(name("torrents.leechers")), Type::Int, r),
                    col(leak(name("torrents.completed")), Type::Int, add),
                ],
                true,
            );
            let peers = table(
                name("peers"),
                vec![
                    col("user_id", Type::Int, Merge::Key),
                    col("torrent_id", Type::Int, Merge::Key),
                    col("peer_id", Type::Blob, Merge::Key).max_bytes(20),
                    col("ip", Type::Blob, r).max_bytes(16),
                    col("port", Type::Int, r),
                    col("agent", Type::Text, r).max_bytes(64),
                    col("uploaded", Type::Int, r),
                    col("downloaded", Type::Int, r),
                    col("left", Type::Int, r),
                    col("seeder", Type::Int, r),
                    col("active", Type::Int, r),
                    col("visible", Type::Int, r),
                    col("created_at", Type::Text, keep),
                    col("updated_at", Type::Text, r),
                ],
                false,
            );
            let history = table(
                name("history"),
                vec![
                    col("user_id", Type::Int, Merge::Key),
                    col("torrent_id", Type::Int, Merge::Key),
                    col("agent", Type::Text, r).max_bytes(64),
                    col("uploaded", Type::Int, add),
                    col("actual_uploaded", Type::Int, add),
                    col("client_uploaded", Type::Int, r),
                    col("downloaded", Type::Int, add),
                    col("actual_downloaded", Type::Int, add),
                    col("client_downloaded", Type::Int, r),
                    col("seeder", Type::Int, r),
                    col("active", Type::Int, r),
                    col("seedtime", Type::Int, add),
                    col("immune", Type::Int, r),
                    col("created_at", Type::Text, keep),
                    col("updated_at", Type::Text, r),
                    col("completed_at", Type::Text, Merge::First),
                ],
                false,
            );
            (
                "private_unit3d",
                Writes::Unit3d {
                    users,
                    torrents,
                    peers,
                    history,
                },
                vec![users, torrents, peers, history],
            )
        }
    };
    let writes: &'static Writes = Box::leak(Box::new(writes));
    Box::leak(Box::new(Service {
        name: service_name,
        tags: &[
            TAG,
            TAG_CLIENT,
            TAG_COUNTS,
            TAG_REGISTRY,
            TAG_LOG,
            TAG_CLIENT_SINCE,
        ],
        tables: Box::leak(tables.into_boxed_slice()),
        // The site's tables are the site's: no migration.
        migrations: &[],
        queue: Box::leak(Box::new(move || {
            Box::new(AccountQueue::new(writes)) as Box<dyn Queue>
        })),
    }))
}

/// Private mode as the store knows it under `[private]`'s preset and names: [`PRIVATE`] for
/// hotpath's tables; for a site's (XBT's, TorrentPier's), a service writing them, made once
/// per distinct preset and names.
pub fn service(c: &PrivateConfig) -> &'static Service {
    type Made = Vec<((PrivateSchema, Vec<(String, String)>), &'static Service)>;
    static MADE: parking_lot::Mutex<Made> = parking_lot::Mutex::new(Vec::new());
    let key = (
        c.schema,
        c.names
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<Vec<_>>(),
    );
    let mut made = MADE.lock();
    if let Some((_, s)) = made.iter().find(|(k, _)| *k == key) {
        return s;
    }
    let s = site_service(c);
    made.push((key, s));
    s
}

/// `hp_user_totals`.
pub static USER_TOTALS: Table = Table {
    name: "hp_user_totals",
    columns: &[
        col("user_id", Type::Int, Merge::Key),
        col("uploaded", Type::Int, Merge::Add),
        col("downloaded", Type::Int, Merge::Add),
        col("uploaded_raw", Type::Int, Merge::Add),
        col("downloaded_raw", Type::Int, Merge::Add),
        col("suspicious", Type::Int, Merge::Add),
        col("updated_at", Type::Int, Merge::Max),
    ],
    update_only: false,
    keeps_older: None,
};

/// `hp_user_torrents`.
pub static USER_TORRENTS: Table = Table {
    name: "hp_user_torrents",
    columns: &[
        col("user_id", Type::Int, Merge::Key),
        col("torrent_id", Type::Int, Merge::Key),
        col("uploaded", Type::Int, Merge::Add),
        col("downloaded", Type::Int, Merge::Add),
        col("uploaded_raw", Type::Int, Merge::Add),
        col("downloaded_raw", Type::Int, Merge::Add),
        col("remaining", Type::Int, Merge::Replace),
        col("seeding", Type::Int, Merge::Replace),
        col("active", Type::Int, Merge::Replace),
        col("announces", Type::Int, Merge::Add),
        col("completed", Type::Int, Merge::Add),
        col("completed_at", Type::Int, Merge::Max),
        col("suspicious", Type::Int, Merge::Add),
        col("updated_at", Type::Int, Merge::Max),
    ],
    // Of two rows of one key (a failed batch under newer changes, replays of two workers'
    // journals), the state of the later announce stays; the counts add either way.
    update_only: false,
    keeps_older: None,
};

/// `hp_users`, as the push API writes it (the site writes it too).
pub static USERS: Table = Table {
    name: "hp_users",
    columns: &[
        col("user_id", Type::Int, Merge::Key),
        col("passkey", Type::Text, Merge::Replace).max_bytes(hotpath_wire::passkey::MAX_LEN),
        col("can_leech", Type::Int, Merge::Replace),
        col("removed", Type::Int, Merge::Replace),
        col("updated_at", Type::Int, Merge::Max),
    ],
    update_only: false,
    keeps_older: None,
};

/// `hp_private_torrents`, as the push API writes it (the site writes it too).
pub static TORRENTS: Table = Table {
    name: "hp_private_torrents",
    columns: &[
        col("torrent_id", Type::Int, Merge::Key),
        col("info_hash", Type::Blob, Merge::Replace).max_bytes(20),
        col("download_pct", Type::Int, Merge::Replace),
        col("upload_pct", Type::Int, Merge::Replace),
        col("removed", Type::Int, Merge::Replace),
        col("updated_at", Type::Int, Merge::Max),
    ],
    update_only: false,
    keeps_older: None,
};

/// Private mode, as the store knows it.
pub static PRIVATE: Service = Service {
    name: "private",
    tags: &[
        TAG,
        TAG_CLIENT,
        TAG_COUNTS,
        TAG_REGISTRY,
        TAG_LOG,
        TAG_CLIENT_SINCE,
    ],
    tables: &[&USER_TOTALS, &USER_TORRENTS, &USERS, &TORRENTS],
    queue: &|| Box::<AccountQueue>::default(),
    migrations: &[Migration {
        version: 1,
        name: "private users, torrents and accounting",
        sqlite: &[
            "CREATE TABLE hp_users (user_id INTEGER PRIMARY KEY, passkey TEXT NOT NULL UNIQUE, \
             can_leech INTEGER NOT NULL DEFAULT 1, updated_at INTEGER NOT NULL DEFAULT 0)",
            "CREATE INDEX hp_users_updated ON hp_users (updated_at)",
            "CREATE TABLE hp_private_torrents (torrent_id INTEGER PRIMARY KEY, \
             info_hash BLOB NOT NULL UNIQUE, download_pct INTEGER NOT NULL DEFAULT 100, \
             upload_pct INTEGER NOT NULL DEFAULT 100, updated_at INTEGER NOT NULL DEFAULT 0)",
            "CREATE INDEX hp_private_torrents_updated ON hp_private_torrents (updated_at)",
            "CREATE TABLE hp_user_totals (user_id INTEGER PRIMARY KEY, \
             uploaded INTEGER NOT NULL DEFAULT 0, downloaded INTEGER NOT NULL DEFAULT 0, \
             uploaded_raw INTEGER NOT NULL DEFAULT 0, downloaded_raw INTEGER NOT NULL DEFAULT 0, \
             updated_at INTEGER NOT NULL DEFAULT 0)",
            "CREATE TABLE hp_user_torrents (user_id INTEGER NOT NULL, torrent_id INTEGER NOT NULL, \
             uploaded INTEGER NOT NULL DEFAULT 0, downloaded INTEGER NOT NULL DEFAULT 0, \
             uploaded_raw INTEGER NOT NULL DEFAULT 0, downloaded_raw INTEGER NOT NULL DEFAULT 0, \
             remaining INTEGER NOT NULL DEFAULT 0, seeding INTEGER NOT NULL DEFAULT 0, \
             active INTEGER NOT NULL DEFAULT 0, announces INTEGER NOT NULL DEFAULT 0, \
             completed INTEGER NOT NULL DEFAULT 0, completed_at INTEGER NOT NULL DEFAULT 0, \
             updated_at INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (user_id, torrent_id))",
            "CREATE INDEX hp_user_torrents_torrent ON hp_user_torrents (torrent_id)",
        ],
        postgres: &[
            "CREATE TABLE hp_users (user_id BIGINT PRIMARY KEY, passkey TEXT NOT NULL UNIQUE, \
             can_leech SMALLINT NOT NULL DEFAULT 1, updated_at BIGINT NOT NULL DEFAULT 0)",
            "CREATE INDEX hp_users_updated ON hp_users (updated_at)",
            "CREATE TABLE hp_private_torrents (torrent_id BIGINT PRIMARY KEY, \
             info_hash BYTEA NOT NULL UNIQUE, download_pct INTEGER NOT NULL DEFAULT 100, \
             upload_pct INTEGER NOT NULL DEFAULT 100, updated_at BIGINT NOT NULL DEFAULT 0)",
            "CREATE INDEX hp_private_torrents_updated ON hp_private_torrents (updated_at)",
            "CREATE TABLE hp_user_totals (user_id BIGINT PRIMARY KEY, \
             uploaded BIGINT NOT NULL DEFAULT 0, downloaded BIGINT NOT NULL DEFAULT 0, \
             uploaded_raw BIGINT NOT NULL DEFAULT 0, downloaded_raw BIGINT NOT NULL DEFAULT 0, \
             updated_at BIGINT NOT NULL DEFAULT 0)",
            "CREATE TABLE hp_user_torrents (user_id BIGINT NOT NULL, torrent_id BIGINT NOT NULL, \
             uploaded BIGINT NOT NULL DEFAULT 0, downloaded BIGINT NOT NULL DEFAULT 0, \
             uploaded_raw BIGINT NOT NULL DEFAULT 0, downloaded_raw BIGINT NOT NULL DEFAULT 0, \
             remaining BIGINT NOT NULL DEFAULT 0, seeding BIGINT NOT NULL DEFAULT 0, \
             active BIGINT NOT NULL DEFAULT 0, announces BIGINT NOT NULL DEFAULT 0, \
             completed BIGINT NOT NULL DEFAULT 0, completed_at BIGINT NOT NULL DEFAULT 0, \
             updated_at BIGINT NOT NULL DEFAULT 0, PRIMARY KEY (user_id, torrent_id))",
            "CREATE INDEX hp_user_torrents_torrent ON hp_user_torrents (torrent_id)",
        ],
        mysql: &[
            "CREATE TABLE hp_users (user_id BIGINT PRIMARY KEY, \
             passkey VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL UNIQUE, \
             can_leech SMALLINT NOT NULL DEFAULT 1, updated_at BIGINT NOT NULL DEFAULT 0, \
             INDEX hp_users_updated (updated_at)) ENGINE=InnoDB",
            "CREATE TABLE hp_private_torrents (torrent_id BIGINT PRIMARY KEY, \
             info_hash BINARY(20) NOT NULL UNIQUE, download_pct INT NOT NULL DEFAULT 100, \
             upload_pct INT NOT NULL DEFAULT 100, updated_at BIGINT NOT NULL DEFAULT 0, \
             INDEX hp_private_torrents_updated (updated_at)) ENGINE=InnoDB",
            "CREATE TABLE hp_user_totals (user_id BIGINT PRIMARY KEY, \
             uploaded BIGINT NOT NULL DEFAULT 0, downloaded BIGINT NOT NULL DEFAULT 0, \
             uploaded_raw BIGINT NOT NULL DEFAULT 0, downloaded_raw BIGINT NOT NULL DEFAULT 0, \
             updated_at BIGINT NOT NULL DEFAULT 0) ENGINE=InnoDB",
            "CREATE TABLE hp_user_torrents (user_id BIGINT NOT NULL, torrent_id BIGINT NOT NULL, \
             uploaded BIGINT NOT NULL DEFAULT 0, downloaded BIGINT NOT NULL DEFAULT 0, \
             uploaded_raw BIGINT NOT NULL DEFAULT 0, downloaded_raw BIGINT NOT NULL DEFAULT 0, \
             remaining BIGINT NOT NULL DEFAULT 0, seeding SMALLINT NOT NULL DEFAULT 0, \
             active SMALLINT NOT NULL DEFAULT 0, announces BIGINT NOT NULL DEFAULT 0, \
             completed BIGINT NOT NULL DEFAULT 0, completed_at BIGINT NOT NULL DEFAULT 0, \
             updated_at BIGINT NOT NULL DEFAULT 0, PRIMARY KEY (user_id, torrent_id), \
             INDEX hp_user_torrents_torrent (torrent_id)) ENGINE=InnoDB",
        ],
    }, Migration {
        version: 2,
        name: "announces whose claim was cut to the credit bound",
        sqlite: &[
            "ALTER TABLE hp_user_totals ADD COLUMN suspicious INTEGER NOT NULL DEFAULT 0",
            "ALTER TABLE hp_user_torrents ADD COLUMN suspicious INTEGER NOT NULL DEFAULT 0",
        ],
        postgres: &[
            "ALTER TABLE hp_user_totals ADD COLUMN suspicious BIGINT NOT NULL DEFAULT 0",
            "ALTER TABLE hp_user_torrents ADD COLUMN suspicious BIGINT NOT NULL DEFAULT 0",
        ],
        mysql: &[
            "ALTER TABLE hp_user_totals ADD COLUMN suspicious BIGINT NOT NULL DEFAULT 0",
            "ALTER TABLE hp_user_torrents ADD COLUMN suspicious BIGINT NOT NULL DEFAULT 0",
        ],
    }, Migration {
        version: 3,
        name: "users and torrents removed through the push API",
        sqlite: &[
            "ALTER TABLE hp_users ADD COLUMN removed INTEGER NOT NULL DEFAULT 0",
            "ALTER TABLE hp_private_torrents ADD COLUMN removed INTEGER NOT NULL DEFAULT 0",
        ],
        postgres: &[
            "ALTER TABLE hp_users ADD COLUMN removed SMALLINT NOT NULL DEFAULT 0",
            "ALTER TABLE hp_private_torrents ADD COLUMN removed SMALLINT NOT NULL DEFAULT 0",
        ],
        mysql: &[
            "ALTER TABLE hp_users ADD COLUMN removed SMALLINT NOT NULL DEFAULT 0",
            "ALTER TABLE hp_private_torrents ADD COLUMN removed SMALLINT NOT NULL DEFAULT 0",
        ],
    }],
};

#[cfg(test)]
mod tests {
    use super::*;
    use hotpath_store::queue::Queues;

    fn change(user: u32, torrent: u32, up: u64, at: u32) -> AccountChange {
        AccountChange {
            user,
            torrent,
            uploaded: up,
            downloaded: up / 2,
            uploaded_raw: up * 2,
            downloaded_raw: up,
            remaining: u64::from(at),
            completed: 0,
            flags: AccountChange::SEEDING,
            at,
            client: None,
        }
    }

    fn client(ip: &str, up: u64) -> Client {
        Client {
            peer_id: *b"-TR4050-\x01abcdefghijk",
            ip: ip.parse().unwrap(),
            port: 51413,
            uploaded: up,
            downloaded: 7,
            speed_up: 3,
            speed_down: 4,
            since: 30,
        }
    }

    fn config(schema: &str) -> PrivateConfig {
        let text = format!("[private]\nschema = \"{schema}\"\n");
        hotpath_config::Config::parse(&text).unwrap().private
    }

    #[test]
    fn clients_and_counts_round_trip_through_their_encodings() {
        for ip in ["203.0.113.5", "2001:db8::7"] {
            let c = AccountChange {
                client: Some(client(ip, u64::MAX)),
                ..change(7, 9, 100, 1234)
            };
            let mut b = Vec::new();
            c.encode(&mut b);
            assert_eq!(b.len(), ACCOUNT_MAX_LEN);
            assert_eq!(AccountChange::decode(&b), Some((c, ACCOUNT_MAX_LEN)));
            assert!(AccountChange::decode(&b[..ACCOUNT_MAX_LEN - 1]).is_none());
            // A family byte that is neither, or an IPv4 address with bytes after it, is not
            // a change: each client has one encoding.
            let family = ACCOUNT_LEN + 36;
            let mut bad = b.clone();
            bad[family] = 2;
            assert!(AccountChange::decode(&bad).is_none());
            if b[family] == 0 {
                let mut bad = b.clone();
                bad[family - 1] = 1;
                assert!(AccountChange::decode(&bad).is_none());
            }
        }
        let n = CountsChange {
            torrent: 3,
            seeders: 4,
            leechers: 5,
            at: 6,
        };
        let mut b = Vec::new();
        n.encode(&mut b);
        assert_eq!(CountsChange::decode(&b), Some((n, COUNTS_LEN)));
        assert!(CountsChange::decode(&b[..COUNTS_LEN - 1]).is_none());
    }

    #[test]
    fn xbt_gets_credited_users_raw_peers_and_torrent_counts() {
        let s = service(&config("xbt"));
        assert_eq!(s.name, "private_xbt");
        assert!(s.migrations.is_empty(), "the site's tables are the site's");
        let names: Vec<_> = s.tables.iter().map(|t| t.name).collect();
        assert_eq!(
            names,
            [
                "xbt_users",
                "xbt_peers",
                "xbt_torrents",
                "xbt_announce_log",
                "xbt_scrape_log"
            ]
        );
        assert!(std::ptr::eq(s, service(&config("xbt"))), "made once");
        let mut q = Queues::new(&[s]).unwrap();
        q.push(&change(1, 10, 100, 50)).unwrap();
        q.push(&AccountChange {
            completed: 1,
            ..change(1, 10, 10, 60)
        })
        .unwrap();
        q.push(&CountsChange {
            torrent: 10,
            seeders: 2,
            leechers: 1,
            at: 61,
        })
        .unwrap();
        let b = q.take();
        let users = b.part(s.tables[0]).unwrap();
        assert_eq!(users.row(0), [1i64, 110, 55].map(Value::Int));
        let peers = b.part(s.tables[1]).unwrap();
        assert_eq!(
            peers.row(0),
            [10i64, 1, 1, 1, 110, 60, 220, 60].map(Value::Int),
            "tid, uid, active, completed, downloaded, left, uploaded (raw), mtime"
        );
        let torrents = b.part(s.tables[2]).unwrap();
        assert_eq!(torrents.row(0), [10i64, 2, 1, 1, 61].map(Value::Int));
        // A completion without a snapshot leaves seeders and leechers as they are.
        q.push(&AccountChange {
            completed: 1,
            ..change(2, 11, 1, 70)
        })
        .unwrap();
        let b = q.take();
        let t = b.part(s.tables[2]).unwrap();
        assert_eq!(
            t.row(0),
            [
                Value::Int(11),
                Value::Null,
                Value::Null,
                Value::Int(1),
                Value::Int(70)
            ]
        );
        let xf = service(&config("xbt_files"));
        assert_eq!(xf.tables[1].name, "xbt_files_users");
        assert_eq!(xf.tables[1].columns[0].name, "fid");
    }

    #[test]
    fn torrentpier_gets_a_row_per_client_that_its_cron_credits() {
        let s = service(&config("torrentpier"));
        let tracker = s.tables[0];
        assert_eq!(tracker.name, "bb_bt_tracker");
        let mut q = Queues::new(&[s]).unwrap();
        let c = client("203.0.113.5", 1000);
        q.push(&AccountChange {
            client: Some(c),
            ..change(1, 10, 100, 50)
        })
        .unwrap();
        q.push(&AccountChange {
            client: Some(Client {
                uploaded: 1100,
                ..c
            }),
            // User 1 uploaded torrent 10, a silver one: the tracker marks their clients on
            // it, and copies its type.
            flags: AccountChange::SEEDING
                | AccountChange::RELEASER
                | 2 << AccountChange::TOR_TYPE_SHIFT,
            ..change(1, 10, 10, 60)
        })
        .unwrap();
        // Another client of the same user on the same torrent, over IPv6, stopping.
        q.push(&AccountChange {
            client: Some(Client {
                peer_id: [b'x'; 20],
                ..client("2001:db8::7", 5)
            }),
            flags: AccountChange::STOPPED,
            ..change(1, 10, 1, 61)
        })
        .unwrap();
        // A change journaled without its client (another preset's run).
        q.push(&change(2, 10, 40, 62)).unwrap();
        // Counts a journal could hold though this preset writes none: read, not kept.
        q.push(&CountsChange {
            torrent: 10,
            seeders: 1,
            leechers: 1,
            at: 62,
        })
        .unwrap();
        let held = q.get::<AccountQueue>().unwrap();
        assert!(held.torrents.is_empty() && held.users.is_empty());
        assert_eq!(q.rows(), 3);
        let b = q.take();
        let rows = b.part(tracker).unwrap();
        assert_eq!(rows.len(), 3);
        let by_hash = |t: u32, u: u32, id: &[u8; 20]| {
            let h = peer_hash(t, u, id);
            assert_eq!(h.len(), 32);
            rows.iter().find(|r| r[0].text() == h).unwrap().to_vec()
        };
        let first = by_hash(10, 1, &c.peer_id);
        assert_eq!(
            first[3].text(),
            "-TR4050-.abcdefghijk",
            "peer id, printable"
        );
        // Addresses as TorrentPier's ip2long writes them: one decimal number.
        assert_eq!(first[4].text(), "3405803781", "203.0.113.5");
        assert_eq!(first[5], Value::Null, "no IPv6");
        assert_eq!(
            first[6..],
            [51413i64, 1, 1, 2, 1100, 7, 60, 3, 4, 110, 55, 60, 1].map(Value::Int),
            "port, seeder, releaser, tor_type, uploaded, downloaded, remain, speeds, up_add, \
             down_add, update_time, complete"
        );
        let stopped = by_hash(10, 1, &[b'x'; 20]);
        assert_eq!(
            stopped[5].text(),
            "42540766411282592856903984951653826567",
            "2001:db8::7"
        );
        assert_eq!(
            stopped[17],
            Value::Int(0),
            "update_time 0: the cron deletes it"
        );
        let orphan = by_hash(10, 2, &[0; 20]);
        assert_eq!(orphan[15..18], [40i64, 20, 0].map(Value::Int));
        assert_eq!(orphan[8], Value::Int(0), "not the releaser");
    }

    #[test]
    fn a_client_journaled_before_its_seconds_were_kept_still_decodes() {
        let c = AccountChange {
            client: Some(client("203.0.113.5", 9)),
            ..change(7, 9, 100, 1234)
        };
        let mut b = Vec::new();
        c.encode(&mut b);
        assert_eq!(b[0], TAG_CLIENT_SINCE);
        // Tag 6: the same without the last four bytes, as a change journaled before the
        // seconds were kept, and as a client's first announce (no seconds) is still written.
        let mut old = b[..ACCOUNT_MAX_LEN - 4].to_vec();
        old[0] = TAG_CLIENT;
        let (d, len) = AccountChange::decode(&old).unwrap();
        assert_eq!(len, ACCOUNT_MAX_LEN - 4);
        let first = AccountChange {
            client: c.client.map(|k| Client { since: 0, ..k }),
            ..c
        };
        assert_eq!(first, d);
        let mut again = Vec::new();
        first.encode(&mut again);
        assert_eq!(again, old, "one encoding per change");
        assert_eq!(first.encoded_len(), old.len());
        // Tag 11 with no seconds is not a change: that one is tag 6's.
        let mut zero = b.clone();
        zero[ACCOUNT_MAX_LEN - 4..].fill(0);
        assert!(AccountChange::decode(&zero).is_none());
    }

    #[test]
    fn gazelle_gets_totals_stats_client_rows_snatches_and_tokens() {
        let s = service(&config("gazelle"));
        let names: Vec<&str> = s.tables.iter().map(|t| t.name).collect();
        assert_eq!(
            names,
            [
                "users_leech_stats",
                "torrents_leech_stats",
                "xbt_files_users",
                "xbt_snatched",
                "users_freeleeches"
            ]
        );
        let mut q = Queues::new(&[s]).unwrap();
        let c = client("203.0.113.5", 1000);
        q.push(&AccountChange {
            client: Some(c),
            ..change(1, 10, 100, 50)
        })
        .unwrap();
        // The same client again, completing under a freeleech token; then an IP-protected
        // user's client, and one over IPv6 (which Gazelle's 15-character column cannot hold).
        q.push(&AccountChange {
            client: Some(Client {
                uploaded: 1100,
                ..c
            }),
            completed: 1,
            flags: AccountChange::SEEDING | AccountChange::TOKEN,
            ..change(1, 10, 10, 60)
        })
        .unwrap();
        q.push(&AccountChange {
            client: Some(c),
            flags: AccountChange::PROTECTED,
            completed: 1,
            ..change(2, 10, 4, 61)
        })
        .unwrap();
        q.push(&AccountChange {
            client: Some(client("2001:db8::7", 5)),
            flags: AccountChange::STOPPED,
            ..change(3, 11, 2, 62)
        })
        .unwrap();
        q.push(&CountsChange {
            torrent: 10,
            seeders: 2,
            leechers: 0,
            at: 86_400 + 3661,
        })
        .unwrap();
        let b = q.take();
        let part = |i: usize| b.part(s.tables[i]).unwrap();
        let users = part(0);
        assert_eq!(
            users.iter().map(|r| r.to_vec()).collect::<Vec<_>>(),
            [[1i64, 110, 55], [2, 4, 2], [3, 2, 1]].map(|r| r.map(Value::Int).to_vec())
        );
        let stats: Vec<Vec<Value>> = part(1).iter().map(|r| r.to_vec()).collect();
        // Torrent 10: its counts, two snatches, raw up less raw down, and the time of a
        // count with seeders; torrent 11: no count came, so nothing replaces it.
        assert_eq!(
            stats[0],
            [
                Value::Int(10),
                Value::Int(2),
                Value::Int(0),
                Value::Int(2),
                Value::Int(220 + 8 - 110 - 4),
                Value::from("1970-01-02 01:01:01"),
            ]
        );
        assert_eq!(
            stats[1],
            [
                Value::Int(11),
                Value::Null,
                Value::Null,
                Value::Int(0),
                Value::Int(2),
                Value::Null
            ]
        );
        let peers = part(2);
        assert_eq!(peers.len(), 3);
        let row = |user: i64| {
            peers
                .iter()
                .find(|r| r[0] == Value::Int(user))
                .unwrap()
                .to_vec()
        };
        assert_eq!(
            row(1)[3..],
            [
                Value::Int(1),
                Value::Int(2),
                Value::Int(1100),
                Value::Int(7),
                Value::Int(60),
                Value::Int(3),
                Value::Int(4),
                Value::Int(60),
                Value::from("203.0.113.5"),
                Value::Int(60),
            ],
            "active, announced, uploaded, downloaded, remaining, speeds, timespent, ip, mtime"
        );
        assert_eq!(row(2)[11], Value::from(""), "protected: no address");
        assert_eq!(row(3)[3], Value::Int(0), "stopped");
        assert_eq!(row(3)[11], Value::from(""), "IPv6: no address");
        let snatches = part(3);
        assert_eq!(
            snatches.iter().map(|r| r.to_vec()).collect::<Vec<_>>(),
            [
                vec![
                    Value::Int(1),
                    Value::Int(10),
                    Value::Int(60),
                    Value::from("203.0.113.5")
                ],
                vec![
                    Value::Int(2),
                    Value::Int(10),
                    Value::Int(61),
                    Value::from("")
                ],
            ]
        );
        let tokens: Vec<Vec<Value>> = part(4).iter().map(|r| r.to_vec()).collect();
        assert_eq!(
            tokens[0],
            [1i64, 10, 10, 1].map(Value::Int),
            "what the token saved (raw), and ended by the completion"
        );
        assert_eq!(tokens.len(), 1);
    }

    #[test]
    fn unit3d_gets_totals_counts_client_rows_and_history() {
        let s = service(&config("unit3d"));
        let names: Vec<&str> = s.tables.iter().map(|t| t.name).collect();
        assert_eq!(names, ["users", "torrents", "peers", "history"]);
        let mut q = Queues::new(&[s]).unwrap();
        let c = client("203.0.113.5", 1000);
        // A client leeches, completes (its seconds since were downloading), seeds on (its
        // seconds now count as seeding), under an immune group.
        q.push(&AccountChange {
            client: Some(Client { since: 0, ..c }),
            flags: 0,
            ..change(1, 10, 100, 50)
        })
        .unwrap();
        q.push(&AccountChange {
            client: Some(Client { since: 30, ..c }),
            completed: 1,
            flags: AccountChange::SEEDING | AccountChange::IMMUNE,
            ..change(1, 10, 10, 80)
        })
        .unwrap();
        q.push(&AccountChange {
            client: Some(Client {
                uploaded: 1200,
                since: 40,
                ..c
            }),
            flags: AccountChange::SEEDING | AccountChange::IMMUNE,
            ..change(1, 10, 20, 120)
        })
        .unwrap();
        // Past UNIT3D-Announce's TTL: not seeding time.
        q.push(&AccountChange {
            client: Some(Client {
                since: SEEDTIME_TTL + 1,
                ..c
            }),
            flags: AccountChange::SEEDING | AccountChange::IMMUNE,
            ..change(1, 10, 0, 9000)
        })
        .unwrap();
        q.push(&CountsChange {
            torrent: 10,
            seeders: 1,
            leechers: 3,
            at: 9000,
        })
        .unwrap();
        let b = q.take();
        let rows = |i: usize| -> Vec<Vec<Value>> {
            b.part(s.tables[i])
                .unwrap()
                .iter()
                .map(|r| r.to_vec())
                .collect()
        };
        assert_eq!(rows(0), [[1i64, 130, 65].map(Value::Int).to_vec()]);
        assert_eq!(rows(1), [[10i64, 1, 3, 1].map(Value::Int).to_vec()]);
        let peers = rows(2);
        assert_eq!(peers.len(), 1);
        assert_eq!(
            peers[0][3],
            Value::Blob([203, 0, 113, 5].into()),
            "the address, 4 bytes"
        );
        assert_eq!(
            peers[0][5],
            Value::from("-TR4050-"),
            "the client its peer id names"
        );
        assert_eq!(
            peers[0][6..12],
            [1000i64, 7, 9000, 1, 1, 1].map(Value::Int),
            "uploaded, downloaded, left as reported; seeder, active, visible"
        );
        assert_eq!(peers[0][13], Value::from("1970-01-01 02:30:00"));
        let history = rows(3);
        assert_eq!(
            history[0][3..13],
            [130i64, 260, 1000, 65, 130, 7, 1, 1, 40, 1].map(Value::Int),
            "credited and actual counts added, the client's own, seeding, active, the \
             seconds seeded, immune"
        );
        assert_eq!(history[0][2], Value::from("-TR4050-"));
        assert_eq!(
            history[0][15],
            Value::from("1970-01-01 00:01:20"),
            "completed at its first completion"
        );
    }

    #[test]
    fn encoding_round_trips_and_rejects_others() {
        let c = AccountChange {
            completed: 1,
            flags: 3,
            ..change(7, 9, u64::MAX / 4, 1234)
        };
        let mut b = Vec::new();
        c.encode(&mut b);
        assert_eq!(b.len(), ACCOUNT_LEN);
        assert_eq!(AccountChange::decode(&b), Some((c, ACCOUNT_LEN)));
        assert!(AccountChange::decode(&b[..ACCOUNT_LEN - 1]).is_none());
        b[0] = 1;
        assert!(AccountQueue::default().apply(&b).is_none());
    }

    /// Pushed users and torrents round-trip through the journal's bytes, hostile bytes are
    /// not one, and only hotpath's own preset writes them: latest per id, into `hp_users`
    /// and `hp_private_torrents`.
    #[test]
    fn pushed_users_and_torrents_are_written_into_hotpaths_tables_only() {
        let user = |id, passkey: &str, removed, at| RegistryChange::User {
            id,
            passkey: passkey.into(),
            can_leech: true,
            removed,
            at,
        };
        let torrent = RegistryChange::Torrent {
            id: 4,
            info_hash: [9; 20],
            download_pct: 0,
            upload_pct: 200,
            removed: false,
            at: 50,
        };
        for c in [
            user(3, "abc", false, 7),
            user(3, "abc", true, 8),
            torrent.clone(),
        ] {
            let mut b = Vec::new();
            c.encode(&mut b);
            assert_eq!(b.len(), c.encoded_len());
            assert_eq!(RegistryChange::decode(&b), Some((c.clone(), b.len())));
            assert!(RegistryChange::decode(&b[..b.len() - 1]).is_none());
        }
        let mut b = Vec::new();
        user(3, "abc", false, 7).encode(&mut b);
        for (i, v) in [(1, 4), (2, 0), (10, 2), (12, b';')] {
            let mut bad = b.clone();
            bad[i] = v;
            if i == 2 {
                bad[2..6].copy_from_slice(&[0; 4]);
            }
            assert!(RegistryChange::decode(&bad).is_none(), "byte {i} = {v}");
        }
        let mut q = Queues::new(&[&PRIVATE]).unwrap();
        q.push(&user(3, "abc", false, 7)).unwrap();
        q.push(&user(3, "abc", true, 8)).unwrap();
        q.push(&torrent).unwrap();
        let b = q.take();
        let u = b.part(&USERS).unwrap();
        assert_eq!(u.len(), 1, "the latest per user");
        assert_eq!(
            u.row(0).to_vec(),
            vec![
                Value::Int(3),
                Value::from("abc"),
                Value::Int(1),
                Value::Int(1),
                Value::Int(8)
            ]
        );
        let t = b.part(&TORRENTS).unwrap();
        assert_eq!(t.row(0)[1], Value::Blob([9; 20].into()));
        assert_eq!(t.row(0)[2..5], [0i64, 200, 0].map(Value::Int));
        // A site's preset reads them (a journal of another run) and writes nothing.
        let s = service(&config("xbt"));
        let mut q = Queues::new(&[s]).unwrap();
        q.push(&torrent).unwrap();
        assert_eq!(q.rows(), 0);
    }

    /// XBT's announce and scrape logs: round trips, hostile bytes, rows in order into XBT's
    /// tables only.
    #[test]
    fn logged_announces_and_scrapes_become_xbts_log_rows() {
        let scrape = LogChange {
            ip: [7; 16],
            uid: 3,
            at: 100,
            announce: None,
        };
        let announce = LogChange {
            announce: Some(LoggedAnnounce {
                port: 6881,
                event: 2,
                info_hash: [1; 20],
                peer_id: [2; 20],
                downloaded: 5,
                left: 6,
                uploaded: u64::MAX,
            }),
            ..scrape
        };
        for c in [scrape, announce] {
            let mut b = Vec::new();
            c.encode(&mut b);
            assert_eq!(b.len(), c.encoded_len());
            assert_eq!(LogChange::decode(&b), Some((c, b.len())));
            assert!(LogChange::decode(&b[..b.len() - 1]).is_none());
        }
        let mut b = Vec::new();
        announce.encode(&mut b);
        let mut bad = b.clone();
        bad[1] = 2;
        assert!(
            LogChange::decode(&bad).is_none(),
            "neither announce nor scrape"
        );
        bad = b.clone();
        bad[LogChange::SCRAPE + 2] = 4;
        assert!(LogChange::decode(&bad).is_none(), "no such event");
        let s = service(&config("xbt"));
        let (announce_t, scrape_t) = (s.tables[3], s.tables[4]);
        assert_eq!(
            (announce_t.name, scrape_t.name),
            ("xbt_announce_log", "xbt_scrape_log")
        );
        let mut q = Queues::new(&[s]).unwrap();
        q.push(&announce).unwrap();
        q.push(&scrape).unwrap();
        q.push(&announce).unwrap();
        let b = q.take();
        let a = b.part(announce_t).unwrap();
        assert_eq!(a.len(), 2, "every announce, in order");
        assert_eq!(
            a.row(0)[1..3],
            [Value::Int(6881), Value::Int(2)],
            "port, event"
        );
        assert_eq!(a.row(0)[7], Value::Int(i64::MAX), "uploaded, saturated");
        assert_eq!(
            b.part(scrape_t).unwrap().row(0).to_vec(),
            [Value::Blob([7; 16].into()), Value::Int(3), Value::Int(100)],
            "an IPv6 address in 16 bytes (an IPv4 one in 4)"
        );
        // hotpath's own preset reads them (a journal of another run) and writes nothing.
        let mut q = Queues::new(&[&PRIVATE]).unwrap();
        q.push(&announce).unwrap();
        assert_eq!(q.rows(), 0);
    }

    #[test]
    fn hostile_counts_saturate_instead_of_overflowing() {
        // A journal anyone could write: counts at the top of their range merge, saturated.
        let mut q = Queues::new(&[&PRIVATE]).unwrap();
        let top = AccountChange {
            completed: u64::MAX,
            ..change(1, 2, u64::MAX / 2, 9)
        };
        q.push(&top).unwrap();
        q.push(&top).unwrap();
        let b = q.take();
        let t = b.part(&USER_TORRENTS).unwrap();
        assert_eq!(t.row(0)[10], Value::Int(i64::MAX), "completed");
        assert_eq!(t.row(0)[4], Value::Int(i64::MAX), "uploaded_raw");
    }

    #[test]
    fn deltas_add_per_user_and_per_torrent_and_the_latest_state_wins() {
        let mut q = Queues::new(&[&PRIVATE]).unwrap();
        q.push(&change(1, 10, 100, 50)).unwrap();
        q.push(&change(1, 11, 10, 40)).unwrap();
        q.push(&AccountChange {
            completed: 1,
            flags: AccountChange::STOPPED,
            ..change(1, 10, 1000, 60)
        })
        .unwrap();
        // An older announce replayed after a newer one adds its counts, not its state.
        q.push(&change(1, 10, 1, 55)).unwrap();
        assert_eq!(q.rows(), 3);
        let b = q.take();
        let users = b.part(&USER_TOTALS).unwrap();
        assert_eq!(users.len(), 1);
        assert_eq!(
            users.row(0)[1..],
            [1111i64, 555, 2222, 1111, 0, 60].map(Value::Int)
        );
        let t = b.part(&USER_TORRENTS).unwrap();
        assert_eq!(t.len(), 2);
        let ten = t.row(0);
        assert_eq!(ten[1], Value::Int(10));
        assert_eq!(ten[2], Value::Int(1101));
        assert_eq!(
            ten[6..],
            [60i64, 0, 0, 3, 1, 60, 0, 60].map(Value::Int),
            "remaining, seeding, active, announces, completed, completed_at, suspicious, \
             updated_at"
        );
    }
}
