//! Private mode: who may announce, for what. A passkey names a registered user, an info hash
//! a registered torrent; both registries are read from the site's database (the tables of a
//! schema preset, [`source`]) at start and polled, and each announce is checked against
//! them and the config's client and port rules before it changes anything.
//!
//! Owns: [`Private`] (the registries, the rules, their counters) and [`Refusal`]. Must not:
//! open sockets, or read the database outside [`source`] and its poller.

pub mod gazelle;
pub mod ledger;
pub mod policy;
pub mod push;
pub mod registry;
pub mod slots;
pub mod source;
pub mod stored;
pub mod unit3d;
pub mod xbt;

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hotpath_config::{PortRange, PrivateConfig, PrivateSchema};
use hotpath_metrics::Counter;
use hotpath_service::Samples;
use hotpath_wire::query::Id20;

use ledger::{CreditBound, Ledger, Report, TooManyPeers};
use parking_lot::{Mutex, RwLock};
use policy::{Policy, PushLog};
use push::{ApiError, Push};
use registry::{Entry, Passkey, Registry};
use slots::LeechSlots;
pub use source::Source;
use stored::{AccountChange, Client, RegistryChange};
use xbt::Derived;

/// A random 128-bit SipHash key, from the OS.
fn random_key() -> [u64; 2] {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).expect("the OS's random numbers");
    let half = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
    [half(0), half(8)]
}

/// A registered user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct User {
    /// The user's id in the site's database.
    pub id: u32,
    /// Whether the user may download (announce with something left); seeding is always
    /// allowed.
    pub can_leech: bool,
}

impl Entry for User {
    fn id(&self) -> u32 {
        self.id
    }
}

/// A registered torrent and how its traffic is credited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Torrent {
    /// The torrent's id in the site's database.
    pub id: u32,
    /// Percent of downloaded bytes credited (0 free, 50 half, 100 normal).
    pub download_pct: u16,
    /// Percent of uploaded bytes credited (100 normal, 200 double upload).
    pub upload_pct: u16,
    /// The user who uploaded it (0: none read): their clients on it are its releaser's
    /// (TorrentPier's `poster_id`, its `releaser` flag).
    pub poster: u32,
    /// TorrentPier's `tor_type` of it (0 normal, 1 gold, 2 silver), which its announcer
    /// copies into each peer row; 0 in the other presets.
    pub tor_type: u8,
}

impl Torrent {
    /// TorrentPier's `tor_type` of a torrent whose own download factor is `download_pct`
    /// (gold is free, silver half), as a pushed torrent carries no type of its own.
    pub fn tor_type_of(download_pct: u16) -> u8 {
        match download_pct {
            0 => 1,
            50 => 2,
            _ => 0,
        }
    }
}

impl Entry for Torrent {
    fn id(&self) -> u32 {
        self.id
    }
}

/// Why a private tracker refused an announce; each has its own failure reason and counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No passkey, a malformed one, or two.
    Passkey,
    /// A passkey no user has.
    UnknownPasskey,
    /// An info hash no registered torrent has.
    UnknownTorrent,
    /// A user who may not download announced something left to download.
    MayNotLeech,
    /// The client's peer id prefix is denied, or not allowed.
    Client,
    /// The announced port is denied.
    Port,
    /// A new client of a user who runs as many on the torrent as they may.
    TooManyPeers,
    /// A new client when the ledger holds `tracker.max_peers` clients.
    LedgerFull,
    /// A download that would take the user past their leech slots.
    LeechSlots,
    /// Any passkey from an address that sent too many unknown ones lately.
    Guessing,
    /// A download by a user with a wait time (XBT's `wait_time`) of a torrent newer than it.
    WaitTime,
    /// A user whose group (UNIT3D's) is banned, validating or disabled, or unknown.
    Group,
}

impl Refusal {
    /// Every refusal, in the order of their counters.
    pub const ALL: [Refusal; 12] = [
        Refusal::Passkey,
        Refusal::UnknownPasskey,
        Refusal::UnknownTorrent,
        Refusal::MayNotLeech,
        Refusal::Client,
        Refusal::Port,
        Refusal::TooManyPeers,
        Refusal::LedgerFull,
        Refusal::LeechSlots,
        Refusal::Guessing,
        Refusal::WaitTime,
        Refusal::Group,
    ];

    /// The `reason` label of its counter.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::Passkey => "passkey",
            Refusal::UnknownPasskey => "unknown_passkey",
            Refusal::UnknownTorrent => "unknown_torrent",
            Refusal::MayNotLeech => "may_not_leech",
            Refusal::Client => "client",
            Refusal::Port => "port",
            Refusal::TooManyPeers => "too_many_peers",
            Refusal::LedgerFull => "ledger_full",
            Refusal::LeechSlots => "leech_slots",
            Refusal::Guessing => "guessing",
            Refusal::WaitTime => "wait_time",
            Refusal::Group => "group",
        }
    }

    /// The failure reason a client is sent (for [`Refusal::Passkey`], the codec's own).
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::Passkey => "this tracker is private: the announce URL needs a passkey",
            Refusal::UnknownPasskey => "unknown passkey: download the .torrent file again",
            Refusal::UnknownTorrent => "this torrent is not registered on this tracker",
            Refusal::MayNotLeech => "your account may not download now (seeding is allowed)",
            Refusal::Client => "your BitTorrent client is not allowed on this tracker",
            Refusal::Port => "your client's listening port is not allowed: use another one",
            Refusal::TooManyPeers => {
                "you run as many clients on this torrent as you may: stop one first"
            }
            Refusal::LedgerFull => "tracker is full: try again later",
            Refusal::LeechSlots => {
                "you download as many torrents at once as your ratio allows: finish or stop \
                 one first (seeding is allowed)"
            }
            Refusal::Guessing => {
                "too many unknown passkeys from your address: wait a minute, then download \
                 the .torrent file again"
            }
            Refusal::WaitTime => {
                "access denied, wait time in effect: your account may download this torrent \
                 later (seeding is allowed)"
            }
            Refusal::Group => {
                "your account's group may not use the tracker (banned, validating or disabled)"
            }
        }
    }
}

/// The private tracker's metrics.
mod m {
    use hotpath_metrics::Desc;

    pub static USERS: Desc = Desc::gauge("hotpath_private_users", "Registered users held.");
    pub static TORRENTS: Desc =
        Desc::gauge("hotpath_private_torrents", "Registered torrents held.");
    pub static REFUSED: Desc = Desc::counter(
        "hotpath_private_refused_total",
        "Announces and scrapes a private tracker refused, by reason.",
    )
    .labels(&["reason"]);
    pub static TOO_SOON: Desc = Desc::counter(
        "hotpath_private_too_soon_total",
        "Regular announces sooner than the minimum interval: accounted, answered without \
         peers (private.enforce_min_interval).",
    );
    pub static CREDIT_CUT: Desc = Desc::counter(
        "hotpath_private_credit_cut_total",
        "Announces whose counters claimed more than private.max_rate_bytes_per_sec allows \
         since the client's last announce (or private.max_credit_per_announce_bytes): \
         credited the bound, flagged suspicious.",
    );
    pub static CREDIT_CUT_BYTES: Desc = Desc::counter(
        "hotpath_private_credit_cut_bytes_total",
        "Bytes claimed past the credit bound and not credited, uploaded and downloaded.",
    );
    pub static ADMIN_THROTTLED: Desc = Desc::counter(
        "hotpath_private_admin_throttled_total",
        "Push API requests refused with 429: their address sent more wrong tokens than \
         private.max_auth_failures_per_min.",
    );
    pub static GUESSERS_FORGOTTEN: Desc = Desc::counter(
        "hotpath_private_guessers_forgotten_total",
        "Addresses counted for wrong passkeys or push tokens, forgotten before their minute \
         ended to hold at most 65,536 of each (guessing spread over more addresses).",
    );
    pub static PUSHES: Desc = Desc::counter(
        "hotpath_private_pushes_total",
        "Changes applied through the push API.",
    );
    pub static PUSH_ERRORS: Desc = Desc::counter(
        "hotpath_private_push_errors_total",
        "Push API calls refused after decoding: a cap met (507) or the push log not \
         written (503).",
    );
    pub static RESTORE_SKIPPED: Desc = Desc::counter(
        "hotpath_private_restore_skipped_total",
        "Push log lines and saved ledger peers left out at start: damaged, past 256 KiB, \
         past a cap, or silent past tracker.peer_timeout_secs.",
    );
    pub static TOKENS: Desc = Desc::gauge(
        "hotpath_private_freeleech_tokens",
        "Freeleech tokens held (private.max_tokens): pushed, and Gazelle's read from its \
         table or added by its calls.",
    );
    pub static POLLS: Desc = Desc::counter(
        "hotpath_private_polls_total",
        "Reads of the users and torrents tables.",
    );
    pub static POLL_ERRORS: Desc = Desc::counter(
        "hotpath_private_poll_errors_total",
        "Reads of the users and torrents tables that failed (the registries in force stay).",
    );
    pub static LIMITED: Desc = Desc::gauge(
        "hotpath_private_ratio_limited_users",
        "Users whose ratio puts them under one of private.ratio_tiers.",
    );
    pub static UNREGISTERED_DROPPED: Desc = Desc::counter(
        "hotpath_private_unregistered_dropped_total",
        "UNIT3D: announces of a torrent the site does not have left out of \
         unregistered_info_hashes: 10,000 (user, info hash) pairs already waited for the next \
         poll to write them, or the database refused the row.",
    );
    pub static REGISTER_FULL: Desc = Desc::counter(
        "hotpath_private_auto_register_full_total",
        "Announces of unknown torrents refused under XBT's auto_register because 10,000 \
         already waited for the next poll to add them.",
    );
    pub static ROWS_SKIPPED: Desc = Desc::counter(
        "hotpath_private_rows_skipped_total",
        "Rows of the users and torrents tables left out: malformed (a bad passkey or info \
         hash, an id out of range), a key or id an earlier row took, or past \
         private.max_users / private.max_torrents; users' totals rows malformed or past \
         private.max_users; and rows of a site's other tables (tokens, groups, personal \
         freeleech, featured torrents, client lists) malformed or past their caps.",
    );
    pub static REASONS_FORGOTTEN: Desc = Desc::counter(
        "hotpath_private_deleted_reasons_forgotten_total",
        "Reasons of torrents deleted through Gazelle's calls forgotten before their day was \
         over, to hold at most 10,000 (their announces are then told the torrent is not \
         registered, without the reason).",
    );
}

/// In a client list: takes out `old` and adds `new`, once.
fn put(list: &mut Vec<Vec<u8>>, old: Option<&[u8]>, new: Option<&[u8]>) {
    if let Some(old) = old {
        list.retain(|p| p != old);
    }
    if let Some(new) = new {
        if !list.iter().any(|p| p == new) {
            list.push(new.to_vec());
        }
    }
}

/// The client and port rules.
#[derive(Debug, Clone, Default)]
pub struct Rules {
    /// Peer id prefixes allowed (empty: any not denied).
    pub peer_id_allow: Vec<Box<[u8]>>,
    /// Peer id prefixes denied.
    pub peer_id_deny: Vec<Box<[u8]>>,
    /// Ports denied.
    pub port_deny: Vec<PortRange>,
}

impl Rules {
    /// The rules of `[private]`.
    pub fn of(c: &PrivateConfig) -> Rules {
        let bytes = |v: &[String]| v.iter().map(|s| s.as_bytes().into()).collect();
        Rules {
            peer_id_allow: bytes(&c.peer_id_allow),
            peer_id_deny: bytes(&c.peer_id_deny),
            port_deny: c.port_deny.clone(),
        }
    }

    /// Whether a client of `peer_id` may announce.
    pub fn client_allowed(&self, peer_id: &[u8]) -> bool {
        let has = |list: &[Box<[u8]>]| list.iter().any(|p| peer_id.starts_with(p));
        !has(&self.peer_id_deny) && (self.peer_id_allow.is_empty() || has(&self.peer_id_allow))
    }

    /// Whether peers may announce `port`.
    pub fn port_allowed(&self, port: u16) -> bool {
        !self.port_deny.iter().any(|r| r.contains(port))
    }
}

/// What one announce is checked for.
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    /// The passkey (checked by the codec), or why there is none.
    pub passkey: Result<&'a [u8], &'static str>,
    /// The address the announce came from (the socket's, or a trusted proxy's client),
    /// whose unknown passkeys are counted.
    pub from: IpAddr,
    /// The torrent.
    pub info_hash: &'a Id20,
    /// The client's peer id.
    pub peer_id: &'a Id20,
    /// The port it listens on.
    pub port: u16,
    /// Whether it still downloads (left > 0 and not stopping).
    pub leeching: bool,
    /// Unix seconds now (freeleech ends by it).
    pub at: u32,
}

/// What an announce reports for accounting.
#[derive(Debug, Clone, Copy)]
pub struct Accounted<'a> {
    /// The client's peer id.
    pub peer_id: &'a Id20,
    /// Its address (as the swarm takes it).
    pub ip: std::net::IpAddr,
    /// Its port.
    pub port: u16,
    /// Its `uploaded` counter.
    pub uploaded: u64,
    /// Its `downloaded` counter.
    pub downloaded: u64,
    /// Bytes left.
    pub left: u64,
    /// It stops.
    pub stopped: bool,
    /// A regular announce (no event): one sent sooner than the minimum interval is held
    /// back (no peers) when `private.enforce_min_interval` is on.
    pub regular: bool,
    /// Process second now.
    pub now: u32,
    /// Unix seconds now.
    pub at: u32,
}

/// The users, the torrents and the rules of a private tracker.
pub struct Private {
    /// Users by passkey.
    pub users: Registry<Passkey, User>,
    /// The XBT presets: users by id, for XBT's derived passkeys.
    pub derived: Option<Derived>,
    /// Torrents by info hash.
    pub torrents: Registry<Id20, Torrent>,
    /// Client and port rules, site-wide factors, freeleech (what the push API sets).
    pub policy: RwLock<Policy>,
    /// Where pushed changes are kept across restarts (opened by [`Private::open_log`]).
    log: Mutex<Option<PushLog>>,
    /// The policy's intervals (interval << 32 | min interval, 0 for the config's), kept
    /// beside it so announces read them without its lock.
    intervals: AtomicU64,
    /// Bearer token of the push API (`private.admin_token`; a reload may change it).
    pub admin_token: RwLock<String>,
    /// Whether a regular announce sooner than the minimum interval gets no peers.
    pub enforce_min_interval: AtomicBool,
    /// The query parameter that may carry the passkey.
    pub passkey_param: Box<[u8]>,
    /// Where users and torrents are read.
    pub source: Source,
    /// What each peer last reported.
    pub ledger: Ledger,
    /// How many torrents each user may download at once.
    pub slots: LeechSlots,
    /// Seconds between polls.
    pub poll_secs: AtomicU32,
    /// Whether the preset keeps a row per client (TorrentPier): the accounted changes carry
    /// the client.
    pub client_rows: bool,
    /// Whether the preset keeps seeders and leechers in the torrents table (XBT): the
    /// snapshots carry them.
    pub torrent_counts: bool,
    refused: [Counter; Refusal::ALL.len()],
    too_soon: Counter,
    credit_cut: Counter,
    credit_cut_bytes: Counter,
    /// Unknown passkeys per client address (`private.max_auth_failures_per_min`).
    pub passkey_guesses: hotpath_service::Throttle,
    /// Wrong push API tokens per client address (the same limit).
    pub token_guesses: hotpath_service::Throttle,
    pushes: Counter,
    push_errors: Counter,
    restore_skipped: Counter,
    /// `tracker.peer_timeout_secs`: a pushed interval must stay below it.
    peer_timeout: u32,
    polls: Counter,
    poll_errors: Counter,
    rows_skipped: Counter,
    register_full: Counter,
    /// A full read of the tables is asked for (SIGHUP): the poller does it at once.
    reread: AtomicBool,
    /// Whether pushed users and torrents are written into the tables (hotpath's own preset).
    writes_registry: bool,
    /// XBT's `announce_interval` (0: none set).
    xbt_interval: AtomicU32,
    /// XBT's `offline_message`: every announce is refused with it; `offline_on` says
    /// whether one is set, so announces read one atomic and take no lock.
    offline: RwLock<Option<&'static str>>,
    offline_on: AtomicBool,
    /// XBT's `log_announce` and `log_scrape`: announces and scrapes of known users are
    /// written into its log tables.
    log_announces: AtomicBool,
    log_scrapes: AtomicBool,
    /// XBT's `auto_register`: unknown torrents are served (unaccounted) and added to the
    /// torrents table at the next poll.
    auto_register: AtomicBool,
    /// XBT's torrents' `ctime` by id, held while some user has a `wait_time` (none
    /// otherwise): a download of a torrent younger than a user's wait time is refused.
    ctimes: RwLock<hashbrown::HashMap<u32, u32>>,
    /// Unknown torrents to add at the next poll (at most [`MAX_REGISTERING`]).
    registering: Mutex<hashbrown::HashSet<Id20>>,
    /// XBT's settings as last applied (a change is logged).
    settings: Mutex<Option<xbt::Settings>>,
    /// The Gazelle preset: IP-protected users, freeleech tokens, deleted torrents' reasons,
    /// the site's secret for Ocelot's update API.
    pub gazelle: Option<gazelle::Gazelle>,
    /// The UNIT3D preset: groups and each user's, tokens, personal freeleech, featured
    /// torrents, the site's key for UNIT3D-Announce's API.
    pub unit3d: Option<unit3d::Unit3d>,
    /// The schema preset.
    pub schema: PrivateSchema,
}

impl Private {
    /// Applies what `c` (the config read again on SIGHUP) changes of the settings a reload
    /// may change in place: the secrets of the push, update and report APIs, the minimum
    /// interval's enforcement, the poll's period and the credit bound; returns those keys.
    pub fn reconfigure(&self, c: &PrivateConfig) -> Vec<&'static str> {
        let mut applied = Vec::new();
        let mut swap = |lock: &RwLock<String>, new: &str, key: &'static str| {
            let mut s = lock.write();
            if *s != new {
                *s = new.to_string();
                applied.push(key);
            }
        };
        swap(&self.admin_token, &c.admin_token, "private.admin_token");
        if let Some(g) = &self.gazelle {
            swap(&g.secret, &c.site_secret, "private.site_secret");
            swap(&g.report_secret, &c.report_secret, "private.report_secret");
        }
        if let Some(u) = &self.unit3d {
            swap(&u.secret, &c.site_secret, "private.site_secret");
        }
        if self
            .enforce_min_interval
            .swap(c.enforce_min_interval, Ordering::Relaxed)
            != c.enforce_min_interval
        {
            applied.push("private.enforce_min_interval");
        }
        if self.poll_secs.swap(c.poll_secs, Ordering::Relaxed) != c.poll_secs {
            applied.push("private.poll_secs");
        }
        let (was, now) = (
            self.ledger.bound(),
            CreditBound {
                rate: c.max_rate_bytes_per_sec,
                per_announce: c.max_credit_per_announce_bytes,
            },
        );
        if was.rate != now.rate {
            applied.push("private.max_rate_bytes_per_sec");
        }
        if was.per_announce != now.per_announce {
            applied.push("private.max_credit_per_announce_bytes");
        }
        self.ledger.set_bound(now);
        applied
    }

    /// Empty registries for `[private]` (filled by [`Private::poll`]), and a ledger of at
    /// most `max_peers` clients (`tracker.max_peers`).
    pub fn new(c: &PrivateConfig, max_peers: usize, peer_timeout: u32) -> Private {
        Private {
            users: Registry::new(c.max_users),
            derived: matches!(c.schema, PrivateSchema::Xbt | PrivateSchema::XbtFiles)
                .then(|| Derived::new(c.max_users)),
            torrents: Registry::new(c.max_torrents),
            policy: RwLock::new(Policy::new(
                Rules::of(c),
                c.max_tokens,
                c.max_personal_freeleech,
            )),
            log: Mutex::new(None),
            intervals: AtomicU64::new(0),
            admin_token: RwLock::new(c.admin_token.clone()),
            enforce_min_interval: AtomicBool::new(c.enforce_min_interval),
            passkey_param: c.passkey_param().as_bytes().into(),
            source: Source::new(c),
            // UNIT3D's groups may have download slots: the ledger counts downloads.
            ledger: Ledger::new(
                c.max_peers_per_user_torrent,
                max_peers,
                c.limits_leeching() || c.schema == PrivateSchema::Unit3d,
            )
            .bounded(CreditBound {
                rate: c.max_rate_bytes_per_sec,
                per_announce: c.max_credit_per_announce_bytes,
            }),
            slots: LeechSlots::new(c),
            poll_secs: AtomicU32::new(c.poll_secs),
            client_rows: matches!(
                c.schema,
                PrivateSchema::Torrentpier | PrivateSchema::Gazelle | PrivateSchema::Unit3d
            ),
            torrent_counts: matches!(
                c.schema,
                PrivateSchema::Xbt
                    | PrivateSchema::XbtFiles
                    | PrivateSchema::Gazelle
                    | PrivateSchema::Unit3d
            ),
            refused: Default::default(),
            too_soon: Counter::default(),
            credit_cut: Counter::default(),
            credit_cut_bytes: Counter::default(),
            passkey_guesses: hotpath_service::Throttle::new(
                c.max_auth_failures_per_min,
                60,
                hotpath_service::GUESSING_ADDRESSES,
            ),
            token_guesses: hotpath_service::Throttle::new(
                c.max_auth_failures_per_min,
                60,
                hotpath_service::GUESSING_ADDRESSES,
            ),
            pushes: Counter::default(),
            push_errors: Counter::default(),
            restore_skipped: Counter::default(),
            peer_timeout,
            polls: Counter::default(),
            poll_errors: Counter::default(),
            rows_skipped: Counter::default(),
            register_full: Counter::default(),
            reread: AtomicBool::new(false),
            writes_registry: c.schema == PrivateSchema::Hotpath,
            xbt_interval: AtomicU32::new(0),
            offline: RwLock::new(None),
            offline_on: AtomicBool::new(false),
            log_announces: AtomicBool::new(false),
            log_scrapes: AtomicBool::new(false),
            auto_register: AtomicBool::new(false),
            registering: Mutex::new(hashbrown::HashSet::new()),
            ctimes: RwLock::new(hashbrown::HashMap::new()),
            settings: Mutex::new(None),
            gazelle: (c.schema == PrivateSchema::Gazelle).then(|| gazelle::Gazelle::new(c)),
            unit3d: (c.schema == PrivateSchema::Unit3d).then(|| unit3d::Unit3d::new(c)),
            schema: c.schema,
        }
    }

    /// Counts a refusal and returns its failure reason.
    pub fn refuse(&self, r: Refusal) -> &'static str {
        self.refused[r as usize].add(1);
        r.reason()
    }

    /// Refusals of kind `r` so far.
    pub fn refusals(&self, r: Refusal) -> u64 {
        self.refused[r as usize].get()
    }

    /// Counts a refusal for `r` answered with `reason` (the codec's words for a passkey).
    pub fn refuse_with(&self, r: Refusal, reason: &'static str) -> &'static str {
        self.refused[r as usize].add(1);
        reason
    }

    /// Checks an announce: its user, and its torrent with the factors that credit this
    /// user's traffic on it (freeleech applied), or the failure reason to answer with
    /// (counted).
    pub fn check(&self, a: Ask<'_>) -> Result<(User, Torrent), &'static str> {
        if self.offline_on.load(Ordering::Relaxed) {
            if let Some(message) = *self.offline.read() {
                return Err(message);
            }
        }
        let key = match a.passkey {
            Ok(k) => k,
            Err(reason) => return Err(self.refuse_with(Refusal::Passkey, reason)),
        };
        if !self.passkey_guesses.allows(a.from, a.at) {
            return Err(self.refuse(Refusal::Guessing));
        }
        let user = self
            .users
            .get(key)
            .or_else(|| self.derived.as_ref()?.user(key, a.info_hash))
            .ok_or_else(|| {
                self.passkey_guesses.failed(a.from, a.at);
                self.refuse(Refusal::UnknownPasskey)
            })?;
        if let Some(u) = &self.unit3d {
            // As UNIT3D-Announce: a group it does not know, or one barred, is refused.
            if u.group(user.id).is_none_or(|g| g.refused) {
                return Err(self.refuse(Refusal::Group));
            }
        }
        let known = self.torrents.get(a.info_hash);
        if known.is_none() && !self.auto_register.load(Ordering::Relaxed) {
            // As UNIT3D's own announce controller, the site is told who asked for it.
            if let Some(u) = &self.unit3d {
                u.unregistered(user.id, a.info_hash, a.at);
            }
            // A torrent Gazelle deleted is told why, as Ocelot tells it.
            let why = self
                .gazelle
                .as_ref()
                .and_then(|g| g.deleted_reason(a.info_hash, a.at));
            return Err(match why {
                Some(reason) => self.refuse_with(Refusal::UnknownTorrent, reason),
                None => self.refuse(Refusal::UnknownTorrent),
            });
        }
        let policy = self.policy.read();
        if !policy.rules.client_allowed(a.peer_id) {
            drop(policy);
            return Err(self.refuse(Refusal::Client));
        }
        if !policy.rules.port_allowed(a.port) {
            drop(policy);
            return Err(self.refuse(Refusal::Port));
        }
        // An unknown torrent is queued for XBT's auto_register only once the client passed.
        let mut torrent = match known {
            Some(t) => t,
            None => self.registering(a.info_hash)?,
        };
        let pcts = (torrent.download_pct, torrent.upload_pct);
        (torrent.download_pct, torrent.upload_pct) =
            policy.factors(user.id, torrent.id, pcts, a.at);
        drop(policy);
        if a.leeching && !user.can_leech {
            return Err(self.refuse(Refusal::MayNotLeech));
        }
        if a.leeching && self.derived.is_some() {
            let wait = self.limits_of(user.id).0;
            if wait > 0 {
                let created = self.ctimes.read().get(&torrent.id).copied().unwrap_or(0);
                if created > 0 && u64::from(created) + u64::from(wait) > u64::from(a.at) {
                    return Err(self.refuse(Refusal::WaitTime));
                }
            }
        }
        Ok((user, torrent))
    }

    /// An unknown torrent, under XBT's `auto_register`: served as one not yet registered
    /// (id 0: nothing is accounted on it, as XBT accounts nothing before the torrent has its
    /// row), and queued for the next poll to add it; refused without `auto_register`, or when
    /// [`MAX_REGISTERING`] wait already.
    fn registering(&self, info_hash: &Id20) -> Result<Torrent, &'static str> {
        if !self.auto_register.load(Ordering::Relaxed) {
            return Err(self.refuse(Refusal::UnknownTorrent));
        }
        let mut waiting = self.registering.lock();
        if waiting.len() >= MAX_REGISTERING && !waiting.contains(info_hash) {
            drop(waiting);
            self.register_full.add(1);
            return Err(self.refuse(Refusal::UnknownTorrent));
        }
        waiting.insert(*info_hash);
        Ok(Torrent {
            id: 0,
            download_pct: 100,
            upload_pct: 100,
            poster: 0,
            tor_type: 0,
        })
    }

    /// The torrents waiting to be added (XBT's `auto_register`), taken.
    fn take_registering(&self) -> Vec<Id20> {
        self.registering.lock().drain().collect()
    }

    /// Accounts an announce `user` made on `torrent` (checked by [`Private::check`]): what
    /// its counters add since the peer's last announce, raw and credited by the torrent's
    /// factors; `completed` is left for the caller. A new client past the user's cap is
    /// refused (counted) and changes nothing. With it comes, for a regular announce of a
    /// known client sooner than `min_interval` seconds after its last (when
    /// `private.enforce_min_interval` is on), the seconds it should have waited: it is
    /// accounted, but gets no peers.
    pub fn account(
        &self,
        user: User,
        torrent: Torrent,
        a: &Accounted<'_>,
        min_interval: u32,
    ) -> Result<(AccountChange, Option<u32>), &'static str> {
        if torrent.id == 0 {
            // Not registered yet (XBT's auto_register): nothing is accounted.
            let change = AccountChange {
                user: user.id,
                ..AccountChange::default()
            };
            return Ok((change, None));
        }
        let d = self
            .ledger
            .report(Report {
                torrent: torrent.id,
                user: user.id,
                peer_id: a.peer_id,
                uploaded: a.uploaded,
                downloaded: a.downloaded,
                stopped: a.stopped,
                leeching: a.left > 0,
                leech_limit: &|user| self.limits_of(user).1,
                slots: &|user| self.slots_of(user),
                now: a.now,
            })
            .map_err(|e| {
                self.refuse(match e {
                    TooManyPeers::User => Refusal::TooManyPeers,
                    TooManyPeers::Ledger => Refusal::LedgerFull,
                    TooManyPeers::LeechSlots => Refusal::LeechSlots,
                })
            })?;
        let too_soon = (self.enforce_min_interval.load(Ordering::Relaxed)
            && a.regular
            && d.known
            && d.since < min_interval)
            .then(|| {
                self.too_soon.add(1);
                min_interval - d.since
            });
        let credit = |v: u64, pct: u16| (u128::from(v) * u128::from(pct) / 100) as u64;
        let mut flags = 0;
        if a.left == 0 {
            flags |= AccountChange::SEEDING;
        }
        if a.stopped {
            flags |= AccountChange::STOPPED;
        }
        if torrent.poster == user.id {
            flags |= AccountChange::RELEASER;
        }
        let (mut download_pct, mut upload_pct) = (torrent.download_pct, torrent.upload_pct);
        if let Some(g) = &self.gazelle {
            if g.is_protected(user.id) {
                flags |= AccountChange::PROTECTED;
            }
            // A freeleech token counts nothing downloaded (on a neutral torrent nothing
            // counts anyway, and the token is not used), and what it saved is written to it.
            if upload_pct > 0 && g.token(user.id, torrent.id) {
                flags |= AccountChange::TOKEN;
                download_pct = 0;
            }
        }
        if let Some(u) = &self.unit3d {
            let group = u.group(user.id).unwrap_or_default();
            if group.immune {
                flags |= AccountChange::IMMUNE;
            }
            (download_pct, upload_pct) =
                u.factors(user.id, torrent.id, (download_pct, upload_pct), group);
        }
        flags |= (torrent.tor_type & 3) << AccountChange::TOR_TYPE_SHIFT;
        if d.cut() {
            flags |= AccountChange::SUSPICIOUS;
            self.credit_cut.add(1);
            self.credit_cut_bytes
                .add(d.cut_uploaded.saturating_add(d.cut_downloaded));
            hotpath_metrics::log_limited!(
                warn,
                1,
                "private: user {} on torrent {} claimed {} bytes up and {} down past the credit \
                 bound in {} s (private.max_rate_bytes_per_sec): credited {} and {}, flagged \
                 suspicious (at most one such line a second; hotpath_private_credit_cut_total \
                 counts them all)",
                user.id,
                torrent.id,
                d.cut_uploaded,
                d.cut_downloaded,
                d.since,
                d.uploaded,
                d.downloaded
            );
        }
        let change = AccountChange {
            user: user.id,
            torrent: torrent.id,
            uploaded: credit(d.uploaded, upload_pct),
            downloaded: credit(d.downloaded, download_pct),
            uploaded_raw: d.uploaded,
            downloaded_raw: d.downloaded,
            remaining: a.left,
            completed: 0,
            flags,
            at: a.at,
            client: self.client_rows.then(|| {
                let speed =
                    |v: u64| (v / u64::from(d.since.max(1))).min(u64::from(u32::MAX)) as u32;
                Client {
                    peer_id: *a.peer_id,
                    ip: a.ip,
                    port: a.port,
                    uploaded: a.uploaded,
                    downloaded: a.downloaded,
                    speed_up: speed(d.uploaded),
                    speed_down: speed(d.downloaded),
                    since: d.since,
                }
            }),
        };
        Ok((change, too_soon))
    }

    /// The intervals clients are told (interval, min interval): those pushed, else
    /// `config`'s.
    pub fn intervals(&self, config: (u32, u32)) -> (u32, u32) {
        match (
            self.intervals.load(Ordering::Relaxed),
            self.xbt_interval.load(Ordering::Relaxed),
        ) {
            (0, 0) => config,
            // XBT's announce_interval, with the config's minimum interval below it.
            (0, i) => (i, config.1.min(i)),
            (v, _) => ((v >> 32) as u32, v as u32),
        }
    }

    /// Applies XBT's settings read from `xbt_config` (the site's secret, its announce
    /// interval and offline message), and says in the log what changed and which settings
    /// it leaves to hotpath's own config.
    fn apply_settings(&self, s: xbt::Settings) {
        if let Some(d) = &self.derived {
            d.set_secret(s.secret.as_deref());
        }
        self.xbt_interval
            .store(s.announce_interval.unwrap_or(0), Ordering::Relaxed);
        *self.offline.write() = s.offline_message.as_deref().map(intern);
        self.offline_on
            .store(s.offline_message.is_some(), Ordering::Relaxed);
        self.log_announces.store(s.log_announce, Ordering::Relaxed);
        self.auto_register.store(s.auto_register, Ordering::Relaxed);
        self.log_scrapes.store(s.log_scrape, Ordering::Relaxed);
        let mut last = self.settings.lock();
        if last.as_ref() == Some(&s) {
            return;
        }
        let not_applied: Vec<String> = s
            .not_applied
            .iter()
            .map(|(name, key)| format!("{name} ({key})"))
            .collect();
        log::info!(
            "private: xbt_config: derived passkeys {}; announce_interval {}; offline_message \
             {}{}{}{}",
            if s.secret.is_some() {
                "on"
            } else {
                "off (no torrent_pass_private_key of 1 to 255 bytes)"
            },
            s.announce_interval
                .map_or("not set (tracker.announce_interval)".into(), |i| format!(
                    "{i} s"
                )),
            if s.offline_message.is_some() {
                "set: every announce is refused with it"
            } else {
                "not set"
            },
            match (s.log_announce, s.log_scrape, s.auto_register) {
                (true, true, _) => "; announces and scrapes are logged",
                (true, false, _) => "; announces are logged",
                (false, true, _) => "; scrapes are logged",
                (false, false, _) => "",
            },
            if s.auto_register {
                "; unknown torrents are registered"
            } else {
                ""
            },
            if not_applied.is_empty() {
                String::new()
            } else {
                format!("; left to hotpath's config: {}", not_applied.join(", "))
            }
        );
        *last = Some(s);
    }

    /// Opens the push log in `dir` and applies what it holds (what was pushed before a
    /// restart; a change past a cap is left out, as a push of it would have been), then
    /// rewrites it as that state. Returns what was taken and left out.
    pub fn open_log(&self, dir: &std::path::Path, at: u32) -> std::io::Result<policy::Replayed> {
        let mut policy = self.policy.write();
        let (mut log, replayed) = PushLog::open(dir, &mut |op| {
            let fits = policy.room_for(std::slice::from_ref(&op), at).is_ok();
            if fits {
                policy.apply(&op);
            }
            fits
        })?;
        self.mirror(&policy);
        let state = policy.snapshot(at);
        drop(policy);
        if replayed.skipped > 0 {
            self.restore_skipped.add(replayed.skipped as u64);
            log::warn!(
                "private: {} lines of {} were left out (not a change, or past a cap)",
                replayed.skipped,
                dir.join(PushLog::FILE).display()
            );
        }
        log.compact(&state)?;
        *self.log.lock() = Some(log);
        Ok(replayed)
    }

    /// Copies the policy's intervals where announces read them.
    fn mirror(&self, policy: &Policy) {
        let v = policy
            .intervals
            .map_or(0, |(i, min)| u64::from(i) << 32 | u64::from(min));
        self.intervals.store(v, Ordering::Relaxed);
    }

    /// Applies pushed changes (checked by the codec), in order: each takes effect on the
    /// next announce. The policy's changes are synced to the push log first; none applies
    /// when they cannot be (507 when a cap is met, 503 when the log cannot be written).
    /// Users and torrents go to the registries (until the next read of the site's tables).
    pub fn push(&self, ops: &[Push], at: u32) -> Result<(), ApiError> {
        let failed = |status: u16, message: String| {
            self.push_errors.add(1);
            ApiError { status, message }
        };
        let mut log = self.log.lock();
        // Registry changes that cannot land (a full registry) fail before anything applies.
        let (mut users, mut torrents) = (self.users.len(), self.torrents.len());
        for op in ops {
            match op {
                Push::User { id, passkey, .. }
                    if self.users.get(passkey.as_bytes()).is_none()
                        && self.users.by_id(*id).is_none() =>
                {
                    users += 1;
                    if users > self.users.max() {
                        return Err(failed(
                            507,
                            "the users registry is full (private.max_users)".into(),
                        ));
                    }
                }
                Push::Torrent { id, info_hash, .. } => {
                    let hash = push::info_hash_of(info_hash).map_err(|e| failed(400, e))?;
                    if self.torrents.get(&hash).is_none() && self.torrents.by_id(*id).is_none() {
                        torrents += 1;
                        if torrents > self.torrents.max() {
                            return Err(failed(
                                507,
                                "the torrents registry is full (private.max_torrents)".into(),
                            ));
                        }
                    }
                }
                _ => {}
            }
        }
        for op in ops {
            if let Push::Intervals { interval_secs, .. } = op {
                if *interval_secs >= self.peer_timeout {
                    let text = format!(
                        "interval_secs: must be below tracker.peer_timeout_secs ({}), or \
                         peers expire before they announce again",
                        self.peer_timeout
                    );
                    return Err(failed(400, text));
                }
            }
        }
        self.policy
            .write()
            .room_for(ops, at)
            .map_err(|e| failed(507, e.0))?;
        if ops.iter().any(|op| !op.is_registry()) {
            let Some(file) = log.as_mut() else {
                return Err(failed(503, "the push log is not open".into()));
            };
            file.append(ops)
                .map_err(|e| failed(503, format!("not saved: the push log: {e}")))?;
        }
        for op in ops {
            self.apply_push(op);
        }
        self.pushes.add(ops.len() as u64);
        let policy = self.policy.read();
        if let Some(file) = log.as_mut() {
            let live = policy.tokens() + policy.personal() + 3;
            if file.wants_compaction(live) {
                let state = policy.snapshot(at);
                drop(policy);
                if let Err(e) = file.compact(&state) {
                    log::warn!("private: the push log was not compacted: {e}");
                }
            }
        }
        Ok(())
    }

    fn apply_push(&self, op: &Push) {
        match op {
            Push::User {
                id,
                passkey,
                can_leech,
            } => {
                let user = User {
                    id: *id,
                    can_leech: *can_leech,
                };
                // Room was checked, and pushes are one at a time; only a poll filling the
                // registry in between can refuse it.
                if self.users.put(passkey.as_bytes(), user).is_err() {
                    self.push_errors.add(1);
                    log::warn!("private: user {id} pushed but not held: private.max_users met");
                }
            }
            Push::RemoveUser { id } => {
                self.users.remove_id(*id);
            }
            Push::Torrent {
                id,
                info_hash,
                download_pct,
                upload_pct,
                poster_id,
            } => {
                if let Ok(hash) = push::info_hash_of(info_hash) {
                    let torrent = Torrent {
                        id: *id,
                        download_pct: *download_pct,
                        upload_pct: *upload_pct,
                        poster: *poster_id,
                        tor_type: Torrent::tor_type_of(*download_pct),
                    };
                    if self.torrents.put(&hash, torrent).is_err() {
                        self.push_errors.add(1);
                        log::warn!(
                            "private: torrent {id} pushed but not held: private.max_torrents met"
                        );
                    }
                }
            }
            Push::RemoveTorrent { id } => {
                self.torrents.remove_id(*id);
            }
            policy_op => {
                let mut policy = self.policy.write();
                policy.apply(policy_op);
                self.mirror(&policy);
            }
        }
    }

    /// The client lists (`private.peer_id_allow`, `peer_id_deny`, or as pushed) with `edit`
    /// applied to them, as the change to push that sets them (the sites' APIs: Gazelle's
    /// whitelist, UNIT3D's blacklist); a list past [`push::MAX_CLIENTS`] is refused with 507
    /// and counted.
    fn clients_edited(
        &self,
        edit: impl FnOnce(&mut Vec<Vec<u8>>, &mut Vec<Vec<u8>>),
    ) -> Result<Push, ApiError> {
        let policy = self.policy.read();
        let bytes = |list: &[Box<[u8]>]| list.iter().map(|p| p.to_vec()).collect::<Vec<_>>();
        let (mut allow, mut deny) = (
            bytes(&policy.rules.peer_id_allow),
            bytes(&policy.rules.peer_id_deny),
        );
        drop(policy);
        edit(&mut allow, &mut deny);
        if allow.len().max(deny.len()) > push::MAX_CLIENTS {
            self.push_errors.add(1);
            return Err(ApiError {
                status: 507,
                message: format!("a client list holds at most {} prefixes", push::MAX_CLIENTS),
            });
        }
        // As the push API's text: a peer id prefix is ASCII in practice; another byte becomes
        // U+FFFD and no longer matches, which the site's own table read corrects.
        let text = |list: Vec<Vec<u8>>| {
            list.into_iter()
                .map(|p| String::from_utf8_lossy(&p).into_owned())
                .collect()
        };
        Ok(Push::Clients {
            allow: text(allow),
            deny: text(deny),
        })
    }

    /// The torrents `user` may download at once (0: no limit): their UNIT3D group's download
    /// slots, else the leech slots of `[private]`.
    pub fn slots_of(&self, user: u32) -> u16 {
        match &self.unit3d {
            Some(u) => u.group(user).map_or(0, |g| g.slots),
            None => self.slots.of(user),
        }
    }

    /// `tracker.peer_timeout_secs`.
    pub fn peer_timeout(&self) -> u32 {
        self.peer_timeout
    }

    /// Whether a scrape may see `info_hash` (a registered torrent).
    pub fn scrapable(&self, info_hash: &Id20) -> bool {
        self.torrents.get(info_hash).is_some()
    }

    /// Reads the users and torrents tables once (every row when `full`, else the rows
    /// changed since the last read where the schema says so); on an error the registries
    /// stay as they were. Returns (users, torrents) held after it.
    pub fn poll(
        &self,
        db: &mut dyn hotpath_store::Backend,
        full: bool,
    ) -> Result<(usize, usize), hotpath_store::StoreError> {
        let waiting = self.take_registering();
        if !waiting.is_empty() {
            let n = waiting.len();
            if let Err(e) = self
                .source
                .register(db, &waiting, hotpath_store::unix_now())
            {
                // Back for the next poll (new announces may have queued more meanwhile).
                let mut w = self.registering.lock();
                let room = MAX_REGISTERING.saturating_sub(w.len());
                w.extend(waiting.into_iter().take(room));
                self.poll_errors.add(1);
                return Err(e);
            }
            log::info!("private: {n} torrents registered (XBT's auto_register)");
        }
        if !self.auto_register.load(Ordering::Relaxed) {
            self.source
                .delete_flagged(db)
                .inspect_err(|_| self.poll_errors.add(1))?;
        }
        if let Some(u) = &self.unit3d {
            let rows = u.take_unregistered();
            if !rows.is_empty() {
                // Not a reason to leave the users and torrents unread: kept for the next poll.
                match self.source.write_unregistered(db, &rows) {
                    Ok(0) => {}
                    Ok(refused) => {
                        log::warn!(
                            "private: {refused} unregistered torrents' rows refused by the \
                             database (a user deleted since?); the rest written"
                        );
                        u.unregistered_dropped.add(refused as u64);
                    }
                    Err(e) => {
                        log::warn!(
                            "private: {} unregistered torrents' rows not written: {e}",
                            rows.len()
                        );
                        self.poll_errors.add(1);
                        u.keep_unregistered(rows);
                    }
                }
            }
        }
        let polled = self.source.read(
            db,
            full,
            &self.users,
            &self.torrents,
            &self.slots,
            self.derived.as_ref(),
        );
        // Counted once done, so a reader of the count sees the read's effect.
        self.polls.add(1);
        let mut polled = polled.inspect_err(|_| self.poll_errors.add(1))?;
        if let Some(s) = polled.settings.take() {
            self.apply_settings(s);
        }
        if let Some(ctimes) = polled.ctimes.take() {
            *self.ctimes.write() = ctimes;
        }
        if let (Some(site), Some(u)) = (polled.site.as_mut(), &self.unit3d) {
            *u.groups.write() = std::mem::take(&mut site.groups);
            *u.user_groups.write() = std::mem::take(&mut site.user_groups);
            *u.tokens.write() = std::mem::take(&mut site.tokens);
            *u.personal.write() = std::mem::take(&mut site.personal);
            *u.featured.write() = std::mem::take(&mut site.featured);
            // The blacklist adds to the config's deny list.
            let mut deny = u.config_deny.clone();
            deny.extend(std::mem::take(&mut site.clients));
            let mut policy = self.policy.write();
            if policy.rules.peer_id_deny != deny {
                log::info!("private: the client blacklist has {} prefixes", deny.len());
                policy.rules.peer_id_deny = deny;
            }
        }
        if let (Some(site), Some(g)) = (polled.site.take(), &self.gazelle) {
            *g.protected.write() = site.protected;
            *g.tokens.write() = site.tokens;
            // The whitelist is the allow list (none listed: the config's).
            let allow = if site.clients.is_empty() {
                g.config_allow.clone()
            } else {
                site.clients
            };
            let mut policy = self.policy.write();
            if policy.rules.peer_id_allow != allow {
                log::info!(
                    "private: the client whitelist has {} prefixes{}",
                    allow.len(),
                    if allow.is_empty() { ": any client" } else { "" }
                );
                policy.rules.peer_id_allow = allow;
            }
        }
        self.rows_skipped.add(polled.skipped as u64);
        let (u, t) = (polled.users, polled.torrents);
        if u.changed + u.gone + t.changed + t.gone > 0 {
            log::info!(
                "private: {} users new or changed, {} gone ({} held); {} torrents new or \
                 changed, {} gone ({} held){}",
                u.changed,
                u.gone,
                self.users_held(),
                t.changed,
                t.gone,
                self.torrents.len(),
                if polled.skipped > 0 {
                    format!(
                        "; {} rows left out (malformed or past a cap)",
                        polled.skipped
                    )
                } else {
                    String::new()
                }
            );
        }
        Ok((self.users_held(), self.torrents.len()))
    }

    /// The rows pushed changes `ops` write into hotpath's own tables at unix second `at`
    /// (none in a site's preset: the site's tables are the site's), in order: each user and
    /// torrent set, and each one removed that the registries hold, marked with the passkey
    /// or info hash it had (a passkey of over 32 characters, held only as a hash, is written
    /// as a marker the row's id makes unique, which frees the passkey).
    pub fn registry_rows(&self, ops: &[Push], at: u32) -> Vec<RegistryChange> {
        if !self.writes_registry {
            return Vec::new();
        }
        let mut out: Vec<RegistryChange> = Vec::new();
        for op in ops {
            let row = match op {
                Push::User {
                    id,
                    passkey,
                    can_leech,
                } => Some(RegistryChange::User {
                    id: *id,
                    passkey: passkey.clone(),
                    can_leech: *can_leech,
                    removed: false,
                    at,
                }),
                Push::RemoveUser { id } => {
                    let earlier = out.iter().rev().find_map(|c| match c {
                        RegistryChange::User {
                            id: i,
                            passkey,
                            can_leech,
                            ..
                        } if i == id => Some((passkey.clone(), *can_leech)),
                        _ => None,
                    });
                    earlier
                        .or_else(|| {
                            let (key, u) = self.users.by_id(*id)?;
                            let text = key.text().map_or_else(
                                || format!("0removed0{id}"),
                                |t| String::from_utf8_lossy(t).into_owned(),
                            );
                            Some((text, u.can_leech))
                        })
                        .map(|(passkey, can_leech)| RegistryChange::User {
                            id: *id,
                            passkey,
                            can_leech,
                            removed: true,
                            at,
                        })
                }
                Push::Torrent {
                    id,
                    info_hash,
                    download_pct,
                    upload_pct,
                    ..
                } => push::info_hash_of(info_hash)
                    .ok()
                    .map(|hash| RegistryChange::Torrent {
                        id: *id,
                        info_hash: hash,
                        download_pct: *download_pct,
                        upload_pct: *upload_pct,
                        removed: false,
                        at,
                    }),
                Push::RemoveTorrent { id } => {
                    let earlier = out.iter().rev().find_map(|c| match c {
                        RegistryChange::Torrent {
                            id: i,
                            info_hash,
                            download_pct,
                            upload_pct,
                            ..
                        } if i == id => Some((*info_hash, *download_pct, *upload_pct)),
                        _ => None,
                    });
                    earlier
                        .or_else(|| {
                            let (hash, t) = self.torrents.by_id(*id)?;
                            Some((hash, t.download_pct, t.upload_pct))
                        })
                        .map(
                            |(info_hash, download_pct, upload_pct)| RegistryChange::Torrent {
                                id: *id,
                                info_hash,
                                download_pct,
                                upload_pct,
                                removed: true,
                                at,
                            },
                        )
                }
                _ => None,
            };
            out.extend(row);
        }
        out
    }

    /// Asks the poller for a full read of the users and torrents tables now (SIGHUP).
    pub fn reread(&self) {
        self.reread.store(true, Ordering::Release);
    }

    /// Whether announces, and scrapes, of known users are logged (XBT's `log_announce`,
    /// `log_scrape`).
    pub fn logs(&self) -> (bool, bool) {
        (
            self.log_announces.load(Ordering::Relaxed),
            self.log_scrapes.load(Ordering::Relaxed),
        )
    }

    /// A user's own wait time and limit of downloading clients per torrent (XBT's
    /// `wait_time` and `peers_limit`; 0 and 0 in the other presets, and for a user the XBT
    /// tables do not hold).
    pub fn limits_of(&self, user: u32) -> (u32, u16) {
        self.derived
            .as_ref()
            .and_then(|d| d.users.get(&user.to_be_bytes()))
            .map_or((0, 0), |v| (v.wait_time, v.peers_limit))
    }

    /// Users held: by passkey, or in the XBT presets by id (derived passkeys need no stored
    /// one).
    pub fn users_held(&self) -> usize {
        self.derived
            .as_ref()
            .map_or(self.users.len(), |d| d.users.len())
    }

    /// Adds the private tracker's figures.
    pub fn collect(&self, out: &mut Samples) {
        let get = Counter::get;
        out.section("private")
            .add(&m::USERS, self.users_held())
            .add(&m::TORRENTS, self.torrents.len())
            .add(&m::TOO_SOON, get(&self.too_soon))
            .add(&m::CREDIT_CUT, get(&self.credit_cut))
            .add(&m::CREDIT_CUT_BYTES, get(&self.credit_cut_bytes))
            .add(&m::ADMIN_THROTTLED, get(&self.token_guesses.refused))
            .add(
                &m::GUESSERS_FORGOTTEN,
                get(&self.token_guesses.forgotten) + get(&self.passkey_guesses.forgotten),
            )
            .add(&m::PUSHES, get(&self.pushes))
            .add(&m::PUSH_ERRORS, get(&self.push_errors))
            .add(&m::RESTORE_SKIPPED, get(&self.restore_skipped))
            .add(
                &m::TOKENS,
                self.policy.read().tokens()
                    + self.gazelle.as_ref().map_or(0, |g| g.tokens.read().len())
                    + self.unit3d.as_ref().map_or(0, |u| u.tokens.read().len()),
            )
            .add(&m::LIMITED, self.slots.limited())
            .add(&m::POLLS, get(&self.polls))
            .add(&m::POLL_ERRORS, get(&self.poll_errors))
            .add(&m::ROWS_SKIPPED, get(&self.rows_skipped))
            .add(&m::REGISTER_FULL, get(&self.register_full))
            .add(
                &m::UNREGISTERED_DROPPED,
                self.unit3d
                    .as_ref()
                    .map_or(0, |u| get(&u.unregistered_dropped)),
            )
            .add(
                &m::REASONS_FORGOTTEN,
                self.gazelle.as_ref().map_or(0, |g| get(&g.forgotten)),
            );
        for r in Refusal::ALL {
            out.labeled(&m::REFUSED, &[r.label()], get(&self.refused[r as usize]));
        }
    }
}

/// Unknown torrents XBT's `auto_register` queues for the next poll at most: past it, an
/// unknown torrent is refused until that poll.
pub const MAX_REGISTERING: usize = 10_000;

/// `message` as a `&'static str` for a failure reason: the first 16 distinct messages are
/// kept for good (a site sets an offline message now and then); past them, a fixed one.
fn intern(message: &str) -> &'static str {
    static KEPT: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
    let mut kept = KEPT.lock();
    if let Some(m) = kept.iter().find(|m| **m == message) {
        return m;
    }
    if kept.len() >= 16 {
        return "the tracker is offline: try again later";
    }
    let m: &'static str = Box::leak(message.into());
    kept.push(m);
    m
}

/// Polls the users and torrents tables every `poll_secs` on a connection of its own (so a
/// long read never holds up the store's flushes), reading every row each tenth time and when
/// [`Private::reread`] asks, until `stop`. A failed read keeps the registries in force and is
/// retried at the next poll.
pub fn poller(private: Arc<Private>, store: Arc<hotpath_store::Store>, stop: Arc<AtomicBool>) {
    let every = || Duration::from_secs(u64::from(private.poll_secs.load(Ordering::Relaxed)));
    let mut due = Instant::now() + every();
    let mut conn: Option<Box<dyn hotpath_store::Backend>> = None;
    let mut n: u64 = 0;
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(100));
        let asked = private.reread.swap(false, Ordering::AcqRel);
        if Instant::now() < due && !asked {
            continue;
        }
        due = Instant::now() + every();
        n += 1;
        let db = match conn.as_mut() {
            Some(db) => db,
            None => match store.connect() {
                Ok(db) => conn.insert(db),
                Err(e) => {
                    private.poll_errors.add(1);
                    log::warn!("private: users and torrents not read: {e}");
                    continue;
                }
            },
        };
        if asked {
            log::info!("private: reading the users and torrents tables whole (SIGHUP)");
        }
        if let Err(e) = private.poll(&mut **db, asked || n.is_multiple_of(10)) {
            log::warn!("private: users and torrents not read: {e}; the registries in force stay");
            conn = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn private() -> Private {
        let mut c = PrivateConfig {
            peer_id_deny: vec!["-XX".into()],
            ..Default::default()
        };
        c.port_deny = vec![PortRange::try_from("6881-6889".to_string()).unwrap()];
        let p = Private::new(&c, 1000, 3600);
        p.users
            .put(
                b"goodkey",
                User {
                    id: 1,
                    can_leech: true,
                },
            )
            .unwrap();
        p.users
            .put(
                b"seedonly",
                User {
                    id: 2,
                    can_leech: false,
                },
            )
            .unwrap();
        p.torrents
            .put(
                &[7; 20],
                Torrent {
                    id: 9,
                    download_pct: 0,
                    upload_pct: 100,
                    poster: 0,
                    tor_type: 0,
                },
            )
            .unwrap();
        p
    }

    fn ask<'a>(key: &'a [u8], hash: &'a Id20, peer_id: &'a Id20) -> Ask<'a> {
        Ask {
            passkey: Ok(key),
            from: [192, 0, 2, 1].into(),
            info_hash: hash,
            peer_id,
            port: 51413,
            leeching: true,
            at: 1000,
        }
    }

    #[test]
    fn every_refusal_has_its_reason_and_counter() {
        let p = private();
        let (hash, other, id) = ([7; 20], [8; 20], *b"-TR4060-abcdefghijkl");
        let (u, t) = p.check(ask(b"goodkey", &hash, &id)).unwrap();
        assert_eq!((u.id, t.id, t.download_pct), (1, 9, 0));
        let mut a = ask(b"goodkey", &hash, &id);
        a.passkey = Err("malformed passkey");
        assert_eq!(p.check(a), Err("malformed passkey"));
        let cases = [
            (ask(b"nokey", &hash, &id), Refusal::UnknownPasskey),
            (ask(b"goodkey", &other, &id), Refusal::UnknownTorrent),
            (ask(b"seedonly", &hash, &id), Refusal::MayNotLeech),
            (
                ask(b"goodkey", &hash, b"-XX0001-abcdefghijkl"),
                Refusal::Client,
            ),
            (
                Ask {
                    port: 6885,
                    ..ask(b"goodkey", &hash, &id)
                },
                Refusal::Port,
            ),
        ];
        for (a, r) in cases {
            assert_eq!(p.check(a), Err(r.reason()), "{r:?}");
        }
        // A seed-only user may seed.
        let seeding = Ask {
            leeching: false,
            ..ask(b"seedonly", &hash, &id)
        };
        assert!(p.check(seeding).is_ok());
        // The fourth client of one user on one torrent (three allowed by default).
        let (u, t) = p.check(ask(b"goodkey", &hash, &id)).unwrap();
        let ids: Vec<Id20> = (0..4u8).map(|i| [i; 20]).collect();
        let report = |peer_id| Accounted {
            peer_id,
            ip: [127, 0, 0, 1].into(),
            port: 6881,
            uploaded: 0,
            downloaded: 0,
            left: 10,
            stopped: false,
            regular: true,
            now: 5,
            at: 1000,
        };
        for peer_id in &ids[..3] {
            assert!(p.account(u, t, &report(peer_id), 0).is_ok());
        }
        assert_eq!(
            p.account(u, t, &report(&ids[3]), 0).map(|a| a.0),
            Err(Refusal::TooManyPeers.reason())
        );
        for r in &Refusal::ALL[..7] {
            assert_eq!(p.refused[*r as usize].get(), 1, "{r:?}");
        }
        let reasons: std::collections::HashSet<_> =
            Refusal::ALL.iter().map(|r| r.reason()).collect();
        assert_eq!(reasons.len(), Refusal::ALL.len(), "each reason differs");
    }

    /// Regression: 148k passkey guesses in 6 s from one address. Past the limit, every
    /// passkey from that address is refused alike, the right one too, so a guess that
    /// happens to be right tells nothing; other addresses are served.
    #[test]
    fn passkey_guessing_from_one_address_is_throttled() {
        let p = private();
        let (hash, id) = ([7; 20], *b"-TR4060-abcdefghijkl");
        for i in 0..30u32 {
            let key = format!("guess{i}");
            let r = p.check(ask(key.as_bytes(), &hash, &id));
            assert_eq!(r, Err(Refusal::UnknownPasskey.reason()));
        }
        let r = p.check(ask(b"goodkey", &hash, &id));
        assert_eq!(r.map(|_| ()), Err(Refusal::Guessing.reason()));
        let elsewhere = Ask {
            from: [198, 51, 100, 7].into(),
            ..ask(b"goodkey", &hash, &id)
        };
        assert!(p.check(elsewhere).is_ok());
        // A minute later the address may try again.
        let later = Ask {
            at: 1000 + 60,
            ..ask(b"goodkey", &hash, &id)
        };
        assert!(p.check(later).is_ok());
        assert_eq!(p.refused[Refusal::Guessing as usize].get(), 1);
    }

    /// XBT's auto_register: unknown torrents are served unregistered (id 0) while at most
    /// MAX_REGISTERING wait for the poll; past it they are refused and counted; the poll's
    /// taking them frees the room. Off, an unknown torrent is refused.
    #[test]
    fn auto_register_queues_unknown_torrents_up_to_its_bound() {
        let p = private();
        let id = *b"-TR4060-abcdefghijkl";
        let unknown = |i: u32| {
            let mut h = [0u8; 20];
            h[..4].copy_from_slice(&i.to_be_bytes());
            h[19] = 0xee;
            h
        };
        let h = unknown(0);
        assert_eq!(
            p.check(ask(b"goodkey", &h, &id)).map(|_| ()),
            Err(Refusal::UnknownTorrent.reason())
        );
        p.apply_settings(xbt::Settings {
            auto_register: true,
            ..Default::default()
        });
        for i in 0..MAX_REGISTERING as u32 {
            let h = unknown(i);
            let (_, t) = p.check(ask(b"goodkey", &h, &id)).unwrap();
            assert_eq!(t.id, 0);
        }
        let h = unknown(0);
        assert!(
            p.check(ask(b"goodkey", &h, &id)).is_ok(),
            "one waiting already"
        );
        let past = unknown(MAX_REGISTERING as u32);
        assert!(p.check(ask(b"goodkey", &past, &id)).is_err());
        assert_eq!(p.register_full.get(), 1);
        assert_eq!(p.take_registering().len(), MAX_REGISTERING);
        // A client the rules deny queues nothing.
        let denied = *b"-XX0001-abcdefghijkl";
        assert_eq!(
            p.check(ask(b"goodkey", &past, &denied)).map(|_| ()),
            Err(Refusal::Client.reason())
        );
        assert!(p.take_registering().is_empty());
        assert!(p.check(ask(b"goodkey", &past, &id)).is_ok());
        // Nothing is accounted on a torrent not registered yet.
        let user = p.users.get(b"goodkey").unwrap();
        let (_, t) = p.check(ask(b"goodkey", &past, &id)).unwrap();
        let a = Accounted {
            peer_id: &id,
            ip: [127, 0, 0, 1].into(),
            port: 6881,
            uploaded: 500,
            downloaded: 0,
            left: 0,
            stopped: false,
            regular: true,
            now: 1,
            at: 1000,
        };
        let (c, _) = p.account(user, t, &a, 0).unwrap();
        assert_eq!((c.torrent, c.uploaded), (0, 0));
    }

    #[test]
    fn traffic_is_credited_by_the_torrents_factors() {
        let p = private();
        let user = p.users.get(b"goodkey").unwrap();
        let half = Torrent {
            id: 3,
            download_pct: 50,
            upload_pct: 200,
            poster: 1,
            tor_type: 2,
        };
        let id = [1; 20];
        let at = |up: u64, down: u64, left: u64| Accounted {
            peer_id: &id,
            ip: [127, 0, 0, 1].into(),
            port: 6881,
            uploaded: up,
            downloaded: down,
            left,
            stopped: false,
            regular: true,
            now: 1,
            at: 77,
        };
        let (first, _) = p.account(user, half, &at(500, 500, 10), 0).unwrap();
        assert_eq!((first.uploaded_raw, first.uploaded), (0, 0), "new peer");
        let (c, _) = p
            .account(
                user,
                half,
                &Accounted {
                    now: 2,
                    ..at(1500, 2501, 0)
                },
                0,
            )
            .unwrap();
        assert_eq!((c.uploaded_raw, c.downloaded_raw), (1000, 2001));
        assert_eq!(
            (c.uploaded, c.downloaded),
            (2000, 1000),
            "double up, half down"
        );
        assert_eq!((c.user, c.torrent, c.remaining, c.at), (1, 3, 0, 77));
        assert_eq!(
            c.flags,
            AccountChange::SEEDING | AccountChange::RELEASER | 2 << AccountChange::TOR_TYPE_SHIFT,
            "user 1 uploaded it, a silver torrent"
        );
        // Free: nothing downloaded is credited.
        let free = p.torrents.get(&[7; 20]).unwrap();
        p.account(user, free, &at(0, 0, 10), 0).unwrap();
        let (c, _) = p
            .account(
                user,
                free,
                &Accounted {
                    now: 2,
                    ..at(10, 1000, 0)
                },
                0,
            )
            .unwrap();
        assert_eq!(c.flags, AccountChange::SEEDING, "nobody's upload");
        assert_eq!((c.downloaded_raw, c.downloaded), (1000, 0));
        assert_eq!(p.credit_cut.get(), 0);
        // A claim past the rate for the one second since: the bound is credited, the claim
        // flagged and counted.
        let third = Accounted {
            now: 3,
            ..at(10, u64::MAX, 0)
        };
        let (c, _) = p.account(user, free, &third, 0).unwrap();
        assert_eq!(c.flags, AccountChange::SEEDING | AccountChange::SUSPICIOUS);
        assert_eq!(
            c.downloaded_raw, 2_500_000_000,
            "the default rate for 1 s and what was left of the last announce's second"
        );
        assert_eq!(p.credit_cut.get(), 1);
        assert_eq!(
            p.credit_cut_bytes.get(),
            ledger::MAX_COUNTER - 1000 - 2_500_000_000
        );
    }

    #[test]
    fn pushes_take_effect_on_the_next_announce() {
        let p = private();
        let dir = std::env::temp_dir().join(format!("hp-push-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(p.open_log(&dir, 1000).unwrap().taken, 0);
        let (hash, id) = ([7; 20], *b"-TR4060-abcdefghijkl");
        // A new passkey: the old one stops working at once.
        let user = push::Push::User {
            id: 1,
            passkey: "newkey".into(),
            can_leech: true,
        };
        p.push(&[user], 1000).unwrap();
        assert_eq!(
            p.check(ask(b"goodkey", &hash, &id)),
            Err(Refusal::UnknownPasskey.reason())
        );
        let (_, t) = p.check(ask(b"newkey", &hash, &id)).unwrap();
        assert_eq!((t.download_pct, t.upload_pct), (0, 100), "a free torrent");
        // A half torrent, a token on it, and the site's double upload.
        let half = push::Push::Torrent {
            id: 10,
            info_hash: "11".repeat(20),
            download_pct: 50,
            upload_pct: 100,
            poster_id: 1,
        };
        let token = push::Push::Token {
            user: 1,
            torrent: 10,
            until: 2000,
        };
        let site = push::Push::Freeleech {
            download_pct: 100,
            upload_pct: 200,
        };
        p.push(&[half], 1000).unwrap();
        let (u, t) = p.check(ask(b"newkey", &[0x11; 20], &id)).unwrap();
        assert_eq!((t.id, t.download_pct, t.upload_pct), (10, 50, 100));
        assert_eq!((u.id, t.poster), (1, 1), "user 1 uploaded it");
        p.push(&[token, site], 1000).unwrap();
        let (_, t) = p.check(ask(b"newkey", &[0x11; 20], &id)).unwrap();
        assert_eq!((t.download_pct, t.upload_pct), (0, 200));
        let late = Ask {
            at: 2000,
            ..ask(b"newkey", &[0x11; 20], &id)
        };
        assert_eq!(
            p.check(late).map(|(_, t)| t.download_pct),
            Ok(50),
            "expired"
        );
        // Client lists and intervals.
        let clients = push::Push::Clients {
            allow: vec!["-qB".into()],
            deny: vec![],
        };
        let intervals = push::Push::Intervals {
            interval_secs: 600,
            min_interval_secs: 300,
        };
        p.push(&[clients, intervals], 1000).unwrap();
        assert_eq!(
            p.check(ask(b"newkey", &hash, &id)),
            Err(Refusal::Client.reason())
        );
        assert_eq!(p.intervals((1800, 900)), (600, 300));
        // A restart: the policy comes back from the log, the registries from the database.
        let q = private();
        q.open_log(&dir, 1000).unwrap();
        assert_eq!(q.intervals((1800, 900)), (600, 300));
        assert_eq!(
            q.check(ask(b"goodkey", &hash, &id)),
            Err(Refusal::Client.reason())
        );
        let qb = *b"-qB4630-abcdefghijkl";
        let (_, t) = q.check(ask(b"goodkey", &hash, &qb)).unwrap();
        assert_eq!(t.upload_pct, 200);
        assert_eq!(q.policy.read().tokens(), 1);
        // Caps: a full registry refuses before anything applies.
        let many: Vec<push::Push> = (100..=110)
            .map(|id| push::Push::User {
                id,
                passkey: format!("k{id}"),
                can_leech: true,
            })
            .collect();
        let small = Private::new(
            &PrivateConfig {
                max_users: 10,
                ..Default::default()
            },
            10,
            3600,
        );
        small.open_log(&dir, 1000).unwrap();
        assert_eq!(small.push(&many, 1000).map_err(|e| e.status), Err(507));
        assert_eq!(small.users.len(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn temp_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("hp-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn hostile_files_at_start_hold_the_caps() {
        let dir = temp_dir("hostile-start");
        // A push log holding more tokens than the cap, and lines of damage.
        let mut text = Vec::new();
        for user in 1..=20 {
            push::encode_line(
                &push::Push::Token {
                    user,
                    torrent: 1,
                    until: 0,
                },
                &mut text,
            );
        }
        text.extend_from_slice(b"{\"op\":\"user\",\"id\":1,\"passkey\":\"x\"}\nnot json\n");
        std::fs::write(dir.join(PushLog::FILE), &text).unwrap();
        let c = PrivateConfig {
            max_tokens: 5,
            ..Default::default()
        };
        let p = Private::new(&c, 10, 3600);
        let replayed = p.open_log(&dir, 1000).unwrap();
        assert_eq!((replayed.taken, replayed.skipped), (5, 17));
        assert_eq!(p.policy.read().tokens(), 5);
        assert_eq!(p.restore_skipped.get(), 17);
        // Compacted to what was taken.
        let lines = std::fs::read_to_string(dir.join(PushLog::FILE)).unwrap();
        assert_eq!(
            lines.lines().count(),
            1 + 5,
            "the site's factors and five tokens"
        );
        // A ledger file larger than a ledger of this cap can be is not read, and is deleted.
        let big = vec![0u8; p.ledger.max_file_bytes() as usize + 1];
        let file = dir.join(crate::persist::LEDGER_FILE);
        std::fs::write(&file, &big).unwrap();
        let e = crate::persist::load_ledger(&p, &dir, 1800).unwrap_err();
        assert!(e.contains("larger than the"), "{e}");
        assert!(!file.exists());
        // A pushed interval at or past the peer timeout would expire every peer.
        let intervals = push::Push::Intervals {
            interval_secs: 3600,
            min_interval_secs: 0,
        };
        let e = p.push(&[intervals], 1000).unwrap_err();
        assert_eq!(e.status, 400);
        assert!(
            e.message.contains("tracker.peer_timeout_secs"),
            "{}",
            e.message
        );
        assert_eq!(p.intervals((1800, 900)), (1800, 900));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_announce_too_soon_is_accounted_but_flagged() {
        let p = private();
        let user = p.users.get(b"goodkey").unwrap();
        let t = p.torrents.get(&[7; 20]).unwrap();
        let id = [1; 20];
        let at = |up: u64, now: u32, regular: bool| Accounted {
            peer_id: &id,
            ip: [127, 0, 0, 1].into(),
            port: 6881,
            uploaded: up,
            downloaded: 0,
            left: 0,
            stopped: false,
            regular,
            now,
            at: 77,
        };
        assert_eq!(p.account(user, t, &at(0, 100, true), 900).unwrap().1, None);
        let (c, soon) = p.account(user, t, &at(500, 400, true), 900).unwrap();
        assert_eq!(
            (c.uploaded, soon),
            (500, Some(600)),
            "accounted, 600 s early"
        );
        let (_, soon) = p.account(user, t, &at(600, 500, false), 900).unwrap();
        assert_eq!(soon, None, "an event is never held back");
        let (_, soon) = p.account(user, t, &at(700, 1400, true), 900).unwrap();
        assert_eq!(soon, None, "on time");
        assert_eq!(p.too_soon.get(), 1);
    }

    #[test]
    fn the_allow_list_admits_only_its_clients() {
        let r = Rules {
            peer_id_allow: vec![b"-TR".to_vec().into(), b"-qB".to_vec().into()],
            peer_id_deny: vec![b"-TR2".to_vec().into()],
            port_deny: vec![],
        };
        assert!(r.client_allowed(b"-TR4060-abcdefghijkl"));
        assert!(r.client_allowed(b"-qB4630-abcdefghijkl"));
        assert!(!r.client_allowed(b"-TR2940-abcdefghijkl"), "deny first");
        assert!(!r.client_allowed(b"-UT3550-abcdefghijkl"));
        assert!(Rules::default().client_allowed(b"anything at all....."));
    }
}
