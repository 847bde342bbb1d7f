//! WebTorrent tracker messages (the JSON that `bittorrent-tracker`'s WebSocket client and
//! server speak): what a client sends (an announce with offers, an answer to an offer, a
//! scrape), parsed with serde; what the tracker sends back, written with serde.
//!
//! `info_hash`, `peer_id`, `offer_id` and `to_peer_id` travel as 20-character strings whose
//! code points are the bytes (0-255): read into `[u8; 20]`, written back the same way.

use std::borrow::Cow;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};

/// A 20-byte id (info hash, peer id, offer id) as the JSON carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Id(pub [u8; 20]);

impl Id {
    /// Reads a 20-character string of code points 0-255, as the JSON carries an id.
    pub fn from_text(s: &str) -> Option<Id> {
        id_of(s)
    }
}

/// Reads a 20-character string of code points 0-255.
fn id_of(s: &str) -> Option<Id> {
    let mut out = [0u8; 20];
    let mut n = 0;
    for c in s.chars() {
        let b = u8::try_from(u32::from(c)).ok()?;
        *out.get_mut(n)? = b;
        n += 1;
    }
    (n == 20).then_some(Id(out))
}

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Id, D::Error> {
        let s = Cow::<str>::deserialize(d)?;
        id_of(&s)
            .ok_or_else(|| de::Error::custom("an id must be 20 characters of code points 0-255"))
    }
}

impl Serialize for Id {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut text = String::with_capacity(40);
        text.extend(self.0.iter().map(|&b| char::from(b)));
        s.serialize_str(&text)
    }
}

/// One info hash or a list of them (a scrape's `info_hash`).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Hashes(pub Vec<Id>);

/// The most info hashes a scrape may name; more are refused ([`MessageError`]).
pub const MAX_SCRAPE_HASHES: usize = 255;

impl<'de> Deserialize<'de> for Hashes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Hashes, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Hashes;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an info hash or a list of them")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Hashes, E> {
                id_of(s)
                    .map(|id| Hashes(vec![id]))
                    .ok_or_else(|| E::custom("an info hash must be 20 characters"))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Hashes, A::Error> {
                let mut v = Vec::new();
                while let Some(id) = seq.next_element::<Id>()? {
                    if v.len() == MAX_SCRAPE_HASHES {
                        return Err(de::Error::custom("too many info hashes in one scrape"));
                    }
                    v.push(id);
                }
                Ok(Hashes(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// A session description (`{"type": "offer", "sdp": "…"}`), relayed as it came.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct Sdp<'a> {
    /// `offer` or `answer`.
    #[serde(rename = "type", borrow)]
    pub kind: Cow<'a, str>,
    /// The description itself.
    #[serde(borrow)]
    pub sdp: Cow<'a, str>,
}

/// One offer of an announce.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Offer<'a> {
    /// Its id, which the answer names.
    pub offer_id: Id,
    /// The description.
    #[serde(borrow)]
    pub offer: Sdp<'a>,
}

/// The `event` of an announce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// None (a regular announce, `update`, or an answer).
    None,
    /// `started`.
    Started,
    /// `stopped`.
    Stopped,
    /// `completed`.
    Completed,
    /// `paused`: still in the swarm, not downloading (BEP 21's partial seed).
    Paused,
}

impl<'de> Deserialize<'de> for Event {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Event, D::Error> {
        let s = Cow::<str>::deserialize(d)?;
        Ok(match &*s {
            "" | "update" | "empty" => Event::None,
            "started" => Event::Started,
            "stopped" => Event::Stopped,
            "completed" => Event::Completed,
            "paused" => Event::Paused,
            _ => return Err(de::Error::custom("unknown event")),
        })
    }
}

/// A number the client sent (JavaScript's: a double, `null` for Infinity), as a count.
fn count<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.map(|f| {
        if f.is_nan() || f <= 0.0 {
            0
        } else if f >= u64::MAX as f64 {
            u64::MAX
        } else {
            f as u64
        }
    }))
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum Action {
    Announce,
    Scrape,
}

/// The fields any message may carry; [`parse`] makes a [`Message`] of them.
#[derive(Deserialize)]
struct Raw<'a> {
    action: Action,
    #[serde(default)]
    info_hash: Option<Hashes>,
    #[serde(default)]
    peer_id: Option<Id>,
    #[serde(default, deserialize_with = "count")]
    numwant: Option<u64>,
    #[serde(default, deserialize_with = "count")]
    uploaded: Option<u64>,
    #[serde(default, deserialize_with = "count")]
    downloaded: Option<u64>,
    #[serde(default, deserialize_with = "count")]
    left: Option<u64>,
    #[serde(default)]
    event: Option<Event>,
    #[serde(default, borrow)]
    offers: Option<Vec<Offer<'a>>>,
    #[serde(default, borrow)]
    answer: Option<Sdp<'a>>,
    #[serde(default)]
    to_peer_id: Option<Id>,
    #[serde(default)]
    offer_id: Option<Id>,
}

/// An announce (with offers to relay, or none).
#[derive(Debug, PartialEq, Eq)]
pub struct Announce<'a> {
    /// The torrent.
    pub info_hash: Id,
    /// The client.
    pub peer_id: Id,
    /// Offers wanted back (not peers: WebTorrent relays offers instead).
    pub numwant: Option<u64>,
    /// Bytes sent.
    pub uploaded: Option<u64>,
    /// Bytes received.
    pub downloaded: Option<u64>,
    /// Bytes still to get (absent or `null`: unknown).
    pub left: Option<u64>,
    /// The event.
    pub event: Event,
    /// Offers for other peers (bounded by the caller).
    pub offers: Vec<Offer<'a>>,
}

/// An answer to an offer, for the peer that made it.
#[derive(Debug, PartialEq, Eq)]
pub struct Answer<'a> {
    /// The torrent.
    pub info_hash: Id,
    /// The answering client.
    pub peer_id: Id,
    /// The offering client.
    pub to_peer_id: Id,
    /// The offer answered.
    pub offer_id: Id,
    /// The description.
    pub answer: Sdp<'a>,
}

/// A message from a client.
#[derive(Debug, PartialEq, Eq)]
pub enum Message<'a> {
    /// An announce.
    Announce(Announce<'a>),
    /// An answer (an `announce` action with `answer` set).
    Answer(Answer<'a>),
    /// A scrape of these hashes.
    Scrape(Vec<Id>),
}

/// Why a message was refused: said to the client in a `failure reason` of the same action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageError {
    /// The action the message asked for, when it could be read (`announce` otherwise, which
    /// the reference client takes without dropping its socket).
    pub action: &'static str,
    /// The info hash, when it could be read (the client matches answers by it).
    pub info_hash: Option<Id>,
    /// What was wrong.
    pub reason: String,
}

/// Parses one text message.
pub fn parse(text: &[u8]) -> Result<Message<'_>, MessageError> {
    let raw: Raw<'_> = serde_json::from_slice(text).map_err(|e| MessageError {
        action: action_of(text),
        info_hash: None,
        reason: format!("malformed message: {}", short(&e.to_string())),
    })?;
    let refuse = |action: &'static str, info_hash: Option<Id>, why: &str| MessageError {
        action,
        info_hash,
        reason: why.to_string(),
    };
    match raw.action {
        Action::Scrape => {
            let hashes = raw.info_hash.map(|h| h.0).unwrap_or_default();
            if hashes.is_empty() {
                return Err(refuse("scrape", None, "a scrape must name its info hashes"));
            }
            Ok(Message::Scrape(hashes))
        }
        Action::Announce => {
            let info_hash = match raw.info_hash.map(|h| h.0) {
                Some(h) if h.len() == 1 => h[0],
                _ => return Err(refuse("announce", None, "info_hash missing or not one")),
            };
            let peer_id = raw
                .peer_id
                .ok_or_else(|| refuse("announce", Some(info_hash), "peer_id missing"))?;
            if let Some(answer) = raw.answer {
                let (Some(to_peer_id), Some(offer_id)) = (raw.to_peer_id, raw.offer_id) else {
                    return Err(refuse(
                        "announce",
                        Some(info_hash),
                        "an answer needs to_peer_id and offer_id",
                    ));
                };
                return Ok(Message::Answer(Answer {
                    info_hash,
                    peer_id,
                    to_peer_id,
                    offer_id,
                    answer,
                }));
            }
            Ok(Message::Announce(Announce {
                info_hash,
                peer_id,
                numwant: raw.numwant,
                uploaded: raw.uploaded,
                downloaded: raw.downloaded,
                left: raw.left,
                event: raw.event.unwrap_or(Event::None),
                offers: raw.offers.unwrap_or_default(),
            }))
        }
    }
}

/// The action of a message that did not parse, read loosely so its error carries it.
fn action_of(text: &[u8]) -> &'static str {
    let scrape = memchr_find(text, b"\"scrape\"");
    if scrape {
        "scrape"
    } else {
        "announce"
    }
}

fn memchr_find(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn short(s: &str) -> &str {
    match s.char_indices().nth(120) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// Counts of a torrent, as an announce response or a scrape gives them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Seeders.
    pub complete: u64,
    /// Leechers.
    pub incomplete: u64,
    /// Completed downloads.
    pub downloaded: u64,
}

/// Appends the answer to an announce.
pub fn write_announce_response(
    out: &mut Vec<u8>,
    info_hash: &Id,
    counts: &Counts,
    interval: u32,
    min_interval: u32,
    warning: Option<&str>,
) {
    #[derive(Serialize)]
    struct R<'a> {
        action: &'static str,
        info_hash: &'a Id,
        complete: u64,
        incomplete: u64,
        interval: u32,
        #[serde(rename = "min interval")]
        min_interval: u32,
        #[serde(rename = "warning message", skip_serializing_if = "Option::is_none")]
        warning: Option<&'a str>,
    }
    let r = R {
        action: "announce",
        info_hash,
        complete: counts.complete,
        incomplete: counts.incomplete,
        interval,
        min_interval,
        warning,
    };
    // Serializing these types into a Vec cannot fail.
    let _ = serde_json::to_writer(out, &r);
}

/// Appends an offer relayed to another peer.
pub fn write_offer(out: &mut Vec<u8>, info_hash: &Id, from: &Id, offer_id: &Id, offer: &Sdp<'_>) {
    #[derive(Serialize)]
    struct R<'a> {
        action: &'static str,
        info_hash: &'a Id,
        peer_id: &'a Id,
        offer_id: &'a Id,
        offer: &'a Sdp<'a>,
    }
    let r = R {
        action: "announce",
        info_hash,
        peer_id: from,
        offer_id,
        offer,
    };
    let _ = serde_json::to_writer(out, &r);
}

/// Appends an answer relayed to the peer whose offer it answers.
pub fn write_answer(out: &mut Vec<u8>, a: &Answer<'_>) {
    #[derive(Serialize)]
    struct R<'a> {
        action: &'static str,
        info_hash: &'a Id,
        peer_id: &'a Id,
        to_peer_id: &'a Id,
        offer_id: &'a Id,
        answer: &'a Sdp<'a>,
    }
    let r = R {
        action: "announce",
        info_hash: &a.info_hash,
        peer_id: &a.peer_id,
        to_peer_id: &a.to_peer_id,
        offer_id: &a.offer_id,
        answer: &a.answer,
    };
    let _ = serde_json::to_writer(out, &r);
}

/// Appends a scrape's answer.
pub fn write_scrape(out: &mut Vec<u8>, files: &[(Id, Counts)]) {
    struct Files<'a>(&'a [(Id, Counts)]);
    impl Serialize for Files<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            #[derive(Serialize)]
            struct C {
                complete: u64,
                incomplete: u64,
                downloaded: u64,
            }
            let mut m = s.serialize_map(Some(self.0.len()))?;
            for (id, c) in self.0 {
                let mut key = String::with_capacity(40);
                key.extend(id.0.iter().map(|&b| char::from(b)));
                m.serialize_entry(
                    &key,
                    &C {
                        complete: c.complete,
                        incomplete: c.incomplete,
                        downloaded: c.downloaded,
                    },
                )?;
            }
            m.end()
        }
    }
    #[derive(Serialize)]
    struct R<'a> {
        action: &'static str,
        files: Files<'a>,
    }
    let _ = serde_json::to_writer(
        out,
        &R {
            action: "scrape",
            files: Files(files),
        },
    );
}

/// Appends an error: a `failure reason` under the message's own action (with its info hash
/// when known), which the reference client reports as a warning and keeps its socket.
pub fn write_error(out: &mut Vec<u8>, action: &str, info_hash: Option<&Id>, reason: &str) {
    #[derive(Serialize)]
    struct R<'a> {
        action: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        info_hash: Option<&'a Id>,
        #[serde(rename = "failure reason")]
        reason: &'a str,
    }
    let _ = serde_json::to_writer(
        out,
        &R {
            action,
            info_hash,
            reason,
        },
    );
}

/// Appends a client's announce: for tests and the load generator.
pub fn write_client_announce(out: &mut Vec<u8>, a: &Announce<'_>) {
    #[derive(Serialize)]
    struct O<'a> {
        offer_id: &'a Id,
        offer: &'a Sdp<'a>,
    }
    #[derive(Serialize)]
    struct R<'a> {
        action: &'static str,
        info_hash: &'a Id,
        peer_id: &'a Id,
        #[serde(skip_serializing_if = "Option::is_none")]
        numwant: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        uploaded: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        downloaded: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        left: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        event: Option<&'static str>,
        offers: Vec<O<'a>>,
    }
    let event = match a.event {
        Event::None => None,
        Event::Started => Some("started"),
        Event::Stopped => Some("stopped"),
        Event::Completed => Some("completed"),
        Event::Paused => Some("paused"),
    };
    let r = R {
        action: "announce",
        info_hash: &a.info_hash,
        peer_id: &a.peer_id,
        numwant: a.numwant,
        uploaded: a.uploaded,
        downloaded: a.downloaded,
        left: a.left,
        event,
        offers: a
            .offers
            .iter()
            .map(|o| O {
                offer_id: &o.offer_id,
                offer: &o.offer,
            })
            .collect(),
    };
    let _ = serde_json::to_writer(out, &r);
}

/// Appends a client's answer: for tests and the load generator.
pub fn write_client_answer(out: &mut Vec<u8>, a: &Answer<'_>) {
    write_answer(out, a);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(b: u8) -> Id {
        let mut v = [b; 20];
        v[0] = 0xff;
        v[1] = 0;
        v[2] = b'"';
        Id(v)
    }

    #[test]
    fn announces_round_trip_with_binary_ids() {
        let a = Announce {
            info_hash: id(1),
            peer_id: id(2),
            numwant: Some(5),
            uploaded: Some(0),
            downloaded: Some(10),
            left: Some(100),
            event: Event::Started,
            offers: vec![Offer {
                offer_id: id(3),
                offer: Sdp {
                    kind: "offer".into(),
                    sdp: "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\n".into(),
                },
            }],
        };
        let mut out = Vec::new();
        write_client_announce(&mut out, &a);
        assert_eq!(parse(&out).unwrap(), Message::Announce(a));
    }

    #[test]
    fn the_reference_clients_messages_parse() {
        // As bittorrent-tracker's client sends them: `left` may be null (Infinity), numbers
        // may be doubles, an answer carries no event.
        let ih = "\\u0000\u{ff}aaaaaaaaaaaaaaaaaa";
        let pid = "-WW0210-abcdefghijkl";
        let m = format!(
            r#"{{"numwant":50,"uploaded":0,"downloaded":1.5,"left":null,"event":"started","action":"announce","info_hash":"{ih}","peer_id":"{pid}","offers":[]}}"#
        );
        let Message::Announce(a) = parse(m.as_bytes()).unwrap() else {
            panic!()
        };
        assert_eq!(a.left, None);
        assert_eq!(a.downloaded, Some(1));
        assert_eq!(a.info_hash.0[1], 0xff);
        let m = format!(
            r#"{{"action":"announce","info_hash":"{ih}","peer_id":"{pid}","to_peer_id":"{pid}","answer":{{"type":"answer","sdp":"x"}},"offer_id":"{pid}"}}"#
        );
        assert!(matches!(parse(m.as_bytes()), Ok(Message::Answer(_))));
        let m = format!(r#"{{"action":"scrape","info_hash":["{ih}","{ih}"]}}"#);
        assert!(matches!(parse(m.as_bytes()), Ok(Message::Scrape(v)) if v.len() == 2));
    }

    #[test]
    fn refusals_carry_the_action() {
        let e = parse(br#"{"action":"scrape"}"#).unwrap_err();
        assert_eq!(e.action, "scrape");
        let e = parse(br#"{"action":"scrape","info_hash":5"#).unwrap_err();
        assert_eq!(e.action, "scrape");
        let e = parse(br#"{"action":"announce","info_hash":"short","peer_id":"x"}"#).unwrap_err();
        assert_eq!(e.action, "announce");
        assert!(parse(br#"{"action":"connect"}"#).is_err());
        assert!(parse(b"\xff\xfe").is_err());
        // A code point above 255 is not a byte.
        let e = parse(
            "{\"action\":\"announce\",\"info_hash\":\"\u{100}aaaaaaaaaaaaaaaaaaa\"}".as_bytes(),
        );
        assert!(e.is_err());
        let many: Vec<String> = (0..=MAX_SCRAPE_HASHES)
            .map(|_| format!("\"{}\"", "a".repeat(20)))
            .collect();
        let m = format!(r#"{{"action":"scrape","info_hash":[{}]}}"#, many.join(","));
        assert!(parse(m.as_bytes()).is_err());
        let e = parse(br#"{"action":"announce","info_hash":"aaaaaaaaaaaaaaaaaaaa","peer_id":"aaaaaaaaaaaaaaaaaaaa","event":"bogus"}"#);
        assert!(e.is_err());
    }

    #[test]
    fn answers_offers_and_errors_are_json_the_client_reads() {
        let mut out = Vec::new();
        write_error(&mut out, "announce", Some(&id(1)), "unregistered torrent");
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["action"], "announce");
        assert_eq!(v["failure reason"], "unregistered torrent");
        assert_eq!(v["info_hash"].as_str().unwrap().chars().count(), 20);
        out.clear();
        write_scrape(
            &mut out,
            &[(
                id(4),
                Counts {
                    complete: 1,
                    incomplete: 2,
                    downloaded: 3,
                },
            )],
        );
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let (k, c) = v["files"].as_object().unwrap().iter().next().unwrap();
        assert_eq!(id_of(k), Some(id(4)));
        assert_eq!(c["downloaded"], 3);
        out.clear();
        let sdp = Sdp {
            kind: "offer".into(),
            sdp: "s".into(),
        };
        write_offer(&mut out, &id(1), &id(2), &id(3), &sdp);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["offer"]["type"], "offer");
        assert_eq!(id_of(v["offer_id"].as_str().unwrap()), Some(id(3)));
    }
}
