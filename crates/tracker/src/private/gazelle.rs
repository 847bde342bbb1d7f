//! Gazelle, as its tracker Ocelot serves it: what the site's tables hold beside users and
//! torrents (IP-protected users, freeleech tokens, the client whitelist, read each poll), the
//! reasons a deleted torrent's announces are told, and Ocelot's update API, which Gazelle's
//! code calls as `GET /<TRACKER_SECRET>/update?action=…` and which answers `success`, and
//! Ocelot's report API, which the site's tracker pages read as
//! `GET /<TRACKER_REPORTKEY>/report?get=…`.
//!
//! Every byte of a call comes from whoever holds the site's secret: each action is decoded
//! and checked ([`decode`]) before anything applies it, a bad one gets a 400 naming the
//! parameter, and lists in one call are capped.
//!
//! Owns: [`Gazelle`], [`Action`], [`Report`], [`Figures`]. Must not: do I/O.

use std::collections::HashSet;

use hotpath_wire::query::{pairs, percent_decode, Id20};
use parking_lot::{Mutex, RwLock};

use super::push::{ApiError, Push, MAX_BATCH};
use super::{put, Private};

/// Seconds a deleted torrent's reason is told to its announces (Ocelot's
/// `del_reason_lifetime` default).
pub const REASON_SECS: u32 = 86_400;
/// Deleted torrents whose reasons are held at once; past it the oldest goes.
pub const MAX_REASONS: usize = 10_000;
/// Longest decoded value of one parameter (32 passkeys of 32 characters, or 51 info
/// hashes, fit a 2 KiB query; a longer one is refused).
const MAX_VALUE: usize = 64 * 1024;

/// The failure reasons of a torrent deleted for one of Gazelle's reasons (by its code), as
/// the site's users know them from Ocelot.
const DELETED: [&str; 23] = [
    "Unregistered torrent: Dupe",
    "Unregistered torrent: Trump",
    "Unregistered torrent: Bad File Names",
    "Unregistered torrent: Bad Folder Names",
    "Unregistered torrent: Bad Tags",
    "Unregistered torrent: Disallowed Format",
    "Unregistered torrent: Discs Missing",
    "Unregistered torrent: Discography",
    "Unregistered torrent: Edited Log",
    "Unregistered torrent: Inaccurate Bitrate",
    "Unregistered torrent: Low Bitrate",
    "Unregistered torrent: Mutt Rip",
    "Unregistered torrent: Disallowed Source",
    "Unregistered torrent: Encode Errors",
    "Unregistered torrent: Specifically Banned",
    "Unregistered torrent: Tracks Missing",
    "Unregistered torrent: Transcode",
    "Unregistered torrent: Unapproved Cassette",
    "Unregistered torrent: Unsplit Album",
    "Unregistered torrent: User Compilation",
    "Unregistered torrent: Wrong Format",
    "Unregistered torrent: Wrong Media",
    "Unregistered torrent: Audience Recording",
];

/// What the Gazelle preset keeps beside the registries.
#[derive(Debug)]
pub struct Gazelle {
    /// The site's secret (`private.site_secret`; empty: the update API is off; a reload may
    /// change it).
    pub secret: RwLock<String>,
    /// The site's report key (`private.report_secret`; empty: the report API is off).
    pub report_secret: RwLock<String>,
    /// IP-protected users (`Visible` '0', or `IP` 127.0.0.1): no address of theirs is
    /// written.
    pub protected: RwLock<HashSet<u32>>,
    /// Freeleech tokens (user, torrent) not expired.
    pub tokens: RwLock<HashSet<(u32, u32)>>,
    /// Torrents deleted through the update API: the reason code and unix second.
    deleted: Mutex<hashbrown::HashMap<Id20, (Option<u8>, u32)>>,
    /// Most tokens held (`private.max_tokens`).
    pub max_tokens: usize,
    /// The config's allow list (`private.peer_id_allow`), in force while the whitelist
    /// table lists none.
    pub config_allow: Vec<Box<[u8]>>,
    /// Deleted torrents' reasons forgotten before their day was over, at the cap.
    pub forgotten: hotpath_metrics::Counter,
}

impl Gazelle {
    /// Empty, with `[private]`'s site secret, token cap and allow list.
    pub fn new(c: &hotpath_config::PrivateConfig) -> Gazelle {
        Gazelle {
            secret: RwLock::new(c.site_secret.clone()),
            report_secret: RwLock::new(c.report_secret.clone()),
            protected: RwLock::new(HashSet::new()),
            tokens: RwLock::new(HashSet::new()),
            deleted: Mutex::new(hashbrown::HashMap::new()),
            max_tokens: c.max_tokens,
            config_allow: super::Rules::of(c).peer_id_allow,
            forgotten: hotpath_metrics::Counter::default(),
        }
    }

    /// Whether `user` has a freeleech token on `torrent`.
    pub fn token(&self, user: u32, torrent: u32) -> bool {
        let tokens = self.tokens.read();
        !tokens.is_empty() && tokens.contains(&(user, torrent))
    }

    /// Whether `user` is IP-protected.
    pub fn is_protected(&self, user: u32) -> bool {
        let p = self.protected.read();
        !p.is_empty() && p.contains(&user)
    }

    /// A token used up: the download that completed under it ends it, as Ocelot ends it
    /// (the site's row is marked expired by the write behind).
    pub fn spend(&self, user: u32, torrent: u32) {
        self.tokens.write().remove(&(user, torrent));
    }

    /// The failure reason for an unregistered torrent that was deleted through the update
    /// API less than [`REASON_SECS`] ago, if it was.
    pub fn deleted_reason(&self, info_hash: &Id20, at: u32) -> Option<&'static str> {
        let deleted = self.deleted.lock();
        let &(code, when) = deleted.get(info_hash)?;
        if at.saturating_sub(when) >= REASON_SECS {
            return None;
        }
        Some(match code.and_then(|c| DELETED.get(usize::from(c))) {
            Some(text) => text,
            None => "Unregistered torrent",
        })
    }

    fn remember_deleted(&self, info_hash: Id20, code: Option<u8>, at: u32) {
        let mut deleted = self.deleted.lock();
        if deleted.len() >= MAX_REASONS {
            deleted.retain(|_, (_, when)| at.saturating_sub(*when) < REASON_SECS);
            if deleted.len() >= MAX_REASONS {
                let oldest = deleted.iter().min_by_key(|(_, (_, w))| *w).map(|(h, _)| *h);
                if let Some(h) = oldest {
                    deleted.remove(&h);
                    self.forgotten.add(1);
                }
            }
        }
        deleted.insert(info_hash, (code, at));
    }
}

/// How a torrent is credited, as Gazelle's `FreeTorrent` says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Free {
    /// '0': both ways.
    Normal,
    /// '1': no download counted.
    Free,
    /// '2' (any other value, as Ocelot reads it): nothing counted.
    Neutral,
}

impl Free {
    /// Of a `FreeTorrent` value.
    pub fn of(v: &[u8]) -> Free {
        match v {
            b"0" => Free::Normal,
            b"1" => Free::Free,
            _ => Free::Neutral,
        }
    }

    /// The (download, upload) percents credited.
    pub fn pcts(self) -> (u16, u16) {
        match self {
            Free::Normal => (100, 100),
            Free::Free => (0, 100),
            Free::Neutral => (0, 0),
        }
    }
}

/// One call of Ocelot's update API.
// Each variant's doc names the query parameters its fields hold.
#[allow(missing_docs)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// `change_passkey`: `oldpasskey` becomes `newpasskey`.
    ChangePasskey { old: Vec<u8>, new: String },
    /// `add_torrent`: `id`, `info_hash`, `freetorrent`.
    AddTorrent {
        id: u32,
        info_hash: Id20,
        free: Free,
    },
    /// `update_torrent` (`info_hash`) and `update_torrents` (`info_hashes`, 20 bytes each),
    /// with `freetorrent`.
    UpdateTorrents { info_hashes: Vec<Id20>, free: Free },
    /// `delete_torrent`: `info_hash`, and the `reason` code its announces are told.
    DeleteTorrent { info_hash: Id20, reason: Option<u8> },
    /// `add_token`: `info_hash`, `userid`.
    AddToken { info_hash: Id20, user: u32 },
    /// `remove_token`: `info_hash`, `userid`.
    RemoveToken { info_hash: Id20, user: u32 },
    /// `add_user`: `id`, `passkey`, and `visible` ('0': IP-protected).
    AddUser {
        id: u32,
        passkey: String,
        protected: bool,
    },
    /// `remove_user` (`passkey`) and `remove_users` (`passkeys`, 32 characters each).
    RemoveUsers { passkeys: Vec<Vec<u8>> },
    /// `update_user`: `passkey`, `can_leech` ('0': may only seed), `visible`.
    UpdateUser {
        passkey: Vec<u8>,
        can_leech: bool,
        protected: bool,
    },
    /// `add_whitelist`: `peer_id` (a prefix).
    AddWhitelist { prefix: Vec<u8> },
    /// `remove_whitelist`: `peer_id`.
    RemoveWhitelist { prefix: Vec<u8> },
    /// `edit_whitelist`: `old_peer_id` becomes `new_peer_id`.
    EditWhitelist { old: Vec<u8>, new: Vec<u8> },
    /// `update_announce_interval`: `new_announce_interval` seconds.
    AnnounceInterval { secs: u32 },
    /// `update_announce_jitter`: accepted; hotpath tells no jitter.
    AnnounceJitter,
    /// `info_torrent`: `info_hash` in hex; answered with the torrent's id and freeleech.
    InfoTorrent {
        hex: String,
        info_hash: Option<Id20>,
    },
}

fn bad(param: &str, what: &str) -> ApiError {
    ApiError {
        status: 400,
        message: format!("{param}: {what}"),
    }
}

/// The parameters of a query, percent-decoded (the last of a repeated name wins, as in
/// Ocelot).
struct Params(Vec<(Vec<u8>, Vec<u8>)>);

impl Params {
    fn of(query: &[u8]) -> Result<Params, ApiError> {
        let mut out: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        for (k, v) in pairs(query) {
            let mut key = vec![0; k.len()];
            let n = percent_decode(k, &mut key).ok_or_else(|| bad("query", "bad % escape"))?;
            key.truncate(n);
            if v.len() > 3 * MAX_VALUE {
                return Err(bad(&String::from_utf8_lossy(&key), "too long"));
            }
            let mut value = vec![0; v.len()];
            let n = percent_decode(v, &mut value)
                .ok_or_else(|| bad(&String::from_utf8_lossy(&key), "bad % escape"))?;
            value.truncate(n);
            out.retain(|(k, _)| *k != key);
            out.push((key, value));
        }
        Ok(Params(out))
    }

    fn get(&self, name: &str) -> Option<&[u8]> {
        self.0
            .iter()
            .find(|(k, _)| k == name.as_bytes())
            .map(|(_, v)| v.as_slice())
    }

    fn must(&self, name: &str) -> Result<&[u8], ApiError> {
        self.get(name).ok_or_else(|| bad(name, "missing"))
    }

    fn id(&self, name: &str) -> Result<u32, ApiError> {
        std::str::from_utf8(self.must(name)?)
            .ok()
            .and_then(|s| s.parse::<u32>().ok())
            .filter(|&id| id > 0)
            .ok_or_else(|| bad(name, "must be a number from 1"))
    }

    fn info_hash(&self, name: &str) -> Result<Id20, ApiError> {
        self.must(name)?
            .try_into()
            .map_err(|_| bad(name, "must be 20 bytes, percent-encoded"))
    }

    fn passkey(&self, name: &str) -> Result<Vec<u8>, ApiError> {
        let p = self.must(name)?;
        hotpath_wire::passkey::check(p)
            .map_err(|_| bad(name, "must be 1 to 64 letters or digits"))?;
        Ok(p.to_vec())
    }

    fn prefix(&self, name: &str) -> Result<Vec<u8>, ApiError> {
        let p = self.must(name)?;
        if p.is_empty() || p.len() > 20 {
            return Err(bad(name, "must be 1 to 20 bytes"));
        }
        Ok(p.to_vec())
    }

    fn visible(&self) -> bool {
        self.get("visible") != Some(b"0")
    }
}

/// Splits `v` (parameter `name`) into pieces of `n` bytes, at most [`MAX_BATCH`].
fn chunks(v: &[u8], n: usize, name: &str) -> Result<Vec<Vec<u8>>, ApiError> {
    if v.is_empty() || !v.len().is_multiple_of(n) {
        return Err(bad(name, &format!("must be pieces of {n} bytes")));
    }
    if v.len() / n > MAX_BATCH {
        return Err(bad(name, &format!("at most {MAX_BATCH} in one call")));
    }
    Ok(v.chunks_exact(n).map(<[u8]>::to_vec).collect())
}

/// One call of Ocelot's report API (`get=…`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    /// `stats`: the tracker's figures, as Gazelle's tracker page lists them.
    Stats,
    /// `prom_stats`: the same figures as Prometheus text.
    Prometheus,
    /// `jemalloc`: the allocator's statistics (hotpath does not use jemalloc).
    Jemalloc,
    /// `user` with `key` (a passkey): that user's peers and rights.
    User(Vec<u8>),
}

/// Decodes a report call's query (`get=…&…`).
pub fn decode_report(query: &[u8]) -> Result<Report, ApiError> {
    let p = Params::of(query)?;
    Ok(match p.must("get")? {
        b"stats" => Report::Stats,
        b"prom_stats" => Report::Prometheus,
        b"jemalloc" => Report::Jemalloc,
        b"user" => Report::User(p.passkey("key")?),
        _ => {
            return Err(bad(
                "get",
                "unrecognized report query: stats, prom_stats, jemalloc or user",
            ))
        }
    })
}

/// What hotpath knows of the figures Ocelot reports, taken when the report is asked for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Figures {
    /// hotpath's version.
    pub version: &'static str,
    /// Seeders and leechers in the swarms.
    pub seeders: u64,
    /// Leechers.
    pub leechers: u64,
    /// Rows waiting in the write-behind queue (Ocelot's user, torrent, peer, snatch and token
    /// queues are one queue here).
    pub queued_rows: u64,
    /// Wrong site or report secrets and push tokens sent.
    pub bad_secrets: u64,
    /// Unknown passkeys announced.
    pub bad_passkeys: u64,
    /// The announce interval told, seconds.
    pub interval: u32,
    /// The most seconds of jitter added to it (`tracker.interval_jitter_percent` of it).
    pub jitter: u32,
    /// Seconds since the process started.
    pub uptime: u64,
    /// CPU seconds in user space and in the kernel, and the largest resident set in bytes,
    /// when the process's own figures could be read.
    pub usage: Option<(f64, f64, u64)>,
}

impl Figures {
    /// `get=stats`: one JSON object whose items are `{"type": …, "value": …}` under
    /// Ocelot's labels, which Gazelle's tracker page lists; a newline ends it, as Gazelle
    /// cuts the body at its last one.
    pub fn json(&self) -> String {
        use serde_json::{json, Map, Value};
        let mut m = Map::new();
        let mut item = |label: &str, kind: &str, value: Value| {
            m.insert(label.into(), json!({ "type": kind, "value": value }));
        };
        item(
            "version",
            "string",
            json!(format!("hotpath {}", self.version)),
        );
        item("leechers tracked", "number", json!(self.leechers));
        item("seeders tracked", "number", json!(self.seeders));
        item(
            "items in write-behind queue",
            "number",
            json!(self.queued_rows),
        );
        item(
            "bad tracker secret received",
            "number",
            json!(self.bad_secrets),
        );
        item(
            "bad announce key received",
            "number",
            json!(self.bad_passkeys),
        );
        item("announce interval", "number", json!(self.interval));
        item("announce jitter", "number", json!(self.jitter));
        item("uptime", "elapsed", json!(self.uptime));
        if let Some((user, system, rss)) = self.usage {
            item("user time", "elapsed", json!(user));
            item("system time", "elapsed", json!(system));
            item("maximum resident set size", "byte", json!(rss));
        }
        let mut out = Value::Object(m).to_string();
        out.push('\n');
        out
    }

    /// `get=prom_stats`: the figures under Ocelot's metric names, where hotpath has them
    /// (its own `/metrics` has the rest).
    pub fn prometheus(&self) -> String {
        let mut out = format!(
            "ocelot_uptime {}\nocelot_leechers {}\nocelot_seeders {}\n\
             ocelot_peer_queue {}\n#TYPE ocelot_error counter\n\
             ocelot_error{{kind=\"secret\"}} {}\nocelot_error{{kind=\"announce\"}} {}\n",
            self.uptime,
            self.leechers,
            self.seeders,
            self.queued_rows,
            self.bad_secrets,
            self.bad_passkeys,
        );
        if let Some((user, system, rss)) = self.usage {
            out.push_str(&format!(
                "ocelot_time_user {user:.6}\nocelot_time_system {system:.6}\n\
                 ocelot_max_rss {}\n",
                rss / 1024
            ));
        }
        out.push('#');
        out
    }
}

/// `get=user`: a user's peers and rights as Ocelot reports them (numbers, 0 or 1 for the
/// flags), with a newline at the end.
pub fn user_report(id: u32, peers: (u32, u32), protected: bool, can_leech: bool) -> String {
    format!(
        "{{\"id\":{id},\"leeching\":{},\"seeding\":{},\"deleted\":0,\"protected\":{},\
         \"can_leech\":{}}}\n",
        peers.0,
        peers.1,
        u8::from(protected),
        u8::from(can_leech)
    )
}

/// `get=jemalloc`: what Ocelot's allocator statistics are in hotpath.
pub const JEMALLOC: &str =
    "hotpath does not use jemalloc: get=stats reports its largest resident set size\n";

/// Decodes a call's query (`action=…&…`).
pub fn decode(query: &[u8]) -> Result<Action, ApiError> {
    let p = Params::of(query)?;
    let action = p.must("action")?;
    let free = || p.get("freetorrent").map_or(Free::Neutral, Free::of);
    Ok(match action {
        b"change_passkey" => {
            let new = p.passkey("newpasskey")?;
            Action::ChangePasskey {
                old: p.passkey("oldpasskey")?,
                new: String::from_utf8(new).expect("checked: letters and digits"),
            }
        }
        b"add_torrent" => Action::AddTorrent {
            id: p.id("id")?,
            info_hash: p.info_hash("info_hash")?,
            free: free(),
        },
        b"update_torrent" => Action::UpdateTorrents {
            info_hashes: vec![p.info_hash("info_hash")?],
            free: free(),
        },
        b"update_torrents" => Action::UpdateTorrents {
            info_hashes: chunks(p.must("info_hashes")?, 20, "info_hashes")?
                .into_iter()
                .map(|h| h.try_into().expect("20 bytes"))
                .collect(),
            free: free(),
        },
        b"delete_torrent" => Action::DeleteTorrent {
            info_hash: p.info_hash("info_hash")?,
            // Ocelot reads any number; an unknown code is told as no reason.
            reason: p
                .get("reason")
                .and_then(|r| std::str::from_utf8(r).ok()?.parse::<u8>().ok()),
        },
        b"add_token" | b"remove_token" => {
            let (info_hash, user) = (p.info_hash("info_hash")?, p.id("userid")?);
            if action == b"add_token" {
                Action::AddToken { info_hash, user }
            } else {
                Action::RemoveToken { info_hash, user }
            }
        }
        b"add_user" => Action::AddUser {
            id: p.id("id")?,
            passkey: String::from_utf8(p.passkey("passkey")?).expect("checked"),
            protected: !p.visible(),
        },
        b"remove_user" => Action::RemoveUsers {
            passkeys: vec![p.passkey("passkey")?],
        },
        b"remove_users" => {
            let keys = chunks(p.must("passkeys")?, 32, "passkeys")?;
            for k in &keys {
                hotpath_wire::passkey::check(k)
                    .map_err(|_| bad("passkeys", "each must be 32 letters or digits"))?;
            }
            Action::RemoveUsers { passkeys: keys }
        }
        b"update_user" => Action::UpdateUser {
            passkey: p.passkey("passkey")?,
            can_leech: p.get("can_leech") != Some(b"0"),
            protected: !p.visible(),
        },
        b"add_whitelist" => Action::AddWhitelist {
            prefix: p.prefix("peer_id")?,
        },
        b"remove_whitelist" => Action::RemoveWhitelist {
            prefix: p.prefix("peer_id")?,
        },
        b"edit_whitelist" => Action::EditWhitelist {
            old: p.prefix("old_peer_id")?,
            new: p.prefix("new_peer_id")?,
        },
        b"update_announce_interval" => Action::AnnounceInterval {
            secs: std::str::from_utf8(p.must("new_announce_interval")?)
                .ok()
                .and_then(|s| s.parse::<u32>().ok())
                .filter(|s| (1..=604_800).contains(s))
                .ok_or_else(|| bad("new_announce_interval", "must be seconds from 1 to 604800"))?,
        },
        b"update_announce_jitter" => Action::AnnounceJitter,
        b"info_torrent" => {
            let hex = String::from_utf8_lossy(p.must("info_hash")?).into_owned();
            let info_hash = super::push::info_hash_of(&hex).ok();
            Action::InfoTorrent { hex, info_hash }
        }
        other => {
            return Err(bad(
                "action",
                &format!(
                    "{:?} is not one of Ocelot's: change_passkey, add_torrent, \
                     update_torrent, update_torrents, delete_torrent, add_token, \
                     remove_token, add_user, remove_user, remove_users, update_user, \
                     add_whitelist, remove_whitelist, edit_whitelist, \
                     update_announce_interval, update_announce_jitter, info_torrent",
                    String::from_utf8_lossy(other)
                ),
            ))
        }
    })
}

impl Private {
    /// Applies a call of Ocelot's update API at unix second `at`; returns the answer's body
    /// (`success`, as Ocelot answers every call it understood, a user or torrent it does not
    /// hold included; `info_torrent`'s JSON line). `config` is the config's intervals
    /// (interval, min interval).
    pub fn ocelot(&self, action: Action, at: u32, config: (u32, u32)) -> Result<String, ApiError> {
        let Some(g) = self.gazelle.as_ref() else {
            return Err(ApiError {
                status: 404,
                message: "Ocelot's update API needs private.schema = \"gazelle\"".into(),
            });
        };
        let user_of = |key: &[u8]| self.users.get(key);
        let torrent_of = |h: &Id20| self.torrents.get(h);
        let mut ops = Vec::new();
        match action {
            Action::ChangePasskey { old, new } => match user_of(&old) {
                Some(u) => ops.push(Push::User {
                    id: u.id,
                    passkey: new,
                    can_leech: u.can_leech,
                }),
                None => log::warn!(
                    "private: change_passkey: no user has the old passkey (nothing changed)"
                ),
            },
            Action::AddTorrent {
                id,
                info_hash,
                free,
            } => {
                let (download_pct, upload_pct) = free.pcts();
                g.deleted.lock().remove(&info_hash);
                ops.push(Push::Torrent {
                    id,
                    info_hash: hotpath_store::table::hex(&info_hash),
                    download_pct,
                    upload_pct,
                    poster_id: 0,
                });
            }
            Action::UpdateTorrents { info_hashes, free } => {
                let (download_pct, upload_pct) = free.pcts();
                for h in info_hashes {
                    match torrent_of(&h) {
                        Some(t) => ops.push(Push::Torrent {
                            id: t.id,
                            info_hash: hotpath_store::table::hex(&h),
                            download_pct,
                            upload_pct,
                            poster_id: t.poster,
                        }),
                        None => log::warn!(
                            "private: update_torrent: no torrent {} held (nothing changed)",
                            hotpath_store::table::hex(&h)
                        ),
                    }
                }
            }
            Action::DeleteTorrent { info_hash, reason } => {
                if let Some(t) = torrent_of(&info_hash) {
                    ops.push(Push::RemoveTorrent { id: t.id });
                }
                g.remember_deleted(info_hash, reason, at);
            }
            Action::AddToken { info_hash, user } => match torrent_of(&info_hash) {
                Some(t) => {
                    let mut tokens = g.tokens.write();
                    if tokens.len() >= g.max_tokens && !tokens.contains(&(user, t.id)) {
                        self.push_errors.add(1);
                        return Err(ApiError {
                            status: 507,
                            message: format!(
                                "{} freeleech tokens are held (private.max_tokens)",
                                g.max_tokens
                            ),
                        });
                    }
                    tokens.insert((user, t.id));
                }
                None => log::warn!(
                    "private: add_token: no torrent {} held",
                    hotpath_store::table::hex(&info_hash)
                ),
            },
            Action::RemoveToken { info_hash, user } => {
                if let Some(t) = torrent_of(&info_hash) {
                    g.spend(user, t.id);
                }
            }
            Action::AddUser {
                id,
                passkey,
                protected,
            } => {
                set(&g.protected, id, protected);
                ops.push(Push::User {
                    id,
                    passkey,
                    can_leech: true,
                });
            }
            Action::RemoveUsers { passkeys } => {
                for key in passkeys {
                    if let Some(u) = user_of(&key) {
                        ops.push(Push::RemoveUser { id: u.id });
                    }
                }
            }
            Action::UpdateUser {
                passkey,
                can_leech,
                protected,
            } => match user_of(&passkey) {
                Some(u) => {
                    set(&g.protected, u.id, protected);
                    ops.push(Push::User {
                        id: u.id,
                        passkey: String::from_utf8(passkey).expect("checked"),
                        can_leech,
                    });
                }
                None => log::warn!("private: update_user: no user has that passkey"),
            },
            // Gazelle's whitelist is the allow list.
            Action::AddWhitelist { prefix } => {
                ops.push(self.clients_edited(|allow, _| put(allow, None, Some(&prefix)))?)
            }
            Action::RemoveWhitelist { prefix } => {
                ops.push(self.clients_edited(|allow, _| put(allow, Some(&prefix), None))?)
            }
            Action::EditWhitelist { old, new } => {
                ops.push(self.clients_edited(|allow, _| put(allow, Some(&old), Some(&new)))?)
            }
            Action::AnnounceInterval { secs } => {
                let min = self.intervals(config).1.min(secs);
                ops.push(Push::Intervals {
                    interval_secs: secs,
                    min_interval_secs: min,
                });
            }
            Action::AnnounceJitter => {
                log::info!("private: update_announce_jitter: hotpath tells no jitter");
            }
            Action::InfoTorrent { hex, info_hash } => {
                let t = info_hash.and_then(|h| torrent_of(&h));
                // As Ocelot writes it: the hash as given, unquoted.
                return Ok(match t {
                    Some(t) => {
                        let free = match (t.download_pct, t.upload_pct) {
                            (0, 0) => 2,
                            (0, _) => 1,
                            _ => 0,
                        };
                        format!("{{\"hash\":{hex},\"id\":{},\"free\":{free}}}\n", t.id)
                    }
                    None => format!("{{\"hash\":{hex},\"fail\":1}}\n"),
                });
            }
        }
        if !ops.is_empty() {
            self.push(&ops, at)?;
        }
        Ok("success".into())
    }
}

fn set(s: &RwLock<HashSet<u32>>, id: u32, on: bool) {
    if on {
        s.write().insert(id);
    } else {
        s.write().remove(&id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Result<Action, (u16, String)> {
        decode(s.as_bytes()).map_err(|e| (e.status, e.message))
    }

    #[test]
    fn gazelles_calls_decode_as_ocelot_reads_them() {
        let key = "a".repeat(32);
        let h = "%01%02%03%04%05%06%07%08%09%0A%0B%0C%0D%0E%0F%10%11%12%13%14";
        let hash: Id20 = core::array::from_fn(|i| i as u8 + 1);
        assert_eq!(
            q(&format!(
                "action=add_torrent&id=7&info_hash={h}&freetorrent=1"
            )),
            Ok(Action::AddTorrent {
                id: 7,
                info_hash: hash,
                free: Free::Free
            })
        );
        assert_eq!(
            q(&format!(
                "action=update_torrents&info_hashes={h}{h}&freetorrent=2"
            )),
            Ok(Action::UpdateTorrents {
                info_hashes: vec![hash, hash],
                free: Free::Neutral
            })
        );
        assert_eq!(
            q(&format!("action=add_user&id=3&passkey={key}&visible=0")),
            Ok(Action::AddUser {
                id: 3,
                passkey: key.clone(),
                protected: true
            })
        );
        assert_eq!(
            q(&format!(
                "action=update_user&passkey={key}&can_leech=0&visible=1"
            )),
            Ok(Action::UpdateUser {
                passkey: key.clone().into_bytes(),
                can_leech: false,
                protected: false
            })
        );
        assert_eq!(
            q(&format!("action=remove_users&passkeys={key}{key}")),
            Ok(Action::RemoveUsers {
                passkeys: vec![key.clone().into_bytes(), key.clone().into_bytes()]
            })
        );
        assert_eq!(
            q(&format!("action=delete_torrent&info_hash={h}&reason=1")),
            Ok(Action::DeleteTorrent {
                info_hash: hash,
                reason: Some(1)
            })
        );
        assert_eq!(
            q("action=edit_whitelist&old_peer_id=-TR2&new_peer_id=-TR3"),
            Ok(Action::EditWhitelist {
                old: b"-TR2".to_vec(),
                new: b"-TR3".to_vec()
            })
        );
        assert_eq!(
            q("action=update_announce_interval&new_announce_interval=1800"),
            Ok(Action::AnnounceInterval { secs: 1800 })
        );
    }

    #[test]
    fn hostile_calls_get_an_error_naming_the_parameter() {
        let key = "a".repeat(32);
        for (query, names) in [
            ("", "action: missing"),
            ("action=drop_tables", "action: \"drop_tables\""),
            (
                "action=add_torrent&id=7&info_hash=%01",
                "info_hash: must be 20",
            ),
            (
                "action=add_torrent&id=0&info_hash=%01",
                "id: must be a number",
            ),
            (
                "action=add_torrent&id=-1&info_hash=%01",
                "id: must be a number",
            ),
            (
                "action=add_user&id=3&passkey=a%20b",
                "passkey: must be 1 to 64",
            ),
            ("action=add_user&id=3&passkey=%zz", "passkey: bad % escape"),
            (
                "action=remove_users&passkeys=abc",
                "passkeys: must be pieces of 32",
            ),
            ("action=add_whitelist&peer_id=", "peer_id: must be 1 to 20"),
            (
                "action=update_announce_interval&new_announce_interval=0",
                "new_announce_interval: must be seconds",
            ),
        ] {
            let (status, message) = q(query).unwrap_err();
            assert_eq!(status, 400, "{query}");
            assert!(message.starts_with(names), "{query}: {message}");
        }
        let many = key.repeat(MAX_BATCH + 1);
        let (_, m) = q(&format!("action=remove_users&passkeys={many}")).unwrap_err();
        assert!(m.contains("at most"), "{m}");
        let g = Gazelle::new(&hotpath_config::PrivateConfig::default());
        for i in 0..(MAX_REASONS as u32 + 5) {
            let mut h = [0u8; 20];
            h[..4].copy_from_slice(&i.to_be_bytes());
            g.remember_deleted(h, Some(0), 100 + i);
        }
        assert!(g.deleted.lock().len() <= MAX_REASONS, "bounded");
        assert_eq!(g.forgotten.get(), 5, "the oldest forgotten, counted");
        let last = (MAX_REASONS as u32 + 4).to_be_bytes();
        let mut h = [0u8; 20];
        h[..4].copy_from_slice(&last);
        assert_eq!(
            g.deleted_reason(&h, 200 + MAX_REASONS as u32),
            Some("Unregistered torrent: Dupe")
        );
        assert_eq!(
            g.deleted_reason(&h, 200 + MAX_REASONS as u32 + REASON_SECS),
            None
        );
    }

    #[test]
    fn report_calls_decode_and_answer_as_gazelles_pages_read_them() {
        let key = "b".repeat(32);
        assert_eq!(decode_report(b"get=stats"), Ok(Report::Stats));
        assert_eq!(decode_report(b"get=prom_stats"), Ok(Report::Prometheus));
        assert_eq!(decode_report(b"get=jemalloc"), Ok(Report::Jemalloc));
        assert_eq!(
            decode_report(format!("get=user&key={key}").as_bytes()),
            Ok(Report::User(key.clone().into_bytes()))
        );
        for (query, names) in [
            ("", "get: missing"),
            ("get=torrents", "get: unrecognized"),
            ("get=user", "key: missing"),
            ("get=user&key=%27%20OR%201", "key: must be 1 to 64"),
        ] {
            let e = decode_report(query.as_bytes()).unwrap_err();
            assert_eq!(e.status, 400, "{query}");
            assert!(e.message.starts_with(names), "{query}: {}", e.message);
        }
        let f = Figures {
            version: "1.2.3",
            seeders: 7,
            leechers: 3,
            queued_rows: 12,
            bad_secrets: 2,
            bad_passkeys: 5,
            interval: 1800,
            jitter: 180,
            uptime: 60,
            usage: Some((1.5, 0.25, 4096)),
        };
        // Gazelle takes the body up to its last newline and json-decodes it.
        let body = f.json();
        let (json, rest) = body.rsplit_once('\n').unwrap();
        assert_eq!(rest, "");
        let v: serde_json::Value = serde_json::from_str(json).unwrap();
        assert_eq!(v["seeders tracked"]["value"], 7);
        assert_eq!(v["leechers tracked"]["type"], "number");
        assert_eq!(v["announce interval"]["value"], 1800);
        assert_eq!(v["announce jitter"]["value"], 180);
        assert_eq!(v["uptime"]["type"], "elapsed");
        assert_eq!(v["maximum resident set size"]["type"], "byte");
        assert_eq!(v["version"]["value"], "hotpath 1.2.3");
        for (_, item) in v.as_object().unwrap() {
            assert!(
                item["type"].is_string() && !item["value"].is_null(),
                "{item}"
            );
        }
        let prom = f.prometheus();
        assert!(prom.contains("ocelot_seeders 7\n") && prom.contains("ocelot_max_rss 4\n"));
        let user = user_report(9, (2, 5), true, false);
        let (json, _) = user.rsplit_once('\n').unwrap();
        let v: serde_json::Value = serde_json::from_str(json).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"id": 9, "leeching": 2, "seeding": 5, "deleted": 0,
                               "protected": 1, "can_leech": 0})
        );
    }
}
