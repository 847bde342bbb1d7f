//! WebTorrent swarms: peers on WebSocket connections, which the tracker introduces to each
//! other by relaying WebRTC offers and answers (it never hands out addresses). A swarm is
//! one for IPv4 and IPv6 (WebRTC does not care which the tracker saw), kept apart from the
//! BitTorrent swarms of the same info hash (a browser cannot reach a TCP or UDP peer).
//!
//! An offer goes to a randomly chosen peer of the swarm (never its sender; a seeder's only
//! to leechers) and is remembered for `offer_lifetime_secs` under (offer id, the peer it
//! went to): an answer is relayed only from that peer, only to the offer's sender, only once.
//! Every map here is bounded ([`WebTorrentConfig`]); every bound hit is counted.

use hashbrown::HashMap;
use hotpath_config::WebTorrentConfig;
use hotpath_metrics::{Counter, Desc, Samples};
use hotpath_service::{WsConn, WsOut};
use hotpath_wire::webtorrent::{self as wt, Announce, Answer, Counts, Event, Id};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

const SHARDS: usize = 64;

#[derive(Debug, Clone, Copy)]
struct Peer {
    conn: WsConn,
    id: [u8; 20],
    seeder: bool,
    /// Process second of its last announce.
    last: u32,
    /// Its offers waiting for an answer.
    pending: u32,
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    from: WsConn,
    from_peer: [u8; 20],
    expires: u32,
}

#[derive(Default)]
struct Swarm {
    peers: Vec<Peer>,
    seeders: u32,
    completed: u32,
    /// Offers sent and not yet answered, by (offer id, the connection it went to).
    offers: HashMap<([u8; 20], WsConn), Pending>,
}

impl Swarm {
    fn counts(&self) -> Counts {
        let seeders = u64::from(self.seeders);
        Counts {
            complete: seeders,
            incomplete: (self.peers.len() as u64).saturating_sub(seeders),
            downloaded: u64::from(self.completed),
        }
    }

    fn position(&self, conn: WsConn) -> Option<usize> {
        self.peers.iter().position(|p| p.conn == conn)
    }

    fn remove(&mut self, i: usize) {
        let p = self.peers.swap_remove(i);
        if p.seeder {
            self.seeders -= 1;
        }
    }
}

#[derive(Default)]
struct Shard {
    swarms: HashMap<[u8; 20], Swarm>,
}

/// Counters of the WebTorrent tracker.
#[derive(Debug, Default)]
pub struct WtStats {
    /// Messages by kind and result: [announce, answer, scrape, invalid] x [ok, refused].
    pub messages: [[Counter; 2]; 4],
    /// Offers relayed.
    pub offers_relayed: Counter,
    /// Offers dropped: [over max_offers_per_announce or numwant, no peer to take them,
    /// over max_pending_offers_per_peer, the sender's swarm full, an offer id taken].
    pub offers_dropped: [Counter; 5],
    /// Answers relayed.
    pub answers_relayed: Counter,
    /// Answers refused: no such offer to this peer, expired, or naming another sender.
    pub answers_without_offer: Counter,
    /// Offers expired unanswered.
    pub offers_expired: Counter,
    /// Peers expired (silent past the peer timeout).
    pub peers_expired: Counter,
    /// Bounds hit: [max_swarms, max_peers_per_swarm, max_swarms_per_connection,
    /// max_sdp_bytes].
    pub caps: [Counter; 4],
}

/// The message kinds counted, in [`WtStats::messages`]' order.
pub const KINDS: [&str; 4] = ["announce", "answer", "scrape", "invalid"];
const DROP_REASONS: [&str; 5] = [
    "max_offers_per_announce",
    "no_peer",
    "max_pending_offers_per_peer",
    "max_peers_per_swarm",
    "offer_id_taken",
];
const CAPS: [&str; 4] = [
    "max_swarms",
    "max_peers_per_swarm",
    "max_swarms_per_connection",
    "max_sdp_bytes",
];

/// Index of a cap in [`WtStats::caps`].
pub const CAP_SWARMS_PER_CONNECTION: usize = 2;

mod m {
    use super::Desc;
    pub static SWARMS: Desc = Desc::gauge(
        "hotpath_webtorrent_swarms",
        "WebTorrent swarms (torrents with WebSocket peers).",
    );
    pub static PEERS: Desc =
        Desc::gauge("hotpath_webtorrent_peers", "WebTorrent peers (WebSocket).");
    pub static SEEDERS: Desc =
        Desc::gauge("hotpath_webtorrent_seeders", "WebTorrent peers that seed.");
    pub static PENDING: Desc = Desc::gauge(
        "hotpath_webtorrent_pending_offers",
        "Offers relayed and waiting for their answer.",
    );
    pub static MESSAGES: Desc = Desc::counter(
        "hotpath_webtorrent_messages_total",
        "WebTorrent messages handled, by kind and result.",
    )
    .labels(&["kind", "result"]);
    pub static OFFERS: Desc = Desc::counter(
        "hotpath_webtorrent_offers_relayed_total",
        "Offers relayed to a peer.",
    );
    pub static OFFERS_DROPPED: Desc = Desc::counter(
        "hotpath_webtorrent_offers_dropped_total",
        "Offers not relayed, by reason.",
    )
    .labels(&["reason"]);
    pub static ANSWERS: Desc = Desc::counter(
        "hotpath_webtorrent_answers_relayed_total",
        "Answers relayed to the peer whose offer they answer.",
    );
    pub static ANSWERS_WITHOUT_OFFER: Desc = Desc::counter(
        "hotpath_webtorrent_answers_without_offer_total",
        "Answers refused: no offer went from the named peer to the answering one, or it \
         expired.",
    );
    pub static OFFERS_EXPIRED: Desc = Desc::counter(
        "hotpath_webtorrent_offers_expired_total",
        "Offers that expired unanswered.",
    );
    pub static PEERS_EXPIRED: Desc = Desc::counter(
        "hotpath_webtorrent_peers_expired_total",
        "WebTorrent peers dropped after the peer timeout without an announce.",
    );
    pub static CAP_HITS: Desc = Desc::counter(
        "hotpath_webtorrent_cap_hits_total",
        "Times a WebTorrent bound was met.",
    )
    .labels(&["cap"]);
}

/// What an announce did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Announced {
    /// The swarm's counts after it.
    pub counts: Counts,
    /// Whether the connection is now in this swarm (false after `stopped`).
    pub joined: bool,
    /// Whether it completed a download (a `completed` of a peer not seeding before).
    pub snatched: bool,
}

/// Every WebTorrent swarm, shared by the workers.
pub struct WebTorrent {
    cfg: WebTorrentConfig,
    shards: Box<[Mutex<Shard>]>,
    swarms: AtomicUsize,
    /// Its counters.
    pub stats: WtStats,
}

fn shard_of(h: &[u8; 20]) -> usize {
    usize::from(h[0]) % SHARDS
}

impl WebTorrent {
    /// Empty swarms with the bounds of `cfg`.
    pub fn new(cfg: &WebTorrentConfig) -> WebTorrent {
        WebTorrent {
            cfg: cfg.clone(),
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            swarms: AtomicUsize::new(0),
            stats: WtStats::default(),
        }
    }

    /// The settings.
    pub fn config(&self) -> &WebTorrentConfig {
        &self.cfg
    }

    /// Takes an announce of `conn` at process second `now`: the offers it carries go into
    /// `out` for the chosen peers; the caller answers the sender with the counts.
    pub fn announce(
        &self,
        conn: WsConn,
        a: &Announce<'_>,
        now: u32,
        rng: &mut fastrand::Rng,
        out: &mut WsOut,
    ) -> Result<Announced, &'static str> {
        let st = &self.stats;
        if a.offers
            .iter()
            .any(|o| o.offer.sdp.len() > self.cfg.max_sdp_bytes)
        {
            st.caps[3].add(1);
            return Err("offer too long (webtorrent.max_sdp_bytes)");
        }
        let mut shard = self.shards[shard_of(&a.info_hash.0)].lock();
        let shard = &mut *shard;
        if a.event == Event::Stopped {
            let Some(swarm) = shard.swarms.get_mut(&a.info_hash.0) else {
                return Ok(Announced {
                    counts: Counts::default(),
                    joined: false,
                    snatched: false,
                });
            };
            if let Some(i) = swarm.position(conn) {
                swarm.remove(i);
            }
            let counts = swarm.counts();
            if swarm.peers.is_empty() && swarm.offers.is_empty() {
                shard.swarms.remove(&a.info_hash.0);
                self.swarms.fetch_sub(1, Ordering::Relaxed);
            }
            return Ok(Announced {
                counts,
                joined: false,
                snatched: false,
            });
        }
        let swarm = match shard.swarms.get_mut(&a.info_hash.0) {
            Some(s) => s,
            None => {
                if self.swarms.load(Ordering::Relaxed) >= self.cfg.max_swarms {
                    st.caps[0].add(1);
                    return Err("tracker full: too many torrents");
                }
                self.swarms.fetch_add(1, Ordering::Relaxed);
                shard.swarms.entry(a.info_hash.0).or_default()
            }
        };
        // BEP 21, as over HTTP: a partial seed (`paused`) wants nothing, so it is offered to as a
        // seeder would be: not by other seeders.
        let seeder = a.left == Some(0) || matches!(a.event, Event::Completed | Event::Paused);
        let mut snatched = false;
        let i = match swarm.position(conn) {
            Some(i) => {
                let p = &mut swarm.peers[i];
                if a.event == Event::Completed && !p.seeder {
                    swarm.completed = swarm.completed.saturating_add(1);
                    snatched = true;
                }
                if p.seeder != seeder {
                    if seeder {
                        swarm.seeders += 1;
                    } else {
                        swarm.seeders -= 1;
                    }
                }
                p.seeder = seeder;
                p.id = a.peer_id.0;
                p.last = now;
                i
            }
            None if swarm.peers.len() >= self.cfg.max_peers_per_swarm => {
                // Full: answered with the counts, but neither kept nor offered to, and its
                // offers go nowhere (nothing is kept of it, so a flood of new peers into a
                // full swarm costs no memory).
                st.caps[1].add(1);
                st.offers_dropped[3].add(a.offers.len() as u64);
                return Ok(Announced {
                    counts: swarm.counts(),
                    joined: false,
                    snatched: false,
                });
            }
            None => {
                if a.event == Event::Completed {
                    swarm.completed = swarm.completed.saturating_add(1);
                    snatched = true;
                }
                if seeder {
                    swarm.seeders += 1;
                }
                swarm.peers.push(Peer {
                    conn,
                    id: a.peer_id.0,
                    seeder,
                    last: now,
                    pending: 0,
                });
                swarm.peers.len() - 1
            }
        };
        self.relay_offers(swarm, i, a, now, rng, out);
        Ok(Announced {
            counts: swarm.counts(),
            joined: true,
            snatched,
        })
    }

    /// Sends the announce's offers to peers chosen at random.
    fn relay_offers(
        &self,
        swarm: &mut Swarm,
        sender: usize,
        a: &Announce<'_>,
        now: u32,
        rng: &mut fastrand::Rng,
        out: &mut WsOut,
    ) {
        let st = &self.stats;
        if a.offers.is_empty() {
            return;
        }
        let me = swarm.peers[sender];
        let wanted = a
            .numwant
            .map_or(usize::MAX, |n| n.min(usize::MAX as u64) as usize);
        let mut n = a
            .offers
            .len()
            .min(self.cfg.max_offers_per_announce)
            .min(wanted);
        st.offers_dropped[0].add((a.offers.len() - n) as u64);
        let room = self
            .cfg
            .max_pending_offers_per_peer
            .saturating_sub(me.pending as usize);
        if n > room {
            st.offers_dropped[2].add((n - room) as u64);
            n = room;
        }
        // The peers that may take an offer: not the sender, and only leechers for a seeder.
        let eligible = |p: &Peer| p.conn != me.conn && !(me.seeder && p.seeder);
        let candidates = swarm.peers.iter().filter(|p| eligible(p)).count();
        let chosen = pick(&swarm.peers, candidates, n, eligible, rng);
        st.offers_dropped[1].add((n - chosen.len()) as u64);
        let expires = now.saturating_add(self.cfg.offer_lifetime_secs);
        let mut sent = 0u32;
        for (offer, &target) in a.offers.iter().zip(chosen.iter()) {
            let to = swarm.peers[target].conn;
            let key = (offer.offer_id.0, to);
            match swarm.offers.get(&key) {
                Some(old) if old.from != me.conn && old.expires >= now => {
                    st.offers_dropped[4].add(1);
                    continue;
                }
                _ => {}
            }
            swarm.offers.insert(
                key,
                Pending {
                    from: me.conn,
                    from_peer: a.peer_id.0,
                    expires,
                },
            );
            out.send(Some(to), |b| {
                wt::write_offer(b, &a.info_hash, &a.peer_id, &offer.offer_id, &offer.offer)
            });
            sent += 1;
        }
        swarm.peers[sender].pending += sent;
        st.offers_relayed.add(u64::from(sent));
    }

    /// Relays an answer of `conn` to the peer whose offer it answers, if that offer went to
    /// `conn`, names that peer and has not expired; false (counted) otherwise.
    pub fn answer(&self, conn: WsConn, a: &Answer<'_>, now: u32, out: &mut WsOut) -> bool {
        if a.answer.sdp.len() > self.cfg.max_sdp_bytes {
            self.stats.caps[3].add(1);
            self.stats.answers_without_offer.add(1);
            return false;
        }
        let mut shard = self.shards[shard_of(&a.info_hash.0)].lock();
        let Some(swarm) = shard.swarms.get_mut(&a.info_hash.0) else {
            self.stats.answers_without_offer.add(1);
            return false;
        };
        let key = (a.offer_id.0, conn);
        let ok = match swarm.offers.get(&key) {
            Some(p) => p.from_peer == a.to_peer_id.0 && p.expires >= now,
            None => false,
        };
        if !ok {
            self.stats.answers_without_offer.add(1);
            return false;
        }
        let Some(p) = swarm.offers.remove(&key) else {
            return false;
        };
        if let Some(i) = swarm.position(p.from) {
            let q = &mut swarm.peers[i];
            q.pending = q.pending.saturating_sub(1);
        }
        out.send(Some(p.from), |b| wt::write_answer(b, a));
        self.stats.answers_relayed.add(1);
        true
    }

    /// The counts of each hash (zeros for unknown ones).
    pub fn scrape(&self, hashes: &[Id]) -> Vec<(Id, Counts)> {
        hashes
            .iter()
            .map(|h| {
                let shard = self.shards[shard_of(&h.0)].lock();
                (
                    *h,
                    shard
                        .swarms
                        .get(&h.0)
                        .map(Swarm::counts)
                        .unwrap_or_default(),
                )
            })
            .collect()
    }

    /// Connection `conn` closed: it leaves the swarms of `hashes`.
    pub fn leave(&self, conn: WsConn, hashes: &[[u8; 20]]) {
        for h in hashes {
            let mut shard = self.shards[shard_of(h)].lock();
            let Some(swarm) = shard.swarms.get_mut(h) else {
                continue;
            };
            if let Some(i) = swarm.position(conn) {
                swarm.remove(i);
            }
            if swarm.peers.is_empty() && swarm.offers.is_empty() {
                shard.swarms.remove(h);
                self.swarms.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// Expires offers past their lifetime and peers silent for `peer_timeout` seconds, at
    /// process second `now`; frees empty swarms. Returns the peers expired, with their
    /// connections and swarms (their connections forget those swarms).
    pub fn sweep(&self, now: u32, peer_timeout: u32) -> Vec<(WsConn, [u8; 20])> {
        let mut gone = Vec::new();
        for shard in self.shards.iter() {
            let mut shard = shard.lock();
            let mut freed = 0;
            shard.swarms.retain(|hash, swarm| {
                let mut expired = Vec::new();
                swarm.offers.retain(|_, p| {
                    let keep = p.expires >= now;
                    if !keep {
                        expired.push(p.from);
                    }
                    keep
                });
                self.stats.offers_expired.add(expired.len() as u64);
                for from in expired {
                    if let Some(i) = swarm.position(from) {
                        let q = &mut swarm.peers[i];
                        q.pending = q.pending.saturating_sub(1);
                    }
                }
                let mut i = 0;
                while i < swarm.peers.len() {
                    if now.saturating_sub(swarm.peers[i].last) > peer_timeout {
                        gone.push((swarm.peers[i].conn, *hash));
                        swarm.remove(i);
                        self.stats.peers_expired.add(1);
                    } else {
                        i += 1;
                    }
                }
                let keep = !(swarm.peers.is_empty() && swarm.offers.is_empty());
                if !keep {
                    freed += 1;
                }
                keep
            });
            self.swarms.fetch_sub(freed, Ordering::Relaxed);
        }
        gone
    }

    /// (swarms, peers, seeders, pending offers).
    pub fn totals(&self) -> (u64, u64, u64, u64) {
        let (mut peers, mut seeders, mut pending) = (0u64, 0u64, 0u64);
        for shard in self.shards.iter() {
            let shard = shard.lock();
            for s in shard.swarms.values() {
                peers += s.peers.len() as u64;
                seeders += u64::from(s.seeders);
                pending += s.offers.len() as u64;
            }
        }
        (
            self.swarms.load(Ordering::Relaxed) as u64,
            peers,
            seeders,
            pending,
        )
    }

    /// Adds its metrics to a scrape.
    pub fn collect(&self, out: &mut Samples) {
        let (swarms, peers, seeders, pending) = self.totals();
        let st = &self.stats;
        out.section("webtorrent")
            .add(&m::SWARMS, swarms)
            .add(&m::PEERS, peers)
            .add(&m::SEEDERS, seeders)
            .add(&m::PENDING, pending)
            .add(&m::OFFERS, st.offers_relayed.get())
            .add(&m::ANSWERS, st.answers_relayed.get())
            .add(&m::ANSWERS_WITHOUT_OFFER, st.answers_without_offer.get())
            .add(&m::OFFERS_EXPIRED, st.offers_expired.get())
            .add(&m::PEERS_EXPIRED, st.peers_expired.get());
        for (k, kind) in KINDS.iter().enumerate() {
            for (r, result) in ["ok", "refused"].iter().enumerate() {
                out.labeled(&m::MESSAGES, &[kind, result], st.messages[k][r].get());
            }
        }
        for (reason, c) in DROP_REASONS.iter().zip(&st.offers_dropped) {
            out.labeled(&m::OFFERS_DROPPED, &[reason], c.get());
        }
        for (cap, c) in CAPS.iter().zip(&st.caps) {
            out.labeled(&m::CAP_HITS, &[cap], c.get());
        }
    }
}

/// Up to `n` distinct indexes of `peers` for which `ok` holds, chosen at random; `candidates`
/// is how many there are.
fn pick(
    peers: &[Peer],
    candidates: usize,
    n: usize,
    ok: impl Fn(&Peer) -> bool,
    rng: &mut fastrand::Rng,
) -> Vec<usize> {
    if n == 0 || candidates == 0 {
        return Vec::new();
    }
    if candidates <= 2 * n {
        // Few: all of them, shuffled, the first n.
        let mut all: Vec<usize> = (0..peers.len()).filter(|&i| ok(&peers[i])).collect();
        rng.shuffle(&mut all);
        all.truncate(n);
        return all;
    }
    // Many: random draws (at least half of them qualify, so few are wasted).
    let mut chosen = Vec::with_capacity(n);
    let mut tries = 0;
    while chosen.len() < n && tries < 8 * n + 16 {
        tries += 1;
        let i = rng.usize(..peers.len());
        if ok(&peers[i]) && !chosen.contains(&i) {
            chosen.push(i);
        }
    }
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;
    use hotpath_wire::webtorrent::{Offer, Sdp};
    use std::borrow::Cow;

    fn conn(n: u32) -> WsConn {
        WsConn {
            worker: 0,
            slot: n,
            serial: n,
        }
    }

    fn id(n: u8) -> Id {
        Id([n; 20])
    }

    fn announce<'a>(peer: u8, left: u64, offers: &[u8], event: Event) -> Announce<'a> {
        Announce {
            info_hash: id(200),
            peer_id: id(peer),
            numwant: None,
            uploaded: None,
            downloaded: None,
            left: Some(left),
            event,
            offers: offers
                .iter()
                .map(|&o| Offer {
                    offer_id: id(o),
                    offer: Sdp {
                        kind: Cow::Borrowed("offer"),
                        sdp: Cow::Borrowed("v=0"),
                    },
                })
                .collect(),
        }
    }

    /// An announce of peer `n` on connection `n` at `now`, which must be taken.
    #[allow(clippy::too_many_arguments)]
    fn go(
        w: &WebTorrent,
        n: u8,
        left: u64,
        offers: &[u8],
        event: Event,
        now: u32,
        rng: &mut fastrand::Rng,
        out: &mut WsOut,
    ) -> Announced {
        w.announce(
            conn(u32::from(n)),
            &announce(n, left, offers, event),
            now,
            rng,
            out,
        )
        .unwrap()
    }

    fn targets(out: &WsOut) -> Vec<WsConn> {
        out.messages().filter_map(|(to, _)| to).collect()
    }

    #[test]
    fn offers_go_to_others_and_seeders_only_to_leechers() {
        let w = WebTorrent::new(&WebTorrentConfig::default());
        let mut rng = fastrand::Rng::with_seed(1);
        let mut out = WsOut::default();
        // Two seeders, one leecher.
        go(&w, 1, 0, &[], Event::Started, 0, &mut rng, &mut out);
        go(&w, 2, 0, &[], Event::Started, 0, &mut rng, &mut out);
        go(&w, 3, 9, &[], Event::Started, 0, &mut rng, &mut out);
        assert!(out.sends.is_empty());
        // A seeder's offers: to the leecher only.
        let r = go(&w, 1, 0, &[10, 11, 12], Event::None, 1, &mut rng, &mut out);
        assert_eq!(targets(&out), vec![conn(3)]);
        assert_eq!((r.counts.complete, r.counts.incomplete), (2, 1));
        assert_eq!(w.stats.offers_dropped[1].get(), 2);
        out.clear();
        // A leecher's offers: to both seeders, never itself.
        go(
            &w,
            3,
            9,
            &[20, 21, 22, 23],
            Event::None,
            1,
            &mut rng,
            &mut out,
        );
        let mut t = targets(&out);
        t.sort();
        assert_eq!(t, vec![conn(1), conn(2)]);
    }

    #[test]
    fn an_answer_goes_only_to_the_offerer_only_from_the_offered_peer_and_only_in_time() {
        let cfg = WebTorrentConfig {
            offer_lifetime_secs: 10,
            ..Default::default()
        };
        let w = WebTorrent::new(&cfg);
        let mut rng = fastrand::Rng::with_seed(2);
        let mut out = WsOut::default();
        go(&w, 1, 0, &[], Event::Started, 0, &mut rng, &mut out);
        go(&w, 2, 5, &[7], Event::Started, 0, &mut rng, &mut out);
        assert_eq!(targets(&out), vec![conn(1)]);
        out.clear();
        let answer = |to: u8, offer: u8| Answer {
            info_hash: id(200),
            peer_id: id(1),
            to_peer_id: id(to),
            offer_id: id(offer),
            answer: Sdp {
                kind: Cow::Borrowed("answer"),
                sdp: Cow::Borrowed("v=0"),
            },
        };
        // From a connection the offer did not go to: refused.
        assert!(!w.answer(conn(3), &answer(2, 7), 1, &mut out));
        // Naming another offerer, or another offer: refused.
        assert!(!w.answer(conn(1), &answer(9, 7), 1, &mut out));
        assert!(!w.answer(conn(1), &answer(2, 8), 1, &mut out));
        assert!(out.sends.is_empty());
        // The right one: relayed to the offerer, once.
        assert!(w.answer(conn(1), &answer(2, 7), 1, &mut out));
        assert_eq!(targets(&out), vec![conn(2)]);
        assert!(!w.answer(conn(1), &answer(2, 7), 1, &mut out));
        // An offer past its lifetime is not answered, and the sweep drops it.
        out.clear();
        go(&w, 2, 5, &[8], Event::None, 2, &mut rng, &mut out);
        assert!(!w.answer(conn(1), &answer(2, 8), 13, &mut out));
        assert_eq!(w.totals().3, 1);
        w.sweep(13, 1000);
        assert_eq!(w.totals().3, 0);
        assert_eq!(w.stats.answers_without_offer.get(), 5);
    }

    #[test]
    fn bounds_hold_and_are_counted() {
        let cfg = WebTorrentConfig {
            max_offers_per_announce: 2,
            max_pending_offers_per_peer: 3,
            max_peers_per_swarm: 3,
            max_swarms: 1,
            max_sdp_bytes: 256,
            ..Default::default()
        };
        let w = WebTorrent::new(&cfg);
        let mut rng = fastrand::Rng::with_seed(3);
        let mut out = WsOut::default();
        for p in 1..=5 {
            go(&w, p, 0, &[], Event::Started, 0, &mut rng, &mut out);
        }
        // Peers past the swarm's bound are not kept, nor counted, and their offers go nowhere.
        assert_eq!(w.totals().1, 3);
        assert_eq!(w.stats.caps[1].get(), 2);
        let r = go(&w, 5, 9, &[1], Event::None, 0, &mut rng, &mut out);
        assert!(!r.joined);
        assert_eq!(r.counts.complete + r.counts.incomplete, 3);
        assert_eq!(w.stats.offers_dropped[3].get(), 1);
        assert_eq!(w.stats.caps[1].get(), 3);
        assert!(out.sends.is_empty());
        // Two of five offers per announce; pending capped at three.
        let mut leech = announce(1, 9, &[1, 2, 3, 4, 5], Event::None);
        w.announce(conn(1), &leech, 0, &mut rng, &mut out).unwrap();
        assert_eq!(out.sends.len(), 2);
        leech.offers.truncate(2);
        leech.offers[0].offer_id = id(30);
        leech.offers[1].offer_id = id(31);
        out.clear();
        w.announce(conn(1), &leech, 0, &mut rng, &mut out).unwrap();
        assert_eq!(out.sends.len(), 1);
        assert_eq!(w.stats.offers_dropped[2].get(), 1);
        // A second swarm: over max_swarms.
        let mut other = announce(1, 0, &[], Event::Started);
        other.info_hash = id(201);
        assert!(w.announce(conn(1), &other, 0, &mut rng, &mut out).is_err());
        // A long SDP.
        let mut long = announce(2, 0, &[9], Event::None);
        long.offers[0].offer.sdp = Cow::Owned("x".repeat(300));
        assert!(w.announce(conn(2), &long, 0, &mut rng, &mut out).is_err());
        assert_eq!(w.stats.caps[0].get(), 1);
        assert_eq!(w.stats.caps[3].get(), 1);
    }

    #[test]
    fn leaving_stopping_and_expiring_free_the_swarm() {
        let w = WebTorrent::new(&WebTorrentConfig::default());
        let mut rng = fastrand::Rng::with_seed(4);
        let mut out = WsOut::default();
        go(&w, 1, 5, &[], Event::Started, 0, &mut rng, &mut out);
        go(&w, 2, 5, &[], Event::Started, 0, &mut rng, &mut out);
        let r = go(&w, 2, 0, &[], Event::Completed, 1, &mut rng, &mut out);
        assert_eq!(
            r.counts,
            Counts {
                complete: 1,
                incomplete: 1,
                downloaded: 1
            }
        );
        let r = go(&w, 1, 5, &[], Event::Stopped, 1, &mut rng, &mut out);
        assert!(!r.joined);
        assert_eq!(r.counts.incomplete, 0);
        go(&w, 3, 5, &[], Event::Started, 50, &mut rng, &mut out);
        let gone = w.sweep(100, 60);
        assert_eq!(gone, vec![(conn(2), [200; 20])]);
        w.leave(conn(3), &[[200; 20]]);
        assert_eq!(w.totals(), (0, 0, 0, 0));
    }
}
