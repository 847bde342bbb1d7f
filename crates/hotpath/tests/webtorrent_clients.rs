//! Real WebTorrent clients move a file through hotpath, offline: two node clients
//! (webtorrent 3.0.21 on @roamhq/wrtc) over ws:// and over wss:// (a self-signed certificate
//! they are told to trust), and a node seeder with a leecher in Debian's headless Chromium
//! (the page loads webtorrent.min.js) over wss://. Each test runs in a network namespace with
//! loopback only, and the clients have no STUN server. scripts/test installs the clients
//! (scripts/webtorrent-clients), chromium and chromium-driver.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::browser::Browser;
use common::tls::self_signed;
use common::*;
use hotpath_server::listen::ListenerKind;

/// Where scripts/webtorrent-clients put the clients.
fn clients() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let dir = target.join("webtorrent-clients");
    assert!(
        dir.join("node_modules/webtorrent").is_dir() && dir.join("peer.mjs").is_file(),
        "no WebTorrent clients in {}: run scripts/webtorrent-clients (scripts/test does)",
        dir.display()
    );
    dir
}

/// A file of `len` pseudo-random bytes in `dir`.
fn payload(dir: &Path, len: usize) -> (PathBuf, Vec<u8>) {
    let mut rng = fastrand::Rng::with_seed(len as u64);
    let bytes: Vec<u8> = (0..len).map(|_| rng.u8(..)).collect();
    let path = dir.join("payload.bin");
    std::fs::write(&path, &bytes).unwrap();
    (path, bytes)
}

/// A node client process; ended by its PID when dropped.
struct Node(Child);

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn node(clients: &Path, args: &[&str], ca: Option<&str>) -> Node {
    let mut cmd = Command::new("node");
    cmd.arg(clients.join("peer.mjs"))
        .args(args)
        .current_dir(clients)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if let Some(ca) = ca {
        cmd.env("NODE_EXTRA_CA_CERTS", ca);
    }
    Node(
        cmd.spawn()
            .expect("node runs (scripts/webtorrent-clients installs it)"),
    )
}

/// The first JSON line a client prints, within `wait`.
fn first_line(n: &mut Node, wait: Duration) -> serde_json::Value {
    let out = n.0.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(out).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx
        .recv_timeout(wait)
        .expect("the client said nothing in time");
    serde_json::from_str(&line).unwrap_or_else(|_| panic!("not JSON: {line:?}"))
}

/// A seeder of `file` on `announce`; its magnet link.
fn seed(clients: &Path, announce: &str, file: &Path, ca: Option<&str>) -> (Node, String) {
    let dir = file.parent().unwrap().display().to_string();
    let mut s = node(
        clients,
        &["seed", announce, &file.display().to_string(), &dir],
        ca,
    );
    let v = first_line(&mut s, Duration::from_secs(60));
    (s, v["magnet"].as_str().expect("a magnet link").to_string())
}

/// A node leecher of `magnet` on `announce` downloads into a fresh directory; the bytes.
fn fetch(clients: &Path, announce: &str, magnet: &str, into: &Path, ca: Option<&str>) -> Vec<u8> {
    std::fs::create_dir_all(into).unwrap();
    let mut g = node(
        clients,
        &["get", announce, magnet, &into.display().to_string()],
        ca,
    );
    let v = first_line(&mut g, Duration::from_secs(90));
    assert_eq!(v["name"], "payload.bin", "{v}");
    std::fs::read(into.join("payload.bin")).unwrap()
}

fn server_with_tls(dir: &Path) -> (hotpath_server::RunningServer, String) {
    let mut cfg = test_config();
    let (cert, key, _) = self_signed(dir, "tracker");
    cfg.listen.https = vec!["127.0.0.1:0".parse().unwrap()];
    cfg.tls.cert_file = cert.clone();
    cfg.tls.key_file = key;
    (start(&cfg), cert)
}

#[test]
fn node_clients_move_a_file_over_ws_and_wss() {
    if common::netns::outside("node_clients_move_a_file_over_ws_and_wss", &[]) {
        return;
    }
    let clients = clients();
    let dir = data_dir();
    let (server, cert) = server_with_tls(&dir);
    let ws = format!("ws://{}/announce", server.http_addr().unwrap());
    let wss = format!(
        "wss://127.0.0.1:{}/announce",
        server.tcp_addr(ListenerKind::Https).unwrap().port()
    );
    for (name, url, ca) in [("ws", &ws, None), ("wss", &wss, Some(cert.as_str()))] {
        let seed_dir = dir.join(format!("{name}-seed"));
        std::fs::create_dir_all(&seed_dir).unwrap();
        let (file, bytes) = payload(&seed_dir, 300_000);
        let (_seeder, magnet) = seed(&clients, url, &file, ca);
        let got = fetch(&clients, url, &magnet, &dir.join(format!("{name}-get")), ca);
        assert!(got == bytes, "over {name}: the file differs");
    }
    let admin = server.tcp_addr(ListenerKind::Admin).unwrap();
    let answers = metric_at(admin, "hotpath_webtorrent_answers_relayed_total").unwrap();
    assert!(answers >= 2.0, "{answers}");
    server.shutdown().unwrap();
}

/// FNV-1a (32 bits), as the page computes it.
fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |h, &b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

#[test]
fn a_browser_leecher_gets_a_file_from_a_node_seeder_over_wss() {
    if common::netns::outside(
        "a_browser_leecher_gets_a_file_from_a_node_seeder_over_wss",
        &[],
    ) {
        return;
    }
    let clients = clients();
    let dir = data_dir();
    let (server, cert) = server_with_tls(&dir);
    let wss = format!(
        "wss://127.0.0.1:{}/announce",
        server.tcp_addr(ListenerKind::Https).unwrap().port()
    );
    let (file, bytes) = payload(&dir, 250_000);
    let (_seeder, magnet) = seed(&clients, &wss, &file, Some(&cert));
    // The page and webtorrent.min.js, served over plain HTTP on this namespace's loopback.
    let page_port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut pages = Node(
        Command::new("python3")
            .args([
                "-m",
                "http.server",
                "--bind",
                "127.0.0.1",
                &page_port.to_string(),
            ])
            .current_dir(&clients)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 runs"),
    );
    wait_until("the page server", Duration::from_secs(20), || {
        std::net::TcpStream::connect(("127.0.0.1", page_port)).is_ok()
    });
    let browser = Browser::start_with(
        dir.join("chromium-profile"),
        &[
            "--allow-loopback-in-peer-connection",
            "--disable-features=WebRtcHideLocalIpsWithMdns",
            // The tracker's certificate is self-signed.
            "--ignore-certificate-errors",
        ],
    );
    let hash: String = format!("{magnet}|{wss}")
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect();
    browser.open(&format!("http://127.0.0.1:{page_port}/page.html#{hash}"));
    let deadline = Instant::now() + Duration::from_secs(90);
    let title = loop {
        let t = browser.eval("return document.title");
        let t = t.as_str().unwrap_or_default().to_string();
        if t.starts_with("done") || t.starts_with("error") {
            break t;
        }
        assert!(Instant::now() < deadline, "the browser did not finish: {t}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(title, format!("done {} {}", bytes.len(), fnv1a(&bytes)));
    drop(browser);
    let _ = pages.0.kill();
    server.shutdown().unwrap();
}
