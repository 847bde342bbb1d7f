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
        ("[server]\nudp_io = \"uring\"\n", "server.udp_io"),
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

/// Regression: a config, script or access list path that named `/dev/zero` was read without
/// end (5.8 GB in 20 s), and one that named a FIFO hung the start. Each is refused at once,
/// naming the file, and the server does not start; an oversized config file too.
#[test]
fn files_that_are_not_regular_or_too_large_are_refused_at_once() {
    let fifo = std::env::temp_dir().join(format!("hotpath-cli-{}-fifo", std::process::id()));
    let _ = std::fs::remove_file(&fifo);
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let big = temp("big.toml", &"# padding\n".repeat(200_000));
    let script = |path: &std::path::Path| {
        format!(
            "[[lua.routes]]\npath = \"/x\"\nscript = {:?}\n",
            path.display().to_string()
        )
    };
    let access = |path: &std::path::Path| {
        format!(
            "[access_list]\nmode = \"allow\"\npath = {:?}\n",
            path.display().to_string()
        )
    };
    let zero = std::path::Path::new("/dev/zero");
    let mut cases = vec![
        (fifo.clone(), "not a regular file".to_string()),
        (zero.to_path_buf(), "not a regular file".to_string()),
        (big.clone(), "larger than the 1048576 bytes".to_string()),
    ];
    for (i, text) in [script(zero), script(&fifo), access(zero), access(&fifo)]
        .into_iter()
        .enumerate()
    {
        let text = format!("[listen]\nhttp = [\"127.0.0.1:0\"]\nudp = []\nadmin = []\n{text}");
        cases.push((
            temp(&format!("names{i}.toml"), &text),
            "not a regular file".into(),
        ));
    }
    for (config, why) in cases {
        let out = hotpath()
            .args(["serve", "--config"])
            .arg(&config)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{config:?}: {err}");
        assert!(err.contains(&why), "{config:?}: {err}");
    }
    std::fs::remove_file(fifo).unwrap();
    std::fs::remove_file(big).unwrap();
}

/// A config with mistakes of every kind, beside the scripts it names (by paths relative to
/// itself): `config --check` and `serve` report all of them at once, each at its line and
/// column, and `serve` creates nothing before it refuses.
#[test]
fn every_config_error_is_reported_at_once_with_its_place_and_nothing_is_created() {
    let dir = std::env::temp_dir().join(format!("hotpath-cli-{}-errors", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("lua")).unwrap();
    std::fs::write(
        dir.join("lua/good.lua"),
        "function handle(req)\n  return 200, nil, \"ok\"\nend\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("lua/broken.lua"),
        "function handle(req)\n  return 200 nil\nend\n",
    )
    .unwrap();
    std::fs::write(dir.join("lua/nohandle.lua"), "x = 1\n").unwrap();
    let data = dir.join("data");
    let config = dir.join("hotpath.toml");
    let text = format!(
        "[server]\nworkerz = 2\nbacklog = 0\n\n[tracker]\ninterval_secs = 10\nmin_interval_secs = 20\n\n\
         [listen]\nhttp = [\"127.0.0.1:0\",\n  \"nonsense\"]\n\n\
         [[lua.routes]]\npath = \"/good\"\nscript = \"lua/good.lua\"\n\n\
         [[lua.routes]]\npath = \"/broken\"\nscript = \"lua/broken.lua\"\n\n\
         [[lua.routes]]\npath = \"/missing\"\nscript = \"lua/missing.lua\"\n\n\
         [[lua.routes]]\npath = \"/nohandle\"\nscript = \"lua/nohandle.lua\"\n\n\
         [store]\ndata_dir = \"{}\"\n",
        data.display()
    );
    std::fs::write(&config, &text).unwrap();
    let file = config.display().to_string();
    let check = || {
        hotpath()
            .args(["config", "--check"])
            .arg(&config)
            .output()
            .unwrap()
    };
    // From another working directory: the scripts are found beside the config.
    for args in [["config", "--check"], ["serve", "--config"]] {
        let out = hotpath().args(args).arg(&config).output().unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        let expected = [
            (2, 1, "config key `server.workerz`: unknown field `workerz`"),
            (
                3,
                11,
                "config key `server.backlog`: must be between 1 and 1048576",
            ),
            (
                7,
                21,
                "config key `tracker.min_interval_secs`: must not exceed",
            ),
            (
                11,
                3,
                "config key `listen.http[1]`: invalid socket address syntax",
            ),
            (19, 10, "config key `lua.routes[1].script`"),
            (23, 10, "config key `lua.routes[2].script`"),
            (27, 10, "config key `lua.routes[3].script`"),
        ];
        let mut at = 0;
        for (line, column, what) in expected {
            let needle = format!("{file}:{line}:{column}: {what}");
            let found = err[at..]
                .find(&needle)
                .unwrap_or_else(|| panic!("{args:?}: no {needle:?}, in order, in:\n{err}"));
            at += found + needle.len();
        }
        assert!(err.contains("'end' expected"), "{err}");
        assert!(
            err.contains("missing.lua: cannot read: No such file or directory"),
            "{err}"
        );
        assert!(err.contains("defines no function handle"), "{err}");
        assert!(err.contains("7 errors"), "{err}");
        assert!(
            !err.contains("good.lua"),
            "a good script is no error: {err}"
        );
        // Each said once: no cause repeated after its own message.
        assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
        assert!(!data.exists(), "{args:?} created {}", data.display());
    }

    // Fixed, it passes, and says what it checked.
    let fixed = text
        .replace("workerz = 2\n", "")
        .replace("backlog = 0\n", "")
        .replace("min_interval_secs = 20", "min_interval_secs = 5")
        .replace(",\n  \"nonsense\"]", "]")
        .replace("lua/broken.lua", "lua/good.lua")
        .replace("lua/missing.lua", "lua/good.lua")
        .replace("lua/nohandle.lua", "lua/good.lua");
    std::fs::write(&config, fixed).unwrap();
    let out = check();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.contains(": ok") && said.contains("4 Lua routes compiled"),
        "{said}"
    );
    assert!(!data.exists());

    // Not TOML: the place of the syntax error.
    std::fs::write(&config, "[server]\nworkers = 2\nbacklog = \n").unwrap();
    let out = check();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("{file}:3:")) && err.contains("not TOML"),
        "{err}"
    );
    assert!(
        !err.contains('\n') || err.trim_end().lines().count() == 1,
        "one line: {err}"
    );

    // A missing file is said once.
    let out = hotpath()
        .args(["serve", "--config"])
        .arg(dir.join("nope.toml"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
    assert_eq!(err.matches("nope.toml").count(), 1, "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
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
    // The migrations' lines line up: every "applied" starts in the same column.
    let columns: Vec<usize> = text
        .lines()
        .filter_map(|l| l.find("  applied 20"))
        .collect();
    assert!(columns.len() >= 8, "{text}");
    assert!(columns.iter().all(|&c| c == columns[0]), "{text}");
    assert!(dir.join("hotpath.db").exists());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn output_into_a_closed_pipe_ends_quietly() {
    // The reader is gone before the first byte is written, as with `hotpath config | head`
    // once head has its lines.
    for args in [&["config"][..], &["doctor", "--json"], &["--help"]] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = hotpath()
            .args(args)
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(
            matches!(out.status.code(), Some(0 | 141)),
            "{args:?}: {:?} {stderr}",
            out.status
        );
    }
}

/// `config --check` and `doctor` read the HTTPS listeners' certificate and key as `serve`
/// does: a missing file, garbage, or a key of another certificate is named by its key; a
/// good pair passes and doctor says so.
#[test]
fn config_check_and_doctor_read_the_tls_files() {
    let dir = std::env::temp_dir().join(format!("hotpath-cli-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pair = |name: &str| {
        let c = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        std::fs::write(dir.join(format!("{name}.crt")), c.cert.pem()).unwrap();
        std::fs::write(dir.join(format!("{name}.key")), c.key_pair.serialize_pem()).unwrap();
    };
    pair("a");
    pair("b");
    std::fs::write(dir.join("junk.crt"), "junk").unwrap();
    let config = |cert: &str, key: &str| {
        let text = format!(
            "[listen]\nhttps = [\"127.0.0.1:0\"]\n[tls]\ncert_file = \"{cert}\"\nkey_file = \"{key}\"\n"
        );
        let path = dir.join("hotpath.toml");
        std::fs::write(&path, text).unwrap();
        path
    };
    for (cert, key, named) in [
        ("none.crt", "a.key", "tls.cert_file"),
        ("junk.crt", "a.key", "tls.cert_file"),
        ("a.crt", "b.key", "tls.key_file"),
    ] {
        let out = hotpath()
            .args(["config", "--check"])
            .arg(config(cert, key))
            .output()
            .unwrap();
        assert!(!out.status.success(), "{cert} {key}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(named), "{cert} {key}: {err}");
    }
    let good = config("a.crt", "a.key");
    let out = hotpath()
        .args(["config", "--check"])
        .arg(&good)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = hotpath()
        .args(["doctor", "--config"])
        .arg(&good)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .any(|l| l.contains("tls.cert_file") && l.contains("ok")),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
