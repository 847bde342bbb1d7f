//! The log as an operator meets it, from the binary: levels from `--log-level`, RUST_LOG and
//! `log.level` in that order, per module; JSON lines; the access log in a file of its own,
//! opened again on SIGUSR1 and SIGHUP after logrotate moved it; a flood of log lines a
//! client can cause held to its limit, what was left out counted; and SIGHUP reading the config
//! again, its log saying what took effect and what waits for a restart.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod common;

use common::{wait_until, Client};

/// A server from the binary, its standard error kept line by line.
struct Server {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    reader: Option<std::thread::JoinHandle<()>>,
    dir: PathBuf,
}

impl Server {
    /// Starts `hotpath serve` on `config` (written to a fresh directory, also its working
    /// directory), with `args` and `env`; waits until its log says its workers started.
    fn start(config: &str, args: &[&str], env: &[(&str, &str)]) -> Server {
        let dir = common::data_dir();
        std::fs::write(dir.join("hotpath.toml"), config).unwrap();
        Server::start_in(dir, args, env)
    }

    fn start_in(dir: PathBuf, args: &[&str], env: &[(&str, &str)]) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_hotpath"));
        cmd.args(["serve", "--config", "hotpath.toml"])
            .args(args)
            .current_dir(&dir)
            .env_remove("RUST_LOG")
            .env_remove("JOURNAL_STREAM")
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("hotpath starts");
        let stderr = child.stderr.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let keep = lines.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                keep.lock().unwrap().push(line);
            }
        });
        let s = Server {
            child,
            lines,
            reader: Some(reader),
            dir,
        };
        wait_until("the workers to start", Duration::from_secs(30), || {
            s.text().contains("workers started")
        });
        s
    }

    fn text(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    /// The address of the listener of `kind` ("HTTP", "admin") its log names.
    fn addr(&self, kind: &str) -> SocketAddr {
        let suffix = format!(" ({kind})");
        self.text()
            .lines()
            .find_map(|l| {
                // A text line, or a JSON one's message.
                let json: Option<serde_json::Value> = serde_json::from_str(l).ok();
                let msg = json.as_ref().and_then(|v| v["msg"].as_str()).unwrap_or(l);
                msg.split("listening on ")
                    .nth(1)?
                    .strip_suffix(&suffix)?
                    .parse()
                    .ok()
            })
            .unwrap_or_else(|| panic!("no {kind} listener in\n{}", self.text()))
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig}");
    }

    /// SIGTERM, and its whole log once it has exited.
    fn stop(mut self) -> String {
        self.signal("-TERM");
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{status}\n{}", self.text());
        // The reader has the last lines once the pipe closes.
        self.reader.take().unwrap().join().unwrap();
        let text = self.text();
        let _ = std::fs::remove_dir_all(&self.dir);
        text
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

const LISTEN: &str =
    "[listen]\nhttp = [\"127.0.0.1:0\"]\nudp = []\nadmin = [\"127.0.0.1:0\"]\nipv6 = false\n";

#[test]
fn the_level_comes_from_the_flag_then_rust_log_then_the_config_per_module() {
    // hotpath_server's "listening on" is INFO, and so is the start's "store: …" of hotpath.
    let config = format!("{LISTEN}[log]\nlevel = \"warn,hotpath_server=info\"\n");
    let shows_store = |args: &[&str], env: &[(&str, &str)]| {
        let text = Server::start(&config, args, env).stop();
        assert!(text.contains("listening on"), "{text}");
        text.lines().any(|l| l.contains("] store: "))
    };
    assert!(
        !shows_store(&[], &[]),
        "log.level leaves hotpath's INFO out"
    );
    assert!(shows_store(&[], &[("RUST_LOG", "info")]), "RUST_LOG wins");
    assert!(
        !shows_store(
            &["--log-level", "warn,hotpath_server=info"],
            &[("RUST_LOG", "info")]
        ),
        "--log-level wins over both"
    );

    // A level that is none is refused on the command line as in the config.
    let out = Command::new(env!("CARGO_BIN_EXE_hotpath"))
        .args(["serve", "--log-level", "loud"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--log-level") && err.contains("\"loud\""),
        "{err}"
    );
}

/// Every line of `text` as JSON.
fn json_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect()
}

#[test]
fn json_lines_and_an_access_log_file_that_logrotate_can_move() {
    let config = format!("{LISTEN}[log]\nformat = \"json\"\naccess_log = \"logs/access.log\"\n");
    let dir = common::data_dir();
    std::fs::write(dir.join("hotpath.toml"), &config).unwrap();
    // The access log's directory must be there: config --check says so by its key.
    let out = Command::new(env!("CARGO_BIN_EXE_hotpath"))
        .args(["config", "--check", "hotpath.toml"])
        .current_dir(&dir)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("log.access_log") && err.contains("logs"),
        "{err}"
    );
    std::fs::create_dir(dir.join("logs")).unwrap();

    let server = Server::start_in(dir.clone(), &[], &[]);
    let http = server.addr("HTTP");
    let logs = dir.join("logs");
    let read = |name: &str| std::fs::read_to_string(logs.join(name)).unwrap_or_default();
    let mut c = Client::connect(http);
    assert_eq!(c.get("/healthz?n=1").status, 200);
    wait_until("the access line", Duration::from_secs(10), || {
        read("access.log").contains("n=1")
    });
    let first = json_lines(&read("access.log"));
    assert_eq!(first[0]["request"], "GET /healthz?n=1");
    assert_eq!(first[0]["status"], 200);
    assert_eq!(first[0]["ip"], "127.0.0.1");
    assert!(first[0]["ts"].as_str().unwrap().ends_with('Z'));

    // logrotate: moved away, then SIGUSR1; the next lines go to a new file, none to the old.
    for (n, (moved, signal)) in [("access.log.1", "-USR1"), ("access.log.2", "-HUP")]
        .into_iter()
        .enumerate()
    {
        std::fs::rename(logs.join("access.log"), logs.join(moved)).unwrap();
        server.signal(signal);
        let mark = format!("after={n}");
        wait_until("a new access.log", Duration::from_secs(10), || {
            assert_eq!(c.get(&format!("/healthz?{mark}")).status, 200);
            read("access.log").contains(&mark)
        });
        // Lines written before the file was opened again went on into the moved one.
        assert!(!read(moved).is_empty());
    }
    let text = server.stop();
    // Standard error: JSON objects, one per line, the server's own lines among them.
    let lines = json_lines(&text);
    assert!(lines.iter().any(|v| v["msg"]
        .as_str()
        .is_some_and(|m| m.starts_with("listening on"))
        && v["level"] == "INFO"
        && v["target"] == "hotpath_server"));
    assert!(
        !text.contains("GET /healthz"),
        "access lines go to their file only"
    );
}

fn metric(admin: SocketAddr, name: &str) -> u64 {
    let text = String::from_utf8(Client::connect(admin).get("/metrics").body).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name}"))
}

#[test]
fn a_script_logging_what_clients_send_is_held_to_its_limit_and_counts_the_rest() {
    let dir = common::data_dir();
    std::fs::write(
        dir.join("flood.lua"),
        "function handle(req)\n  if req.query == \"long\" then\n    hp.log(\"warn\", \
         string.rep(\"x\", 10000))\n  else\n    for i = 1, 300 do hp.log(\"warn\", \"hit\", \
         req.query) end\n  end\n  return 200, nil, \"ok\"\nend\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("hotpath.toml"),
        format!("{LISTEN}[store]\nenabled = false\n[[lua.routes]]\npath = \"/flood\"\nscript = \"flood.lua\"\n"),
    )
    .unwrap();
    let server = Server::start_in(dir, &[], &[]);
    let (http, admin) = (server.addr("HTTP"), server.addr("admin"));
    let mut c = Client::connect(http);
    let hits = |s: &Server| s.text().lines().filter(|l| l.contains("] hit ")).count();
    // Requests until a second has passed with lines left out: the next line written says so.
    let mut sent = 0;
    wait_until(
        "a line saying what was left out",
        Duration::from_secs(30),
        || {
            assert_eq!(c.get(&format!("/flood?{sent}")).status, 200);
            sent += 1;
            std::thread::sleep(Duration::from_millis(100));
            server.text().contains("more like it left out of the log")
        },
    );
    let left_out = metric(admin, "hotpath_log_lines_suppressed_total");
    let written = hits(&server);
    // 300 lines a request against 100 a second: most were left out, every one counted.
    assert!(left_out > 0);
    assert_eq!(written as u64 + left_out, 300 * sent, "{written} written");
    // A line is cut at 4 KiB, whatever the script hands it (in the next second, so written).
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(c.get("/flood?long").status, 200);
    wait_until("the long line", Duration::from_secs(10), || {
        server.text().contains("… (5904 more bytes)")
    });
    assert!(server.text().lines().all(|l| l.len() < 4300));
    server.stop();
}

/// The interval a fresh client is told, or its failure reason.
fn announce_answer(http: SocketAddr, peer: u8, port: u16) -> Result<i64, String> {
    let a = common::announce(
        [7; 20],
        peer,
        port,
        100,
        hotpath_wire::query::Event::Started,
    );
    let body = Client::connect(http).get(&common::announce_target(&a)).body;
    match common::failure(&body) {
        Some(reason) => Err(reason),
        None => Ok(common::int(&body, "interval")),
    }
}

#[test]
fn sighup_applies_what_can_change_in_place_names_what_needs_a_restart_and_keeps_a_broken_file_out()
{
    let config = |interval: u32, per_ip: u32, workers: u32| {
        // The server's idle timeout moves with the interval: it applies, the workers wait.
        let idle = interval / 10;
        format!(
            "{LISTEN}[server]\nworkers = {workers}\nidle_timeout_secs = {idle}\n[tracker]\n\
             interval_secs = {interval}\n\
             min_interval_secs = 60\ninterval_jitter_percent = 0\nmax_peers_per_ip = {per_ip}\n"
        )
    };
    let server = Server::start(&config(1800, 64, 2), &[], &[]);
    let http = server.addr("HTTP");
    assert_eq!(announce_answer(http, 1, 7001), Ok(1800));
    assert_eq!(announce_answer(http, 2, 7002), Ok(1800));

    // Intervals and a cap applied from the next announce on; workers wait for a restart.
    let file = server.dir.join("hotpath.toml");
    std::fs::write(&file, config(1200, 2, 3)).unwrap();
    server.signal("-HUP");
    wait_until("the reload's line", Duration::from_secs(10), || {
        server.text().contains("SIGHUP: hotpath.toml: applied")
    });
    let text = server.text();
    let line = text
        .lines()
        .find(|l| l.contains("SIGHUP: hotpath.toml: applied"))
        .unwrap();
    assert!(
        line.ends_with(
            "applied: server.idle_timeout_secs, tracker.interval_secs, \
             tracker.max_peers_per_ip; need a restart (their running values stay until then): \
             server.workers"
        ),
        "{line}"
    );
    assert_eq!(announce_answer(http, 1, 7001), Ok(1200));
    // Two peers of 127.0.0.1 are in the torrent: a third is past the new cap.
    let third = announce_answer(http, 3, 7003).unwrap_err();
    assert!(
        third.contains("too many peers from your address"),
        "{third}"
    );

    // A file with an error changes nothing, and says why.
    std::fs::write(
        &file,
        config(600, 64, 2).replace("interval_secs = 600", "interval_secs = \"x\""),
    )
    .unwrap();
    server.signal("-HUP");
    wait_until("the refusal", Duration::from_secs(10), || {
        server.text().contains("has errors, no setting changed")
    });
    assert!(server.text().contains("tracker.interval_secs"));
    assert_eq!(announce_answer(http, 1, 7001), Ok(1200));

    // The restart's key is still reported as such; an unchanged file says so.
    std::fs::write(&file, config(1200, 2, 2)).unwrap();
    server.signal("-HUP");
    wait_until("no change", Duration::from_secs(10), || {
        server
            .text()
            .contains("SIGHUP: hotpath.toml: no setting changed")
    });
    server.stop();
}

#[test]
fn under_systemd_it_says_ready_with_its_pid_and_stopping() {
    let dir = common::data_dir();
    let path = dir.join("notify.sock");
    let sock = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let server = Server::start(LISTEN, &[], &[("NOTIFY_SOCKET", path.to_str().unwrap())]);
    let mut buf = [0u8; 256];
    let n = sock.recv(&mut buf).expect("READY=1");
    assert_eq!(
        std::str::from_utf8(&buf[..n]).unwrap(),
        format!("READY=1\nMAINPID={}", server.child.id())
    );
    server.stop();
    let n = sock.recv(&mut buf).expect("STOPPING=1");
    assert_eq!(&buf[..n], b"STOPPING=1");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sighup_rotates_the_admin_apis_secrets_in_place() {
    let config = |popups: &str, private: &str| {
        format!(
            "{LISTEN}[tracker]\nmode = \"private\"\n[private]\nadmin_token = \"{private}\"\n\
             [popups]\nenabled = true\nadmin_token = \"{popups}\"\n"
        )
    };
    let (p1, p2) = ("popups token number one", "popups token number two");
    let (t1, t2) = ("tracker token number one", "tracker token number two");
    let server = Server::start(&config(p1, t1), &[], &[]);
    let admin = server.addr("admin");
    let status = |path: &str, token: &str| {
        Client::connect(admin)
            .request("GET", path, Some(token), "")
            .status
    };
    assert_eq!(status("/admin/popups", p1), 200);
    assert_eq!(status("/admin/tracker", t1), 200);

    std::fs::write(server.dir.join("hotpath.toml"), config(p2, t2)).unwrap();
    server.signal("-HUP");
    wait_until("the reload's line", Duration::from_secs(10), || {
        server.text().contains("SIGHUP: hotpath.toml: applied")
    });
    assert!(
        server.text().contains(
            "applied: popups.admin_token, private.admin_token; need a restart (their running \
             values stay until then): none"
        ),
        "{}",
        server.text()
    );
    assert_eq!(status("/admin/popups", p1), 401);
    assert_eq!(status("/admin/popups", p2), 200);
    assert_eq!(status("/admin/tracker", t1), 401);
    assert_eq!(status("/admin/tracker", t2), 200);
    server.stop();
}
