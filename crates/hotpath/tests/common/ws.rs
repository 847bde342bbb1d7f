//! A small WebSocket client for the WebTorrent tests: the upgrade, masked frames out, the
//! server's frames in, and WebTorrent messages as JSON values.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use hotpath_wire::http::parse_response_head;
use hotpath_wire::webtorrent::{self as wt, Id};
use hotpath_wire::ws::{self, Decoded, Opcode};

/// A byte stream: plain TCP or TLS over it.
pub trait Stream: Read + Write + Send {}
impl<T: Read + Write + Send> Stream for T {}

/// A WebSocket client connection.
pub struct Ws {
    pub stream: Box<dyn Stream>,
    buf: Vec<u8>,
}

/// An upgrade the server refused: its status and body.
#[derive(Debug)]
pub struct Refused {
    pub status: u16,
    pub head: String,
    pub body: String,
}

/// The upgrade request for `path`, with `extra` header lines.
pub fn upgrade_request(path: &str, extra: &str) -> String {
    format!(
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n"
    )
}

impl Ws {
    /// Connects and upgrades on `path`; panics if refused.
    pub fn connect(addr: SocketAddr, path: &str) -> Ws {
        Ws::try_raw(addr, &upgrade_request(path, "")).expect("upgraded")
    }

    /// Sends `request` (an upgrade, perhaps a broken one) on a new connection: the
    /// connection once switched, or the refusal.
    pub fn try_raw(addr: SocketAddr, request: &str) -> Result<Ws, Refused> {
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        Ws::try_on(Box::new(stream), request)
    }

    /// Connects over TLS (trusting `ca`) and upgrades on `path`.
    pub fn connect_tls(addr: SocketAddr, path: &str, ca: &[u8]) -> Ws {
        let stream = super::tls::connect(addr, ca, None);
        Ws::try_on(Box::new(stream), &upgrade_request(path, "")).expect("upgraded")
    }

    /// Sends `request` on `stream`: the connection once switched, or the refusal.
    pub fn try_on(mut stream: Box<dyn Stream>, request: &str) -> Result<Ws, Refused> {
        stream.write_all(request.as_bytes()).unwrap();
        let mut buf = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(h)) = parse_response_head(&buf) {
                let head = String::from_utf8_lossy(&buf[..h.head_len]).into_owned();
                if h.status == 101 {
                    assert!(
                        head.contains("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo="),
                        "{head}"
                    );
                    buf.drain(..h.head_len);
                    return Ok(Ws { stream, buf });
                }
                let len = h.content_length.unwrap_or(0);
                if buf.len() >= h.head_len + len {
                    let body = String::from_utf8_lossy(&buf[h.head_len..h.head_len + len]);
                    return Err(Refused {
                        status: h.status,
                        head,
                        body: body.into_owned(),
                    });
                }
            }
            assert!(Instant::now() < deadline, "no answer to the upgrade");
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk) {
                Ok(0) => panic!("closed before answering the upgrade"),
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                Err(_) => {}
            }
        }
    }

    /// Sends bytes as they are.
    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    /// Sends one masked frame.
    pub fn send_frame(&mut self, opcode: Opcode, fin: bool, payload: &[u8]) {
        let mut b = Vec::new();
        ws::write_client_frame(&mut b, opcode, fin, payload, [0x37, 0xfa, 0x21, 0x3d]);
        self.send_raw(&b);
    }

    /// Sends a text message.
    pub fn send_text(&mut self, text: &[u8]) {
        self.send_frame(Opcode::Text, true, text);
    }

    /// The next frame within `wait`; `None` if none came (or the socket closed).
    pub fn recv(&mut self, wait: Duration) -> Option<(Opcode, Vec<u8>)> {
        let deadline = Instant::now() + wait;
        loop {
            match ws::decode_server(&mut self.buf, 1 << 24) {
                Ok(Decoded::Frame(f)) => {
                    let payload = f.payload(&self.buf).to_vec();
                    self.buf.drain(..f.size());
                    return Some((f.opcode, payload));
                }
                Ok(Decoded::Incomplete(_)) => {}
                Err(e) => panic!("the server sent a bad frame: {e}"),
            }
            if Instant::now() >= deadline {
                return None;
            }
            let mut chunk = [0u8; 16384];
            match self.stream.read(&mut chunk) {
                Ok(0) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => return None,
            }
        }
    }

    /// The next text message as JSON within `wait` (pings are answered, pongs skipped).
    pub fn recv_json(&mut self, wait: Duration) -> Option<serde_json::Value> {
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.recv(left)? {
                (Opcode::Text, t) => return Some(serde_json::from_slice(&t).expect("JSON")),
                (Opcode::Ping, p) => self.send_frame(Opcode::Pong, true, &p),
                (Opcode::Pong, _) => {}
                (op, p) => panic!("unexpected {op:?} {}", String::from_utf8_lossy(&p)),
            }
        }
    }

    /// Reads until the server's close frame: its code (and `None` if it never came).
    pub fn close_code(&mut self, wait: Duration) -> Option<u16> {
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.recv(left)? {
                (Opcode::Close, p) if p.len() >= 2 => {
                    return Some(u16::from_be_bytes([p[0], p[1]]))
                }
                (Opcode::Close, _) => return Some(1005),
                _ => {}
            }
        }
    }

    /// Whether the server closed the socket within `wait` (after any frames).
    pub fn closed_within(&mut self, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        let mut chunk = [0u8; 16384];
        while Instant::now() < deadline {
            match self.stream.read(&mut chunk) {
                Ok(0) => return true,
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => return true,
            }
        }
        false
    }

    /// Sends a WebTorrent announce.
    pub fn announce(&mut self, a: &wt::Announce<'_>) {
        let mut b = Vec::new();
        wt::write_client_announce(&mut b, a);
        self.send_text(&b);
    }

    /// Sends a WebTorrent answer.
    pub fn answer(&mut self, a: &wt::Answer<'_>) {
        let mut b = Vec::new();
        wt::write_client_answer(&mut b, a);
        self.send_text(&b);
    }
}

/// An announce of `peer` in `hash` with `offers` (offer ids), `left` bytes to go.
pub fn wt_announce<'a>(
    hash: Id,
    peer: Id,
    left: u64,
    offers: &[Id],
    event: wt::Event,
) -> wt::Announce<'a> {
    wt::Announce {
        info_hash: hash,
        peer_id: peer,
        numwant: Some(offers.len() as u64),
        uploaded: Some(0),
        downloaded: Some(0),
        left: Some(left),
        event,
        offers: offers
            .iter()
            .map(|&offer_id| wt::Offer {
                offer_id,
                offer: wt::Sdp {
                    kind: "offer".into(),
                    sdp: "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\n".into(),
                },
            })
            .collect(),
    }
}

/// A JSON string of a WebTorrent message as a 20-byte id.
pub fn id_of(v: &serde_json::Value) -> Id {
    Id::from_text(v.as_str().expect("an id string")).expect("20 characters of code points 0-255")
}
