//! Debian's Chromium, headless, driven through chromedriver (the W3C WebDriver protocol
//! over plain HTTP). scripts/test installs chromium and chromium-driver when they are missing.

use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{wait_until, Client};

/// A chromedriver process and one browser session in it; both end when this is dropped.
pub struct Browser {
    driver: Child,
    addr: SocketAddr,
    session: String,
    profile: std::path::PathBuf,
}

impl Browser {
    /// A headless Chromium with its profile in `profile`.
    pub fn start(profile: std::path::PathBuf) -> Browser {
        Browser::start_with(profile, &[])
    }

    /// A headless Chromium with its profile in `profile` and `extra` flags.
    pub fn start_with(profile: std::path::PathBuf, extra: &[&str]) -> Browser {
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
        let mut args = vec![
            "--headless=new".to_string(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-dev-shm-usage".into(),
            "--window-size=1280,1400".into(),
            "--hide-scrollbars".into(),
            format!("--user-data-dir={}", browser.profile.display()),
        ];
        args.extend(extra.iter().map(|a| a.to_string()));
        let mut chrome = json!({ "args": args });
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
    pub fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
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

    pub fn session_path(&self, rest: &str) -> String {
        format!("/session/{}{rest}", self.session)
    }

    pub fn open(&self, url: &str) {
        self.call(
            "POST",
            &self.session_path("/url"),
            Some(json!({ "url": url })),
        );
    }

    /// Runs `script` in the page and returns what it returns.
    pub fn eval(&self, script: &str) -> Value {
        self.call(
            "POST",
            &self.session_path("/execute/sync"),
            Some(json!({"script": script, "args": []})),
        )
    }

    pub fn screenshot(&self) -> Vec<u8> {
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
