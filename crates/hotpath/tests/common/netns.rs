//! A test's body run again inside a network namespace of its own (`unshare --net`, as root or
//! in a user namespace): its loopback is its own, so fixed ports (6969, 9090) are free there
//! and other tests cannot meet them, and it may carry more addresses. Traffic still goes only
//! to loopback, and the namespace goes with the process.

use std::io::Write;
use std::net::Ipv6Addr;
use std::process::{Command, Stdio};

/// The variable that tells a test it runs inside its namespace.
pub const INSIDE: &str = "HOTPATH_TEST_NETNS";

/// Runs the test `name` inside a new network namespace whose loopback also has `addrs`, and
/// returns false there (the caller goes on with its body); outside, returns true once the
/// inner run passed (the caller returns). Panics when the namespace cannot be made: the
/// test command installs iproute2, and `unshare` is part of every Debian system.
pub fn outside(name: &str, addrs: &[Ipv6Addr]) -> bool {
    if std::env::var(INSIDE).as_deref() == Ok(name) {
        up(addrs);
        return false;
    }
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0");
    let mut cmd = Command::new("unshare");
    if !root {
        cmd.args(["--user", "--map-root-user"]);
    }
    let out = cmd
        .arg("--net")
        .arg("--")
        .arg(std::env::current_exe().unwrap())
        .args([name, "--exact", "--nocapture", "--test-threads", "1"])
        .env(INSIDE, name)
        .stdin(Stdio::null())
        .output()
        .expect("unshare runs (util-linux)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "inside the namespace:\n{text}");
    assert!(
        text.contains("1 passed"),
        "the test did not run inside:\n{text}"
    );
    true
}

/// Inside: loopback up, with `addrs` on it.
fn up(addrs: &[Ipv6Addr]) {
    let ip = |args: &[&str], input: Option<String>| {
        let mut c = Command::new("ip")
            .args(args)
            .stdin(Stdio::piped())
            .spawn()
            .expect("ip runs (iproute2)");
        if let Some(text) = input {
            c.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
        }
        drop(c.stdin.take());
        assert!(c.wait().unwrap().success(), "ip {args:?}");
    };
    ip(&["link", "set", "lo", "up"], None);
    let batch: String = addrs
        .iter()
        .map(|a| format!("addr add {a}/128 dev lo nodad\n"))
        .collect();
    ip(&["-6", "-batch", "-"], Some(batch));
}
