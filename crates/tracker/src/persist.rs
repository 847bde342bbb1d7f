//! What the tracker keeps across restarts, through the write-behind store: completed downloads
//! (journaled by the handlers before the answer, see [`crate::handler`]) and, from here, every
//! swarm's seeders and leechers on an interval (`tracker.snapshot_interval_secs`; snapshots are
//! not journaled: a crash loses at most one interval of them), and the swarms themselves,
//! saved at a graceful shutdown and loaded at the next start ([`save_swarms`], [`load_swarms`]).

use std::collections::HashSet;
use std::io::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hotpath_store::{Backend, Batch, StoreError};

use crate::private::ledger::parse_ledger;
use crate::private::stored::CountsChange;
use crate::private::Private;
use crate::stored::{Key, TorrentChange, TrackerDb, TORRENTS};
use crate::table::SwarmTable;

use crate::{Shared, TrackerError};

/// Changes handed to the store at a time, so a snapshot of many torrents needs little memory.
const CHUNK: usize = 4096;

/// Hands the store every swarm's counts (torrents with peers only) every
/// `tracker.snapshot_interval_secs`, until `stop`. In private mode under a preset that keeps
/// seeders and leechers in the site's torrents table (XBT's), also each registered torrent's,
/// by its id, with zeros for a torrent whose last peer left since the last snapshot; the
/// first of those a few seconds after start.
pub fn snapshotter(shared: Arc<Shared>, stop: Arc<AtomicBool>) {
    let Some(db) = shared.persist.clone() else {
        return;
    };
    let every = Duration::from_secs(u64::from(shared.cfg.snapshot_interval_secs));
    let counts = shared.private.clone().filter(|p| p.torrent_counts);
    let first = if counts.is_some() {
        every.min(Duration::from_secs(5))
    } else {
        every
    };
    let mut due = Instant::now() + first;
    let mut forget_due = Instant::now() + FORGET_EVERY;
    // The registered torrents written with peers last time.
    let mut had_peers: HashSet<u32> = HashSet::new();
    while !stop.load(Ordering::Acquire) {
        if Instant::now() >= forget_due {
            forget_due += FORGET_EVERY;
            forget_idle_torrents(&shared, &db);
        }
        if Instant::now() < due {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        due += every;
        let at = (shared.unix_base + i64::from(hotpath_service::process_secs())) as u32;
        let mut changes = Vec::with_capacity(CHUNK);
        let mut private = Vec::new();
        let mut has_peers = HashSet::with_capacity(had_peers.len());
        shared.swarms.for_each(&mut |hash, c| {
            if c.seeders + c.leechers == 0 {
                return;
            }
            // One peer and no completed download: nothing worth a row (made-up info hashes
            // would only fill the table); a torrent that had a row keeps its last snapshot.
            let worth_a_row = c.seeders + c.leechers > 1 || c.completed > 0;
            if worth_a_row {
                changes.push(TorrentChange {
                    info_hash: *hash,
                    completed: 0,
                    seeders: c.seeders,
                    leechers: c.leechers,
                    at,
                });
                if changes.len() == CHUNK {
                    db.submit(&changes);
                    changes.clear();
                }
            }
            if let Some(t) = counts.as_ref().and_then(|p| p.torrents.get(hash)) {
                has_peers.insert(t.id);
                private.push(CountsChange {
                    torrent: t.id,
                    seeders: c.seeders,
                    leechers: c.leechers,
                    at,
                });
                if private.len() == CHUNK {
                    db.submit(&private);
                    private.clear();
                }
            }
        });
        db.submit(&changes);
        for &torrent in had_peers.difference(&has_peers) {
            private.push(CountsChange {
                torrent,
                seeders: 0,
                leechers: 0,
                at,
            });
        }
        db.submit(&private);
        had_peers = has_peers;
    }
}

/// How often idle torrents are forgotten (`tracker.forget_torrents_after_days`).
const FORGET_EVERY: Duration = Duration::from_secs(3600);

/// Deletes hp_torrents' rows of torrents idle for `tracker.forget_torrents_after_days`, with no
/// completed download, on a connection of its own (a long delete holds up no flush); a failure
/// is logged and tried again in an hour.
fn forget_idle_torrents(shared: &Shared, db: &hotpath_store::Store) {
    let days = i64::from(shared.cfg.forget_torrents_after_days);
    let before = hotpath_store::unix_now() - days * 86_400;
    let done = db
        .connect()
        .and_then(|mut b| b.forget_idle_torrents(before));
    if let Err(e) = done {
        log::warn!("tracker: idle torrents not forgotten this hour: {e}");
    }
}

/// The completed downloads per torrent: the database's plus those of `replayed` (the rows
/// replayed from the journal, not written yet).
pub fn completed_counts(
    db: &mut dyn Backend,
    replayed: &Batch,
) -> Result<Vec<(Key, u64)>, StoreError> {
    let mut completed: std::collections::HashMap<Key, u64> = std::collections::HashMap::new();
    db.torrents(&mut |k, t| {
        if t.completed > 0 {
            completed.insert(k, t.completed);
        }
    })?;
    for row in replayed.rows_of(&TORRENTS) {
        let (Ok(key), n) = (Key::try_from(row[0].bytes()), row[1].int()) else {
            continue;
        };
        if n > 0 {
            *completed.entry(key).or_insert(0) += n as u64;
        }
    }
    Ok(completed.into_iter().collect())
}

/// Reads the access list's rows from the database (`hp_access_list`) into the list; returns
/// the size of the whole list. On an error the list stays as it was.
pub fn reload_access_from_db(shared: &Shared) -> Result<usize, TrackerError> {
    let db = shared
        .persist
        .as_ref()
        .ok_or(TrackerError::AccessNeedsStore)?;
    let rows = db
        .read(|b| b.access_list())
        .map_err(|source| TrackerError::AccessDb {
            db: db.name.clone(),
            source,
        })?;
    Ok(shared.access.set_database(rows))
}

/// Re-reads the access list's database rows every `access_list.reload_secs`, until `stop`.
pub fn access_reloader(shared: Arc<Shared>, stop: Arc<AtomicBool>) {
    let Some(secs) = shared.access_db_reload else {
        return;
    };
    let every = Duration::from_secs(u64::from(secs));
    let mut due = Instant::now() + every;
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(100));
        if Instant::now() < due {
            continue;
        }
        due = Instant::now() + every;
        if let Err(e) = reload_access_from_db(&shared) {
            log::warn!("{e}; the list in force stays");
        }
    }
}

/// The swarm snapshot's file name in `store.data_dir`.
pub const SWARMS_FILE: &str = "swarms.snapshot";
/// The format written: per torrent, also the count of IPv6 addresses IPv4 peers gave.
const MAGIC: &[u8; 8] = b"HPSWARM2";
/// The format before it (no such count), still read.
const MAGIC_V1: &[u8; 8] = b"HPSWARM1";

/// Writes every swarm to `dir/swarms.snapshot` (through a temporary file, renamed when
/// complete and synced): `HPSWARM2`, the unix second of the save (i64 LE), the peer id size
/// (u8: 0 or 20), the torrents (info hash; IPv4 peers, IPv6 peers and IPv6 addresses of IPv4
/// peers as u32 LE counts; then each peer: address, age in seconds as u16 LE, seeder flag,
/// id), and a CRC-32 of all that (u32 LE).
/// Returns (torrents, peers) saved.
pub fn save_swarms(shared: &Shared, dir: &Path) -> std::io::Result<(usize, usize)> {
    let now = hotpath_service::process_secs() as u16;
    write_swarms(&*shared.swarms, now, dir)
}

/// Writes `swarms` to `dir/swarms.snapshot` as [`save_swarms`] does, `now` being the table's
/// clock (also used by tools that build a table to start a tracker with).
pub fn write_swarms(
    swarms: &dyn SwarmTable,
    now: u16,
    dir: &Path,
) -> std::io::Result<(usize, usize)> {
    let mut out = Vec::with_capacity(1 << 20);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&hotpath_store::unix_now().to_le_bytes());
    out.push(swarms.id_len() as u8);
    let saved = swarms.save(now, &mut out);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    write_whole(dir, SWARMS_FILE, &out)?;
    Ok(saved)
}

/// Writes `dir/name` whole or not at all: through a temporary file, synced, then renamed
/// over it, and the directory synced.
fn write_whole(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, dir.join(name))?;
    std::fs::File::open(dir)?.sync_all()
}

/// Loads `dir/swarms.snapshot` if there is one, aging every peer by the time since the save,
/// and deletes it (a later crash must not bring back swarms older than the ones it lost).
/// Returns (torrents, peers, seconds since the save), or `None` when there was no snapshot.
pub fn load_swarms(shared: &Shared, dir: &Path) -> Result<Option<(usize, usize, u32)>, String> {
    let path = dir.join(SWARMS_FILE);
    // Per torrent at most 20 + 12 bytes of header, per peer 16 + 2 + 2 + 20 (IPv6, an
    // IPv6 alias of 18, flags, id): a larger file is not one this configuration wrote.
    let caps = &shared.cfg;
    let limit = 64 + caps.max_torrents as u64 * 32 + caps.max_peers as u64 * 64;
    let Some(data) = take_file(&path, limit)? else {
        return Ok(None);
    };
    parse_and_load(shared, &data)
        .map(Some)
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Reads `path` and deletes it (what it held is loaded once); `None` when there is none. A
/// file over `limit` bytes is not read (and deleted too).
fn take_file(path: &Path, limit: u64) -> Result<Option<Vec<u8>>, String> {
    let read = hotpath_config::file::read_bounded(path, limit);
    let data = match read {
        Ok(d) => Ok(Some(d)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    };
    if let Err(e) = std::fs::remove_file(path) {
        log::warn!("{}: cannot delete: {e}", path.display());
    }
    data
}

/// The UDP connection ids' key, in `store.data_dir` beside the swarms, so that the ids clients
/// hold stay good across a restart or a binary upgrade.
pub const CONNECTION_KEY_FILE: &str = "connection-ids.key";
const KEY_MAGIC: &[u8; 8] = b"HPCONNK1";

/// Writes `ids`' key to `dir/connection-ids.key`, readable by this user only: `HPCONNK1`, the
/// unix second of the save (i64 LE), the key (16 bytes), a CRC-32 of all that (u32 LE).
pub fn save_connection_key(ids: &crate::ConnectionIds, dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut out = Vec::with_capacity(36);
    out.extend_from_slice(KEY_MAGIC);
    out.extend_from_slice(&hotpath_store::unix_now().to_le_bytes());
    out.extend_from_slice(&ids.key());
    out.extend_from_slice(&crc32fast::hash(&out).to_le_bytes());
    let tmp = dir.join(format!("{CONNECTION_KEY_FILE}.tmp"));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(&out)?;
    f.sync_all()?;
    std::fs::rename(&tmp, dir.join(CONNECTION_KEY_FILE))
}

/// The key `dir/connection-ids.key` holds if it was saved less than an id's lifetime ago
/// (older, every id it issued has expired); the file is deleted either way.
pub fn load_connection_key(dir: &Path) -> Result<Option<crate::ConnectionIds>, String> {
    let path = dir.join(CONNECTION_KEY_FILE);
    let Some(data) = take_file(&path, 64)? else {
        return Ok(None);
    };
    parse_connection_key(&data, hotpath_store::unix_now())
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// A connection key file's bytes (see [`save_connection_key`]) at unix second `now`: the key
/// when it is whole and was saved within an id's lifetime before `now`.
pub fn parse_connection_key(
    data: &[u8],
    now: i64,
) -> Result<Option<crate::ConnectionIds>, &'static str> {
    if data.len() != 36 || &data[..8] != KEY_MAGIC {
        return Err("not a key this tracker wrote");
    }
    let crc = u32::from_le_bytes(data[32..].try_into().expect("4 bytes"));
    if crc32fast::hash(&data[..32]) != crc {
        return Err("damaged (its CRC does not match)");
    }
    let saved = i64::from_le_bytes(data[8..16].try_into().expect("8 bytes"));
    let fresh = now
        .checked_sub(saved)
        .is_some_and(|age| (0..=i64::from(crate::connid::LIFETIME_SECS)).contains(&age));
    Ok(fresh.then(|| crate::ConnectionIds::with_key(data[16..32].try_into().expect("16 bytes"))))
}

/// The private tracker's ledger file's name in `store.data_dir`.
pub const LEDGER_FILE: &str = "ledger.snapshot";

/// Writes a private tracker's ledger to `dir/ledger.snapshot` (through a temporary file,
/// synced, then renamed), with a CRC-32 of it at the end. Returns the peers saved.
pub fn save_ledger(p: &Private, dir: &Path) -> std::io::Result<usize> {
    let mut out = Vec::with_capacity(1 << 20);
    let n = p.ledger.save(
        hotpath_service::process_secs(),
        hotpath_store::unix_now(),
        &mut out,
    );
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    write_whole(dir, LEDGER_FILE, &out)?;
    Ok(n)
}

/// Loads `dir/ledger.snapshot` if there is one and deletes it (a later crash must not bring
/// back counters older than the clients' announces since, which would credit that traffic
/// twice). Returns (peers loaded, seconds since the save), or `None` when there was none.
pub fn load_ledger(p: &Private, dir: &Path, timeout: u32) -> Result<Option<(usize, u32)>, String> {
    let path = dir.join(LEDGER_FILE);
    let Some(data) = take_file(&path, p.ledger.max_file_bytes())? else {
        return Ok(None);
    };
    parse_ledger(&data)
        .and_then(|head| {
            let downtime =
                (hotpath_store::unix_now() - head.saved_at).clamp(0, i64::from(u32::MAX)) as u32;
            let now = hotpath_service::process_secs();
            let n = p.ledger.load(&head, now, downtime, timeout)?;
            Ok((n, downtime))
        })
        .map(Some)
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// A snapshot file's header, checked, and the body that follows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotHead<'a> {
    /// Unix second of the save.
    pub saved_at: i64,
    /// Bytes of peer id per saved peer (the table checks it is 0 or 20).
    pub id_len: usize,
    /// Whether torrents carry a third count, the IPv6 addresses IPv4 peers gave (format 2).
    pub aliases: bool,
    /// The torrents, for [`crate::table::SwarmTable::load`].
    pub body: &'a [u8],
}

/// Checks a snapshot file's magic and checksum and splits it into header and body (no I/O: the
/// decoder the fuzz target drives, with [`crate::table::SwarmTable::load`]).
pub fn parse_snapshot(data: &[u8]) -> Result<SnapshotHead<'_>, &'static str> {
    const HEAD: usize = 8 + 8 + 1;
    if data.len() < HEAD + 4 || (&data[..8] != MAGIC && &data[..8] != MAGIC_V1) {
        return Err("not a swarm snapshot");
    }
    let (body, crc) = data.split_at(data.len() - 4);
    if crc32fast::hash(body).to_le_bytes() != crc {
        return Err("the swarm snapshot is damaged (checksum)");
    }
    Ok(SnapshotHead {
        saved_at: i64::from_le_bytes(body[8..16].try_into().expect("8 bytes")),
        id_len: usize::from(body[16]),
        aliases: &data[..8] == MAGIC,
        body: &body[HEAD..],
    })
}

fn parse_and_load(shared: &Shared, data: &[u8]) -> Result<(usize, usize, u32), &'static str> {
    let head = parse_snapshot(data)?;
    let downtime = (hotpath_store::unix_now() - head.saved_at).clamp(0, i64::from(u32::MAX)) as u32;
    let now = hotpath_service::process_secs() as u16;
    let timeout = shared.cfg.peer_timeout_secs as u16;
    let (t, p) =
        shared
            .swarms
            .load(head.body, head.id_len, head.aliases, now, downtime, timeout)?;
    Ok((t, p, downtime))
}
