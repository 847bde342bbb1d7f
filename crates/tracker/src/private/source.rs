//! Where a private tracker reads its users and torrents: the SQL of each schema preset, with
//! the table and column names of `[private]`, and what a row means in each (TorrentPier's
//! gold and silver torrents, XBT's deleted flag).
//!
//! Every row comes from a database an attacker may have written to (a site's forms fill it):
//! a row with an id out of range, a malformed passkey or an info hash that is not 20 bytes
//! is left out and counted, and never stops the rest.
//!
//! XBT's own tracker looks at its users table at start to see which of `torrent_pass`,
//! `torrent_pass_version`, `can_leech`, `wait_time` and `peers_limit` it has (its schema file
//! has had each commented out at one time or another); the XBT presets do the same at the
//! first read and every full one (a missing column is read as absent, and a change said in
//! the log), and read XBT's settings from `xbt_config`.
//!
//! Owns: [`Source`]. Must not: hold a connection (the caller lends one).

use hotpath_config::{PrivateConfig, PrivateSchema};
use hotpath_store::table::Value;
use hotpath_store::{Backend, Dialect, Fault, StoreError};
use parking_lot::Mutex;

use super::registry::{Entry, Key, Passkey, Registry, Replaced};
use super::slots::LeechSlots;
use super::xbt::{Derived, Settings, Versioned};
use super::{Torrent, User};

/// The users' columns: id, passkey, can_leech, passkey version, removed (Gazelle:
/// `Enabled`; UNIT3D: `deleted_at`), wait time, peers limit, Gazelle's `Visible` and `IP`, and
/// UNIT3D's `group_id`.
const USER_COLS: usize = 10;
/// Of the users' columns, those an XBT site may lack: passkey, can_leech, passkey version,
/// wait time, peers limit.
const PROBED: [usize; 5] = [1, 2, 3, 5, 6];
/// What a column an XBT site lacks is read as (by position in the users' columns).
const ABSENT: [&str; USER_COLS] = ["", "#''", "#1", "#0", "#0", "#0", "#0", "#'1'", "#''", "#0"];
/// The most rows of `xbt_config` read (XBT knows about 40 settings).
const MAX_SETTINGS: usize = 1_000;

/// The reads of one schema preset.
#[derive(Debug)]
pub struct Source {
    schema: PrivateSchema,
    users: String,
    user_cols: [String; USER_COLS],
    users_updated: Option<String>,
    /// The XBT presets: the users' columns the table has (as last looked at; `None` before
    /// the first read), and the settings table that holds the site's secret.
    xbt: Option<Xbt>,
    torrents: String,
    /// id, info hash, two preset columns, removed (UNIT3D: `status`), `deleted_at`.
    torrent_cols: [String; 6],
    torrents_updated: Option<String>,
    /// The torrents table's seeders and leechers columns, where the preset keeps them.
    counts: Option<[String; 2]>,
    /// The users' totals (id, uploaded, downloaded, two more counted as uploaded), read
    /// for the ratio tiers only.
    totals: String,
    total_cols: [String; 5],
    totals_updated: Option<String>,
    /// The largest `updated_at` of each table's last read (users, torrents, totals); `None`
    /// until a full read.
    since: Mutex<[Option<i64>; 3]>,
    /// The site's tables beside users and torrents (Gazelle's, UNIT3D's).
    site: Option<SiteTables>,
    /// The table holding the torrents' seeders and leechers (Gazelle's stats table, else the
    /// torrents table).
    counts_table: String,
    /// The table of a row per client, where the preset has one.
    peers: Option<String>,
    /// UNIT3D's `unregistered_info_hashes`.
    unregistered: Option<String>,
    /// Whether a table of the site's could not be read last time (said once in the log).
    site_missing: std::sync::atomic::AtomicBool,
    /// Most freeleech tokens and users with personal freeleech read (`private.max_tokens`,
    /// `private.max_personal_freeleech`).
    max_tokens: usize,
    max_personal: usize,
}

impl Source {
    /// The reads of `[private]`'s preset and names.
    pub fn new(c: &PrivateConfig) -> Source {
        let name = |k: &str| c.name(k).map(str::to_string);
        let must = |k: &str| name(k).expect("every preset names its tables, ids and keys");
        // Columns a preset lacks are read as constants.
        let or = |k: &str, constant: &str| name(k).unwrap_or_else(|| format!("#{constant}"));
        let (a, b) = match c.schema {
            PrivateSchema::Hotpath => (
                or("torrents.download_pct", "100"),
                or("torrents.upload_pct", "100"),
            ),
            PrivateSchema::Xbt | PrivateSchema::XbtFiles => {
                (or("torrents.flags", "0"), or("torrents.ctime", "0"))
            }
            PrivateSchema::Torrentpier => {
                (or("torrents.tor_type", "0"), or("torrents.poster_id", "0"))
            }
            PrivateSchema::Gazelle => (or("torrents.free", "'0'"), "#0".into()),
            PrivateSchema::Unit3d => (or("torrents.free", "0"), or("torrents.doubleup", "0")),
        };
        let gazelle = c.schema == PrivateSchema::Gazelle;
        let unit3d = c.schema == PrivateSchema::Unit3d;
        Source {
            schema: c.schema,
            users: must("users"),
            user_cols: [
                must("users.id"),
                or("users.passkey", "''"),
                or("users.can_leech", "1"),
                or("users.passkey_version", "0"),
                if gazelle {
                    or("users.enabled", "'1'")
                } else if unit3d {
                    or("users.deleted_at", "NULL")
                } else {
                    or("users.removed", "0")
                },
                or("users.wait_time", "0"),
                or("users.peers_limit", "0"),
                or("users.visible", "'1'"),
                or("users.ip", "''"),
                or("users.group_id", "0"),
            ],
            users_updated: name("users.updated_at"),
            xbt: matches!(c.schema, PrivateSchema::Xbt | PrivateSchema::XbtFiles).then(|| Xbt {
                config: name("config"),
                present: Mutex::new(None),
                config_missing: std::sync::atomic::AtomicBool::new(false),
                logs: [name("announce_log"), name("scrape_log")],
            }),
            torrents: must("torrents"),
            torrent_cols: [
                must("torrents.id"),
                must("torrents.info_hash"),
                a,
                b,
                if unit3d {
                    or("torrents.status", "1")
                } else {
                    or("torrents.removed", "0")
                },
                or("torrents.deleted_at", "NULL"),
            ],
            torrents_updated: name("torrents.updated_at"),
            counts: if gazelle {
                Some(["Seeders".into(), "Leechers".into()])
            } else {
                name("torrents.seeders")
                    .zip(name("torrents.leechers"))
                    .map(|(s, l)| [s, l])
            },
            totals: must("totals"),
            total_cols: [
                must("totals.id"),
                must("totals.uploaded"),
                must("totals.downloaded"),
                or("totals.uploaded_release", "0"),
                or("totals.uploaded_bonus", "0"),
            ],
            totals_updated: name("totals.updated_at"),
            since: Mutex::new([None; 3]),
            site: match c.schema {
                PrivateSchema::Gazelle => Some(SiteTables::Gazelle {
                    tokens: must("tokens"),
                    clients: must("clients"),
                }),
                PrivateSchema::Unit3d => Some(SiteTables::Unit3d {
                    groups: must("groups"),
                    tokens: must("tokens"),
                    personal: must("personal"),
                    featured: must("featured"),
                    clients: must("clients"),
                }),
                _ => None,
            },
            counts_table: name("torrent_stats").unwrap_or_else(|| must("torrents")),
            peers: name("peers"),
            unregistered: name("unregistered"),
            site_missing: std::sync::atomic::AtomicBool::new(false),
            max_tokens: c.max_tokens,
            max_personal: c.max_personal_freeleech,
        }
    }

    /// `SELECT cols[, updated] FROM table [WHERE updated >= ?]` for `dialect`.
    fn select(
        dialect: Dialect,
        table: &str,
        cols: &[String],
        updated: Option<&str>,
        since: bool,
    ) -> String {
        let col = |c: &str| match c.strip_prefix('#') {
            Some(constant) => constant.to_string(),
            None => dialect.quote(c),
        };
        let mut list: Vec<String> = cols.iter().map(|c| col(c)).collect();
        if let Some(u) = updated {
            list.push(col(u));
        }
        let mut sql = format!("SELECT {} FROM {}", list.join(", "), dialect.quote(table));
        if let (Some(u), true) = (updated, since) {
            sql.push_str(&format!(" WHERE {} >= ?", col(u)));
        }
        sql
    }

    /// The statement that sets every torrent's seeders and leechers to 0, for a preset that
    /// keeps them (XBT's, as XBT does at start: the swarms' snapshots write them again).
    pub fn reset_counts(&self, dialect: Dialect) -> Option<String> {
        let [s, l] = self.counts.as_ref()?.each_ref().map(|c| dialect.quote(c));
        Some(format!(
            "UPDATE {} SET {s} = 0, {l} = 0 WHERE {s} <> 0 OR {l} <> 0",
            dialect.quote(&self.counts_table)
        ))
    }

    /// Gazelle: the statement that deletes the rows of clients silent since before unix
    /// second `?` (Ocelot empties the table at start, having lost its peers; hotpath keeps
    /// its swarms across restarts, so only rows no swarm can hold any more go).
    pub fn clear_stale(&self, dialect: Dialect) -> Option<String> {
        let Some(SiteTables::Gazelle { .. }) = &self.site else {
            return None;
        };
        let peers = self.peers.as_ref()?;
        Some(format!(
            "DELETE FROM {} WHERE {} < ?",
            dialect.quote(peers),
            dialect.quote("mtime")
        ))
    }

    /// The SQL of the users read and the torrents read for `dialect` (full reads).
    pub fn statements(&self, dialect: Dialect) -> [String; 2] {
        [
            Self::select(dialect, &self.users, &self.user_cols, None, false),
            Self::select(dialect, &self.torrents, &self.torrent_cols, None, false),
        ]
    }

    /// A user of a row (id, passkey, can_leech, passkey version), or `None` for a malformed
    /// row.
    fn user(r: &[Value]) -> Option<(Passkey, User)> {
        let (key, v) = Self::versioned(r)?;
        Some((key?, v.user))
    }

    /// A user of a row with their passkey version, and their stored passkey (`None` when
    /// the row has none, which derived passkeys need not), or `None` for a malformed row.
    fn versioned(r: &[Value]) -> Option<(Option<Passkey>, Versioned)> {
        let id = u32::try_from(r[0].int()).ok().filter(|&id| id > 0)?;
        let key = match r[1].bytes() {
            [] => None,
            b => Some(Passkey::of(hotpath_wire::passkey::check(b).ok()?)),
        };
        let can_leech = !matches!(r[2], Value::Int(0));
        let v = Versioned {
            user: User { id, can_leech },
            version: r[3].int().clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32,
            wait_time: r[5].int().clamp(0, i64::from(u32::MAX)) as u32,
            peers_limit: r[6].int().clamp(0, i64::from(u16::MAX)) as u16,
        };
        Some((key, v))
    }

    /// A torrent of a row (id, info hash, two preset columns), or `None` for a malformed
    /// row; `Some(None)` for one the preset says is not served (XBT's deleted flag).
    fn torrent(&self, r: &[Value]) -> Option<Option<([u8; 20], Torrent)>> {
        let id = u32::try_from(r[0].int()).ok().filter(|&id| id > 0)?;
        let removed = match self.schema {
            // UNIT3D: served while approved (status 1).
            PrivateSchema::Unit3d => number(&r[4]) != 1,
            _ => r[4].int() != 0,
        };
        if removed || r[5] != Value::Null {
            // Removed (hotpath's own tables), or deleted (UNIT3D): not served.
            return Some(None);
        }
        let hash: [u8; 20] = r[1].bytes().try_into().ok()?;
        let pct = |v: &Value| v.int().clamp(0, 1000) as u16;
        let (download_pct, upload_pct) = match self.schema {
            PrivateSchema::Hotpath => (pct(&r[2]), pct(&r[3])),
            PrivateSchema::Xbt | PrivateSchema::XbtFiles => {
                if r[2].int() & 1 != 0 {
                    return Some(None);
                }
                (100, 100)
            }
            // TorrentPier: tor_type 1 is gold (no download counted), 2 silver (half).
            PrivateSchema::Torrentpier => match r[2].int() {
                1 => (0, 100),
                2 => (50, 100),
                _ => (100, 100),
            },
            // Gazelle's FreeTorrent: '1' freeleech, '2' neutral.
            PrivateSchema::Gazelle => match number(&r[2]) {
                0 => (100, 100),
                1 => (0, 100),
                _ => (0, 0),
            },
            // UNIT3D's free: the percent not counted; doubleup: double upload.
            PrivateSchema::Unit3d => (
                100 - r[2].int().clamp(0, 100) as u16,
                if r[3].int() != 0 { 200 } else { 100 },
            ),
        };
        let poster = match self.schema {
            PrivateSchema::Torrentpier => u32::try_from(r[3].int()).unwrap_or(0),
            _ => 0,
        };
        let tor_type = match self.schema {
            PrivateSchema::Torrentpier => Torrent::tor_type_of(download_pct),
            _ => 0,
        };

        let t = Torrent {
            id,
            download_pct,
            upload_pct,
            poster,
            tor_type,
        };
        Some(Some((hash, t)))
    }

    /// Reads both tables into the registries, and the users' totals into `slots` when its
    /// tiers need them: every row when `full` (or when a table has no updated_at column, or
    /// was never read whole), else the rows whose updated_at reached the largest one seen
    /// before. Returns what it changed and the rows left out.
    #[allow(clippy::too_many_arguments)]
    pub fn read(
        &self,
        db: &mut dyn Backend,
        full: bool,
        users: &Registry<Passkey, User>,
        torrents: &Registry<[u8; 20], Torrent>,
        slots: &LeechSlots,
        derived: Option<&Derived>,
    ) -> Result<Polled, StoreError> {
        let [users_since, torrents_since, totals_since] = *self.since.lock();
        let mut settings = None;
        let protected = std::cell::RefCell::new(std::collections::HashSet::new());
        let user_groups = std::cell::RefCell::new(std::collections::HashMap::new());
        let (u, users_since) = match (&self.xbt, derived) {
            (Some(xbt), Some(derived)) => {
                let first = xbt.present.lock().is_none();
                let cols = xbt.columns(db, full, &self.users, &self.user_cols)?;
                if full || first {
                    settings = Some(xbt.settings(db)?);
                }
                (self.read_xbt_users(db, &cols, users, derived)?, None)
            }
            _ => {
                let user_table = Table {
                    name: &self.users,
                    cols: &self.user_cols,
                    updated: self.users_updated.as_deref(),
                };
                user_table.read_into(db, users_since, full, users, |r| {
                    // A removed user's row is kept, marked: the user goes (Gazelle: served
                    // while Enabled is '1').
                    let removed = match self.site {
                        Some(SiteTables::Gazelle { .. }) => number(&r[4]) != 1,
                        Some(SiteTables::Unit3d { .. }) => r[4] != Value::Null,
                        None => r[4].int() != 0,
                    };
                    if removed {
                        return Some(None);
                    }
                    let user = Self::user(r)?;
                    match self.site {
                        // Gazelle's IP-protected users: not Visible, or at 127.0.0.1 (no
                        // more than the registry holds users).
                        Some(SiteTables::Gazelle { .. })
                            if (number(&r[7]) == 0 || r[8].bytes() == b"127.0.0.1")
                                && protected.borrow().len() < users.max() =>
                        {
                            protected.borrow_mut().insert(user.1.id);
                        }
                        // UNIT3D: each user's group.
                        Some(SiteTables::Unit3d { .. }) => {
                            let group = r[9].int().clamp(i64::from(i32::MIN), i64::from(i32::MAX));
                            if user_groups.borrow().len() < users.max() {
                                user_groups.borrow_mut().insert(user.1.id, group as i32);
                            }
                        }
                        _ => {}
                    }
                    Some(Some(user))
                })?
            }
        };
        let torrent_table = Table {
            name: &self.torrents,
            cols: &self.torrent_cols,
            updated: self.torrents_updated.as_deref(),
        };
        // XBT's ctime, kept only while some user has a wait time.
        let waits = derived.is_some_and(|d| d.any_wait());
        let ctimes = std::cell::RefCell::new(hashbrown::HashMap::new());
        let (t, torrents_since) =
            torrent_table.read_into(db, torrents_since, full, torrents, |r| {
                let row = self.torrent(r);
                if let (true, Some(Some((_, t)))) = (waits, &row) {
                    let ctime = r[3].int().clamp(0, i64::from(u32::MAX)) as u32;
                    // No more than the registry holds torrents.
                    if ctime > 0 && ctimes.borrow().len() < torrents.max() {
                        ctimes.borrow_mut().insert(t.id, ctime);
                    }
                }
                row
            })?;
        let (c, totals_since) = if slots.reads_totals() {
            self.read_totals(db, totals_since, full, slots)?
        } else {
            (0, None)
        };
        // Rows of the site's other tables left out: malformed, or past a cap.
        let mut site_skipped = 0;
        let site = match &self.site {
            Some(SiteTables::Gazelle { tokens, clients }) => Some(Site {
                protected: protected.into_inner(),
                tokens: self.read_pairs(
                    db,
                    tokens,
                    ["UserID", "TorrentID"],
                    "Expired",
                    self.max_tokens,
                    &mut site_skipped,
                )?,
                clients: self.read_clients(db, clients, "peer_id", &mut site_skipped)?,
                ..Site::default()
            }),
            Some(SiteTables::Unit3d {
                groups,
                tokens,
                personal,
                featured,
                clients,
            }) => Some(Site {
                tokens: self.read_pairs(
                    db,
                    tokens,
                    ["user_id", "torrent_id"],
                    "",
                    self.max_tokens,
                    &mut site_skipped,
                )?,
                clients: self.read_clients(db, clients, "peer_id_prefix", &mut site_skipped)?,
                groups: self.read_groups(db, groups, &mut site_skipped)?,
                user_groups: user_groups.into_inner(),
                personal: self.read_ids(
                    db,
                    personal,
                    "user_id",
                    self.max_personal,
                    &mut site_skipped,
                )?,
                featured: self.read_ids(
                    db,
                    featured,
                    "torrent_id",
                    torrents.max(),
                    &mut site_skipped,
                )?,
                ..Site::default()
            }),
            None => None,
        };
        *self.since.lock() = [users_since, torrents_since, totals_since];
        Ok(Polled {
            skipped: u.skipped + t.skipped + c + site_skipped,
            users: u,
            torrents: t,
            settings,
            ctimes: derived.map(|_| ctimes.into_inner()),
            site,
        })
    }

    /// Deletes the torrents XBT's `flags` mark deleted (bit 1) from the torrents table, as
    /// XBT does at each read of it (unless `auto_register` is on); the XBT presets only.
    pub fn delete_flagged(&self, db: &mut dyn Backend) -> Result<(), StoreError> {
        if self.xbt.is_none() || self.torrent_cols[2].starts_with('#') {
            return Ok(());
        }
        let d = db.dialect();
        let flags = d.quote(&self.torrent_cols[2]);
        db.execute(&format!(
            "DELETE FROM {} WHERE {flags} <> 0 AND {flags} & 1 <> 0",
            d.quote(&self.torrents)
        ))
    }

    /// Writes (user, info hash, unix second) of unregistered torrents announced into UNIT3D's
    /// `unregistered_info_hashes`, as UNIT3D's announce controller upserts them: a new pair
    /// with `created_at` and `updated_at`, a known one's `updated_at` moved on. A torrent the
    /// site has but does not serve (pending, rejected, deleted) is not unregistered, and is
    /// left out, as UNIT3D leaves it out. Rows the database refuses (a user deleted since, whom
    /// the table's foreign key no longer finds) are written one by one so the others land;
    /// returns how many were refused. An error is one the same rows may pass later.
    pub fn write_unregistered(
        &self,
        db: &mut dyn Backend,
        rows: &[(u32, [u8; 20], u32)],
    ) -> Result<usize, StoreError> {
        let Some(table) = &self.unregistered else {
            return Ok(0);
        };
        let mut refused = 0;
        let d = db.dialect();
        let q = |c: &str| d.quote(c);
        let updated = q("updated_at");
        for chunk in rows.chunks(500) {
            let distinct: std::collections::BTreeSet<[u8; 20]> =
                chunk.iter().map(|r| r.1).collect();
            let hashes: Vec<Value> = distinct
                .into_iter()
                .map(|h| Value::Blob(h.into()))
                .collect();
            let sql = format!(
                "SELECT {info_hash} FROM {} WHERE {info_hash} IN ({})",
                q(&self.torrents),
                vec!["?"; hashes.len()].join(", "),
                info_hash = q(&self.torrent_cols[1]),
            );
            let mut known = std::collections::HashSet::new();
            db.query(&sql, &hashes, &mut |r| {
                if let Some(Value::Blob(h)) = r.first() {
                    known.insert(h.clone());
                }
            })?;
            let chunk: Vec<_> = chunk.iter().filter(|r| !known.contains(&r.1[..])).collect();
            if chunk.is_empty() {
                continue;
            }
            let upsert = |db: &mut dyn Backend, rows: &[&(u32, [u8; 20], u32)]| {
                let values = vec!["(?, ?, ?, ?)"; rows.len()].join(", ");
                let head = format!(
                    "INSERT INTO {} ({}, {}, {}, {updated}) VALUES {values}",
                    q(table),
                    q("user_id"),
                    q("info_hash"),
                    q("created_at"),
                );
                let sql = match d {
                    Dialect::Mysql => {
                        format!("{head} ON DUPLICATE KEY UPDATE {updated} = VALUES({updated})")
                    }
                    _ => format!(
                        "{head} ON CONFLICT ({}, {}) DO UPDATE SET {updated} = excluded.{updated}",
                        q("info_hash"),
                        q("user_id")
                    ),
                };
                let params: Vec<Value> = rows
                    .iter()
                    .flat_map(|&&(user, hash, at)| {
                        let at = hotpath_wire::http::civil_time(i64::from(at));
                        [
                            Value::Int(i64::from(user)),
                            Value::Blob(hash.into()),
                            Value::Text(at.clone().into()),
                            Value::Text(at.into()),
                        ]
                    })
                    .collect();
                db.execute_with(&sql, &params)
            };
            match upsert(db, &chunk) {
                Ok(()) => {}
                Err(e) if e.fault() == Some(Fault::Refused) => {
                    for row in &chunk {
                        match upsert(db, std::slice::from_ref(row)) {
                            Ok(()) => {}
                            Err(e) if e.fault() == Some(Fault::Refused) => refused += 1,
                            Err(e) => return Err(e),
                        }
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Ok(refused)
    }

    /// Adds torrents `hashes` to the torrents table (XBT's `auto_register`) with `ctime` and
    /// `mtime` `now`, as XBT adds them; one already there is left as it is.
    pub fn register(
        &self,
        db: &mut dyn Backend,
        hashes: &[[u8; 20]],
        now: i64,
    ) -> Result<(), StoreError> {
        let d = db.dialect();
        let created = match self.torrent_cols[3].strip_prefix('#') {
            Some(_) => "ctime".to_string(),
            None => self.torrent_cols[3].clone(),
        };
        for chunk in hashes.chunks(500) {
            let values = vec!["(?, ?, ?)"; chunk.len()].join(", ");
            let cols = format!(
                "{} ({}, {}, {})",
                d.quote(&self.torrents),
                d.quote(&self.torrent_cols[1]),
                d.quote("mtime"),
                d.quote(&created)
            );
            let sql = match d {
                Dialect::Mysql => format!("INSERT IGNORE INTO {cols} VALUES {values}"),
                _ => format!("INSERT INTO {cols} VALUES {values} ON CONFLICT DO NOTHING"),
            };
            let params: Vec<Value> = chunk
                .iter()
                .flat_map(|h| [Value::Blob((*h).into()), Value::Int(now), Value::Int(now)])
                .collect();
            db.execute_with(&sql, &params)?;
        }
        Ok(())
    }

    /// Reads an XBT users table (whole: it has no updated_at column) with columns `cols`:
    /// users with a stored passkey into `users`, every user into `derived`'s. A row whose
    /// stored passkey is malformed is counted, and still served by derived passkeys.
    fn read_xbt_users(
        &self,
        db: &mut dyn Backend,
        cols: &[String; USER_COLS],
        users: &Registry<Passkey, User>,
        derived: &Derived,
    ) -> Result<Read, StoreError> {
        let sql = Self::select(db.dialect(), &self.users, cols, None, false);
        let (mut stored, mut all, mut skipped) = (Vec::new(), Vec::new(), 0);
        db.query(&sql, &[], &mut |r| {
            let row = Self::versioned(r).or_else(|| {
                // The id alone, when only the stored passkey is malformed.
                skipped += 1;
                let mut without = r.to_vec();
                without[1] = Value::Null;
                Self::versioned(&without)
            });
            if let Some((key, v)) = row {
                if let Some(key) = key {
                    stored.push((key, v.user));
                }
                all.push((v.user.id.to_be_bytes(), v));
            }
        })?;
        derived.set_any_wait(all.iter().any(|(_, v)| v.wait_time > 0));
        let a = users.replace_all(stored);
        let b = derived.users.replace_all(all);
        Ok(Read {
            skipped: skipped + a.skipped + b.skipped,
            // Every user is in the derived registry: its changes are the users'.
            changed: b.changed.max(a.changed),
            gone: b.gone,
        })
    }

    /// The totals of a row (id, uploaded, downloaded, release, bonus): the user and their
    /// uploaded (the three added) and downloaded bytes, or `None` for a malformed row.
    fn totals_row(r: &[Value]) -> Option<(u32, u64, u64)> {
        let id = u32::try_from(r[0].int()).ok().filter(|&id| id > 0)?;
        let bytes = |v: &Value| u64::try_from(v.int()).unwrap_or(0);
        let up = bytes(&r[1])
            .saturating_add(bytes(&r[3]))
            .saturating_add(bytes(&r[4]));
        Some((id, up, bytes(&r[2])))
    }

    /// Reads the users' totals into `slots`, as [`Table::read_into`] reads a table.
    fn read_totals(
        &self,
        db: &mut dyn Backend,
        since: Option<i64>,
        full: bool,
        slots: &LeechSlots,
    ) -> Result<(usize, Option<i64>), StoreError> {
        let updated = self.totals_updated.as_deref();
        let changed_since = since.filter(|_| !full && updated.is_some());
        let sql = Self::select(
            db.dialect(),
            &self.totals,
            &self.total_cols,
            updated,
            changed_since.is_some(),
        );
        let params: Vec<Value> = changed_since.map(Value::Int).into_iter().collect();
        let (mut rows, mut skipped, mut top) = (Vec::new(), 0, None);
        db.query(&sql, &params, &mut |r| {
            if updated.is_some() {
                top = top.max(Some(r[5].int()));
            }
            match Self::totals_row(r) {
                Some(row) => rows.push(row),
                None => skipped += 1,
            }
        })?;
        skipped += slots.take(changed_since.is_none(), rows);
        Ok((skipped, updated.and(top.max(since).or(Some(0)))))
    }
}

/// A number a column holds as an integer or as text (an ENUM of digits, as Gazelle's
/// `Enabled`, `Visible` and `FreeTorrent`); -1 for anything else.
fn number(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        Value::Text(_) | Value::Blob(_) => std::str::from_utf8(v.bytes())
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(-1),
        _ => -1,
    }
}

/// What a read of one table did to its registry.
pub type Read = Replaced;

/// The tables a site preset reads beside users and torrents.
#[derive(Debug)]
enum SiteTables {
    /// Gazelle's freeleech tokens and client whitelist.
    Gazelle { tokens: String, clients: String },
    /// UNIT3D's groups, freeleech tokens, personal freeleech, featured torrents and client
    /// blacklist.
    Unit3d {
        groups: String,
        tokens: String,
        personal: String,
        featured: String,
        clients: String,
    },
}

/// What a site's tables hold beside users and torrents, as one poll read them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Site {
    /// IP-protected users (Gazelle).
    pub protected: std::collections::HashSet<u32>,
    /// Freeleech tokens (user, torrent): Gazelle's not expired, UNIT3D's.
    pub tokens: std::collections::HashSet<(u32, u32)>,
    /// Peer id prefixes: Gazelle's whitelist (empty: any client), UNIT3D's blacklist.
    pub clients: Vec<Box<[u8]>>,
    /// UNIT3D's groups, by id.
    pub groups: std::collections::HashMap<i32, super::unit3d::Group>,
    /// UNIT3D: each user's group.
    pub user_groups: std::collections::HashMap<u32, i32>,
    /// UNIT3D: users with personal freeleech.
    pub personal: std::collections::HashSet<u32>,
    /// UNIT3D: featured torrents.
    pub featured: std::collections::HashSet<u32>,
}

/// Most whitelist rows read (the push API's own cap on a client list).
const MAX_CLIENT_ROWS: usize = super::push::MAX_CLIENTS;

impl Source {
    /// Reads a table of the site's that may be missing: a transient error is an error, any
    /// other leaves `rows` as read so far, said once in the log.
    fn read_optional(
        &self,
        db: &mut dyn Backend,
        sql: &str,
        table: &str,
        row: &mut dyn FnMut(&[Value]),
    ) -> Result<(), StoreError> {
        match db.query(sql, &[], row) {
            Ok(()) => Ok(()),
            Err(
                e @ StoreError::Db {
                    fault: Fault::Transient,
                    ..
                },
            ) => Err(e),
            Err(e) => {
                use std::sync::atomic::Ordering::Relaxed;
                if !self.site_missing.swap(true, Relaxed) {
                    log::warn!("private: {table} not read ({e}): taken as empty");
                }
                Ok(())
            }
        }
    }

    /// Pairs of ids (freeleech tokens: user, torrent) of columns `cols` (those whose column
    /// `live` is 0, unless it is ""), at most `max` (a row past it, or malformed, is left
    /// out).
    fn read_pairs(
        &self,
        db: &mut dyn Backend,
        table: &str,
        cols: [&str; 2],
        live: &str,
        max: usize,
        skipped: &mut usize,
    ) -> Result<std::collections::HashSet<(u32, u32)>, StoreError> {
        let d = db.dialect();
        let mut sql = format!(
            "SELECT {}, {} FROM {}",
            d.quote(cols[0]),
            d.quote(cols[1]),
            d.quote(table)
        );
        if !live.is_empty() {
            sql.push_str(&format!(" WHERE {} = 0", d.quote(live)));
        }
        let mut tokens = std::collections::HashSet::new();
        self.read_optional(db, &sql, table, &mut |r| {
            let id = |v: &Value| u32::try_from(v.int()).ok().filter(|&i| i > 0);
            match (id(&r[0]), id(&r[1])) {
                (Some(u), Some(t)) if tokens.len() < max => {
                    tokens.insert((u, t));
                }
                _ => *skipped += 1,
            }
        })?;
        Ok(tokens)
    }

    /// Ids of column `col` (UNIT3D's personal freeleech, featured torrents), at most `max`.
    fn read_ids(
        &self,
        db: &mut dyn Backend,
        table: &str,
        col: &str,
        max: usize,
        skipped: &mut usize,
    ) -> Result<std::collections::HashSet<u32>, StoreError> {
        let d = db.dialect();
        let sql = format!("SELECT {} FROM {}", d.quote(col), d.quote(table));
        let mut ids = std::collections::HashSet::new();
        self.read_optional(db, &sql, table, &mut |r| match u32::try_from(r[0].int())
            .ok()
            .filter(|&i| i > 0)
        {
            Some(id) if ids.len() < max => {
                ids.insert(id);
            }
            _ => *skipped += 1,
        })?;
        Ok(ids)
    }

    /// UNIT3D's groups: each one's rules, at most [`super::unit3d::MAX_GROUPS`].
    fn read_groups(
        &self,
        db: &mut dyn Backend,
        table: &str,
        skipped: &mut usize,
    ) -> Result<std::collections::HashMap<i32, super::unit3d::Group>, StoreError> {
        let d = db.dialect();
        let cols = [
            "id",
            "slug",
            "download_slots",
            "is_immune",
            "is_freeleech",
            "is_double_upload",
        ]
        .map(|c| d.quote(c))
        .join(", ");
        let sql = format!("SELECT {cols} FROM {}", d.quote(table));
        let mut groups = std::collections::HashMap::new();
        self.read_optional(db, &sql, table, &mut |r| {
            if groups.len() >= super::unit3d::MAX_GROUPS {
                *skipped += 1;
                return;
            }
            let id = r[0].int().clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32;
            let slots = (r[2] != Value::Null).then(|| r[2].int());
            let flag = |v: &Value| number(v) > 0;
            let g =
                super::unit3d::Group::of(r[1].text(), slots, flag(&r[3]), flag(&r[4]), flag(&r[5]));
            groups.insert(id, g);
        })?;
        Ok(groups)
    }

    /// Peer id prefixes (1 to 20 bytes) of column `col`, at most [`MAX_CLIENT_ROWS`]:
    /// Gazelle's whitelist, UNIT3D's blacklist.
    fn read_clients(
        &self,
        db: &mut dyn Backend,
        table: &str,
        col: &str,
        skipped: &mut usize,
    ) -> Result<Vec<Box<[u8]>>, StoreError> {
        let d = db.dialect();
        let sql = format!("SELECT {} FROM {}", d.quote(col), d.quote(table));
        let mut clients: Vec<Box<[u8]>> = Vec::new();
        self.read_optional(db, &sql, table, &mut |r| {
            let p = r[0].bytes();
            if !p.is_empty() && p.len() <= 20 && clients.len() < MAX_CLIENT_ROWS {
                clients.push(p.into());
            } else {
                *skipped += 1;
            }
        })?;
        Ok(clients)
    }
}

/// What one poll of the users and torrents tables did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Polled {
    /// Rows left out, of every table read.
    pub skipped: usize,
    /// What it did to the users.
    pub users: Read,
    /// What it did to the torrents.
    pub torrents: Read,
    /// XBT's settings, when this poll read them (the first and every full one).
    pub settings: Option<Settings>,
    /// XBT's torrents' `ctime` by id (the XBT presets; empty while no user has a wait time).
    pub ctimes: Option<hashbrown::HashMap<u32, u32>>,
    /// Gazelle's protected users, tokens and whitelist (the Gazelle preset).
    pub site: Option<Site>,
}

/// What the XBT presets look at beside the rows: the users' columns and the site's secret.
#[derive(Debug)]
struct Xbt {
    /// The settings table (`xbt_config`), or `None` when named "".
    config: Option<String>,
    /// Whether the users table has each of its [`PROBED`] columns, as last looked at.
    present: Mutex<Option<[bool; PROBED.len()]>>,
    /// Whether the settings table could not be read last time (said once in the log).
    config_missing: std::sync::atomic::AtomicBool,
    /// The announce and scrape log tables (`None`: named "", never written).
    logs: [Option<String>; 2],
}

impl Xbt {
    /// The users' columns to read: `named` less those the table lacks, looked at again on a
    /// full read and the first (a change is logged).
    fn columns(
        &self,
        db: &mut dyn Backend,
        full: bool,
        table: &str,
        named: &[String; USER_COLS],
    ) -> Result<[String; USER_COLS], StoreError> {
        let was = *self.present.lock();
        let present = match was {
            Some(p) if !full => p,
            _ => {
                let mut p = [false; PROBED.len()];
                for (i, &col) in PROBED.iter().enumerate() {
                    p[i] = match named[col].strip_prefix('#') {
                        Some(_) => false,
                        None => has_column(db, table, &named[col])?,
                    };
                    if was.is_none_or(|w| w[i] != p[i]) && !named[col].starts_with('#') {
                        log::info!(
                            "private: {table} {} column {}: {}",
                            if p[i] { "has its" } else { "has no" },
                            named[col],
                            match (col, p[i]) {
                                (1, true) => "passkeys stored per user are read",
                                (1, false) => "users have XBT's derived passkeys only",
                                (2, true) => "users it marks 0 may only seed",
                                (2, false) => "every user may download",
                                (3, true) => "derived passkeys follow each user's version",
                                (3, false) => "derived passkeys are at version 0",
                                (5, true) => "users wait their wait_time for new torrents",
                                (5, false) => "no user waits for new torrents",
                                (_, true) => "users' own peers_limit caps their downloads",
                                (_, false) => "users have no peers_limit of their own",
                            }
                        );
                    }
                }
                *self.present.lock() = Some(p);
                p
            }
        };
        let mut cols = named.clone();
        for (i, &col) in PROBED.iter().enumerate() {
            if !present[i] {
                cols[col] = ABSENT[col].to_string();
            }
        }
        Ok(cols)
    }

    /// The site's settings (`xbt_config`): what a missing or unreadable table holds is none
    /// (logged), and at most [`MAX_SETTINGS`] rows are read.
    fn settings(&self, db: &mut dyn Backend) -> Result<Settings, StoreError> {
        let Some(config) = &self.config else {
            return Ok(Settings::default());
        };
        let d = db.dialect();
        let sql = format!(
            "SELECT {}, {} FROM {}",
            d.quote("name"),
            d.quote("value"),
            d.quote(config)
        );
        let mut rows: Vec<(String, Vec<u8>)> = Vec::new();
        let read = db.query(&sql, &[], &mut |r| {
            if rows.len() < MAX_SETTINGS {
                rows.push((r[0].text().to_string(), r[1].bytes().to_vec()));
            }
        });
        match read {
            Ok(()) => {}
            Err(
                e @ StoreError::Db {
                    fault: Fault::Transient,
                    ..
                },
            ) => return Err(e),
            Err(e) => {
                if !self
                    .config_missing
                    .swap(true, std::sync::atomic::Ordering::Relaxed)
                {
                    log::warn!(
                        "private: {config} not read ({e}): XBT's derived passkeys are off, and \
                         its settings are hotpath's config"
                    );
                }
                return Ok(Settings::default());
            }
        }
        self.config_missing
            .store(false, std::sync::atomic::Ordering::Relaxed);
        let mut s = Settings::of(rows.iter().map(|(n, v)| (n.as_str(), v.as_slice())));
        // A log whose table the site lacks stays off: an insert into it would fail every
        // flush, and hold up every other row with it.
        for (on, table) in [
            (&mut s.log_announce, &self.logs[0]),
            (&mut s.log_scrape, &self.logs[1]),
        ] {
            if *on {
                let has = match table {
                    Some(t) => has_column(db, t, "mtime")?,
                    None => false,
                };
                if !has {
                    log::warn!(
                        "private: {config} turns on a log whose table ({}) this database \
                         lacks: not written",
                        table.as_deref().unwrap_or("named \"\"")
                    );
                    *on = false;
                }
            }
        }
        Ok(s)
    }
}

/// Whether `table` has column `col`: a transient error (a lost connection) is an error, any
/// other (the database's "unknown column") a no.
fn has_column(db: &mut dyn Backend, table: &str, col: &str) -> Result<bool, StoreError> {
    let d = db.dialect();
    let sql = format!(
        "SELECT {} FROM {} WHERE 1 = 0",
        d.quote(col),
        d.quote(table)
    );
    match db.query(&sql, &[], &mut |_| {}) {
        Ok(()) => Ok(true),
        Err(
            e @ StoreError::Db {
                fault: Fault::Transient,
                ..
            },
        ) => Err(e),
        Err(StoreError::Db { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// One table a private tracker reads.
struct Table<'a> {
    name: &'a str,
    cols: &'a [String],
    updated: Option<&'a str>,
}

impl Table<'_> {
    /// Reads the table into `registry` (every row, or the rows whose updated_at reached
    /// `since` unless `full`); `row` makes an entry of a row, or says the row is malformed
    /// (`None`) or not served (`Some(None)`: the entry of its id, `r[0]`, goes). Returns the
    /// rows left out and the largest updated_at seen.
    fn read_into<K: Key, V: Entry>(
        &self,
        db: &mut dyn Backend,
        since: Option<i64>,
        full: bool,
        registry: &Registry<K, V>,
        row: impl Fn(&[Value]) -> Option<Option<(K, V)>>,
    ) -> Result<(Read, Option<i64>), StoreError> {
        let changed_since = since.filter(|_| !full && self.updated.is_some());
        let sql = Source::select(
            db.dialect(),
            self.name,
            self.cols,
            self.updated,
            changed_since.is_some(),
        );
        let params: Vec<Value> = changed_since.map(Value::Int).into_iter().collect();
        let (mut rows, mut gone, mut skipped, mut top) = (Vec::new(), Vec::new(), 0, None);
        let at = self.cols.len();
        db.query(&sql, &params, &mut |r| {
            if self.updated.is_some() {
                top = top.max(Some(r[at].int()));
            }
            match row(r) {
                Some(Some(entry)) => rows.push(entry),
                Some(None) => gone.push(r[0].int()),
                None => skipped += 1,
            }
        })?;
        let read = if changed_since.is_some() {
            let mut read = Read::default();
            for id in gone {
                read.gone += usize::from(registry.remove_id(id as u32));
            }
            for (k, v) in rows {
                let differs = registry.differs(&k, &v);
                match registry.put_key(k, v) {
                    Ok(_) => read.changed += usize::from(differs),
                    Err(_) => skipped += 1,
                }
            }
            read
        } else {
            registry.replace_all(rows)
        };
        let newest = self.updated.and(top.max(since).or(Some(0)));
        Ok((
            Read {
                skipped: skipped + read.skipped,
                ..read
            },
            newest,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_preset_reads_its_tables_and_names_quote_per_dialect() {
        let c = PrivateConfig {
            schema: PrivateSchema::Xbt,
            ..Default::default()
        };
        let [u, t] = Source::new(&c).statements(Dialect::Mysql);
        // XBT's own schema has no can_leech: everyone may leech unless the site names one.
        assert_eq!(
            u,
            "SELECT `uid`, `torrent_pass`, 1, `torrent_pass_version`, 0, `wait_time`, `peers_limit`, '1', '', 0 FROM `xbt_users`"
        );
        assert_eq!(
            Source::new(&c).reset_counts(Dialect::Mysql).unwrap(),
            "UPDATE `xbt_torrents` SET `seeders` = 0, `leechers` = 0 WHERE `seeders` <> 0 OR \
             `leechers` <> 0"
        );
        let mut named = c.clone();
        named
            .names
            .insert("users.can_leech".into(), "can_leech".into());
        let [u, _] = Source::new(&named).statements(Dialect::Mysql);
        assert_eq!(
            u,
            "SELECT `uid`, `torrent_pass`, `can_leech`, `torrent_pass_version`, 0, `wait_time`, `peers_limit`, '1', '', 0 FROM `xbt_users`"
        );
        assert_eq!(
            t,
            "SELECT `tid`, `info_hash`, `flags`, `ctime`, 0, NULL FROM `xbt_torrents`"
        );
        let mut c = PrivateConfig {
            schema: PrivateSchema::Torrentpier,
            ..Default::default()
        };
        c.names.insert("users".into(), "site.bb_bt_users".into());
        let [u, t] = Source::new(&c).statements(Dialect::Postgres);
        assert_eq!(
            u,
            r#"SELECT "user_id", "auth_key", 1, 0, 0, 0, 0, '1', '', 0 FROM "site"."bb_bt_users""#
        );
        assert_eq!(
            t,
            r#"SELECT "topic_id", "info_hash", "tor_type", "poster_id", 0, NULL FROM "bb_bt_torrents""#
        );
        let s = Source::new(&PrivateConfig::default());
        let sql = Source::select(
            Dialect::Sqlite,
            &s.users,
            &s.user_cols,
            s.users_updated.as_deref(),
            true,
        );
        assert_eq!(
            sql,
            r#"SELECT "user_id", "passkey", "can_leech", 0, "removed", 0, 0, '1', '', 0, "updated_at" FROM "hp_users" WHERE "updated_at" >= ?"#
        );
        // Gazelle: users served while Enabled is '1', IP-protected by Visible and IP; the
        // counts live in torrents_leech_stats, and stale client rows go at start.
        let g = Source::new(&PrivateConfig {
            schema: PrivateSchema::Gazelle,
            ..Default::default()
        });
        let [u, t] = g.statements(Dialect::Mysql);
        assert_eq!(
            u,
            "SELECT `ID`, `torrent_pass`, `can_leech`, 0, `Enabled`, 0, 0, `Visible`, `IP`, \
             0 FROM `users_main`"
        );
        assert_eq!(
            t,
            "SELECT `ID`, `info_hash`, `FreeTorrent`, 0, 0, NULL FROM `torrents`"
        );
        assert_eq!(
            g.reset_counts(Dialect::Mysql).unwrap(),
            "UPDATE `torrents_leech_stats` SET `Seeders` = 0, `Leechers` = 0 WHERE `Seeders` \
             <> 0 OR `Leechers` <> 0"
        );
        assert_eq!(
            g.clear_stale(Dialect::Mysql).unwrap(),
            "DELETE FROM `xbt_files_users` WHERE `mtime` < ?"
        );
        assert_eq!(
            s.clear_stale(Dialect::Mysql),
            None,
            "hotpath's own keeps none"
        );
    }

    #[test]
    fn each_preset_reads_its_users_totals_for_the_ratio_tiers() {
        let sql = |schema| {
            let s = Source::new(&PrivateConfig {
                schema,
                ..Default::default()
            });
            let since = s.totals_updated.is_some();
            Source::select(
                Dialect::Mysql,
                &s.totals,
                &s.total_cols,
                s.totals_updated.as_deref(),
                since,
            )
        };
        assert_eq!(
            sql(PrivateSchema::Torrentpier),
            "SELECT `user_id`, `u_up_total`, `u_down_total`, `u_up_release`, `u_up_bonus` \
             FROM `bb_bt_users`"
        );
        assert_eq!(
            sql(PrivateSchema::Xbt),
            "SELECT `uid`, `uploaded`, `downloaded`, 0, 0 FROM `xbt_users`"
        );
        assert_eq!(
            sql(PrivateSchema::Hotpath),
            "SELECT `user_id`, `uploaded`, `downloaded`, 0, 0, `updated_at` FROM \
             `hp_user_totals` WHERE `updated_at` >= ?"
        );
        let v = Value::Int;
        assert_eq!(
            Source::totals_row(&[v(3), v(10), v(40), v(5), v(-9)]),
            Some((3, 15, 40))
        );
        assert_eq!(Source::totals_row(&[v(0), v(10), v(40), v(0), v(0)]), None);
        assert_eq!(
            Source::totals_row(&[v(3), v(-1), v(i64::MIN), v(i64::MAX), v(i64::MAX)]),
            Some((3, 2 * i64::MAX as u64, 0))
        );
    }

    #[test]
    fn malformed_rows_are_left_out_and_presets_read_their_factors() {
        let v = |i: i64| Value::Int(i);
        let key = |s: &str| Value::Text(s.into());
        assert!(Source::user(&[v(1), key("abc123"), v(1), v(0), v(0), v(0), v(0)]).is_some());
        for bad in [
            [v(0), key("abc123"), v(1), v(0), v(0), v(0), v(0)],
            [v(1 << 33), key("abc123"), v(1), v(0), v(0), v(0), v(0)],
            [v(1), key(""), v(1), v(0), v(0), v(0), v(0)],
            [v(1), key("abc 123"), v(1), v(0), v(0), v(0), v(0)],
            [v(1), key(&"a".repeat(65)), v(1), v(0), v(0), v(0), v(0)],
        ] {
            assert!(Source::user(&bad).is_none(), "{bad:?}");
        }
        assert!(
            !Source::user(&[v(1), key("k"), v(0), v(0), v(0), v(0), v(0)])
                .unwrap()
                .1
                .can_leech
        );
        assert!(
            Source::user(&[v(1), key("k"), Value::Null, v(0), v(0), v(0), v(0)])
                .unwrap()
                .1
                .can_leech
        );
        // An XBT user needs no stored passkey: derived ones carry their version.
        let (key_of, u) =
            Source::versioned(&[v(7), key(""), v(1), v(3), v(0), v(0), v(0)]).unwrap();
        assert_eq!((key_of, u.user.id, u.version), (None, 7, 3));
        let hash = Value::Blob([1; 20].into());
        let tp = Source::new(&PrivateConfig {
            schema: PrivateSchema::Torrentpier,
            ..Default::default()
        });
        let gold = tp
            .torrent(&[v(5), hash.clone(), v(1), v(0), v(0), Value::Null])
            .unwrap()
            .unwrap();
        assert_eq!((gold.1.download_pct, gold.1.upload_pct), (0, 100));
        let silver = tp
            .torrent(&[v(5), hash.clone(), v(2), v(0), v(0), Value::Null])
            .unwrap()
            .unwrap();
        assert_eq!(silver.1.download_pct, 50);
        assert!(tp
            .torrent(&[
                v(5),
                Value::Blob([1; 19].into()),
                v(0),
                v(0),
                v(0),
                Value::Null
            ])
            .is_none());
        let xbt = Source::new(&PrivateConfig {
            schema: PrivateSchema::Xbt,
            ..Default::default()
        });
        assert_eq!(
            xbt.torrent(&[v(5), hash.clone(), v(1), v(0), v(0), Value::Null]),
            Some(None)
        );
        let own = Source::new(&PrivateConfig::default());
        let t = own
            .torrent(&[v(5), hash, v(-5), v(5000), v(0), Value::Null])
            .unwrap()
            .unwrap();
        assert_eq!((t.1.download_pct, t.1.upload_pct), (0, 1000));
        // Gazelle's FreeTorrent, an ENUM read as text: '1' freeleech, '2' neutral, and
        // anything it does not know counts nothing either, as Ocelot reads it.
        let g = Source::new(&PrivateConfig {
            schema: PrivateSchema::Gazelle,
            ..Default::default()
        });
        let hash = Value::Blob([1; 20].into());
        for (free, pcts) in [
            (Value::Text("0".into()), (100, 100)),
            (Value::Text("1".into()), (0, 100)),
            (Value::Text("2".into()), (0, 0)),
            (Value::Blob(b"1".as_slice().into()), (0, 100)),
            (Value::Int(0), (100, 100)),
            (Value::Text("x".into()), (0, 0)),
        ] {
            let t = g
                .torrent(&[v(5), hash.clone(), free.clone(), v(0), v(0), Value::Null])
                .unwrap()
                .unwrap();
            assert_eq!((t.1.download_pct, t.1.upload_pct), pcts, "{free:?}");
        }
        assert_eq!(number(&Value::Text(" 1 ".into())), 1);
        assert_eq!(number(&Value::Null), -1);
        // UNIT3D: `free` percent, `doubleup`; served while approved and not deleted.
        let u = Source::new(&PrivateConfig {
            schema: PrivateSchema::Unit3d,
            ..Default::default()
        });
        let [users, torrents] = u.statements(Dialect::Mysql);
        assert_eq!(
            users,
            "SELECT `id`, `passkey`, `can_download`, 0, `deleted_at`, 0, 0, '1', '', \
             `group_id` FROM `users`"
        );
        assert_eq!(
            torrents,
            "SELECT `id`, `info_hash`, `free`, `doubleup`, `status`, `deleted_at` FROM `torrents`"
        );
        let t = u
            .torrent(&[v(5), hash.clone(), v(25), v(1), v(1), Value::Null])
            .unwrap()
            .unwrap();
        assert_eq!((t.1.download_pct, t.1.upload_pct), (75, 200));
        let free = u.torrent(&[v(5), hash.clone(), v(900), v(0), v(1), Value::Null]);
        assert_eq!(
            free.unwrap().unwrap().1.download_pct,
            0,
            "free is held to 100"
        );
        for (status, deleted) in [
            (v(0), Value::Null),
            (v(2), Value::Null),
            (v(1), key("2026-01-01 00:00:00")),
        ] {
            assert_eq!(
                u.torrent(&[v(5), hash.clone(), v(0), v(0), status, deleted]),
                Some(None),
                "pending, rejected or deleted: not served"
            );
        }
    }
}
