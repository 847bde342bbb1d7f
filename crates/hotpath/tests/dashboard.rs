//! The live dashboard on the admin listener, in a real browser: Debian's chromium, headless,
//! driven through chromedriver (the W3C WebDriver protocol over plain HTTP), loads the page
//! from a `hotpath serve` process under load and reads what a person would see: the figures
//! are filled in and move from one second to the next. A screenshot is left at
//! `target/dashboard.png` for a person to look at. scripts/test installs chromium and
//! chromium-driver when they are missing.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::browser::Browser;
use common::{announce, announce_target, wait_until, Client, Proc};
use hotpath_wire::query::Event;

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
