//! The BEP 15 UDP tracker load: the connect/announce/scrape mix that aquatic_udp_load_test
//! sends, over a torrent population picked with a Zipf skew and a peer population. Each thread
//! owns connected UDP sockets (each from its own 127.x.y.z address on loopback, so the tracker
//! sees many clients), keeps a window of requests in flight per socket (closed loop) or sends
//! on a timetable (open model), and moves datagrams in batches with sendmmsg/recvmmsg so the
//! load generator spends its core on the kernel's work, not its own.
//!
//! A request's transaction id names its slot in the socket's table (low 16 bits) and a
//! sequence number (high 16), so a late answer to a slot since reused is recognised and not
//! counted twice.

use std::io::{IoSlice, IoSliceMut};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd;

use mio::net::UdpSocket;
use mio::{Events, Interest, Poll, Token};
use nix::errno::Errno;
use nix::sys::socket::{recvmmsg, sendmmsg, MsgFlags, MultiHeaders, SockaddrStorage};
use socket2::{Domain, Protocol, Socket, Type};

use hotpath_wire::query::Event;
use hotpath_wire::udp::{
    parse_response, write_announce_request, write_connect_request, write_scrape_request,
    AnnounceRequest, Options, Response,
};

use crate::alarm::{Alarm, ALARM};
use crate::clock::{Pace, Schedule};
use crate::http::{error_kind, pick};
use crate::plan::UdpSpec;
use crate::stats::Recorder;
use crate::template::value20;
use crate::zipf::Zipf;

/// Datagrams per sendmmsg/recvmmsg call.
const BATCH: usize = 64;
/// Largest answer read (an announce with 200 IPv6 peers is 3620 bytes).
const MAX_ANSWER: usize = 4096;
/// Slots per socket in the open model (requests that may be in flight at once).
const OPEN_SLOTS: usize = 4096;
/// Open model: requests due this close together are sent in one batch.
use crate::http::OPEN_GAP_NS;
/// How often requests in flight are checked for timeouts.
const SCAN_NS: u64 = 50_000_000;

/// What one UDP load thread needs.
pub struct UdpLoad<'a> {
    /// The tracker.
    pub addr: SocketAddr,
    /// Population and mix.
    pub spec: &'a UdpSpec,
    /// Sockets on this thread.
    pub sockets: usize,
    /// Index of this thread's first socket among all threads' (for source addresses).
    pub first_socket: usize,
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
enum Kind {
    Connect,
    Announce,
    Scrape,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    tid: u32,
    kind: Kind,
    busy: bool,
    intended: u64,
    sent: u64,
}

struct Sock {
    socket: UdpSocket,
    connection_id: Option<u64>,
    slots: Vec<Slot>,
    free: Vec<u16>,
    seq: u16,
    /// Requests built and not yet sent, and their slots.
    out: Vec<Vec<u8>>,
    out_slots: Vec<u16>,
    queued: usize,
}

/// Reused batch buffers, shared by a thread's sockets.
struct Buffers {
    input: Vec<Vec<u8>>,
    send_headers: MultiHeaders<SockaddrStorage>,
    recv_headers: MultiHeaders<SockaddrStorage>,
    no_addrs: Vec<Option<SockaddrStorage>>,
    /// Length of each datagram of the last recvmmsg.
    lens: Vec<usize>,
}

struct Engine<'a> {
    load: &'a UdpLoad<'a>,
    socks: Vec<Sock>,
    buffers: Buffers,
    rec: Recorder,
    rng: fastrand::Rng,
    torrents: Zipf,
    weights: [u32; 3],
    hash_seed: u64,
    peer_seed: u64,
    hashes: Vec<[u8; 20]>,
}

/// The source address of socket `n` when the target is on loopback: 127.1.0.1, 127.1.0.2, …
fn source(target: &SocketAddr, n: usize, many: bool) -> SocketAddr {
    match target.ip() {
        IpAddr::V4(ip) if ip.is_loopback() && many => {
            let n = n as u32 + 1;
            SocketAddr::from((
                Ipv4Addr::new(127, 1 + (n >> 16) as u8, (n >> 8) as u8, n as u8),
                0,
            ))
        }
        IpAddr::V4(_) => SocketAddr::from(([0, 0, 0, 0], 0)),
        IpAddr::V6(ip) if ip.is_loopback() => SocketAddr::from((ip, 0)),
        IpAddr::V6(_) => SocketAddr::from(([0u16; 8], 0)),
    }
}

fn open_socket(target: SocketAddr, from: SocketAddr) -> std::io::Result<UdpSocket> {
    let s = Socket::new(
        Domain::for_address(target),
        Type::DGRAM,
        Some(Protocol::UDP),
    )?;
    let _ = s.set_recv_buffer_size(8 << 20);
    let _ = s.set_send_buffer_size(8 << 20);
    s.bind(&from.into())?;
    s.connect(&target.into())?;
    s.set_nonblocking(true)?;
    Ok(UdpSocket::from_std(s.into()))
}

/// Runs one thread's share of the UDP load until the schedule's end.
pub fn run(load: &UdpLoad<'_>) -> std::io::Result<Recorder> {
    let poll = Poll::new()?;
    let slots = if load.rate.is_some() {
        OPEN_SLOTS
    } else {
        load.spec.window
    };
    let mut socks = Vec::with_capacity(load.sockets);
    for j in 0..load.sockets {
        let mut socket = open_socket(
            load.addr,
            source(&load.addr, load.first_socket + j, load.spec.many_ips),
        )?;
        poll.registry()
            .register(&mut socket, Token(j), Interest::READABLE)?;
        socks.push(Sock {
            socket,
            connection_id: None,
            slots: vec![
                Slot {
                    tid: 0,
                    kind: Kind::Connect,
                    busy: false,
                    intended: 0,
                    sent: 0,
                };
                slots
            ],
            free: (0..slots as u16).rev().collect(),
            seq: 0,
            out: (0..BATCH).map(|_| Vec::with_capacity(1600)).collect(),
            out_slots: Vec::with_capacity(BATCH),
            queued: 0,
        });
    }
    let s = load.schedule;
    let spec = load.spec;
    let mut e = Engine {
        load,
        socks,
        buffers: Buffers {
            input: (0..BATCH).map(|_| vec![0u8; MAX_ANSWER]).collect(),
            send_headers: MultiHeaders::preallocate(BATCH, None),
            recv_headers: MultiHeaders::preallocate(BATCH, None),
            no_addrs: vec![None; BATCH],
            lens: Vec::with_capacity(BATCH),
        },
        rec: Recorder::new(s.measure_from, s.end).with_progress(load.progress.clone()),
        rng: fastrand::Rng::with_seed(load.seed),
        torrents: Zipf::new(spec.torrents, spec.zipf).map_err(std::io::Error::other)?,
        weights: [spec.connect, spec.announce, spec.scrape],
        // The same population on every thread: torrents and peers are shared, as in a swarm.
        hash_seed: 0x6861_7368,
        peer_seed: 0x7065_6572,
        hashes: Vec::with_capacity(spec.scrape_max),
    };
    e.run(poll)?;
    Ok(e.rec)
}

impl Engine<'_> {
    fn run(&mut self, mut poll: Poll) -> std::io::Result<()> {
        let s = self.load.schedule;
        let mut alarm = Alarm::new(poll.registry())?;
        let mut events = Events::with_capacity(256);
        let mut pace = self.load.rate.map(|r| Pace::new(r, 1.0, 0));
        let mut next_scan = s.now() + SCAN_NS;
        let mut rr = 0usize;
        if pace.is_none() {
            let now = s.now();
            for j in 0..self.socks.len() {
                self.refill(j, now);
            }
        }
        loop {
            let now = s.now();
            if now >= s.end {
                if let Some(p) = &pace {
                    self.rec.unsent += p.missed(s.end);
                }
                return Ok(());
            }
            if now >= next_scan {
                self.expire(now);
                next_scan = now + SCAN_NS;
                if pace.is_none() {
                    for j in 0..self.socks.len() {
                        self.refill(j, now);
                    }
                }
            }
            if let Some(p) = &mut pace {
                // Send everything due, spread over the sockets; a socket with every slot busy
                // passes its turn, and a request no socket can take is counted as unsent.
                let mut budget = 16 * BATCH;
                while p.next <= now && budget > 0 {
                    budget -= 1;
                    let intended = p.take();
                    let n = self.socks.len();
                    let taken = (0..n).any(|k| {
                        let j = (rr + k) % n;
                        if self.socks[j].free.is_empty() {
                            return false;
                        }
                        rr = j + 1;
                        self.queue(j, intended, now);
                        true
                    });
                    if !taken && self.rec.measured(intended) {
                        self.rec.unsent += 1;
                    }
                }
                for j in 0..self.socks.len() {
                    self.flush(j, now);
                }
            }
            let mut until = next_scan.min(s.end);
            if let Some(p) = &pace {
                // Requests due within OPEN_GAP_NS go out together, in one batch: a wake-up
                // per request would cost the load generator a core at 100k requests/s. Their
                // latency still counts from each one's own due time.
                until = until.min(p.next.max(now + OPEN_GAP_NS));
            }
            alarm.arm(until, &s)?;
            let wait = s
                .instant(s.end)
                .saturating_duration_since(std::time::Instant::now());
            match poll.poll(&mut events, Some(wait)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            for ev in events.iter() {
                if ev.token() == ALARM {
                    continue;
                }
                let j = ev.token().0;
                self.receive(j)?;
                // Closed loop: refill once half the window has come back, so requests go out
                // in batches of at least half a window (one sendmmsg) even when answers
                // trickle in one by one from a saturated server.
                let sock = &self.socks[j];
                if pace.is_none() && 2 * sock.free.len() >= sock.slots.len() {
                    let now = s.now();
                    self.refill(j, now);
                }
            }
        }
    }

    /// Closed loop: fills socket `j`'s window.
    fn refill(&mut self, j: usize, now: u64) {
        if now >= self.load.schedule.end {
            return;
        }
        while !self.socks[j].free.is_empty() {
            self.queue(j, now, now);
        }
        self.flush(j, now);
    }

    /// Builds one request on socket `j` into the batch, sending the batch when it is full.
    fn queue(&mut self, j: usize, intended: u64, now: u64) {
        if self.socks[j].queued == BATCH {
            self.flush(j, now);
        }
        let spec = self.load.spec;
        let sock = &mut self.socks[j];
        let slot = sock.free.pop().expect("caller checked for a free slot");
        sock.seq = sock.seq.wrapping_add(1);
        let tid = (u32::from(sock.seq) << 16) | u32::from(slot);
        let kind = match sock.connection_id {
            None => Kind::Connect,
            Some(_) => match pick(&self.weights, &mut self.rng) {
                0 => Kind::Connect,
                1 => Kind::Announce,
                _ => Kind::Scrape,
            },
        };
        let out = &mut sock.out[sock.queued];
        out.clear();
        match kind {
            Kind::Connect => write_connect_request(out, tid),
            Kind::Announce => {
                let torrent = self.torrents.sample(|| self.rng.f64());
                let peer = self.rng.u64(0..spec.peers);
                let seeder = self.rng.f64() < spec.seeders;
                write_announce_request(
                    out,
                    &AnnounceRequest {
                        connection_id: sock.connection_id.unwrap_or(0),
                        transaction_id: tid,
                        info_hash: value20(self.hash_seed, torrent),
                        peer_id: value20(self.peer_seed, peer),
                        downloaded: 0,
                        left: if seeder { 0 } else { 1 + peer % 1_000_000 },
                        uploaded: 0,
                        event: Event::None,
                        ip: 0,
                        key: peer as u32,
                        num_want: spec.numwant,
                        port: 1024 + (peer % 64_000) as u16,
                        options: Options(&[]),
                    },
                );
            }
            Kind::Scrape => {
                let n = self.rng.usize(1..=spec.scrape_max);
                self.hashes.clear();
                for _ in 0..n {
                    let t = self.torrents.sample(|| self.rng.f64());
                    self.hashes.push(value20(self.hash_seed, t));
                }
                write_scrape_request(out, sock.connection_id.unwrap_or(0), tid, &self.hashes);
            }
        }
        sock.slots[slot as usize] = Slot {
            tid,
            kind,
            busy: true,
            intended,
            sent: now,
        };
        if sock.queued == 0 {
            sock.out_slots.clear();
        }
        sock.out_slots.push(slot);
        sock.queued += 1;
    }

    /// Sends socket `j`'s queued requests in one sendmmsg (more if the kernel takes part).
    fn flush(&mut self, j: usize, now: u64) {
        let sock = &mut self.socks[j];
        let n = sock.queued;
        if n == 0 {
            return;
        }
        sock.queued = 0;
        let b = &mut self.buffers;
        // Stamp the send time now, after the batch was built.
        let stamp = self.load.schedule.now();
        for &slot in &sock.out_slots[..n] {
            sock.slots[slot as usize].sent = stamp;
        }
        let mut done = 0;
        while done < n {
            let slices: Vec<[IoSlice<'_>; 1]> = sock.out[done..n]
                .iter()
                .map(|o| [IoSlice::new(o)])
                .collect();
            match sendmmsg(
                sock.socket.as_raw_fd(),
                &mut b.send_headers,
                slices.iter(),
                &b.no_addrs[..n - done],
                [],
                MsgFlags::MSG_DONTWAIT,
            ) {
                Ok(r) => {
                    let sent = r.count();
                    if sent == 0 {
                        break;
                    }
                    done += sent;
                }
                Err(Errno::EINTR) => {}
                Err(e) => {
                    // The send buffer is full or the target refuses: these requests never
                    // left; free their slots (the closed loop sends them again).
                    let class = if e == Errno::EAGAIN {
                        None
                    } else {
                        Some(format!("send: {}", error_kind(&std::io::Error::from(e))))
                    };
                    for &slot in &sock.out_slots[done..n] {
                        let s = sock.slots[slot as usize];
                        sock.slots[slot as usize].busy = false;
                        sock.free.push(slot);
                        if let Some(c) = &class {
                            // Sent, as far as the load goes, and refused by the kernel.
                            self.rec.sent(s.intended, s.sent);
                            self.rec.failed(c, s.sent, now);
                        }
                    }
                    break;
                }
            }
        }
        for &slot in &sock.out_slots[..done] {
            let s = sock.slots[slot as usize];
            self.rec.sent(s.intended, s.sent);
        }
    }

    /// Reads every answer waiting on socket `j`.
    fn receive(&mut self, j: usize) -> std::io::Result<()> {
        loop {
            let b = &mut self.buffers;
            let mut slices: Vec<[IoSliceMut<'_>; 1]> = b
                .input
                .iter_mut()
                .map(|buf| [IoSliceMut::new(buf)])
                .collect();
            match recvmmsg(
                self.socks[j].socket.as_raw_fd(),
                &mut b.recv_headers,
                slices.iter_mut(),
                MsgFlags::MSG_DONTWAIT,
                None,
            ) {
                Ok(msgs) => {
                    b.lens.clear();
                    b.lens.extend(msgs.map(|m| m.bytes));
                }
                Err(Errno::EAGAIN) => return Ok(()),
                Err(Errno::EINTR) => continue,
                Err(Errno::ECONNREFUSED) => {
                    // An ICMP port unreachable for an earlier datagram: nothing listens.
                    let now = self.load.schedule.now();
                    self.rec.error("refused", now);
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let now = self.load.schedule.now();
            let n = self.buffers.lens.len();
            for k in 0..n {
                let len = self.buffers.lens[k];
                let datagram = std::mem::take(&mut self.buffers.input[k]);
                self.answer(j, &datagram[..len], now);
                self.buffers.input[k] = datagram;
            }
            if n < BATCH {
                return Ok(());
            }
        }
    }

    fn answer(&mut self, j: usize, datagram: &[u8], now: u64) {
        let resp = match parse_response(datagram) {
            Ok(r) => r,
            Err(_) => return self.rec.error("malformed answer", now),
        };
        let tid = match resp {
            Response::Connect { transaction_id, .. }
            | Response::Announce { transaction_id, .. }
            | Response::Scrape { transaction_id, .. }
            | Response::Error { transaction_id, .. } => transaction_id,
        };
        let sock = &mut self.socks[j];
        let index = (tid & 0xffff) as usize;
        let Some(slot) = sock
            .slots
            .get(index)
            .copied()
            .filter(|s| s.busy && s.tid == tid)
        else {
            // An answer to a request that already timed out, or one we never sent.
            return self.rec.error("answer to no request in flight", now);
        };
        sock.slots[index].busy = false;
        sock.free.push(index as u16);
        match (slot.kind, resp) {
            (Kind::Connect, Response::Connect { connection_id, .. }) => {
                sock.connection_id = Some(connection_id);
                self.rec.ok(slot.intended, slot.sent, now);
            }
            (Kind::Announce, Response::Announce { .. })
            | (Kind::Scrape, Response::Scrape { .. }) => {
                self.rec.ok(slot.intended, slot.sent, now);
            }
            (_, Response::Error { message, .. }) => {
                let m = String::from_utf8_lossy(&message[..message.len().min(60)]).into_owned();
                if m.contains("connection") {
                    // An expired or unknown connection id: get a new one.
                    sock.connection_id = None;
                }
                self.rec
                    .failed(&format!("tracker error: {m}"), slot.sent, now);
            }
            _ => self.rec.failed("answer of the wrong kind", slot.sent, now),
        }
    }

    /// Counts requests in flight for longer than the timeout and frees their slots.
    fn expire(&mut self, now: u64) {
        let timeout = self.load.timeout;
        for sock in &mut self.socks {
            for (i, slot) in sock.slots.iter_mut().enumerate() {
                if slot.busy && now.saturating_sub(slot.sent) > timeout {
                    slot.busy = false;
                    sock.free.push(i as u16);
                    self.rec.failed("timeout", slot.sent, now);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_addresses() {
        let lo: SocketAddr = "127.0.0.1:6969".parse().unwrap();
        assert_eq!(source(&lo, 0, true).ip().to_string(), "127.1.0.1");
        assert_eq!(source(&lo, 255, true).ip().to_string(), "127.1.1.0");
        assert_eq!(source(&lo, 0, false).ip().to_string(), "0.0.0.0");
        let v6: SocketAddr = "[::1]:6969".parse().unwrap();
        assert_eq!(source(&v6, 3, true).ip().to_string(), "::1");
    }
}
