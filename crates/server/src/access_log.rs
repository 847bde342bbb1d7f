//! The access log (`log.access_log`): a line per HTTP request, written by a thread of its own.
//! Workers hand it an [`Entry`] through a bounded queue and never wait: when the queue is full
//! the entry is dropped and counted. The thread stamps the time, renders the line as text or
//! JSON (`log.format`), writes in batches, and opens its file again when asked (SIGHUP,
//! SIGUSR1), so that logrotate can move the file away.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use hotpath_config::{AccessLog as Target, LogFormat};

/// Entries queued for the writer at most.
const QUEUE: usize = 65_536;

/// One request, as the worker saw it.
#[derive(Debug)]
pub struct Entry {
    /// The client's address.
    pub ip: IpAddr,
    /// `METHOD path?query`, as sent (a client's bytes: escaped when written).
    pub request: String,
    /// The answer's status.
    pub status: u16,
    /// The answer's body bytes.
    pub bytes: usize,
    /// Microseconds from the request's parse to its answer.
    pub micros: u64,
}

/// The workers' end: where entries go.
pub type Sender = SyncSender<Entry>;

/// The server's handle on the writer: asks it to open its file again, or to write JSON or
/// text from the next line on.
#[derive(Debug, Clone)]
pub struct Reopen {
    reopen: Arc<AtomicBool>,
    json: Arc<AtomicBool>,
}

impl Reopen {
    /// The file is opened again before the next line (a no-op on standard error).
    pub fn request(&self) {
        self.reopen.store(true, Ordering::Release);
    }

    /// Lines in `format` from the next batch on; whether that is a change.
    pub fn set_format(&self, format: LogFormat) -> bool {
        let json = format == LogFormat::Json;
        self.json.swap(json, Ordering::AcqRel) != json
    }
}

enum Sink {
    Stderr,
    File { path: PathBuf, file: File },
}

fn open(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// Starts the writer for `target` (None when the log is off). The file is opened here, so a
/// path that cannot be written stops the start with its error.
pub fn start(
    target: &Target,
    format: LogFormat,
) -> Result<Option<(Sender, Reopen)>, (PathBuf, std::io::Error)> {
    let sink = match target {
        Target::Off => return Ok(None),
        Target::Stderr => Sink::Stderr,
        Target::File(path) => Sink::File {
            file: open(path).map_err(|e| (path.clone(), e))?,
            path: path.clone(),
        },
    };
    let (tx, rx) = mpsc::sync_channel::<Entry>(QUEUE);
    let reopen = Reopen {
        reopen: Arc::new(AtomicBool::new(false)),
        json: Arc::new(AtomicBool::new(format == LogFormat::Json)),
    };
    let handle = reopen.clone();
    std::thread::Builder::new()
        .name("access-log".into())
        .spawn(move || writer(rx, sink, &handle))
        .expect("spawn the access log thread");
    Ok(Some((tx, reopen)))
}

fn writer(rx: Receiver<Entry>, mut sink: Sink, handle: &Reopen) {
    let mut batch = String::new();
    loop {
        // Woken once a second with nothing to write, to open the file again when asked.
        let first = match rx.recv_timeout(Duration::from_secs(1)) {
            Ok(e) => Some(e),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        if handle.reopen.swap(false, Ordering::AcqRel) {
            if let Sink::File { path, file } = &mut sink {
                match open(path) {
                    Ok(f) => *file = f,
                    Err(e) => log::error!(
                        "log.access_log: cannot open {} again ({e}); writing on to the file \
                         open before",
                        path.display()
                    ),
                }
            }
        }
        let Some(first) = first else { continue };
        let now = SystemTime::now();
        let format = if handle.json.load(Ordering::Acquire) {
            LogFormat::Json
        } else {
            LogFormat::Text
        };
        render(&mut batch, &first, format, now);
        while let Ok(e) = rx.try_recv() {
            render(&mut batch, &e, format, now);
            if batch.len() > 1 << 16 {
                break;
            }
        }
        let _ = match &mut sink {
            Sink::Stderr => std::io::stderr().lock().write_all(batch.as_bytes()),
            Sink::File { file, .. } => file.write_all(batch.as_bytes()),
        };
        batch.clear();
    }
}

/// Appends `e` as one line: `2026-11-29T14:30:37Z 203.0.113.7 "GET /announce?…" 200 96 41us`
/// (the request's quote, backslash and control bytes as `\xNN`, so no client can forge a
/// line or a field), or a JSON object.
pub fn render(out: &mut String, e: &Entry, format: LogFormat, now: SystemTime) {
    use std::fmt::Write as _;
    let ts = hotpath_wire::http::rfc3339(now, false);
    match format {
        LogFormat::Text => {
            let _ = write!(out, "{ts} {} \"", e.ip);
            for c in e.request.chars() {
                if c == '"' || c == '\\' || c.is_control() {
                    for b in c.to_string().bytes() {
                        let _ = write!(out, "\\x{b:02X}");
                    }
                } else {
                    out.push(c);
                }
            }
            let _ = writeln!(out, "\" {} {} {}us", e.status, e.bytes, e.micros);
        }
        LogFormat::Json => {
            // The fields in this order, the request escaped by serde_json.
            let _ = writeln!(
                out,
                "{{\"ts\":\"{ts}\",\"ip\":\"{}\",\"request\":{},\"status\":{},\"bytes\":{},\"us\":{}}}",
                e.ip,
                serde_json::Value::from(e.request.as_str()),
                e.status,
                e.bytes,
                e.micros
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    fn entry(request: &str) -> Entry {
        Entry {
            ip: "203.0.113.7".parse().unwrap(),
            request: request.into(),
            status: 200,
            bytes: 96,
            micros: 41,
        }
    }

    #[test]
    fn a_line_as_text_with_the_clients_bytes_escaped_or_as_json() {
        let now = UNIX_EPOCH + Duration::from_secs(1_796_000_000);
        let mut out = String::new();
        render(&mut out, &entry("GET /announce?x=1"), LogFormat::Text, now);
        assert_eq!(
            out,
            "2026-11-30T00:53:20Z 203.0.113.7 \"GET /announce?x=1\" 200 96 41us\n"
        );
        // A client's quote, backslash or newline cannot end the field or the line.
        out.clear();
        render(
            &mut out,
            &entry("GET /a\"b\\c\nd\u{1b}é"),
            LogFormat::Text,
            now,
        );
        assert_eq!(
            out,
            "2026-11-30T00:53:20Z 203.0.113.7 \"GET /a\\x22b\\x5Cc\\x0Ad\\x1Bé\" 200 96 41us\n"
        );
        out.clear();
        render(&mut out, &entry("GET /a\"\n"), LogFormat::Json, now);
        assert_eq!(out.matches('\n').count(), 1);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["request"], "GET /a\"\n");
        assert_eq!(v["ts"], "2026-11-30T00:53:20Z");
        assert_eq!(v["ip"], "203.0.113.7");
        assert_eq!(
            (v["status"].as_u64(), v["bytes"].as_u64(), v["us"].as_u64()),
            (Some(200), Some(96), Some(41))
        );
    }
}
