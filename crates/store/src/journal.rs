//! The journal: append-only segment files, one series per worker, written before a change is
//! acknowledged and deleted once the database has confirmed it.
//!
//! A record is a 16-byte header, then its payload (encoded changes, see [`crate::queue`]):
//! `payload length: u32 LE | CRC-32 of (sequence and payload): u32 LE | sequence: u64 LE`.
//! Each worker numbers its records; the database keeps, per worker, the last sequence it has
//! (in the same transaction as the rows), so replay after a crash applies exactly the records
//! the database lacks. A record cut short by a crash, or one whose checksum fails, ends its file:
//! it is reported and skipped (it was never acknowledged: acknowledgements wait for the write).
//!
//! Files are `w<worker>-<first sequence>.log` in the journal directory. Owns: the file format,
//! the per-worker [`JournalWriter`], and [`scan`] for replay. Must not: talk to a database.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use crate::queue::Encode;
use crate::Shared;

/// Bytes before a record's payload.
pub const HEADER: usize = 16;
/// Largest payload a reader accepts; a longer length field means a damaged record.
pub const MAX_PAYLOAD: usize = 64 << 20;

/// A journal segment file, as the store tracks it.
#[derive(Debug, Clone)]
pub struct Segment {
    /// The worker whose records it holds.
    pub worker: u32,
    /// The file.
    pub path: PathBuf,
    /// The last sequence written to it (0 when none).
    pub last_seq: u64,
    /// Its size on disk.
    pub bytes: u64,
    /// A writer still appends to it.
    pub open: bool,
    /// Written since its last fsync (the syncer's to do).
    pub unsynced: bool,
}

/// The file name of worker `worker`'s segment starting at `first_seq`.
pub fn segment_name(worker: u32, first_seq: u64) -> String {
    format!("w{worker:04}-{first_seq:020}.log")
}

/// Parses a segment file name into `(worker, first sequence)`.
pub fn parse_segment_name(name: &str) -> Option<(u32, u64)> {
    let rest = name.strip_prefix('w')?.strip_suffix(".log")?;
    let (w, s) = rest.split_once('-')?;
    Some((w.parse().ok()?, s.parse().ok()?))
}

/// Every segment file in `dir`, sorted by worker and first sequence.
pub fn list_segments(dir: &Path) -> io::Result<Vec<(u32, u64, PathBuf)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if let Some((w, s)) = entry.file_name().to_str().and_then(parse_segment_name) {
            out.push((w, s, entry.path()));
        }
    }
    out.sort();
    Ok(out)
}

fn checksum(seq: u64, payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&seq.to_le_bytes());
    h.update(payload);
    h.finalize()
}

/// Fills the header of a record whose payload follows it in `record`.
pub fn seal(record: &mut [u8], seq: u64) {
    let payload_len = (record.len() - HEADER) as u32;
    let crc = checksum(seq, &record[HEADER..]);
    record[0..4].copy_from_slice(&payload_len.to_le_bytes());
    record[4..8].copy_from_slice(&crc.to_le_bytes());
    record[8..16].copy_from_slice(&seq.to_le_bytes());
}

/// How a scan of one file ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanEnd {
    /// Bytes of whole, valid records.
    pub valid_bytes: u64,
    /// The file's size.
    pub file_bytes: u64,
    /// The last valid record's sequence (0 when there is none).
    pub last_seq: u64,
    /// Valid records read.
    pub records: u64,
}

impl ScanEnd {
    /// Whether the file ends in a damaged or incomplete record (skipped).
    pub fn torn(&self) -> bool {
        self.valid_bytes < self.file_bytes
    }
}

/// Reads every valid record of a segment file in order, calling `each(seq, payload)`; stops at
/// the first incomplete or damaged record.
pub fn scan(path: &Path, each: &mut dyn FnMut(u64, &[u8])) -> io::Result<ScanEnd> {
    let mut data = Vec::new();
    File::open(path)?.read_to_end(&mut data)?;
    Ok(scan_bytes(&data, each))
}

/// [`scan`] over a segment's bytes already in memory (no I/O: the decoder the fuzz target
/// drives).
pub fn scan_bytes(data: &[u8], each: &mut dyn FnMut(u64, &[u8])) -> ScanEnd {
    let mut end = ScanEnd {
        valid_bytes: 0,
        file_bytes: data.len() as u64,
        last_seq: 0,
        records: 0,
    };
    let mut at = 0usize;
    while data.len() - at >= HEADER {
        let h = &data[at..at + HEADER];
        let len = u32::from_le_bytes(h[0..4].try_into().unwrap()) as usize;
        let crc = u32::from_le_bytes(h[4..8].try_into().unwrap());
        let seq = u64::from_le_bytes(h[8..16].try_into().unwrap());
        if len > MAX_PAYLOAD || data.len() - at - HEADER < len {
            break;
        }
        let payload = &data[at + HEADER..at + HEADER + len];
        if checksum(seq, payload) != crc {
            break;
        }
        each(seq, payload);
        at += HEADER + len;
        end.valid_bytes = at as u64;
        end.last_seq = seq;
        end.records += 1;
    }
    end
}

/// The floor file in the journal directory: per journal, the last sequence of every segment
/// deleted so far, written (through a temporary file, synced and renamed) before the
/// deletion. A start that cannot ask the database for its positions numbers past it, so no
/// record it writes can fall at or below a position the database already holds.
pub const FLOOR_FILE: &str = "floor";
/// Largest sequence a floor file may hold (half of `i64::MAX`).
const MAX_FLOOR_SEQ: u64 = i64::MAX as u64 / 2;
/// Largest floor file read (a few bytes per journal; more is not ours).
const MAX_FLOOR_BYTES: u64 = 64 << 10;

/// Reads the floor file of `dir` (empty when there is none); a damaged one is an error, for
/// the caller to report.
pub fn read_floor(dir: &Path) -> io::Result<HashMap<u32, u64>> {
    let file = match File::open(dir.join(FLOOR_FILE)) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(HashMap::new()),
        Err(e) => return Err(e),
    };
    let mut bytes = Vec::new();
    file.take(MAX_FLOOR_BYTES + 1).read_to_end(&mut bytes)?;
    parse_floor(&bytes).map_err(|why| io::Error::new(io::ErrorKind::InvalidData, why))
}

/// Parses a floor file: lines `w<journal> <sequence>`, at most 64 KiB, sequences at most
/// half of `i64::MAX`.
pub fn parse_floor(bytes: &[u8]) -> Result<HashMap<u32, u64>, String> {
    if bytes.len() as u64 > MAX_FLOOR_BYTES {
        return Err("longer than 64 KiB".into());
    }
    let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8".to_string())?;
    let mut floor = HashMap::new();
    for line in text.lines() {
        let bad = || format!("bad line {line:?}");
        let (w, seq) = line
            .strip_prefix('w')
            .and_then(|l| l.split_once(' '))
            .ok_or_else(bad)?;
        let w: u32 = w.parse().map_err(|_| bad())?;
        let seq: u64 = seq.parse().map_err(|_| bad())?;
        // Writers number past it, and databases keep positions as signed 64-bit integers:
        // far more room than a clock in microseconds needs, none for a crafted near-maximum.
        if seq > MAX_FLOOR_SEQ {
            return Err(bad());
        }
        floor.insert(w, seq);
    }
    Ok(floor)
}

/// Replaces the floor file of `dir` with `floor`, durably (the caller deletes segments only
/// after this returns).
pub fn write_floor(dir: &Path, floor: &HashMap<u32, u64>) -> io::Result<()> {
    let mut entries: Vec<_> = floor.iter().collect();
    entries.sort_unstable();
    let mut text = String::new();
    for (w, seq) in entries {
        text.push_str(&format!("w{w} {seq}\n"));
    }
    let tmp = dir.join(format!("{FLOOR_FILE}.tmp"));
    let mut f = File::create(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_data()?;
    std::fs::rename(&tmp, dir.join(FLOOR_FILE))?;
    File::open(dir)?.sync_all()
}

/// Why a change was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The journal is at `store.journal_max_bytes` (the database is behind or down).
    Full,
}

impl Refused {
    /// A reason fit for a client (a BitTorrent `failure reason`, an HTTP body).
    pub fn reason(self) -> &'static str {
        match self {
            Refused::Full => {
                "the server cannot record this now (its journal is full: the database is behind); retry later"
            }
        }
    }
}

/// A journal write that failed, and whether the record was cut off its file again (so none of
/// it can be replayed).
struct Failed {
    error: io::Error,
    cut: bool,
}

/// Why a commit fails while a record that may be in the journal waits for the database.
const GATED: &str = "a journal record that failed to write may still be in its file; \
                     answers wait until the database holds its changes";
/// Why a commit fails while changes a failed write left out are not journaled yet.
const HELD: &str = "changes a failed journal write left out are not journaled yet";

/// One worker's journal: changes are buffered by [`append`](Self::append) while a batch of
/// requests is handled and written with one `write` by [`commit`](Self::commit) before any
/// of their answers is sent.
pub struct JournalWriter {
    worker: u32,
    shared: Arc<Shared>,
    file: Option<File>,
    /// The open segment's path: its key in the store's segment registry.
    path: PathBuf,
    file_bytes: u64,
    /// The record being built: a header's room, then encoded changes.
    record: Vec<u8>,
    /// Changes in `record`.
    changes: usize,
    next_seq: u64,
    /// Written since this writer's last fsync.
    dirty: bool,
    /// Of `changes`, how many were held ones this writer took: still counted as unjournaled
    /// until its write succeeds, so no other worker answers from them while it is under way.
    taken: usize,
}

impl JournalWriter {
    pub(crate) fn new(shared: Arc<Shared>, worker: u32, next_seq: u64) -> JournalWriter {
        shared.writers.fetch_add(1, Ordering::AcqRel);
        let mut record = Vec::with_capacity(4096);
        record.resize(HEADER, 0);
        JournalWriter {
            worker,
            shared,
            file: None,
            path: PathBuf::new(),
            file_bytes: 0,
            record,
            changes: 0,
            next_seq,
            dirty: false,
            taken: 0,
        }
    }

    /// Whether a change of `bytes` encoded bytes would be taken now: the journal on disk (with
    /// the changes held after a failed write) and the rows waiting in memory are both under
    /// their bounds.
    pub fn has_room(&self, bytes: usize) -> bool {
        let used = self.shared.journal_bytes.load(Ordering::Relaxed)
            + self.shared.held_bytes.load(Ordering::Relaxed)
            + self.record.len() as u64;
        used + bytes as u64 <= self.shared.settings.journal_max_bytes
            && self.shared.queue_rows.load(Ordering::Relaxed) + self.changes
                < self.shared.settings.max_queue_rows
    }

    /// Counts a request refused for want of room, and gives its reason.
    pub fn refuse(&self) -> &'static str {
        self.shared.metrics.refused.add(1);
        Refused::Full.reason()
    }

    /// Buffers a change for the next commit; refused when the journal is full.
    pub fn append(&mut self, change: &impl Encode) -> Result<(), Refused> {
        if !self.has_room(change.encoded_len()) {
            self.shared.metrics.refused.add(1);
            return Err(Refused::Full);
        }
        self.push(change);
        Ok(())
    }

    /// Buffers a change whatever the journal holds: for a change already applied to memory
    /// after [`has_room`](Self::has_room) said yes (other workers may have filled the
    /// journal since, so the bound is passed by at most one batch per worker).
    pub fn push(&mut self, change: &impl Encode) {
        change.encode(&mut self.record);
        self.changes += 1;
    }

    /// Whether an answer must wait for a [`commit`](Self::commit): changes of this writer
    /// wait for one, or a journal write failed and its changes, already in the memory every
    /// worker answers from, are not journaled yet.
    pub fn uncommitted(&self) -> bool {
        self.changes > 0 || self.shared.unjournaled.load(Ordering::Acquire) > 0
    }

    /// Writes the buffered changes as one record and hands them to the flusher. The fsync is
    /// the syncer's, on its interval, off this thread; with `store.journal_fsync_ms = 0` it
    /// happens here, before the caller acknowledges anything.
    ///
    /// On an error the caller must not answer: memory already holds the changes, but the
    /// journal does not. The record is cut off the file again and its changes are held
    /// (counted in `hotpath_store_journal_held_changes`); while any are held, every writer's
    /// [`uncommitted`](Self::uncommitted) is true and its next commit writes them first, so no
    /// worker answers from that memory (a client's retry of the same request included) until
    /// a journal write holds them. What is still held when the last writer closes reaches the
    /// database from memory at the drain.
    pub fn commit(&mut self) -> io::Result<()> {
        // One writer at a time writes held changes; the others wait for its write (only
        // while some are held: a full or failing disk), then find them journaled or held
        // again, and take their turn.
        // (The lock's Arc is cloned only then: nothing is added to a commit otherwise.)
        let held_writer = (self.shared.unjournaled.load(Ordering::Acquire) > 0)
            .then(|| self.shared.held_writer.clone());
        let _turn = held_writer.as_ref().map(|w| w.lock());
        if _turn.is_some() {
            self.take_held();
        }
        if self.changes == 0 {
            return self.ungated();
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        seal(&mut self.record, seq);
        let written = self.write(seq);
        let mut inner = self.shared.inner.lock();
        // Whether the changes join the queue now (held ones join with a later record).
        let queued = !matches!(written, Err(Failed { cut: true, .. }));
        match &written {
            Ok(()) => {
                // The queue merges what the journal holds, decoded from it.
                merge_record(&mut inner.pending, &self.record[HEADER..]);
                inner.pending.covered(self.worker, seq);
                self.shared
                    .unjournaled
                    .fetch_sub(self.taken, Ordering::AcqRel);
                if let Some(s) = inner.segments.iter_mut().find(|s| s.path == self.path) {
                    s.last_seq = seq;
                    s.bytes = self.file_bytes;
                    s.unsynced = self.dirty;
                }
            }
            Err(Failed { cut: true, .. }) => {
                // Not in the journal: held for the next commit of any writer (the taken
                // ones are counted already).
                let bytes = (self.record.len() - HEADER) as u64;
                let own = self.changes - self.taken;
                inner.held.bytes.extend_from_slice(&self.record[HEADER..]);
                inner.held.changes += self.changes;
                self.shared.held_bytes.fetch_add(bytes, Ordering::Relaxed);
                self.shared.unjournaled.fetch_add(own, Ordering::AcqRel);
            }
            Err(Failed { cut: false, .. }) => {
                // The record may be in the file, whole: the database must hold its changes
                // under its sequence (so a replay skips it) before anything is answered again.
                merge_record(&mut inner.pending, &self.record[HEADER..]);
                inner.pending.covered(self.worker, seq);
                if inner.gate.replace((self.worker, seq)).is_none() {
                    self.shared.unjournaled.fetch_add(1, Ordering::AcqRel);
                }
                self.shared
                    .unjournaled
                    .fetch_sub(self.taken, Ordering::AcqRel);
            }
        }
        let rows = inner.pending.rows();
        if queued {
            inner.pending_since.get_or_insert_with(Instant::now);
            self.shared.queued(rows);
        }
        drop(inner);
        self.taken = 0;
        if queued && rows >= self.shared.settings.batch_rows {
            self.shared.wake.notify_one();
        }
        self.changes = 0;
        self.record.truncate(HEADER);
        let Err(f) = written else {
            return self.ungated();
        };
        // A new segment starts with the next record.
        self.close_file();
        let m = &self.shared.metrics.journal_errors;
        m.add(1);
        // Every failed commit is counted; the log says the first and every hundredth, since a
        // full disk fails every event-loop turn of every worker.
        let n = m.get();
        if n == 1 || n.is_multiple_of(100) {
            let then = if f.cut {
                "its changes are held and no answer goes out until a journal write holds them"
            } else {
                "the record could not be cut off its file; no answer goes out until the \
                 database holds it"
            };
            log::error!(
                "journal of worker {}: {} ({n} failed writes so far); {then}",
                self.worker,
                f.error
            );
        }
        Err(f.error)
    }

    /// Fails while a record that may be in the journal waits for the database, and while
    /// changes a failed write left out are not journaled yet, held or in another writer's
    /// write under way: memory holds them, so no answer may go out (see
    /// [`commit`](Self::commit)).
    fn ungated(&self) -> io::Result<()> {
        if self.shared.unjournaled.load(Ordering::Acquire) == 0 {
            return Ok(());
        }
        if self.shared.inner.lock().gate.is_some() {
            Err(io::Error::other(GATED))
        } else {
            Err(io::Error::other(HELD))
        }
    }

    /// Takes the changes held after failed writes into this writer's record, before its own.
    fn take_held(&mut self) {
        // `unjournaled` keeps counting them until the write succeeds: another worker must
        // not answer from them meanwhile.
        let held = std::mem::take(&mut self.shared.inner.lock().held);
        if held.changes == 0 {
            return;
        }
        let mut record = Vec::with_capacity(HEADER + held.bytes.len() + self.record.len());
        record.resize(HEADER, 0);
        record.extend_from_slice(&held.bytes);
        self.shared
            .held_bytes
            .fetch_sub(held.bytes.len() as u64, Ordering::Relaxed);
        self.taken += held.changes;
        record.extend_from_slice(&self.record[HEADER..]);
        self.record = record;
        self.changes += held.changes;
    }

    /// Appends the sealed record to the open segment (opening one if due). On an error the
    /// file is cut back to where the record began, if it can be.
    fn write(&mut self, seq: u64) -> Result<(), Failed> {
        let len = self.record.len() as u64;
        let max = self.shared.settings.journal_segment_bytes;
        if self.file.is_none() || (self.file_bytes > 0 && self.file_bytes + len > max) {
            // Nothing of this record is in any file yet.
            self.rotate(seq)
                .map_err(|error| Failed { error, cut: true })?;
        }
        let start = self.file_bytes;
        let file = self.file.as_mut().expect("a segment is open");
        let mut written = file.write_all(&self.record);
        if written.is_ok() && self.shared.settings.journal_fsync_ms == 0 {
            written = file.sync_data();
            if written.is_ok() {
                self.shared.metrics.journal_syncs.add(1);
            }
        }
        if let Err(error) = written {
            let cut = file.set_len(start).and_then(|()| file.sync_data());
            if let Err(e) = &cut {
                log::error!(
                    "journal of worker {}: cannot cut a failed record: {e}",
                    self.worker
                );
            }
            return Err(Failed {
                error,
                cut: cut.is_ok(),
            });
        }
        self.file_bytes += len;
        self.dirty = self.shared.settings.journal_fsync_ms != 0;
        self.shared.journal_bytes.fetch_add(len, Ordering::Relaxed);
        let m = &self.shared.metrics;
        m.journal_records.add(1);
        m.journal_written.add(len);
        Ok(())
    }

    /// Fsyncs this writer's segment (strict mode, a segment's end, the writer's close).
    fn sync(&mut self) -> io::Result<()> {
        if let (Some(f), true) = (&self.file, self.dirty) {
            f.sync_data()?;
            self.shared.metrics.journal_syncs.add(1);
        }
        self.dirty = false;
        Ok(())
    }

    /// Closes the current segment and opens a new one whose first record is `first_seq`.
    fn rotate(&mut self, first_seq: u64) -> io::Result<()> {
        self.sync()?;
        self.close_file();
        let dir = &self.shared.settings.journal_dir;
        let path = dir.join(segment_name(self.worker, first_seq));
        let file = OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(&path)?;
        // The new name must survive a power loss too.
        File::open(dir)?.sync_all()?;
        self.shared.inner.lock().segments.push(Segment {
            worker: self.worker,
            path: path.clone(),
            last_seq: 0,
            bytes: 0,
            open: true,
            unsynced: false,
        });
        self.file = Some(file);
        self.path = path;
        self.file_bytes = 0;
        Ok(())
    }

    fn close_file(&mut self) {
        if self.file.take().is_some() {
            let mut inner = self.shared.inner.lock();
            if let Some(s) = inner.segments.iter_mut().find(|s| s.path == self.path) {
                s.open = false;
            }
        }
    }
}

/// Merges a record's changes, as encoded by this process, into the queues. A service whose
/// decoding does not read back its own encoding is a bug: logged (a debug build stops).
pub(crate) fn merge_record(queues: &mut crate::queue::Queues, payload: &[u8]) {
    if queues.apply(payload).is_none() {
        debug_assert!(
            false,
            "a service's change does not decode as it was encoded"
        );
        log::error!("journal: a change this process encoded does not decode; not queued");
    }
}

impl Drop for JournalWriter {
    fn drop(&mut self) {
        if let Err(e) = self.commit().and_then(|()| self.sync()) {
            log::error!("journal of worker {} at close: {e}", self.worker);
        }
        self.close_file();
        self.shared.writers.fetch_sub(1, Ordering::AcqRel);
        self.shared.wake.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_records(path: &Path, records: &[(u64, &[u8])]) -> Vec<u8> {
        let mut all = Vec::new();
        for (seq, payload) in records {
            let mut r = vec![0; HEADER];
            r.extend_from_slice(payload);
            seal(&mut r, *seq);
            all.extend_from_slice(&r);
        }
        std::fs::write(path, &all).unwrap();
        all
    }

    fn read(path: &Path) -> (Vec<(u64, Vec<u8>)>, ScanEnd) {
        let mut got = Vec::new();
        let end = scan(path, &mut |s, p| got.push((s, p.to_vec()))).unwrap();
        (got, end)
    }

    #[test]
    fn the_floor_round_trips_and_a_damaged_one_is_an_error() {
        let dir = tempdir();
        assert!(read_floor(&dir).unwrap().is_empty());
        let floor = [(0u32, 17u64), (3, 1_800_000_000_000_000)]
            .into_iter()
            .collect();
        write_floor(&dir, &floor).unwrap();
        assert_eq!(read_floor(&dir).unwrap(), floor);
        for bad in [
            "w0 x\n",
            "0 5\n",
            "w0 18446744073709551615\n",
            "w0 9223372036854775807\n",
            "w0\n",
        ] {
            std::fs::write(dir.join(FLOOR_FILE), bad).unwrap();
            assert!(read_floor(&dir).is_err(), "{bad:?}");
        }
        std::fs::write(dir.join(FLOOR_FILE), vec![b'w'; 100 << 10]).unwrap();
        assert!(read_floor(&dir).is_err());
    }

    #[test]
    fn names_round_trip() {
        let n = segment_name(3, 42);
        assert_eq!(n, "w0003-00000000000000000042.log");
        assert_eq!(parse_segment_name(&n), Some((3, 42)));
        assert_eq!(parse_segment_name("w1-2.tmp"), None);
        assert_eq!(parse_segment_name("x1-2.log"), None);
    }

    #[test]
    fn whole_records_are_read_back() {
        let dir = tempdir();
        let p = dir.join("a.log");
        write_records(&p, &[(1, b"one"), (2, b""), (5, b"three")]);
        let (got, end) = read(&p);
        assert_eq!(got.len(), 3);
        assert_eq!(got[2], (5, b"three".to_vec()));
        assert!(!end.torn());
        assert_eq!((end.last_seq, end.records), (5, 3));
    }

    #[test]
    fn a_torn_tail_is_skipped_at_every_cut() {
        let dir = tempdir();
        let p = dir.join("a.log");
        let all = write_records(&p, &[(1, b"first record"), (2, b"second record")]);
        let first_len = HEADER + 12;
        for cut in first_len + 1..all.len() {
            std::fs::write(&p, &all[..cut]).unwrap();
            let (got, end) = read(&p);
            assert_eq!(got.len(), 1, "cut at {cut}");
            assert!(end.torn());
            assert_eq!(end.valid_bytes, first_len as u64);
        }
    }

    #[test]
    fn a_damaged_record_ends_the_scan() {
        let dir = tempdir();
        let p = dir.join("a.log");
        let mut all = write_records(&p, &[(1, b"aaaa"), (2, b"bbbb")]);
        let last = all.len() - 1;
        all[last] ^= 0xff;
        std::fs::write(&p, &all).unwrap();
        let (got, end) = read(&p);
        assert_eq!(got.len(), 1);
        assert!(end.torn());
        // A length field beyond any sane record is damage too, not an allocation.
        let mut bad = vec![0xff; HEADER];
        bad.extend_from_slice(b"xx");
        std::fs::write(&p, &bad).unwrap();
        assert_eq!(read(&p).0.len(), 0);
    }

    pub(crate) fn tempdir() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "hotpath-journal-test-{}-{}",
            std::process::id(),
            fastrand::u64(..)
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}
