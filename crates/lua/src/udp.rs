//! `hp.udp.send`: datagrams out through a per-worker pool of connected sockets, one per remote
//! address, reused for every message to it (the Go report's technique: no socket, bind or
//! route lookup per message). Bounded in sockets (the idle longest is closed to make room)
//! and closed after an idle time. Sends never block: a full socket buffer drops the message
//! and counts it.

use hotpath_metrics::Counter;
use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::time::{Duration, Instant};

/// Names resolved per worker at most (then the cache starts over).
const MAX_NAMES: usize = 1024;
/// How long a resolved name is trusted.
const NAME_TTL: Duration = Duration::from_secs(60);

/// The pools' counters, shared by all workers.
#[derive(Default)]
pub struct UdpCounters {
    /// Sockets opened.
    pub opened: Counter,
    /// Sockets open now.
    pub open: Counter,
    /// Messages sent.
    pub sent: Counter,
    /// Messages dropped because the socket's buffer was full.
    pub dropped: Counter,
    /// Messages that failed (unreachable, refused, too large).
    pub errors: Counter,
}

struct Pooled {
    socket: UdpSocket,
    used: Instant,
}

/// One worker's pool.
pub struct UdpPool {
    sockets: HashMap<SocketAddr, Pooled>,
    names: HashMap<String, (SocketAddr, Instant)>,
    max_sockets: usize,
    idle: Duration,
    last_sweep: Instant,
}

impl UdpPool {
    /// A pool of at most `max_sockets` sockets (0: a socket per message, for comparison),
    /// each closed after `idle` unused.
    pub fn new(max_sockets: usize, idle: Duration) -> UdpPool {
        UdpPool {
            sockets: HashMap::new(),
            names: HashMap::new(),
            max_sockets,
            idle,
            last_sweep: Instant::now(),
        }
    }

    /// The address `target` ("ip:port", "[v6]:port" or "host:port") names.
    pub fn resolve(&mut self, target: &str) -> Result<SocketAddr, String> {
        if let Ok(a) = target.parse::<SocketAddr>() {
            return Ok(a);
        }
        let now = Instant::now();
        if let Some(&(a, at)) = self.names.get(target) {
            if now.duration_since(at) < NAME_TTL {
                return Ok(a);
            }
        }
        let a = target
            .to_socket_addrs()
            .map_err(|e| format!("{target}: {e}"))?
            .next()
            .ok_or_else(|| format!("{target}: no address"))?;
        if self.names.len() >= MAX_NAMES {
            self.names.clear();
        }
        self.names.insert(target.to_string(), (a, now));
        Ok(a)
    }

    /// Sends `msg` to `to`; `Ok(false)` when it was dropped (the socket's buffer was full).
    pub fn send(&mut self, to: SocketAddr, msg: &[u8], c: &UdpCounters) -> io::Result<bool> {
        let now = Instant::now();
        if now.duration_since(self.last_sweep) > self.idle.min(Duration::from_secs(1)) {
            self.sweep(now, c);
        }
        let result = if self.max_sockets == 0 {
            let s = open(to, c)?;
            let r = s.send(msg);
            c.open.sub(1);
            r
        } else {
            if !self.sockets.contains_key(&to) {
                if self.sockets.len() >= self.max_sockets {
                    self.close_idlest(c);
                }
                let socket = open(to, c)?;
                self.sockets.insert(to, Pooled { socket, used: now });
            }
            let p = self.sockets.get_mut(&to).expect("just made");
            p.used = now;
            p.socket.send(msg)
        };
        match result {
            Ok(_) => {
                c.sent.add(1);
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                c.dropped.add(1);
                Ok(false)
            }
            Err(e) => {
                c.errors.add(1);
                // A connected socket reports an earlier message's ICMP error on a later send:
                // start afresh next time.
                if self.sockets.remove(&to).is_some() {
                    c.open.sub(1);
                }
                Err(e)
            }
        }
    }

    /// Sockets open in this pool.
    pub fn len(&self) -> usize {
        self.sockets.len()
    }

    /// Whether no socket is open.
    pub fn is_empty(&self) -> bool {
        self.sockets.is_empty()
    }

    fn sweep(&mut self, now: Instant, c: &UdpCounters) {
        self.last_sweep = now;
        let idle = self.idle;
        let before = self.sockets.len();
        self.sockets
            .retain(|_, p| now.duration_since(p.used) < idle);
        c.open.sub((before - self.sockets.len()) as u64);
    }

    fn close_idlest(&mut self, c: &UdpCounters) {
        if let Some(&oldest) = self
            .sockets
            .iter()
            .min_by_key(|(_, p)| p.used)
            .map(|(a, _)| a)
        {
            self.sockets.remove(&oldest);
            c.open.sub(1);
        }
    }
}

fn open(to: SocketAddr, c: &UdpCounters) -> io::Result<UdpSocket> {
    let local: SocketAddr = if to.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let s = UdpSocket::bind(local)?;
    s.connect(to)?;
    s.set_nonblocking(true)?;
    c.opened.add(1);
    c.open.add(1);
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sink() -> (UdpSocket, SocketAddr) {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let a = s.local_addr().unwrap();
        (s, a)
    }

    #[test]
    fn one_socket_per_remote_reused_and_bounded() {
        let c = UdpCounters::default();
        let mut pool = UdpPool::new(2, Duration::from_secs(60));
        let (a, aa) = sink();
        let (b, ba) = sink();
        let (_d, da) = sink();
        for i in 0..100u32 {
            assert!(pool.send(aa, &i.to_be_bytes(), &c).unwrap());
            assert!(pool.send(ba, b"b", &c).unwrap());
        }
        let mut buf = [0u8; 16];
        let mut from = std::collections::HashSet::new();
        for i in 0..100u32 {
            let (n, f) = a.recv_from(&mut buf).unwrap();
            assert_eq!(&buf[..n], &i.to_be_bytes(), "in order");
            from.insert(f);
            from.insert(b.recv_from(&mut buf).unwrap().1);
        }
        assert_eq!(from.len(), 2, "one source port per remote");
        assert_eq!(c.opened.get(), 2);
        // A third remote closes the idlest of the two.
        pool.send(da, b"d", &c).unwrap();
        assert_eq!((pool.len(), c.open.get()), (2, 2));
        assert_eq!(c.sent.get(), 201);
    }

    #[test]
    fn idle_sockets_close_and_names_resolve() {
        let c = UdpCounters::default();
        let mut pool = UdpPool::new(8, Duration::from_millis(20));
        let (_s, a) = sink();
        let to = pool.resolve(&format!("localhost:{}", a.port())).unwrap();
        assert!(to.ip().is_loopback());
        pool.send(a, b"x", &c).unwrap();
        std::thread::sleep(Duration::from_millis(1100));
        pool.send(a, b"y", &c).unwrap();
        assert_eq!(c.opened.get(), 2, "the idle socket was closed");
        assert_eq!(c.open.get(), 1);
        assert!(pool.resolve("no-such-host.invalid:1").is_err());
        assert!(pool.resolve("127.0.0.1").is_err(), "a port is needed");
    }
}
