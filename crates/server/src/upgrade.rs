//! Upgrading the binary without a gap, as nginx does on SIGUSR2: the running process starts
//! the binary again (the file now at its path, the new version) with its listening sockets
//! and port guards left open across the exec, and the two speak over a socket pair:
//!
//! 1. the new process reads and checks its config, finds each inherited socket its config
//!    names, and says `ready` (or `failed: why`, and the old one serves on as if nothing
//!    happened);
//! 2. the old one stops: it answers what is in flight, writes everything pending to the
//!    database, saves the swarms, and exits, which the new one sees as the end of the pair;
//! 3. the new one then opens the store, restores the swarms, and serves on the same sockets.
//!
//! The sockets are never closed, so nothing that reaches them between 2 and 3 is lost: new
//! connections wait in the listen backlog and datagrams in the receive buffers, and are
//! answered once the new workers start. No two processes serve at once, so the swarms and a
//! private tracker's accounting pass whole from one to the other.
//!
//! Taking over a descriptor by its number is the one thing here that needs `unsafe`
//! ([`adopt`]); each number is checked to be an open socket of the expected kind first.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{self, BufRead as _, BufReader, Read as _, Write as _};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use nix::fcntl::{fcntl, FcntlArg, FdFlag};
use nix::sys::socket::{getsockopt, sockopt};

use crate::listen::PortGuard;

/// The longest line the old process reads from the new one (`ready`, `failed: why`).
const MAX_SAID: u64 = 4096;

/// The variable that lists the inherited descriptors: `tcp:5,udp:6,guard:7`.
pub const INHERIT: &str = "HOTPATH_INHERIT";
/// The variable that names the new process's end of the socket pair.
pub const HANDSHAKE: &str = "HOTPATH_UPGRADE_FD";

/// What a process hands over: a duplicate of each listening socket and port guard.
#[derive(Debug, Default)]
pub struct Handover {
    fds: Vec<(&'static str, OwnedFd)>,
}

impl Handover {
    /// Keeps a duplicate of `fd` as `kind` ("tcp", "udp" or "guard").
    pub fn keep(&mut self, kind: &'static str, fd: OwnedFd) {
        self.fds.push((kind, fd));
    }

    /// Starts `exe` with `args`, these descriptors and one end of a new socket pair left open
    /// across the exec; returns the child and the other end.
    pub fn spawn(&self, exe: &Path, args: &[OsString]) -> io::Result<Successor> {
        let (ours, theirs) = UnixStream::pair()?;
        let list: Vec<String> = self
            .fds
            .iter()
            .map(|(kind, fd)| format!("{kind}:{}", fd.as_raw_fd()))
            .collect();
        let raw: Vec<RawFd> = self
            .fds
            .iter()
            .map(|(_, fd)| fd.as_raw_fd())
            .chain([theirs.as_raw_fd()])
            .collect();
        let inherit = |on: bool| -> io::Result<()> {
            let flags = if on {
                FdFlag::empty()
            } else {
                FdFlag::FD_CLOEXEC
            };
            for &fd in &raw {
                fcntl(fd, FcntlArg::F_SETFD(flags)).map_err(io::Error::from)?;
            }
            Ok(())
        };
        // Open across the exec for this one spawn only (no other thread spawns).
        inherit(true)?;
        let child = Command::new(exe)
            .args(args)
            .env(INHERIT, list.join(","))
            .env(HANDSHAKE, theirs.as_raw_fd().to_string())
            .stdin(std::process::Stdio::null())
            .spawn();
        inherit(false)?;
        drop(theirs);
        Ok(Successor {
            child: child?,
            stream: ours,
        })
    }
}

/// The new process, seen from the old one.
#[derive(Debug)]
pub struct Successor {
    /// The process.
    pub child: Child,
    /// The old process's end of the pair: open until the old process exits, which tells
    /// the new one to start.
    pub stream: UnixStream,
}

impl Successor {
    /// Waits up to `within` for the new process to say it is ready; the reason when it
    /// does not (it failed, ended, or took too long; it is stopped then).
    pub fn ready(&mut self, within: Duration) -> Result<(), String> {
        let deadline = Instant::now() + within;
        // A line of at most a few KiB: what the new process says is its own, but nothing read
        // from a socket grows without a bound.
        let stream = self.stream.try_clone().map_err(|e| e.to_string())?;
        let mut reader = BufReader::new(stream.take(MAX_SAID));
        let mut line = String::new();
        let said = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break Err(format!("no answer in {} s", within.as_secs()));
            }
            let _ = self
                .stream
                .set_read_timeout(Some(left.min(Duration::from_millis(200))));
            match reader.read_line(&mut line) {
                Ok(0) => break Err("it ended before it was ready".into()),
                Ok(_) => break Ok(line.trim().to_string()),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    if let Ok(Some(status)) = self.child.try_wait() {
                        break Err(format!("it ended ({status}) before it was ready"));
                    }
                }
                Err(e) => break Err(e.to_string()),
            }
        };
        let _ = self.stream.set_read_timeout(None);
        match said {
            Ok(l) if l == "ready" => Ok(()),
            other => {
                let _ = self.child.kill();
                let _ = self.child.wait();
                Err(match other {
                    Ok(l) => l.strip_prefix("failed: ").unwrap_or(&l).to_string(),
                    Err(e) => e,
                })
            }
        }
    }
}

/// The new process's side: the pair's end it was given, when it was started as a successor.
#[derive(Debug)]
pub struct Handshake(UnixStream);

impl Handshake {
    /// The pair's end named in the environment (which is cleared), or None.
    pub fn from_env() -> io::Result<Option<Handshake>> {
        let Some(v) = std::env::var_os(HANDSHAKE) else {
            return Ok(None);
        };
        std::env::remove_var(HANDSHAKE);
        let fd: RawFd = v
            .to_str()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| invalid(format!("{HANDSHAKE}={v:?} is not a descriptor")))?;
        let owned = adopt(fd, libc_sock::STREAM, None)?;
        Ok(Some(Handshake(UnixStream::from(owned))))
    }

    /// Tells the old process the new one is ready to take over.
    pub fn ready(&mut self) -> io::Result<()> {
        self.0.write_all(b"ready\n")
    }

    /// Tells the old process the new one cannot take over, and why.
    pub fn failed(&mut self, why: &str) {
        let _ = writeln!(self.0, "failed: {}", why.replace('\n', "; "));
    }

    /// Waits until the old process has exited (its end of the pair closes).
    pub fn wait_for_exit(mut self) {
        // Nothing is expected before the end; whatever comes is read and dropped.
        let _ = io::copy(&mut self.0, &mut io::sink());
    }
}

/// The sockets and port guards a process inherited from the one before it.
#[derive(Debug, Default)]
pub struct Inherited {
    tcp: HashMap<SocketAddr, Vec<std::net::TcpListener>>,
    udp: HashMap<SocketAddr, Vec<std::net::UdpSocket>>,
    guards: HashMap<String, UnixListener>,
}

impl Inherited {
    /// The descriptors named in the environment (which is cleared), each checked to be an
    /// open socket of its kind.
    pub fn from_env() -> io::Result<Inherited> {
        let mut out = Inherited::default();
        let Some(v) = std::env::var_os(INHERIT) else {
            return Ok(out);
        };
        std::env::remove_var(INHERIT);
        let text = v
            .to_str()
            .ok_or_else(|| invalid(format!("{INHERIT} is not text")))?;
        let mut seen = std::collections::HashSet::new();
        for item in text.split(',').filter(|i| !i.is_empty()) {
            let (kind, fd) = item
                .split_once(':')
                .and_then(|(k, f)| Some((k, f.parse::<RawFd>().ok()?)))
                .ok_or_else(|| invalid(format!("{INHERIT}: {item:?} is not KIND:FD")))?;
            if !seen.insert(fd) {
                return Err(invalid(format!("{INHERIT}: descriptor {fd} twice")));
            }
            match kind {
                "tcp" => {
                    let l = std::net::TcpListener::from(adopt(fd, libc_sock::STREAM, Some(true))?);
                    out.tcp.entry(l.local_addr()?).or_default().push(l);
                }
                "udp" => {
                    let s = std::net::UdpSocket::from(adopt(fd, libc_sock::DGRAM, None)?);
                    out.udp.entry(s.local_addr()?).or_default().push(s);
                }
                "guard" => {
                    use std::os::linux::net::SocketAddrExt as _;
                    let g = UnixListener::from(adopt(fd, libc_sock::STREAM, Some(true))?);
                    let name = g
                        .local_addr()?
                        .as_abstract_name()
                        .map(|n| String::from_utf8_lossy(n).into_owned())
                        .ok_or_else(|| invalid(format!("{INHERIT}: guard {fd} has no name")))?;
                    out.guards.insert(name, g);
                }
                _ => return Err(invalid(format!("{INHERIT}: unknown kind {kind:?}"))),
            }
        }
        Ok(out)
    }

    /// Whether nothing was inherited.
    pub fn is_empty(&self) -> bool {
        self.tcp.is_empty() && self.udp.is_empty() && self.guards.is_empty()
    }

    /// An inherited TCP listener on `addr`, if one is left.
    pub fn take_tcp(&mut self, addr: SocketAddr) -> Option<std::net::TcpListener> {
        self.tcp.get_mut(&addr)?.pop()
    }

    /// An inherited UDP socket on `addr`, if one is left.
    pub fn take_udp(&mut self, addr: SocketAddr) -> Option<std::net::UdpSocket> {
        self.udp.get_mut(&addr)?.pop()
    }

    /// The inherited guard of `proto`'s `port`.
    pub fn take_guard(&mut self, proto: &str, port: u16) -> Option<PortGuard> {
        self.guards
            .remove(&PortGuard::name(proto, port))
            .map(PortGuard::from_listener)
    }

    /// The inherited sockets no listener of the config took: (TCP, UDP) addresses.
    pub fn left(&self) -> (Vec<SocketAddr>, Vec<SocketAddr>) {
        fn keys<T>(m: &HashMap<SocketAddr, Vec<T>>) -> Vec<SocketAddr> {
            m.iter()
                .filter(|(_, v)| !v.is_empty())
                .map(|(a, _)| *a)
                .collect()
        }
        (keys(&self.tcp), keys(&self.udp))
    }

    /// The TCP listeners left on `addr` (more than the workers took).
    pub fn rest_tcp(&mut self, addr: SocketAddr) -> Vec<std::net::TcpListener> {
        self.tcp.remove(&addr).unwrap_or_default()
    }

    /// The UDP sockets left on `addr`.
    pub fn rest_udp(&mut self, addr: SocketAddr) -> Vec<std::net::UdpSocket> {
        self.udp.remove(&addr).unwrap_or_default()
    }
}

/// Tells systemd `state` (`READY=1`, `MAINPID=…`, `STOPPING=1`) when it runs the process as
/// a `Type=notify` service (`NOTIFY_SOCKET` names its socket); nothing otherwise.
pub fn notify_systemd(state: &str) {
    use std::os::linux::net::SocketAddrExt as _;
    use std::os::unix::net::{SocketAddr as UnixAddr, UnixDatagram};
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let bytes = std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()).to_vec();
    let addr = match bytes.strip_prefix(b"@") {
        Some(name) => UnixAddr::from_abstract_name(name),
        None => UnixAddr::from_pathname(Path::new(&path)),
    };
    let sent = addr.and_then(|a| UnixDatagram::unbound()?.send_to_addr(state.as_bytes(), &a));
    if let Err(e) = sent {
        log::warn!("systemd: cannot tell {state:?}: {e}");
    }
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// Socket types, as SO_TYPE reports them.
mod libc_sock {
    pub const STREAM: nix::sys::socket::SockType = nix::sys::socket::SockType::Stream;
    pub const DGRAM: nix::sys::socket::SockType = nix::sys::socket::SockType::Datagram;
}

/// Takes ownership of descriptor `fd`, inherited across the exec, once it is checked to be a
/// socket of `kind` (and listening, when `listening` says so).
#[allow(unsafe_code)]
fn adopt(
    fd: RawFd,
    kind: nix::sys::socket::SockType,
    listening: Option<bool>,
) -> io::Result<OwnedFd> {
    let bad = |what: &str| invalid(format!("inherited descriptor {fd}: {what}"));
    if fd < 3 {
        return Err(bad("not one that can be inherited"));
    }
    // A borrowed view for the checks; fcntl fails on a number that is not open.
    fcntl(fd, FcntlArg::F_GETFD).map_err(|_| bad("not open"))?;
    // SAFETY: `fd` is open (F_GETFD succeeded) and, as `from_env` checks, named once in the
    // environment that the process before this one set for it; nothing else in this
    // process owns it, so the OwnedFd made here is its one owner, and a failed check below
    // closes it.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let ty = getsockopt(&owned, sockopt::SockType).map_err(|_| bad("not a socket"))?;
    if ty != kind {
        return Err(bad("a socket of another kind"));
    }
    if let Some(want) = listening {
        let acc = getsockopt(&owned, sockopt::AcceptConn).map_err(|_| bad("not a socket"))?;
        if acc != want {
            return Err(bad("not listening"));
        }
    }
    fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC)).map_err(io::Error::from)?;
    Ok(owned)
}
