//! The HTTP/1.1 load: each thread runs one mio event loop over its connections. A connection
//! sends a request, reads the whole answer (framed by the wire crate's response-head parser
//! and Content-Length), records it, and sends the next one: at once in the closed loop, at
//! its due time in the open model (latency then counts from the due time). With keep-alive
//! off every request gets a fresh connection, and the connect is part of its latency.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};

use hotpath_wire::http::{parse_response_head, ChunkedBody, ResponseHead};

use crate::alarm::{Alarm, ALARM};
use crate::clock::{Pace, Schedule};
use crate::plan::HttpRequest;
use crate::stats::Recorder;
use crate::template::{Draw, Vars};

/// The read buffer per connection (answer heads must fit); longer bodies are read through it
/// and not kept.
const READ_BUF: usize = 16 * 1024;
/// Open model: requests due this close together are sent in one pass of the loop.
pub const OPEN_GAP_NS: u64 = 50_000;
/// Wait before reconnecting after a failed connect.
const RECONNECT_NS: u64 = 10_000_000;

/// What one HTTP load thread needs.
pub struct HttpLoad<'a> {
    /// Server address.
    pub addr: SocketAddr,
    /// Host header value.
    pub host: &'a str,
    /// Reuse connections.
    pub keepalive: bool,
    /// Request kinds.
    pub requests: &'a [HttpRequest],
    /// Variables.
    pub vars: &'a Vars,
    /// Connections on this thread.
    pub connections: usize,
    /// Open model: this thread's share of the rate, requests/s.
    pub rate: Option<f64>,
    /// Request timeout, ns.
    pub timeout: u64,
    /// The run's schedule.
    pub schedule: Schedule,
    /// Random seed of this thread.
    pub seed: u64,
    /// Where to hand over counts for the live progress line, when one is shown.
    pub progress: Option<std::sync::Arc<crate::progress::Progress>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// No request in flight (waiting for its due time or a reconnect).
    Idle,
    Connecting,
    Writing,
    Reading,
}

/// How an answer's body is framed.
#[derive(Debug, Clone, Copy)]
enum Body {
    /// By Content-Length: `left` bytes still to come. With `keep`, a small 200 body stays
    /// whole in the read buffer, to read a tracker's failure reason from it.
    Length { left: usize, keep: bool },
    /// By Transfer-Encoding: chunked.
    Chunked(ChunkedBody),
    /// Until the server closes the connection.
    UntilClose,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    /// Open model: the next request is due.
    Due,
    /// The request in flight has run out of time.
    Timeout,
    /// Try connecting again.
    Reconnect,
}

struct Conn {
    stream: Option<TcpStream>,
    phase: Phase,
    /// Bumped at every new request: a timer for an older one is stale.
    generation: u32,
    out: Vec<u8>,
    written: usize,
    buf: Vec<u8>,
    filled: usize,
    /// Where the body starts in `buf`.
    body_at: usize,
    head: Option<ResponseHead>,
    /// How the body of the answer being read is framed (set when its head is parsed).
    body: Body,
    /// Requests answered on the current connection.
    served: u32,
    /// Whether the request in flight was already sent again after a lost connection.
    retried: bool,
    /// Whether the socket is registered for writability (only while connecting or while a
    /// request does not fit the send buffer).
    writable: bool,
    intended: u64,
    sent: u64,
    pace: Option<Pace>,
    failure: Option<String>,
}

struct Engine<'a> {
    load: &'a HttpLoad<'a>,
    poll: Poll,
    alarm: Alarm,
    conns: Vec<Conn>,
    /// Due requests and reconnects: woken for precisely, by the alarm.
    timers: BinaryHeap<Reverse<(u64, usize, u32, Timer)>>,
    /// Request timeouts: checked at epoll's millisecond resolution, so a request in flight
    /// costs no timer syscall.
    deadlines: BinaryHeap<Reverse<(u64, usize, u32, Timer)>>,
    rec: Recorder,
    rng: fastrand::Rng,
    draw: Draw,
    scratch: Vec<u8>,
    weights: Vec<u32>,
}

/// Runs one thread's share of the load until the schedule's end.
pub fn run(load: &HttpLoad<'_>) -> std::io::Result<Recorder> {
    let s = load.schedule;
    let poll = Poll::new()?;
    let alarm = Alarm::new(poll.registry())?;
    let mut e = Engine {
        load,
        poll,
        alarm,
        conns: Vec::with_capacity(load.connections),
        timers: BinaryHeap::new(),
        deadlines: BinaryHeap::new(),
        rec: Recorder::new(s.measure_from, s.end).with_progress(load.progress.clone()),
        rng: fastrand::Rng::with_seed(load.seed),
        draw: Draw::default(),
        scratch: Vec::new(),
        weights: load.requests.iter().map(|r| r.weight).collect(),
    };
    for i in 0..load.connections {
        let pace = load.rate.map(|r| {
            // Stagger the connections so the thread's requests are evenly spaced.
            let mut p = Pace::new(r, 1.0 / load.connections as f64, 0);
            p.next = p.interval * i as u64 / load.connections as u64;
            p
        });
        e.conns.push(Conn {
            stream: None,
            phase: Phase::Idle,
            generation: 0,
            out: Vec::with_capacity(512),
            written: 0,
            buf: vec![0; READ_BUF],
            filled: 0,
            body_at: 0,
            head: None,
            body: Body::UntilClose,
            served: 0,
            retried: false,
            writable: true,
            intended: 0,
            sent: 0,
            pace,
            failure: None,
        });
        match pace {
            Some(p) => e.timers.push(Reverse((p.next, i, 0, Timer::Due))),
            None => e.start(i, s.now()),
        }
    }
    e.run()?;
    let end = s.end;
    for c in &e.conns {
        if let Some(p) = &c.pace {
            e.rec.unsent += p.missed(end);
        }
    }
    Ok(e.rec)
}

impl Engine<'_> {
    fn run(&mut self) -> std::io::Result<()> {
        let s = self.load.schedule;
        let mut events = Events::with_capacity(1024);
        loop {
            let now = s.now();
            if now >= s.end {
                return Ok(());
            }
            for heap in [true, false] {
                loop {
                    let h = if heap {
                        &mut self.timers
                    } else {
                        &mut self.deadlines
                    };
                    match h.peek() {
                        Some(&Reverse((at, i, generation, kind))) if at <= now => {
                            h.pop();
                            self.fire(i, generation, kind, now);
                        }
                        _ => break,
                    }
                }
            }
            if let Some(Reverse(t)) = self.timers.peek() {
                // Requests due within OPEN_GAP_NS of each other go out in one pass of the
                // loop: a wake-up per request would cost more than the request. Their latency
                // still counts from each one's own due time.
                self.alarm.arm(t.0.min(s.end).max(now + OPEN_GAP_NS), &s)?;
            }
            let until = self
                .deadlines
                .peek()
                .map_or(s.end, |Reverse(t)| t.0.min(s.end));
            let wait = s
                .instant(until)
                .saturating_duration_since(std::time::Instant::now());
            match self.poll.poll(&mut events, Some(wait)) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            for ev in events.iter() {
                if ev.token() != ALARM {
                    self.drive(ev.token().0);
                }
            }
        }
    }

    fn fire(&mut self, i: usize, generation: u32, kind: Timer, now: u64) {
        let c = &mut self.conns[i];
        if c.generation != generation {
            return;
        }
        match kind {
            Timer::Due | Timer::Reconnect if c.phase == Phase::Idle => self.start(i, now),
            Timer::Timeout if c.phase != Phase::Idle => {
                let sent = c.sent;
                self.rec.failed("timeout", sent, now);
                self.reset(i);
                self.next(i, now);
            }
            _ => {}
        }
    }

    /// Sends connection `i`'s next request: now in the closed loop, at its due time in the
    /// open model.
    fn next(&mut self, i: usize, now: u64) {
        let c = &mut self.conns[i];
        c.generation = c.generation.wrapping_add(1);
        c.phase = Phase::Idle;
        match c.pace {
            Some(p) if p.next > now => {
                self.timers
                    .push(Reverse((p.next, i, c.generation, Timer::Due)))
            }
            _ => self.start(i, now),
        }
    }

    fn start(&mut self, i: usize, now: u64) {
        if now >= self.load.schedule.end {
            return;
        }
        self.build(i);
        // A fresh time: `now` may be from before other requests of this loop pass were sent.
        let now = self.load.schedule.now();
        let c = &mut self.conns[i];
        c.generation = c.generation.wrapping_add(1);
        c.intended = match &mut c.pace {
            Some(p) => p.take(),
            None => now,
        };
        c.sent = now;
        c.written = 0;
        c.filled = 0;
        c.body_at = 0;
        c.head = None;
        c.failure = None;
        c.retried = false;
        self.rec.sent(c.intended, now);
        let deadline = now + self.load.timeout;
        self.deadlines
            .push(Reverse((deadline, i, c.generation, Timer::Timeout)));
        self.send(i, now);
    }

    /// Writes connection `i`'s request, connecting first when it has no socket.
    fn send(&mut self, i: usize, now: u64) {
        let c = &mut self.conns[i];
        if c.stream.is_some() {
            c.phase = Phase::Writing;
            self.drive(i);
            return;
        }
        match TcpStream::connect(self.load.addr) {
            Ok(mut stream) => {
                let _ = stream.set_nodelay(true);
                if let Err(e) = self.poll.registry().register(
                    &mut stream,
                    Token(i),
                    Interest::READABLE | Interest::WRITABLE,
                ) {
                    self.connect_failed(i, &e, now);
                    return;
                }
                let c = &mut self.conns[i];
                c.stream = Some(stream);
                c.served = 0;
                c.writable = true;
                c.phase = Phase::Connecting;
                self.rec.connected();
            }
            Err(e) => self.connect_failed(i, &e, now),
        }
    }

    /// The connection broke before any byte of the answer came. When the server closed a
    /// kept-alive connection we were reusing (its idle timeout, or a server that answers one
    /// request per connection without saying `Connection: close`), the request is sent again
    /// on a new connection, once, as every HTTP client does, and counted as a reconnect;
    /// otherwise it is an error of `class`.
    fn lost(&mut self, i: usize, class: &str) {
        let c = &self.conns[i];
        if c.served > 0 && c.filled == 0 && c.head.is_none() && !c.retried {
            let now = self.load.schedule.now();
            self.rec.reconnected(now);
            self.reset(i);
            let c = &mut self.conns[i];
            c.retried = true;
            c.written = 0;
            self.send(i, now);
        } else {
            self.fail(i, class);
        }
    }

    fn connect_failed(&mut self, i: usize, e: &std::io::Error, now: u64) {
        // A connection is opened to send a request: its failure ends that request.
        let sent = self.conns[i].sent;
        self.rec
            .failed(&format!("connect: {}", error_kind(e)), sent, now);
        self.reset(i);
        let c = &mut self.conns[i];
        c.generation = c.generation.wrapping_add(1);
        c.phase = Phase::Idle;
        self.timers.push(Reverse((
            now + RECONNECT_NS,
            i,
            c.generation,
            Timer::Reconnect,
        )));
    }

    /// Writes connection `i`'s request bytes.
    fn build(&mut self, i: usize) {
        let load = self.load;
        let k = if self.weights.len() == 1 {
            0
        } else {
            pick(&self.weights, &mut self.rng)
        };
        let r = &load.requests[k];
        load.vars.draw(&mut self.rng, &mut self.draw);
        let out = &mut self.conns[i].out;
        out.clear();
        out.extend_from_slice(r.method.as_bytes());
        out.push(b' ');
        r.path.fill(&self.draw, out);
        out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
        out.extend_from_slice(load.host.as_bytes());
        out.extend_from_slice(b"\r\n");
        for (name, value) in &r.headers {
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            value.fill(&self.draw, out);
            out.extend_from_slice(b"\r\n");
        }
        if !load.keepalive {
            out.extend_from_slice(b"Connection: close\r\n");
        }
        if let Some(body) = &r.body {
            self.scratch.clear();
            body.fill(&self.draw, &mut self.scratch);
            out.extend_from_slice(b"Content-Length: ");
            out.extend_from_slice(itoa::Buffer::new().format(self.scratch.len()).as_bytes());
            out.extend_from_slice(b"\r\n\r\n");
            out.extend_from_slice(&self.scratch);
        } else {
            out.extend_from_slice(b"\r\n");
        }
    }

    /// Closes connection `i`'s socket.
    fn reset(&mut self, i: usize) {
        if let Some(mut s) = self.conns[i].stream.take() {
            let _ = self.poll.registry().deregister(&mut s);
        }
        let c = &mut self.conns[i];
        c.head = None;
        c.filled = 0;
    }

    fn fail(&mut self, i: usize, class: &str) {
        let now = self.load.schedule.now();
        let sent = self.conns[i].sent;
        self.rec.failed(class, sent, now);
        self.reset(i);
        self.next(i, now);
    }

    fn drive(&mut self, i: usize) {
        loop {
            let c = &mut self.conns[i];
            let Some(stream) = c.stream.as_mut() else {
                return;
            };
            match c.phase {
                Phase::Idle => return,
                Phase::Connecting => match stream.take_error() {
                    Ok(Some(e)) | Err(e) => {
                        let now = self.load.schedule.now();
                        self.connect_failed(i, &e, now);
                        return;
                    }
                    Ok(None) => match stream.peer_addr() {
                        Ok(_) => {
                            // Connected: from now on only readability matters (a writable
                            // edge after every ACK would wake the loop for nothing).
                            let _ = self.poll.registry().reregister(
                                stream,
                                Token(i),
                                Interest::READABLE,
                            );
                            c.writable = false;
                            c.phase = Phase::Writing;
                        }
                        Err(e) if e.kind() == ErrorKind::NotConnected => return,
                        Err(e) => {
                            let now = self.load.schedule.now();
                            self.connect_failed(i, &e, now);
                            return;
                        }
                    },
                },
                Phase::Writing => match stream.write(&c.out[c.written..]) {
                    Ok(n) => {
                        c.written += n;
                        if c.written == c.out.len() {
                            c.phase = Phase::Reading;
                            if c.writable {
                                let _ = self.poll.registry().reregister(
                                    stream,
                                    Token(i),
                                    Interest::READABLE,
                                );
                                c.writable = false;
                            }
                            // The answer cannot be here yet: wait for readiness.
                            return;
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        // The send buffer is full: wait until it drains.
                        if !c.writable {
                            let _ = self.poll.registry().reregister(
                                stream,
                                Token(i),
                                Interest::READABLE | Interest::WRITABLE,
                            );
                            c.writable = true;
                        }
                        return;
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return self.lost(i, &format!("write: {}", error_kind(&e))),
                },
                Phase::Reading => {
                    let room = c.buf.len() - c.filled;
                    match stream.read(&mut c.buf[c.filled..]) {
                        Ok(0) => {
                            if matches!(c.body, Body::UntilClose) && c.head.is_some() {
                                return self.complete(i);
                            }
                            return self.lost(i, "closed before the answer");
                        }
                        Ok(n) => {
                            c.filled += n;
                            match self.parse(i) {
                                Ok(true) => return self.complete(i),
                                Ok(false) => {}
                                Err(class) => return self.fail(i, class),
                            }
                            // Short read: the socket is drained for now. Not so for an answer
                            // that ends at the close: its FIN may have come with its last bytes,
                            // and the edge-triggered poll would not report it again.
                            let until_close = !self.load.keepalive
                                || matches!(self.conns[i].body, Body::UntilClose);
                            if n < room && !until_close {
                                return;
                            }
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                        Err(e) if e.kind() == ErrorKind::Interrupted => {}
                        Err(e) => return self.lost(i, &format!("read: {}", error_kind(&e))),
                    }
                }
            }
        }
    }

    /// Looks at what connection `i` has read: `Ok(true)` when the answer is whole.
    fn parse(&mut self, i: usize) -> Result<bool, &'static str> {
        let c = &mut self.conns[i];
        if c.head.is_none() {
            let h = match parse_response_head(&c.buf[..c.filled]) {
                Ok(None) if c.filled == c.buf.len() => return Err("answer head too large"),
                Ok(None) => return Ok(false),
                Err(_) => return Err("malformed answer"),
                Ok(Some(h)) => h,
            };
            c.head = Some(h);
            c.body_at = h.head_len;
            c.body = match h.content_length {
                None if h.chunked => Body::Chunked(ChunkedBody::default()),
                Some(n) => Body::Length {
                    left: n,
                    keep: h.status == 200 && n <= c.buf.len() - h.head_len,
                },
                None if h.status == 204 || h.status == 304 => Body::Length {
                    left: 0,
                    keep: false,
                },
                None if h.close => Body::UntilClose,
                None => return Err("answer without Content-Length on a kept-alive connection"),
            };
        }
        let have = c.filled - c.body_at;
        match &mut c.body {
            Body::Chunked(chunks) => {
                let (used, done) = chunks.feed(&c.buf[c.body_at..c.filled])?;
                if done {
                    if used != have {
                        return Err("more bytes than the answer's chunked body");
                    }
                    return Ok(true);
                }
            }
            Body::UntilClose => {}
            Body::Length { left, .. } if have > *left => {
                return Err("more bytes than the answer's Content-Length");
            }
            Body::Length { left, keep: true } => {
                if have < *left {
                    return Ok(false);
                }
                c.failure = failure_reason(&c.buf[c.body_at..c.filled]);
                return Ok(true);
            }
            Body::Length { left, keep: false } => {
                *left -= have;
                if *left == 0 {
                    return Ok(true);
                }
            }
        }
        // What was read is accounted for: the buffer is free for what follows.
        c.filled = 0;
        c.body_at = 0;
        Ok(false)
    }

    fn complete(&mut self, i: usize) {
        let now = self.load.schedule.now();
        let c = &mut self.conns[i];
        let head = c.head.take().expect("a whole answer has a head");
        c.served += 1;
        let status = head.status;
        if let Some(reason) = c.failure.take() {
            self.rec
                .failed(&format!("failure reason: {reason}"), c.sent, now);
        } else if (200..400).contains(&status) {
            self.rec.ok(c.intended, c.sent, now);
        } else {
            self.rec
                .failed(&format!("http {}xx", status / 100), c.sent, now);
        }
        if head.close || !self.load.keepalive || matches!(c.body, Body::UntilClose) {
            self.reset(i);
        }
        self.next(i, now);
    }
}

/// A tracker's bencoded `failure reason`, when the body is one.
fn failure_reason(body: &[u8]) -> Option<String> {
    if !body.starts_with(b"d14:failure reason") {
        return None;
    }
    let v = hotpath_wire::bencode::decode(body).ok()?;
    let r = v.get("failure reason")?.as_bytes()?;
    Some(String::from_utf8_lossy(&r[..r.len().min(80)]).into_owned())
}

/// A weighted pick of an index.
pub fn pick(weights: &[u32], rng: &mut fastrand::Rng) -> usize {
    let total: u32 = weights.iter().sum();
    let mut x = rng.u32(0..total);
    for (i, w) in weights.iter().enumerate() {
        if x < *w {
            return i;
        }
        x -= w;
    }
    weights.len() - 1
}

/// A short name for an I/O error, as an error class.
pub fn error_kind(e: &std::io::Error) -> String {
    match e.kind() {
        ErrorKind::ConnectionRefused => "refused".into(),
        ErrorKind::ConnectionReset => "reset".into(),
        ErrorKind::BrokenPipe => "broken pipe".into(),
        ErrorKind::TimedOut => "timed out".into(),
        ErrorKind::AddrNotAvailable => "no local address (ports exhausted?)".into(),
        _ => match e.raw_os_error() {
            Some(code) => nix::errno::Errno::from_raw(code).desc().to_lowercase(),
            None => e.kind().to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weighted_pick() {
        let mut rng = fastrand::Rng::with_seed(1);
        let mut counts = [0u32; 3];
        for _ in 0..30_000 {
            counts[pick(&[1, 0, 2], &mut rng)] += 1;
        }
        assert_eq!(counts[1], 0);
        assert!((9_000..11_000).contains(&counts[0]), "{counts:?}");
    }

    #[test]
    fn failure_reasons() {
        assert_eq!(
            failure_reason(b"d14:failure reason11:unknown keye").as_deref(),
            Some("unknown key")
        );
        assert_eq!(failure_reason(b"d8:intervali1800ee"), None);
        assert_eq!(failure_reason(b"d14:failure reason"), None);
    }
}
