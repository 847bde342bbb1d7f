//! Real BitTorrent clients (Debian's python3-libtorrent and aria2) find each other only through
//! hotpath and transfer a file intact, over HTTP and over UDP, and the tracker counts the
//! completed download. `scripts/test` installs the clients.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

const PYTHON: &str = "/usr/bin/python3";

fn script() -> String {
    format!(
        "{}/../../tests/clients/swarm.py",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn require_clients(leecher: &str) {
    let ok = Command::new(PYTHON)
        .args(["-c", "import libtorrent"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "python3-libtorrent is missing: run scripts/test (it installs the test clients)"
    );
    if leecher == "aria2" {
        let ok = Command::new("aria2c")
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            ok,
            "aria2c is missing: run scripts/test (it installs the test clients)"
        );
    }
}

/// Runs the swarm script against `tracker_url`, bounded in time; returns its JSON line.
fn run_swarm(
    server: &hotpath_server::RunningServer,
    tracker_url: &str,
    leecher: &str,
) -> serde_json::Value {
    let scrape = format!("http://{}/scrape", server.http_addr().unwrap());
    require_clients(leecher);
    let dir = std::env::temp_dir().join(format!(
        "hotpath-clients-{}-{leecher}-{}",
        std::process::id(),
        tracker_url.len()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut child = Command::new(PYTHON)
        .arg(script())
        .args([
            "--tracker",
            tracker_url,
            "--scrape",
            &scrape,
            "--leecher",
            leecher,
            "--timeout",
            "90",
        ])
        .arg("--workdir")
        .arg(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the client script did not stop in time");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|_| {
        panic!(
            "script output: {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(
        v["ok"],
        true,
        "{v}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
    v
}

#[test]
fn libtorrent_over_http() {
    let server = start(&test_config());
    let url = format!("http://{}/announce", server.http_addr().unwrap());
    let v = run_swarm(&server, &url, "libtorrent");
    assert!(v["downloaded"].as_i64().unwrap() >= 1, "{v}");
    server.shutdown().unwrap();
}

#[test]
fn libtorrent_over_udp() {
    let server = start(&test_config());
    let url = format!("udp://{}/announce", server.udp_addr().unwrap());
    let v = run_swarm(&server, &url, "libtorrent");
    assert!(v["downloaded"].as_i64().unwrap() >= 1, "{v}");
    server.shutdown().unwrap();
}

#[test]
fn aria2_over_http() {
    let server = start(&test_config());
    let url = format!("http://{}/announce", server.http_addr().unwrap());
    let v = run_swarm(&server, &url, "aria2");
    assert!(v["downloaded"].as_i64().unwrap() >= 1, "{v}");
    server.shutdown().unwrap();
}
