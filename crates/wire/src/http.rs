//! HTTP/1.1 framing: request heads parsed in place (with hard limits) into slices of the read
//! buffer, responses written into the caller's output buffer, and the client side (requests out,
//! response heads in) for the load generator and tests.

use std::mem::MaybeUninit;

pub use httparse::Header;
use httparse::Status;

/// Hard limits applied while parsing a request. Each limit, when hit, yields a specific 4xx.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest request head in bytes (431 beyond it).
    pub max_header_bytes: usize,
    /// Longest request target in bytes (414 beyond it).
    pub max_url_bytes: usize,
    /// Largest body in bytes (413 beyond it).
    pub max_body_bytes: usize,
}

/// A request that cannot be served; the connection is closed after the answer, since its
/// framing can no longer be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpError {
    /// The status to answer with.
    pub status: u16,
    /// A short text for the body.
    pub reason: &'static str,
}

/// A parsed request, borrowing from the read buffer.
#[derive(Debug)]
pub struct Request<'b, 'h> {
    /// The method, e.g. `GET`.
    pub method: &'b str,
    /// The path, without the query.
    pub path: &'b str,
    /// The raw query string after `?` (not decoded), empty when there is none.
    pub query: &'b [u8],
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor_version: u8,
    /// The header lines.
    pub headers: &'h [Header<'b>],
    /// Whether the connection stays open after the answer.
    pub keep_alive: bool,
    /// The body (Content-Length bytes).
    pub body: &'b [u8],
}

impl<'b> Request<'b, '_> {
    /// The value of the first header called `name` (ASCII case-insensitive).
    pub fn header(&self, name: &str) -> Option<&'b [u8]> {
        self.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    }

    /// Whether the client accepts a gzip-coded body.
    pub fn accepts_gzip(&self) -> bool {
        self.headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case("accept-encoding"))
            .any(|h| {
                h.value.split(|&b| b == b',').any(|token| {
                    let token = trim(token.split(|&b| b == b';').next().unwrap_or(b""));
                    let q0 = token_has_q0(h.value, token);
                    token.eq_ignore_ascii_case(b"gzip") && !q0
                })
            })
    }
}

fn token_has_q0(header: &[u8], token: &[u8]) -> bool {
    // `gzip;q=0` refuses gzip; find the element that starts with this token.
    header.split(|&b| b == b',').any(|element| {
        let mut parts = element.split(|&b| b == b';');
        let name = trim(parts.next().unwrap_or(b""));
        name.eq_ignore_ascii_case(token)
            && parts.any(|p| {
                let p = trim(p);
                p == b"q=0" || p == b"q=0.0" || p == b"q=0.00" || p == b"q=0.000"
            })
    })
}

fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// The outcome of parsing the front of a read buffer.
#[derive(Debug)]
pub enum Parsed<'b, 'h> {
    /// More bytes are needed; nothing was allocated.
    Incomplete,
    /// A whole request, and how many bytes of the buffer it took (head and body).
    Complete(Request<'b, 'h>, usize),
}

/// Storage for the headers of one request; no initialisation needed, so a stack array of it
/// costs nothing until headers are written into it.
pub type HeaderSlots<'b> = MaybeUninit<Header<'b>>;

/// `N` uninitialised header slots.
pub fn header_slots<'b, const N: usize>() -> [HeaderSlots<'b>; N] {
    [const { MaybeUninit::uninit() }; N]
}

/// Parses one request from the front of `buf`, using `headers` as the header array (its length
/// is the header-count limit).
pub fn parse_request<'b, 'h>(
    buf: &'b [u8],
    headers: &'h mut [HeaderSlots<'b>],
    limits: &Limits,
) -> Result<Parsed<'b, 'h>, HttpError> {
    let mut req = httparse::Request::new(&mut []);
    let head_len = match req.parse_with_uninit_headers(buf, headers) {
        Ok(Status::Complete(n)) => n,
        Ok(Status::Partial) => {
            if buf.len() >= limits.max_header_bytes {
                return Err(if req.path.is_none() {
                    HttpError {
                        status: 414,
                        reason: "request target too long",
                    }
                } else {
                    HttpError {
                        status: 431,
                        reason: "request head too large",
                    }
                });
            }
            return Ok(Parsed::Incomplete);
        }
        Err(httparse::Error::TooManyHeaders) => {
            return Err(HttpError {
                status: 431,
                reason: "too many header lines",
            })
        }
        Err(httparse::Error::Version) => {
            return Err(HttpError {
                status: 505,
                reason: "only HTTP/1.0 and HTTP/1.1 are supported",
            })
        }
        Err(_) => {
            return Err(HttpError {
                status: 400,
                reason: "malformed request",
            })
        }
    };
    if head_len > limits.max_header_bytes {
        return Err(HttpError {
            status: 431,
            reason: "request head too large",
        });
    }
    let (Some(method), Some(target), Some(minor_version)) = (req.method, req.path, req.version)
    else {
        return Err(HttpError {
            status: 400,
            reason: "malformed request",
        });
    };
    if target.len() > limits.max_url_bytes {
        return Err(HttpError {
            status: 414,
            reason: "request target too long",
        });
    }
    let headers: &'h [Header<'b>] = req.headers;
    let mut keep_alive = minor_version == 1;
    let mut content_length: Option<usize> = None;
    for h in headers {
        if h.name.eq_ignore_ascii_case("connection") {
            for token in h.value.split(|&b| b == b',') {
                let token = trim(token);
                if token.eq_ignore_ascii_case(b"close") {
                    keep_alive = false;
                } else if token.eq_ignore_ascii_case(b"keep-alive") {
                    keep_alive = true;
                }
            }
        } else if h.name.eq_ignore_ascii_case("content-length") {
            let n = parse_decimal(trim(h.value)).ok_or(HttpError {
                status: 400,
                reason: "malformed Content-Length",
            })?;
            if content_length.is_some_and(|c| c != n) {
                return Err(HttpError {
                    status: 400,
                    reason: "conflicting Content-Length headers",
                });
            }
            content_length = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(HttpError {
                status: 501,
                reason: "Transfer-Encoding is not supported; send Content-Length",
            });
        }
    }
    let body_len = content_length.unwrap_or(0);
    if body_len > limits.max_body_bytes {
        return Err(HttpError {
            status: 413,
            reason: "request body too large",
        });
    }
    if buf.len() - head_len < body_len {
        return Ok(Parsed::Incomplete);
    }
    let (path, query) = match target.find('?') {
        Some(i) => (&target[..i], &target.as_bytes()[i + 1..]),
        None => (target, &b""[..]),
    };
    Ok(Parsed::Complete(
        Request {
            method,
            path,
            query,
            minor_version,
            headers,
            keep_alive,
            body: &buf[head_len..head_len + body_len],
        },
        head_len + body_len,
    ))
}

/// Parses an unsigned decimal with no sign and at most 18 digits.
pub fn parse_decimal(s: &[u8]) -> Option<usize> {
    if s.is_empty() || s.len() > 18 || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    // Checked: 18 digits fit a 64-bit usize, not a 32-bit one.
    s.iter().try_fold(0usize, |n, &d| {
        n.checked_mul(10)?.checked_add(usize::from(d - b'0'))
    })
}

/// The reason phrase of the statuses hotpath sends.
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        408 => "Request Timeout",
        413 => "Content Too Large",
        414 => "URI Too Long",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}

/// What goes into a response head besides the status.
#[derive(Debug, Clone, Copy)]
pub struct Head<'a> {
    /// The status code.
    pub status: u16,
    /// The Content-Type value.
    pub content_type: &'a str,
    /// Extra header lines, each ending in CRLF (e.g. `Content-Encoding: gzip\r\n`).
    pub extra: &'a [u8],
}

/// Appends a whole response: status line, Server, Date, Content-Type, Content-Length,
/// Connection when needed, the extra lines, and the body.
pub fn write_response(
    out: &mut Vec<u8>,
    head: &Head<'_>,
    date: &[u8],
    keep_alive: bool,
    minor_version: u8,
    body: &[u8],
) {
    out.extend_from_slice(if minor_version == 0 {
        b"HTTP/1.0 "
    } else {
        b"HTTP/1.1 "
    });
    out.extend_from_slice(itoa::Buffer::new().format(head.status).as_bytes());
    out.push(b' ');
    out.extend_from_slice(reason_phrase(head.status).as_bytes());
    out.extend_from_slice(b"\r\nServer: hotpath\r\nDate: ");
    out.extend_from_slice(date);
    if head.status == 204 {
        // No content: no Content-Type, and no Content-Length (RFC 9110, 8.6).
        out.extend_from_slice(b"\r\n");
    } else {
        // An empty content type: the service wrote its own line among the extra headers.
        if !head.content_type.is_empty() {
            out.extend_from_slice(b"\r\nContent-Type: ");
            out.extend_from_slice(head.content_type.as_bytes());
        }
        out.extend_from_slice(b"\r\nContent-Length: ");
        out.extend_from_slice(itoa::Buffer::new().format(body.len()).as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if !keep_alive {
        out.extend_from_slice(b"Connection: close\r\n");
    } else if minor_version == 0 {
        out.extend_from_slice(b"Connection: keep-alive\r\n");
    }
    out.extend_from_slice(head.extra);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
}

/// The (year, month 1-12, day 1-31) of `days` since 1970-01-01, proleptic Gregorian, by
/// 400-year eras.
pub fn civil_date(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month as u32, day as u32)
}

/// Unix second `t` as `YYYY-MM-DD HH:MM:SS` (UTC), as SQL's DATETIME and people read it.
pub fn civil_time(t: i64) -> String {
    let (days, secs) = (t.div_euclid(86_400), t.rem_euclid(86_400));
    let (year, month, day) = civil_date(days);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// `t` as RFC 3339 in UTC, `2026-11-29T14:30:37Z`, with milliseconds (`…37.123Z`) when
/// `millis`: the time of log lines.
pub fn rfc3339(t: std::time::SystemTime, millis: bool) -> String {
    let d = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, s) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, mo, day) = civil_date(days);
    let (h, mi, sec) = (s / 3600, s / 60 % 60, s % 60);
    if millis {
        format!(
            "{y:04}-{mo:02}-{day:02}T{h:02}:{mi:02}:{sec:02}.{:03}Z",
            d.subsec_millis()
        )
    } else {
        format!("{y:04}-{mo:02}-{day:02}T{h:02}:{mi:02}:{sec:02}Z")
    }
}

/// Formats `unix_secs` as an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), the HTTP Date format.
pub fn http_date(unix_secs: u64) -> [u8; 29] {
    const DAYS: [&[u8; 3]; 7] = [b"Thu", b"Fri", b"Sat", b"Sun", b"Mon", b"Tue", b"Wed"];
    const MONTHS: [&[u8; 3]; 12] = [
        b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov",
        b"Dec",
    ];
    let days = unix_secs / 86_400;
    let secs = unix_secs % 86_400;
    let weekday = DAYS[(days % 7) as usize];
    let (year, month, day) = civil_date(days as i64);
    let mut out = *b"Thu, 01 Jan 1970 00:00:00 GMT";
    out[..3].copy_from_slice(weekday);
    two_digits(&mut out[5..7], u64::from(day));
    out[8..11].copy_from_slice(MONTHS[(month - 1) as usize]);
    let y = year.clamp(0, 9999) as u64;
    two_digits(&mut out[12..14], y / 100);
    two_digits(&mut out[14..16], y % 100);
    two_digits(&mut out[17..19], secs / 3600);
    two_digits(&mut out[20..22], secs / 60 % 60);
    two_digits(&mut out[23..25], secs % 60);
    out
}

fn two_digits(out: &mut [u8], n: u64) {
    out[0] = b'0' + (n / 10 % 10) as u8;
    out[1] = b'0' + (n % 10) as u8;
}

/// A parsed response head (client side).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseHead {
    /// The status code.
    pub status: u16,
    /// Bytes of the head, up to and including the blank line.
    pub head_len: usize,
    /// The Content-Length, when given.
    pub content_length: Option<usize>,
    /// Whether the server said `Connection: close`.
    pub close: bool,
    /// Whether the body is gzip-coded.
    pub gzip: bool,
    /// Whether the body is chunked (Transfer-Encoding: chunked; it overrides Content-Length).
    pub chunked: bool,
}

/// Parses a response head from the front of `buf` (client side); `Ok(None)` means more bytes
/// are needed.
pub fn parse_response_head(buf: &[u8]) -> Result<Option<ResponseHead>, &'static str> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut resp = httparse::Response::new(&mut headers);
    match resp.parse(buf) {
        Ok(Status::Partial) => Ok(None),
        Ok(Status::Complete(head_len)) => {
            let mut head = ResponseHead {
                status: resp.code.unwrap_or(0),
                head_len,
                content_length: None,
                close: resp.version == Some(0),
                gzip: false,
                chunked: false,
            };
            for h in resp.headers.iter() {
                if h.name.eq_ignore_ascii_case("content-length") {
                    head.content_length = parse_decimal(trim(h.value));
                } else if h.name.eq_ignore_ascii_case("connection") {
                    head.close = trim(h.value).eq_ignore_ascii_case(b"close");
                } else if h.name.eq_ignore_ascii_case("content-encoding") {
                    head.gzip = trim(h.value).eq_ignore_ascii_case(b"gzip");
                } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                    // The last coding is the one that frames the message.
                    head.chunked = h
                        .value
                        .rsplit(|&b| b == b',')
                        .next()
                        .is_some_and(|c| trim(c).eq_ignore_ascii_case(b"chunked"));
                }
            }
            if head.chunked {
                head.content_length = None;
            }
            Ok(Some(head))
        }
        Err(_) => Err("malformed response head"),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Chunk {
    /// Reading a chunk-size line's hex digits.
    #[default]
    Size,
    /// Skipping a chunk extension up to the line's CR.
    Extension,
    /// Expecting the LF that ends a size line.
    SizeLf,
    /// Inside chunk data.
    Data,
    /// Expecting the CR after chunk data.
    DataCr,
    /// Expecting the LF after chunk data.
    DataLf,
    /// At the start of a trailer line (or the final CRLF).
    Trailer,
    /// Inside a trailer field line.
    TrailerLine,
    /// Expecting the final LF.
    EndLf,
    /// The body has ended.
    Done,
}

/// Where a chunked body stands (client side): fed the bytes as they arrive, it says how many
/// belong to the body and whether the body has ended. No bytes are kept or copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChunkedBody {
    state: Chunk,
    /// Data bytes left in the current chunk, or the size read so far on a size line.
    left: u64,
    /// Hex digits on the current size line.
    digits: u8,
}

impl ChunkedBody {
    /// Consumes bytes of the body from the front of `buf`: `Ok((used, true))` when the body
    /// ended after `used` bytes (the rest belongs to what follows), `Ok((buf.len(), false))`
    /// when more are needed.
    pub fn feed(&mut self, buf: &[u8]) -> Result<(usize, bool), &'static str> {
        let mut i = 0;
        while i < buf.len() {
            let b = buf[i];
            match self.state {
                Chunk::Size => match (b as char).to_digit(16) {
                    Some(d) => {
                        if self.digits >= 15 {
                            return Err("chunk size too large");
                        }
                        self.left = self.left * 16 + u64::from(d);
                        self.digits += 1;
                    }
                    None if self.digits == 0 => return Err("malformed chunk size"),
                    None if b == b';' || b == b' ' || b == b'\t' => self.state = Chunk::Extension,
                    None if b == b'\r' => self.state = Chunk::SizeLf,
                    None => return Err("malformed chunk size"),
                },
                Chunk::Extension => {
                    if b == b'\r' {
                        self.state = Chunk::SizeLf;
                    }
                }
                Chunk::SizeLf => {
                    if b != b'\n' {
                        return Err("malformed chunk size line");
                    }
                    self.digits = 0;
                    self.state = if self.left == 0 {
                        Chunk::Trailer
                    } else {
                        Chunk::Data
                    };
                }
                Chunk::Data => {
                    let take =
                        (buf.len() - i).min(usize::try_from(self.left).unwrap_or(usize::MAX));
                    self.left -= take as u64;
                    i += take;
                    if self.left == 0 {
                        self.state = Chunk::DataCr;
                    }
                    continue;
                }
                Chunk::DataCr if b == b'\r' => self.state = Chunk::DataLf,
                Chunk::DataLf if b == b'\n' => self.state = Chunk::Size,
                Chunk::DataCr | Chunk::DataLf => return Err("chunk data not followed by CRLF"),
                Chunk::Trailer if b == b'\r' => self.state = Chunk::EndLf,
                Chunk::Trailer => self.state = Chunk::TrailerLine,
                Chunk::TrailerLine => {
                    if b == b'\n' {
                        self.state = Chunk::Trailer;
                    }
                }
                Chunk::EndLf if b == b'\n' => {
                    self.state = Chunk::Done;
                    return Ok((i + 1, true));
                }
                Chunk::EndLf => return Err("malformed end of chunked body"),
                Chunk::Done => return Ok((i, true)),
            }
            i += 1;
        }
        Ok((buf.len(), self.state == Chunk::Done))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_are_checked() {
        assert_eq!(parse_decimal(b"0"), Some(0));
        assert_eq!(parse_decimal(b"65536"), Some(65536));
        assert_eq!(
            parse_decimal(b"999999999999999999").map(|n| n as u64),
            usize::try_from(999_999_999_999_999_999u64)
                .ok()
                .map(|n| n as u64)
        );
        for bad in [
            &b""[..],
            b"-1",
            b"+1",
            b"1 ",
            b"0x10",
            b"1234567890123456789",
        ] {
            assert_eq!(parse_decimal(bad), None, "{bad:?}");
        }
    }
    use proptest::prelude::*;

    #[test]
    fn chunked_bodies_in_any_split() {
        let body = b"4;ext=1\r\nWiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nX-Trailer: 1\r\n\r\nNEXT";
        let end = body.len() - 4;
        // Every split point, fed in two pieces, ends at the same byte.
        for cut in 0..end {
            let mut c = ChunkedBody::default();
            let (used, done) = c.feed(&body[..cut]).unwrap();
            assert_eq!((used, done), (cut, false), "cut {cut}");
            let (used, done) = c.feed(&body[cut..]).unwrap();
            assert!(done, "cut {cut}");
            assert_eq!(cut + used, end);
        }
        assert_eq!(ChunkedBody::default().feed(&body[..end]), Ok((end, true)));
        let mut c = ChunkedBody::default();
        assert_eq!(c.feed(b"0\r\n\r\n"), Ok((5, true)));
        for bad in [
            &b"x\r\n"[..],
            b"\r\n",
            b"3\r\nabcX",
            b"fffffffffffffffff\r\n",
            b"0\r\n\rX",
        ] {
            assert!(ChunkedBody::default().feed(bad).is_err(), "{bad:?}");
        }
        let head = parse_response_head(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nContent-Length: 9\r\n\r\n",
        )
        .unwrap()
        .unwrap();
        assert!(head.chunked && !head.gzip && head.content_length.is_none());
    }

    const LIMITS: Limits = Limits {
        max_header_bytes: 1024,
        max_url_bytes: 256,
        max_body_bytes: 64,
    };

    fn parse(buf: &[u8]) -> Result<Option<(String, String, bool, usize)>, HttpError> {
        let mut headers = header_slots::<8>();
        match parse_request(buf, &mut headers, &LIMITS)? {
            Parsed::Incomplete => Ok(None),
            Parsed::Complete(r, n) => Ok(Some((
                r.path.to_string(),
                String::from_utf8_lossy(r.query).into_owned(),
                r.keep_alive,
                n,
            ))),
        }
    }

    #[test]
    fn keep_alive_rules() {
        let r = parse(b"GET /a?x=1 HTTP/1.1\r\nHost: h\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(r, ("/a".into(), "x=1".into(), true, 32));
        let r = parse(b"GET /a HTTP/1.1\r\nConnection: close\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(!r.2);
        let r = parse(b"GET /a HTTP/1.0\r\n\r\n").unwrap().unwrap();
        assert!(!r.2);
        let r = parse(b"GET /a HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(r.2);
    }

    #[test]
    fn incomplete_and_body() {
        assert!(parse(b"GET /a HTTP/1.1\r\nHost:").unwrap().is_none());
        assert!(parse(b"POST /a HTTP/1.1\r\nContent-Length: 5\r\n\r\nab")
            .unwrap()
            .is_none());
        let mut headers = header_slots::<8>();
        let buf = b"POST /a HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloGET";
        match parse_request(buf, &mut headers, &LIMITS).unwrap() {
            Parsed::Complete(r, n) => {
                assert_eq!(r.body, b"hello");
                assert_eq!(&buf[n..], b"GET");
            }
            Parsed::Incomplete => panic!("complete request"),
        }
    }

    #[test]
    fn limits() {
        let long_url = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(300));
        assert_eq!(parse(long_url.as_bytes()).unwrap_err().status, 414);
        let many = format!("GET / HTTP/1.1\r\n{}\r\n", "A: b\r\n".repeat(9));
        assert_eq!(parse(many.as_bytes()).unwrap_err().status, 431);
        let big = format!("GET / HTTP/1.1\r\nA: {}", "b".repeat(1100));
        assert_eq!(parse(big.as_bytes()).unwrap_err().status, 431);
        let endless_url = format!("GET /{}", "a".repeat(1100));
        assert_eq!(parse(endless_url.as_bytes()).unwrap_err().status, 414);
        let body = b"POST / HTTP/1.1\r\nContent-Length: 65\r\n\r\n";
        assert_eq!(parse(body).unwrap_err().status, 413);
        let te = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(parse(te).unwrap_err().status, 501);
        let cl = b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n";
        assert_eq!(parse(cl).unwrap_err().status, 400);
        assert_eq!(parse(b"\x00\x01garbage\r\n\r\n").unwrap_err().status, 400);
        assert_eq!(parse(b"GET / HTTP/2.0\r\n\r\n").unwrap_err().status, 505);
    }

    #[test]
    fn gzip_negotiation() {
        let check = |value: &str| {
            let text = format!("GET / HTTP/1.1\r\nAccept-Encoding: {value}\r\n\r\n");
            let mut headers = header_slots::<8>();
            match parse_request(text.as_bytes(), &mut headers, &LIMITS).unwrap() {
                Parsed::Complete(r, _) => r.accepts_gzip(),
                Parsed::Incomplete => panic!(),
            }
        };
        assert!(check("gzip"));
        assert!(check("deflate, gzip;q=0.5"));
        assert!(!check("gzip;q=0"));
        assert!(!check("identity"));
    }

    #[test]
    fn response_round_trip() {
        let mut out = Vec::new();
        let head = Head {
            status: 200,
            content_type: "text/plain",
            extra: b"",
        };
        write_response(&mut out, &head, &http_date(0), false, 1, b"hi");
        let parsed = parse_response_head(&out).unwrap().unwrap();
        assert_eq!(parsed.status, 200);
        assert_eq!(parsed.content_length, Some(2));
        assert!(parsed.close);
        assert_eq!(&out[parsed.head_len..], b"hi");

        let mut out = Vec::new();
        let head = Head {
            status: 204,
            content_type: "application/json",
            extra: b"Cache-Control: no-store\r\n",
        };
        write_response(&mut out, &head, &http_date(0), true, 1, b"");
        let text = String::from_utf8(out.clone()).unwrap();
        assert!(text.starts_with("HTTP/1.1 204 No Content\r\n"), "{text}");
        assert!(
            !text.contains("Content-Length") && !text.contains("Content-Type"),
            "{text}"
        );
        let parsed = parse_response_head(&out).unwrap().unwrap();
        assert_eq!(
            (parsed.status, parsed.content_length, parsed.head_len),
            (204, None, out.len())
        );
    }

    #[test]
    fn dates() {
        assert_eq!(&http_date(0), b"Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(&http_date(784_111_777), b"Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(&http_date(1_709_251_199), b"Thu, 29 Feb 2024 23:59:59 GMT");
    }

    proptest! {
        #[test]
        fn never_panics(input in proptest::collection::vec(any::<u8>(), 0..512)) {
            let mut headers = header_slots::<8>();
            let _ = parse_request(&input, &mut headers, &LIMITS);
            let _ = parse_response_head(&input);
        }
    }
}
