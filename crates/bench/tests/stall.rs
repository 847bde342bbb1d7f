//! Coordinated omission, end to end: a server that stalls once for 600 ms under an open-model
//! load. Latency counted from the intended send time must show the stall for every request
//! that queued behind it; service time (from the actual send, what a closed-loop tool reports)
//! must not.

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
    let corrected = |q: &str| r.latency_us.get(q);
    let service = |q: &str| r.service_time_us.get(q);
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
