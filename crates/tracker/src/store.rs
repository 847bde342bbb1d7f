//! Operations on the swarm table, behind one object-safe trait so the tracker can pick the
//! record layout (with or without peer ids) at start-up and the handlers stay non-generic.

use std::sync::atomic::{AtomicUsize, Ordering};

use hashbrown::hash_map::Entry;

use hotpath_wire::query::{Event, Id20};

use crate::swarm::{Change, Record, Swarms, Torrent};

/// The counts a tracker reports for a torrent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Seeders (`complete`).
    pub seeders: u32,
    /// Leechers (`incomplete`).
    pub leechers: u32,
    /// Completed downloads (`downloaded`).
    pub completed: u32,
}

/// One announce, after parsing and address resolution.
#[derive(Debug, Clone)]
pub struct PeerAnnounce {
    /// The torrent.
    pub info_hash: Id20,
    /// The peer id.
    pub peer_id: Id20,
    /// The announcing address: IPv4 (6 bytes) ...
    pub v4: Option<[u8; 6]>,
    /// ... and/or IPv6 (18 bytes; also from BEP 7's `ipv6=`).
    pub v6: Option<[u8; 18]>,
    /// Seeder (left=0, or a BEP 21 partial seed).
    pub seeder: bool,
    /// The download is complete (left=0).
    pub complete: bool,
    /// The event.
    pub event: Event,
    /// Peers wanted (already capped).
    pub want: usize,
    /// Whether IPv4 peers are wanted.
    pub want_v4: bool,
    /// Whether IPv6 peers are wanted.
    pub want_v6: bool,
}

/// The peers picked for an answer, as compact bytes, with their ids when kept and wanted.
#[derive(Debug, Default)]
pub struct Selection {
    /// IPv4 peers, 6 bytes each.
    pub v4: Vec<u8>,
    /// IPv6 peers, 18 bytes each.
    pub v6: Vec<u8>,
    /// Peer ids in the order of `v4` then `v6`; empty when ids are not kept or not wanted.
    pub ids: Vec<Id20>,
    /// Whether to fill `ids`.
    pub with_ids: bool,
}

impl Selection {
    /// Empties the selection for the next request.
    pub fn clear(&mut self) {
        self.v4.clear();
        self.v6.clear();
        self.ids.clear();
    }
}

/// Caps applied on announce.
#[derive(Debug, Clone, Copy)]
pub struct Caps {
    /// Most torrents (0 = no cap).
    pub max_torrents: usize,
    /// Most peers per torrent and family (0 = no cap).
    pub max_peers_per_torrent: usize,
}

/// Totals over all shards.
#[derive(Debug, Clone, Copy, Default)]
pub struct Totals {
    /// Torrents.
    pub torrents: usize,
    /// Peers.
    pub peers: usize,
    /// Seeders.
    pub seeders: usize,
}

/// The swarm table, whatever its record layout.
pub trait Store: Send + Sync {
    /// Applies an announce and fills `sel`; returns the torrent's counts and whether this
    /// announce completed a download (a snatch). The error is a failure reason.
    fn announce(
        &self,
        a: &PeerAnnounce,
        now: u16,
        rng: &mut fastrand::Rng,
        sel: &mut Selection,
    ) -> Result<(Counts, bool), &'static str>;

    /// Sets a torrent's completed count (loaded from the database at start), creating the
    /// torrent if needed; torrents with downloads on record are kept when their swarm empties.
    fn restore_completed(&self, info_hash: &Id20, completed: u32);

    /// The counts of one torrent (zeros when unknown).
    fn scrape(&self, info_hash: &Id20) -> Counts;

    /// Calls `each` for every torrent, one shard locked at a time.
    fn for_each(&self, each: &mut dyn FnMut(&Id20, Counts));

    /// Expires peers older than `timeout` in shard `i`; returns (peers dropped, torrents freed).
    fn sweep(&self, i: usize, now: u16, timeout: u16) -> (usize, usize);

    /// Number of shards.
    fn shards(&self) -> usize;

    /// Totals over all shards.
    fn totals(&self) -> Totals;

    /// Bytes of peer id each saved peer carries (0 or 20).
    fn id_len(&self) -> usize;

    /// Appends every swarm with peers to `out` in the snapshot format of [`crate::persist`],
    /// one shard locked at a time; returns (torrents, peers) saved.
    fn save(&self, now: u16, out: &mut Vec<u8>) -> (usize, usize);

    /// Adds the swarms of a snapshot body whose peers carry `id_len` id bytes, each peer aged
    /// by `downtime` more seconds; peers older than `timeout` are left out. Returns (torrents,
    /// peers) restored, or what is wrong with the body.
    fn load(
        &self,
        body: &[u8],
        id_len: usize,
        now: u16,
        downtime: u32,
        timeout: u16,
    ) -> Result<(usize, usize), &'static str>;
}

/// Appends one peer set's records: address, age in seconds, seeder flag, peer id if kept.
fn put_records<const A: usize, const I: usize>(
    out: &mut Vec<u8>,
    (records, seeders): (&[Record<A, I>], u32),
    now: u16,
) {
    for (i, r) in records.iter().enumerate() {
        out.extend_from_slice(r.addr());
        out.extend_from_slice(&now.wrapping_sub(r.seen()).to_le_bytes());
        out.push(u8::from((i as u32) < seeders));
        if let Some(id) = r.peer_id() {
            out.extend_from_slice(id);
        }
    }
}

/// Reads a snapshot body front to back.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], &'static str> {
        if self.0.len() < n {
            return Err("the swarm snapshot is cut short");
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u32(&mut self) -> Result<u32, &'static str> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
}

/// One saved peer: its address, whether it seeds, its id (zeros when not saved) and its age.
struct SavedPeer<const A: usize> {
    addr: [u8; A],
    seeder: bool,
    id: Id20,
    age: u16,
}

fn read_peer<const A: usize>(
    r: &mut Reader<'_>,
    id_len: usize,
) -> Result<SavedPeer<A>, &'static str> {
    let addr: [u8; A] = r.take(A)?.try_into().expect("A bytes");
    let age = u16::from_le_bytes(r.take(2)?.try_into().expect("2 bytes"));
    let seeder = r.take(1)?[0] != 0;
    let mut id = [0u8; 20];
    id[..id_len].copy_from_slice(r.take(id_len)?);
    Ok(SavedPeer {
        addr,
        seeder,
        id,
        age,
    })
}

/// [`Swarms`] with the global torrent count used by the torrent cap.
pub struct Table<const I: usize> {
    swarms: Swarms<I>,
    torrents: AtomicUsize,
    caps: Caps,
}

impl<const I: usize> Table<I> {
    /// An empty table.
    pub fn new(shards: usize, caps: Caps) -> Self {
        Self {
            swarms: Swarms::new(shards),
            torrents: AtomicUsize::new(0),
            caps,
        }
    }
}

fn counts<const I: usize>(t: &Torrent<I>) -> Counts {
    Counts {
        seeders: t.seeders(),
        leechers: t.leechers(),
        completed: t.completed,
    }
}

impl<const I: usize> Store for Table<I> {
    fn announce(
        &self,
        a: &PeerAnnounce,
        now: u16,
        rng: &mut fastrand::Rng,
        sel: &mut Selection,
    ) -> Result<(Counts, bool), &'static str> {
        let stopped = a.event == Event::Stopped;
        let mut guard = self.swarms.shard(&a.info_hash).lock();
        let shard = &mut *guard;
        // One hash lookup whether the torrent is known or new.
        let t = match shard.torrents.entry(a.info_hash) {
            Entry::Occupied(o) => o.into_mut(),
            Entry::Vacant(v) => {
                if stopped {
                    return Ok((Counts::default(), false));
                }
                let cap = self.caps.max_torrents;
                if cap != 0 && self.torrents.load(Ordering::Relaxed) >= cap {
                    return Err("tracker is full: it tracks as many torrents as it may");
                }
                self.torrents.fetch_add(1, Ordering::Relaxed);
                v.insert(Torrent::default())
            }
        };
        let (s0, p0) = (t.seeders(), t.seeders() + t.leechers());
        let max = self.caps.max_peers_per_torrent;
        // A snatch is counted once per download: when a peer known as a leecher reports
        // left=0 (whatever its event: some clients go straight to `stopped`), or when a peer
        // the tracker did not know announces `completed`.
        let snatch = |change: Change, was_seeder: bool| match change {
            Change::Updated | Change::Removed => a.complete && !was_seeder,
            Change::Added => a.event == Event::Completed,
            Change::None => false,
        };
        let mut snatched = None;
        if let Some(addr) = a.v4 {
            let (change, was) = t
                .v4()
                .announce(addr, &a.peer_id, a.seeder, stopped, now, max);
            snatched = Some(snatch(change, was));
        }
        if let Some(addr) = a.v6 {
            let (change, was) = t
                .v6()
                .announce(addr, &a.peer_id, a.seeder, stopped, now, max);
            // A dual-stack announce counts once, by its IPv4 record when it has one.
            snatched.get_or_insert(snatch(change, was));
        }
        t.tidy();
        if snatched == Some(true) {
            t.completed = t.completed.saturating_add(1);
        }
        if !stopped {
            let own4 = a.v4.unwrap_or([0; 6]);
            let own6 = a.v6.unwrap_or([0; 18]);
            let mut left = a.want;
            let with_ids = sel.with_ids;
            if a.want_v4 {
                left -= t.select_v4(&own4, a.seeder, left, rng, |p| {
                    sel.v4.extend_from_slice(p.addr());
                    if let (true, Some(id)) = (with_ids, p.peer_id()) {
                        sel.ids.push(id.try_into().expect("20-byte id"));
                    }
                });
            }
            if a.want_v6 {
                t.select_v6(&own6, a.seeder, left, rng, |p| {
                    sel.v6.extend_from_slice(p.addr());
                    if let (true, Some(id)) = (with_ids, p.peer_id()) {
                        sel.ids.push(id.try_into().expect("20-byte id"));
                    }
                });
            }
        }
        let c = counts(t);
        let (s1, p1) = (c.seeders, c.seeders + c.leechers);
        shard.seeders = shard.seeders + s1 as usize - s0 as usize;
        shard.peers = shard.peers + p1 as usize - p0 as usize;
        if t.is_unused() {
            shard.torrents.remove(&a.info_hash);
            self.torrents.fetch_sub(1, Ordering::Relaxed);
        }
        Ok((c, snatched == Some(true)))
    }

    fn restore_completed(&self, info_hash: &Id20, completed: u32) {
        let mut shard = self.swarms.shard(info_hash).lock();
        let t = shard.torrents.entry(*info_hash).or_insert_with(|| {
            self.torrents.fetch_add(1, Ordering::Relaxed);
            Torrent::default()
        });
        t.completed = completed;
    }

    fn scrape(&self, info_hash: &Id20) -> Counts {
        let shard = self.swarms.shard(info_hash).lock();
        shard
            .torrents
            .get(info_hash)
            .map(counts)
            .unwrap_or_default()
    }

    fn for_each(&self, each: &mut dyn FnMut(&Id20, Counts)) {
        for i in 0..self.swarms.shard_count() {
            let shard = self.swarms.shard_at(i).lock();
            for (hash, t) in &shard.torrents {
                each(hash, counts(t));
            }
        }
    }

    fn sweep(&self, i: usize, now: u16, timeout: u16) -> (usize, usize) {
        let mut guard = self.swarms.shard_at(i).lock();
        let shard = &mut *guard;
        let (mut dropped, mut seeders, mut peers) = (0, 0, 0);
        let before = shard.torrents.len();
        shard.torrents.retain(|_, t| {
            dropped += t.expire(now, timeout);
            seeders += t.seeders() as usize;
            peers += (t.seeders() + t.leechers()) as usize;
            !t.is_unused()
        });
        let freed = before - shard.torrents.len();
        if shard.torrents.capacity() > 4 * shard.torrents.len() + 64 {
            shard.torrents.shrink_to_fit();
        }
        shard.seeders = seeders;
        shard.peers = peers;
        self.torrents.fetch_sub(freed, Ordering::Relaxed);
        (dropped, freed)
    }

    fn shards(&self) -> usize {
        self.swarms.shard_count()
    }

    fn id_len(&self) -> usize {
        I
    }

    fn save(&self, now: u16, out: &mut Vec<u8>) -> (usize, usize) {
        let (mut torrents, mut peers) = (0, 0);
        for i in 0..self.swarms.shard_count() {
            let shard = self.swarms.shard_at(i).lock();
            for (hash, t) in &shard.torrents {
                if t.is_empty() {
                    continue;
                }
                let (v4, v6) = (t.records_v4(), t.records_v6());
                out.extend_from_slice(hash);
                out.extend_from_slice(&(v4.0.len() as u32).to_le_bytes());
                out.extend_from_slice(&(v6.0.len() as u32).to_le_bytes());
                put_records(out, v4, now);
                put_records(out, v6, now);
                torrents += 1;
                peers += v4.0.len() + v6.0.len();
            }
        }
        (torrents, peers)
    }

    fn load(
        &self,
        body: &[u8],
        id_len: usize,
        now: u16,
        downtime: u32,
        timeout: u16,
    ) -> Result<(usize, usize), &'static str> {
        if id_len != 0 && id_len != 20 {
            return Err("the swarm snapshot has an unknown peer id size");
        }
        let max = self.caps.max_peers_per_torrent;
        let (mut torrents, mut peers) = (0, 0);
        let mut r = Reader(body);
        // A peer's last-seen time, if it is still alive after the downtime.
        let seen = |age: u16| {
            let age = u32::from(age) + downtime;
            (age < u32::from(timeout)).then(|| now.wrapping_sub(age as u16))
        };
        while !r.0.is_empty() {
            let hash: Id20 = r.take(20)?.try_into().expect("20 bytes");
            let (n4, n6) = (r.u32()?, r.u32()?);
            let mut guard = self.swarms.shard(&hash).lock();
            let shard = &mut *guard;
            let fresh = !shard.torrents.contains_key(&hash);
            let t = shard.torrents.entry(hash).or_default();
            let (s0, p0) = (t.seeders(), t.seeders() + t.leechers());
            for _ in 0..n4 {
                let p = read_peer::<6>(&mut r, id_len)?;
                if let Some(seen) = seen(p.age) {
                    t.v4().announce(p.addr, &p.id, p.seeder, false, seen, max);
                }
            }
            for _ in 0..n6 {
                let p = read_peer::<18>(&mut r, id_len)?;
                if let Some(seen) = seen(p.age) {
                    t.v6().announce(p.addr, &p.id, p.seeder, false, seen, max);
                }
            }
            t.tidy();
            let (s1, p1) = (t.seeders(), t.seeders() + t.leechers());
            shard.seeders = shard.seeders + s1 as usize - s0 as usize;
            shard.peers = shard.peers + p1 as usize - p0 as usize;
            if t.is_unused() {
                shard.torrents.remove(&hash);
            } else {
                if fresh {
                    self.torrents.fetch_add(1, Ordering::Relaxed);
                }
                torrents += 1;
                peers += (p1 - p0) as usize;
            }
        }
        Ok((torrents, peers))
    }

    fn totals(&self) -> Totals {
        let mut t = Totals::default();
        for i in 0..self.swarms.shard_count() {
            let shard = self.swarms.shard_at(i).lock();
            t.torrents += shard.torrents.len();
            t.peers += shard.peers;
            t.seeders += shard.seeders;
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table<const I: usize>(shards: usize, max_torrents: usize) -> Table<I> {
        let caps = Caps {
            max_torrents,
            max_peers_per_torrent: 0,
        };
        Table::new(shards, caps)
    }

    fn announce(n: u8, seeder: bool, event: Event) -> PeerAnnounce {
        PeerAnnounce {
            info_hash: [1; 20],
            peer_id: [n; 20],
            v4: Some([127, 0, 0, 1, 0, n]),
            v6: None,
            seeder,
            complete: seeder,
            event,
            want: 50,
            want_v4: true,
            want_v6: false,
        }
    }

    /// A table with the random generator and selection buffer a worker passes it.
    struct Fixture<const I: usize> {
        table: Table<I>,
        rng: fastrand::Rng,
        sel: Selection,
    }

    impl<const I: usize> Fixture<I> {
        fn new(table: Table<I>, with_ids: bool) -> Self {
            Self {
                table,
                rng: fastrand::Rng::with_seed(1),
                sel: Selection {
                    with_ids,
                    ..Default::default()
                },
            }
        }

        /// Peer `n` announces torrent [1; 20] at second `now`; the swarm's counts.
        fn peer(&mut self, n: u8, seeder: bool, event: Event, now: u16) -> Counts {
            self.table
                .announce(
                    &announce(n, seeder, event),
                    now,
                    &mut self.rng,
                    &mut self.sel,
                )
                .unwrap()
                .0
        }
    }

    #[test]
    fn completed_counts_once_and_totals_follow() {
        let mut f = Fixture::new(table::<20>(4, 0), true);
        f.peer(1, true, Event::Started, 0);
        f.peer(2, false, Event::Started, 0);
        f.sel.clear();
        let c = f.peer(2, true, Event::Completed, 1);
        assert_eq!(
            c,
            Counts {
                seeders: 2,
                leechers: 0,
                completed: 1
            }
        );
        // A seeder is sent no seeders.
        assert!(f.sel.v4.is_empty());
        // A repeated completed event from a seeder does not count again.
        let c = f.peer(2, true, Event::Completed, 2);
        assert_eq!(c.completed, 1);
        let t = f.table.totals();
        assert_eq!((t.torrents, t.peers, t.seeders), (1, 2, 2));
        f.peer(1, true, Event::Stopped, 3);
        f.peer(2, true, Event::Stopped, 3);
        // The empty torrent stays: its completed count is still reported by scrape.
        let t = f.table.totals();
        assert_eq!((t.torrents, t.peers, t.seeders), (1, 0, 0));
        assert_eq!(f.table.scrape(&[1; 20]).completed, 1);
    }

    #[test]
    fn announces_say_when_they_snatch_and_restored_counts_continue() {
        let mut f = Fixture::new(table::<0>(2, 0), false);
        f.table.restore_completed(&[1; 20], 41);
        assert_eq!(f.table.totals().torrents, 1);
        let mut a = announce(1, false, Event::Started);
        let (c, snatched) = f.table.announce(&a, 0, &mut f.rng, &mut f.sel).unwrap();
        assert_eq!((c.completed, snatched), (41, false));
        a.seeder = true;
        a.complete = true;
        a.event = Event::Completed;
        let (c, snatched) = f.table.announce(&a, 1, &mut f.rng, &mut f.sel).unwrap();
        assert_eq!((c.completed, snatched), (42, true));
        let (_, again) = f.table.announce(&a, 2, &mut f.rng, &mut f.sel).unwrap();
        assert!(!again);
        // Sweeping frees peers, not the record of downloads.
        for i in 0..f.table.shards() {
            f.table.sweep(i, 5000, 100);
        }
        assert_eq!(f.table.scrape(&[1; 20]).completed, 42);
    }

    #[test]
    fn a_leecher_stopping_complete_is_a_snatch() {
        let mut f = Fixture::new(table::<0>(1, 0), false);
        f.peer(1, true, Event::Started, 0);
        f.peer(2, false, Event::Started, 0);
        let c = f.peer(2, true, Event::Stopped, 1);
        assert_eq!(
            c,
            Counts {
                seeders: 1,
                leechers: 0,
                completed: 1
            }
        );
        // A seeder restarting (new to the tracker, left=0, started) is no new snatch.
        let c = f.peer(3, true, Event::Started, 2);
        assert_eq!(c.completed, 1);
        // An unknown peer announcing completed (the tracker restarted mid-download) is one.
        let c = f.peer(4, true, Event::Completed, 2);
        assert_eq!(c.completed, 2);
    }

    #[test]
    fn leecher_gets_peers_with_ids() {
        let mut f = Fixture::new(table::<20>(1, 0), true);
        f.peer(1, true, Event::None, 0);
        f.sel.clear();
        f.peer(2, false, Event::None, 0);
        assert_eq!(f.sel.v4, vec![127, 0, 0, 1, 0, 1]);
        assert_eq!(f.sel.ids, vec![[1; 20]]);
    }

    #[test]
    fn swarms_saved_and_loaded_keep_peers_roles_and_remaining_lifetimes() {
        let mut f = Fixture::new(table::<20>(4, 0), true);
        f.peer(1, true, Event::Started, 100);
        f.peer(2, false, Event::Started, 150);
        let mut six = announce(3, false, Event::Started);
        six.v4 = None;
        six.v6 = Some([7; 18]);
        f.table.announce(&six, 190, &mut f.rng, &mut f.sel).unwrap();
        let mut body = Vec::new();
        assert_eq!(f.table.save(200, &mut body), (1, 3));

        // Loaded 30 s later into a new table whose clock reads 5: ages are 130, 80 and 40.
        let mut g = Fixture::new(table::<20>(4, 0), true);
        assert_eq!(g.table.load(&body, 20, 5, 30, 1000), Ok((1, 3)));
        let c = g.table.scrape(&[1; 20]);
        assert_eq!((c.seeders, c.leechers), (1, 2));
        let t = g.table.totals();
        assert_eq!((t.torrents, t.peers, t.seeders), (1, 3, 1));
        g.sel.clear();
        g.peer(9, false, Event::Started, 5);
        // A new IPv4 leecher is sent the IPv4 seeder and leecher, with their ids.
        g.sel.ids.sort_unstable();
        assert_eq!(g.sel.ids, vec![[1; 20], [2; 20]]);
        // Each peer keeps what was left of its lifetime: at a timeout of 100 s the seeder
        // (130 s old) is gone on load, the others go when their time is up.
        let h = Fixture::new(table::<0>(4, 0), false);
        assert_eq!(h.table.load(&body, 20, 5, 30, 100), Ok((1, 2)));
        for i in 0..h.table.shards() {
            h.table.sweep(i, 5 + 30, 100);
        }
        assert_eq!(h.table.totals().peers, 1);
        // Damage is reported, not loaded as garbage.
        assert!(h
            .table
            .load(&body[..body.len() - 3], 20, 5, 0, 100)
            .is_err());
        assert!(h.table.load(&body, 7, 5, 0, 100).is_err());
    }

    #[test]
    fn caps_and_sweeps() {
        let mut f = Fixture::new(table::<0>(2, 1), false);
        f.peer(1, false, Event::None, 0);
        let mut other = announce(1, false, Event::None);
        other.info_hash = [2; 20];
        assert!(f.table.announce(&other, 0, &mut f.rng, &mut f.sel).is_err());
        let mut freed = 0;
        for i in 0..f.table.shards() {
            freed += f.table.sweep(i, 500, 100).1;
        }
        assert_eq!(freed, 1);
        assert!(f
            .table
            .announce(&other, 500, &mut f.rng, &mut f.sel)
            .is_ok());
    }
}
