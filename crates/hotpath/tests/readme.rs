//! README's examples as a reader would use them: every shell block run as written (or skipped
//! for a reason README gives beside it), every TOML block a config (or part of one) that
//! hotpath takes as it stands, and the Lua route example, written beside its config as README
//! says, answering as README shows.

mod common;

use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{data_dir, start, Client};
use hotpath_config::Config;

const README: &str = include_str!("../../../README.md");

/// The fenced blocks of `lang` in README, in order.
fn blocks(lang: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    for line in README.lines() {
        match (&mut current, line.trim_start()) {
            (None, l) if l == format!("```{lang}") => current = Some(String::new()),
            (Some(text), "```") => {
                out.push(std::mem::take(text));
                current = None;
            }
            (Some(text), _) => {
                text.push_str(line);
                text.push('\n');
            }
            (None, _) => {}
        }
    }
    out
}

#[test]
fn every_toml_example_is_a_config_hotpath_takes() {
    let tomls = blocks("toml");
    assert!(tomls.len() >= 3, "README's TOML examples: {}", tomls.len());
    for text in &tomls {
        if let Err(e) = Config::parse(text) {
            panic!("README's example does not parse:\n{text}\n{e}");
        }
    }
}

#[test]
fn the_lua_route_example_answers_as_shown() {
    let route = blocks("toml")
        .into_iter()
        .find(|t| t.contains("[[lua.routes]]"))
        .expect("README shows a Lua route");
    let script = blocks("lua")
        .into_iter()
        .find(|t| t.contains("function handle"))
        .expect("README shows a script");
    let dir = data_dir();
    std::fs::write(dir.join("echo.lua"), script).unwrap();
    let mut c = Config::parse(&route).unwrap();
    c.resolve_paths(&dir);
    let t = common::test_config();
    c.listen = t.listen;
    c.store.enabled = false;
    c.store.data_dir = t.store.data_dir;
    let server = start(&c);
    let mut http = Client::connect(server.http_addr().unwrap());
    let r = http.get("/echo");
    assert_eq!(r.status, 200);
    assert_eq!(String::from_utf8_lossy(&r.body), "GET /echo\n");
    assert!(r.head.contains("Content-Type: text/plain"), "{}", r.head);
    // The methods the example names, and no other.
    let r = http.request("PUT", "/echo", None, "");
    assert_eq!(r.status, 405);
    server.shutdown().unwrap();
}

/// How README marks a shell block, on the line before its fence.
#[derive(Debug)]
enum Mark {
    /// Run it; it must exit 0 and print what its `#>` lines show.
    Run,
    /// A server: started in the background (stopping the one before it), ready when these
    /// addresses take connections.
    Serve(Vec<SocketAddr>),
    /// Not run, for the reason given.
    Skip,
}

/// README's shell blocks with their marks, in order.
fn shell_blocks() -> Vec<(Mark, String)> {
    let mut out = Vec::new();
    let lines: Vec<&str> = README.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim_start() != "```sh" {
            i += 1;
            continue;
        }
        let mark_line = if i > 0 { lines[i - 1].trim() } else { "" };
        let mark = mark_line
            .strip_prefix("<!-- test: ")
            .and_then(|m| m.strip_suffix(" -->"))
            .unwrap_or_else(|| {
                panic!(
                    "README line {}: a shell block needs `<!-- test: run | serve ADDR... | skip: REASON -->` on the line before it",
                    i + 1
                )
            });
        let mark = if mark == "run" {
            Mark::Run
        } else if let Some(addrs) = mark.strip_prefix("serve ") {
            Mark::Serve(
                addrs
                    .split_whitespace()
                    .map(|a| a.parse().expect("serve ADDR:PORT"))
                    .collect(),
            )
        } else if mark.strip_prefix("skip: ").is_some_and(|r| r.len() >= 10) {
            Mark::Skip
        } else {
            panic!("README line {i}: unknown mark {mark:?} (a skip needs its reason)");
        };
        let mut text = String::new();
        i += 1;
        while lines[i].trim_start() != "```" {
            text.push_str(lines[i]);
            text.push('\n');
            i += 1;
        }
        out.push((mark, text));
        i += 1;
    }
    out
}

/// The block as the test runs it: `cargo run --release -p hotpath --` is the tests' own build
/// of hotpath (on PATH as `hotpath`); an `apt-get install` checks that its packages are there
/// (scripts/test installed them) rather than installing; a `hotpath bench` runs for a second
/// after half a second of warm-up, whatever duration it names.
fn as_tested(block: &str) -> String {
    let mut out = String::new();
    for line in block.lines() {
        let line = line.replace("cargo run --release -p hotpath --", "hotpath");
        let line = if let Some(rest) = line.strip_prefix("apt-get install ") {
            let packages = rest.split('#').next().unwrap().trim();
            format!("dpkg -s {packages} >/dev/null")
        } else if let Some(rest) = line.strip_prefix("hotpath bench ") {
            let mut words: Vec<&str> = rest.split(' ').collect();
            if let Some(at) = words.iter().position(|w| *w == "-d") {
                words.drain(at..at + 2);
            }
            format!("hotpath bench -d 1s -w 500ms {}", words.join(" "))
        } else {
            line
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// Whether `got` holds each of `want`'s lines in order, `…` in one standing for any text.
fn shows(got: &str, want: &[&str]) -> Result<(), String> {
    let mut rest = got;
    for w in want {
        let parts: Vec<&str> = w.split('…').collect();
        let found = rest.lines().enumerate().find_map(|(n, line)| {
            let mut at = 0;
            for (k, p) in parts.iter().enumerate() {
                let hit = if k == 0 {
                    line.starts_with(p).then_some(0)
                } else {
                    line[at..].find(p).map(|x| at + x)
                };
                at = hit? + p.len();
            }
            (parts.len() > 1 || at == line.len()).then_some(n)
        });
        match found {
            Some(n) => {
                let skip: usize = rest.lines().take(n + 1).map(|l| l.len() + 1).sum();
                rest = &rest[skip.min(rest.len())..];
            }
            None => return Err(format!("no line {w:?} (in order) in:\n{got}")),
        }
    }
    Ok(())
}

/// Waits up to `within` for `child`; kills its process group (what it left running in the
/// background too) either way.
fn finish(child: &mut Child, within: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + within;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    signal_group(child, "KILL");
    let _ = child.wait();
    status
}

/// Stops a server as Ctrl-C would (SIGTERM to its group), and waits until its addresses are
/// free: a new server beside a dying one would bind them too (`SO_REUSEPORT`), and a check
/// for the new one's ports would be answered by the old one's.
fn stop(mut server: Server) {
    let mut child = server.child.take().expect("a running server");
    signal_group(&child, "TERM");
    common::wait_until(
        "the server to let go of its ports",
        Duration::from_secs(60),
        || server.addrs.iter().all(|a| TcpStream::connect(a).is_err()),
    );
    finish(&mut child, Duration::from_secs(10));
}

/// A server a serve block started, with the addresses it serves; its process group is killed
/// if the test ends (or fails) while it runs.
struct Server {
    child: Option<Child>,
    addrs: Vec<SocketAddr>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            finish(&mut child, Duration::ZERO);
        }
    }
}

fn signal_group(child: &Child, signal: &str) {
    common::send_signal(&format!("-{signal}"), &format!("-{}", child.id()));
}

/// Every shell block of README, run in order as a reader would run them in a fresh directory
/// beside the repository's files, inside a network namespace of its own (README's fixed
/// ports are free there, and nothing else meets them): servers started, real clients moving
/// files through the tracker, popups created, shown and clicked, Lua routes answering, the
/// load generator against the server README starts for it.
#[test]
fn readme_shell_examples_run_as_written() {
    const NAME: &str = "readme_shell_examples_run_as_written";
    if common::netns::outside(NAME, &[]) {
        return;
    }
    let blocks = shell_blocks();
    assert!(
        blocks.len() >= 10,
        "README's shell blocks: {}",
        blocks.len()
    );
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap();
    let dir = data_dir();
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(dir.join("home")).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_hotpath"), bin.join("hotpath")).unwrap();
    for entry in std::fs::read_dir(&repo).unwrap() {
        let name = entry.unwrap().file_name();
        let n = name.to_str().unwrap();
        if !n.starts_with('.') && n != "target" && n != "data" {
            std::os::unix::fs::symlink(repo.join(n), dir.join(n)).unwrap();
        }
    }
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut server: Option<Server> = None;
    let mut ran = 0;
    for (n, (mark, text)) in blocks.iter().enumerate() {
        if let Mark::Skip = mark {
            continue;
        }
        let script = dir.join(format!("block{n}.sh"));
        std::fs::write(&script, as_tested(text)).unwrap();
        let (out, err) = (
            dir.join(format!("block{n}.out")),
            dir.join(format!("block{n}.err")),
        );
        let spawn = || {
            Command::new("bash")
                // -x: a failure's message shows each command as it ran.
                .args(["-xeuo", "pipefail"])
                .arg(&script)
                .current_dir(&dir)
                .env("PATH", &path)
                .env("HOME", dir.join("home"))
                .env_remove("RUST_LOG")
                .stdin(Stdio::null())
                .stdout(std::fs::File::create(&out).unwrap())
                .stderr(std::fs::File::create(&err).unwrap())
                .process_group(0)
                .spawn()
                .unwrap()
        };
        let said = |what: &str| {
            format!(
                "README's block {n}: {what}\n{text}\n-- stdout:\n{}\n-- stderr:\n{}",
                std::fs::read_to_string(&out).unwrap_or_default(),
                std::fs::read_to_string(&err).unwrap_or_default()
            )
        };
        match mark {
            Mark::Skip => unreachable!("skipped above"),
            Mark::Serve(addrs) => {
                if let Some(old) = server.take() {
                    stop(old);
                }
                let started = server.insert(Server {
                    child: Some(spawn()),
                    addrs: addrs.clone(),
                });
                let deadline = Instant::now() + Duration::from_secs(60);
                while !addrs.iter().all(|a| TcpStream::connect(a).is_ok()) {
                    let child = started.child.as_mut().expect("running");
                    if let Some(status) = child.try_wait().unwrap() {
                        panic!("{}", said(&format!("the server ended: {status}")));
                    }
                    assert!(Instant::now() < deadline, "{}", said("not up in 60 s"));
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            Mark::Run => {
                let mut child = spawn();
                match finish(&mut child, Duration::from_secs(300)) {
                    Some(s) if s.success() => {}
                    Some(s) => panic!("{}", said(&format!("exit {s}"))),
                    None => panic!("{}", said("still running after 300 s")),
                }
                let want: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("#> ")).collect();
                let got = std::fs::read_to_string(&out).unwrap();
                if let Err(e) = shows(&got, &want) {
                    panic!("{}", said(&e));
                }
            }
        }
        ran += 1;
    }
    if let Some(old) = server.take() {
        stop(old);
    }
    assert!(ran >= 8, "{ran} blocks ran");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_output_check_wants_each_line_in_order_with_ellipses_for_what_varies() {
    let got = "{\"id\":1,\"token\":\"6b0c.3a\"}\n{\"accepted\":true}\n";
    assert!(shows(got, &["{\"id\":1,\"token\":\"…\"}", "{\"accepted\":true}"]).is_ok());
    assert!(
        shows(got, &["{\"accepted\":true}", "{\"id\":1…"]).is_err(),
        "order"
    );
    assert!(shows(got, &["{\"accepted\":false}"]).is_err());
    assert!(shows(got, &["{\"accepted\":true"]).is_err(), "a whole line");
    assert!(shows("GET /echo?name=hp\n", &["GET /echo?name=hp"]).is_ok());
    assert!(shows("", &["x"]).is_err());
    let tested = as_tested(
        "apt-get install aria2 curl   # as root\nhotpath bench udp://x -c 5 -d 10s\ncargo run --release -p hotpath -- serve\n",
    );
    assert_eq!(
        tested,
        "dpkg -s aria2 curl >/dev/null\nhotpath bench -d 1s -w 500ms udp://x -c 5\nhotpath serve\n"
    );
}
