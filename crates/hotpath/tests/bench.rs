//! `hotpath bench` and `hotpath doctor` run as a user would: short, bounded loads against a
//! hotpath started on port 0, checked through the JSON report.

mod common;

use std::process::{Command, Output};

use serde_json::Value;

fn hotpath(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hotpath"))
        .args(args)
        .output()
        .expect("hotpath runs")
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

const SHORT: [&str; 4] = ["--duration", "1s", "--warmup", "200ms"];

fn bench(url: &str, extra: &[&str]) -> (Output, Value) {
    let mut args = vec!["bench", url, "--json"];
    args.extend_from_slice(&SHORT);
    args.extend_from_slice(extra);
    let out = hotpath(&args);
    let v = json(&out);
    (out, v)
}

fn check_common(v: &Value, protocol: &str) {
    assert_eq!(v["protocol"], protocol);
    assert_eq!(v["duration_secs"], 1.0);
    assert_eq!(v["warmup_secs"], 0.2);
    let r = &v["requests"];
    assert!(r["sent"].as_u64().unwrap() > 100, "{v}");
    assert!(r["ok"].as_u64().unwrap() > 100, "{v}");
    assert!(v["rate"].as_f64().unwrap() > 100.0);
    let l = &v["latency_us"];
    for k in ["mean", "p50", "p90", "p99", "p99.9", "p99.99", "max"] {
        assert!(l[k].as_f64().unwrap() > 0.0, "latency {k}: {v}");
    }
    assert!(l["p50"].as_f64() <= l["p99"].as_f64() && l["p99"].as_f64() <= l["max"].as_f64());
    assert!(!v["timeline"].as_array().unwrap().is_empty());
    assert!(v["percentiles"].as_array().unwrap().len() > 50);
    assert!(v["cpu"]["sent_per_cpu_sec"].as_f64().unwrap() > 0.0);
    check_counts(v);
}

/// Every request sent in the measured period is accounted for once: answered, failed, or
/// still in flight when the run ended; every error is one of those failures or stray.
fn check_counts(v: &Value) {
    let r = &v["requests"];
    let n = |k: &str| r[k].as_u64().unwrap_or_else(|| panic!("requests.{k}: {v}"));
    assert_eq!(n("sent"), n("ok") + n("failed") + n("in_flight"), "{v}");
    assert_eq!(n("errors"), n("failed") + n("stray"), "{v}");
    let classes: u64 = v["errors"]
        .as_object()
        .unwrap()
        .values()
        .map(|c| c.as_u64().unwrap())
        .sum();
    assert_eq!(classes, n("errors"), "{v}");
}

/// The test config, with no cap on peers or torrents per address: the load generator sends
/// every peer from 127.0.0.1.
fn load_config() -> hotpath_config::Config {
    let mut c = common::test_config();
    c.tracker.max_peers_per_ip = 1 << 20;
    c.tracker.max_torrents_per_address = 1 << 30;
    c.tracker.max_torrents_per_48 = 1 << 30;
    c.tracker.max_peers_per_address = 1 << 30;
    c.tracker.max_peers_per_48 = 1 << 30;
    c
}

#[test]
fn http_keepalive_announces_with_templates() {
    let server = common::start(&load_config());
    let url = format!(
        "http://{}/announce?info_hash={{h}}&peer_id={{p}}&port={{port}}&left=0&compact=1",
        server.http_addr().unwrap()
    );
    let (out, v) = bench(
        &url,
        &[
            "-c",
            "4",
            "--var",
            "h=zipf:1.1:100",
            "--var",
            "p=random20",
            "--var",
            "port=range:1024-65535",
            "--slo",
            "errors=0",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    check_common(&v, "http");
    assert_eq!(v["model"], "closed");
    assert_eq!(v["keepalive"], true);
    assert_eq!(v["requests"]["errors"], 0, "{v}");
    // Four connections, kept: four connects, all in the warm-up, and counted.
    assert_eq!(v["requests"]["connects"], 4);
    assert_eq!(v["slo_met"], true);
    // The announces reached the swarm table: the hot torrents have peers.
    let stats = common::Client::connect(server.admin_addr().unwrap()).get("/stats");
    let stats: Value = serde_json::from_slice(&stats.body).unwrap();
    assert!(
        stats["tracker"]["torrents"].as_u64().unwrap() > 10,
        "{stats}"
    );
    server.shutdown().unwrap();
}

#[test]
fn http_short_connections_and_open_model() {
    let server = common::start(&load_config());
    let url = format!("http://{}/healthz", server.http_addr().unwrap());
    let (_, v) = bench(&url, &["-c", "2", "--no-keepalive"]);
    check_common(&v, "http");
    assert_eq!(v["keepalive"], false);
    // A new connection for every request.
    let r = &v["requests"];
    assert!(
        r["connects"].as_u64().unwrap() + 2 >= r["sent"].as_u64().unwrap(),
        "{v}"
    );

    let (_, v) = bench(&url, &["-c", "4", "--rate", "2000"]);
    check_common(&v, "http");
    assert_eq!(v["model"], "open");
    assert_eq!(v["target_rate"], 2000.0);
    // On schedule: about 2000 in the second, none missed by a server this idle.
    let sent = v["requests"]["sent"].as_u64().unwrap();
    assert!((1800..=2200).contains(&sent), "{v}");
    assert!(v["service_time_us"]["p50"].as_f64().unwrap() > 0.0);
    server.shutdown().unwrap();
}

#[test]
fn tracker_failures_and_missed_objectives() {
    let server = common::start(&load_config());
    // No info_hash: every answer is a bencoded failure reason, counted by class.
    let url = format!("http://{}/announce?port=1", server.http_addr().unwrap());
    let (out, v) = bench(&url, &["-c", "2", "--slo", "errors=0,p99<=1s"]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "a run with nothing answered fails (3), whatever its objectives"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no request was answered"), "{stderr}");
    assert!(v["failed"]
        .as_str()
        .unwrap()
        .contains("no request was answered"));
    assert_eq!(v["slo_met"], false);
    assert_eq!(v["slo"][0]["met"], false);
    assert_eq!(
        v["slo"][1]["met"], false,
        "no latency was measured, so no latency objective is met: {v}"
    );
    assert!(v["latency_us"].is_null(), "no latency figures: {v}");
    let classes = v["errors"].as_object().unwrap();
    assert_eq!(classes.len(), 1, "{v}");
    let (class, n) = classes.iter().next().unwrap();
    assert!(class.starts_with("failure reason: "), "{class}");
    assert!(n.as_u64().unwrap() > 100);
    assert_eq!(v["requests"]["ok"], 0);
    // The same in text: no latency line of zeros, and why it failed; and the HTML report of
    // that run says FAILED, and why, before any figure.
    let dir = std::env::temp_dir().join(format!("hp-bench-failed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let html = dir.join("failed.html");
    let out = hotpath(&[
        "bench",
        &url,
        "-c",
        "1",
        "--duration",
        "500ms",
        "--warmup",
        "0s",
        "--html",
        html.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(3));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("latency   none: no request was answered without error")
            && text.contains("FAILED")
            && !text.contains("mean 0"),
        "{text}"
    );
    let page = std::fs::read_to_string(&html).unwrap();
    let banner = page
        .find("FAILED: no request was answered")
        .expect("a FAILED banner");
    assert!(
        banner < page.find("answered/s").unwrap(),
        "before the figures"
    );
    std::fs::remove_dir_all(dir).unwrap();
    // 404s are counted by status class.
    let (_, v) = bench(
        &format!("http://{}/nothing-here", server.http_addr().unwrap()),
        &["-c", "1"],
    );
    assert!(v["errors"]["http 4xx"].as_u64().unwrap() > 100, "{v}");
    // A run with some errors passes under --max-errors and fails over it: a mix of one good
    // request kind and one that gets 404 (about half of each).
    let dir = std::env::temp_dir().join(format!("hotpath-bench-mix-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let scenario = dir.join("mix.toml");
    std::fs::write(
        &scenario,
        format!(
            "url = \"http://{}/healthz\"\n[[request]]\npath = \"/healthz\"\n[[request]]\npath = \"/nothing-here\"\n",
            server.http_addr().unwrap()
        ),
    )
    .unwrap();
    let sc = scenario.to_str().unwrap();
    let mut args = vec!["bench", "--scenario", sc, "--json", "-c", "2"];
    args.extend_from_slice(&SHORT);
    let out = hotpath(&args);
    assert_eq!(
        out.status.code(),
        Some(3),
        "half errors, over the 1 % default"
    );
    let v = json(&out);
    assert!(
        v["failed"]
            .as_str()
            .unwrap()
            .contains("over --max-errors 1%"),
        "{v}"
    );
    assert!(v["latency_us"]["p99"].as_f64().unwrap() > 0.0);
    args.extend_from_slice(&["--max-errors", "80"]);
    let out = hotpath(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(json(&out)["failed"].is_null());
    std::fs::remove_dir_all(dir).unwrap();
    server.shutdown().unwrap();
}

#[test]
fn udp_tracker_mix() {
    let server = common::start(&load_config());
    let url = format!("udp://{}", server.udp_addr().unwrap());
    let dir = std::env::temp_dir().join(format!("hotpath-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let html = dir.join("report.html");
    let (out, v) = bench(
        &url,
        &[
            "-c",
            "2",
            "--torrents",
            "1000",
            "--peers",
            "5000",
            "--html",
            html.to_str().unwrap(),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    check_common(&v, "udp");
    assert_eq!(v["requests"]["errors"], 0, "{v}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!("wrote {}", html.display())),
        "says where the report went"
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.starts_with("<!doctype html>") && page.matches("<svg").count() == 3);
    assert!(page.contains("log scale"), "latency on a log axis");
    assert!(
        page.contains(r#"style="text-anchor:end">99.999%</text>"#),
        "the last tick's label ends at the right edge, not past it"
    );
    assert!(!page.contains("<script"), "self-contained, no scripts");
    std::fs::remove_dir_all(dir).unwrap();
    server.shutdown().unwrap();
}

#[test]
fn nothing_listening_is_a_connect_error_not_a_hang() {
    // Bind and drop to find a port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (out, v) = bench(&format!("http://127.0.0.1:{port}/"), &["-c", "1"]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "nothing answered: the run failed"
    );
    assert!(
        v["errors"]["connect: refused"].as_u64().unwrap() > 10,
        "{v}"
    );
    assert_eq!(v["requests"]["ok"], 0);
    // Each refused connection ends the request it was opened for.
    check_counts(&v);
    assert_eq!(v["requests"]["stray"], 0, "{v}");
    assert!(v["requests"]["in_flight"].as_u64().unwrap() <= 1, "{v}");
    let text = String::from_utf8_lossy(
        &hotpath(&[
            "bench",
            &format!("http://127.0.0.1:{port}/"),
            "-c",
            "1",
            "--duration",
            "1s",
            "--warmup",
            "0s",
        ])
        .stdout,
    )
    .into_owned();
    assert!(
        text.contains(" sent = 0 ok + ") && text.contains(" in flight at the end"),
        "{text}"
    );
}

/// On a terminal (a pseudo-terminal here, as a person's would be) the run shows a live line
/// once a second on standard error; with --json, or when not on a terminal, it does not.
#[test]
fn a_live_progress_line_on_a_terminal_only() {
    let server = common::start(&load_config());
    let url = format!("http://{}/healthz", server.http_addr().unwrap());
    let on_tty = |extra: &[&str]| -> String {
        let out = Command::new("/usr/bin/python3")
            .args(["-c", "import pty, sys; pty.spawn(sys.argv[1:])"])
            .arg(env!("CARGO_BIN_EXE_hotpath"))
            .args([
                "bench",
                &url,
                "-c",
                "2",
                "--duration",
                "2s",
                "--warmup",
                "500ms",
            ])
            .args(extra)
            .output()
            .expect("python3 runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let shown = on_tty(&[]);
    assert!(shown.contains("\r\x1b[2K  1s of 2s "), "{shown:?}");
    assert!(
        shown.contains("/s answered  p99 ") && shown.contains(" so far  0 errors"),
        "{shown:?}"
    );
    assert!(shown.contains("requests "), "the report follows: {shown:?}");
    let json = on_tty(&["--json"]);
    assert!(
        json.contains("\"requests\"") && !json.contains("so far"),
        "{json:?}"
    );
    let (out, _) = bench(&url, &["-c", "2"]);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("so far"));
    server.shutdown().unwrap();
}

#[test]
fn bad_arguments_are_named() {
    for (args, needle) in [
        (vec!["bench"], "no target"),
        (
            vec!["bench", "http://127.0.0.1:1/?x={x}"],
            "`{x}` names no declared variable",
        ),
        (
            vec!["bench", "http://127.0.0.1:1/", "--slo", "p99=soon"],
            "not a duration",
        ),
        (vec!["bench", "udp://127.0.0.1:1", "--mix", "1:1"], "--mix"),
        (vec!["bench", "gopher://x:1/"], "scheme"),
    ] {
        let out = hotpath(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn doctor_reports_json_and_exit_status() {
    let out = hotpath(&["doctor", "--json"]);
    let v = json(&out);
    let status = v["status"].as_str().unwrap();
    assert!(["ok", "note", "warn", "fail"].contains(&status));
    assert_eq!(
        out.status.code(),
        Some(if status == "fail" { 1 } else { 0 })
    );
    let findings = v["findings"].as_array().unwrap();
    for setting in [
        "net.core.somaxconn",
        "RLIMIT_NOFILE",
        "server.workers",
        "net.ipv4.tcp_tw_reuse",
    ] {
        assert!(
            findings.iter().any(|f| f["setting"] == setting),
            "{setting}: {v}"
        );
    }
    let text = hotpath(&["doctor"]);
    assert!(String::from_utf8_lossy(&text.stdout).starts_with("hotpath doctor: "));
}
