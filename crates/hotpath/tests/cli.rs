//! The `hotpath` binary's command line, run as a user would.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A spawned hotpath that is killed if the test ends (or panics) while it still runs.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// The binary, run from a scratch directory of its own (its default data/ lands there, and
/// two servers may not share one).
fn hotpath() -> Command {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("hotpath-cli-{}-work{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut c = Command::new(env!("CARGO_BIN_EXE_hotpath"));
    c.current_dir(dir);
    c
}

fn temp(name: &str, text: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("hotpath-cli-{}-{name}", std::process::id()));
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn config_prints_commented_defaults_that_parse_back() {
    let out = hotpath().arg("config").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("[tracker]") && text.contains("# Peers returned when"));
    let parsed = hotpath_config::Config::parse(&text).unwrap();
    assert_eq!(parsed, hotpath_config::Config::default());
    let file = temp("defaults.toml", &text);
    let check = hotpath()
        .args(["config", "--check"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(check.status.success());
    std::fs::remove_file(file).unwrap();
}

#[test]
fn bad_config_names_the_key_and_exits_non_zero() {
    for (text, key) in [
        (
            "[tracker]\nnumwant_max = 0\nnumwant_default = 5\n",
            "tracker.numwant_default",
        ),
        ("[server]\nwrokers = 2\n", "wrokers"),
        ("[listen]\nudp = [\"not an address\"]\n", "listen.udp"),
    ] {
        let file = temp("bad.toml", text);
        let out = hotpath()
            .args(["serve", "--config"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{text}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(key), "{text}: {err}");
        std::fs::remove_file(file).unwrap();
    }
}

#[test]
fn serve_stops_cleanly_on_sigterm() {
    let file = temp(
        "serve.toml",
        "[listen]\nhttp = [\"127.0.0.1:0\"]\nudp = [\"127.0.0.1:0\"]\nadmin = []\nipv6 = false\n",
    );
    let mut child = Reaped(
        hotpath()
            .args(["serve", "--config"])
            .arg(&file)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let child = &mut child.0;
    // Stopped once it serves (its log says where), not after a guessed time.
    let (_addr, reader) = http_address(child);
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "hotpath did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    reader.join().unwrap();
    std::fs::remove_file(file).unwrap();
}

/// Reads the child's log until it says it is listening over HTTP; returns that address.
fn http_address(child: &mut Child) -> (String, std::thread::JoinHandle<()>) {
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(rest) = line.split("listening on ").nth(1) {
                if rest.ends_with("(HTTP)") {
                    let _ = tx.send(rest.trim_end_matches(" (HTTP)").to_string());
                }
            }
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("hotpath logged its HTTP address");
    (addr, reader)
}

fn announce_failure(addr: &str, hash_hex: &str) -> Option<String> {
    let mut s = TcpStream::connect(addr).unwrap();
    let hash: String = (0..20)
        .map(|i| format!("%{}", &hash_hex[2 * i..2 * i + 2]))
        .collect();
    write!(
        s,
        "GET /announce?info_hash={hash}&peer_id=-HP0001-000000000000&port=7000 HTTP/1.0\r\n\r\n"
    )
    .unwrap();
    let mut body = Vec::new();
    s.read_to_end(&mut body).unwrap();
    let text = String::from_utf8_lossy(&body).into_owned();
    text.contains("failure reason").then_some(text)
}

#[test]
fn sighup_reloads_the_access_list() {
    let allowed = "aa".repeat(20);
    let later = "bb".repeat(20);
    let list = temp("access.txt", &format!("{allowed}\n"));
    let config = temp(
        "hup.toml",
        &format!(
            "[listen]\nhttp = [\"127.0.0.1:0\"]\nudp = []\nadmin = []\nipv6 = false\n[access_list]\nmode = \"allow\"\npath = \"{}\"\n",
            list.display()
        ),
    );
    let mut child = hotpath()
        .args(["serve", "--config"])
        .arg(&config)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (addr, _reader) = http_address(&mut child);
    assert_eq!(announce_failure(&addr, &allowed), None);
    assert!(announce_failure(&addr, &later).is_some());
    std::fs::write(&list, format!("{allowed}\n{later}\n")).unwrap();
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .unwrap()
        .success());
    let deadline = Instant::now() + Duration::from_secs(10);
    while announce_failure(&addr, &later).is_some() {
        assert!(
            Instant::now() < deadline,
            "SIGHUP did not reload the access list"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    std::fs::remove_file(list).unwrap();
    std::fs::remove_file(config).unwrap();
}

#[test]
fn db_migrate_and_status_on_the_default_sqlite_file() {
    let dir = std::env::temp_dir().join(format!("hotpath-cli-{}-db", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let config = temp(
        "db.toml",
        &format!("[store]\ndata_dir = \"{}\"\n", dir.display()),
    );
    let run = |args: &[&str]| {
        let out = hotpath()
            .args(args)
            .arg("--config")
            .arg(&config)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, text) = run(&["db", "status"]);
    assert_eq!(code, Some(1), "pending migrations: {text}");
    assert!(text.contains("PENDING"), "{text}");
    assert!(
        !dir.join("hotpath.db").exists(),
        "db status only reads: {text}"
    );
    let (code, text) = run(&["db", "migrate"]);
    assert_eq!(code, Some(0));
    assert!(
        text.contains("applied 1 (torrents and journal positions)"),
        "{text}"
    );
    assert!(text.contains("applied 2 (access list)"), "{text}");
    let (code, text) = run(&["db", "migrate"]);
    assert_eq!(code, Some(0));
    assert!(text.contains("schema is current"), "{text}");
    let (code, text) = run(&["db", "status"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        !text.contains("PENDING") && text.contains("journal"),
        "{text}"
    );
    assert!(dir.join("hotpath.db").exists());
    std::fs::remove_dir_all(dir).unwrap();
}
