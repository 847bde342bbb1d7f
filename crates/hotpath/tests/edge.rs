//! The network edge as an attacker tries it: mixed IPv4/IPv6 UDP batches, long pipelines,
//! floods from one address, clients that never read. Every test here failed on the build
//! before these limits existed.

mod common;

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::*;
use hotpath_wire::query::Event;
use hotpath_wire::udp::{self, Response};

/// The tests here run one at a time: the flood test measures latency, and the others' load
/// on this machine's two cores would be part of what it measures.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn alone() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// A TCP connection to `to` from the local address `from` (any address of 127.0.0.0/8).
fn connect_from(from: IpAddr, to: SocketAddr) -> std::io::Result<TcpStream> {
    connect_small(from, to, None)
}

/// The same, with a receive buffer of `rcvbuf` bytes set before the handshake (so the window
/// the server sees stays small and its answers back up in its own buffers, not the kernel's).
fn connect_small(
    from: IpAddr,
    to: SocketAddr,
    rcvbuf: Option<usize>,
) -> std::io::Result<TcpStream> {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    if let Some(n) = rcvbuf {
        s.set_recv_buffer_size(n)?;
    }
    s.bind(&SocketAddr::new(from, 0).into())?;
    s.connect_timeout(&to.into(), Duration::from_secs(2))?;
    Ok(s.into())
}

/// Regression: recvmmsg slots kept the address length of their last use, so an IPv6 sender
/// read into a slot an IPv4 datagram had used was cut to 16 bytes and answered at a wrong
/// address (with one worker, every such announce failed).
#[test]
fn ipv4_and_ipv6_senders_interleaved_in_one_worker_get_their_own_answers() {
    interleaved_senders(hotpath_config::UdpIo::Epoll);
}

/// The same exchanges through the io_uring path (one multishot receive per socket, answers
/// from the slot paired with each buffer), and a server that stops cleanly after them.
#[test]
fn ipv4_and_ipv6_senders_interleaved_on_io_uring_get_their_own_answers() {
    if let Err(e) = hotpath_uring::available() {
        eprintln!("this kernel does not allow io_uring ({e}): the epoll path is tested above");
        return;
    }
    interleaved_senders(hotpath_config::UdpIo::IoUring);
}

fn interleaved_senders(io: hotpath_config::UdpIo) {
    let _alone = alone();
    let mut cfg = test_config();
    cfg.server.workers = 1;
    cfg.server.udp_io = io;
    // Fewer buffers than exchanges in flight over the test: buffers must come back.
    cfg.server.udp_batch = 2;
    cfg.listen.udp = vec!["127.0.0.1:0".parse().unwrap(), "[::1]:0".parse().unwrap()];
    let server = start(&cfg);
    let udp = server.addresses().udp.clone();
    let (v4, v6) = (udp[0], udp[1]);
    assert!(v4.is_ipv4() && v6.is_ipv6());
    let mut clients: Vec<Udp> = (0..8)
        .map(|i| Udp::new(if i % 2 == 0 { v4 } else { v6 }))
        .collect();
    let hash = [0x5a; 20];
    for round in 0..20u16 {
        for (i, c) in clients.iter_mut().enumerate() {
            // Every exchange goes through the same worker's batch slots, the families
            // alternating; a wrong source address gets no answer (or a bad connection id).
            c.connect();
            let r = c.announce(hash, i as u8, 7000 + round, 1, Event::None);
            assert!(
                matches!(udp::parse_response(&r), Ok(Response::Announce { .. })),
                "round {round}, client {i} ({}): {r:?}",
                c.server
            );
        }
    }
    server.shutdown().unwrap();
}

/// Regression: reading stopped at the output cap and no edge-triggered event came back, so a
/// long pipeline stalled after ~256 KB of answers until the connection was reset.
#[test]
fn ten_thousand_pipelined_requests_in_one_write_are_all_answered_in_order() {
    let _alone = alone();
    let server = start(&test_config());
    let addr = server.http_addr().unwrap();
    let stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let n = 10_000u32;
    let mut all = Vec::new();
    for i in 0..n {
        let mut hash = [0u8; 20];
        hash[..4].copy_from_slice(&i.to_be_bytes());
        all.extend_from_slice(
            format!("GET {} HTTP/1.1\r\nHost: t\r\n\r\n", scrape_target(&[hash])).as_bytes(),
        );
    }
    // Written from another thread: the server stops reading while its answers wait.
    let mut writer = stream.try_clone().unwrap();
    let sent = std::thread::spawn(move || writer.write_all(&all));
    let mut c = Client::from_stream(stream);
    for i in 0..n {
        let r = c
            .read()
            .unwrap_or_else(|| panic!("answer {i} of {n} never came"));
        assert_eq!(r.status, 200);
        let mut hash = [0u8; 20];
        hash[..4].copy_from_slice(&i.to_be_bytes());
        let at = r.body.windows(20).position(|w| w == hash);
        assert!(at.is_some(), "answer {i} is not for request {i}");
    }
    sent.join().unwrap().unwrap();
    server.shutdown().unwrap();
}

/// Regression: one address could hold every connection slot (20k idle connections locked
/// everyone else out); now it holds `server.max_connections_per_ip` and others still connect.
#[test]
fn one_address_holds_at_most_its_share_of_connections() {
    let _alone = alone();
    let mut cfg = test_config();
    cfg.server.max_connections_per_ip = 40;
    let server = start(&cfg);
    let addr = server.http_addr().unwrap();
    let attacker: IpAddr = "127.0.0.2".parse().unwrap();
    let mut held = Vec::new();
    for _ in 0..40 {
        let mut s = connect_from(attacker, addr).unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        held.push(s);
    }
    // Each of the 40 is served.
    for s in &mut held {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut b = [0u8; 512];
        assert!(s.read(&mut b).unwrap() > 0);
    }
    // The 41st from that address is closed at once, without an answer.
    let mut extra = connect_from(attacker, addr).unwrap();
    extra
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let _ = extra.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n");
    let mut b = [0u8; 512];
    assert!(matches!(extra.read(&mut b), Ok(0) | Err(_)));
    // Another address is served.
    let mut c = Client::connect(addr);
    assert_eq!(c.get("/healthz").status, 200);
    let mut admin = Client::connect(server.admin_addr().unwrap());
    let metrics = String::from_utf8(admin.get("/metrics").body).unwrap();
    assert!(
        metrics.contains("hotpath_connections_refused_per_ip_total 1"),
        "{metrics}"
    );
    // Closing one frees a place for that address.
    drop(held.pop());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut s = connect_from(attacker, addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        if matches!(s.read(&mut b), Ok(n) if n > 0) {
            break;
        }
        assert!(Instant::now() < deadline, "the freed place never came back");
        std::thread::sleep(Duration::from_millis(20));
    }
    server.shutdown().unwrap();
}

/// Peak resident memory of a process, in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

/// The slowest of a fresh client's `/healthz` and announce while `busy` is running.
fn probe_while(addr: SocketAddr, busy: impl FnOnce()) -> Duration {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let prober = std::thread::spawn(move || {
        let mut worst = Duration::ZERO;
        let mut n = 0u16;
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) || n < 10 {
            let t = Instant::now();
            let mut c = Client::connect(addr);
            assert_eq!(c.get("/healthz").status, 200);
            let a = announce([0x11; 20], 1, 20_000, 5, Event::None);
            let r = c.get(&announce_target(&a));
            assert_eq!(failure(&r.body), None);
            worst = worst.max(t.elapsed());
            n += 1;
            std::thread::sleep(Duration::from_millis(20));
        }
        worst
    });
    busy();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    prober.join().unwrap()
}

/// Regression: 12,000 connections pipelining scrapes without reading took the server to 4 GB
/// and made /healthz time out for seconds (output buffers doubled past their cap, and no
/// address had a cap). At the defaults, one address gets 256 connections, each holding at most
/// 256 KiB of answers; the server stays under 160 MB and a client from elsewhere is answered
/// in under 100 ms throughout (release build; see the bound below).
#[test]
fn a_flood_from_one_address_neither_grows_memory_nor_delays_others() {
    let _alone = alone();
    let dir = data_dir();
    let config = dir.join("hotpath.toml");
    std::fs::write(
        &config,
        format!(
            "[listen]\nhttp = [\"127.0.0.1:0\"]\nudp = []\nadmin = [\"127.0.0.1:0\"]\nipv6 = false\n\
             [server]\nworkers = 2\n[store]\ndata_dir = \"{}\"\n",
            dir.display()
        ),
    )
    .unwrap();
    let server = Proc::spawn(&config, &dir);
    let addr = server.http;
    // The control: the same probes with no flood, for what this shared machine's load alone
    // costs them now.
    let control = probe_while(addr, || std::thread::sleep(Duration::from_secs(1)));
    let attacker: IpAddr = "127.0.0.2".parse().unwrap();
    // Scrapes of 40 hashes: ~2.8 KB answers, so 95 of them fill a connection's output cap.
    let mut pipeline = Vec::new();
    for i in 0..150u32 {
        let hashes: Vec<[u8; 20]> = (0..40u32)
            .map(|j| {
                let mut hash = [0x41u8; 20];
                hash[..4].copy_from_slice(&(i * 40 + j).to_be_bytes());
                hash
            })
            .collect();
        pipeline.extend_from_slice(
            format!("GET {} HTTP/1.1\r\nHost: t\r\n\r\n", scrape_target(&hashes)).as_bytes(),
        );
    }
    let mut held = Vec::new();
    let worst = probe_while(addr, || {
        // 1,000 connections from one address, each pipelining 150 large scrapes and never
        // reading; all but 256 are closed at once.
        for i in 0..1_000 {
            if let Ok(s) = connect_small(attacker, addr, Some(4096)) {
                s.set_nonblocking(true).unwrap();
                held.push((s, 0usize));
            }
            // The attacker's own work (connecting, writing) would not run on the server's two
            // cores: pause now and then so this process does not starve the server.
            if i % 50 == 49 {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        let deadline = Instant::now() + Duration::from_secs(8);
        while Instant::now() < deadline {
            let mut progress = false;
            for (s, at) in held.iter_mut() {
                if *at < pipeline.len() {
                    if let Ok(n) = s.write(&pipeline[*at..]) {
                        *at += n;
                        progress |= n > 0;
                    }
                }
            }
            // An attacker elsewhere would not share the server's two cores: leave them to it.
            std::thread::sleep(Duration::from_millis(if progress { 2 } else { 50 }));
        }
    });
    let rss = peak_rss(server.child.id());
    let refused = server.metric("hotpath_connections_refused_per_ip_total");
    let open = server.metric("hotpath_connections");
    let buffers = server.metric("hotpath_connection_buffer_bytes");
    eprintln!(
        "flood: peak RSS {} MB, {refused} refused, {open} open, {buffers} bytes buffered, slowest probe {worst:?} (control {control:?})",
        rss >> 20
    );
    assert!(refused >= 700.0, "{refused} refused");
    assert!(open <= 256.0 + 2.0, "{open} open");
    assert!(rss < 160 << 20, "peak RSS {} MB", rss >> 20);
    // The goal is 100 ms for the server as shipped (a release build). A debug build does the
    // same work many times slower, and this machine's two cores also run the attacker and
    // the prober, so a debug run gets more room: it still fails by far on a server without
    // fair turns (0.5-1.2 s here). A debug build measured 165-260 ms here (this build and
    // the one before alike), so its bound is 400 ms, still well under that. What the
    // machine's load alone costs the probes (the control, twice over) is added, so other
    // work beside the test does not fail it.
    let bound = Duration::from_millis(if cfg!(debug_assertions) { 400 } else { 100 });
    assert!(
        worst < bound + 2 * control,
        "slowest probe {worst:?} (control {control:?})"
    );
    drop(held);
}

/// Past `server.max_buffer_mb`, connections are held to a small output buffer instead of
/// growing, and every answer still arrives once the clients read.
#[test]
fn past_the_buffer_budget_connections_are_held_small_and_still_answered() {
    let _alone = alone();
    let mut cfg = test_config();
    cfg.server.max_buffer_mb = 1;
    let server = start(&cfg);
    // /metrics: a large answer to a small request, so answers outgrow the kernel's socket
    // buffers and pile up in the server's.
    let addr = server.admin_addr().unwrap();
    let request = b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n";
    let per_conn = 300;
    let mut conns = Vec::new();
    for a in 2..5u8 {
        for _ in 0..10 {
            let s = connect_small(IpAddr::from([127, 0, 0, a]), addr, Some(4096)).unwrap();
            let mut w = s.try_clone().unwrap();
            let writer = std::thread::spawn(move || w.write_all(&request.repeat(per_conn)));
            conns.push((s, writer));
        }
    }
    // Nobody reads: the buffers fill up to the budget and stop there.
    let mut admin = Client::connect(server.admin_addr().unwrap());
    let metric = |admin: &mut Client, name: &str| -> f64 {
        let text = String::from_utf8(admin.get("/metrics").body).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap()
    };
    wait_until(
        "the buffer budget to be reached",
        Duration::from_secs(20),
        || metric(&mut admin, "hotpath_connection_buffer_held_total") > 0.0,
    );
    let held_bytes = metric(&mut admin, "hotpath_connection_buffer_bytes");
    // The budget, plus at most one small output buffer and read buffer per connection.
    assert!(
        held_bytes < (1 << 20) as f64 + 30.0 * 40_000.0,
        "{held_bytes}"
    );
    let held = metric(&mut admin, "hotpath_connection_buffer_held_total");
    eprintln!("buffers: {held_bytes} bytes, held {held} times");
    assert!(held > 0.0);
    // Now everyone reads: every answer comes.
    for (s, writer) in conns {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut c = Client::from_stream(s);
        for i in 0..per_conn {
            let r = c.read().unwrap_or_else(|| panic!("answer {i} never came"));
            assert_eq!(r.status, 200);
        }
        writer.join().unwrap().unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while metric(&mut admin, "hotpath_connection_buffer_bytes") > 200_000.0 {
        assert!(Instant::now() < deadline, "buffers were not given back");
        std::thread::sleep(Duration::from_millis(50));
    }
    server.shutdown().unwrap();
}

/// Regression: a second `hotpath serve` on a port another one held started without a word
/// (SO_REUSEPORT) and the two split every swarm. Now it stops, naming the port and the other
/// process.
#[test]
fn a_second_hotpath_on_the_same_port_stops_and_names_the_first() {
    let _alone = alone();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = data_dir();
    let config = |name: &str, data: &std::path::Path| {
        let path = dir.join(name);
        std::fs::write(
            &path,
            format!(
                "[listen]\nhttp = [\"127.0.0.1:{port}\"]\nudp = [\"127.0.0.1:{port}\"]\n\
                 admin = []\nipv6 = false\n[store]\ndata_dir = \"{}\"\n",
                data.display()
            ),
        )
        .unwrap();
        path
    };
    let first = Proc::spawn(&config("a.toml", &dir.join("a")), &dir);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hotpath"))
        .args(["serve", "--config"])
        .arg(config("b.toml", &dir.join("b")))
        .current_dir(&dir)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the second server started:\n{err}");
    assert!(err.contains(&format!("port {port}/")), "{err}");
    assert!(err.contains(&format!("pid {}", first.child.id())), "{err}");
    // The first is unharmed, and once it is gone the port can be served again.
    let mut c = Client::connect(first.http);
    assert_eq!(c.get("/healthz").status, 200);
    drop(c);
    drop(first);
    let again = Proc::spawn(&config("c.toml", &dir.join("c")), &dir);
    let mut c = Client::connect(again.http);
    assert_eq!(c.get("/healthz").status, 200);
}

/// A port another hotpath serves is refused when it is configured; a port-0 listener never
/// lands on one (the kernel hands out a port bound with SO_REUSEPORT as readily as a free one:
/// such a server would have split the other's traffic, and its port guard refused it).
#[test]
fn a_served_port_is_refused_and_port_zero_draws_another() {
    let first = start(&test_config());
    let (http, udp) = (first.http_addr().unwrap(), first.udp_addr().unwrap());
    for tcp in [false, true] {
        let mut c = test_config();
        if tcp {
            c.listen.http = vec![http];
        } else {
            c.listen.udp = vec![udp];
        }
        let e = hotpath::start(&c).err().expect("a served port is refused");
        assert!(
            e.to_string()
                .contains("already served by another hotpath process"),
            "tcp {tcp}: {e}"
        );
    }
    for _ in 0..20 {
        let other = start(&test_config());
        assert_ne!(other.udp_addr().unwrap(), udp);
        assert_ne!(other.http_addr().unwrap(), http);
        other.shutdown().unwrap();
    }
    first.shutdown().unwrap();
}

/// Regression: made-up info hashes from 127.0.0.1 filled `tracker.max_torrents` and every
/// other address got `tracker is full` for a new torrent. One address now stops at its own
/// share of torrents it is alone in; another address is served, over HTTP and UDP.
#[test]
fn one_address_filling_the_table_leaves_others_served() {
    let _alone = alone();
    let mut c = test_config();
    c.tracker.max_torrents = 100;
    c.tracker.max_torrents_per_address = 20;
    let server = start(&c);
    let addr = server.http_addr().unwrap();
    let attacker: IpAddr = "127.0.0.1".parse().unwrap();
    let mut flood = Client::from_stream(connect_from(attacker, addr).unwrap());
    let mut refused = 0;
    for h in 0..100u8 {
        let a = announce([h; 20], 1, 6881, 100, Event::Started);
        let r = flood.get(&announce_target(&a));
        match failure(&r.body) {
            None => {}
            Some(f) if f.starts_with("too many torrents from your address") => refused += 1,
            Some(f) => panic!("{f}"),
        }
    }
    assert_eq!(refused, 80, "20 torrents of its own");
    let other: IpAddr = "127.0.0.2".parse().unwrap();
    let mut other = Client::from_stream(connect_from(other, addr).unwrap());
    let a = announce([200; 20], 2, 6881, 100, Event::Started);
    assert_eq!(failure(&other.get(&announce_target(&a)).body), None);
    // Over UDP too, from another address.
    let mut udp = Udp::from("127.0.0.3:0", server.udp_addr().unwrap());
    udp.connect();
    let answer = udp.announce([201; 20], 3, 6881, 100, Event::Started);
    assert!(
        matches!(udp::parse_response(&answer), Ok(Response::Announce { .. })),
        "{:?}",
        udp::parse_response(&answer)
    );
    let admin = server.admin_addr().unwrap();
    let text = String::from_utf8(Client::connect(admin).get("/metrics").body).unwrap();
    assert!(
        text.contains("hotpath_tracker_cap_hits_total{cap=\"max_torrents_per_address\"} 80"),
        "{text}"
    );
    server.shutdown().unwrap();
}

/// Regression: one address joining torrents with made-up ports (64 per torrent) could fill
/// `tracker.max_peers`, after which no other address's new peer was added anywhere. One
/// address now stops at its own share of peers in all torrents; another address is added
/// and served, over HTTP and UDP.
#[test]
fn one_address_filling_max_peers_leaves_others_served() {
    let _alone = alone();
    let mut c = test_config();
    c.tracker.max_peers = 100;
    c.tracker.max_peers_per_address = 30;
    let server = start(&c);
    let addr = server.http_addr().unwrap();
    let attacker: IpAddr = "127.0.0.1".parse().unwrap();
    let mut flood = Client::from_stream(connect_from(attacker, addr).unwrap());
    let mut refused = 0;
    for h in 0..10u8 {
        for port in 6881..6886 {
            let a = announce([h; 20], port as u8, port, 100, Event::Started);
            match failure(&flood.get(&announce_target(&a)).body) {
                None => {}
                Some(f) if f == "too many peers from your address in all torrents" => refused += 1,
                Some(f) => panic!("{f}"),
            }
        }
    }
    assert_eq!(refused, 20, "30 peers of its own");
    let other: IpAddr = "127.0.0.2".parse().unwrap();
    let mut other = Client::from_stream(connect_from(other, addr).unwrap());
    let a = announce([0; 20], 2, 6881, 100, Event::Started);
    let r = other.get(&announce_target(&a));
    assert_eq!(failure(&r.body), None);
    let mut udp = Udp::from("127.0.0.3:0", server.udp_addr().unwrap());
    udp.connect();
    let answer = udp.announce([0; 20], 3, 6881, 100, Event::Started);
    match udp::parse_response(&answer) {
        // The flood's 5 peers in torrent 0, the HTTP client and the UDP client itself.
        Ok(Response::Announce { leechers, .. }) => assert_eq!(leechers, 7),
        other => panic!("{other:?}"),
    }
    let admin = server.admin_addr().unwrap();
    let text = String::from_utf8(Client::connect(admin).get("/metrics").body).unwrap();
    assert!(
        text.contains("hotpath_tracker_cap_hits_total{cap=\"max_peers_per_address\"} 20"),
        "{text}"
    );
    server.shutdown().unwrap();
}
