//! WebSocket connections' shared parts: the settings the server enforces on them (from
//! `[webtorrent]`), and each worker's inbox of messages relayed to its connections from the
//! others (an offer from a peer on one worker to a peer on another).

use std::sync::Arc;

use hotpath_service::WsConn;
use mio::Waker;
use parking_lot::Mutex;

/// The bounds the server holds WebSocket connections to.
#[derive(Debug, Clone)]
pub struct WsSettings {
    /// The longest frame's payload.
    pub max_frame: usize,
    /// The longest message, its fragments joined.
    pub max_message: usize,
    /// Unsent bytes a connection may hold.
    pub max_output: usize,
    /// Seconds of silence before a close (a ping goes out after half).
    pub idle_secs: u32,
    /// Seconds sent bytes may wait unread.
    pub send_timeout_secs: u32,
}

impl WsSettings {
    /// The settings of `c`.
    pub fn of(c: &hotpath_config::WebTorrentConfig) -> WsSettings {
        WsSettings {
            max_frame: c.max_frame_bytes,
            max_message: c.max_message_bytes,
            max_output: c.max_output_bytes,
            idle_secs: c.idle_timeout_secs,
            send_timeout_secs: c.send_timeout_secs,
        }
    }
}

/// Bytes of a record's head in an inbox: slot, serial and length, 4 bytes each.
const RECORD_HEAD: usize = 12;

/// Every worker's inbox. A record is (slot, serial, length, text); the receiving worker
/// frames the text for its connection, if that connection is still the one named.
pub struct WsHub {
    inboxes: Box<[Mutex<Vec<u8>>]>,
    wakers: Vec<Arc<Waker>>,
    /// Bytes one inbox may hold; past it relays are dropped (counted by the sender).
    max_inbox: usize,
}

impl WsHub {
    /// Inboxes for the workers whose wakers these are.
    pub fn new(wakers: Vec<Arc<Waker>>, max_inbox: usize) -> WsHub {
        WsHub {
            inboxes: wakers.iter().map(|_| Mutex::new(Vec::new())).collect(),
            wakers,
            max_inbox,
        }
    }

    /// Puts `text` in the inbox of `to`'s worker, waking it when `from` is another worker
    /// and the inbox was empty; false when it is full (or names no worker).
    pub fn push(&self, from: usize, to: WsConn, text: &[u8]) -> bool {
        let w = usize::from(to.worker);
        let Some(inbox) = self.inboxes.get(w) else {
            return false;
        };
        let was_empty = {
            let mut b = inbox.lock();
            if b.len() + RECORD_HEAD + text.len() > self.max_inbox {
                return false;
            }
            let was_empty = b.is_empty();
            b.extend_from_slice(&to.slot.to_le_bytes());
            b.extend_from_slice(&to.serial.to_le_bytes());
            b.extend_from_slice(&(text.len() as u32).to_le_bytes());
            b.extend_from_slice(text);
            was_empty
        };
        if was_empty && w != from {
            if let Err(e) = self.wakers[w].wake() {
                log::error!("worker {w}: cannot wake: {e}");
            }
        }
        true
    }

    /// Swaps worker `index`'s inbox with `into` (cleared first): the records to deliver.
    pub fn take(&self, index: usize, into: &mut Vec<u8>) {
        into.clear();
        if let Some(inbox) = self.inboxes.get(index) {
            let mut b = inbox.lock();
            if !b.is_empty() {
                std::mem::swap(&mut *b, into);
            }
        }
    }
}

/// The records of an inbox taken with [`WsHub::take`]: (slot, serial, text).
pub fn records(buf: &[u8]) -> impl Iterator<Item = (u32, u32, &[u8])> {
    let mut at = 0;
    std::iter::from_fn(move || {
        let head = buf.get(at..at + RECORD_HEAD)?;
        let word = |i: usize| u32::from_le_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]);
        let (slot, serial, len) = (word(0), word(4), word(8) as usize);
        let text = buf.get(at + RECORD_HEAD..at + RECORD_HEAD + len)?;
        at += RECORD_HEAD + len;
        Some((slot, serial, text))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_the_inbox_is_bounded() {
        let poll = mio::Poll::new().unwrap();
        let waker = Arc::new(Waker::new(poll.registry(), mio::Token(0)).unwrap());
        let hub = WsHub::new(vec![waker.clone(), waker], 64);
        let to = |slot| WsConn {
            worker: 1,
            slot,
            serial: slot + 100,
        };
        assert!(hub.push(0, to(1), b"hello"));
        assert!(hub.push(0, to(2), b""));
        assert!(!hub.push(0, to(3), &[0; 40]));
        assert!(!hub.push(0, WsConn { worker: 9, ..to(1) }, b"x"));
        let mut got = Vec::new();
        hub.take(1, &mut got);
        let r: Vec<_> = records(&got).collect();
        assert_eq!(r, vec![(1, 101, &b"hello"[..]), (2, 102, &b""[..])]);
        hub.take(1, &mut got);
        assert!(got.is_empty());
    }
}
