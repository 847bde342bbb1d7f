//! Lua routes end to end, in the server: scripts compiled once per worker, reloads that keep
//! the old scripts when the new ones are broken, runaway loops and memory hogs contained, the
//! shared dictionary across workers, script errors as 500s, broken scripts refused at start.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{data_dir, start, test_config, wait_until, Client};
use hotpath_config::{Config, LuaRoute};
use hotpath_lua::stored::LuaDb;

/// Writes `scripts` (name, source) into a fresh directory; routes them at `/NAME` (a name
/// ending in `/` is a prefix route).
fn config_with(scripts: &[(&str, &str)]) -> (Config, PathBuf) {
    let dir = data_dir();
    let mut c = test_config();
    c.store.enabled = false;
    c.lua.debug_errors = true;
    for (name, source) in scripts {
        let file = dir.join(format!("{}.lua", name.trim_end_matches('/')));
        std::fs::write(&file, source).unwrap();
        c.lua.routes.push(LuaRoute {
            path: format!("/{name}"),
            prefix: name.ends_with('/'),
            methods: Vec::new(),
            script: file.display().to_string(),
        });
    }
    (c, dir)
}

fn metric(admin: std::net::SocketAddr, name: &str) -> f64 {
    let text = String::from_utf8(Client::connect(admin).get("/metrics").body).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no metric {name} in\n{text}"))
}

fn body(r: &common::Resp) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

const ECHO: &str = r#"
local calls = 0
function handle(req)
  calls = calls + 1
  local name = req:arg("name") or "?"
  return 200, { ["Content-Type"] = "text/x-echo", ["X-Calls"] = tostring(calls) },
    req.method .. " " .. req.path .. " " .. name .. " " .. (req:header("x-test") or "-") .. " " .. req.body
end
"#;

#[test]
fn scripts_compile_once_and_answer_with_status_headers_and_body() {
    let (mut c, _dir) = config_with(&[
        ("echo", ECHO),
        (
            "p/",
            "function handle(req) return 201, nil, 'under ' .. req.path end",
        ),
    ]);
    c.lua.routes[0].methods = vec!["GET".into(), "POST".into()];
    let server = start(&c);
    let http = server.http_addr().unwrap();
    let admin = server.admin_addr().unwrap();
    let mut clients: Vec<Client> = (0..4).map(|_| Client::connect(http)).collect();
    for round in 0..50 {
        for cl in clients.iter_mut() {
            let r = cl.get(&format!("/echo?name=a%20b&round={round}"));
            assert_eq!(r.status, 200);
            assert!(body(&r).starts_with("GET /echo a b - "), "{}", body(&r));
            assert!(
                r.head.contains("Content-Type: text/x-echo\r\n"),
                "{}",
                r.head
            );
            assert_eq!(r.head.matches("Content-Type").count(), 1, "{}", r.head);
        }
    }
    let cl = &mut clients[0];
    cl.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nX-Test: yes\r\nContent-Length: 5\r\n\r\nhello");
    let r = cl.read().unwrap();
    assert_eq!(body(&r), "POST /echo ? yes hello");
    // Prefix routes; exact routes only match exactly; methods outside the list get 405.
    let r = cl.get("/p/a/b");
    assert_eq!((r.status, body(&r).as_str()), (201, "under /p/a/b"));
    assert_eq!(cl.get("/echo/more").status, 404);
    cl.send(b"DELETE /echo HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = cl.read().unwrap();
    assert_eq!(r.status, 405);
    assert!(r.head.contains("Allow: GET, POST\r\n"), "{}", r.head);
    // Two scripts in each of two workers' VMs, compiled when the workers started, and never
    // again for 200 requests; each VM kept its script's state between requests.
    assert_eq!(metric(admin, "hotpath_lua_compiles_total"), 4.0);
    assert!(metric(admin, "hotpath_lua_requests_total") >= 202.0);
    server.shutdown().unwrap();
}

#[test]
fn a_reload_takes_working_scripts_and_keeps_the_old_ones_for_broken_ones() {
    let (c, dir) = config_with(&[("v", "function handle() return 200, nil, 'one' end")]);
    let file = dir.join("v.lua");
    let server = start(&c);
    let admin = server.admin_addr().unwrap();
    let mut cl = Client::connect(server.http_addr().unwrap());
    assert_eq!(body(&cl.get("/v")), "one");
    for broken in [
        "function handle() return 200, nil, 'two' ",
        "local x = 1",
        "error('fails while loading')",
        "while true do end",
    ] {
        std::fs::write(&file, broken).unwrap();
        server.reload();
        for _ in 0..10 {
            assert_eq!(body(&cl.get("/v")), "one", "after reloading {broken:?}");
        }
    }
    assert_eq!(
        metric(admin, "hotpath_lua_reloads_total{result=\"refused\"}"),
        4.0
    );
    std::fs::write(&file, "function handle() return 200, nil, 'two' end").unwrap();
    server.reload();
    assert_eq!(body(&cl.get("/v")), "two");
    assert_eq!(
        metric(admin, "hotpath_lua_reloads_total{result=\"ok\"}"),
        1.0
    );
    // Two at start, then one per worker that served after the reload.
    let compiles = metric(admin, "hotpath_lua_compiles_total");
    assert!((3.0..=4.0).contains(&compiles), "{compiles}");
    server.shutdown().unwrap();
}

#[test]
fn runaway_loops_and_memory_hogs_get_500s_and_the_worker_goes_on() {
    let (mut c, _dir) = config_with(&[
        // Slow in C, few VM instructions: stopped by the work string.rep is charged.
        (
            "spin",
            "function handle() while true do local s = string.rep('x', 100000) end end",
        ),
        // Fast VM instructions: stopped by their count.
        (
            "count",
            "function handle() local n = 0 for i = 1, 1e9 do n = n + i end return 200, nil, tostring(n) end",
        ),
        (
            "hog",
            "function handle() local s, t = string.rep('x', 100000), {} for i = 1, 1e9 do t[i] = s .. i end end",
        ),
        // A loop in a coroutine the script made: the coroutine has the budget too.
        (
            "coloop",
            "function handle() coroutine.wrap(function() local n = 0 while true do n = n + 1 end end)() end",
        ),
        // A budget error caught by pcall comes back at the next check point.
        (
            "swallow",
            "function handle() while true do pcall(function() local n = 0 while true do n = n + 1 end end) end end",
        ),
        ("ok", "function handle() return 200, nil, 'ok' end"),
    ]);
    c.server.workers = 1;
    c.lua.max_ms = 500;
    c.lua.max_instructions = 1_000_000;
    c.lua.max_memory_mb = 16;
    let server = start(&c);
    let admin = server.admin_addr().unwrap();
    let mut cl = Client::connect(server.http_addr().unwrap());
    for (path, said) in [
        ("/spin", "budget exceeded"),
        ("/count", "instruction budget exceeded"),
        ("/coloop", "instruction budget exceeded"),
        ("/swallow", "instruction budget exceeded"),
        ("/hog", "not enough memory"),
    ] {
        for _ in 0..3 {
            let t = Instant::now();
            let r = cl.get(path);
            assert_eq!(r.status, 500, "{path}");
            assert!(body(&r).contains(said), "{path}: {}", body(&r));
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "{path}: {:?}",
                t.elapsed()
            );
            // The same worker answers the next request on the same connection.
            assert_eq!(body(&cl.get("/ok")), "ok");
        }
    }
    assert!(metric(admin, "hotpath_lua_failures_total{reason=\"budget\"}") >= 12.0);
    assert!(metric(admin, "hotpath_lua_failures_total{reason=\"memory\"}") >= 3.0);
    // What the hog held was given back.
    assert!(metric(admin, "hotpath_lua_memory_bytes") < 8.0 * 1024.0 * 1024.0);
    server.shutdown().unwrap();
}

/// Regression: three ways out of the time budget. A coroutine made per loop turn ran 1.7 s
/// under `max_ms = 100` (making one restarted the caller's hook count); an `xpcall` message
/// handler runs with hooks off when the budget's error reaches it, and a loop there held the
/// worker for good (SIGTERM could not stop the process); a `__gc` finalizer runs with hooks
/// off too (12.3 s of CPU). Deep recursion and a budget error caught over and over are here
/// as well. Each now ends in a 500 soon after `max_ms`, and the worker serves on; the time
/// each took is printed (README states the worst measured).
#[test]
fn no_script_escapes_the_time_budget() {
    let (mut c, _dir) = config_with(&[
        (
            "coroutines",
            "function handle() while true do coroutine.wrap(function() end)() end end",
        ),
        (
            "coroutines_caught",
            "function handle() while true do pcall(coroutine.wrap(function() while true do end end)) end end",
        ),
        (
            "handler",
            "function handle() xpcall(function() while true do end end, function(m) while true do end end) end",
        ),
        (
            "handler_counted",
            "function handle() while true do xpcall(function() while true do end end, function(m) local n = 0 for i = 1, 1e8 do n = n + i end return m end) end end",
        ),
        (
            "finalizer",
            "function handle() setmetatable({}, {__gc = function() while true do end end}) collectgarbage() end",
        ),
        (
            "recursion",
            "local function f(n) return 1 + f(n + 1) end function handle() return 200, nil, tostring(f(1)) end",
        ),
        // The same in a route that runs in a coroutine (it names hp.tcp).
        (
            "recursion_in_coroutine",
            "local function f(n) return 1 + f(n + 1) end function handle() if false then hp.tcp.request('x', 'y') end return 200, nil, tostring(f(1)) end",
        ),
        // Huge values: each operation is one instruction or one library call on tens of
        // megabytes (the VM holds 64 MiB), so the budget is checked between them. (The
        // 10 MB strings are made of 1,000-byte pieces: `string.rep('x', 2e7)` is 2e7
        // repetitions, charged as such, past the default instruction budget.)
        (
            "huge_concat",
            "function handle() local s = string.rep(string.rep('x', 1000), 1e4) while true do local t = s .. 'y' end end",
        ),
        (
            "huge_compare",
            "function handle() local k = string.rep('x', 1000) local s, t = string.rep(k, 1e4), string.rep(k, 1e4) while true do local e = s == t end end",
        ),
        (
            "huge_tostring",
            "function handle() local s = string.rep(string.rep('x', 1000), 1e4) while true do local t = tostring(s):upper() end end",
        ),
        (
            "huge_format",
            "function handle() local s = string.rep(string.rep('x', 1000), 5e3) while true do local t = string.format('%s%s', s, s) end end",
        ),
        ("ok", "function handle() return 200, nil, 'ok' end"),
    ]);
    c.server.workers = 1;
    c.lua.max_ms = 100;
    c.lua.max_instructions = u64::MAX / 2;
    let server = start(&c);
    let mut cl = Client::connect(server.http_addr().unwrap());
    let budget: &[&str] = &["time budget exceeded"];
    for (path, said) in [
        ("/coroutines", budget),
        ("/coroutines_caught", budget),
        ("/handler", budget),
        ("/handler_counted", budget),
        ("/finalizer", &["__gc finalizer"]),
        // Lua's own bound on its stack, or the VM's memory bound (a deep stack is tens of
        // megabytes), may come first: whichever bound a run meets first ends it.
        (
            "/recursion",
            &[
                "time budget exceeded",
                "stack overflow",
                "not enough memory",
            ],
        ),
        (
            "/recursion_in_coroutine",
            &[
                "time budget exceeded",
                "stack overflow",
                "not enough memory",
            ],
        ),
        ("/huge_concat", budget),
        ("/huge_compare", budget),
        ("/huge_tostring", budget),
        ("/huge_format", budget),
    ] {
        let mut worst = Duration::ZERO;
        for _ in 0..3 {
            let t = Instant::now();
            let r = cl.get(path);
            worst = worst.max(t.elapsed());
            assert_eq!(r.status, 500, "{path}: {}", body(&r));
            assert!(
                said.iter().any(|s| body(&r).contains(s)),
                "{path}: {}",
                body(&r)
            );
            // No wall-clock bound: a script that never ended would get no answer, and the
            // client's read would fail; how long each took is printed.
            assert_eq!(body(&cl.get("/ok")), "ok", "{path}: the worker serves on");
        }
        eprintln!("{path}: ended after {worst:?} at most (max_ms = 100)");
    }
    server.shutdown().unwrap();
}

#[test]
fn the_shared_dictionary_is_one_for_all_workers() {
    let (mut c, _dir) = config_with(&[
        (
            "hit",
            "function handle() local n = hp.shared:incr('hits', 1, 0) return 200, nil, tostring(n) end",
        ),
        (
            "get",
            "function handle(req) local v = hp.shared:get(req:arg('k')) return 200, nil, tostring(v) end",
        ),
        (
            "set",
            "function handle(req) assert(hp.shared:set(req:arg('k'), req:arg('v'), tonumber(req:arg('ttl')))) return 204 end",
        ),
    ]);
    c.server.workers = 2;
    let server = start(&c);
    let http = server.http_addr().unwrap();
    let threads: Vec<_> = (0..8)
        .map(|_| {
            std::thread::spawn(move || {
                let mut cl = Client::connect(http);
                for _ in 0..50 {
                    assert_eq!(cl.get("/hit").status, 200);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut cl = Client::connect(http);
    assert_eq!(body(&cl.get("/get?k=hits")), "400");
    assert_eq!(cl.get("/set?k=a&v=1&ttl=0.3").status, 204);
    assert_eq!(cl.get("/set?k=b&v=2").status, 204);
    // Another connection (on either worker) sees both, then only the one without a TTL.
    let mut other = Client::connect(http);
    assert_eq!(body(&other.get("/get?k=a")), "1");
    let set = Instant::now();
    wait_until("the TTL to pass", Duration::from_secs(10), || {
        body(&other.get("/get?k=a")) == "nil"
    });
    assert!(
        set.elapsed() >= Duration::from_millis(250),
        "gone before its TTL"
    );
    assert_eq!(body(&other.get("/get?k=b")), "2");
    server.shutdown().unwrap();
}

#[test]
fn script_errors_and_bad_answers_are_500s() {
    let (mut c, _dir) = config_with(&[
        ("boom", "function handle() error('boom') end"),
        ("status", "function handle() return 'x' end"),
        (
            "framing",
            "function handle() return 200, { ['Content-Length'] = '5' }, 'hello' end",
        ),
        (
            "split",
            "function handle() return 200, { ['X-A'] = 'a\\r\\nX-B: b' } end",
        ),
        ("body", "function handle() return 200, nil, {} end"),
        (
            "badkey",
            "function handle() return 200, { [true] = 'x' }, 'x' end",
        ),
        (
            "number",
            "function handle() return 200, { ['X-N'] = 5 }, 'n' end",
        ),
        ("nobody", "function handle() return 204, nil, 'x' end"),
        // A float status, and a number among string headers, are read the long way, each
        // header once.
        (
            "float",
            "function handle() return 201.0, { ['X-A'] = 'a', ['X-B'] = 'b', ['X-N'] = 7 }, 'f' end",
        ),
        (
            "mixed",
            "function handle() return 200, { ['X-A'] = 'a', ['X-B'] = 'b', ['X-C'] = 'c', ['X-N'] = 7 }, 'm' end",
        ),
        // A script that writes into `req` past its metatable does not reach the next request.
        (
            "tamper",
            "function handle(req) local p = req.path rawset(req, 'path', '/evil') return 200, nil, p end",
        ),
        (
            "tamperfail",
            "function handle(req) local p = req.path rawset(req, 'path', '/evil') if req:arg('fail') then error('x') end return 200, nil, p end",
        ),
        (
            "json",
            "function handle(req) return 200, nil, hp.json.encode(hp.json.decode(req.body)) end",
        ),
        // The store is off in these servers.
        (
            "store",
            "function handle() hp.store.add('t', 'k', 'c', 1) return 204 end",
        ),
    ]);
    c.lua.debug_errors = false;
    let server = start(&c);
    let mut cl = Client::connect(server.http_addr().unwrap());
    for path in [
        "/boom", "/status", "/framing", "/split", "/body", "/badkey", "/nobody", "/store",
    ] {
        let r = cl.get(path);
        assert_eq!(
            (r.status, body(&r).as_str()),
            (500, "internal error\n"),
            "{path}"
        );
        assert!(!r.head.contains("X-B"), "{}", r.head);
    }
    // A number is a header's value as Lua writes it.
    let r = cl.get("/number");
    assert_eq!((r.status, body(&r).as_str()), (200, "n"));
    assert!(r.head.contains("X-N: 5\r\n"), "{}", r.head);
    let r = cl.get("/float");
    assert_eq!((r.status, body(&r).as_str()), (201, "f"));
    for h in ["X-A: a\r\n", "X-B: b\r\n", "X-N: 7\r\n"] {
        assert_eq!(r.head.matches(h).count(), 1, "{}", r.head);
    }
    let r = cl.get("/mixed");
    assert_eq!((r.status, body(&r).as_str()), (200, "m"));
    for h in ["X-A: a\r\n", "X-B: b\r\n", "X-C: c\r\n", "X-N: 7\r\n"] {
        assert_eq!(r.head.matches(h).count(), 1, "{}", r.head);
    }
    for _ in 0..2 {
        let r = cl.get("/tamper");
        assert_eq!((r.status, body(&r).as_str()), (200, "/tamper"));
    }
    assert_eq!(cl.get("/tamperfail?fail=1").status, 500);
    let r = cl.get("/tamperfail");
    assert_eq!((r.status, body(&r).as_str()), (200, "/tamperfail"));
    cl.send(b"POST /json HTTP/1.1\r\nHost: t\r\nContent-Length: 14\r\n\r\n{\"a\": [1, 2]}\n");
    let r = cl.read().unwrap();
    assert_eq!((r.status, body(&r).as_str()), (200, "{\"a\":[1,2]}"));
    cl.send(b"POST /json HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\n{x}");
    assert_eq!(cl.read().unwrap().status, 500);
    let admin = server.admin_addr().unwrap();
    assert_eq!(
        metric(admin, "hotpath_lua_failures_total{reason=\"error\"}"),
        10.0
    );
    server.shutdown().unwrap();

    // With lua.debug_errors the message goes to the client too.
    let (mut c, _dir) = config_with(&[("boom", "function handle() error('boom') end")]);
    c.lua.debug_errors = true;
    let server = start(&c);
    let r = Client::connect(server.http_addr().unwrap()).get("/boom");
    assert!(body(&r).contains("boom.lua:1: boom"), "{}", body(&r));
    server.shutdown().unwrap();
}

#[test]
fn broken_scripts_are_refused_at_start_naming_the_script() {
    for (source, said) in [
        (None, "cannot read"),
        (Some("function handle( return end"), "syntax error"),
        (Some("local x = 1"), "defines no function handle(req)"),
        (Some("error('at load')"), "at load"),
        (
            Some("hp.store.add('t', 'k', 'c', 1) function handle() end"),
            "only while handling a request",
        ),
    ] {
        let (mut c, dir) = config_with(&[("x", "function handle() end")]);
        let file = dir.join("x.lua");
        match source {
            Some(s) => std::fs::write(&file, s).unwrap(),
            None => std::fs::remove_file(&file).unwrap(),
        }
        c.lua.debug_errors = false;
        let err = hotpath::start(&c).err().expect("refused");
        let text = format!("{err:#}");
        assert!(text.contains(&file.display().to_string()), "{text}");
        assert!(text.contains(said), "{text}");
    }
}

/// Receives datagrams on a loopback port until `quiet` passes without one; returns how many
/// came from each source address.
fn udp_sink() -> (
    std::net::SocketAddr,
    std::thread::JoinHandle<std::collections::HashMap<std::net::SocketAddr, usize>>,
) {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = s.local_addr().unwrap();
    s.set_read_timeout(Some(Duration::from_millis(700)))
        .unwrap();
    let t = std::thread::spawn(move || {
        let mut from = std::collections::HashMap::new();
        let mut buf = [0u8; 2048];
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut seen_any = false;
        while Instant::now() < deadline {
            match s.recv_from(&mut buf) {
                Ok((_, f)) => {
                    seen_any = true;
                    *from.entry(f).or_insert(0) += 1;
                }
                Err(_) if seen_any => break,
                Err(_) => {}
            }
        }
        from
    });
    (addr, t)
}

#[test]
fn udp_messages_go_out_through_one_pooled_socket_per_worker_and_remote() {
    for pooled in [true, false] {
        let (sink, received) = udp_sink();
        let script = format!(
            "function handle(req)\n  for i = 1, 10 do\n    local ok, err = hp.udp.send('{sink}', 'm' .. i)\n    if not ok then return 500, nil, tostring(err) end\n  end\n  return 204\nend\n"
        );
        let (mut c, _dir) = config_with(&[("send", &script)]);
        c.server.workers = 2;
        if !pooled {
            c.lua.udp_max_sockets = 0;
        }
        let server = start(&c);
        let http = server.http_addr().unwrap();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(move || {
                    let mut cl = Client::connect(http);
                    for _ in 0..25 {
                        assert_eq!(cl.get("/send").status, 204);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let admin = server.admin_addr().unwrap();
        let sent = metric(admin, "hotpath_lua_udp_messages_total{result=\"sent\"}");
        let opened = metric(admin, "hotpath_lua_udp_sockets_opened_total");
        let from = received.join().unwrap();
        let got: usize = from.values().sum();
        assert_eq!(sent, 1000.0);
        // Loopback drops datagrams when the sink falls behind (a busy test machine): what
        // counts is that the server handed all 1,000 to the kernel, through which sockets.
        assert!(got >= 100, "{got} of 1000 arrived");
        if pooled {
            // One socket per worker that served (both, or one if every connection landed on
            // the same worker), the same source port for every message from it.
            assert!((1.0..=2.0).contains(&opened), "{opened}");
            assert_eq!(from.len() as f64, opened, "{from:?}");
            assert!(metric(admin, "hotpath_lua_udp_sockets") <= 2.0);
        } else {
            assert_eq!(opened, 1000.0);
            assert_eq!(metric(admin, "hotpath_lua_udp_sockets"), 0.0);
        }
        server.shutdown().unwrap();
    }
}

#[test]
fn checkins_are_written_behind_to_every_database() {
    use hotpath_store::backend::{self, Dialect};
    use hotpath_store::testing::test_db;
    let script = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/lua/checkin.lua"
    ))
    .unwrap();
    for d in [Dialect::Sqlite, Dialect::Postgres, Dialect::Mysql] {
        let db = test_db(d, "luastore");
        let (mut c, _dir) = config_with(&[("checkin", &script)]);
        c.store.enabled = true;
        c.store.url = db.url.clone();
        c.store.data_dir = db.dir.display().to_string();
        c.store.flush_interval_ms = 100;
        let server = start(&c);
        let http = server.http_addr().unwrap();
        let threads: Vec<_> = (0..4)
            .map(|t| {
                std::thread::spawn(move || {
                    let mut cl = Client::connect(http);
                    for i in 0..25 {
                        let body = format!(r#"{{"user": "u{t}-{i}", "place": "p{}"}}"#, i % 3);
                        cl.send(
                            format!(
                                "POST /checkin HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n{body}",
                                body.len()
                            )
                            .as_bytes(),
                        );
                        let r = cl.read().unwrap();
                        assert_eq!(r.status, 201, "{}", body_text(&r));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let mut cl = Client::connect(http);
        cl.send(b"POST /checkin HTTP/1.1\r\nHost: t\r\nContent-Length: 7\r\n\r\n{\"x\":1}");
        assert_eq!(cl.read().unwrap().status, 400);
        // Written behind within a flush interval or two; all of it by the drained shutdown.
        let mut b = backend::connect(&db.url, &db.dir).unwrap();
        let deadline = Instant::now() + Duration::from_secs(15);
        while b.lua_rows("checkins", 1000).unwrap().len() < 100 {
            assert!(Instant::now() < deadline, "{}: rows not written", d.name());
            std::thread::sleep(Duration::from_millis(50));
        }
        server.shutdown().unwrap();
        let rows = b.lua_rows("checkins", 1000).unwrap();
        assert_eq!(rows.len(), 100, "{}", d.name());
        let row: serde_json::Value = serde_json::from_str(&rows[0].1).unwrap();
        assert!(row["user"].as_str().unwrap().starts_with('u'), "{row}");
        let counts: Vec<_> = (0..3)
            .map(|p| {
                b.lua_counter("places", &format!("p{p}"), "checkins")
                    .unwrap()
            })
            .collect();
        // 25 per connection: places 0, 1, 2 get 9, 8, 8 each.
        assert_eq!(counts, [Some(36), Some(32), Some(32)], "{}", d.name());
    }
}

fn body_text(r: &common::Resp) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

/// kill -9 under a load of check-ins: every acknowledged one is in the database after the
/// restart (rows and counter), and nothing beyond what was sent.
#[test]
fn acknowledged_checkins_survive_kill_9() {
    use common::Proc;
    use hotpath_store::backend::{self, Dialect};
    use hotpath_store::testing::test_db;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    let db = test_db(Dialect::Sqlite, "luakill");
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/lua/checkin.lua"
    );
    let config = db.dir.join("hotpath.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nworkers = 2\nshutdown_grace_secs = 2\n\
             [listen]\nhttp = [\"127.0.0.1:0\"]\nudp = []\nadmin = [\"127.0.0.1:0\"]\nipv6 = false\n\
             [store]\nurl = \"{}\"\ndata_dir = \"{}\"\nflush_interval_ms = 100\n\
             [[lua.routes]]\npath = \"/checkin\"\nscript = \"{script}\"\n",
            db.url,
            db.dir.join("data").display()
        ),
    )
    .unwrap();
    let mut p = Proc::spawn(&config, &db.dir);
    let stop = Arc::new(AtomicBool::new(false));
    let (acked, sent) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (stop, acked, sent, addr) = (stop.clone(), acked.clone(), sent.clone(), p.http);
            std::thread::spawn(move || {
                let mut cl = Client::connect(addr);
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let body = format!(r#"{{"user": "u{t}-{i}", "place": "here"}}"#);
                    cl.send(
                        format!(
                            "POST /checkin HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n{body}",
                            body.len()
                        )
                        .as_bytes(),
                    );
                    sent.fetch_add(1, Ordering::Relaxed);
                    match cl.read() {
                        Some(r) if r.status == 201 => {
                            acked.fetch_add(1, Ordering::Relaxed);
                        }
                        Some(_) => {}
                        None => return,
                    }
                }
            })
        })
        .collect();
    // Kill it in full flow: once a few hundred rows were acknowledged (or 10 s passed).
    let deadline = Instant::now() + Duration::from_secs(10);
    while acked.load(Ordering::Relaxed) < 300 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    p.signal("-KILL");
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    let (acked, sent) = (acked.load(Ordering::Relaxed), sent.load(Ordering::Relaxed));
    assert!(acked > 100, "load ran: {acked} acknowledged");
    let p = Proc::spawn(&config, &db.dir);
    let mut b = backend::connect(&db.url, &db.dir).unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    let stored = |b: &mut Box<dyn backend::Backend>| {
        b.lua_counter("places", "here", "checkins")
            .unwrap()
            .unwrap_or(0) as u64
    };
    while stored(&mut b) < acked {
        assert!(
            Instant::now() < deadline,
            "replayed check-ins not written: {} of {acked}",
            stored(&mut b)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let rows = b.lua_rows("checkins", 1_000_000).unwrap().len() as u64;
    let counted = stored(&mut b);
    eprintln!("acknowledged {acked}, sent {sent}, stored rows {rows}, counter {counted}");
    assert_eq!(rows, counted, "each check-in is a row and a count");
    assert!(acked <= counted && counted <= sent);
    drop(p);
}

/// A line server on loopback: answers "re:LINE\n" ("slow" after 400 ms, "hang" never);
/// counts the connections it accepted. It stops accepting after 30 s.
fn line_server() -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    use std::io::{BufRead, BufReader, Write};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    l.set_nonblocking(true).unwrap();
    let accepted = std::sync::Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            let Ok((s, _)) = l.accept() else {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            };
            count.fetch_add(1, Ordering::Relaxed);
            s.set_nonblocking(false).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            std::thread::spawn(move || {
                let mut w = s.try_clone().unwrap();
                for line in BufReader::new(s).lines().map_while(Result::ok) {
                    match line.as_str() {
                        "hang" => std::thread::sleep(Duration::from_secs(3)),
                        "slow" => std::thread::sleep(Duration::from_millis(400)),
                        _ => {}
                    }
                    // As Redis answers README's example.
                    let answer = match line.as_str() {
                        "PING" => "+PONG\r\n".to_string(),
                        _ => format!("re:{line}\n"),
                    };
                    if w.write_all(answer.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, accepted)
}

#[test]
fn tcp_requests_wait_off_the_worker_over_pooled_connections() {
    use std::sync::atomic::Ordering;
    let (backend, accepted) = line_server();
    let script = format!(
        "function handle(req)\n  local r, err = hp.tcp.request('{backend}', (req:arg('say') or 'hi') .. '\\n', {{ timeout_ms = tonumber(req:arg('t')) }})\n  if not r then return 502, nil, 'no answer: ' .. err end\n  return 200, nil, r\nend\n"
    );
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let refused_addr = closed.local_addr().unwrap();
    drop(closed);
    // README's example, as written there (its `until` option was once a Lua syntax error),
    // pointed at the line server.
    let readme = include_str!("../../../README.md");
    let call = readme
        .lines()
        .find_map(|l| {
            l.split('`')
                .find(|p| p.starts_with("hp.tcp.request(\"10.0.0.7"))
        })
        .expect("README shows hp.tcp.request")
        .replace("10.0.0.7:6379", &backend.to_string());
    let readme_script =
        format!("function handle() local r, err = {call} return 200, nil, r or err end");
    let (mut c, _dir) = config_with(&[
        ("ask", &script),
        ("readme", &readme_script),
        (
            "refused",
            &format!("function handle() local r, err = hp.tcp.request('{refused_addr}', 'x\\n') return 502, nil, tostring(err) end"),
        ),
        (
            "spin",
            "function handle() if false then hp.tcp.request('x', 'y') end while true do end end",
        ),
        ("plain", "function handle() return 200, nil, 'plain' end"),
    ]);
    c.server.workers = 1;
    c.lua.max_ms = 300;
    let server = start(&c);
    let http = server.http_addr().unwrap();
    let mut cl = Client::connect(http);
    for i in 0..50 {
        let r = cl.get(&format!("/ask?say=n{i}"));
        assert_eq!((r.status, body(&r)), (200, format!("re:n{i}\n")));
    }
    assert_eq!(
        accepted.load(Ordering::Relaxed),
        1,
        "one connection, reused"
    );
    let r = cl.get("/readme");
    assert_eq!((r.status, body(&r)), (200, "+PONG\r\n".to_string()));
    // A slow answer parks its request; the worker serves other connections meanwhile.
    let slow = std::thread::spawn(move || {
        let mut cl = Client::connect(http);
        let t = Instant::now();
        let r = cl.get("/ask?say=slow");
        (r.status, body(&r), t.elapsed(), Instant::now())
    });
    std::thread::sleep(Duration::from_millis(100));
    let mut other = Client::connect(http);
    assert_eq!(body(&other.get("/plain")), "plain");
    // Answered while the slow one still waited (no wall-clock bound: only the order).
    let plain_done = Instant::now();
    let (status, text, took, slow_done) = slow.join().unwrap();
    assert!(
        plain_done < slow_done,
        "the plain route waited for the parked one"
    );
    assert_eq!((status, text.as_str()), (200, "re:slow\n"));
    assert!(took >= Duration::from_millis(400), "{took:?}");
    // No answer within the timeout; nobody listening.
    let t = Instant::now();
    let r = cl.get("/ask?say=hang&t=200");
    assert_eq!(r.status, 502);
    assert!(body(&r).contains("timed out"), "{}", body(&r));
    // Before the backend's own 3 s hang would have ended it.
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    let r = cl.get("/refused");
    assert_eq!(r.status, 502);
    assert!(body(&r).contains("refused"), "{}", body(&r));
    // A runaway script that could wait is still stopped at its budget.
    assert_eq!(cl.get("/spin").status, 500);
    assert_eq!(body(&cl.get("/ask?say=after")), "re:after\n");
    let admin = server.admin_addr().unwrap();
    assert_eq!(
        metric(admin, "hotpath_lua_tcp_requests_total{result=\"ok\"}"),
        53.0
    );
    assert_eq!(
        metric(admin, "hotpath_lua_tcp_requests_total{result=\"timeout\"}"),
        1.0
    );
    server.shutdown().unwrap();
}

/// Each way out of the sandbox an attacker who gets a script past review would try: files,
/// processes, the environment, the exit, modules from anywhere, bytecode. Each must fail in
/// the script (a 500 with the reason under `lua.debug_errors`), and the server goes on.
#[test]
fn the_sandbox_closes_files_processes_the_environment_and_bytecode() {
    let escapes: &[(&str, &str)] = &[
        ("io", "return io.open('/etc/passwd')"),
        ("execute", "return os.execute('true')"),
        ("exit", "os.exit(3)"),
        ("getenv", "return os.getenv('HOME')"),
        ("remove", "return os.remove('x')"),
        ("rename", "return os.rename('x', 'y')"),
        ("tmpname", "return os.tmpname()"),
        ("dofile", "return dofile('/etc/passwd')"),
        ("loadfile", "return loadfile('/etc/passwd')"),
        ("package", "return package.loadlib('libc.so.6', 'system')"),
        ("dump", "return string.dump(function() end)"),
        ("require_path", "return require('../../etc/passwd')"),
        ("require_missing", "return require('nothere')"),
    ];
    let mut scripts: Vec<(String, String)> = escapes
        .iter()
        .map(|(name, code)| {
            (
                name.to_string(),
                format!(
                    "function handle() local r = (function() {code} end)() \
                     return 200, nil, tostring(r) end"
                ),
            )
        })
        .collect();
    // Bytecode is refused even when made elsewhere: `load` takes text only.
    scripts.push((
        "bytecode".into(),
        "function handle() local f, err = load('\\27Lua\\84\\0garbage') \
         return 200, nil, tostring(f) .. ' ' .. tostring(err) end"
            .into(),
    ));
    // What stays: clocks and dates, text chunks, modules from the script directory.
    scripts.push((
        "allowed".into(),
        "local m = require('helpers.greet') \
         function handle() local f = load('return 1 + 1') \
         return 200, nil, table.concat({ type(os.time()), type(os.clock()), os.date('!%Y', 0), \
         tostring(f()), m.hi('x'), tostring(require('helpers.greet') == m) }, ' ') end"
            .into(),
    ));
    let named: Vec<(&str, &str)> = scripts
        .iter()
        .map(|(n, s)| (n.as_str(), s.as_str()))
        .collect();
    let (c, dir) = config_with(&named);
    std::fs::create_dir_all(dir.join("helpers")).unwrap();
    std::fs::write(
        dir.join("helpers/greet.lua"),
        "local M = {} function M.hi(n) return 'hi ' .. n end return M",
    )
    .unwrap();
    let server = start(&c);
    let mut cl = Client::connect(server.http_addr().unwrap());
    for (name, _) in escapes {
        let r = cl.get(&format!("/{name}"));
        assert_eq!(r.status, 500, "/{name} escaped: {}", body(&r));
    }
    let r = cl.get("/bytecode");
    assert_eq!(r.status, 200);
    assert!(body(&r).starts_with("nil "), "{}", body(&r));
    assert!(body(&r).contains("binary"), "{}", body(&r));
    let r = cl.get("/allowed");
    assert_eq!(
        (r.status, body(&r).as_str()),
        (200, "number number 1970 2 hi x true")
    );
    // os.exit did not end the server.
    assert_eq!(cl.get("/healthz").status, 200);
    server.shutdown().unwrap();
    // A script file of bytecode is refused at start.
    let (c, dir) = config_with(&[("x", "function handle() end")]);
    std::fs::write(dir.join("x.lua"), b"\x1bLua\x54\x00junk").unwrap();
    let err = hotpath::start(&c).err().expect("refused");
    assert!(format!("{err:#}").contains("binary"), "{err:#}");
}

/// `lua.unsafe_stdlib = true` gives the whole standard library back, for those who ask.
#[test]
fn unsafe_stdlib_opts_back_in() {
    let (mut c, _dir) = config_with(&[(
        "io",
        "function handle() return 200, nil, type(io.open) .. ' ' .. type(os.getenv) end",
    )]);
    c.lua.unsafe_stdlib = true;
    let server = start(&c);
    let r = Client::connect(server.http_addr().unwrap()).get("/io");
    assert_eq!((r.status, body(&r).as_str()), (200, "function function"));
    server.shutdown().unwrap();
}

/// Scripts that spend their time inside library calls, where the VM's instruction hook never
/// runs: each is stopped within its time budget plus a small slack, whatever it calls.
#[test]
fn the_time_budget_holds_inside_library_calls() {
    let scripts: &[(&str, &str)] = &[
        // Quadratic backtracking in one call (24.6 s over 65 KB before).
        (
            "trim",
            r#"function handle(req) return 200, nil, tostring(#req.body:match("^%s*(.-)%s*$")) end"#,
        ),
        (
            "find",
            r#"function handle(req) return 200, nil, tostring(req.body:find("x.-.-.-y")) end"#,
        ),
        // Many quick-looking calls between two instruction checks.
        (
            "gsub",
            r#"function handle(req) local s = req.body for i = 1, 1e6 do s = s:gsub("%s", " ") end end"#,
        ),
        (
            "gmatch",
            r#"function handle(req) local n = 0 for i = 1, 1e6 do for w in req.body:gmatch("%s*(.-)%s*$") do n = n + 1 end end end"#,
        ),
        (
            "rep",
            r#"function handle() for i = 1, 1e9 do local s = string.rep("x", 1e7) end end"#,
        ),
        (
            "upper",
            r#"function handle(req) local s = string.rep(req.body, 100) for i = 1, 1e9 do local t = s:upper() end end"#,
        ),
        (
            "sort",
            r#"function handle() local t = {} for i = 1, 3e5 do t[i] = (i * 7919) % 1000003 end for k = 1, 1e6 do table.sort(t) end end"#,
        ),
        (
            "concat",
            r#"function handle() local t = {} for i = 1, 1e5 do t[i] = "abcdefgh" end for k = 1, 1e9 do local s = table.concat(t, ",") end end"#,
        ),
        (
            "insert",
            r#"function handle() local t = {} for i = 1, 2e5 do t[i] = i end for k = 1, 1e9 do table.insert(t, 1, k) end end"#,
        ),
        (
            "move",
            r#"function handle() table.move({}, 1, 1e12, 2) end"#,
        ),
        (
            "json",
            r#"function handle(req) local doc = hp.json.encode({ body = req.body }) for i = 1, 1e9 do hp.json.decode(doc) end end"#,
        ),
        // Operators on long strings cost their length per instruction.
        (
            "dotdot",
            r#"function handle() local s = string.rep("x", 8e6) for i = 1, 1e9 do local t = s .. i end end"#,
        ),
        ("ok", "function handle() return 200, nil, 'ok' end"),
    ];
    let (mut c, _dir) = config_with(scripts);
    c.server.workers = 1;
    c.lua.max_ms = 100;
    c.lua.max_memory_mb = 64;
    let server = start(&c);
    let mut cl = Client::connect(server.http_addr().unwrap());
    let body = format!("x{}x", " ".repeat(65_000));
    let mut worst = Duration::ZERO;
    // The control: what a trivial request takes on this machine now, the slowest seen so far
    // (a busy machine slows both alike).
    let mut control = Duration::ZERO;
    for (name, _) in &scripts[..scripts.len() - 1] {
        let t = Instant::now();
        assert_eq!(String::from_utf8_lossy(&cl.get("/ok").body), "ok");
        control = control.max(t.elapsed());
        let t = Instant::now();
        cl.send(
            format!(
                "POST /{name} HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        );
        let r = cl.read().expect("an answer");
        let took = t.elapsed();
        println!("{name}: {} ms", took.as_millis());
        worst = worst.max(took);
        assert_eq!(
            r.status,
            500,
            "{name}: {}",
            String::from_utf8_lossy(&r.body)
        );
        let said = String::from_utf8_lossy(&r.body).into_owned();
        assert!(said.contains("budget exceeded"), "{name}: {said}");
        // Stopped near lua.max_ms (100 ms), not seconds later: the slack, with twenty times
        // the control's on top, is still far below what an unchecked call takes (minutes).
        assert!(
            took < Duration::from_millis(600) + control * 20,
            "{name} held the worker {took:?} (control {control:?})"
        );
        assert_eq!(String::from_utf8_lossy(&cl.get("/ok").body), "ok");
    }
    println!("worst: {} ms", worst.as_millis());
    server.shutdown().unwrap();
}

/// What a script builds outside the VM's own memory is bounded too: a table nested too deep
/// for the JSON encoder's recursion (it aborted the server on a stack overflow), and a gsub
/// whose replacements multiply the body.
#[test]
fn deep_json_and_exploding_gsub_get_500s_not_a_crash() {
    let (mut c, _dir) = config_with(&[
        (
            "deep",
            "function handle() local t = {} for i = 1, 200000 do t = { t } end return 200, nil, hp.json.encode(t) end",
        ),
        (
            "wide",
            "function handle() local t = {} for i = 1, 100 do t = { t } end return 200, nil, tostring(#hp.json.encode(t)) end",
        ),
        (
            "explode",
            r#"function handle(req) local big = string.rep("x", 100000) return 200, nil, tostring(#req.body:gsub("", big)) end"#,
        ),
        // One 1 MB string held 100 times: a small table, a 100 MB text.
        (
            "repeat",
            r#"function handle() local s = string.rep("x", 1000000) local t = {} for i = 1, 100 do t[i] = s end return 200, nil, hp.json.encode(t) end"#,
        ),
        ("ok", "function handle() return 200, nil, 'ok' end"),
    ]);
    c.server.workers = 1;
    c.lua.max_memory_mb = 16;
    // This test is about memory and depth, not time: building 200,000 nested tables takes
    // well over the default budget in a debug build on a busy machine.
    c.lua.max_ms = 10_000;
    let server = start(&c);
    let mut cl = Client::connect(server.http_addr().unwrap());
    let r = cl.get("/deep");
    assert_eq!(r.status, 500);
    assert!(
        body(&r).contains("nested deeper than 128 levels"),
        "{}",
        body(&r)
    );
    // 101 levels (the empty table and 100 around it) are fine: 101 pairs of brackets.
    assert_eq!(body(&cl.get("/wide")), "202");
    // The text is built outside the VM's memory: stopped at its cap, counted as a memory
    // failure, and the worker goes on.
    let r = cl.get("/repeat");
    assert_eq!(r.status, 500);
    assert!(body(&r).contains("not enough memory"), "{}", body(&r));
    let admin = server.admin_addr().unwrap();
    assert_eq!(
        metric(admin, "hotpath_lua_failures_total{reason=\"memory\"}"),
        1.0
    );
    let text = " ".repeat(60_000);
    cl.send(
        format!(
            "POST /explode HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n{text}",
            text.len()
        )
        .as_bytes(),
    );
    let r = cl.read().expect("an answer, not a dead server");
    assert_eq!(r.status, 500);
    assert!(
        body(&r).contains("not enough memory") || body(&r).contains("budget exceeded"),
        "{}",
        body(&r)
    );
    assert_eq!(body(&cl.get("/ok")), "ok");
    server.shutdown().unwrap();
}
