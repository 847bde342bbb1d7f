//! The load generator against small servers that misbehave on purpose: one that stalls once
//! (coordinated omission: latency counted from the intended send time must show the stall for
//! every request that queued behind it, service time must not), one that closes each kept-alive
//! connection after one answer without saying so, one that never answers.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};

use hotpath_bench::{run, Args, Plan};

/// Answers HTTP requests on one connection; the first request after `stall_at` waits 600 ms.
fn stalling_server(stall_at: Duration) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let started = Instant::now();
        let mut stalled = false;
        // One connection is all the test opens; stop when it closes.
        let Ok((mut s, _)) = listener.accept() else {
            return;
        };
        let mut buf = [0u8; 4096];
        let mut pending = Vec::new();
        loop {
            let n = match s.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            pending.extend_from_slice(&buf[..n]);
            while let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
                pending.drain(..end + 4);
                if !stalled && started.elapsed() >= stall_at {
                    stalled = true;
                    std::thread::sleep(Duration::from_millis(600));
                }
                if s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                    .is_err()
                {
                    return;
                }
            }
        }
    });
    addr
}

#[test]
fn a_stalled_server_shows_in_corrected_latency_only() {
    let addr = stalling_server(Duration::from_millis(800));
    let plan = Plan::from_args(&Args {
        url: Some(format!("http://{addr}/")),
        connections: Some(1),
        rate: Some(200.0),
        duration: Some(Duration::from_secs(2)),
        warmup: Some(Duration::from_millis(200)),
        ..Args::default()
    })
    .unwrap();
    let r = run(&plan).unwrap();
    let corrected = |q: &str| r.latency_us.as_ref().expect("answers were timed").get(q);
    let service = |q: &str| {
        r.service_time_us
            .as_ref()
            .expect("answers were timed")
            .get(q)
    };
    // ~120 of ~400 requests were due during the stall: the corrected p90 is hundreds of ms,
    // while the service time of all but the stalled request stays tiny.
    assert!(
        corrected("p90") > 100_000.0,
        "corrected p90 {}us",
        corrected("p90")
    );
    assert!(
        corrected("max") > 500_000.0,
        "corrected max {}us",
        corrected("max")
    );
    assert!(
        service("p90") < 50_000.0,
        "service p90 {}us",
        service("p90")
    );
    assert!(corrected("p50") < corrected("p90"));
    assert!(r.requests.late > 50, "late {}", r.requests.late);
    assert_eq!(r.requests.errors, 0, "{:?}", r.errors);
    // The schedule caught up after the stall: every due request went out.
    assert!(r.requests.sent >= 380, "sent {}", r.requests.sent);
}

fn plan(url: String, connections: usize) -> Plan {
    Plan::from_args(&Args {
        url: Some(url),
        connections: Some(connections),
        duration: Some(Duration::from_secs(1)),
        warmup: Some(Duration::from_millis(100)),
        timeout: Some(Duration::from_millis(300)),
        ..Args::default()
    })
    .unwrap()
}

/// A server that reads one request per connection, writes `answer` in one write and closes.
fn one_answer_per_connection(answer: &'static [u8]) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut s) = conn else { return };
            let mut buf = [0u8; 1024];
            let mut got = Vec::new();
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
            let _ = s.write_all(answer);
        }
    });
    addr
}

#[test]
fn a_server_closing_after_each_answer_means_reconnects_not_errors() {
    // HTTP/1.1 with a length and no `Connection: close`, then a close.
    let addr = one_answer_per_connection(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    let r = run(&plan(format!("http://{addr}/"), 2)).unwrap();
    assert_eq!(r.requests.errors, 0, "{:?}", r.errors);
    assert!(r.requests.ok > 50, "{:?}", r.requests);
    assert!(
        r.requests.reconnects + 2 >= r.requests.ok,
        "{:?}",
        r.requests
    );
}

#[test]
fn an_answer_that_ends_at_the_close_is_whole_when_its_fin_comes_with_it() {
    // As XBT answers: HTTP/1.0, no length, the socket closed at once after one write, so the
    // last bytes and the FIN often arrive together.
    let addr = one_answer_per_connection(b"HTTP/1.0 200 OK\r\n\r\nd8:intervali1800ee");
    let p = Plan::from_args(&Args {
        url: Some(format!("http://{addr}/")),
        connections: Some(2),
        duration: Some(Duration::from_secs(1)),
        warmup: Some(Duration::from_millis(100)),
        timeout: Some(Duration::from_millis(300)),
        no_keepalive: true,
        ..Args::default()
    })
    .unwrap();
    let r = run(&p).unwrap();
    assert_eq!(r.requests.errors, 0, "{:?}", r.errors);
    assert!(r.requests.ok > 50, "{:?}", r.requests);
}

#[test]
fn a_server_that_never_answers_gives_timeouts_within_the_run() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming() {
            match conn {
                Ok(s) => held.push(s),
                Err(_) => return,
            }
        }
    });
    let started = Instant::now();
    let r = run(&plan(format!("http://{addr}/"), 3)).unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "the run ends on time"
    );
    assert_eq!(r.requests.ok, 0);
    // 3 connections, a 300 ms timeout, 1 s measured: about 9 timeouts.
    let t = r.errors.get("timeout").copied().unwrap_or(0);
    assert!((6..=12).contains(&t), "{:?}", r.errors);
}

#[test]
fn chunked_answers_on_kept_alive_connections() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut s) = conn else { return };
            // Without it, the second small write waits for the client's delayed ACK (Nagle).
            s.set_nodelay(true).unwrap();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let mut pending = Vec::new();
                loop {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => pending.extend_from_slice(&buf[..n]),
                    }
                    while let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
                        pending.drain(..end + 4);
                        // The head and the chunks in separate writes, as a streaming server
                        // (OpenResty's ngx.say, say) sends them.
                        let parts: [&[u8]; 3] = [
                            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
                            b"5\r\nhello\r\n",
                            b"6\r\n world\r\n0\r\n\r\n",
                        ];
                        for p in parts {
                            if s.write_all(p).is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    let r = run(&plan(format!("http://{addr}/"), 2)).unwrap();
    assert_eq!(r.requests.errors, 0, "{:?}", r.errors);
    assert!(r.requests.ok > 50, "{:?}", r.requests);
    assert_eq!(
        r.requests.connects, 2,
        "two connections, opened once and kept"
    );
}
