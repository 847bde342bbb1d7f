//! WebSocket (RFC 6455), the server's side: the upgrade's accept key, frames decoded and
//! unmasked in place in the connection's own read buffer, and frames written unmasked into
//! its output buffer. No buffer of its own: a connection that waits holds nothing here.
//!
//! Refused, as the RFC says a server must: unmasked client frames, reserved bits (no extension
//! is ever agreed), unknown opcodes, control frames that are fragmented or longer than 125
//! bytes, and 64-bit lengths with the top bit set. Frames longer than the caller's limit are
//! refused from their header, before their payload is waited for.

use base64::Engine as _;
use sha1::{Digest, Sha1};

/// The GUID a server appends to the client's key (RFC 6455 section 1.3).
const GUID: &[u8] = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// The longest header a frame can have (2 + 8 length bytes + 4 mask bytes).
pub const MAX_HEADER: usize = 14;

/// Close codes (RFC 6455 section 7.4.1) the server sends.
pub mod close {
    /// Normal closure.
    pub const NORMAL: u16 = 1000;
    /// The server is going away (a stop).
    pub const GOING_AWAY: u16 = 1001;
    /// A protocol error.
    pub const PROTOCOL: u16 = 1002;
    /// Data that is not what the endpoint accepts (binary where text is expected, bad UTF-8).
    pub const INVALID_DATA: u16 = 1007;
    /// A policy was broken (too many connections from an address, idle too long).
    pub const POLICY: u16 = 1008;
    /// A message too big to handle.
    pub const TOO_BIG: u16 = 1009;
    /// A kind of data the endpoint does not take (binary messages here).
    pub const UNSUPPORTED: u16 = 1003;
}

/// A frame's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opcode {
    /// The next fragment of a message.
    Continuation,
    /// A text message (or its first fragment).
    Text,
    /// A binary message (or its first fragment).
    Binary,
    /// A close.
    Close,
    /// A ping, to be answered with a pong carrying the same payload.
    Ping,
    /// A pong.
    Pong,
}

impl Opcode {
    fn from_bits(b: u8) -> Option<Opcode> {
        Some(match b {
            0 => Opcode::Continuation,
            1 => Opcode::Text,
            2 => Opcode::Binary,
            8 => Opcode::Close,
            9 => Opcode::Ping,
            10 => Opcode::Pong,
            _ => return None,
        })
    }

    fn bits(self) -> u8 {
        match self {
            Opcode::Continuation => 0,
            Opcode::Text => 1,
            Opcode::Binary => 2,
            Opcode::Close => 8,
            Opcode::Ping => 9,
            Opcode::Pong => 10,
        }
    }

    /// Whether it is a control frame (close, ping, pong).
    pub fn is_control(self) -> bool {
        matches!(self, Opcode::Close | Opcode::Ping | Opcode::Pong)
    }
}

/// A whole frame at the start of a buffer, its payload unmasked in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    /// The last fragment of its message.
    pub fin: bool,
    /// Its kind.
    pub opcode: Opcode,
    /// Where its payload starts in the buffer.
    pub payload_start: usize,
    /// Its payload's length.
    pub payload_len: usize,
}

impl Frame {
    /// Bytes the whole frame takes in the buffer.
    pub fn size(&self) -> usize {
        self.payload_start + self.payload_len
    }

    /// Its payload in `buf` (the buffer it was decoded from).
    pub fn payload<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        &buf[self.payload_start..self.size()]
    }
}

/// What [`decode`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoded {
    /// More bytes are needed; at least this many in all (header and payload).
    Incomplete(usize),
    /// A whole frame.
    Frame(Frame),
}

/// Why a frame was refused; [`FrameError::close_code`] is the close code to answer with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// A frame from a client must be masked (and one from a server must not be).
    Unmasked,
    /// A reserved bit is set (no extension was agreed).
    Reserved,
    /// An opcode RFC 6455 does not define.
    UnknownOpcode,
    /// A control frame longer than 125 bytes or fragmented.
    BadControl,
    /// A length with the top bit set, or one in more bytes than it needs.
    BadLength,
    /// A payload longer than the limit.
    TooBig,
}

impl FrameError {
    /// Said to the client (in the close frame's reason) and in logs.
    pub fn reason(self) -> &'static str {
        match self {
            FrameError::Unmasked => "client frames must be masked",
            FrameError::Reserved => "reserved bits set",
            FrameError::UnknownOpcode => "unknown opcode",
            FrameError::BadControl => "control frames must be whole and at most 125 bytes",
            FrameError::BadLength => "malformed payload length",
            FrameError::TooBig => "frame too big",
        }
    }

    /// The close code that answers it.
    pub fn close_code(self) -> u16 {
        match self {
            FrameError::TooBig => close::TOO_BIG,
            _ => close::PROTOCOL,
        }
    }
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.reason())
    }
}

impl std::error::Error for FrameError {}

/// Decodes the frame at the start of `buf`, a client's (masked); once it is whole, unmasks its
/// payload in place. A payload longer than `max_payload` is refused from the header alone.
pub fn decode(buf: &mut [u8], max_payload: usize) -> Result<Decoded, FrameError> {
    decode_from(buf, max_payload, true)
}

/// Decodes a server's frame (unmasked; a masked one is refused): for tests and the load
/// generator.
pub fn decode_server(buf: &mut [u8], max_payload: usize) -> Result<Decoded, FrameError> {
    decode_from(buf, max_payload, false)
}

fn decode_from(buf: &mut [u8], max_payload: usize, masked: bool) -> Result<Decoded, FrameError> {
    if buf.len() < 2 {
        return Ok(Decoded::Incomplete(2));
    }
    let (b0, b1) = (buf[0], buf[1]);
    if b0 & 0x70 != 0 {
        return Err(FrameError::Reserved);
    }
    let fin = b0 & 0x80 != 0;
    let opcode = Opcode::from_bits(b0 & 0x0f).ok_or(FrameError::UnknownOpcode)?;
    if (b1 & 0x80 != 0) != masked {
        return Err(FrameError::Unmasked);
    }
    let short = usize::from(b1 & 0x7f);
    if opcode.is_control() && (!fin || short > 125) {
        return Err(FrameError::BadControl);
    }
    let (len, at) = match short {
        126 => {
            if buf.len() < 4 {
                return Ok(Decoded::Incomplete(4));
            }
            let n = usize::from(u16::from_be_bytes([buf[2], buf[3]]));
            if n < 126 {
                return Err(FrameError::BadLength);
            }
            (n as u64, 4)
        }
        127 => {
            if buf.len() < 10 {
                return Ok(Decoded::Incomplete(10));
            }
            let mut b = [0u8; 8];
            b.copy_from_slice(&buf[2..10]);
            let n = u64::from_be_bytes(b);
            if n >> 63 != 0 || n <= 0xffff {
                return Err(FrameError::BadLength);
            }
            (n, 10)
        }
        n => (n as u64, 2),
    };
    if len > max_payload as u64 {
        return Err(FrameError::TooBig);
    }
    let len = len as usize;
    let payload_start = if masked { at + 4 } else { at };
    let total = payload_start + len;
    if buf.len() < total {
        return Ok(Decoded::Incomplete(total));
    }
    if masked {
        let mask = [buf[at], buf[at + 1], buf[at + 2], buf[at + 3]];
        unmask(&mut buf[payload_start..total], mask);
    }
    Ok(Decoded::Frame(Frame {
        fin,
        opcode,
        payload_start,
        payload_len: len,
    }))
}

/// XORs `data` with the 4-byte `mask`, eight bytes at a time where it can.
fn unmask(data: &mut [u8], mask: [u8; 4]) {
    let wide = u64::from_ne_bytes([
        mask[0], mask[1], mask[2], mask[3], mask[0], mask[1], mask[2], mask[3],
    ]);
    let mut chunks = data.chunks_exact_mut(8);
    for c in &mut chunks {
        let mut b = [0u8; 8];
        b.copy_from_slice(c);
        c.copy_from_slice(&(u64::from_ne_bytes(b) ^ wide).to_ne_bytes());
    }
    for (i, b) in chunks.into_remainder().iter_mut().enumerate() {
        *b ^= mask[i & 3];
    }
}

/// Appends a server frame's header (final, unmasked) for a payload of `len` bytes.
pub fn write_header(out: &mut Vec<u8>, opcode: Opcode, len: usize) {
    out.push(0x80 | opcode.bits());
    if len < 126 {
        out.push(len as u8);
    } else if len <= 0xffff {
        out.push(126);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(127);
        out.extend_from_slice(&(len as u64).to_be_bytes());
    }
}

/// Appends a whole server frame.
pub fn write_frame(out: &mut Vec<u8>, opcode: Opcode, payload: &[u8]) {
    write_header(out, opcode, payload.len());
    out.extend_from_slice(payload);
}

/// Appends a close frame with `code` and `reason` (cut to fit a control frame).
pub fn write_close(out: &mut Vec<u8>, code: u16, reason: &str) {
    let mut r = &reason.as_bytes()[..reason.len().min(123)];
    while std::str::from_utf8(r).is_err() {
        r = &r[..r.len() - 1];
    }
    write_header(out, Opcode::Close, 2 + r.len());
    out.extend_from_slice(&code.to_be_bytes());
    out.extend_from_slice(r);
}

/// Appends a client frame (masked with `mask`): for tests and the load generator.
pub fn write_client_frame(
    out: &mut Vec<u8>,
    opcode: Opcode,
    fin: bool,
    payload: &[u8],
    mask: [u8; 4],
) {
    let start = out.len();
    write_header(out, opcode, payload.len());
    if !fin {
        out[start] &= 0x7f;
    }
    out[start + 1] |= 0x80;
    out.extend_from_slice(&mask);
    let at = out.len();
    out.extend_from_slice(payload);
    unmask(&mut out[at..], mask);
}

/// Checks a close frame's payload (empty, or a valid code and UTF-8 reason); the code.
pub fn close_code(payload: &[u8]) -> Result<Option<u16>, FrameError> {
    match payload.len() {
        0 => Ok(None),
        1 => Err(FrameError::BadControl),
        _ => {
            let code = u16::from_be_bytes([payload[0], payload[1]]);
            let valid = matches!(code, 1000..=1003 | 1007..=1011 | 3000..=4999);
            if !valid || std::str::from_utf8(&payload[2..]).is_err() {
                return Err(FrameError::BadControl);
            }
            Ok(Some(code))
        }
    }
}

/// The `Sec-WebSocket-Accept` value for a client's `Sec-WebSocket-Key`, which must be the
/// base64 of 16 bytes.
pub fn accept_key(client_key: &[u8]) -> Result<[u8; 28], &'static str> {
    let key = trim(client_key);
    let engine = base64::engine::general_purpose::STANDARD;
    match engine.decode(key) {
        Ok(raw) if raw.len() == 16 => {}
        _ => return Err("Sec-WebSocket-Key is not the base64 of 16 bytes"),
    }
    let mut h = Sha1::new();
    h.update(key);
    h.update(GUID);
    let digest = h.finalize();
    let mut out = [0u8; 28];
    engine
        .encode_slice(digest, &mut out)
        .map_err(|_| "cannot encode the accept key")?;
    Ok(out)
}

fn trim(v: &[u8]) -> &[u8] {
    let start = v
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(v.len());
    let end = v
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &v[start..end]
}

/// Whether a comma-separated header value lists `token` (ASCII case-insensitive).
pub fn lists_token(value: &[u8], token: &str) -> bool {
    value
        .split(|&b| b == b',')
        .any(|t| trim(t).eq_ignore_ascii_case(token.as_bytes()))
}

/// What an upgrade request must carry, checked; the client's key. `upgrade`, `connection`,
/// `version` and `key` are the values of those headers. A refusal for the version is
/// [`WRONG_VERSION`] (answered with 426 and the version spoken).
pub fn check_upgrade<'a>(
    method: &str,
    upgrade: Option<&[u8]>,
    connection: Option<&[u8]>,
    version: Option<&[u8]>,
    key: Option<&'a [u8]>,
) -> Result<&'a [u8], &'static str> {
    if method != "GET" {
        return Err("a WebSocket upgrade must be a GET");
    }
    if !upgrade.is_some_and(|u| lists_token(u, "websocket")) {
        return Err("Upgrade: websocket missing");
    }
    if !connection.is_some_and(|c| lists_token(c, "upgrade")) {
        return Err("Connection: Upgrade missing");
    }
    if version.map(trim) != Some(b"13") {
        return Err(WRONG_VERSION);
    }
    key.ok_or("Sec-WebSocket-Key missing")
}

/// [`check_upgrade`]'s refusal of a version other than 13.
pub const WRONG_VERSION: &str = "only WebSocket version 13 is spoken";

/// Appends the `101 Switching Protocols` answer.
pub fn write_switch(out: &mut Vec<u8>, accept: &[u8; 28]) {
    out.extend_from_slice(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
          Sec-WebSocket-Accept: ",
    );
    out.extend_from_slice(accept);
    out.extend_from_slice(b"\r\n\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rfc_example_key() {
        // RFC 6455 section 1.3.
        let k = accept_key(b"dGhlIHNhbXBsZSBub25jZQ==").unwrap();
        assert_eq!(&k, b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
        assert!(accept_key(b"short").is_err());
        assert!(accept_key(b"dGhlIHNhbXBsZSBub25jZQ").is_err());
    }

    #[test]
    fn client_frames_round_trip_at_every_length_class() {
        for len in [0usize, 1, 125, 126, 127, 65535, 65536, 70000] {
            let payload: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            let mut buf = Vec::new();
            write_client_frame(&mut buf, Opcode::Text, true, &payload, [1, 2, 3, 0xfe]);
            // Every prefix is incomplete, never an error or a frame.
            for cut in [0, 1, buf.len() / 2, buf.len() - 1] {
                let mut part = buf[..cut].to_vec();
                assert!(
                    matches!(decode(&mut part, 1 << 20), Ok(Decoded::Incomplete(n)) if n > cut),
                    "len {len} cut {cut}"
                );
            }
            let mut whole = buf.clone();
            whole.extend_from_slice(b"next");
            let Ok(Decoded::Frame(f)) = decode(&mut whole, 1 << 20) else {
                panic!("len {len}");
            };
            assert!(f.fin);
            assert_eq!(f.opcode, Opcode::Text);
            assert_eq!(f.size(), buf.len());
            assert_eq!(f.payload(&whole), &payload[..]);
        }
    }

    #[test]
    fn refusals() {
        let mut ok = Vec::new();
        write_client_frame(&mut ok, Opcode::Text, true, b"hello", [9, 9, 9, 9]);
        let mut unmasked = ok.clone();
        unmasked[1] &= 0x7f;
        assert_eq!(decode(&mut unmasked, 100), Err(FrameError::Unmasked));
        let mut reserved = ok.clone();
        reserved[0] |= 0x40;
        assert_eq!(decode(&mut reserved, 100), Err(FrameError::Reserved));
        let mut op = ok.clone();
        op[0] = 0x83;
        assert_eq!(decode(&mut op, 100), Err(FrameError::UnknownOpcode));
        let mut big_ping = Vec::new();
        write_client_frame(&mut big_ping, Opcode::Ping, true, &[0; 126], [1; 4]);
        assert_eq!(decode(&mut big_ping, 1000), Err(FrameError::BadControl));
        let mut frag_ping = Vec::new();
        write_client_frame(&mut frag_ping, Opcode::Ping, false, b"x", [1; 4]);
        assert_eq!(decode(&mut frag_ping, 1000), Err(FrameError::BadControl));
        // Too big is known from the header alone: no waiting for 1 GB.
        let mut huge = vec![0x81, 0xff, 0, 0, 0, 0, 0x40, 0, 0, 0];
        assert_eq!(decode(&mut huge, 1 << 16), Err(FrameError::TooBig));
        let mut top_bit = vec![0x81, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(decode(&mut top_bit, usize::MAX), Err(FrameError::BadLength));
        let mut long_short = vec![0x81, 0xfe, 0, 5, 1, 1, 1, 1];
        assert_eq!(decode(&mut long_short, 1000), Err(FrameError::BadLength));
    }

    #[test]
    fn close_frames() {
        let mut out = Vec::new();
        write_close(&mut out, close::TOO_BIG, &"é".repeat(100));
        assert_eq!(out[0], 0x88);
        let len = usize::from(out[1]);
        assert!(len <= 125);
        assert_eq!(close_code(&out[2..]), Ok(Some(close::TOO_BIG)));
        assert_eq!(close_code(b""), Ok(None));
        assert!(close_code(b"\x03").is_err());
        assert!(close_code(&[0x03, 0xec]).is_err()); // 1004 is reserved
        assert!(close_code(&[0x03, 0xe8, 0xff]).is_err()); // bad UTF-8
    }

    #[test]
    fn upgrade_headers() {
        let key = Some(&b"dGhlIHNhbXBsZSBub25jZQ=="[..]);
        let v = Some(&b"13"[..]);
        assert!(check_upgrade(
            "GET",
            Some(b"WebSocket"),
            Some(b"keep-alive, Upgrade"),
            v,
            key
        )
        .is_ok());
        assert!(check_upgrade("POST", Some(b"websocket"), Some(b"upgrade"), v, key).is_err());
        assert!(check_upgrade("GET", Some(b"h2c"), Some(b"upgrade"), v, key).is_err());
        assert!(check_upgrade("GET", Some(b"websocket"), Some(b"close"), v, key).is_err());
        assert!(
            check_upgrade("GET", Some(b"websocket"), Some(b"upgrade"), Some(b"8"), key).is_err()
        );
        assert!(check_upgrade("GET", Some(b"websocket"), Some(b"upgrade"), v, None).is_err());
    }
}
