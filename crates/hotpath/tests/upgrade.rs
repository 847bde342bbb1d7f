//! A binary upgrade under load, from the binary: SIGUSR2 starts the binary again on the same
//! sockets; the old process stops once the new one is ready, and the new one serves the same
//! swarms, the UDP connection ids clients hold included. Clients announcing all along, over
//! UDP and over HTTP with a connection per request, lose no request; the longest wait is
//! printed (README's figure under load is a benchmark's). A new binary that cannot start (a
//! config with an error) leaves the old one serving. In a network namespace of its own, as the
//! config names fixed ports.

mod common;

use std::io::Write as _;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{announce, announce_target, failure, wait_until, Client, Proc, Udp};
use hotpath_wire::query::Event;
use hotpath_wire::udp;

const HTTP: &str = "127.0.0.1:6969";
const CONFIG: &str = "[listen]\nhttp = [\"127.0.0.1:6969\"]\nudp = [\"127.0.0.1:6969\"]\n\
                      admin = [\"127.0.0.1:9090\"]\nipv6 = false\n[server]\nworkers = 2\n\
                      [tracker]\ninterval_jitter_percent = 0\nmax_peers_per_ip = 1000\n";

/// Requests answered, failed, and the longest wait for an answer (microseconds).
#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    failed: AtomicU64,
    longest_us: AtomicU64,
    errors: Mutex<Vec<String>>,
}

impl Tally {
    fn record(&self, started: Instant, result: Result<(), String>) {
        self.longest_us
            .fetch_max(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        match result {
            Ok(()) => self.ok.fetch_add(1, Ordering::Relaxed),
            Err(e) => {
                self.errors.lock().unwrap().push(e);
                self.failed.fetch_add(1, Ordering::Relaxed)
            }
        };
    }
}

/// One HTTP announce on a connection of its own (as most clients announce), 10 s at most.
fn http_announce(n: u8, port: u16) -> Result<(), String> {
    let a = announce([1; 20], n, port, 0, Event::None);
    let addr: SocketAddr = HTTP.parse().unwrap();
    let s =
        TcpStream::connect_timeout(&addr, Duration::from_secs(10)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut c = Client::from_stream(s);
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        announce_target(&a)
    );
    c.stream
        .write_all(request.as_bytes())
        .map_err(|e| e.to_string())?;
    let r = c.read().ok_or("the connection closed without an answer")?;
    match failure(&r.body) {
        Some(reason) => Err(reason),
        None if r.status == 200 => Ok(()),
        None => Err(format!("status {}", r.status)),
    }
}

/// UDP announces with one connection id, as a client keeps one for two minutes; connects
/// again only when told to. Each exchange waits up to 10 s.
fn udp_loop(stop: &AtomicBool, tally: &Tally) {
    let mut c = Udp::new(HTTP.parse().unwrap());
    c.connect();
    let mut i = 0u16;
    while !stop.load(Ordering::Relaxed) {
        i = (i + 1) % 20;
        let port = 20_000 + i;
        let started = Instant::now();
        let a = udp::AnnounceRequest {
            connection_id: c.connection_id,
            transaction_id: u32::from(port),
            info_hash: [2; 20],
            peer_id: [3; 20],
            downloaded: 0,
            left: 0,
            uploaded: 0,
            event: Event::None,
            ip: 0,
            key: 1,
            num_want: 10,
            port,
            options: udp::Options(&[]),
        };
        let mut p = Vec::new();
        udp::write_announce_request(&mut p, &a);
        let result = match c.exchange(&p, Duration::from_secs(10)) {
            None => Err("no answer in 10 s".to_string()),
            Some(r) => match udp::parse_response(&r) {
                Ok(udp::Response::Announce { .. }) => Ok(()),
                other => Err(format!("{other:?}")),
            },
        };
        tally.record(started, result);
    }
}

/// Kills (by PID) every successor the old process's log names, if the test ends while one
/// still runs: they are not the test's children.
struct Successors(Arc<Mutex<Vec<String>>>, bool);

impl Drop for Successors {
    fn drop(&mut self) {
        if !self.1 {
            return; // stopped by the test itself
        }
        let log = self.0.lock().map(|l| l.join("\n")).unwrap_or_default();
        for pid in log
            .lines()
            .filter_map(|l| l.split("upgrade: pid ").nth(1)?.split(' ').next())
        {
            common::send_signal("-KILL", pid);
        }
    }
}

#[test]
fn sigusr2_hands_sockets_and_swarms_to_the_new_binary_and_drops_no_request() {
    const NAME: &str = "sigusr2_hands_sockets_and_swarms_to_the_new_binary_and_drops_no_request";
    if common::netns::outside(NAME, &[]) {
        return;
    }
    let dir = common::data_dir();
    let config = dir.join("hotpath.toml");
    std::fs::write(&config, CONFIG).unwrap();
    let mut old = Proc::spawn(&config, &dir);
    let mut reap = Successors(old.log.clone(), true);
    // Fifty seeders the new process must know.
    for n in 0..50u8 {
        http_announce(n, 7000 + u16::from(n)).unwrap();
    }

    let stop = Arc::new(AtomicBool::new(false));
    let (http_tally, udp_tally) = (Arc::new(Tally::default()), Arc::new(Tally::default()));
    let mut load = Vec::new();
    for t in 0..2u8 {
        let (stop, tally) = (stop.clone(), http_tally.clone());
        load.push(std::thread::spawn(move || {
            // Twenty clients a thread, announcing again and again.
            let mut i = 0u16;
            while !stop.load(Ordering::Relaxed) {
                i = (i + 1) % 20;
                let started = Instant::now();
                tally.record(
                    started,
                    http_announce(100 + t, 30_000 + u16::from(t) * 100 + i),
                );
            }
        }));
    }
    {
        let (stop, tally) = (stop.clone(), udp_tally.clone());
        load.push(std::thread::spawn(move || udp_loop(&stop, &tally)));
    }
    wait_until("load before the upgrade", Duration::from_secs(30), || {
        http_tally.ok.load(Ordering::Relaxed) > 50 && udp_tally.ok.load(Ordering::Relaxed) > 50
    });

    // A new binary whose config has an error: the old one serves on.
    std::fs::write(&config, CONFIG.replace("workers = 2", "workers = \"two\"")).unwrap();
    let pid = old.child.id().to_string();
    assert!(common::send_signal("-USR2", &pid));
    wait_until("the refused upgrade", Duration::from_secs(60), || {
        old.log_text().contains("did not take over")
    });
    assert!(
        old.log_text().contains("server.workers"),
        "{}",
        old.log_text()
    );
    assert!(
        old.child.try_wait().unwrap().is_none(),
        "the old one serves on"
    );

    // The upgrade: the old process exits once the new one is ready; the new one serves.
    std::fs::write(&config, CONFIG).unwrap();
    let before = (
        http_tally.ok.load(Ordering::Relaxed),
        udp_tally.ok.load(Ordering::Relaxed),
    );
    assert!(common::send_signal("-USR2", &pid));
    let status = old.wait_exit(Duration::from_secs(120));
    assert!(status.success(), "{status}\n{}", old.log_text());
    let new_pid: u32 = {
        let text = old.log_text();
        let line = text
            .lines()
            .find(|l| l.contains("is ready; stopping here"))
            .unwrap_or_else(|| panic!("{text}"));
        line.split("upgrade: pid ")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    // Its log goes on in the same stream.
    wait_until("the new workers", Duration::from_secs(60), || {
        old.log_text().matches("workers started").count() == 2
    });
    wait_until("load after the upgrade", Duration::from_secs(30), || {
        http_tally.ok.load(Ordering::Relaxed) > before.0 + 50
            && udp_tally.ok.load(Ordering::Relaxed) > before.1 + 50
    });
    stop.store(true, Ordering::Relaxed);
    for t in load {
        t.join().unwrap();
    }
    for (name, t) in [("HTTP", &http_tally), ("UDP", &udp_tally)] {
        println!(
            "{name}: {} answered, {} failed, longest wait {} ms",
            t.ok.load(Ordering::Relaxed),
            t.failed.load(Ordering::Relaxed),
            t.longest_us.load(Ordering::Relaxed) / 1000
        );
        assert_eq!(
            t.failed.load(Ordering::Relaxed),
            0,
            "{name}: {:?}",
            t.errors.lock().unwrap()
        );
    }
    // The swarms came along: the fifty seeders (and the load's own peers) are known.
    let mut c = Client::connect(HTTP.parse().unwrap());
    let body = c.get(&common::scrape_target(&[[1; 20]])).body;
    let text = String::from_utf8_lossy(&body).into_owned();
    assert!(text.contains("8:completei"), "{text}");
    let complete: i64 = text
        .split("8:completei")
        .nth(1)
        .and_then(|r| r.split('e').next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(
        complete >= 52,
        "{complete} seeders after the upgrade: {text}"
    );

    // Stopped by its PID as any service is.
    assert!(common::send_signal("-TERM", &new_pid.to_string()));
    wait_until("the new one to stop", Duration::from_secs(60), || {
        TcpStream::connect(HTTP).is_err()
    });
    reap.1 = false;
    let _ = std::fs::remove_dir_all(&dir);
}
