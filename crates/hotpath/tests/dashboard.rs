//! The live dashboard on the admin listener, in a real browser: Debian's chromium, headless,
//! driven through chromedriver (the W3C WebDriver protocol over plain HTTP), loads the page
//! from a `hotpath serve` process under load and reads what a person would see: the figures
//! are filled in and move from one second to the next. A screenshot is left at
//! `target/dashboard.png` for a person to look at. scripts/test installs chromium and
//! chromium-driver when they are missing.

mod common;

use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{announce, announce_target, wait_until, Client, Proc};
use hotpath_wire::query::Event;
use serde_json::{json, Value};

/// A chromedriver process and one browser session in it; both end when this is dropped.
struct Browser {
    driver: Child,
    addr: SocketAddr,
    session: String,
    profile: std::path::PathBuf,
}

impl Browser {
    fn start(profile: std::path::PathBuf) -> Browser {
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver runs (scripts/test installs chromium-driver)");
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let mut browser = Browser {
            driver,
            addr,
            session: String::new(),
            profile,
        };
        wait_until("chromedriver to listen", Duration::from_secs(20), || {
            std::net::TcpStream::connect(addr).is_ok()
        });
        let mut chrome = json!({
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1280,1400", "--hide-scrollbars",
                     format!("--user-data-dir={}", browser.profile.display())]
        });
        if std::path::Path::new("/usr/bin/chromium").exists() {
            chrome["binary"] = "/usr/bin/chromium".into();
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome", "goog:chromeOptions": chrome}}});
        let v = browser.call("POST", "/session", Some(caps));
        browser.session = v["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {v}"))
            .to_string();
        browser
    }

    /// One WebDriver command; returns its `value`, panicking on a WebDriver error.
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let body = body.map_or(String::new(), |b| b.to_string());
        let mut c = Client::connect(self.addr);
        c.stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        c.send(
            format!(
                "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                self.addr,
                body.len()
            )
            .as_bytes(),
        );
        let r = c.read().expect("chromedriver answers");
        let v: Value = serde_json::from_slice(&r.body).expect("JSON from chromedriver");
        assert!(
            r.status == 200,
            "WebDriver {method} {path}: {} {}",
            r.status,
            v
        );
        v["value"].clone()
    }

    fn session_path(&self, rest: &str) -> String {
        format!("/session/{}{rest}", self.session)
    }

    fn open(&self, url: &str) {
        self.call(
            "POST",
            &self.session_path("/url"),
            Some(json!({ "url": url })),
        );
    }

    /// Runs `script` in the page and returns what it returns.
    fn eval(&self, script: &str) -> Value {
        self.call(
            "POST",
            &self.session_path("/execute/sync"),
            Some(json!({"script": script, "args": []})),
        )
    }

    fn screenshot(&self) -> Vec<u8> {
        let b64 = self.call("GET", &self.session_path("/screenshot"), None);
        base64_decode(b64.as_str().expect("base64 text"))
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let path = self.session_path("");
            let mut c = Client::connect(self.addr);
            c.send(
                format!("DELETE {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
            );
            let _ = c.read();
        }
        // Ending the session asks Chromium to quit; one still running when the driver goes
        // would be left behind, so its processes (known by this test's own profile
        // directory) are waited for, then ended by PID.
        let mine = format!("--user-data-dir={}", self.profile.display());
        let deadline = Instant::now() + Duration::from_secs(5);
        while !pids_with_arg(&mine).is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        for pid in pids_with_arg(&mine) {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// The processes with `arg` on their command line.
fn pids_with_arg(arg: &str) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.split(|&b| b == 0).any(|a| a == arg.as_bytes()))
        })
        .collect()
}

fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let bytes: Vec<u8> = s.bytes().filter(|&c| c != b'=' && c != b'\n').collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= u32::from(val(c)) << (18 - 6 * i);
        }
        out.extend_from_slice(&n.to_be_bytes()[1..chunk.len()]);
    }
    out
}

/// What the page shows: each tile's value and note, the service table, the status line.
#[derive(Debug)]
struct Seen {
    updates: u64,
    status: String,
    requests_per_s: f64,
    since_start: f64,
    peers: f64,
    torrents: f64,
    p99: String,
    rows: Vec<String>,
}

fn look(b: &Browser) -> Seen {
    let v = b.eval(
        "const t = (id) => (document.getElementById(id) || {}).textContent || '';
         return {
           updates: Number(document.body.dataset.updates),
           status: document.getElementById('status').className + ': ' + t('status'),
           requests: t('v-requests'),
           since: (document.querySelector('#t-requests .sub') || {}).textContent || '',
           peers: t('v-peers'),
           torrents: t('v-torrents'),
           p99: t('v-p99'),
           rows: [...document.querySelectorAll('#by-service tbody tr')].map((r) => r.innerText),
         };",
    );
    let num = |s: &str| -> f64 {
        let first = s.split_whitespace().next().unwrap_or("");
        first.replace(',', "").parse().unwrap_or(f64::NAN)
    };
    Seen {
        updates: v["updates"].as_u64().unwrap_or(0),
        status: v["status"].as_str().unwrap_or("").to_string(),
        requests_per_s: num(v["requests"].as_str().unwrap_or("")),
        since_start: num(v["since"].as_str().unwrap_or("")),
        peers: num(v["peers"].as_str().unwrap_or("")),
        torrents: num(v["torrents"].as_str().unwrap_or("")),
        p99: v["p99"].as_str().unwrap_or("").to_string(),
        rows: v["rows"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|r| r.as_str().unwrap_or("").to_string())
                    .collect()
            })
            .unwrap_or_default(),
    }
}

/// What the page shows once `ready` says so, looked at every 50 ms until `deadline`.
fn wait_page(b: &Browser, deadline: Instant, ready: impl Fn(&Seen) -> bool) -> Seen {
    loop {
        let s = look(b);
        if ready(&s) {
            return s;
        }
        assert!(Instant::now() < deadline, "the page never got there: {s:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Where cargo puts its output: the test binary runs from `<target>/<profile>/deps/`.
fn target_dir() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.ancestors().nth(3).expect("a target dir").to_path_buf()
}

#[test]
fn the_dashboard_shows_a_server_under_load_in_a_real_browser() {
    let dir = common::data_dir();
    let config = dir.join("hotpath.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nworkers = 2\nshutdown_grace_secs = 2\n\
             [listen]\nhttp = [\"127.0.0.1:0\"]\nudp = []\nadmin = [\"127.0.0.1:0\"]\nipv6 = false\n\
             [store]\ndata_dir = \"{}\"\n\
             [popups]\nenabled = true\n",
            dir.join("data").display()
        ),
    )
    .unwrap();
    let proc = Proc::spawn(&config, &dir);
    let admin = proc.admin.expect("an admin listener");

    // The page itself: self-contained (nothing fetched from elsewhere), locked down by its
    // headers, and only on the admin listener.
    let page = Client::connect(admin).get("/dashboard");
    assert_eq!(page.status, 200);
    let head = page.head.to_ascii_lowercase();
    assert!(head.contains("content-type: text/html"), "{head}");
    assert!(head.contains("content-security-policy: default-src 'none'"));
    assert!(head.contains("connect-src 'self'"));
    let html = String::from_utf8(page.body).unwrap();
    assert!(!html.contains("://"), "the page names no other origin");
    assert!(!html.contains("<link") && !html.contains(" src="));
    assert_eq!(Client::connect(admin).get("/").status, 200);
    assert_eq!(Client::connect(proc.http).get("/dashboard").status, 404);

    // Before any traffic: the first paint has figures (not "..."), and the page's own reads
    // of /metrics (admin requests) are not counted as traffic.
    let browser = Browser::start(dir.join("chromium-profile"));
    browser.open(&format!("http://{admin}/dashboard"));
    let deadline = Instant::now() + Duration::from_secs(30);
    let idle = wait_page(&browser, deadline, |s| s.updates >= 1);
    // (The one request since start: the 404 for /dashboard on the public listener above.)
    assert_eq!(
        (idle.requests_per_s, idle.since_start),
        (0.0, 1.0),
        "figures on the first paint: {idle:?}"
    );
    let idle = wait_page(&browser, deadline, |s| s.updates >= idle.updates + 3);
    assert_eq!(
        (idle.requests_per_s, idle.since_start),
        (0.0, 1.0),
        "its own reads are not traffic: {idle:?}"
    );

    // Load: announces from a growing set of peers on 50 torrents, with a few 404s.
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let load = {
        let (stop, sent, http) = (stop.clone(), sent.clone(), proc.http);
        std::thread::spawn(move || {
            let mut c = Client::connect(http);
            let mut i: u32 = 0;
            while !stop.load(Ordering::Relaxed) {
                let mut hash = [7u8; 20];
                hash[..4].copy_from_slice(&(i % 50).to_be_bytes());
                let a = announce(
                    hash,
                    (i % 200) as u8,
                    6881 + (i % 1000) as u16,
                    1,
                    Event::None,
                );
                let r = c.get(&announce_target(&a));
                assert_eq!(r.status, 200);
                if i.is_multiple_of(20) {
                    assert_eq!(c.get("/no-such-page").status, 404);
                }
                i += 1;
                sent.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_micros(300));
            }
        })
    };
    wait_until("the load to start", Duration::from_secs(20), || {
        sent.load(Ordering::Relaxed) > 100
    });

    let deadline = Instant::now() + Duration::from_secs(30);
    let first = wait_page(&browser, deadline, |s| {
        s.updates >= 3 && s.requests_per_s > 0.0
    });
    assert!(first.status.starts_with("ok: live"), "{first:?}");
    assert!(first.peers > 0.0 && first.torrents > 0.0, "{first:?}");
    assert!(first.p99.ends_with("s"), "a latency figure: {first:?}");
    assert!(
        first.rows.iter().any(|r| r.starts_with("http\tannounce")),
        "{first:?}"
    );
    assert!(first.rows.iter().any(|r| r.starts_with("http\tother")));

    // A few seconds on, the figures have moved.
    let later = wait_page(&browser, deadline + Duration::from_secs(20), |s| {
        s.updates >= first.updates + 3
    });
    assert!(
        later.since_start > first.since_start,
        "{first:?} then {later:?}"
    );
    assert!(later.requests_per_s > 0.0, "{later:?}");

    let png = browser.screenshot();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "a PNG screenshot");
    let shot = target_dir().join("dashboard.png");
    std::fs::write(&shot, &png).unwrap();
    eprintln!("dashboard screenshot: {}", shot.display());

    stop.store(true, Ordering::Relaxed);
    load.join().unwrap();
    drop(browser);
    drop(proc);
    let _ = std::fs::remove_dir_all(&dir);
}
