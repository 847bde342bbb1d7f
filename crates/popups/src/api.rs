//! The popup API's wire formats, without I/O: the decision query (`GET /v1/popup?user=…`),
//! the event body (`POST /v1/popup/events`), and the answers. Errors are messages for the
//! client that name the field.

use serde::Deserialize;
use std::borrow::Cow;

use crate::decide::{Action, Viewer};
use crate::model::Version;

/// The longest user id accepted (the store keeps ids up to this length).
pub const MAX_USER_BYTES: usize = 255;
/// The most `segment` values a decision may carry.
pub const MAX_SEGMENTS: usize = 16;
/// The largest event body accepted.
pub const MAX_EVENT_BYTES: usize = 4096;

/// A decision query, decoded into a buffer that is reused from request to request.
#[derive(Debug, Default)]
pub struct Query {
    buf: Vec<u8>,
    user: (usize, usize),
    platform: Option<(usize, usize)>,
    country: Option<(usize, usize)>,
    app_version: Option<Version>,
    segments: Vec<(usize, usize)>,
}

impl Query {
    /// Decodes `query` (the part after `?`). Parameters it does not know are ignored
    /// (front ends add cache busters); `segment` may repeat or hold a comma-separated list.
    pub fn parse(&mut self, query: &[u8]) -> Result<(), &'static str> {
        self.buf.clear();
        self.user = (0, 0);
        self.platform = None;
        self.country = None;
        self.app_version = None;
        self.segments.clear();
        let mut have_user = false;
        for (key, value) in hotpath_wire::query::pairs(query) {
            let field = match key {
                b"user" => "user",
                b"platform" => "platform",
                b"country" => "country",
                b"app_version" => "app_version",
                b"segment" => "segment",
                _ => continue,
            };
            let start = self.buf.len();
            self.buf.resize(start + value.len(), 0);
            let n = hotpath_wire::query::percent_decode(value, &mut self.buf[start..]).ok_or(
                match field {
                    "user" => "user: bad percent-encoding",
                    _ => "a parameter has bad percent-encoding",
                },
            )?;
            self.buf.truncate(start + n);
            if std::str::from_utf8(&self.buf[start..]).is_err() {
                return Err(match field {
                    "user" => "user: not UTF-8",
                    _ => "a parameter is not UTF-8",
                });
            }
            let range = (start, start + n);
            match field {
                "user" => {
                    check_user(std::str::from_utf8(&self.buf[start..start + n]).unwrap_or(""))?;
                    self.user = range;
                    have_user = true;
                }
                "platform" => self.platform = Some(range),
                "country" => self.country = Some(range),
                "app_version" => {
                    let text = std::str::from_utf8(&self.buf[start..start + n]).unwrap_or("");
                    self.app_version = Some(
                        text.parse()
                            .map_err(|_| "app_version: not a version like 2.14.1")?,
                    );
                }
                _ => {
                    let mut at = start;
                    for piece in self.buf[start..start + n].split(|&b| b == b',') {
                        if !piece.is_empty() {
                            if self.segments.len() == MAX_SEGMENTS {
                                return Err("segment: at most 16 segments");
                            }
                            self.segments.push((at, at + piece.len()));
                        }
                        at += piece.len() + 1;
                    }
                }
            }
        }
        if !have_user {
            return Err("user: missing (GET /v1/popup?user=ID)");
        }
        Ok(())
    }

    fn text(&self, (a, b): (usize, usize)) -> &str {
        // Checked as UTF-8 when parsed.
        std::str::from_utf8(&self.buf[a..b]).unwrap_or("")
    }

    /// The user id.
    pub fn user(&self) -> &str {
        self.text(self.user)
    }

    /// The viewer this query describes; `segments` is scratch space for the segment list.
    pub fn viewer<'a>(&'a self, segments: &'a mut [&'a str; MAX_SEGMENTS]) -> Viewer<'a> {
        for (slot, &r) in segments.iter_mut().zip(&self.segments) {
            *slot = self.text(r);
        }
        Viewer {
            user: self.user(),
            platform: self.platform.map(|r| self.text(r)),
            country: self.country.map(|r| self.text(r)),
            app_version: self.app_version,
            segments: &segments[..self.segments.len()],
        }
    }
}

/// A click or close, as posted: its strings borrowed from the body unless they hold escapes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EventBody<'a> {
    #[serde(borrow)]
    user: Cow<'a, str>,
    popup: u32,
    #[serde(borrow)]
    action: Cow<'a, str>,
    #[serde(borrow)]
    token: Cow<'a, str>,
}

/// A checked click or close, borrowing from the body it was read from.
#[derive(Debug, PartialEq, Eq)]
pub struct Event<'a> {
    /// The user id.
    pub user: Cow<'a, str>,
    /// The popup id.
    pub popup: u32,
    /// Click or close.
    pub action: Action,
    /// The show token.
    pub token: Cow<'a, str>,
}

use hotpath_store::Unstorable;

/// Checks a user id against what every database stores (see
/// [`hotpath_store::unstorable`]), naming the field.
pub fn check_user(user: &str) -> Result<(), &'static str> {
    if user.is_empty() {
        return Err("user: must not be empty");
    }
    match hotpath_store::unstorable(user, MAX_USER_BYTES) {
        None => Ok(()),
        Some(Unstorable::TooLong) => Err("user: longer than 255 bytes"),
        Some(Unstorable::Nul) => {
            Err("user: contains a NUL byte, which a database cannot keep as text")
        }
    }
}

impl Event<'_> {
    /// Parses and checks an event body.
    pub fn parse(body: &[u8]) -> Result<Event<'_>, String> {
        if body.len() > MAX_EVENT_BYTES {
            return Err(format!("body: larger than {MAX_EVENT_BYTES} bytes"));
        }
        if body.iter().all(u8::is_ascii_whitespace) {
            return Err(
                "body: empty; send JSON {\"user\", \"popup\", \"action\", \"token\"}".into(),
            );
        }
        let e: EventBody = crate::model::parse_json(body)?;
        check_user(&e.user)?;
        let action = match &*e.action {
            "click" => Action::Click,
            "close" => Action::Close,
            _ => return Err("action: must be \"click\" or \"close\"".into()),
        };
        Ok(Event {
            user: e.user,
            popup: e.popup,
            action,
            token: e.token,
        })
    }
}

/// Appends `s` as a JSON string (with quotes).
pub fn json_string(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    for c in s.chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.extend_from_slice(b"\\t"),
            c if (c as u32) < 0x20 => {
                use std::io::Write as _;
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => {
                let mut b = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut b).as_bytes());
            }
        }
    }
    out.push(b'"');
}

/// Longest error message sent back: parser messages quote what they could not read (an
/// unknown field's name, a bad string), which may be kilobytes of the client's own bytes.
pub const MAX_ERROR_BYTES: usize = 256;

/// `message` cut to at most `max` bytes at a character boundary, marked with `…` when cut.
pub fn clip(mut message: String, max: usize) -> String {
    if message.len() > max {
        let mut end = max - '…'.len_utf8();
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push('…');
    }
    message
}

/// `{"error":"…"}`.
pub fn error_body(out: &mut Vec<u8>, message: &str) {
    out.extend_from_slice(b"{\"error\":");
    json_string(out, message);
    out.extend_from_slice(b"}\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_decode_and_errors_name_the_field() {
        let mut q = Query::default();
        q.parse(b"user=u%C3%BC+1&platform=ios&country=DE&app_version=2.14&segment=vip,new&segment=beta&_=123")
            .unwrap();
        let mut segs = [""; MAX_SEGMENTS];
        let v = q.viewer(&mut segs);
        assert_eq!(v.user, "u\u{fc} 1");
        assert_eq!(v.platform, Some("ios"));
        assert_eq!(v.country, Some("DE"));
        assert_eq!(v.app_version, Some(Version([2, 14, 0])));
        assert_eq!(v.segments, ["vip", "new", "beta"]);

        let mut q = Query::default();
        q.parse(b"user=bob").unwrap();
        assert_eq!(q.user(), "bob");
        let mut segs = [""; MAX_SEGMENTS];
        assert!(q.viewer(&mut segs).segments.is_empty());

        let long = format!("user={}", "x".repeat(256));
        let many = format!("user=a&segment={}", vec!["s"; 17].join(","));
        for (query, field) in [
            ("", "user"),
            ("platform=ios", "user"),
            ("user=", "user"),
            ("user=%zz", "user"),
            ("user=%FF", "user"),
            ("user=nul%00byte", "user: contains a NUL byte"),
            (long.as_str(), "user"),
            ("user=a&app_version=two", "app_version"),
            (many.as_str(), "segment"),
        ] {
            let e = q.parse(query.as_bytes()).unwrap_err();
            assert!(e.starts_with(field), "{query}: {e}");
        }
    }

    /// Found by the popup_event fuzz target: an unknown field's name came back whole in the
    /// error (4 KB of the client's bytes in every answer).
    #[test]
    fn error_messages_are_clipped() {
        let body = format!(r#"{{"user{}":1}}"#, "é".repeat(1000));
        let e = Event::parse(body.as_bytes()).unwrap_err();
        assert!(e.len() <= MAX_ERROR_BYTES, "{} bytes", e.len());
        assert!(
            e.starts_with("body: unknown field") && e.ends_with('…'),
            "{e}"
        );
        assert_eq!(clip("short".into(), 8), "short");
        assert_eq!(clip("0123456789".into(), 8), "01234…");
    }

    #[test]
    fn events_parse_and_errors_name_the_field() {
        let e =
            Event::parse(br#"{"user":"alice","popup":3,"action":"click","token":"t"}"#).unwrap();
        assert_eq!((&*e.user, e.popup, e.action), ("alice", 3, Action::Click));
        assert!(
            matches!(e.user, Cow::Borrowed(_)),
            "no copy without escapes"
        );
        // Escapes are decoded (into a copy): the same user, the same token.
        let esc = Event::parse(
            br#"{"user":"al\u0069ce","popup":3,"action":"cl\u0069ck","token":"\u0074"}"#,
        )
        .unwrap();
        assert_eq!(esc, e);
        assert!(matches!(esc.user, Cow::Owned(_)));
        let big = format!(r#"{{"user":"{}"}}"#, "x".repeat(MAX_EVENT_BYTES));
        for (body, field) in [
            ("", "body: empty"),
            ("{", "body: invalid JSON"),
            (
                r#"{"user":"a","popup":1,"action":"click","token":"t"} x"#,
                "body: invalid JSON: trailing characters",
            ),
            (
                r#"{"user":"a","popup":1,"action":"click"}"#,
                "body: missing field `token`",
            ),
            (
                r#"{"user":"a","popup":-1,"action":"click","token":"t"}"#,
                "popup: invalid value: integer `-1`",
            ),
            (
                r#"{"user":"a","popup":"three","action":"click","token":"t"}"#,
                "popup: invalid type: string \"three\"",
            ),
            (
                r#"{"user":"nul\u0000byte","popup":1,"action":"click","token":"t"}"#,
                "user: contains a NUL byte",
            ),
            (
                r#"{"user":["a"],"popup":1,"action":"click","token":"t"}"#,
                "user: invalid type: sequence",
            ),
            (
                r#"{"user":"a","popup":1,"action":"like","token":"t"}"#,
                "action",
            ),
            (
                r#"{"user":"","popup":1,"action":"close","token":"t"}"#,
                "user",
            ),
            (
                r#"{"user":"a","popup":1,"action":"close","token":"t","x":1}"#,
                "unknown field `x`",
            ),
            (big.as_str(), "body: larger"),
        ] {
            let e = Event::parse(body.as_bytes()).unwrap_err();
            assert!(e.contains(field), "{body}: {e}");
        }
    }

    #[test]
    fn json_strings_escape() {
        let mut out = Vec::new();
        json_string(&mut out, "a\"b\\c\n\u{1}ü");
        assert_eq!(out, b"\"a\\\"b\\\\c\\n\\u0001\xc3\xbc\"");
        let v: String = serde_json::from_slice(&out).unwrap();
        assert_eq!(v, "a\"b\\c\n\u{1}ü");
    }
}
