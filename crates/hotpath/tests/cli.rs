//! The `hotpath` binary's command line, run as a user would.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn hotpath() -> Command {
    Command::new(env!("CARGO_BIN_EXE_hotpath"))
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
    let mut child = hotpath()
        .args(["serve", "--config"])
        .arg(&file)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
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
    std::fs::remove_file(file).unwrap();
}
