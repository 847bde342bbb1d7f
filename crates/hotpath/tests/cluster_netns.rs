//! A whole cluster in network namespaces (`scripts/cluster up`): three nodes, a Redis Cluster of
//! three masters and three replicas, HAProxy and the nftables UDP rules in a balancer's
//! namespace, PostgreSQL, and the clients in a namespace of their own. One test, in steps,
//! on one topology (it takes a few seconds to build):
//! - a peer announced through node 1 is in node 2's and node 3's answers and scrapes;
//! - real libtorrent clients, one over HTTP and one over UDP through the balancer, each on a
//!   different node, find each other and move a file;
//! - kill -9 of a node under load: the balancer moves its clients (HTTP: HAProxy; UDP: the
//!   nftables map, by udp-health), the other nodes still list its peers, and every completion
//!   acknowledged is in the database once it is back;
//! - kill -9 of a Redis master under load: no request fails, the exchange resumes after the
//!   failover and the nodes converge;
//! - a node cut off from Redis (its back link down) answers from memory and catches up when
//!   the link is back: the peers from the next snapshots, a completion from the database.
//!
//! Needs root (namespaces); `scripts/test` runs as root and installs what the script needs.

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use hotpath_wire::query::Event;

const TAG: &str = "hpt";
const NET: &str = "10.78";
const WAIT: Duration = Duration::from_secs(30);
const PYTHON: &str = "/usr/bin/python3";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The cluster `scripts/cluster` built; taken down (every process by its PID) when dropped.
struct Cluster {
    dir: PathBuf,
}

impl Cluster {
    fn script(&self, args: &[&str]) -> std::process::Output {
        Command::new(repo().join("scripts/cluster"))
            .args(args)
            .env("HOTPATH_CLUSTER_TAG", TAG)
            .env("HOTPATH_CLUSTER_NET", NET)
            .env("HOTPATH_CLUSTER_DIR", &self.dir)
            .env("HOTPATH_CLUSTER_SNAPSHOT_SECS", "5")
            .env("HOTPATH_BIN", env!("CARGO_BIN_EXE_hotpath"))
            .stdin(Stdio::null())
            .output()
            .expect("scripts/cluster runs")
    }

    fn up() -> Cluster {
        let c = Cluster {
            dir: data_dir().join("cluster"),
        };
        // What a run before this one left, if it was stopped half-way.
        c.script(&["down"]);
        let out = c.script(&["up"]);
        assert!(
            out.status.success(),
            "scripts/cluster up:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        c
    }

    fn pid(&self, name: &str) -> u32 {
        std::fs::read_to_string(self.dir.join(format!("{name}.pid")))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("{name}.log"))).unwrap_or_default()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.script(&["down"]);
    }
}

fn node_http(n: u8) -> SocketAddr {
    format!("{NET}.1.1{n}:6969").parse().unwrap()
}

fn node_admin(n: u8) -> SocketAddr {
    format!("{NET}.2.1{n}:9090").parse().unwrap()
}

/// A metric's value on node `n` (its labels written out in `name`), 0 when absent.
fn metric(n: u8, name: &str) -> f64 {
    metric_at(node_admin(n), name).unwrap_or(0.0)
}

fn http_announces(n: u8) -> f64 {
    metric(
        n,
        "hotpath_requests_total{protocol=\"http\",kind=\"announce\",result=\"ok\"}",
    )
}

fn udp_connects(n: u8) -> f64 {
    metric(
        n,
        "hotpath_requests_total{protocol=\"udp\",kind=\"connect\",result=\"ok\"}",
    )
}

/// (seeders, completed, leechers) of `hash` on node `n`, by a UDP scrape.
fn scrape(n: u8, hash: [u8; 20]) -> (u32, u32, u32) {
    let mut c = Udp::from("0.0.0.0:0", node_http(n));
    c.connect();
    c.scrape(hash)
}

fn announce_on(n: u8, hash: [u8; 20], id: u8, port: u16, left: u64, e: Event) -> Vec<u8> {
    let r = Client::connect(node_http(n)).get(&announce_target(&announce(hash, id, port, left, e)));
    assert_eq!(r.status, 200);
    assert_eq!(failure(&r.body), None, "node {n}");
    r.body
}

/// Runs a Python program in the clients' namespace; its standard output.
fn in_clients(program: &str, args: &[&str]) -> String {
    let out = Command::new("ip")
        .args(["netns", "exec", &format!("{TAG}-c"), PYTHON, "-c", program])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("ip netns exec runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `get(lb, ip, path)`: one HTTP request through the balancer at `lb` from client address
/// `ip`; whether it was answered 200 without a failure reason, and the body. A connection
/// closed before any answer (its node died) is a failed request.
const HTTP_GET: &str = r#"
import socket
def get(lb, ip, path):
    try:
        s = socket.create_connection((lb, 6969), timeout=3, source_address=(ip, 0))
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        s.close()
        head, _, body = data.partition(b"\r\n\r\n")
        status = head.split(b" ")[1:2]
        return status == [b"200"] and b"failure reason" not in body, body
    except OSError:
        return False, b""
"#;

/// One HTTP request through the balancer from `ip` (in the clients' namespace).
const HTTP_FROM: &str = r#"
import sys
ok, _ = get(sys.argv[3], sys.argv[1], sys.argv[2])
print(200 if ok else "failed")
"#;

/// One UDP connect through the balancer from `ip`.
const UDP_FROM: &str = r#"
import socket, struct, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], 0)); s.settimeout(3)
s.sendto(struct.pack(">QII", 0x41727101980, 0, 7), (sys.argv[2], 6969))
d, _ = s.recvfrom(64)
print(struct.unpack(">IIQ", d)[0])
"#;

/// The node (1-3) whose counter `count` moved while `act` ran.
fn node_that_counted(count: fn(u8) -> f64, act: impl FnOnce()) -> u8 {
    let before: Vec<f64> = (1..=3).map(count).collect();
    act();
    (1..=3u8)
        .find(|&n| count(n) > before[n as usize - 1])
        .expect("a node counted it")
}

/// The node the balancer sends client `ip`'s HTTP connections to.
fn http_node_of(ip: &str, lb: &str) -> u8 {
    let mut h = [0u8; 20];
    h[..ip.len().min(20)].copy_from_slice(&ip.as_bytes()[..ip.len().min(20)]);
    let path = announce_target(&announce(h, 9, 6881, 1, Event::Started));
    node_that_counted(http_announces, || {
        let program = format!("{HTTP_GET}{HTTP_FROM}");
        assert_eq!(in_clients(&program, &[ip, &path, lb]).trim(), "200");
    })
}

/// The node the balancer sends client `ip`'s datagrams to.
fn udp_node_of(ip: &str, lb: &str) -> u8 {
    node_that_counted(udp_connects, || {
        in_clients(UDP_FROM, &[ip, lb]);
    })
}

/// Clients through the balancer, each from its own address, each peer a torrent of its own:
/// started, then completed, then a scrape; prints the info hashes (hex) whose completion a
/// node acknowledged (the scrape counts it) and how many requests failed.
const LOAD: &str = r#"
import hashlib, json, sys, time, urllib.parse
lb, seconds, tag = sys.argv[1], float(sys.argv[2]), sys.argv[3]
ips = [f"{lb.rsplit('.', 1)[0]}.{i}" for i in range(2, 10)]
acked, failed, n = [], 0, 0
end = time.time() + seconds
while time.time() < end:
    ip = ips[n % len(ips)]
    h = hashlib.sha1(f"{tag}-{n}".encode()).digest()
    q = "info_hash=" + urllib.parse.quote(h) + "&peer_id=-HP0001-" + f"{n:012d}" + "&port=6881&uploaded=0&downloaded=0&compact=1"
    ok1, _ = get(lb, ip, f"/announce?{q}&left=100&event=started")
    ok2, _ = get(lb, ip, f"/announce?{q}&left=0&event=completed") if ok1 else (False, b"")
    ok3, body = get(lb, ip, "/scrape?info_hash=" + urllib.parse.quote(h)) if ok2 else (False, b"")
    if ok3 and b"10:downloadedi1e" in body:
        acked.append(h.hex())
    failed += not (ok1 and ok2 and ok3)
    n += 1
print(json.dumps({"acked": acked, "failed": failed, "sent": n}))
"#;

fn spawn_load(lb: &str, seconds: &str, tag: &str) -> std::process::Child {
    Command::new("ip")
        .args(["netns", "exec", &format!("{TAG}-c"), PYTHON, "-c"])
        .arg(format!("{HTTP_GET}{LOAD}"))
        .arg(lb)
        .args([seconds, tag])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the load runs")
}

fn load_result(child: std::process::Child) -> serde_json::Value {
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Completed counts in the cluster's database, by info hash (hex).
fn completed_in_db() -> std::collections::HashMap<String, i64> {
    let url = format!("postgres://postgres@127.0.0.1:5432/hotpath_cluster_{TAG}");
    let mut b = hotpath_store::backend::connect(&url, &data_dir()).unwrap();
    let mut out = std::collections::HashMap::new();
    b.query(
        "SELECT info_hash, completed FROM hp_torrents",
        &[],
        &mut |r| {
            let hash: String = r[0].bytes().iter().map(|b| format!("{b:02x}")).collect();
            out.insert(hash, r[1].int());
        },
    )
    .unwrap();
    out
}

fn kill9(pid: u32) {
    assert!(send_signal("-KILL", &pid.to_string()), "kill -9 {pid}");
}

#[test]
fn a_cluster_in_namespaces_shares_swarms_and_survives_its_failures() {
    let cluster = Cluster::up();
    let lb = format!("{NET}.0.1");

    // 1. A peer announced through node 1 is in node 2's and node 3's answers and scrapes.
    let h = [0x71; 20];
    announce_on(1, h, 1, 7001, 100, Event::Started);
    wait_until("nodes 2 and 3 count node 1's leecher", WAIT, || {
        scrape(2, h) == (0, 0, 1) && scrape(3, h) == (0, 0, 1)
    });
    let body = announce_on(3, h, 3, 7003, 0, Event::Started);
    assert_eq!(peers(&body, "peers")[4..6], 7001u16.to_be_bytes());

    // 2. libtorrent over HTTP and over UDP through the balancer, on two different nodes.
    let ips: Vec<String> = (2..=9).map(|i| format!("{NET}.0.{i}")).collect();
    let http_nodes: Vec<u8> = ips.iter().map(|ip| http_node_of(ip, &lb)).collect();
    let udp_nodes: Vec<u8> = ips.iter().map(|ip| udp_node_of(ip, &lb)).collect();
    let (seed, leech) = (0..ips.len())
        .flat_map(|i| (0..ips.len()).map(move |j| (i, j)))
        .find(|&(i, j)| i != j && http_nodes[i] != udp_nodes[j])
        .expect("two clients the balancer sends to different nodes");
    let work = data_dir().join("clients");
    std::fs::create_dir_all(&work).unwrap();
    let swarm = repo().join("tests/clients/swarm.py");
    let out = Command::new("ip")
        .args(["netns", "exec", &format!("{TAG}-c"), PYTHON])
        .arg(&swarm)
        .args(["--tracker", &format!("http://{lb}:6969/announce")])
        .args(["--leech-tracker", &format!("udp://{lb}:6969/announce")])
        .args(["--scrape", &format!("http://{lb}:6969/scrape")])
        .args(["--seed-ip", &ips[seed], "--leech-ip", &ips[leech]])
        .args([
            "--seed-port",
            "6881",
            "--leech-port",
            "6882",
            "--timeout",
            "90",
        ])
        .arg("--workdir")
        .arg(&work)
        .stdin(Stdio::null())
        .output()
        .expect("the swarm script runs");
    let line = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "seeder on node {} (HTTP), leecher on node {} (UDP): {line}{}",
        http_nodes[seed],
        udp_nodes[leech],
        String::from_utf8_lossy(&out.stderr)
    );

    // 3. kill -9 of a node under load.
    let victim = http_nodes[0];
    let other = if victim == 1 { 2 } else { 1 };
    let load = spawn_load(&lb, "8", "kill-node");
    std::thread::sleep(Duration::from_secs(3));
    kill9(cluster.pid(&format!("n{victim}")));
    let origin = format!("hotpath_cluster_peers{{origin=\"{victim}\"}}");
    let result = load_result(load);
    // The other nodes still list the dead node's peers (they expire on the peer timeout).
    wait_until(
        "the dead node's peers tallied on another node",
        WAIT,
        || metric(other, &origin) > 0.0,
    );
    let acked: Vec<String> = result["acked"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert!(acked.len() > 10, "{result}");
    // Its clients moved: the balancer sent the load's later requests to live nodes.
    let sent = result["sent"].as_u64().unwrap();
    assert!(
        (acked.len() as u64) * 2 > sent,
        "most of the load went through: {result}"
    );
    // Its UDP clients too: udp-health points its slot of the hash at a live node.
    if let Some(j) = udp_nodes.iter().position(|&n| n == victim) {
        let ip = &ips[j];
        wait_until("a UDP client of the dead node answered", WAIT, || {
            Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    &format!("{TAG}-c"),
                    PYTHON,
                    "-c",
                    UDP_FROM,
                    ip,
                    &lb,
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        });
    }
    // Back, it replays its journal: every acknowledged completion is in the database.
    let out = cluster.script(&["start-node", &victim.to_string()]);
    assert!(
        out.status.success(),
        "{}",
        cluster.log(&format!("n{victim}"))
    );
    wait_until(
        "every acknowledged completion in the database",
        WAIT,
        || {
            let db = completed_in_db();
            acked.iter().all(|h| db.get(h).copied().unwrap_or(0) >= 1)
        },
    );

    // 4. kill -9 of a Redis master under load through node 1: no request fails; the
    // exchange resumes after the failover and the nodes converge.
    let nodes = Command::new("ip")
        .args(["netns", "exec", &format!("{TAG}-r"), "redis-cli"])
        .args([
            "-h",
            &format!("{NET}.2.20"),
            "-p",
            "7000",
            "CLUSTER",
            "NODES",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&nodes.stdout).into_owned();
    let master_port = text
        .lines()
        .find(|l| l.contains("master") && !l.contains("fail"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|a| a.split(['@', ':']).nth(1))
        .expect("a master")
        .to_string();
    let fills = |n: u8| metric(n, "hotpath_cluster_fills_total");
    let fills_before: Vec<f64> = (1..=3).map(fills).collect();
    let killer = {
        let pid = cluster.pid(&format!("redis-{master_port}"));
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(500));
            kill9(pid);
        })
    };
    let mut failed = 0;
    let started = Instant::now();
    let mut n = 0u16;
    while started.elapsed() < Duration::from_secs(4) {
        let mut hash = [0x72; 20];
        hash[..2].copy_from_slice(&n.to_le_bytes());
        let r = Client::connect(node_http(1)).get(&announce_target(&announce(
            hash,
            1,
            7100,
            100,
            Event::Started,
        )));
        if r.status != 200 || failure(&r.body).is_some() {
            failed += 1;
        }
        n += 1;
    }
    killer.join().unwrap();
    assert_eq!(failed, 0, "of {n} announces");
    let probe = [0x73; 20];
    announce_on(1, probe, 5, 7005, 100, Event::Started);
    wait_until(
        "the exchange resumes after the failover",
        Duration::from_secs(60),
        || {
            // Announced again until it lands (a publish during the failover may be dropped).
            announce_on(1, probe, 5, 7005, 100, Event::None);
            scrape(2, probe).2 == 1 && scrape(3, probe).2 == 1
        },
    );
    // A node that lost Redis fills its replica again, reads the database's completed counts,
    // and refills after the next snapshots: each finishes that before the next step. (A
    // completion made elsewhere while a node's read of the database is still on its way is
    // counted twice there: the read has it, and its delta comes on top. ARCHITECTURE.md.)
    wait_until(
        "the nodes' fills after the failover",
        Duration::from_secs(60),
        || {
            (1..=3u8).all(|n| {
                let d = fills(n) - fills_before[usize::from(n) - 1];
                d == 0.0 || d >= 2.0
            })
        },
    );

    // 5. Node 3 cut off from Redis (its back link down) answers from memory, and catches up
    // once the link is back.
    let link = format!("{TAG}n3b");
    let set_link = |state: &str| {
        let ok = Command::new("ip")
            .args([
                "netns",
                "exec",
                &format!("{TAG}-n3"),
                "ip",
                "link",
                "set",
                &link,
                state,
            ])
            .status()
            .unwrap()
            .success();
        assert!(ok, "ip link set {link} {state}");
    };
    set_link("down");
    let cut = [0x74; 20];
    // A download completed on node 1 meanwhile: node 3 never hears of it.
    announce_on(1, cut, 6, 7006, 100, Event::Started);
    announce_on(1, cut, 6, 7006, 0, Event::Completed);
    // Node 3 still answers (from its own memory), through its front link.
    let body = announce_on(3, h, 3, 7003, 0, Event::None);
    assert!(
        !peers(&body, "peers").is_empty(),
        "node 3 lost node 1's peer: scrape {:?}, node 1's {:?}; victim {victim}",
        scrape(3, h),
        scrape(1, h)
    );
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(scrape(3, cut), (0, 0, 0), "node 3 is cut off");
    set_link("up");
    // The seeder from node 1's next snapshot, the completion from the database.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let seen = scrape(3, cut);
        if seen == (1, 1, 0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "node 3 did not catch up: {seen:?} (node 1: {:?}; the database: {:?}; node 3's \
             log:\n{})",
            scrape(1, cut),
            completed_in_db().get(&"74".repeat(20)),
            cluster.log("n3")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
