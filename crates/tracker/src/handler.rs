//! The tracker's request handlers: one [`TrackerWorker`] per server worker, with its own
//! random generator, scratch buffers and journal, turning parsed requests into answers.
//!
//! A completed download is journaled by the announce that completes it; the server commits the
//! journal before that answer leaves. When the journal is full (the database is down for long),
//! announces that could complete a download are refused with a failure reason, so no client
//! is told its completion counted when it might not be kept.

use std::io::Write as _;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use hotpath_service::{
    Context, Handled, HttpResponse, Kind, Outcome, Request, ServiceWorker, WsConn, WsOut, WsRoute,
};
use hotpath_store::JournalWriter;

use crate::stored::{TorrentChange, TORRENT_LEN};
use hotpath_wire::bencode::{put_bytes, put_failure, put_int};
use hotpath_wire::exchange::Delta;
use hotpath_wire::query::{self, is_global_unicast, Event, Id20};
use hotpath_wire::udp;

use crate::access::AccessView;
use crate::private::push::{self, ApiError, Call};
use crate::private::stored::{AccountChange, LogChange, LoggedAnnounce, ACCOUNT_MAX_LEN};
use crate::private::{gazelle, unit3d};
use crate::private::{Accounted, Ask, Private, Refusal, Torrent, User};
use crate::table::{Counts, PeerAnnounce, Selection};
use crate::{Shared, ANNOUNCE, CONNECT, SCRAPE, WS_ANNOUNCE, WS_SCRAPE};
use hotpath_wire::passkey::{self, Route};

/// An address in 16 bytes, IPv4 mapped (as XBT's logs keep it).
fn ip16(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    }
}

/// What an announce of either codec (HTTP or BEP 15) gives a private tracker to check and
/// account.
struct Reported<'a> {
    info_hash: &'a Id20,
    peer_id: &'a Id20,
    port: u16,
    uploaded: u64,
    downloaded: u64,
    left: u64,
    event: Event,
}

/// Bodies at least this large are gzip-coded when the client accepts it.
const GZIP_MIN: usize = 1024;

/// One worker's tracker handler.
pub struct TrackerWorker {
    shared: Arc<Shared>,
    rng: fastrand::Rng,
    sel: Selection,
    hashes: Vec<Id20>,
    access: AccessView,
    /// This worker's journal, when persistence is on.
    journal: Option<JournalWriter>,
    /// Scratch for BEP 41 URL data.
    url_data: Vec<u8>,
    /// The settings in force (`Shared::live`) and their generation.
    cfg: Arc<hotpath_config::TrackerConfig>,
    cfg_gen: u64,
    /// The server worker this handler belongs to.
    index: usize,
    /// This worker's WebSocket connections: the swarms each announced in (left when it
    /// closes) and, in private mode, the passkey of its path.
    ws: hashbrown::HashMap<WsConn, WsState>,
}

/// A WebSocket connection, as the tracker keeps it.
#[derive(Default)]
struct WsState {
    hashes: smallvec::SmallVec<[[u8; 20]; 1]>,
    /// Private mode: the passkey its upgrade's path carried (or why it had none).
    passkey: Option<Result<Box<[u8]>, &'static str>>,
}

fn compact4(ip: std::net::Ipv4Addr, port: u16) -> [u8; 6] {
    let mut a = [0u8; 6];
    a[..4].copy_from_slice(&ip.octets());
    a[4..].copy_from_slice(&port.to_be_bytes());
    a
}

fn compact6(ip: Ipv6Addr, port: u16) -> [u8; 18] {
    let mut a = [0u8; 18];
    a[..16].copy_from_slice(&ip.octets());
    a[16..].copy_from_slice(&port.to_be_bytes());
    a
}

/// Appends `complete`, `downloaded` and `incomplete` (in key order), as announce answers and
/// scrape entries both start.
fn put_counts(out: &mut Vec<u8>, c: Counts) {
    out.extend_from_slice(b"8:complete");
    put_int(out, i64::from(c.seeders));
    out.extend_from_slice(b"10:downloaded");
    put_int(out, i64::from(c.completed));
    out.extend_from_slice(b"10:incomplete");
    put_int(out, i64::from(c.leechers));
}

/// An announce from `ip:port`, wanting peers of its own address family.
fn peer_announce(
    ip: IpAddr,
    port: u16,
    info_hash: &Id20,
    peer_id: &Id20,
    left: u64,
    event: Event,
    want: u32,
) -> PeerAnnounce {
    let (v4, v6) = match ip {
        IpAddr::V4(v4) => (Some(compact4(v4, port)), None),
        IpAddr::V6(v6) => (None, Some(compact6(v6, port))),
    };
    PeerAnnounce {
        info_hash: *info_hash,
        peer_id: *peer_id,
        v4,
        v6,
        alias6: None,
        // BEP 21: a partial seed (event=paused) wants nothing, so it is treated as a seeder.
        seeder: left == 0 || event == Event::Paused,
        complete: left == 0,
        event,
        want: want as usize,
        want_v4: v4.is_some(),
        want_v6: v6.is_some(),
    }
}

/// The last address in a forwarding header (the one the nearest proxy added).
fn forwarded_ip(value: &[u8]) -> Option<IpAddr> {
    let last = value.rsplit(|&b| b == b',').next()?;
    let text = std::str::from_utf8(last).ok()?.trim();
    let ip: IpAddr = text
        .parse()
        .ok()
        .or_else(|| text.parse::<SocketAddr>().ok().map(|s| s.ip()))?;
    Some(ip.to_canonical())
}

impl TrackerWorker {
    /// A handler for worker `index`.
    pub fn new(shared: Arc<Shared>, index: usize) -> Self {
        let access = shared.access.view();
        let journal = shared.persist.as_ref().map(|db| db.writer(index as u32));
        let cfg = shared.live.read().clone();
        Self {
            cfg,
            cfg_gen: shared.live_gen.load(std::sync::atomic::Ordering::Acquire),
            journal,
            rng: fastrand::Rng::with_seed(fastrand::u64(..) ^ index as u64),
            shared,
            sel: Selection::default(),
            hashes: Vec::new(),
            access,
            url_data: Vec::new(),
            index,
            ws: hashbrown::HashMap::new(),
        }
    }

    /// Takes the settings a reload changed, if one did since the last request.
    fn refresh(&mut self) {
        let gen = self
            .shared
            .live_gen
            .load(std::sync::atomic::Ordering::Acquire);
        if gen != self.cfg_gen {
            self.cfg = self.shared.live.read().clone();
            self.cfg_gen = gen;
        }
    }

    /// Unix seconds at process second `now`.
    fn unix(&self, now: u32) -> u32 {
        (self.shared.unix_base + i64::from(now)) as u32
    }

    /// The intervals clients are told (interval, min interval): the config's, or those
    /// pushed to a private tracker.
    fn intervals(&self) -> (u32, u32) {
        let cfg = &self.cfg;
        let config = (cfg.interval_secs, cfg.min_interval_secs);
        match &self.shared.private {
            Some(p) => p.intervals(config),
            None => config,
        }
    }

    /// The interval to tell a client, with its jitter.
    fn interval(&mut self) -> u32 {
        let base = self.intervals().0;
        base + self.rng.u32(..=self.jitter(base))
    }

    /// The most seconds of jitter added to interval `base` (`tracker.interval_jitter_percent`
    /// of it, and never past `u32::MAX` in all).
    fn jitter(&self, base: u32) -> u32 {
        (u64::from(base) * u64::from(self.cfg.interval_jitter_percent) / 100)
            .min(u64::from(u32::MAX - base)) as u32
    }

    fn check_access(&mut self, info_hash: &Id20) -> Option<&'static str> {
        let reason = self.shared.access.check(&mut self.access, info_hash);
        if reason.is_some() {
            self.shared.counters.access_refused.add(1);
        }
        reason
    }

    /// Applies an announce to the swarm table, journaling the download it completes; in
    /// private mode, also what it accounts (`account`, journaled whether or not the swarm
    /// took the peer: the traffic was made either way).
    fn apply(
        &mut self,
        peer: &PeerAnnounce,
        now: u32,
        account: Option<AccountChange>,
    ) -> Result<Counts, &'static str> {
        if let Some(j) = &self.journal {
            let may_snatch = peer.complete || peer.event == Event::Completed;
            if may_snatch && !j.has_room(TORRENT_LEN) {
                return Err(j.refuse());
            }
        }
        let result = self
            .shared
            .swarms
            .announce(peer, now as u16, &mut self.rng, &mut self.sel);
        // A torrent not registered yet (XBT's auto_register) accounts nothing.
        let account = account.filter(|c| c.torrent != 0);
        if let Some(mut change) = account {
            change.completed = u64::from(matches!(result, Ok((_, true))));
            if change.completed > 0 && change.flags & AccountChange::TOKEN != 0 {
                // The download a Gazelle freeleech token covered is done: the token is.
                if let Some(g) = self
                    .shared
                    .private
                    .as_ref()
                    .and_then(|p| p.gazelle.as_ref())
                {
                    g.spend(change.user, change.torrent);
                }
            }
            if let Some(j) = &mut self.journal {
                j.push(&change);
            }
        }
        let (c, snatched) = result?;
        let at = self.unix(now);
        if let Some(x) = &self.shared.exchange {
            // The other nodes learn of the peer (or of its leaving) within a publish interval.
            let delta = match (peer.v4, peer.v6) {
                (Some(a), _) => Some(Delta::v4(peer.info_hash, a, at)),
                (None, Some(a)) => Some(Delta::v6(peer.info_hash, a, at)),
                (None, None) => None,
            };
            if let Some(mut d) = delta {
                d.seeder = peer.seeder;
                d.stopped = peer.event == Event::Stopped;
                d.snatched = snatched;
                d.peer_id = self.shared.cfg.keep_peer_ids.then_some(peer.peer_id);
                x.push(self.index, d);
            }
        }
        if let (true, Some(j)) = (snatched, &mut self.journal) {
            j.push(&TorrentChange {
                info_hash: peer.info_hash,
                completed: 1,
                seeders: c.seeders,
                leechers: c.leechers,
                at,
            });
        }
        Ok(c)
    }

    /// Private mode: checks a private announce `r` (from either codec) of `passkey`, sent
    /// from `from` for a peer at `ip` (another only when the config takes `ip=`) at process
    /// second `now`, and accounts it. The journal must have room for
    /// what it records (else the announce is refused, so nothing counted goes unrecorded).
    /// With the change comes, for an announce sooner than the minimum interval, how many
    /// seconds it came too soon (it then gets no peers).
    fn private_announce(
        &mut self,
        p: &Private,
        passkey: Result<&[u8], &'static str>,
        r: &Reported<'_>,
        (from, ip): (IpAddr, IpAddr),
        now: u32,
    ) -> Result<(AccountChange, Option<u32>), &'static str> {
        let at = self.unix(now);
        let stopped = r.event == Event::Stopped;
        let (user, torrent): (User, Torrent) = p.check(Ask {
            passkey,
            from,
            info_hash: r.info_hash,
            peer_id: r.peer_id,
            port: r.port,
            leeching: r.left > 0 && !stopped,
            at,
        })?;
        let log = p.logs().0;
        if let Some(j) = &mut self.journal {
            let log_len = if log { LogChange::MAX_LEN } else { 0 };
            if !j.has_room(ACCOUNT_MAX_LEN + TORRENT_LEN + log_len) {
                return Err(j.refuse());
            }
            if log {
                // XBT's announce log: each announce of a known user, as XBT writes it.
                j.push(&LogChange {
                    ip: ip16(ip),
                    uid: user.id,
                    at,
                    announce: Some(LoggedAnnounce {
                        port: r.port,
                        event: match r.event {
                            Event::Completed => 1,
                            Event::Started => 2,
                            Event::Stopped => 3,
                            Event::None | Event::Paused => 0,
                        },
                        info_hash: *r.info_hash,
                        peer_id: *r.peer_id,
                        downloaded: r.downloaded,
                        left: r.left,
                        uploaded: r.uploaded,
                    }),
                });
            }
        }
        let a = Accounted {
            peer_id: r.peer_id,
            ip,
            port: r.port,
            uploaded: r.uploaded,
            downloaded: r.downloaded,
            left: r.left,
            stopped,
            regular: r.event == Event::None,
            now,
            at,
        };
        p.account(user, torrent, &a, self.intervals().1)
    }

    fn client_ip(&self, req: &Request<'_, '_>, ctx: &Context) -> Result<IpAddr, &'static str> {
        let ip = ctx.peer.ip().to_canonical();
        let cfg = &self.cfg;
        if cfg.real_ip_header.is_empty() || !cfg.trusted_proxies.iter().any(|n| n.contains(&ip)) {
            return Ok(ip);
        }
        match req.header(&cfg.real_ip_header) {
            None => Ok(ip),
            Some(v) => forwarded_ip(v).ok_or("the proxy's client address header is malformed"),
        }
    }

    fn announce_http(
        &mut self,
        req: &Request<'_, '_>,
        ctx: &Context,
        resp: &mut HttpResponse,
        key: Result<&[u8], &'static str>,
    ) -> Result<(), &'static str> {
        let a = query::parse_announce(req.query)?;
        if let Some(reason) = self.check_access(&a.info_hash) {
            return Err(reason);
        }
        let from = self.client_ip(req, ctx)?;
        let mut ip = from;
        // Addresses a client gives are taken only when the config allows it and only when
        // they are global unicast: else anyone could make a swarm send its peers to a third
        // party, or to the tracker's own network.
        if let Some(given) = a.ip {
            if self.cfg.accept_ip_param && is_global_unicast(given) {
                ip = given;
            } else {
                self.shared.counters.client_addresses_ignored.add(1);
            }
        }
        let (account, too_soon) = match self.shared.private.clone() {
            None => (None, None),
            Some(p) => {
                let reported = Reported {
                    info_hash: &a.info_hash,
                    peer_id: &a.peer_id,
                    port: a.port,
                    uploaded: a.uploaded,
                    downloaded: a.downloaded,
                    left: a.left,
                    event: a.event,
                };
                let (change, too_soon) =
                    self.private_announce(&p, key, &reported, (from, ip), ctx.now)?;
                (Some(change), too_soon)
            }
        };
        let cfg = &self.cfg;
        let ignored = &self.shared.counters.client_addresses_ignored;
        // Too soon: still in the swarm and accounted, but no peers.
        let want = match too_soon {
            Some(_) => 0,
            None => a
                .numwant
                .unwrap_or(cfg.numwant_default)
                .min(cfg.numwant_max),
        };
        let mut peer = peer_announce(ip, a.port, &a.info_hash, &a.peer_id, a.left, a.event, want);
        if let Some((addr, port)) = a.ipv6 {
            let usable = cfg.accept_ipv6_param && is_global_unicast(IpAddr::V6(addr));
            if usable && peer.v4.is_some() {
                // BEP 7: an IPv4 client also listening on IPv6 is handed to IPv6 peers too
                // (still one peer), and gets peers6.
                peer.alias6 = Some(compact6(addr, port.unwrap_or(a.port)));
                peer.want_v6 = true;
            } else if !usable {
                ignored.add(1);
            }
        }
        self.sel.clear();
        self.sel.with_ids = !a.compact && !a.no_peer_id && cfg.keep_peer_ids;
        let c = self.apply(&peer, ctx.now, account)?;
        let interval = self.interval();
        let min_interval = self.intervals().1;
        let out = &mut resp.body;
        out.push(b'd');
        put_counts(out, c);
        out.extend_from_slice(b"8:interval");
        put_int(out, i64::from(interval));
        out.extend_from_slice(b"12:min interval");
        put_int(out, i64::from(min_interval));
        if a.compact {
            out.extend_from_slice(b"5:peers");
            put_bytes(out, &self.sel.v4);
            if peer.want_v6 {
                out.extend_from_slice(b"6:peers6");
                put_bytes(out, &self.sel.v6);
            }
        } else {
            out.extend_from_slice(b"5:peersl");
            let mut ids = self.sel.ids.iter();
            let v4 = self.sel.v4.chunks_exact(6).map(|p| {
                let ip = IpAddr::from(<[u8; 4]>::try_from(&p[..4]).expect("4 bytes"));
                (ip, u16::from_be_bytes([p[4], p[5]]))
            });
            let v6 = self.sel.v6.chunks_exact(18).map(|p| {
                let ip = IpAddr::from(<[u8; 16]>::try_from(&p[..16]).expect("16 bytes"));
                (ip, u16::from_be_bytes([p[16], p[17]]))
            });
            for (ip, port) in v4.chain(v6) {
                let text = ip.to_string();
                out.extend_from_slice(b"d2:ip");
                put_bytes(out, text.as_bytes());
                if let Some(id) = ids.next() {
                    out.extend_from_slice(b"7:peer id");
                    put_bytes(out, id);
                }
                out.extend_from_slice(b"4:port");
                put_int(out, i64::from(port));
                out.push(b'e');
            }
            out.push(b'e');
        }
        if let Some(wait) = too_soon {
            out.extend_from_slice(b"15:warning message");
            let text = format!(
                "announced {wait} s before the minimum interval ({min_interval} s): no peers \
                 this time"
            );
            put_bytes(out, text.as_bytes());
        }
        out.push(b'e');
        Ok(())
    }

    fn scrape_http(
        &mut self,
        req: &Request<'_, '_>,
        ctx: &Context,
        resp: &mut HttpResponse,
        key: Result<&[u8], &'static str>,
    ) -> Result<(), &'static str> {
        let private = self.shared.private.clone();
        let max = self.cfg.max_scrape_hashes;
        let mut parsed = false;
        if let Some(p) = &private {
            let known = key.map(|k| p.users.get(k).map(|u| u.id));
            let uid = match known {
                Err(reason) => return Err(p.refuse_with(Refusal::Passkey, reason)),
                Ok(Some(uid)) => uid,
                Ok(None) => {
                    // An XBT derived passkey holds for one torrent: the first asked, as XBT
                    // takes it.
                    query::parse_scrape(req.query, max, &mut self.hashes)?;
                    parsed = true;
                    let derived = p.derived.as_ref().zip(self.hashes.first());
                    let k = key.unwrap_or_default();
                    match derived.and_then(|(d, hash)| d.user(k, hash)) {
                        Some(u) => u.id,
                        None => return Err(p.refuse(Refusal::UnknownPasskey)),
                    }
                }
            };
            // XBT's scrape log, when on and the journal has room (the answer claims nothing
            // of it).
            if p.logs().1 {
                let ip = self
                    .client_ip(req, ctx)
                    .unwrap_or_else(|_| ctx.peer.ip().to_canonical());
                let at = self.unix(ctx.now);
                if let Some(j) = self
                    .journal
                    .as_mut()
                    .filter(|j| j.has_room(LogChange::MAX_LEN))
                {
                    j.push(&LogChange {
                        ip: ip16(ip),
                        uid,
                        at,
                        announce: None,
                    });
                }
            }
        }
        // In private mode only registered torrents are shown.
        let hidden = |hash: &Id20| private.as_ref().is_some_and(|p| !p.scrapable(hash));
        if !parsed {
            query::parse_scrape(req.query, max, &mut self.hashes)?;
        }
        let out = &mut resp.body;
        out.extend_from_slice(b"d5:filesd");
        let entry = |out: &mut Vec<u8>, hash: &Id20, c: Counts| {
            put_bytes(out, hash);
            out.push(b'd');
            put_counts(out, c);
            out.push(b'e');
        };
        if self.hashes.is_empty() {
            if !self.cfg.full_scrape {
                return Err("full scrape is disabled: name info_hash parameters");
            }
            let shared = self.shared.clone();
            let mut view = shared.access.view();
            shared.swarms.for_each(&mut |hash, c| {
                if shared.access.check(&mut view, hash).is_none() && !hidden(hash) {
                    entry(out, hash, c);
                }
            });
        } else {
            // Dictionary keys must be sorted and unique.
            self.hashes.sort_unstable();
            self.hashes.dedup();
            for i in 0..self.hashes.len() {
                let hash = self.hashes[i];
                if self.shared.access.check(&mut self.access, &hash).is_some() || hidden(&hash) {
                    continue;
                }
                entry(out, &hash, self.shared.swarms.scrape(&hash));
            }
        }
        out.extend_from_slice(b"ee");
        if req.accepts_gzip() && out.len() >= GZIP_MIN {
            let mut enc = flate2::write::GzEncoder::new(
                Vec::with_capacity(out.len() / 4),
                flate2::Compression::fast(),
            );
            let gz = enc.write_all(out).and_then(|()| enc.finish());
            if let Ok(gz) = gz {
                resp.body = gz;
                resp.extra_headers
                    .extend_from_slice(b"Content-Encoding: gzip\r\nVary: Accept-Encoding\r\n");
            }
        }
        Ok(())
    }

    fn announce_udp(
        &mut self,
        r: &udp::AnnounceRequest<'_>,
        ctx: &Context,
        out: &mut Vec<u8>,
        len: usize,
    ) -> Outcome {
        let ip = ctx.peer.ip().to_canonical();
        if !self
            .shared
            .conn_ids
            .check(r.connection_id, ip, self.unix(ctx.now))
        {
            return self.bad_connection_id(r.transaction_id, out, len);
        }
        if let Some(reason) = self.check_access(&r.info_hash) {
            udp::write_error(out, r.transaction_id, reason, usize::MAX);
            return Outcome::Refused;
        }
        let (mut account, mut too_soon) = (None, false);
        if let Some(p) = self.shared.private.clone() {
            r.options.url_data(&mut self.url_data);
            let url_data = std::mem::take(&mut self.url_data);
            let reported = Reported {
                info_hash: &r.info_hash,
                peer_id: &r.peer_id,
                port: r.port,
                uploaded: r.uploaded,
                downloaded: r.downloaded,
                left: r.left,
                event: r.event,
            };
            let passkey = passkey::from_url_data(&url_data, &p.passkey_param);
            let checked = self.private_announce(&p, passkey, &reported, (ip, ip), ctx.now);
            self.url_data = url_data;
            match checked {
                Ok((change, soon)) => {
                    account = Some(change);
                    too_soon = soon.is_some();
                }
                Err(reason) => {
                    udp::write_error(out, r.transaction_id, reason, usize::MAX);
                    return Outcome::Refused;
                }
            }
        }
        let cfg = &self.cfg;
        // Too soon: still in the swarm and accounted, but no peers (UDP has no warning).
        let want = if too_soon {
            0
        } else if r.num_want <= 0 {
            cfg.numwant_default
        } else {
            (r.num_want as u32).min(cfg.numwant_max)
        };
        let peer = peer_announce(ip, r.port, &r.info_hash, &r.peer_id, r.left, r.event, want);
        self.sel.clear();
        self.sel.with_ids = false;
        match self.apply(&peer, ctx.now, account) {
            Ok(c) => {
                let interval = self.interval();
                udp::write_announce_head(out, r.transaction_id, interval, c.leechers, c.seeders);
                out.extend_from_slice(&self.sel.v4);
                out.extend_from_slice(&self.sel.v6);
                Outcome::Ok
            }
            Err(reason) => {
                udp::write_error(out, r.transaction_id, reason, usize::MAX);
                Outcome::Refused
            }
        }
    }

    /// What a private tracker holds, for `GET /admin/tracker`.
    fn summary(&self, p: &Private) -> serde_json::Value {
        let policy = p.policy.read();
        let text = |v: &[Box<[u8]>]| -> Vec<String> {
            v.iter()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .collect()
        };
        let (interval, min_interval) = self.intervals();
        serde_json::json!({
            "users": p.users_held(),
            "torrents": p.torrents.len(),
            "peers_accounted": p.ledger.len(),
            "freeleech": {
                "download_pct": policy.download_pct,
                "upload_pct": policy.upload_pct,
            },
            "personal_freeleech": policy.personal(),
            "tokens": policy.tokens(),
            "clients": {
                "allow": text(&policy.rules.peer_id_allow),
                "deny": text(&policy.rules.peer_id_deny),
            },
            "interval_secs": interval,
            "min_interval_secs": min_interval,
        })
    }

    /// Ocelot's update API for a Gazelle site, `/<private.site_secret>/update?action=…` on
    /// the admin listener: the site's calls, answered `success` as Ocelot answers them. A
    /// wrong secret counts against the address as a wrong push token does.
    fn ocelot(
        &mut self,
        p: &Private,
        req: &Request<'_, '_>,
        ctx: &Context,
        resp: &mut HttpResponse,
    ) -> Option<Handled> {
        let g = p.gazelle.as_ref()?;
        let (secret, call) = req.path.strip_prefix('/')?.split_once('/')?;
        if call == "report" {
            let key = ("Ocelot's report API", "private.report_secret");
            if let Err(refused) = site_secret(p, secret, &g.report_secret.read(), key, ctx, resp) {
                return Some(refused);
            }
            return match gazelle::decode_report(req.query) {
                Ok(r) => Some(self.ocelot_report(p, g, r, ctx, resp)),
                Err(e) => Some(admin_error(resp, e.status, &e.message)),
            };
        }
        if call != "update" {
            return None;
        }
        let key = ("Ocelot's update API", "private.site_secret");
        if let Err(refused) = site_secret(p, secret, &g.secret.read(), key, ctx, resp) {
            return Some(refused);
        }
        if req.method != "GET" {
            resp.extra_headers.extend_from_slice(b"Allow: GET\r\n");
            return Some(admin_error(resp, 405, "use GET, as Gazelle does"));
        }
        let at = self.unix(ctx.now);
        let cfg = (self.cfg.interval_secs, self.cfg.min_interval_secs);
        match gazelle::decode(req.query).and_then(|a| p.ocelot(a, at, cfg)) {
            Ok(body) => {
                resp.content_type = "text/plain";
                resp.body = body.into_bytes();
                Some(Handled::Answered(Kind::ADMIN, Outcome::Ok))
            }
            Err(e) => Some(admin_error(resp, e.status, &e.message)),
        }
    }

    /// Ocelot's report API for a Gazelle site, `/<private.report_secret>/report?get=…`: the
    /// tracker's figures (`stats`, `prom_stats`), a user's peers and rights (`user`), and
    /// what stands for Ocelot's allocator statistics (`jemalloc`).
    fn ocelot_report(
        &self,
        p: &Private,
        g: &gazelle::Gazelle,
        r: gazelle::Report,
        ctx: &Context,
        resp: &mut HttpResponse,
    ) -> Handled {
        let figures = || {
            let t = self.shared.swarms.totals();
            let interval = self.intervals().0;
            gazelle::Figures {
                version: env!("CARGO_PKG_VERSION"),
                seeders: t.seeders as u64,
                leechers: (t.peers - t.seeders) as u64,
                queued_rows: self.shared.persist.as_ref().map_or(0, |s| s.queued_rows()) as u64,
                bad_secrets: p.token_guesses.failures.get(),
                bad_passkeys: p.refusals(Refusal::UnknownPasskey),
                interval,
                jitter: self.jitter(interval),
                uptime: u64::from(ctx.now),
                usage: process_usage(),
            }
        };
        resp.content_type = "text/plain";
        let body = match r {
            gazelle::Report::Stats => {
                resp.content_type = "application/json";
                figures().json()
            }
            gazelle::Report::Prometheus => figures().prometheus(),
            gazelle::Report::Jemalloc => gazelle::JEMALLOC.to_string(),
            gazelle::Report::User(key) => {
                let Some(u) = p.users.get(&key) else {
                    return hotpath_service::json_error(
                        resp,
                        404,
                        Kind::ADMIN,
                        "Announce key not found",
                    );
                };
                let peers = p.ledger.user_peers(u.id, ctx.now, p.peer_timeout());
                resp.content_type = "application/json";
                gazelle::user_report(u.id, peers, g.is_protected(u.id), u.can_leech)
            }
        };
        resp.body = body.into_bytes();
        Handled::Answered(Kind::ADMIN, Outcome::Ok)
    }

    /// UNIT3D-Announce's JSON API for a UNIT3D site, `/announce/<private.site_secret>/…` on
    /// the admin listener: the site's calls, answered 200 with an empty body as
    /// UNIT3D-Announce answers them. A wrong key counts against the address as a wrong push
    /// token does.
    fn unit3d_api(
        &mut self,
        p: &Private,
        req: &Request<'_, '_>,
        ctx: &Context,
        resp: &mut HttpResponse,
    ) -> Option<Handled> {
        let u = p.unit3d.as_ref()?;
        let (key, rest) = req.path.strip_prefix("/announce/")?.split_once('/')?;
        let api = ("UNIT3D-Announce's API", "private.site_secret");
        if let Err(refused) = site_secret(p, key, &u.secret.read(), api, ctx, resp) {
            return Some(refused);
        }
        let at = self.unix(ctx.now);
        let rest = format!("/{rest}");
        match unit3d::decode(req.method, &rest, req.body).and_then(|c| p.unit3d_call(c, at)) {
            Ok(body) => {
                if !body.is_empty() {
                    resp.content_type = "application/json";
                }
                resp.body = body;
                Some(Handled::Answered(Kind::ADMIN, Outcome::Ok))
            }
            Err(e) => Some(admin_error(resp, e.status, &e.message)),
        }
    }

    fn bad_connection_id(&self, transaction_id: u32, out: &mut Vec<u8>, len: usize) -> Outcome {
        self.shared.counters.bad_connection_ids.add(1);
        udp::write_error(out, transaction_id, "connection id expired or invalid", len);
        Outcome::Refused
    }
}

/// A private tracker's route of a request and its passkey (or why it has none); `None` when
/// the path is not a tracker route.
fn private_route<'a>(
    p: &Private,
    req: &'a Request<'_, '_>,
) -> Option<(Route, Result<&'a [u8], &'static str>)> {
    let (route, _) = passkey::route(req.path.as_bytes())?;
    let key = passkey::find(req.path.as_bytes(), req.query, &p.passkey_param)
        .map(|found| found.map(|(_, key)| key).unwrap_or_default());
    Some((route, key))
}

/// Checks the site's secret `given` in a call of the site's own API (`api`, and the config key
/// of its secret) against that secret (`expected`): off while it is empty (403); an address
/// that sent too many wrong ones lately is refused whatever it sends (429), as with the push
/// API's token, and a wrong one is counted against it (403).
fn site_secret(
    p: &Private,
    given: &str,
    expected: &str,
    (api, key): (&str, &str),
    ctx: &Context,
    resp: &mut HttpResponse,
) -> Result<(), Handled> {
    if expected.is_empty() {
        return Err(admin_error(resp, 403, &format!("{api} is off: set {key}")));
    }
    let from = ctx.peer.ip();
    if !p.token_guesses.allows(from, ctx.now) {
        resp.extra_headers.extend_from_slice(b"Retry-After: 60\r\n");
        return Err(admin_error(
            resp,
            429,
            "too many wrong secrets from your address: wait a minute",
        ));
    }
    if !hotpath_service::same_secret(given.as_bytes(), expected.as_bytes()) {
        p.token_guesses.failed(from, ctx.now);
        return Err(admin_error(resp, 403, "Authentication failure"));
    }
    Ok(())
}

/// This process's CPU seconds in user space and in the kernel, and its largest resident set
/// in bytes, from /proc (clock ticks of 1/100 s, as Linux reports them to user space).
fn process_usage() -> Option<(f64, f64, u64)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // utime and stime are fields 14 and 15, counted after the parenthesised command name.
    let mut f = stat.rsplit_once(')')?.1.split_whitespace().skip(11);
    let ticks = |v: Option<&str>| v?.parse::<u64>().ok();
    let (user, system) = (ticks(f.next())?, ticks(f.next())?);
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let hwm = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse::<u64>()
        .ok()?;
    Some((user as f64 / 100.0, system as f64 / 100.0, hwm * 1024))
}

/// An admin API's error answer: `status` and a JSON message.
fn admin_error(resp: &mut HttpResponse, status: u16, text: &str) -> Handled {
    hotpath_service::json_error(resp, status, Kind::ADMIN, text)
}

fn fail(resp: &mut HttpResponse, reason: &str) {
    resp.body.clear();
    resp.extra_headers.clear();
    put_failure(&mut resp.body, reason);
}

impl TrackerWorker {
    /// One WebTorrent message: (its kind's index in `webtorrent::KINDS`, whether it was
    /// served). Refusals are answered with a `failure reason` under the message's action.
    fn webtorrent(
        &mut self,
        w: &crate::webtorrent::WebTorrent,
        conn: WsConn,
        text: &[u8],
        ctx: &Context,
        out: &mut WsOut,
    ) -> (usize, bool) {
        use hotpath_wire::webtorrent::{self as wt, Message};
        let msg = match wt::parse(text) {
            Ok(m) => m,
            Err(e) => {
                out.send(None, |b| {
                    wt::write_error(b, e.action, e.info_hash.as_ref(), &e.reason)
                });
                return (3, false);
            }
        };
        match msg {
            Message::Announce(a) => {
                let info_hash = a.info_hash;
                let refuse = |out: &mut WsOut, why: &str| {
                    out.send(None, |b| {
                        wt::write_error(b, "announce", Some(&info_hash), why)
                    });
                    (0, false)
                };
                if let Some(why) = self.shared.access.check(&mut self.access, &a.info_hash.0) {
                    self.shared.counters.access_refused.add(1);
                    return refuse(out, why);
                }
                let cap = w.config().max_swarms_per_connection;
                let st = self.ws.entry(conn).or_default();
                let known = st.hashes.contains(&a.info_hash.0);
                if !known && st.hashes.len() >= cap {
                    w.stats.caps[crate::webtorrent::CAP_SWARMS_PER_CONNECTION].add(1);
                    return refuse(out, "too many torrents on one connection");
                }
                let passkey = st.passkey.clone();
                let mut a = a;
                // Private mode: the passkey, the rules and the accounting of an HTTP
                // announce (a WebRTC peer has no port: 0).
                let (account, too_soon) = match (self.shared.private.clone(), passkey) {
                    (Some(p), Some(key)) => {
                        let event = match a.event {
                            wt::Event::None => Event::None,
                            wt::Event::Started => Event::Started,
                            wt::Event::Stopped => Event::Stopped,
                            wt::Event::Completed => Event::Completed,
                            wt::Event::Paused => Event::Paused,
                        };
                        let reported = Reported {
                            info_hash: &a.info_hash.0,
                            peer_id: &a.peer_id.0,
                            port: 0,
                            uploaded: a.uploaded.unwrap_or(0),
                            downloaded: a.downloaded.unwrap_or(0),
                            // Unknown (JavaScript's Infinity arrives as null): still leeching.
                            left: a.left.unwrap_or(1),
                            event,
                        };
                        let ip = ctx.peer.ip().to_canonical();
                        let key = key.as_deref().map_err(|why| *why);
                        match self.private_announce(&p, key, &reported, (ip, ip), ctx.now) {
                            Ok((change, too_soon)) => (Some(change), too_soon),
                            Err(why) => return refuse(out, why),
                        }
                    }
                    _ => (None, None),
                };
                if too_soon.is_some() {
                    // Too soon: kept in the swarm and accounted, but no offers go out.
                    a.offers.clear();
                }
                if let Some(j) = &self.journal {
                    if a.event == wt::Event::Completed && !j.has_room(TORRENT_LEN) {
                        return refuse(out, j.refuse());
                    }
                }
                match w.announce(conn, &a, ctx.now, &mut self.rng, out) {
                    Ok(r) => {
                        if let Some(mut change) = account.filter(|c| c.torrent != 0) {
                            change.completed = u64::from(r.snatched);
                            if let Some(j) = &mut self.journal {
                                j.push(&change);
                            }
                        }
                        let at = self.unix(ctx.now);
                        if let (true, Some(j)) = (r.snatched, &mut self.journal) {
                            j.push(&TorrentChange {
                                info_hash: a.info_hash.0,
                                completed: 1,
                                seeders: r.counts.complete as u32,
                                leechers: r.counts.incomplete as u32,
                                at,
                            });
                        }
                        let list = &mut self.ws.entry(conn).or_default().hashes;
                        if r.joined && !known {
                            list.push(a.info_hash.0);
                        } else if !r.joined {
                            list.retain(|h| *h != a.info_hash.0);
                        }
                        let interval = w.config().interval_secs;
                        let min_interval = self.intervals().1.min(interval);
                        let warning = too_soon.map(|wait| {
                            format!(
                                "announced {wait} s before the minimum interval \
                                 ({min_interval} s): no offers relayed this time"
                            )
                        });
                        out.send(None, |b| {
                            wt::write_announce_response(
                                b,
                                &a.info_hash,
                                &r.counts,
                                interval,
                                min_interval,
                                warning.as_deref(),
                            )
                        });
                        (0, true)
                    }
                    Err(why) => refuse(out, why),
                }
            }
            Message::Answer(a) => {
                // Nothing goes back to the answering peer either way (the reference client
                // takes no answer to its answer); a refused one is counted.
                (1, w.answer(conn, &a, ctx.now, out))
            }
            Message::Scrape(hashes) => {
                let mut files = w.scrape(&hashes);
                for (h, c) in files.iter_mut() {
                    if self.shared.access.check(&mut self.access, &h.0).is_some() {
                        *c = Default::default();
                    }
                }
                out.send(None, |b| wt::write_scrape(b, &files));
                (2, true)
            }
        }
    }
}

impl ServiceWorker for TrackerWorker {
    fn ws_upgrade(
        &mut self,
        req: &Request<'_, '_>,
        _ctx: &Context,
        conn: WsConn,
    ) -> Option<Result<WsRoute, (u16, &'static str)>> {
        self.shared.webtorrent.as_ref()?;
        let state = match self.shared.private.clone() {
            // WebSocket trackers are often named without a path (wss://tracker.example):
            // `/` too.
            None => matches!(req.path, "/announce" | "/").then(WsState::default)?,
            Some(p) => match private_route(&p, req)? {
                // The passkey is checked with each announce, which says what is wrong with
                // a `failure reason` the client shows (a refused upgrade says nothing).
                (Route::Announce, key) => WsState {
                    hashes: Default::default(),
                    passkey: Some(key.map(Box::from)),
                },
                _ => return None,
            },
        };
        self.ws.insert(conn, state);
        Some(Ok(WsRoute::default()))
    }

    fn ws_message(
        &mut self,
        conn: WsConn,
        _route: WsRoute,
        text: &[u8],
        ctx: &Context,
        out: &mut WsOut,
    ) -> (Kind, Outcome) {
        let Some(w) = self.shared.webtorrent.clone() else {
            return (Kind::OTHER, Outcome::Refused);
        };
        self.refresh();
        let (k, ok) = self.webtorrent(&w, conn, text, ctx, out);
        w.stats.messages[k][usize::from(!ok)].add(1);
        let kind = if k == 2 { WS_SCRAPE } else { WS_ANNOUNCE };
        (kind, if ok { Outcome::Ok } else { Outcome::Refused })
    }

    fn ws_closed(&mut self, conn: WsConn, _route: WsRoute) {
        if let (Some(st), Some(w)) = (self.ws.remove(&conn), &self.shared.webtorrent) {
            w.leave(conn, &st.hashes);
        }
    }

    fn http(
        &mut self,
        req: &Request<'_, '_>,
        ctx: &Context,
        resp: &mut HttpResponse,
    ) -> Option<Handled> {
        self.refresh();
        let (kind, key) = match &self.shared.private {
            None => match req.path {
                "/announce" => (ANNOUNCE, Err("")),
                "/scrape" => (SCRAPE, Err("")),
                _ => return None,
            },
            Some(p) => match private_route(p, req) {
                None => return None,
                Some((Route::Announce, key)) => (ANNOUNCE, key),
                Some((Route::Scrape, key)) => (SCRAPE, key),
            },
        };
        resp.content_type = "text/plain";
        if req.method != "GET" && req.method != "HEAD" {
            fail(resp, "use GET");
            resp.status = 405;
            return Some((kind, Outcome::Refused).into());
        }
        let result = if kind == ANNOUNCE {
            self.announce_http(req, ctx, resp, key)
        } else {
            self.scrape_http(req, ctx, resp, key)
        };
        // Failures are answered with 200 and a bencoded reason, as clients expect; the
        // request was framed correctly, so the connection stays usable.
        match result {
            Ok(()) => Some((kind, Outcome::Ok).into()),
            Err(reason) => {
                fail(resp, reason);
                Some((kind, Outcome::Refused).into())
            }
        }
    }

    /// The push API of a private tracker, `/admin/tracker…` on the admin listener.
    fn admin(
        &mut self,
        req: &Request<'_, '_>,
        ctx: &Context,
        resp: &mut HttpResponse,
    ) -> Option<Handled> {
        self.refresh();
        let p = self.shared.private.clone()?;
        if let Some(answered) = self.ocelot(&p, req, ctx, resp) {
            return Some(answered);
        }
        if let Some(answered) = self.unit3d_api(&p, req, ctx, resp) {
            return Some(answered);
        }
        if req.path != "/admin/tracker" && !req.path.starts_with("/admin/tracker/") {
            return None;
        }
        let guesses = &p.token_guesses;
        if let Err(refused) = hotpath_service::bearer(
            req,
            &p.admin_token.read(),
            "private.admin_token",
            resp,
            guesses,
            ctx,
        ) {
            return Some(refused);
        }
        let at = self.unix(ctx.now);
        let answer = push::decode(req.method, req.path, req.body).and_then(|call| match call {
            Call::Summary => Ok(self.summary(&p)),
            Call::User(id) => {
                let (key, u) = p.users.by_id(id).ok_or_else(|| ApiError {
                    status: 404,
                    message: format!("no user {id}"),
                })?;
                Ok(serde_json::json!({
                    "id": u.id,
                    "passkey": key.text().map(String::from_utf8_lossy),
                    "can_leech": u.can_leech,
                    "freeleech_until": p.policy.read().personal_until(id),
                    "leeching": p.ledger.leeching(id),
                    "leech_slots": p.slots.of(id),
                }))
            }
            Call::Torrent(id) => {
                let (hash, t) = p.torrents.by_id(id).ok_or_else(|| ApiError {
                    status: 404,
                    message: format!("no torrent {id}"),
                })?;
                let c = self.shared.swarms.scrape(&hash);
                Ok(serde_json::json!({
                    "id": t.id,
                    "info_hash": hotpath_store::table::hex(&hash),
                    "download_pct": t.download_pct,
                    "upload_pct": t.upload_pct,
                    "poster_id": t.poster,
                    "seeders": c.seeders,
                    "leechers": c.leechers,
                    "completed": c.completed,
                }))
            }
            Call::Push(ops) => {
                // In hotpath's own preset the users and torrents pushed are written into its
                // tables, journaled before the answer as everything it says is kept.
                let rows = p.registry_rows(&ops, at);
                let bytes: usize = rows.iter().map(hotpath_store::Encode::encoded_len).sum();
                if let Some(j) = self.journal.as_ref().filter(|j| !j.has_room(bytes)) {
                    return Err(ApiError {
                        status: 503,
                        message: j.refuse().to_string(),
                    });
                }
                p.push(&ops, at)?;
                if let Some(j) = &mut self.journal {
                    for r in &rows {
                        j.push(r);
                    }
                }
                Ok(serde_json::json!({ "applied": ops.len() }))
            }
        });
        Some(match answer {
            Ok(v) => {
                resp.content_type = "application/json";
                resp.body = serde_json::to_vec(&v).expect("JSON");
                resp.body.push(b'\n');
                Handled::Answered(Kind::ADMIN, Outcome::Ok)
            }
            Err(e) => admin_error(resp, e.status, &e.message),
        })
    }

    fn udp(&mut self, packet: &[u8], ctx: &Context, out: &mut Vec<u8>) -> (Kind, Outcome) {
        self.refresh();
        let len = packet.len();
        match udp::parse_request(packet) {
            Err(udp::ParseError::Drop) => (Kind::OTHER, Outcome::Dropped),
            Err(udp::ParseError::Error {
                transaction_id,
                message,
            }) => {
                udp::write_error(out, transaction_id, message, len);
                (Kind::OTHER, Outcome::Refused)
            }
            Ok(udp::Request::Connect { transaction_id }) => {
                let ip = ctx.peer.ip().to_canonical();
                let id = self.shared.conn_ids.issue(ip, self.unix(ctx.now));
                udp::write_connect(out, transaction_id, id);
                (CONNECT, Outcome::Ok)
            }
            Ok(udp::Request::Announce(r)) => (ANNOUNCE, self.announce_udp(&r, ctx, out, len)),
            Ok(udp::Request::Scrape {
                connection_id,
                transaction_id,
                info_hashes,
            }) => {
                let ip = ctx.peer.ip().to_canonical();
                if !self
                    .shared
                    .conn_ids
                    .check(connection_id, ip, self.unix(ctx.now))
                {
                    return (SCRAPE, self.bad_connection_id(transaction_id, out, len));
                }
                udp::write_scrape_head(out, transaction_id);
                for hash in info_hashes.chunks_exact(20) {
                    let hash: Id20 = hash.try_into().expect("20 bytes");
                    let hidden = self
                        .shared
                        .private
                        .as_ref()
                        .is_some_and(|p| !p.scrapable(&hash));
                    let c = if hidden || self.shared.access.check(&mut self.access, &hash).is_some()
                    {
                        Counts::default()
                    } else {
                        self.shared.swarms.scrape(&hash)
                    };
                    udp::write_scrape_entry(out, c.seeders, c.completed, c.leechers);
                }
                (SCRAPE, Outcome::Ok)
            }
        }
    }

    fn uncommitted(&self) -> bool {
        self.journal
            .as_ref()
            .is_some_and(JournalWriter::uncommitted)
    }

    fn commit(&mut self) -> bool {
        self.journal.as_mut().is_none_or(|j| j.commit().is_ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forwarded_takes_the_last_entry() {
        assert_eq!(
            forwarded_ip(b"203.0.113.9, 10.0.0.1"),
            Some("10.0.0.1".parse().unwrap())
        );
        assert_eq!(
            forwarded_ip(b"::ffff:1.2.3.4"),
            Some("1.2.3.4".parse().unwrap())
        );
        assert_eq!(
            forwarded_ip(b"[2001:db8::1]:80"),
            Some("2001:db8::1".parse().unwrap())
        );
        assert_eq!(forwarded_ip(b"nonsense"), None);
    }
}
