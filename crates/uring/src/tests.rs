use super::*;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;

/// Whether this kernel lets the tests build a ring (a container's seccomp filter or
/// `kernel.io_uring_disabled` may not): where it does not, the server runs epoll and these
/// tests have nothing to test.
fn allowed() -> bool {
    match available() {
        Ok(()) => true,
        Err(e) => {
            eprintln!("io_uring is not allowed here ({e}): skipped");
            false
        }
    }
}

fn server(addr: &str) -> UdpSocket {
    let s = UdpSocket::bind(addr).unwrap();
    s.set_nonblocking(true).unwrap();
    s
}

/// Echoes every datagram with a prefix until `want` answers were sent or 5 s passed.
fn serve(ring: &mut UdpRing, want: usize) -> (usize, Vec<(usize, SocketAddr, Vec<u8>)>) {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut got = Vec::new();
    let mut seen = Vec::new();
    let mut sent = 0;
    while sent < want && Instant::now() < deadline {
        ring.submit().unwrap();
        got.clear();
        sent += ring.reap(&mut got).sent;
        for &slot in &got {
            let (data, from, socket, out) = ring.io(slot);
            seen.push((socket, from.unwrap(), data.to_vec()));
            out.extend_from_slice(b"re:");
            out.extend_from_slice(data);
            ring.answer(slot, true);
        }
        if got.is_empty() {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    (sent, seen)
}

#[test]
fn answers_each_sender_at_its_own_address_more_datagrams_than_slots() {
    if !allowed() {
        return;
    }
    let s = server("127.0.0.1:0");
    let mut ring = UdpRing::new(&[s.as_raw_fd()], 4).unwrap();
    assert_eq!(
        (ring.in_flight(), ring.slots()),
        (1, 4),
        "one receive for four buffers"
    );
    let clients: Vec<UdpSocket> = (0..3)
        .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
        .collect();
    for round in 0..50u8 {
        for c in &clients {
            c.send_to(&[round], s.local_addr().unwrap()).unwrap();
        }
    }
    let (sent, seen) = serve(&mut ring, 150);
    assert_eq!(sent, 150);
    assert_eq!(seen.len(), 150);
    for c in &clients {
        c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut rounds = Vec::new();
        let mut buf = [0u8; 16];
        for _ in 0..50 {
            let (n, from) = c.recv_from(&mut buf).unwrap();
            assert_eq!(from, s.local_addr().unwrap());
            assert_eq!(&buf[..3], b"re:");
            assert_eq!(n, 4);
            rounds.push(buf[3]);
        }
        rounds.sort();
        assert_eq!(rounds, (0..50).collect::<Vec<u8>>());
    }
    ring.submit().unwrap();
    let mut got = Vec::new();
    ring.reap(&mut got);
    assert!(got.is_empty());
    assert_eq!(
        ring.in_flight(),
        1,
        "the receive is armed again, no answer in flight"
    );
}

#[test]
fn ipv6_and_ipv4_senders_on_one_socket_keep_their_addresses() {
    if !allowed() {
        return;
    }
    let Ok(s) = UdpSocket::bind("[::1]:0") else {
        eprintln!("no IPv6 loopback here");
        return;
    };
    s.set_nonblocking(true).unwrap();
    let v4 = server("127.0.0.1:0");
    // Two sockets on one ring: the answers must leave by the socket each datagram came in on.
    let mut ring = UdpRing::new(&[v4.as_raw_fd(), s.as_raw_fd()], 2).unwrap();
    let c6 = UdpSocket::bind("[::1]:0").unwrap();
    let c4 = UdpSocket::bind("127.0.0.1:0").unwrap();
    for _ in 0..4 {
        c4.send_to(b"four", v4.local_addr().unwrap()).unwrap();
        c6.send_to(b"six", s.local_addr().unwrap()).unwrap();
    }
    let (sent, seen) = serve(&mut ring, 8);
    assert_eq!(sent, 8);
    for (socket, from, data) in seen {
        if data == b"six" {
            assert_eq!((socket, from), (1, c6.local_addr().unwrap()));
        } else {
            assert_eq!((socket, from), (0, c4.local_addr().unwrap()));
        }
    }
    let mut buf = [0u8; 16];
    c6.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let (n, from) = c6.recv_from(&mut buf).unwrap();
    assert_eq!((&buf[..n], from), (&b"re:six"[..], s.local_addr().unwrap()));
}

#[test]
fn an_oversized_datagram_reads_as_empty_and_the_next_one_whole() {
    if !allowed() {
        return;
    }
    let s = server("127.0.0.1:0");
    let mut ring = UdpRing::new(&[s.as_raw_fd()], 1).unwrap();
    let c = UdpSocket::bind("127.0.0.1:0").unwrap();
    c.send_to(&vec![7u8; MAX_DATAGRAM + 1], s.local_addr().unwrap())
        .unwrap();
    c.send_to(&vec![8u8; MAX_DATAGRAM], s.local_addr().unwrap())
        .unwrap();
    let (_, seen) = serve(&mut ring, 2);
    assert_eq!(seen.len(), 2);
    assert!(seen[0].2.is_empty(), "cut datagram passed on empty");
    assert_eq!(seen[1].2, vec![8u8; MAX_DATAGRAM]);
}

#[test]
fn no_answer_means_nothing_sent_and_the_slot_receives_again() {
    if !allowed() {
        return;
    }
    let s = server("127.0.0.1:0");
    let mut ring = UdpRing::new(&[s.as_raw_fd()], 1).unwrap();
    let c = UdpSocket::bind("127.0.0.1:0").unwrap();
    c.send_to(b"x", s.local_addr().unwrap()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut got = Vec::new();
    while got.is_empty() && Instant::now() < deadline {
        ring.submit().unwrap();
        ring.reap(&mut got);
    }
    assert_eq!(got.len(), 1);
    let _ = ring.io(got[0]);
    ring.answer(got[0], false);
    ring.submit().unwrap();
    assert_eq!(
        ring.in_flight(),
        1,
        "its one buffer back, the receive armed again"
    );
    c.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    assert!(c.recv_from(&mut [0u8; 8]).is_err());
}

#[test]
fn the_eventfd_wakes_an_edge_triggered_poll_each_time_work_arrives() {
    if !allowed() {
        return;
    }
    use mio::unix::SourceFd;
    use mio::{Events, Interest, Poll, Token};
    let s = server("127.0.0.1:0");
    let mut ring = UdpRing::new(&[s.as_raw_fd()], 8).unwrap();
    let mut poll = Poll::new().unwrap();
    let fd = ring.event_fd();
    poll.registry()
        .register(&mut SourceFd(&fd), Token(1), Interest::READABLE)
        .unwrap();
    let c = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut events = Events::with_capacity(8);
    for round in 0..5u8 {
        c.send_to(&[round], s.local_addr().unwrap()).unwrap();
        // Woken without any submit of ours: the ring said it has work.
        let mut woken = false;
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut got = Vec::new();
        while got.is_empty() && Instant::now() < deadline {
            poll.poll(&mut events, Some(Duration::from_millis(500)))
                .unwrap();
            woken |= !events.is_empty();
            ring.submit().unwrap();
            ring.reap(&mut got);
        }
        assert!(woken, "round {round}: poll not woken");
        assert_eq!(got.len(), 1, "round {round}");
        let (data, _, _, out) = ring.io(got[0]);
        assert_eq!(data, [round]);
        out.push(1);
        ring.answer(got[0], true);
        ring.submit().unwrap();
        let mut buf = [0u8; 4];
        c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        assert_eq!(c.recv_from(&mut buf).unwrap().0, 1);
    }
}

#[test]
fn stop_drains_and_drop_frees_with_receives_in_flight() {
    if !allowed() {
        return;
    }
    let s = server("127.0.0.1:0");
    let mut ring = UdpRing::new(&[s.as_raw_fd()], 16).unwrap();
    assert_eq!(ring.in_flight(), 1);
    ring.stop();
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut got = Vec::new();
    while ring.in_flight() > 0 && Instant::now() < deadline {
        ring.submit().unwrap();
        ring.reap(&mut got);
    }
    assert_eq!(ring.in_flight(), 0);
    assert!(got.is_empty());
    // And dropped without stopping first: cancels, waits, frees.
    let other = UdpRing::new(&[s.as_raw_fd()], 16).unwrap();
    drop(other);
}

#[test]
fn bad_sizes_are_refused() {
    let s = server("127.0.0.1:0");
    assert!(UdpRing::new(&[s.as_raw_fd()], 0).is_err());
    assert!(UdpRing::new(&[], 4).is_err());
    assert!(UdpRing::new(&[s.as_raw_fd()], MAX_SLOTS + 1).is_err());
}

#[test]
fn names_round_trip() {
    let mut b = [0u8; NAME];
    for a in [
        "1.2.3.4:5".parse::<SocketAddr>().unwrap(),
        "[2001:db8::1]:65535".parse().unwrap(),
        SocketAddr::V6(SocketAddrV6::new("fe80::1".parse().unwrap(), 9, 0x12345, 3)),
    ] {
        write_name(&mut b, a);
        assert_eq!(read_name(&b), Some(a));
    }
    b[0] = 0;
    b[1] = 0;
    assert_eq!(read_name(&b), None);
    // A buffer whose address the kernel did not fill (length 0) has no sender, whatever
    // bytes an earlier datagram left there.
    let mut buf = vec![0u8; BUF];
    write_name(&mut b, "1.2.3.4:5".parse().unwrap());
    buf[OUT_HEADER..PAYLOAD].copy_from_slice(&b[..NAMELEN]);
    assert_eq!(sender(&buf), None);
    buf[..4].copy_from_slice(&16u32.to_ne_bytes());
    assert_eq!(sender(&buf), Some("1.2.3.4:5".parse().unwrap()));
    // A datagram the kernel marked cut, or longer than the bound, reads as empty.
    buf[8..12].copy_from_slice(&3u32.to_ne_bytes());
    assert_eq!(datagram(&buf).len(), 3);
    buf[12..16].copy_from_slice(&(libc::MSG_TRUNC as u32).to_ne_bytes());
    assert!(datagram(&buf).is_empty());
    buf[12..16].fill(0);
    buf[8..12].copy_from_slice(&(MAX_DATAGRAM as u32 + 1).to_ne_bytes());
    assert!(datagram(&buf).is_empty());
    assert!(datagram(&buf[..10]).is_empty());
}

#[test]
fn the_probe_leaves_the_calling_threads_blocking_calls_alone() {
    if !allowed() {
        return;
    }
    // Closing a ring notifies every thread that used it; a probe on the caller's thread made
    // the caller's next blocking read fail with EINTR (a server started inside a test, or
    // main, got it).
    available().unwrap();
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let err = s.recv_from(&mut [0u8; 4]).unwrap_err();
    assert_ne!(err.kind(), io::ErrorKind::Interrupted, "{err}");
}

#[test]
fn a_flood_past_every_buffer_is_counted_and_waits_in_the_socket_buffer() {
    if !allowed() {
        return;
    }
    let s = server("127.0.0.1:0");
    let mut ring = UdpRing::new(&[s.as_raw_fd()], 1).unwrap();
    let c = UdpSocket::bind("127.0.0.1:0").unwrap();
    for i in 0..20u8 {
        c.send_to(&[i], s.local_addr().unwrap()).unwrap();
    }
    // Reaped without answering: the one buffer is taken, the receive ends, it is counted.
    let deadline = Instant::now() + Duration::from_secs(5);
    let (mut got, mut full) = (Vec::new(), 0);
    while (got.is_empty() || full == 0) && Instant::now() < deadline {
        ring.submit().unwrap();
        full += ring.reap(&mut got).buffers_full;
    }
    assert_eq!(got.len(), 1);
    assert!(full >= 1, "a full buffer ring is counted");
    assert_eq!(ring.in_flight(), 0, "no receive armed without a buffer");
    let _ = ring.io(got[0]);
    ring.answer(got[0], true);
    // Its buffer back, the other 19 come through one at a time, none lost.
    let (sent, seen) = serve(&mut ring, 19);
    assert_eq!((sent, seen.len()), (19, 19));
    let mut firsts: Vec<u8> = seen.iter().map(|(_, _, d)| d[0]).collect();
    firsts.sort();
    assert_eq!(firsts, (1..20).collect::<Vec<u8>>());
}
