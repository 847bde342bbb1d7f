//! UNIT3D, as its tracker UNIT3D-Announce serves it: what the site's tables hold beside users
//! and torrents (each user's group and the groups' rules, freeleech tokens, personal
//! freeleech, featured torrents, read each poll), how they credit an announce, and
//! UNIT3D-Announce's JSON API, which UNIT3D's code calls as `PUT`/`DELETE
//! /announce/<TRACKER_KEY>/<what>` and which answers 200 with an empty body.
//!
//! Every byte of a call comes from whoever holds the site's key: each body is decoded and
//! checked ([`decode`]) before anything applies it, a bad one gets a 400 naming the field, and
//! each set is capped.
//!
//! Owns: [`Unit3d`], [`Group`], [`Call`]. Must not: do I/O.

use std::collections::{HashMap, HashSet};

use hotpath_wire::query::Id20;
use parking_lot::{Mutex, RwLock};
use serde::Deserialize;

use super::push::{body, info_hash_of, ApiError, Push};
use super::{put, Private};

/// A group's rules, as UNIT3D-Announce reads them from `groups`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Group {
    /// Its slug is `banned`, `validating` or `disabled`: its users are refused.
    pub refused: bool,
    /// Torrents its users may download at once (0: no limit).
    pub slots: u16,
    /// Its users are immune to hit-and-run rules (`history.immune`).
    pub immune: bool,
    /// Freeleech: nothing its users download counts.
    pub freeleech: bool,
    /// Double upload: what its users upload counts twice.
    pub double_upload: bool,
}

impl Group {
    /// The rules of a group row: its slug, download slots (none: no limit), and flags.
    pub fn of(slug: &str, slots: Option<i64>, immune: bool, free: bool, double: bool) -> Group {
        Group {
            refused: matches!(slug, "banned" | "validating" | "disabled"),
            slots: slots.map_or(0, |s| s.clamp(0, i64::from(u16::MAX)) as u16),
            immune,
            freeleech: free,
            double_upload: double,
        }
    }
}

/// Most groups held (a site has a dozen).
pub const MAX_GROUPS: usize = 10_000;
/// Most (user, info hash) pairs of unregistered torrents waiting for the next poll to write
/// them; past it a new pair is dropped and counted.
pub const MAX_UNREGISTERED: usize = 10_000;

/// What the UNIT3D preset keeps beside the registries.
#[derive(Debug, Default)]
pub struct Unit3d {
    /// The site's key (`private.site_secret`; empty: the API is off; a reload may change it).
    pub secret: RwLock<String>,
    /// Groups by id.
    pub groups: RwLock<HashMap<i32, Group>>,
    /// Each user's group.
    pub user_groups: RwLock<HashMap<u32, i32>>,
    /// Freeleech tokens (user, torrent).
    pub tokens: RwLock<HashSet<(u32, u32)>>,
    /// Users with personal freeleech.
    pub personal: RwLock<HashSet<u32>>,
    /// Featured torrents: freeleech and double upload for everyone.
    pub featured: RwLock<HashSet<u32>>,
    /// Most tokens (`private.max_tokens`), users with personal freeleech
    /// (`private.max_personal_freeleech`), users and torrents held.
    pub caps: [usize; 4],
    /// The config's deny list (`private.peer_id_deny`), to which the blacklist adds.
    pub config_deny: Vec<Box<[u8]>>,
    /// Unregistered torrents users announced, (user, info hash) to the unix second of the
    /// latest, waiting for the next poll to write them into `unregistered_info_hashes`.
    unregistered: Mutex<HashMap<(u32, Id20), u32>>,
    /// Pairs dropped at [`MAX_UNREGISTERED`].
    pub unregistered_dropped: hotpath_metrics::Counter,
}

impl Unit3d {
    /// Empty, with `[private]`'s site key and caps.
    pub fn new(c: &hotpath_config::PrivateConfig) -> Unit3d {
        Unit3d {
            secret: RwLock::new(c.site_secret.clone()),
            caps: [
                c.max_tokens,
                c.max_personal_freeleech,
                c.max_users,
                c.max_torrents,
            ],
            config_deny: super::Rules::of(c).peer_id_deny,
            ..Unit3d::default()
        }
    }

    /// Notes that `user` announced `info_hash`, which the site does not have, at unix second
    /// `at` (one pair is held once, with its latest second; past [`MAX_UNREGISTERED`] pairs a
    /// new one is dropped and counted).
    pub fn unregistered(&self, user: u32, info_hash: &Id20, at: u32) {
        let mut waiting = self.unregistered.lock();
        let len = waiting.len();
        match waiting.get_mut(&(user, *info_hash)) {
            Some(t) => *t = (*t).max(at),
            None if len < MAX_UNREGISTERED => {
                waiting.insert((user, *info_hash), at);
            }
            None => self.unregistered_dropped.add(1),
        }
    }

    /// The pairs waiting to be written, taken.
    pub fn take_unregistered(&self) -> Vec<(u32, Id20, u32)> {
        let mut rows: Vec<_> = self
            .unregistered
            .lock()
            .drain()
            .map(|((u, h), at)| (u, h, at))
            .collect();
        rows.sort_unstable();
        rows
    }

    /// Puts back pairs a failed write could not store (as room allows; the rest are dropped
    /// and counted).
    pub fn keep_unregistered(&self, rows: Vec<(u32, Id20, u32)>) {
        for (u, h, at) in rows {
            self.unregistered(u, &h, at);
        }
    }

    /// `user`'s group's rules (none: a group the site does not have, refused as
    /// UNIT3D-Announce refuses it).
    pub fn group(&self, user: u32) -> Option<Group> {
        let id = *self.user_groups.read().get(&user)?;
        self.groups.read().get(&id).copied()
    }

    /// The factors (download, upload percent) crediting `user` on `torrent`, whose own are
    /// `pcts` (after the site-wide ones): a download at the lowest of the torrent's and the
    /// group's, and 0 under a token, personal freeleech or a featured torrent; an upload at
    /// the highest of the torrent's and the group's, and 200 on a featured torrent.
    pub fn factors(&self, user: u32, torrent: u32, pcts: (u16, u16), group: Group) -> (u16, u16) {
        let (mut down, mut up) = pcts;
        if group.freeleech {
            down = 0;
        }
        if group.double_upload {
            up = up.max(200);
        }
        let featured = {
            let f = self.featured.read();
            !f.is_empty() && f.contains(&torrent)
        };
        if featured {
            up = 200;
        }
        if down > 0
            && (featured || has(&self.personal, &user) || has(&self.tokens, &(user, torrent)))
        {
            down = 0;
        }
        (down, up)
    }
}

fn has<T: std::hash::Hash + Eq>(set: &RwLock<HashSet<T>>, v: &T) -> bool {
    let s = set.read();
    !s.is_empty() && s.contains(v)
}

/// One call of UNIT3D-Announce's API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// `PUT /torrents`: a torrent added or changed.
    Torrent {
        /// Its id.
        id: u32,
        /// Its info hash.
        info_hash: [u8; 20],
        /// Served (approved and not deleted).
        served: bool,
        /// Percent of downloaded bytes credited.
        download_pct: u16,
        /// Percent of uploaded bytes credited.
        upload_pct: u16,
    },
    /// `DELETE /torrents`.
    RemoveTorrent(u32),
    /// `PUT /users`.
    User {
        /// Its id.
        id: u32,
        /// Its group.
        group: i32,
        /// Its passkey.
        passkey: String,
        /// Whether it may download.
        can_download: bool,
    },
    /// `DELETE /users`.
    RemoveUser(u32),
    /// `PUT /groups`.
    Group(i32, Group),
    /// `DELETE /groups`.
    RemoveGroup(i32),
    /// `PUT`/`DELETE /blacklisted-agents`: a peer id prefix refused, or no longer.
    Blacklist(Vec<u8>, bool),
    /// `PUT`/`DELETE /freeleech-tokens`.
    Token(u32, u32, bool),
    /// `PUT`/`DELETE /personal-freeleech`.
    Personal(u32, bool),
    /// `PUT`/`DELETE /featured-torrents`.
    Featured(u32, bool),
    /// `GET /users/ID`.
    ShowUser(u32),
    /// `GET /torrents/ID`.
    ShowTorrent(u32),
}

#[derive(Deserialize)]
struct TorrentBody {
    id: u32,
    status: i64,
    info_hash: String,
    #[serde(default)]
    is_deleted: bool,
    download_factor: u16,
    upload_factor: u16,
}

#[derive(Deserialize)]
struct IdBody<T> {
    id: T,
}

#[derive(Deserialize)]
struct UserBody {
    id: u32,
    group_id: i32,
    passkey: String,
    can_download: bool,
}

#[derive(Deserialize)]
struct GroupBody {
    id: i32,
    slug: String,
    download_slots: Option<i64>,
    is_immune: bool,
    is_freeleech: bool,
    is_double_upload: bool,
}

/// A peer id prefix as UNIT3D sends it: a string, or an array of bytes.
#[derive(Deserialize)]
#[serde(untagged)]
enum Prefix {
    Text(String),
    Bytes(Vec<u8>),
}

#[derive(Deserialize)]
struct AgentBody {
    peer_id_prefix: Prefix,
}

#[derive(Deserialize)]
struct TokenBody {
    user_id: u32,
    torrent_id: u32,
}

#[derive(Deserialize)]
struct UserIdBody {
    user_id: u32,
}

#[derive(Deserialize)]
struct TorrentIdBody {
    torrent_id: u32,
}

fn bad(message: impl Into<String>) -> ApiError {
    ApiError {
        status: 400,
        message: message.into(),
    }
}

/// An id from 1.
fn id(v: u32, name: &str) -> Result<u32, ApiError> {
    (v > 0)
        .then_some(v)
        .ok_or_else(|| bad(format!("{name}: must be at least 1")))
}

/// The endpoints, for a 404's message.
pub const ENDPOINTS: &str = "UNIT3D-Announce's API: PUT|DELETE /announce/KEY/torrents, \
    GET /announce/KEY/torrents/ID, PUT|DELETE /announce/KEY/users, GET /announce/KEY/users/ID, \
    PUT|DELETE /announce/KEY/groups, /blacklisted-agents, /freeleech-tokens, \
    /personal-freeleech, /featured-torrents";

/// Decodes a call: `method` on `rest` (the path below `/announce/<key>`) with `b`.
pub fn decode(method: &str, rest: &str, b: &[u8]) -> Result<Call, ApiError> {
    let put = match method {
        "PUT" => true,
        "DELETE" => false,
        "GET" => {
            let (what, n) = rest
                .trim_start_matches('/')
                .split_once('/')
                .ok_or_else(|| ApiError {
                    status: 404,
                    message: ENDPOINTS.into(),
                })?;
            let n: u32 = n
                .parse()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| bad("id: must be a number from 1"))?;
            return match what {
                "users" => Ok(Call::ShowUser(n)),
                "torrents" => Ok(Call::ShowTorrent(n)),
                _ => Err(ApiError {
                    status: 404,
                    message: ENDPOINTS.into(),
                }),
            };
        }
        _ => {
            return Err(ApiError {
                status: 405,
                message: format!("{method} is not allowed; {ENDPOINTS}"),
            })
        }
    };
    let call = match rest {
        "/torrents" if put => {
            let t: TorrentBody = body(b)?;
            let info_hash = info_hash_of(&t.info_hash).map_err(bad)?;
            for (name, v) in [
                ("download_factor", t.download_factor),
                ("upload_factor", t.upload_factor),
            ] {
                if v > super::push::MAX_PCT {
                    return Err(bad(format!(
                        "{name}: must be at most {}",
                        super::push::MAX_PCT
                    )));
                }
            }
            Call::Torrent {
                id: id(t.id, "id")?,
                info_hash,
                served: t.status == 1 && !t.is_deleted,
                download_pct: t.download_factor,
                upload_pct: t.upload_factor,
            }
        }
        "/torrents" => Call::RemoveTorrent(id(body::<IdBody<u32>>(b)?.id, "id")?),
        "/users" if put => {
            let u: UserBody = body(b)?;
            hotpath_wire::passkey::check(u.passkey.as_bytes())
                .map_err(|_| bad("passkey: must be 1 to 64 letters or digits"))?;
            Call::User {
                id: id(u.id, "id")?,
                group: u.group_id,
                passkey: u.passkey,
                can_download: u.can_download,
            }
        }
        "/users" => Call::RemoveUser(id(body::<IdBody<u32>>(b)?.id, "id")?),
        "/groups" if put => {
            let g: GroupBody = body(b)?;
            Call::Group(
                g.id,
                Group::of(
                    &g.slug,
                    g.download_slots,
                    g.is_immune,
                    g.is_freeleech,
                    g.is_double_upload,
                ),
            )
        }
        "/groups" => Call::RemoveGroup(body::<IdBody<i32>>(b)?.id),
        "/blacklisted-agents" => {
            let prefix = match body::<AgentBody>(b)?.peer_id_prefix {
                Prefix::Text(t) => t.into_bytes(),
                Prefix::Bytes(v) => v,
            };
            if prefix.is_empty() || prefix.len() > 20 {
                return Err(bad("peer_id_prefix: must be 1 to 20 bytes"));
            }
            Call::Blacklist(prefix, put)
        }
        "/freeleech-tokens" => {
            let t: TokenBody = body(b)?;
            Call::Token(
                id(t.user_id, "user_id")?,
                id(t.torrent_id, "torrent_id")?,
                put,
            )
        }
        "/personal-freeleech" => {
            Call::Personal(id(body::<UserIdBody>(b)?.user_id, "user_id")?, put)
        }
        "/featured-torrents" => {
            Call::Featured(id(body::<TorrentIdBody>(b)?.torrent_id, "torrent_id")?, put)
        }
        _ => {
            return Err(ApiError {
                status: 404,
                message: ENDPOINTS.into(),
            })
        }
    };
    Ok(call)
}

/// Sets `v` in `set` (or takes it out), holding at most `cap`.
fn toggle<T: std::hash::Hash + Eq>(
    set: &RwLock<HashSet<T>>,
    v: T,
    on: bool,
    cap: usize,
    what: &str,
) -> Result<(), ApiError> {
    let mut s = set.write();
    if !on {
        s.remove(&v);
        return Ok(());
    }
    if s.len() >= cap && !s.contains(&v) {
        return Err(ApiError {
            status: 507,
            message: format!("{cap} {what} are held"),
        });
    }
    s.insert(v);
    Ok(())
}

impl Private {
    /// Applies a call of UNIT3D-Announce's API at unix second `at`; returns the answer's body
    /// (empty, as UNIT3D-Announce answers a change; a user's or torrent's JSON for a `GET`).
    pub fn unit3d_call(&self, call: Call, at: u32) -> Result<Vec<u8>, ApiError> {
        let Some(u) = self.unit3d.as_ref() else {
            return Err(ApiError {
                status: 404,
                message: "UNIT3D-Announce's API needs private.schema = \"unit3d\"".into(),
            });
        };
        let [max_tokens, max_personal, max_users, max_torrents] = u.caps;
        let mut ops = Vec::new();
        let failed = |e: ApiError| {
            self.push_errors.add(1);
            e
        };
        match call {
            Call::Torrent {
                id,
                info_hash,
                served,
                download_pct,
                upload_pct,
            } => {
                if served {
                    ops.push(Push::Torrent {
                        id,
                        info_hash: hotpath_store::table::hex(&info_hash),
                        download_pct,
                        upload_pct,
                        poster_id: 0,
                    });
                } else {
                    ops.push(Push::RemoveTorrent { id });
                }
            }
            Call::RemoveTorrent(id) => ops.push(Push::RemoveTorrent { id }),
            Call::User {
                id,
                group,
                passkey,
                can_download,
            } => {
                let mut groups = u.user_groups.write();
                if groups.len() >= max_users && !groups.contains_key(&id) {
                    return Err(failed(ApiError {
                        status: 507,
                        message: "the users registry is full (private.max_users)".into(),
                    }));
                }
                groups.insert(id, group);
                drop(groups);
                ops.push(Push::User {
                    id,
                    passkey,
                    can_leech: can_download,
                });
            }
            Call::RemoveUser(id) => {
                u.user_groups.write().remove(&id);
                ops.push(Push::RemoveUser { id });
            }
            Call::Group(id, g) => {
                let mut groups = u.groups.write();
                if groups.len() >= MAX_GROUPS && !groups.contains_key(&id) {
                    return Err(failed(ApiError {
                        status: 507,
                        message: format!("{MAX_GROUPS} groups are held"),
                    }));
                }
                groups.insert(id, g);
            }
            Call::RemoveGroup(id) => {
                u.groups.write().remove(&id);
            }
            // UNIT3D's blacklist adds to the deny list.
            Call::Blacklist(prefix, on) => ops.push(self.clients_edited(|_, deny| {
                put(deny, Some(&prefix), on.then_some(prefix.as_slice()))
            })?),
            Call::Token(user, torrent, on) => toggle(
                &u.tokens,
                (user, torrent),
                on,
                max_tokens,
                "freeleech tokens",
            )
            .map_err(failed)?,
            Call::Personal(user, on) => toggle(
                &u.personal,
                user,
                on,
                max_personal,
                "users with personal freeleech",
            )
            .map_err(failed)?,
            Call::Featured(torrent, on) => {
                toggle(&u.featured, torrent, on, max_torrents, "featured torrents")
                    .map_err(failed)?
            }
            Call::ShowUser(id) => {
                let (key, user) = self.users.by_id(id).ok_or_else(|| ApiError {
                    status: 404,
                    message: format!("no user {id}"),
                })?;
                let v = serde_json::json!({
                    "id": user.id,
                    "group_id": u.user_groups.read().get(&id),
                    "passkey": key.text().map(String::from_utf8_lossy),
                    "can_download": user.can_leech,
                    "num_leeching": self.ledger.leeching(id),
                });
                return Ok(serde_json::to_vec(&v).expect("JSON"));
            }
            Call::ShowTorrent(id) => {
                let (hash, t) = self.torrents.by_id(id).ok_or_else(|| ApiError {
                    status: 404,
                    message: format!("no torrent {id}"),
                })?;
                let v = serde_json::json!({
                    "id": t.id,
                    "info_hash": hotpath_store::table::hex(&hash),
                    "download_factor": t.download_pct,
                    "upload_factor": t.upload_pct,
                    "is_featured": u.featured.read().contains(&id),
                });
                return Ok(serde_json::to_vec(&v).expect("JSON"));
            }
        }
        if !ops.is_empty() {
            self.push(&ops, at)?;
        }
        Ok(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(method: &str, rest: &str, b: &str) -> Result<Call, (u16, String)> {
        decode(method, rest, b.as_bytes()).map_err(|e| (e.status, e.message))
    }

    #[test]
    fn unit3ds_calls_decode_as_unit3d_announce_reads_them() {
        let hash = "0123456789abcdef0123456789abcdef01234567";
        assert_eq!(
            q(
                "PUT",
                "/torrents",
                &format!(
                    r#"{{"id":7,"status":1,"info_hash":"{hash}","is_deleted":false,"seeders":0,
                    "leechers":0,"times_completed":0,"download_factor":50,"upload_factor":200}}"#
                )
            ),
            Ok(Call::Torrent {
                id: 7,
                info_hash: info_hash_of(hash).unwrap(),
                served: true,
                download_pct: 50,
                upload_pct: 200
            })
        );
        // Pending moderation: not served.
        let pending = q(
            "PUT",
            "/torrents",
            &format!(
                r#"{{"id":7,"status":0,"info_hash":"{hash}","download_factor":100,"upload_factor":100}}"#
            ),
        );
        assert!(matches!(pending, Ok(Call::Torrent { served: false, .. })));
        assert_eq!(
            q(
                "PUT",
                "/users",
                r#"{"id":3,"group_id":4,"passkey":"abc","can_download":false,"num_seeding":0,"num_leeching":0}"#
            ),
            Ok(Call::User {
                id: 3,
                group: 4,
                passkey: "abc".into(),
                can_download: false
            })
        );
        assert_eq!(
            q(
                "PUT",
                "/groups",
                r#"{"id":5,"slug":"banned","download_slots":null,"is_immune":false,"is_freeleech":false,"is_double_upload":true}"#
            ),
            Ok(Call::Group(
                5,
                Group {
                    refused: true,
                    slots: 0,
                    immune: false,
                    freeleech: false,
                    double_upload: true
                }
            ))
        );
        assert_eq!(
            q(
                "DELETE",
                "/blacklisted-agents",
                r#"{"peer_id_prefix":"-XL"}"#
            ),
            Ok(Call::Blacklist(b"-XL".to_vec(), false))
        );
        assert_eq!(
            q(
                "PUT",
                "/blacklisted-agents",
                r#"{"peer_id_prefix":[45,88]}"#
            ),
            Ok(Call::Blacklist(b"-X".to_vec(), true))
        );
        assert_eq!(
            q(
                "PUT",
                "/freeleech-tokens",
                r#"{"user_id":1,"torrent_id":2}"#
            ),
            Ok(Call::Token(1, 2, true))
        );
        assert_eq!(q("GET", "/users/9", ""), Ok(Call::ShowUser(9)));
    }

    #[test]
    fn hostile_calls_get_an_error_naming_the_field() {
        for (method, rest, b, names) in [
            ("PUT", "/users", "{}", "missing field"),
            (
                "PUT",
                "/users",
                r#"{"id":0,"group_id":1,"passkey":"a","can_download":true}"#,
                "id:",
            ),
            (
                "PUT",
                "/users",
                r#"{"id":1,"group_id":1,"passkey":"a b","can_download":true}"#,
                "passkey:",
            ),
            (
                "PUT",
                "/torrents",
                r#"{"id":1,"status":1,"info_hash":"zz","download_factor":1,"upload_factor":1}"#,
                "info_hash",
            ),
            (
                "PUT",
                "/torrents",
                &format!(
                    r#"{{"id":1,"status":1,"info_hash":"{}","download_factor":1,"upload_factor":5000}}"#,
                    "ab".repeat(20)
                ),
                "upload_factor",
            ),
            (
                "PUT",
                "/blacklisted-agents",
                r#"{"peer_id_prefix":""}"#,
                "peer_id_prefix",
            ),
            (
                "PUT",
                "/freeleech-tokens",
                r#"{"user_id":-1,"torrent_id":2}"#,
                "user_id",
            ),
            ("PUT", "/nothing", "{}", "UNIT3D-Announce's API"),
            ("PATCH", "/users", "{}", "PATCH is not allowed"),
            ("GET", "/users/x", "", "id:"),
        ] {
            let (status, message) = q(method, rest, b).unwrap_err();
            assert!((400..406).contains(&status), "{rest}: {status}");
            assert!(message.contains(names), "{rest} {b}: {message}");
        }
    }

    #[test]
    fn groups_and_featured_torrents_credit_as_unit3d_announce_does() {
        let u = Unit3d::default();
        let plain = Group::default();
        assert_eq!(u.factors(1, 2, (100, 100), plain), (100, 100));
        let vip = Group::of("vip", Some(5), true, true, true);
        assert_eq!((vip.slots, vip.refused), (5, false));
        assert_eq!(u.factors(1, 2, (50, 100), vip), (0, 200));
        u.featured.write().insert(2);
        assert_eq!(u.factors(1, 2, (100, 100), plain), (0, 200));
        assert_eq!(u.factors(1, 3, (100, 100), plain), (100, 100));
        u.tokens.write().insert((1, 3));
        assert_eq!(u.factors(1, 3, (100, 100), plain), (0, 100));
        u.personal.write().insert(4);
        assert_eq!(u.factors(4, 9, (75, 100), plain), (0, 100));
        assert!(Group::of("validating", None, false, false, false).refused);
    }

    #[test]
    fn unregistered_torrents_are_held_once_per_user_and_bounded() {
        let u = Unit3d::default();
        u.unregistered(1, &[9; 20], 100);
        u.unregistered(1, &[9; 20], 160);
        u.unregistered(1, &[9; 20], 130);
        u.unregistered(2, &[9; 20], 120);
        assert_eq!(
            u.take_unregistered(),
            [(1, [9; 20], 160), (2, [9; 20], 120)],
            "one row per pair, its latest second"
        );
        assert!(u.take_unregistered().is_empty());
        // One user announcing random hashes fills the waiting pairs, and no more.
        for i in 0..(MAX_UNREGISTERED as u32 + 50) {
            let mut h = [0u8; 20];
            h[..4].copy_from_slice(&i.to_le_bytes());
            u.unregistered(7, &h, 1);
        }
        assert_eq!(u.unregistered_dropped.get(), 50);
        let rows = u.take_unregistered();
        assert_eq!(rows.len(), MAX_UNREGISTERED);
        // A failed write puts them back as room allows.
        u.unregistered(8, &[1; 20], 5);
        u.keep_unregistered(rows);
        assert_eq!(u.take_unregistered().len(), MAX_UNREGISTERED);
        assert_eq!(u.unregistered_dropped.get(), 51);
    }
}
