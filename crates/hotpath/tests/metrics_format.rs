//! `/metrics`, `/stats` and statsd of a server running every service (tracker over HTTP and
//! UDP, popups, a Lua route, the store), all rendered from one registry: the page is read by
//! the Prometheus Python client's own parser (Debian's python3-prometheus-client), and holds
//! no series that cannot occur.

mod common;

use std::io::Write as _;
use std::net::{SocketAddr, UdpSocket};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{announce_target, Client, Proc};
use hotpath_store::backend::Dialect;
use hotpath_store::testing::test_db;
use hotpath_wire::query::Event;

const SCRIPT: &str = r#"
function handle(req)
  hp.metrics.incr("odd_name")
  return 200, nil, "ok\n"
end
"#;

#[test]
fn every_page_is_rendered_from_one_registry_and_parses() {
    let db = test_db(Dialect::Sqlite, "metricsfmt");
    let script = db.dir.join("odd.lua");
    std::fs::write(&script, SCRIPT).unwrap();
    let config = db.dir.join("hotpath.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nworkers = 2\nshutdown_grace_secs = 2\n\
             [listen]\nhttp = [\"127.0.0.1:0\"]\nudp = [\"127.0.0.1:0\"]\nadmin = [\"127.0.0.1:0\"]\nipv6 = false\n\
             [store]\nurl = \"{}\"\ndata_dir = \"{}\"\nflush_interval_ms = 100\n\
             [popups]\nenabled = true\nadmin_token = \"t0ken-t0ken-t0ken\"\n\
             [[lua.routes]]\npath = \"/odd\"\nscript = \"{}\"\n",
            db.url,
            db.dir.join("data").display(),
            script.display()
        ),
    )
    .unwrap();
    let p = Proc::spawn(&config, &db.dir);
    let log = p.log_text();
    let udp: SocketAddr = log
        .lines()
        .find_map(|l| {
            l.split("listening on ")
                .nth(1)?
                .strip_suffix(" (UDP)")?
                .parse()
                .ok()
        })
        .expect("a UDP listener");

    // Some traffic of each kind, so counters are not all 0.
    let mut c = Client::connect(p.http);
    let a = common::announce([3; 20], 1, 7001, 0, Event::Started);
    assert_eq!(c.get(&announce_target(&a)).status, 200);
    assert_eq!(c.get(&common::scrape_target(&[[3; 20]])).status, 200);
    assert_eq!(c.get("/odd").status, 200);
    assert_eq!(c.get("/v1/popup?user=1").status / 100, 2);
    assert_eq!(c.get("/nowhere").status, 404);
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    s.send_to(b"tiny", udp).unwrap();
    let mut admin = Client::connect(p.admin.unwrap());
    common::wait_until("the datagram is counted", Duration::from_secs(5), || {
        let v: serde_json::Value = serde_json::from_slice(&admin.get("/stats").body).unwrap();
        v["requests"]["udp"]["other"]["dropped"] == 1
    });

    let text = String::from_utf8(admin.get("/metrics").body).unwrap();
    // Debian's interpreter, where its python3-prometheus-client is (scripts/test installs it).
    let python = ["/usr/bin/python3", "python3"]
        .into_iter()
        .find(|p| !p.starts_with('/') || std::path::Path::new(p).exists())
        .unwrap();
    let mut check = Command::new(python)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/support/check_metrics.py"
        ))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    check
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = check.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}\n--- the page:\n{text}");
    // Every part of the server is on the page.
    for family in [
        "counter hotpath_requests",
        "histogram hotpath_request_duration_seconds",
        "gauge hotpath_tracker_torrents",
        "counter hotpath_popups_decisions",
        "counter hotpath_lua_counter",
        "gauge hotpath_store_queue_rows",
    ] {
        assert!(said.contains(family), "{family} missing:\n{said}");
    }
    assert!(text.contains("hotpath_lua_counter_total{name=\"odd_name\"} 1"));

    // Only series that can occur: kinds over the protocols they come by, results they can have.
    let series =
        |proto: &str, kind: &str| text.contains(&format!("{{protocol=\"{proto}\",kind=\"{kind}\""));
    assert!(series("udp", "connect") && series("udp", "announce") && series("http", "popup"));
    for (proto, kind) in [
        ("udp", "popup"),
        ("udp", "popup_event"),
        ("udp", "lua"),
        ("udp", "health"),
        ("udp", "admin"),
        ("http", "connect"),
    ] {
        assert!(!series(proto, kind), "{proto}/{kind} cannot occur:\n{text}");
    }
    assert!(!text.contains("protocol=\"http\",kind=\"announce\",result=\"dropped\""));
    assert!(text
        .contains("hotpath_requests_total{protocol=\"udp\",kind=\"other\",result=\"dropped\"} 1"));

    // /stats is the same registry as JSON: sections per service, label values nested.
    let stats: serde_json::Value = serde_json::from_slice(&admin.get("/stats").body).unwrap();
    assert_eq!(stats["requests"]["http"]["announce"]["ok"], 1, "{stats}");
    assert_eq!(stats["requests"]["udp"]["other"]["dropped"], 1, "{stats}");
    assert_eq!(stats["tracker"]["torrents"], 1, "{stats}");
    assert_eq!(stats["lua"]["counter"]["odd_name"], 1, "{stats}");
    assert!(stats["store"]["queue_rows"].is_u64(), "{stats}");
    assert!(stats["popups"]["decisions"]["shown"].is_u64(), "{stats}");
    assert!(
        stats["uptime_secs"].is_u64() && stats["workers"] == 2,
        "{stats}"
    );
}
