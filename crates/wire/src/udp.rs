//! The UDP tracker protocol (BEP 15) with URL data options (BEP 41): requests parsed in place,
//! responses appended to a reused buffer, and the client side for the load generator and tests.
//!
//! All integers are big-endian. An error answer is never longer than the request it answers, so
//! the tracker cannot be used to amplify traffic towards a forged source address.

use crate::query::{Event, Id20};

/// The magic `protocol_id` of a connect request.
pub const PROTOCOL_ID: u64 = 0x0417_2710_1980;
/// Action: connect.
pub const ACTION_CONNECT: u32 = 0;
/// Action: announce.
pub const ACTION_ANNOUNCE: u32 = 1;
/// Action: scrape.
pub const ACTION_SCRAPE: u32 = 2;
/// Action: error.
pub const ACTION_ERROR: u32 = 3;
/// Most info hashes in one UDP scrape (what fits in a 1500-byte datagram, per BEP 15).
pub const MAX_SCRAPE_HASHES: usize = 74;
/// Bytes of an announce request before any BEP 41 options.
pub const ANNOUNCE_LEN: usize = 98;

/// A UDP announce request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnnounceRequest<'a> {
    /// The connection id the client got from a connect.
    pub connection_id: u64,
    /// The client's transaction id, echoed back.
    pub transaction_id: u32,
    /// The torrent.
    pub info_hash: Id20,
    /// The client's peer id.
    pub peer_id: Id20,
    /// Bytes downloaded so far.
    pub downloaded: u64,
    /// Bytes left (0 = seeder).
    pub left: u64,
    /// Bytes uploaded so far.
    pub uploaded: u64,
    /// The event.
    pub event: Event,
    /// The IPv4 address field (0 = use the sender's; others are ignored by hotpath).
    pub ip: u32,
    /// The client's key.
    pub key: u32,
    /// Peers wanted; negative means the default.
    pub num_want: i32,
    /// The port the client listens on.
    pub port: u16,
    /// BEP 41 options following the fixed part (already checked to be well-formed).
    pub options: Options<'a>,
}

/// A UDP request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request<'a> {
    /// Connect: asks for a connection id.
    Connect {
        /// Echoed back.
        transaction_id: u32,
    },
    /// Announce.
    Announce(AnnounceRequest<'a>),
    /// Scrape of 1 to 74 info hashes.
    Scrape {
        /// From a connect.
        connection_id: u64,
        /// Echoed back.
        transaction_id: u32,
        /// The info hashes, 20 bytes each, back to back.
        info_hashes: &'a [u8],
    },
}

/// Why a datagram is not a valid request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// Not worth an answer (too short to carry a transaction id, or a connect without the
    /// magic): drop it silently.
    Drop,
    /// Answer with an error carrying this transaction id and message.
    Error {
        /// The request's transaction id.
        transaction_id: u32,
        /// The message to send.
        message: &'static str,
    },
}

fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_be_bytes([b[i], b[i + 1]])
}
fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_be_bytes(b[i..i + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], i: usize) -> u64 {
    u64::from_be_bytes(b[i..i + 8].try_into().expect("8 bytes"))
}
fn id_at(b: &[u8], i: usize) -> Id20 {
    b[i..i + 20].try_into().expect("20 bytes")
}

/// Parses one datagram.
pub fn parse_request(b: &[u8]) -> Result<Request<'_>, ParseError> {
    if b.len() < 16 {
        return Err(ParseError::Drop);
    }
    let connection_id = u64_at(b, 0);
    let action = u32_at(b, 8);
    let transaction_id = u32_at(b, 12);
    let err = |message| ParseError::Error {
        transaction_id,
        message,
    };
    match action {
        ACTION_CONNECT => {
            if connection_id != PROTOCOL_ID {
                return Err(ParseError::Drop);
            }
            Ok(Request::Connect { transaction_id })
        }
        ACTION_ANNOUNCE => {
            if b.len() < ANNOUNCE_LEN {
                return Err(err("malformed announce"));
            }
            let event = match u32_at(b, 80) {
                0 => Event::None,
                1 => Event::Completed,
                2 => Event::Started,
                3 => Event::Stopped,
                4 => Event::Paused,
                _ => return Err(err("unknown event")),
            };
            let port = u16_at(b, 96);
            if port == 0 {
                return Err(err("invalid port"));
            }
            let options = Options(&b[ANNOUNCE_LEN..]);
            if !options.well_formed() {
                return Err(err("malformed options"));
            }
            Ok(Request::Announce(AnnounceRequest {
                connection_id,
                transaction_id,
                info_hash: id_at(b, 16),
                peer_id: id_at(b, 36),
                downloaded: u64_at(b, 56),
                left: u64_at(b, 64),
                uploaded: u64_at(b, 72),
                event,
                ip: u32_at(b, 84),
                key: u32_at(b, 88),
                num_want: u32_at(b, 92) as i32,
                port,
                options,
            }))
        }
        ACTION_SCRAPE => {
            let hashes = &b[16..];
            if hashes.is_empty() || !hashes.len().is_multiple_of(20) {
                return Err(err("malformed scrape"));
            }
            if hashes.len() / 20 > MAX_SCRAPE_HASHES {
                return Err(err("too many info hashes in one scrape"));
            }
            Ok(Request::Scrape {
                connection_id,
                transaction_id,
                info_hashes: hashes,
            })
        }
        _ => Err(err("unknown action")),
    }
}

/// BEP 41 options: `EndOfOptions` (0), `NOP` (1), `URLData` (2, length byte, data); any other
/// type carries a length byte and is skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options<'a>(pub &'a [u8]);

impl<'a> Options<'a> {
    /// Iterates `(type, data)` of the options, stopping at EndOfOptions or at a malformed one.
    pub fn iter(&self) -> impl Iterator<Item = Result<(u8, &'a [u8]), ()>> + 'a {
        let mut rest = self.0;
        std::iter::from_fn(move || loop {
            let (&kind, tail) = rest.split_first()?;
            match kind {
                0 => {
                    rest = &[];
                    return None;
                }
                1 => rest = tail,
                _ => {
                    let Some((&len, tail)) = tail.split_first() else {
                        rest = &[];
                        return Some(Err(()));
                    };
                    let len = usize::from(len);
                    if tail.len() < len {
                        rest = &[];
                        return Some(Err(()));
                    }
                    rest = &tail[len..];
                    return Some(Ok((kind, &tail[..len])));
                }
            }
        })
    }

    fn well_formed(&self) -> bool {
        self.iter().all(|o| o.is_ok())
    }

    /// The URL data (BEP 41 type 2) joined, i.e. the path and query of the tracker URL.
    pub fn url_data(&self, out: &mut Vec<u8>) {
        out.clear();
        for (kind, data) in self.iter().flatten() {
            if kind == 2 {
                out.extend_from_slice(data);
            }
        }
    }
}

/// Appends a connect response.
pub fn write_connect(out: &mut Vec<u8>, transaction_id: u32, connection_id: u64) {
    out.extend_from_slice(&ACTION_CONNECT.to_be_bytes());
    out.extend_from_slice(&transaction_id.to_be_bytes());
    out.extend_from_slice(&connection_id.to_be_bytes());
}

/// Appends an announce response header; the caller appends the peers (6 bytes each for IPv4,
/// 18 for IPv6) right after it.
pub fn write_announce_head(
    out: &mut Vec<u8>,
    transaction_id: u32,
    interval: u32,
    leechers: u32,
    seeders: u32,
) {
    out.extend_from_slice(&ACTION_ANNOUNCE.to_be_bytes());
    out.extend_from_slice(&transaction_id.to_be_bytes());
    out.extend_from_slice(&interval.to_be_bytes());
    out.extend_from_slice(&leechers.to_be_bytes());
    out.extend_from_slice(&seeders.to_be_bytes());
}

/// Appends a scrape response header; the caller appends one entry per hash with
/// [`write_scrape_entry`].
pub fn write_scrape_head(out: &mut Vec<u8>, transaction_id: u32) {
    out.extend_from_slice(&ACTION_SCRAPE.to_be_bytes());
    out.extend_from_slice(&transaction_id.to_be_bytes());
}

/// Appends one scrape entry.
pub fn write_scrape_entry(out: &mut Vec<u8>, seeders: u32, completed: u32, leechers: u32) {
    out.extend_from_slice(&seeders.to_be_bytes());
    out.extend_from_slice(&completed.to_be_bytes());
    out.extend_from_slice(&leechers.to_be_bytes());
}

/// Appends an error response, its message cut so the answer is at most `max_len` bytes (pass
/// the request's length: no amplification).
pub fn write_error(out: &mut Vec<u8>, transaction_id: u32, message: &str, max_len: usize) {
    out.extend_from_slice(&ACTION_ERROR.to_be_bytes());
    out.extend_from_slice(&transaction_id.to_be_bytes());
    let room = max_len.saturating_sub(8);
    let msg = message.as_bytes();
    out.extend_from_slice(&msg[..msg.len().min(room)]);
}

/// Appends a connect request (client side).
pub fn write_connect_request(out: &mut Vec<u8>, transaction_id: u32) {
    out.extend_from_slice(&PROTOCOL_ID.to_be_bytes());
    out.extend_from_slice(&ACTION_CONNECT.to_be_bytes());
    out.extend_from_slice(&transaction_id.to_be_bytes());
}

/// Appends an announce request (client side), with its options' raw bytes.
pub fn write_announce_request(out: &mut Vec<u8>, a: &AnnounceRequest<'_>) {
    out.extend_from_slice(&a.connection_id.to_be_bytes());
    out.extend_from_slice(&ACTION_ANNOUNCE.to_be_bytes());
    out.extend_from_slice(&a.transaction_id.to_be_bytes());
    out.extend_from_slice(&a.info_hash);
    out.extend_from_slice(&a.peer_id);
    out.extend_from_slice(&a.downloaded.to_be_bytes());
    out.extend_from_slice(&a.left.to_be_bytes());
    out.extend_from_slice(&a.uploaded.to_be_bytes());
    let event: u32 = match a.event {
        Event::None => 0,
        Event::Completed => 1,
        Event::Started => 2,
        Event::Stopped => 3,
        Event::Paused => 4,
    };
    out.extend_from_slice(&event.to_be_bytes());
    out.extend_from_slice(&a.ip.to_be_bytes());
    out.extend_from_slice(&a.key.to_be_bytes());
    out.extend_from_slice(&a.num_want.to_be_bytes());
    out.extend_from_slice(&a.port.to_be_bytes());
    out.extend_from_slice(a.options.0);
}

/// Appends a scrape request (client side).
pub fn write_scrape_request(
    out: &mut Vec<u8>,
    connection_id: u64,
    transaction_id: u32,
    hashes: &[Id20],
) {
    out.extend_from_slice(&connection_id.to_be_bytes());
    out.extend_from_slice(&ACTION_SCRAPE.to_be_bytes());
    out.extend_from_slice(&transaction_id.to_be_bytes());
    for h in hashes {
        out.extend_from_slice(h);
    }
}

/// A response (client side).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response<'a> {
    /// Connect answer.
    Connect {
        /// Echoed.
        transaction_id: u32,
        /// To use in announces and scrapes.
        connection_id: u64,
    },
    /// Announce answer.
    Announce {
        /// Echoed.
        transaction_id: u32,
        /// Seconds until the next announce.
        interval: u32,
        /// Leechers in the swarm.
        leechers: u32,
        /// Seeders in the swarm.
        seeders: u32,
        /// Peers, 6 or 18 bytes each.
        peers: &'a [u8],
    },
    /// Scrape answer: 12 bytes per hash (seeders, completed, leechers).
    Scrape {
        /// Echoed.
        transaction_id: u32,
        /// The entries.
        entries: &'a [u8],
    },
    /// Error answer.
    Error {
        /// Echoed.
        transaction_id: u32,
        /// The message.
        message: &'a [u8],
    },
}

/// Parses a response datagram (client side).
pub fn parse_response(b: &[u8]) -> Result<Response<'_>, &'static str> {
    if b.len() < 8 {
        return Err("response too short");
    }
    let transaction_id = u32_at(b, 4);
    match u32_at(b, 0) {
        ACTION_CONNECT if b.len() >= 16 => Ok(Response::Connect {
            transaction_id,
            connection_id: u64_at(b, 8),
        }),
        ACTION_ANNOUNCE if b.len() >= 20 => Ok(Response::Announce {
            transaction_id,
            interval: u32_at(b, 8),
            leechers: u32_at(b, 12),
            seeders: u32_at(b, 16),
            peers: &b[20..],
        }),
        ACTION_SCRAPE if (b.len() - 8).is_multiple_of(12) => Ok(Response::Scrape {
            transaction_id,
            entries: &b[8..],
        }),
        ACTION_ERROR => Ok(Response::Error {
            transaction_id,
            message: &b[8..],
        }),
        _ => Err("malformed response"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn announce(options: &[u8]) -> AnnounceRequest<'_> {
        AnnounceRequest {
            connection_id: 7,
            transaction_id: 9,
            info_hash: [1; 20],
            peer_id: [2; 20],
            downloaded: 3,
            left: 4,
            uploaded: 5,
            event: Event::Started,
            ip: 0,
            key: 6,
            num_want: -1,
            port: 6881,
            options: Options(options),
        }
    }

    #[test]
    fn connect_round_trip() {
        let mut b = Vec::new();
        write_connect_request(&mut b, 42);
        assert_eq!(
            parse_request(&b),
            Ok(Request::Connect { transaction_id: 42 })
        );
        b[0] ^= 1;
        assert_eq!(parse_request(&b), Err(ParseError::Drop));
    }

    #[test]
    fn announce_round_trip_with_url_data() {
        let opts = [
            2, 5, b'/', b'a', b'n', b'n', b'o', 1, 2, 3, b'?', b'x', b'y', 0, 9, 9,
        ];
        let a = announce(&opts);
        let mut b = Vec::new();
        write_announce_request(&mut b, &a);
        let Ok(Request::Announce(parsed)) = parse_request(&b) else {
            panic!("announce")
        };
        assert_eq!(parsed, a);
        let mut path = Vec::new();
        parsed.options.url_data(&mut path);
        assert_eq!(path, b"/anno?xy");
    }

    #[test]
    fn bad_packets() {
        assert_eq!(parse_request(&[0; 15]), Err(ParseError::Drop));
        let mut b = Vec::new();
        write_announce_request(&mut b, &announce(&[2, 10, b'x']));
        assert_eq!(
            parse_request(&b),
            Err(ParseError::Error {
                transaction_id: 9,
                message: "malformed options"
            })
        );
        let mut b = Vec::new();
        write_announce_request(&mut b, &announce(&[]));
        b.truncate(97);
        assert_eq!(
            parse_request(&b),
            Err(ParseError::Error {
                transaction_id: 9,
                message: "malformed announce"
            })
        );
        let mut b = Vec::new();
        write_scrape_request(&mut b, 1, 2, &[[0; 20]; 75]);
        assert!(matches!(parse_request(&b), Err(ParseError::Error { .. })));
        let mut b = Vec::new();
        write_scrape_request(&mut b, 1, 2, &[]);
        assert!(matches!(parse_request(&b), Err(ParseError::Error { .. })));
        let mut b = vec![0; 16];
        b[11] = 9;
        assert!(matches!(
            parse_request(&b),
            Err(ParseError::Error {
                message: "unknown action",
                ..
            })
        ));
    }

    #[test]
    fn error_never_amplifies() {
        let mut out = Vec::new();
        write_error(&mut out, 1, "a long message that would not fit", 16);
        assert_eq!(out.len(), 16);
        assert_eq!(
            parse_response(&out),
            Ok(Response::Error {
                transaction_id: 1,
                message: b"a long m"
            })
        );
    }

    proptest! {
        #[test]
        fn never_panics(input in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok(Request::Announce(a)) = parse_request(&input) {
                let mut v = Vec::new();
                a.options.url_data(&mut v);
            }
            let _ = parse_response(&input);
        }
    }
}
