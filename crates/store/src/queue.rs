//! The seam between the store and the services that write through it: a service declares its
//! journal tags, its tables and its merge queue ([`Service`]); its changes reach the journal
//! through [`Encode`] and come back out of it, at commit and at replay, through its
//! [`Queue::apply`]. The store holds one queue per service ([`Queues`]) and never names one.
//!
//! Owns: [`Encode`], [`Queue`], [`Service`], [`Queues`]. Must not: do I/O.

use std::any::Any;

use hashbrown::HashMap;

use crate::batch::Batch;
use crate::migrations::Migration;
use crate::table::{Rows, Table};

/// A change as the journal holds it: a tag byte the change's [`Service`] owns, then what its
/// queue's [`Queue::apply`] reads back.
pub trait Encode {
    /// Bytes of the encoding, tag included.
    fn encoded_len(&self) -> usize;
    /// Appends the encoding to `out`.
    fn encode(&self, out: &mut Vec<u8>);
}

/// Every change of a record's payload, by one service's decoder (which returns a change and
/// its length); `None` when any part of it is not that service's.
pub fn decode_all<T>(
    mut payload: &[u8],
    decode: impl Fn(&[u8]) -> Option<(T, usize)>,
) -> Option<Vec<T>> {
    let mut out = Vec::new();
    while !payload.is_empty() {
        let (change, len) = decode(payload)?;
        out.push(change);
        payload = payload.get(len..).filter(|_| len > 0)?;
    }
    Some(out)
}

/// At most `max` bytes of `s`, cut at a character boundary: for an encoder whose lengths are
/// bounded (callers refuse longer strings before).
pub fn cut(s: &str, max: usize) -> &[u8] {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s.as_bytes()[..end]
}

/// A service's merge queue: its changes, merged per key, until the flusher takes them.
pub trait Queue: Send + 'static {
    /// Decodes the change at the start of `bytes` (whose first byte is one of the service's
    /// tags) and merges it in. Returns the change's length; `None` when the bytes are not a
    /// change of this service (a damaged or foreign record), leaving the queue as it was.
    fn apply(&mut self, bytes: &[u8]) -> Option<usize>;
    /// Distinct rows held.
    fn rows(&self) -> usize;
    /// Empties the queue into rows per table, each sorted by key and merged (one row per
    /// key). Called off the workers' lock: the flusher swaps the queue out first.
    fn take(&mut self) -> Vec<Rows>;
    /// An empty queue sized like this one, so the next interval's changes merge without the
    /// maps growing on the workers' commits.
    fn empty_like(&self) -> Box<dyn Queue>;
    /// For a service's own reads of its queue ([`crate::Store::overlay`]).
    fn as_any(&self) -> &dyn Any;
}

/// A service as the store knows it.
pub struct Service {
    /// For logs and errors.
    pub name: &'static str,
    /// The first bytes of its changes' encodings; no two services share one.
    pub tags: &'static [u8],
    /// Every table its queue writes.
    pub tables: &'static [&'static Table],
    /// Its schema, version 1 first (see [`crate::migrations`]); its name keys them.
    pub migrations: &'static [Migration],
    /// A new, empty queue (a closure, so a service whose tables the config names can make
    /// queues that write them).
    pub queue: &'static (dyn Fn() -> Box<dyn Queue> + Send + Sync),
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("name", &self.name)
            .field("tags", &self.tags)
            .finish()
    }
}

/// Every service's queue, and how far each worker's journal they cover.
pub struct Queues {
    queues: Vec<Box<dyn Queue>>,
    /// Per tag byte, the index of its queue + 1 (0: no service owns it).
    by_tag: [u8; 256],
    /// Per journal (worker), the last record sequence merged here.
    seqs: HashMap<u32, u64>,
    /// Changes merged since the last take (for the metrics).
    changes: u64,
}

impl std::fmt::Debug for Queues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queues")
            .field("queues", &self.queues.len())
            .field("rows", &self.rows())
            .field("changes", &self.changes)
            .finish()
    }
}

impl Queues {
    /// One queue per service. Fails when two services share a name or claim one tag.
    pub fn new(services: &[&'static Service]) -> Result<Queues, String> {
        if services.len() >= 255 {
            return Err("more than 254 services".into());
        }
        let mut by_tag = [0u8; 256];
        for (i, s) in services.iter().enumerate() {
            if services[..i].iter().any(|o| o.name == s.name) {
                return Err(format!("two services are named {}", s.name));
            }
            if let Some(t) = s.tables.iter().find(|t| t.update_only && t.keys() == 0) {
                return Err(format!(
                    "service {}: table {} is update-only but has no key",
                    s.name, t.name
                ));
            }
            for &tag in s.tags {
                if by_tag[usize::from(tag)] != 0 {
                    let other = services[usize::from(by_tag[usize::from(tag)]) - 1].name;
                    return Err(format!(
                        "services {other} and {} both claim journal tag {tag}",
                        s.name
                    ));
                }
                by_tag[usize::from(tag)] = i as u8 + 1;
            }
        }
        Ok(Queues {
            queues: services.iter().map(|s| (s.queue)()).collect(),
            by_tag,
            seqs: HashMap::new(),
            changes: 0,
        })
    }

    /// Merges every change of a journal record's payload. `None` at the first byte no
    /// service's queue reads (what came before it stays merged).
    pub fn apply(&mut self, mut payload: &[u8]) -> Option<()> {
        while let Some(&tag) = payload.first() {
            let i = usize::from(self.by_tag[usize::from(tag)]).checked_sub(1)?;
            let len = self.queues[i].apply(payload)?;
            if len == 0 || len > payload.len() {
                return None;
            }
            self.changes += 1;
            payload = &payload[len..];
        }
        Some(())
    }

    /// Merges one change through its encoding, as a commit would (tests, tools). `None` when
    /// no service's queue reads it back.
    pub fn push(&mut self, change: &dyn Encode) -> Option<()> {
        let mut bytes = Vec::with_capacity(change.encoded_len());
        change.encode(&mut bytes);
        self.apply(&bytes)
    }

    /// Records that journal `journal` is merged up to record `seq`.
    pub fn covered(&mut self, journal: u32, seq: u64) {
        let s = self.seqs.entry(journal).or_insert(0);
        *s = (*s).max(seq);
    }

    /// Distinct rows held.
    pub fn rows(&self) -> usize {
        self.queues.iter().map(|q| q.rows()).sum()
    }

    /// The queue of type `Q`, if a service has one.
    pub fn get<Q: Queue>(&self) -> Option<&Q> {
        self.queues
            .iter()
            .find_map(|q| q.as_any().downcast_ref::<Q>())
    }

    /// Empty queues sized like these (see [`Queue::empty_like`]).
    pub fn empty_like(&self) -> Queues {
        Queues {
            queues: self.queues.iter().map(|q| q.empty_like()).collect(),
            by_tag: self.by_tag,
            seqs: HashMap::with_capacity(self.seqs.len()),
            changes: 0,
        }
    }

    /// Empties the queues into a batch sorted by key.
    pub fn take(&mut self) -> Batch {
        let mut b = Batch {
            parts: Vec::new(),
            seqs: self.seqs.drain().collect(),
            changes: std::mem::take(&mut self.changes),
        };
        b.seqs.sort_unstable();
        for q in &mut self.queues {
            for rows in q.take() {
                b.push(rows);
            }
        }
        b
    }
}

/// Every table `services` write.
pub fn tables(services: &[&'static Service]) -> Vec<&'static Table> {
    services
        .iter()
        .flat_map(|s| s.tables.iter().copied())
        .collect()
}
