//! Cluster mode against a real Redis Cluster (3 masters, 3 replicas, on loopback): three
//! nodes share their swarms, any node accepts a UDP connection id another issued, leavers and
//! completions travel too, and a message not signed with the cluster's secret changes nothing.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::redis_cluster::RedisCluster;
use common::*;
use hotpath_config::Config;
use hotpath_server::RunningServer;
use hotpath_wire::query::Event;
use hotpath_wire::udp::{self, Response};

const SECRET: &str = "a cluster secret for the tests";
const WAIT: Duration = Duration::from_secs(20);

fn node_config(redis: &RedisCluster, id: u8, prefix: &str) -> Config {
    let mut c = test_config();
    c.cluster.enabled = true;
    c.cluster.node_id = id;
    c.cluster.redis = redis.seeds();
    c.cluster.secret = SECRET.into();
    c.cluster.prefix = prefix.into();
    c.cluster.publish_ms = 20;
    c.cluster.groups = 8;
    // Peers by origin are tallied by the sweep.
    c.tracker.sweep_interval_secs = 1;
    c
}

struct Node {
    server: RunningServer,
    http: SocketAddr,
    udp: SocketAddr,
    admin: SocketAddr,
}

fn node(redis: &RedisCluster, id: u8, prefix: &str) -> Node {
    node_with(node_config(redis, id, prefix))
}

fn node_with(config: Config) -> Node {
    let server = start(&config);
    let n = Node {
        http: server.http_addr().unwrap(),
        udp: server.udp_addr().unwrap(),
        admin: server.admin_addr().unwrap(),
        server,
    };
    // As a balancer's health check: ready once the replica is filled.
    wait_until("the node is ready", WAIT, || {
        Client::connect(n.http).get("/healthz").status == 200
    });
    assert_eq!(metric(n.admin, "hotpath_cluster_redis_up"), 1.0);
    n
}

fn metric(admin: SocketAddr, name: &str) -> f64 {
    metric_at(admin, name).unwrap_or(f64::NAN)
}

/// An HTTP announce's body.
fn http_announce(at: SocketAddr, hash: [u8; 20], n: u8, port: u16, left: u64, e: Event) -> Vec<u8> {
    let mut a = announce(hash, n, port, left, e);
    a.numwant = Some(50);
    let r = Client::connect(at).get(&announce_target(&a));
    assert_eq!(r.status, 200);
    assert_eq!(failure(&r.body), None);
    r.body
}

/// (seeders, completed, leechers) of `hash`, by a UDP scrape.
fn scrape(at: SocketAddr, hash: [u8; 20]) -> (u32, u32, u32) {
    let mut c = Udp::new(at);
    c.connect();
    c.scrape(hash)
}

fn ports(compact: &[u8]) -> Vec<u16> {
    compact
        .chunks(6)
        .map(|p| u16::from_be_bytes([p[4], p[5]]))
        .collect()
}

#[test]
fn three_nodes_share_their_swarms_through_redis_cluster() {
    let redis = RedisCluster::start(3, 1);
    let nodes: Vec<Node> = (1..=3).map(|i| node(&redis, i, "t1")).collect();
    let h = [0x51; 20];

    // A leecher announced to node 1 is handed out by node 2 and counted by node 3.
    http_announce(nodes[0].http, h, 1, 7001, 100, Event::Started);
    wait_until("node 3 counts the leecher of node 1", WAIT, || {
        scrape(nodes[2].udp, h) == (0, 0, 1)
    });
    let body = http_announce(nodes[1].http, h, 2, 7002, 0, Event::Started);
    assert_eq!(ports(&peers(&body, "peers")), [7001]);
    assert_eq!((int(&body, "complete"), int(&body, "incomplete")), (1, 1));

    // A UDP connection id from node 1 is good on node 2.
    let mut c = Udp::new(nodes[0].udp);
    c.connect();
    c.server = nodes[1].udp;
    let r = c.announce(h, 3, 7003, 100, Event::Started);
    let Response::Announce { peers, .. } = udp::parse_response(&r).unwrap() else {
        panic!("node 2 refused node 1's connection id: {r:?}")
    };
    let mut got = ports(peers);
    got.sort();
    assert_eq!(got, [7001, 7002]);

    // A completion on node 1 counts on every node; a leaver leaves every node.
    http_announce(nodes[0].http, h, 1, 7001, 0, Event::Completed);
    wait_until("node 3 sees the completion", WAIT, || {
        scrape(nodes[2].udp, h) == (2, 1, 1)
    });
    http_announce(nodes[0].http, h, 1, 7001, 0, Event::Stopped);
    wait_until("node 2 and 3 drop the leaver", WAIT, || {
        scrape(nodes[1].udp, h) == (1, 1, 1) && scrape(nodes[2].udp, h) == (1, 1, 1)
    });

    let admin = nodes[2].admin;
    assert!(metric(admin, "hotpath_cluster_messages_received_total") >= 2.0);
    assert_eq!(
        metric(nodes[0].admin, "hotpath_cluster_deltas_dropped_total"),
        0.0
    );
    // Node 3 holds the two peers that announced to node 2, none of its own.
    wait_until("node 3's peers by origin", WAIT, || {
        metric(admin, "hotpath_cluster_peers{origin=\"2\"}") == 2.0
    });
    assert!(metric(admin, "hotpath_cluster_peers{origin=\"3\"}").is_nan());
    for n in nodes {
        n.server.shutdown().unwrap();
    }
}

#[test]
fn messages_not_signed_with_the_secret_are_refused_whole() {
    let redis = RedisCluster::start(3, 0);
    let n = node(&redis, 1, "t2");
    let h = [0x52; 20];
    // A well-formed message from "node 9", signed with another secret.
    let mut msg = Vec::new();
    let start = hotpath_wire::exchange::begin(&mut msg, 9, 0);
    let unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as u32;
    let d = hotpath_wire::exchange::Delta::v4(h, [127, 0, 0, 1, 0x1b, 0x59], unix);
    hotpath_wire::exchange::put(&mut msg, &d);
    hotpath_wire::exchange::seal(&mut msg, start, b"not the secret!!");
    let group = hotpath_wire::exchange::group_of(&h, 8);
    let channel = hotpath_cluster::channel("t2", group);
    // Signed with the cluster's key but sent a day ago: a replay, refused whole too.
    let key = hotpath_cluster::Keys::from_secret(SECRET, "test")
        .unwrap()
        .exchange;
    let signed = |sent_ms: u64| {
        let mut msg = Vec::new();
        let start = hotpath_wire::exchange::begin(&mut msg, 9, sent_ms);
        hotpath_wire::exchange::put(&mut msg, &d);
        hotpath_wire::exchange::seal(&mut msg, start, &key);
        msg
    };
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let replayed = signed(now_ms - 86_400_000);
    for payload in [&msg[..], b"garbage", &replayed[..]] {
        redis.command(&["SPUBLISH", &channel], payload);
    }
    wait_until("all three refused", WAIT, || {
        metric(n.admin, "hotpath_cluster_messages_refused_total") == 3.0
    });
    assert_eq!(scrape(n.udp, h), (0, 0, 0));
    // The control: the same delta, signed and fresh, is applied.
    redis.command(&["SPUBLISH", &channel], &signed(now_ms));
    wait_until("the fresh message applied", WAIT, || {
        scrape(n.udp, h) == (0, 0, 1)
    });
    n.server.shutdown().unwrap();
}

#[test]
fn a_node_that_joins_late_fills_its_replica_from_the_snapshots_before_it_is_ready() {
    let redis = RedisCluster::start(3, 0);
    let mut config = node_config(&redis, 1, "t3");
    config.cluster.snapshot_secs = 5;
    let first = node_with(config);
    let h = [0x53; 20];
    http_announce(first.http, h, 1, 7001, 0, Event::Started);
    http_announce(first.http, h, 2, 7002, 100, Event::Started);
    wait_until("node 1's snapshot", WAIT, || {
        metric(first.admin, "hotpath_cluster_snapshot_peers") == 2.0
    });
    // Node 2 never saw these announces: it has them from node 1's snapshot once it is up.
    let late = node(&redis, 2, "t3");
    assert_eq!(metric(late.admin, "hotpath_cluster_ready"), 1.0);
    assert_eq!(metric(late.admin, "hotpath_cluster_fills_total"), 1.0);
    assert_eq!(scrape(late.udp, h), (1, 0, 1));
    let body = http_announce(late.http, h, 3, 7003, 100, Event::Started);
    let mut got = ports(&peers(&body, "peers"));
    got.sort();
    assert_eq!(got, [7001, 7002]);
    late.server.shutdown().unwrap();
    first.server.shutdown().unwrap();
}

#[test]
fn a_node_without_redis_answers_from_its_own_memory() {
    // A port where no Redis listens.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut config = test_config();
    config.cluster.enabled = true;
    config.cluster.redis = vec![format!("127.0.0.1:{port}")];
    config.cluster.secret = SECRET.into();
    config.cluster.redis_timeout_ms = 200;
    let server = start(&config);
    let (http, admin) = (server.http_addr().unwrap(), server.admin_addr().unwrap());
    wait_until("ready without Redis", WAIT, || {
        Client::connect(http).get("/healthz").status == 200
    });
    let h = [0x54; 20];
    http_announce(http, h, 1, 7001, 0, Event::Started);
    let body = http_announce(http, h, 2, 7002, 100, Event::Started);
    assert_eq!(ports(&peers(&body, "peers")), [7001]);
    assert_eq!(metric(admin, "hotpath_cluster_redis_up"), 0.0);
    assert!(metric(admin, "hotpath_cluster_redis_errors_total") >= 1.0);
    server.shutdown().unwrap();
}

/// Two nodes on one database: each takes its own writer lock (a second process outside
/// cluster mode would wait, then stop), completions from both add up, and a node started
/// again reads the sum.
fn nodes_write_into_one_database(dialect: hotpath_store::Dialect, prefix: &str) {
    let redis = RedisCluster::start(3, 0);
    let db = hotpath_store::testing::test_db(dialect, "cluster");
    let config = |id: u8| {
        let mut c = node_config(&redis, id, prefix);
        c.store.url = db.url.clone();
        c.store.journal_fsync_ms = 0;
        c
    };
    let (c1, c2) = (config(1), config(2));
    let (n1, n2) = (node_with(c1.clone()), node_with(c2));
    let h = [0x55; 20];
    for (n, port, id) in [(&n1, 7001, 1), (&n2, 7002, 2)] {
        http_announce(n.http, h, id, port, 100, Event::Started);
        http_announce(n.http, h, id, port, 0, Event::Completed);
    }
    wait_until("both completions on both nodes", WAIT, || {
        scrape(n1.udp, h).1 == 2 && scrape(n2.udp, h).1 == 2
    });
    n1.server.shutdown().unwrap();
    n2.server.shutdown().unwrap();
    let mut b = hotpath_store::backend::connect(&db.url, &db.dir).unwrap();
    let mut completed = Vec::new();
    b.query("SELECT completed FROM hp_torrents", &[], &mut |r| {
        completed.push(r[0].int())
    })
    .unwrap();
    assert_eq!(completed, [2]);
    let mut workers = Vec::new();
    b.query("SELECT worker FROM hp_journal", &[], &mut |r| {
        workers.push(r[0].int() as u32)
    })
    .unwrap();
    // Each node's journals under numbers of its own.
    let base = |n| hotpath_store::journal_base(n);
    assert!(
        workers.iter().any(|&w| (base(1)..base(2)).contains(&w)),
        "{workers:?}"
    );
    assert!(
        workers.iter().any(|&w| (base(2)..base(3)).contains(&w)),
        "{workers:?}"
    );
    // Node 1 again, alone: it reads both nodes' completions back.
    let again = node_with(c1);
    assert_eq!(scrape(again.udp, h).1, 2);
    again.server.shutdown().unwrap();
}

#[test]
fn nodes_write_into_one_postgresql_database() {
    nodes_write_into_one_database(hotpath_store::Dialect::Postgres, "t5");
}

#[test]
fn nodes_write_into_one_mariadb_database() {
    nodes_write_into_one_database(hotpath_store::Dialect::Mysql, "t6");
}
