//! Socket set-up: every worker gets its own SO_REUSEPORT TCP listeners and UDP sockets on the
//! same addresses, so the kernel spreads connections and datagrams over workers with no shared
//! accept queue and no thundering herd.

use std::io;
use std::net::{Ipv6Addr, SocketAddr};

use socket2::{Domain, Protocol, Socket, Type};

/// What a TCP listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenerKind {
    /// Services (tracker) and /healthz.
    Http,
    /// /metrics, /stats and /healthz.
    Admin,
    /// What `Http` serves, over TLS.
    Https,
}

impl ListenerKind {
    /// Whether it serves the services' routes (HTTP or HTTPS).
    pub fn serves(self) -> bool {
        matches!(self, ListenerKind::Http | ListenerKind::Https)
    }
}

/// The addresses every worker binds, resolved once so port 0 becomes one concrete port shared
/// by all workers.
#[derive(Debug, Clone, Default)]
pub struct Addresses {
    /// TCP listeners and their kind.
    pub tcp: Vec<(SocketAddr, ListenerKind)>,
    /// UDP sockets.
    pub udp: Vec<SocketAddr>,
}

/// A TCP listener with SO_REUSEPORT, non-blocking.
pub fn tcp_listener(addr: SocketAddr, backlog: u32) -> io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket.set_tcp_nodelay(true)?;
    socket.bind(&addr.into())?;
    socket.listen(backlog.min(i32::MAX as u32) as i32)?;
    Ok(socket.into())
}

/// A UDP socket with SO_REUSEPORT and the requested buffer sizes, non-blocking.
pub fn udp_socket(
    addr: SocketAddr,
    recv_buf: usize,
    send_buf: usize,
) -> io::Result<std::net::UdpSocket> {
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    // The kernel caps these at net.core.rmem_max / wmem_max unless the process may force them
    // (CAP_NET_ADMIN); a smaller buffer still works. hotpath doctor reports the cap.
    use nix::sys::socket::{setsockopt, sockopt};
    if setsockopt(&socket, sockopt::RcvBufForce, &recv_buf).is_err() {
        let _ = socket.set_recv_buffer_size(recv_buf);
    }
    if setsockopt(&socket, sockopt::SndBufForce, &send_buf).is_err() {
        let _ = socket.set_send_buffer_size(send_buf);
    }
    socket.bind(&addr.into())?;
    Ok(socket.into())
}

/// The configured addresses plus, when `ipv6` is on, `[::]` at the port of each `0.0.0.0`.
pub fn with_ipv6(addrs: &[SocketAddr], ipv6: bool) -> Vec<(SocketAddr, bool)> {
    let mut out: Vec<(SocketAddr, bool)> = addrs.iter().map(|a| (*a, false)).collect();
    if ipv6 {
        for a in addrs {
            if a.ip().is_unspecified() && a.is_ipv4() {
                let v6 = SocketAddr::from((Ipv6Addr::UNSPECIFIED, a.port()));
                if !addrs.contains(&v6) {
                    out.push((v6, true));
                }
            }
        }
    }
    out
}

/// A port this process serves, held by name so a second hotpath cannot share it.
///
/// Every worker binds its listeners with SO_REUSEPORT, which would also let a second hotpath
/// process bind the same port silently and split the traffic (and the swarms) with the first.
/// So the process also binds an abstract Unix socket named after the protocol and port: the
/// name is unique per network namespace, and the kernel frees it when the process ends, even
/// on `kill -9`.
#[derive(Debug)]
pub struct PortGuard {
    _socket: std::os::unix::net::UnixListener,
}

impl PortGuard {
    /// The abstract socket name that guards `proto`'s `port`.
    pub fn name(proto: &str, port: u16) -> String {
        format!("hotpath:{proto}:{port}")
    }

    /// A guard already bound (inherited from the process before this one).
    pub fn from_listener(socket: std::os::unix::net::UnixListener) -> PortGuard {
        PortGuard { _socket: socket }
    }

    /// A duplicate of its descriptor, to hand over.
    pub fn dup(&self) -> io::Result<std::os::fd::OwnedFd> {
        use std::os::fd::AsFd as _;
        self._socket.as_fd().try_clone_to_owned()
    }
}

/// Why a port could not be claimed.
#[derive(Debug)]
pub enum Claim {
    /// Another hotpath process holds it (its PID, when the kernel tells).
    Taken(Option<i32>),
    /// The guard socket could not be made.
    Io(io::Error),
}

/// Claims `port` for `proto` ("tcp" or "udp") for this process.
pub fn claim_port(proto: &str, port: u16) -> Result<PortGuard, Claim> {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr as UnixAddr, UnixListener, UnixStream};
    let name = PortGuard::name(proto, port);
    let addr = UnixAddr::from_abstract_name(name.as_bytes()).map_err(Claim::Io)?;
    match UnixListener::bind_addr(&addr) {
        Ok(socket) => Ok(PortGuard { _socket: socket }),
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
            // The holder's PID, from the credentials of the socket it listens on.
            let pid = UnixStream::connect_addr(&addr).ok().and_then(|s| {
                nix::sys::socket::getsockopt(&s, nix::sys::socket::sockopt::PeerCredentials)
                    .ok()
                    .map(|c| c.pid())
            });
            Err(Claim::Taken(pid))
        }
        Err(e) => Err(Claim::Io(e)),
    }
}
