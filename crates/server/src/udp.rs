//! Batched UDP: one recvmmsg reads up to `batch` datagrams into reused buffers, the service
//! answers each into a reused output buffer, and one sendmmsg sends every answer.

use std::io::{IoSlice, IoSliceMut};
use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::AsRawFd;

use nix::errno::Errno;
use nix::sys::socket::{recvmmsg, sendmmsg, MsgFlags, MultiHeaders, SockaddrStorage};

/// Largest datagram read; longer ones are cut and then fail to parse (BEP 15 requests are at
/// most 16 + 74 x 20 = 1496 bytes, announces with BEP 41 options a few hundred).
pub const MAX_DATAGRAM: usize = 2048;

/// Reused buffers for one worker's UDP batches.
pub struct Batch {
    bufs: Vec<Vec<u8>>,
    /// Length of each received datagram.
    pub lens: Vec<usize>,
    /// Sender of each received datagram.
    pub from: Vec<SocketAddr>,
    /// Answer to each datagram (empty: no answer).
    pub outs: Vec<Vec<u8>>,
    recv_headers: MultiHeaders<SockaddrStorage>,
    /// The receive headers were written by the kernel and must be made anew (see `recv`).
    recv_used: bool,
    send_headers: MultiHeaders<SockaddrStorage>,
    send_addrs: Vec<Option<SockaddrStorage>>,
}

fn to_std(s: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = s.as_sockaddr_in() {
        return Some(SocketAddr::V4(SocketAddrV4::new(v4.ip(), v4.port())));
    }
    s.as_sockaddr_in6().map(|v6| {
        SocketAddr::V6(SocketAddrV6::new(
            v6.ip(),
            v6.port(),
            v6.flowinfo(),
            v6.scope_id(),
        ))
    })
}

impl Batch {
    /// Buffers for batches of `size` datagrams.
    pub fn new(size: usize) -> Self {
        Self {
            bufs: (0..size).map(|_| vec![0u8; MAX_DATAGRAM]).collect(),
            lens: Vec::with_capacity(size),
            from: Vec::with_capacity(size),
            outs: (0..size).map(|_| Vec::with_capacity(1024)).collect(),
            recv_headers: MultiHeaders::preallocate(size, None),
            recv_used: false,
            send_headers: MultiHeaders::preallocate(size, None),
            send_addrs: Vec::with_capacity(size),
        }
    }

    /// Datagrams per batch.
    pub fn size(&self) -> usize {
        self.bufs.len()
    }

    /// The `i`th received datagram.
    pub fn datagram(&self, i: usize) -> &[u8] {
        &self.bufs[i][..self.lens[i]]
    }

    /// Reads up to a batch of datagrams without blocking; returns how many were read.
    /// `ipv6_socket`: whether the socket is bound to an IPv6 address (so it may receive both
    /// families).
    pub fn recv(&mut self, socket: &impl AsRawFd, ipv6_socket: bool) -> std::io::Result<usize> {
        self.lens.clear();
        self.from.clear();
        if self.recv_used && ipv6_socket {
            // recvmmsg leaves each slot's address length at what the kernel wrote, and nix sets
            // it only when the headers are made: an IPv6 sender read into a slot last used by
            // an IPv4 one would be cut to 16 bytes and finished with an earlier client's bytes.
            // Fresh headers cost one allocation per batch; an IPv4 socket's senders always fit
            // what an earlier IPv4 sender left, so it skips that.
            self.recv_headers = MultiHeaders::preallocate(self.bufs.len(), None);
            self.recv_used = false;
        }
        let mut slices: Vec<[IoSliceMut<'_>; 1]> =
            self.bufs.iter_mut().map(|b| [IoSliceMut::new(b)]).collect();
        let res = recvmmsg(
            socket.as_raw_fd(),
            &mut self.recv_headers,
            slices.iter_mut(),
            MsgFlags::MSG_DONTWAIT,
            None,
        );
        match res {
            Ok(msgs) => {
                for m in msgs {
                    self.recv_used = true;
                    let truncated = m.flags.contains(MsgFlags::MSG_TRUNC);
                    let addr = m.address.as_ref().and_then(to_std);
                    match addr {
                        Some(a) => {
                            // A cut datagram is passed on empty, so it is dropped as malformed.
                            self.lens.push(if truncated { 0 } else { m.bytes });
                            self.from.push(a);
                        }
                        None => {
                            self.lens.push(0);
                            self.from.push(SocketAddr::from(([0, 0, 0, 0], 0)));
                        }
                    }
                }
                Ok(self.lens.len())
            }
            Err(Errno::EAGAIN) => Ok(0),
            Err(e) => Err(e.into()),
        }
    }

    /// Sends every non-empty answer to its datagram's sender; returns (sent, failed).
    pub fn send(&mut self, socket: &impl AsRawFd) -> (usize, usize) {
        self.send_addrs.clear();
        let mut order: Vec<usize> = Vec::with_capacity(self.lens.len());
        for i in 0..self.lens.len() {
            if !self.outs[i].is_empty() {
                order.push(i);
                self.send_addrs
                    .push(Some(SockaddrStorage::from(self.from[i])));
            }
        }
        let mut sent = 0;
        while sent < order.len() {
            let slices: Vec<[IoSlice<'_>; 1]> = order[sent..]
                .iter()
                .map(|&i| [IoSlice::new(&self.outs[i])])
                .collect();
            let res = sendmmsg(
                socket.as_raw_fd(),
                &mut self.send_headers,
                slices.iter(),
                &self.send_addrs[sent..],
                [],
                MsgFlags::MSG_DONTWAIT,
            );
            match res {
                Ok(results) => {
                    let n = results.count();
                    if n == 0 {
                        break;
                    }
                    sent += n;
                }
                Err(Errno::EINTR) => continue,
                // EAGAIN (send buffer full) or an error for the first datagram: skip it, so
                // one unreachable client does not hold back the rest.
                Err(_) => {
                    let failed = order.len() - sent;
                    let rest = self.send_rest(socket, &order[sent + 1..]);
                    return (sent + rest, failed - rest);
                }
            }
        }
        (sent, order.len() - sent)
    }

    fn send_rest(&self, socket: &impl AsRawFd, order: &[usize]) -> usize {
        let fd = socket.as_raw_fd();
        order
            .iter()
            .filter(|&&i| {
                let addr = SockaddrStorage::from(self.from[i]);
                nix::sys::socket::sendto(fd, &self.outs[i], &addr, MsgFlags::MSG_DONTWAIT).is_ok()
            })
            .count()
    }
}
