//! io_uring for the UDP workers: the workspace's one crate with `unsafe` code.
//!
//! A worker's UDP sockets share one ring and one group of `n` receive buffers the kernel
//! picks from (a provided-buffer ring). Each socket has one multishot RecvMsg in flight that
//! yields a completion per datagram, its sender's address and the datagram written into the
//! next free buffer; buffer `i` pairs with answer slot `i`, so a buffer's life is a loop:
//!
//! ```text
//! in the buffer ring -> Received (the caller reads the datagram, writes the answer)
//!     -> SendMsg in flight (or straight back when there is no answer) -> back in the ring
//! ```
//!
//! One armed receive per socket (not one per buffer) means a datagram wakes one operation,
//! not every one waiting on the socket; the sockets are registered files, so no operation
//! looks up a descriptor; the ring runs its completion work only when the worker asks
//! (`DEFER_TASKRUN`), and an eventfd tells the worker's epoll loop when there is some. When
//! every buffer is taken the receive ends (`ENOBUFS`) and is armed again once buffers come
//! back; datagrams meanwhile wait in the socket's buffer.
//!
//! Soundness rests on one rule, kept by each buffer's `State`: while a buffer is in the buffer
//! ring the kernel may write it; while its answer is in flight the kernel reads the answer
//! slot; Rust code touches a buffer only while it is `Received`, and an answer slot only then.
//! All of it is heap memory that never moves, freed only once nothing is in flight: `Drop`
//! cancels what is left and waits, and if the kernel does not hand everything back within a
//! second the memory is leaked rather than freed under it.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::{addr_of, addr_of_mut, NonNull};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use io_uring::{cqueue, opcode, types, IoUring};

/// Largest datagram passed on; longer ones are passed on empty (as cut), so they fail to
/// parse. The same bound as the epoll path's.
pub const MAX_DATAGRAM: usize = 2048;
/// Most buffers one ring holds (the kernel's limit for a buffer ring).
pub const MAX_SLOTS: usize = 1 << 15;
/// Room for a sender's address: a `sockaddr_in6`.
const NAMELEN: usize = 28;
/// `io_uring_recvmsg_out`: name length, control length, payload length, flags.
const OUT_HEADER: usize = 16;
/// Where a buffer's datagram starts.
const PAYLOAD: usize = OUT_HEADER + NAMELEN;
/// One receive buffer: the header, the address, and one byte more than `MAX_DATAGRAM` (a
/// datagram that fills it was longer).
const BUF: usize = (PAYLOAD + MAX_DATAGRAM + 1 + 63) & !63;
const _: () = assert!(BUF.is_multiple_of(64) && BUF > PAYLOAD + MAX_DATAGRAM);
/// The buffer group's id.
const GROUP: u16 = 0;
/// Size of a `sockaddr_storage`.
const NAME: usize = 128;

const SEND: u64 = 1 << 32;
const CANCEL: u64 = u64::MAX;

/// A socket address as the kernel reads it.
#[repr(C, align(8))]
struct Name([u8; NAME]);

/// What the kernel reads to send one answer.
#[repr(C)]
struct SendMem {
    hdr: libc::msghdr,
    iov: libc::iovec,
    name: Name,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    /// In the buffer ring: the kernel may write it.
    Free,
    /// Holds a datagram of `res` bytes (header and address included) from `socket`.
    Received { socket: u32, res: usize },
    /// Its answer is in flight: the kernel reads the answer slot.
    Sending,
}

/// Heap memory the kernel reads or writes, allocated once.
struct Raw {
    ptr: NonNull<u8>,
    layout: Layout,
}

impl Raw {
    fn new(size: usize, align: usize) -> io::Result<Raw> {
        let layout = Layout::from_size_align(size, align).map_err(io::Error::other)?;
        // SAFETY: the layout has a non-zero size (every caller asks for at least one buffer
        // or entry).
        let ptr = unsafe { alloc_zeroed(layout) };
        NonNull::new(ptr)
            .map(|ptr| Raw { ptr, layout })
            .ok_or_else(|| io::Error::from(io::ErrorKind::OutOfMemory))
    }
}

/// What `reap` collected besides received datagrams.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Reaped {
    /// Answers the kernel took.
    pub sent: usize,
    /// Answers that failed (the kernel's error, e.g. a full send buffer).
    pub failed: usize,
    /// Receives that failed (not counting "no free buffer", which only waits).
    pub recv_errors: usize,
    /// Times a receive found every buffer taken: datagrams then wait in the socket's own
    /// buffer (and past it the kernel drops them) until answers bring buffers back.
    pub buffers_full: usize,
}

/// One worker's UDP sockets on an io_uring.
pub struct UdpRing {
    ring: IoUring,
    /// `n` receive buffers of `BUF` bytes.
    bufs: Raw,
    /// The buffer ring: `n` entries the kernel takes buffers from.
    entries: Raw,
    /// The header every multishot receive is made from (only the lengths count).
    recv_hdr: Box<libc::msghdr>,
    /// Answer slots, one per buffer.
    sends: Vec<(NonNull<SendMem>, Vec<u8>)>,
    state: Vec<State>,
    /// Whether each socket's receive is in flight, and whether it failed for good.
    armed: Vec<bool>,
    dead: Vec<bool>,
    /// The buffer ring's tail as this side wrote it.
    tail: u16,
    /// Buffers in the buffer ring.
    free: usize,
    in_flight: usize,
    stopping: bool,
    event: OwnedFd,
    cqes: Vec<(u64, i32, u32)>,
}

// SAFETY: a `UdpRing` is the one owner of its ring and of all the memory its raw pointers
// point at; nothing is shared with another value, so moving it to another thread moves all of
// it. (It is built on the thread that uses it: the ring is single-issuer.)
unsafe impl Send for UdpRing {}

/// Whether this kernel lets this process build the ring `UdpRing::new` builds (io_uring
/// present and allowed, single issuer, deferred task work, multishot RecvMsg with a buffer
/// ring, SendMsg); the error says what is missing.
///
/// Tried on a thread of its own that ends with it: closing a ring has the kernel queue work
/// (with a signal-like notification) for every thread that used it, which would make that
/// thread's next blocking call fail with `EINTR`.
pub fn available() -> io::Result<()> {
    std::thread::Builder::new()
        .name("io_uring-probe".into())
        .spawn(probe)?
        .join()
        .map_err(|_| io::Error::other("the io_uring probe panicked"))?
}

fn probe() -> io::Result<()> {
    let ring = build(8)?;
    let entries = Raw::new(8 * 16, 4096)?;
    // SAFETY: `entries` is page-aligned memory for 8 entries that outlives the registration
    // (unregistered before it is freed, below).
    unsafe {
        ring.submitter()
            .register_buf_ring_with_flags(entries.ptr.as_ptr() as u64, 8, GROUP, 0)?;
    }
    ring.submitter().unregister_buf_ring(GROUP)?;
    drop(ring);
    // SAFETY: allocated by `Raw::new` with this layout; the kernel no longer knows it.
    unsafe { dealloc(entries.ptr.as_ptr(), entries.layout) };
    Ok(())
}

fn build(entries: u32) -> io::Result<IoUring> {
    let ring = IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_taskrun_flag()
        .setup_cqsize(entries * 2)
        .build(entries)?;
    let mut probe = io_uring::Probe::new();
    ring.submitter().register_probe(&mut probe)?;
    if !probe.is_supported(opcode::RecvMsgMulti::CODE) || !probe.is_supported(opcode::SendMsg::CODE)
    {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this kernel's io_uring has no RecvMsg or SendMsg",
        ));
    }
    Ok(ring)
}

impl UdpRing {
    /// A ring serving `sockets` (non-blocking UDP sockets the caller keeps open for the ring's
    /// life) with `per_socket` receive buffers for each (rounded up to a power of two in
    /// all). Fails where the kernel has no io_uring, forbids it (`kernel.io_uring_disabled`,
    /// seccomp), or lacks what this needs (Linux 6.1).
    pub fn new(sockets: &[RawFd], per_socket: usize) -> io::Result<UdpRing> {
        let wanted = sockets.len() * per_socket;
        if wanted == 0 || wanted > MAX_SLOTS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{wanted} buffers (1 to {MAX_SLOTS})"),
            ));
        }
        let n = wanted.next_power_of_two();
        // Each buffer has at most one answer in flight, each socket one receive.
        let entries = ((n + sockets.len() + 1).next_power_of_two() as u32).max(8);
        let ring = build(entries)?;
        ring.submitter().register_files(sockets)?;
        // SAFETY: eventfd takes no pointers; a non-negative result is a new descriptor that
        // nothing else owns.
        let efd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if efd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `efd` is a fresh descriptor owned by nothing else (checked above).
        let event = unsafe { OwnedFd::from_raw_fd(efd) };
        ring.submitter().register_eventfd(event.as_raw_fd())?;
        let bufs = Raw::new(n * BUF, 64)?;
        let ring_mem = Raw::new(n * 16, 4096)?;
        // SAFETY: `ring_mem` is page-aligned room for `n` entries; it stays allocated while
        // the ring lives (freed in `Drop` only after the ring is closed).
        unsafe {
            ring.submitter().register_buf_ring_with_flags(
                ring_mem.ptr.as_ptr() as u64,
                n as u16,
                GROUP,
                0,
            )?;
        }
        // SAFETY: all-zero bytes are a valid `msghdr` (null pointers, zero lengths).
        let mut recv_hdr: Box<libc::msghdr> = Box::new(unsafe { std::mem::zeroed() });
        recv_hdr.msg_namelen = NAMELEN as libc::socklen_t;
        let mut this = UdpRing {
            ring,
            bufs,
            entries: ring_mem,
            recv_hdr,
            sends: (0..n)
                .map(|_| (alloc_send(), Vec::with_capacity(1024)))
                .collect(),
            state: vec![State::Sending; n],
            armed: vec![false; sockets.len()],
            dead: vec![false; sockets.len()],
            tail: 0,
            free: 0,
            in_flight: 0,
            stopping: false,
            event,
            cqes: Vec::with_capacity(entries as usize * 2),
        };
        for i in 0..n {
            this.recycle(i);
        }
        this.submit()?;
        Ok(this)
    }

    /// The eventfd that becomes readable when completions wait (register it, edge-triggered,
    /// in the worker's poll; it need not be read).
    pub fn event_fd(&self) -> RawFd {
        self.event.as_raw_fd()
    }

    /// Operations in flight (a receive per socket, an answer per buffer being sent).
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Receive buffers in all.
    pub fn slots(&self) -> usize {
        self.state.len()
    }

    /// Arms the receives that ended (when buffers are free), submits what was queued, and
    /// runs the ring's completion work, without waiting.
    pub fn submit(&mut self) -> io::Result<()> {
        if !self.stopping && self.free > 0 {
            for s in 0..self.armed.len() {
                if !self.armed[s] && !self.dead[s] {
                    self.arm(s);
                }
            }
        }
        match self.ring.submit() {
            Ok(_) => Ok(()),
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                ) =>
            {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Submits only if something waits to be: queued entries, or a receive to arm again now
    /// that buffers are back (after a `reap` that received nothing).
    pub fn settle(&mut self) -> io::Result<()> {
        let rearm = !self.stopping
            && self.free > 0
            && (0..self.armed.len()).any(|s| !self.armed[s] && !self.dead[s]);
        if rearm || !self.ring.submission().is_empty() {
            self.submit()
        } else {
            Ok(())
        }
    }

    /// Takes every completion: the buffers of received datagrams are appended to `got`
    /// (read each with `io`, then hand it back with `answer`); finished answers put their
    /// buffer back in the ring.
    pub fn reap(&mut self, got: &mut Vec<u32>) -> Reaped {
        let mut reaped = Reaped::default();
        self.cqes.clear();
        self.cqes.extend(
            self.ring
                .completion()
                .map(|c| (c.user_data(), c.result(), c.flags())),
        );
        for k in 0..self.cqes.len() {
            let (data, res, flags) = self.cqes[k];
            if data == CANCEL {
                continue;
            }
            let i = (data & 0xffff_ffff) as usize;
            if data & SEND != 0 {
                if self.state.get(i) != Some(&State::Sending) {
                    continue;
                }
                self.in_flight -= 1;
                if res < 0 {
                    reaped.failed += 1;
                } else {
                    reaped.sent += 1;
                }
                self.recycle(i);
                continue;
            }
            if i >= self.armed.len() {
                continue;
            }
            if !cqueue::more(flags) {
                self.armed[i] = false;
                self.in_flight -= 1;
            }
            if let Some(b) = cqueue::buffer_select(flags) {
                let b = usize::from(b);
                if self.state.get(b) == Some(&State::Free) {
                    self.free -= 1;
                    if res >= 0 {
                        self.state[b] = State::Received {
                            socket: i as u32,
                            res: res as usize,
                        };
                        got.push(b as u32);
                    } else {
                        self.recycle(b);
                    }
                }
                continue;
            }
            match -res {
                // No free buffer: armed again when one comes back.
                libc::ENOBUFS => reaped.buffers_full += 1,
                libc::ECANCELED => {}
                // The socket is gone or cannot do this: do not spin on it.
                libc::EBADF | libc::ENOTSOCK | libc::EINVAL | libc::EFAULT | libc::EOPNOTSUPP => {
                    reaped.recv_errors += 1;
                    self.dead[i] = true;
                }
                _ if res < 0 => reaped.recv_errors += 1,
                _ => {}
            }
        }
        reaped
    }

    /// A received buffer's datagram (empty if it was longer than `MAX_DATAGRAM`), its sender
    /// (None if the kernel gave no IPv4 or IPv6 address), the index of its socket, and the
    /// buffer's answer slot, cleared. Only for buffers `reap` just returned and not yet
    /// answered; any other reads as an empty datagram from no one.
    pub fn io(&mut self, slot: u32) -> (&[u8], Option<SocketAddr>, usize, &mut Vec<u8>) {
        let i = slot as usize;
        let (buf, socket) = received(&self.state, &self.bufs, i).unwrap_or((&[], 0));
        let out = &mut self.sends[i].1;
        out.clear();
        (datagram(buf), sender(buf), socket as usize, out)
    }

    /// Hands a received buffer back: its answer (if `io` left one and `send`) goes to the
    /// datagram's sender by the socket it came in on, then the buffer goes back to the ring.
    /// Queued until the next `submit`.
    pub fn answer(&mut self, slot: u32, send: bool) {
        let i = slot as usize;
        let Some((buf, socket)) = received(&self.state, &self.bufs, i) else {
            return;
        };
        let to = sender(buf);
        let (mem, out) = &mut self.sends[i];
        let Some(to) = to.filter(|_| send && !out.is_empty() && !self.stopping) else {
            self.recycle(i);
            return;
        };
        let m = mem.as_ptr();
        // SAFETY: the buffer is Received, so its answer slot is not in flight and this is the
        // only access to its `SendMem`; the header points at the slot's own fields and answer
        // buffer, which stay put and untouched until the completion is reaped (`Sending`
        // keeps `io` and `answer` off them).
        let hdr = unsafe {
            let namelen = write_name(&mut (*m).name.0, to);
            (*m).iov = libc::iovec {
                iov_base: out.as_ptr() as *mut libc::c_void,
                iov_len: out.len(),
            };
            (*m).hdr.msg_namelen = namelen;
            (*m).hdr.msg_flags = 0;
            addr_of!((*m).hdr)
        };
        let entry = opcode::SendMsg::new(types::Fixed(socket), hdr)
            .build()
            .user_data(SEND | i as u64);
        self.state[i] = State::Sending;
        if self.push(&entry) {
            self.in_flight += 1;
        } else {
            self.recycle(i);
        }
    }

    /// Stops receiving: cancels every receive in flight (answers in flight still go). Reap
    /// until `in_flight` is 0 to drain.
    pub fn stop(&mut self) {
        if self.stopping {
            return;
        }
        self.stopping = true;
        let cancel = opcode::AsyncCancel2::new(types::CancelBuilder::any())
            .build()
            .user_data(CANCEL);
        self.push(&cancel);
        let _ = self.submit();
    }

    fn arm(&mut self, s: usize) {
        let hdr: *const libc::msghdr = &*self.recv_hdr;
        let entry = opcode::RecvMsgMulti::new(types::Fixed(s as u32), hdr, GROUP)
            .build()
            .user_data(s as u64);
        if self.push(&entry) {
            self.armed[s] = true;
            self.in_flight += 1;
        }
    }

    /// Puts buffer `i` in the buffer ring.
    fn recycle(&mut self, i: usize) {
        self.state[i] = State::Free;
        self.free += 1;
        let n = self.state.len();
        let at = usize::from(self.tail) & (n - 1);
        let base = self.entries.ptr.as_ptr().cast::<types::BufRingEntry>();
        // SAFETY: `at < n`, the ring's size; the kernel reads entries only up to the tail it
        // was last told, so it does not read this one until the store below.
        unsafe {
            let e = &mut *base.add(at);
            e.set_addr(self.bufs.ptr.as_ptr().add(i * BUF) as u64);
            e.set_len(BUF as u32);
            e.set_bid(i as u16);
        }
        self.tail = self.tail.wrapping_add(1);
        // SAFETY: the tail is a u16 in the ring's first entry, aligned for it, read by the
        // kernel; a release store publishes the entry written above before the new tail.
        unsafe {
            let tail = types::BufRingEntry::tail(base).cast_mut();
            AtomicU16::from_ptr(tail).store(self.tail, Ordering::Release);
        }
    }

    /// Queues an entry, submitting first if the queue is full (it cannot be: at most one
    /// entry per buffer and socket, but a full queue is not worth a wrong answer).
    fn push(&mut self, entry: &io_uring::squeue::Entry) -> bool {
        for _ in 0..2 {
            // SAFETY: every entry pushed here points only at memory this ring owns and hands
            // to the kernel until the completion is reaped (see the crate's doc), or at
            // nothing (the cancel).
            if unsafe { self.ring.submission().push(entry) }.is_ok() {
                return true;
            }
            if self.ring.submit().is_err() {
                return false;
            }
        }
        false
    }
}

impl Drop for UdpRing {
    fn drop(&mut self) {
        self.stop();
        let deadline = Instant::now() + Duration::from_secs(1);
        let mut got = Vec::new();
        while self.in_flight > 0 && Instant::now() < deadline {
            let ts = types::Timespec::from(Duration::from_millis(20));
            let args = types::SubmitArgs::new().timespec(&ts);
            let _ = self.ring.submitter().submit_with_args(1, &args);
            got.clear();
            self.reap(&mut got);
            for &b in &got {
                self.state[b as usize] = State::Free;
            }
        }
        if self.in_flight > 0 || self.ring.submitter().unregister_buf_ring(GROUP).is_err() {
            // The kernel may still write these: leak them rather than free them under it.
            return;
        }
        for (mem, _) in self.sends.drain(..) {
            // SAFETY: nothing is in flight, so the kernel holds no pointer into this
            // `SendMem`; it came from `Box::leak` in `alloc_send` and is freed once, here.
            drop(unsafe { Box::from_raw(mem.as_ptr()) });
        }
        // SAFETY: the buffer ring is unregistered and nothing is in flight, so the kernel
        // holds no pointer into either block; both were allocated with these layouts.
        unsafe {
            dealloc(self.bufs.ptr.as_ptr(), self.bufs.layout);
            dealloc(self.entries.ptr.as_ptr(), self.entries.layout);
        }
    }
}

/// Buffer `i`'s bytes as the kernel wrote them, and its socket's index, if it is Received.
fn received<'a>(state: &[State], bufs: &'a Raw, i: usize) -> Option<(&'a [u8], u32)> {
    let State::Received { socket, res } = state[i] else {
        return None;
    };
    // SAFETY: the buffer is Received: the kernel wrote it, took it out of the buffer ring and
    // will not write it until `answer` puts it back, which needs `&mut UdpRing` and so ends
    // this borrow of its `bufs` first; `res` (what the kernel wrote) is within it.
    let buf = unsafe { std::slice::from_raw_parts(bufs.ptr.as_ptr().add(i * BUF), res.min(BUF)) };
    Some((buf, socket))
}

/// An answer slot's `SendMem`, its header pointing at its own I/O vector and address.
fn alloc_send() -> NonNull<SendMem> {
    // SAFETY: every field of `SendMem` is plain C data (integers, byte arrays, raw pointers),
    // for which all zero bytes are a valid value.
    let boxed: Box<SendMem> = Box::new(unsafe { std::mem::zeroed() });
    let m = NonNull::from(Box::leak(boxed));
    let p = m.as_ptr();
    // SAFETY: `p` is the only pointer to a fresh allocation; the pointers stored point into
    // the same allocation, which never moves.
    unsafe {
        (*p).hdr.msg_name = addr_of_mut!((*p).name).cast();
        (*p).hdr.msg_iov = addr_of_mut!((*p).iov);
        (*p).hdr.msg_iovlen = 1;
    }
    m
}

fn u32_at(b: &[u8], at: usize) -> usize {
    b.get(at..at + 4)
        .map_or(0, |x| u32::from_ne_bytes([x[0], x[1], x[2], x[3]]) as usize)
}

/// The datagram in a buffer a multishot receive wrote: empty if cut.
fn datagram(buf: &[u8]) -> &[u8] {
    let (payload, flags) = (u32_at(buf, 8), u32_at(buf, 12));
    if flags & libc::MSG_TRUNC as usize != 0 || payload > MAX_DATAGRAM {
        return &[];
    }
    buf.get(PAYLOAD..PAYLOAD + payload).unwrap_or(&[])
}

/// The sender in a buffer a multishot receive wrote, if the kernel gave a whole one.
fn sender(buf: &[u8]) -> Option<SocketAddr> {
    let len = u32_at(buf, 0);
    let name = buf.get(OUT_HEADER..PAYLOAD)?;
    match read_name(name)? {
        a @ SocketAddr::V4(_) if len >= 16 => Some(a),
        a @ SocketAddr::V6(_) if len >= 28 => Some(a),
        _ => None,
    }
}

/// The address in a `sockaddr_in` or `sockaddr_in6`'s bytes.
fn read_name(b: &[u8]) -> Option<SocketAddr> {
    let b = b.get(..NAMELEN)?;
    let family = i32::from(u16::from_ne_bytes([b[0], b[1]]));
    let port = u16::from_be_bytes([b[2], b[3]]);
    if family == libc::AF_INET {
        let ip = Ipv4Addr::new(b[4], b[5], b[6], b[7]);
        return Some(SocketAddr::V4(SocketAddrV4::new(ip, port)));
    }
    if family == libc::AF_INET6 {
        let flow = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
        let mut ip = [0u8; 16];
        ip.copy_from_slice(&b[8..24]);
        let scope = u32::from_ne_bytes([b[24], b[25], b[26], b[27]]);
        return Some(SocketAddr::V6(SocketAddrV6::new(
            Ipv6Addr::from(ip),
            port,
            flow,
            scope,
        )));
    }
    None
}

/// Writes `to` as a `sockaddr_in` or `sockaddr_in6`; returns its length.
fn write_name(b: &mut [u8; NAME], to: SocketAddr) -> libc::socklen_t {
    match to {
        SocketAddr::V4(a) => {
            b[..16].fill(0);
            b[0..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
            b[2..4].copy_from_slice(&a.port().to_be_bytes());
            b[4..8].copy_from_slice(&a.ip().octets());
            16
        }
        SocketAddr::V6(a) => {
            b[..28].fill(0);
            b[0..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
            b[2..4].copy_from_slice(&a.port().to_be_bytes());
            b[4..8].copy_from_slice(&a.flowinfo().to_be_bytes());
            b[8..24].copy_from_slice(&a.ip().octets());
            b[24..28].copy_from_slice(&a.scope_id().to_ne_bytes());
            28
        }
    }
}

#[cfg(test)]
mod tests;
