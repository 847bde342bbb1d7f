//! Helpers for the integration tests: a server on loopback port 0 and small raw clients.
#![allow(dead_code)]

pub mod browser;
pub mod netns;
pub mod redis_cluster;
pub mod tls;
pub mod ws;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hotpath_config::Config;
use hotpath_server::RunningServer;
use hotpath_wire::bencode;
use hotpath_wire::http::parse_response_head;
use hotpath_wire::query::{percent_encode, write_announce, Announce, Event};
use hotpath_wire::udp;

/// Polls `done` every 10 ms until it holds; panics naming `what` after `within`. Tests wait
/// for what they need this way, never for a fixed time: fast when the machine is, and not
/// flaky when it is slow.
pub fn wait_until(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + within;
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "waited {within:?} for {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A fresh directory for one server's data (journal, SQLite file).
pub fn data_dir() -> std::path::PathBuf {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let d = std::env::temp_dir().join(format!("hotpath-test-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A config listening on loopback port 0 only, with 2 workers, persisting to SQLite in a
/// fresh directory.
pub fn test_config() -> Config {
    let mut c = Config::default();
    c.store.data_dir = data_dir().display().to_string();
    c.listen.http = vec!["127.0.0.1:0".parse().unwrap()];
    c.listen.udp = vec!["127.0.0.1:0".parse().unwrap()];
    c.listen.admin = vec!["127.0.0.1:0".parse().unwrap()];
    c.listen.ipv6 = false;
    c.server.workers = 2;
    c.server.shutdown_grace_secs = 2;
    c
}

pub fn start(config: &Config) -> RunningServer {
    hotpath::start(config).expect("server starts")
}

/// A response: status, head text and body.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub head: String,
    pub body: Vec<u8>,
    pub close: bool,
}

/// A keep-alive HTTP client on one connection.
pub struct Client {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        Client {
            stream,
            buf: Vec::new(),
        }
    }

    /// A client on a connection made elsewhere.
    pub fn from_stream(stream: TcpStream) -> Client {
        Client {
            stream,
            buf: Vec::new(),
        }
    }

    pub fn send(&mut self, raw: &[u8]) {
        self.stream.write_all(raw).unwrap();
    }

    /// Reads one response; `None` when the server closed the connection first.
    pub fn read(&mut self) -> Option<Resp> {
        self.read_response(false)
    }

    /// Reads the answer to a HEAD request (no body, whatever Content-Length says).
    pub fn read_head(&mut self) -> Option<Resp> {
        self.read_response(true)
    }

    fn read_response(&mut self, head_only: bool) -> Option<Resp> {
        loop {
            if let Ok(Some(h)) = parse_response_head(&self.buf) {
                let len = if head_only {
                    0
                } else {
                    h.content_length.unwrap_or(0)
                };
                if self.buf.len() >= h.head_len + len {
                    let head = String::from_utf8_lossy(&self.buf[..h.head_len]).into_owned();
                    let body = self.buf[h.head_len..h.head_len + len].to_vec();
                    self.buf.drain(..h.head_len + len);
                    return Some(Resp {
                        status: h.status,
                        head,
                        body,
                        close: h.close,
                    });
                }
            }
            let mut chunk = [0u8; 65536];
            match self.stream.read(&mut chunk) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// Sends a GET and reads its response, which must come: waits up to 20 s for it (a 2-core
    /// machine running the whole suite can stall a server for more than the 5 s a probe for
    /// silence waits).
    pub fn get(&mut self, target: &str) -> Resp {
        self.request("GET", target, None, "")
    }

    /// Sends `method target` with `body` (and `Authorization: Bearer TOKEN` when `bearer`
    /// names one) and reads its response, waiting as [`Client::get`] does.
    pub fn request(
        &mut self,
        method: &str,
        target: &str,
        bearer: Option<&str>,
        body: &str,
    ) -> Resp {
        let auth = bearer.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
        self.send(
            format!(
                "{method} {target} HTTP/1.1\r\nHost: t\r\n{auth}Content-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        );
        self.stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let r = self.read();
        self.stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        r.expect("a response")
    }

    /// Whether the server closed the connection (read returns 0 or an error) within `wait`.
    pub fn closed_within(&mut self, wait: Duration) -> bool {
        self.stream.set_read_timeout(Some(wait)).unwrap();
        let mut b = [0u8; 1024];
        loop {
            match self.stream.read(&mut b) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut =>
                {
                    return false
                }
                Err(_) => return true,
            }
        }
    }
}

/// An announce for `hash` from a client with id number `n` on `port`.
pub fn announce(hash: [u8; 20], n: u8, port: u16, left: u64, event: Event) -> Announce {
    let mut peer_id = *b"-HP0001-000000000000";
    peer_id[19] = n;
    Announce {
        info_hash: hash,
        peer_id,
        port,
        uploaded: 0,
        downloaded: 0,
        left,
        event,
        compact: true,
        no_peer_id: false,
        numwant: None,
        key: None,
        ipv6: None,
        ip: None,
    }
}

pub fn announce_target(a: &Announce) -> String {
    let mut q = Vec::new();
    write_announce(&mut q, a);
    format!("/announce?{}", String::from_utf8(q).unwrap())
}

pub fn scrape_target(hashes: &[[u8; 20]]) -> String {
    let mut q = b"/scrape?".to_vec();
    for h in hashes {
        q.extend_from_slice(b"info_hash=");
        percent_encode(&mut q, h);
        q.push(b'&');
    }
    String::from_utf8(q).unwrap()
}

/// The failure reason of a bencoded body, if it is one.
pub fn failure(body: &[u8]) -> Option<String> {
    let v = bencode::decode(body).ok()?;
    v.get("failure reason")
        .and_then(|r| r.as_bytes())
        .map(|r| String::from_utf8_lossy(r).into_owned())
}

/// An integer field of a bencoded dictionary body.
pub fn int(body: &[u8], key: &str) -> i64 {
    let v = bencode::decode(body)
        .unwrap_or_else(|e| panic!("{e:?}: {:?}", String::from_utf8_lossy(body)));
    v.get(key)
        .and_then(|x| x.as_int())
        .unwrap_or_else(|| panic!("no {key}"))
}

/// The compact peers (`key` = "peers" or "peers6") of an announce answer.
pub fn peers(body: &[u8], key: &str) -> Vec<u8> {
    let v = bencode::decode(body).unwrap();
    v.get(key)
        .and_then(|x| x.as_bytes())
        .unwrap_or_default()
        .to_vec()
}

/// A UDP tracker client.
pub struct Udp {
    pub socket: UdpSocket,
    pub server: SocketAddr,
    pub connection_id: u64,
}

impl Udp {
    /// A client on the loopback address of the server's family.
    pub fn new(server: SocketAddr) -> Udp {
        let local = if server.is_ipv6() {
            "[::1]:0"
        } else {
            "127.0.0.1:0"
        };
        Udp::from(local, server)
    }

    /// A client bound to `local` (an address and port, port 0 for any).
    pub fn from(local: &str, server: SocketAddr) -> Udp {
        let socket = UdpSocket::bind(local).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(2000)))
            .unwrap();
        Udp {
            socket,
            server,
            connection_id: 0,
        }
    }

    /// Sends a datagram and waits up to `wait` for an answer.
    pub fn exchange(&self, packet: &[u8], wait: Duration) -> Option<Vec<u8>> {
        self.socket.set_read_timeout(Some(wait)).unwrap();
        self.socket.send_to(packet, self.server).unwrap();
        let mut buf = [0u8; 4096];
        match self.socket.recv_from(&mut buf) {
            Ok((n, _)) => Some(buf[..n].to_vec()),
            Err(_) => None,
        }
    }

    pub fn connect(&mut self) {
        let mut p = Vec::new();
        udp::write_connect_request(&mut p, 77);
        let r = self
            .exchange(&p, Duration::from_secs(2))
            .expect("connect answer");
        match udp::parse_response(&r).unwrap() {
            udp::Response::Connect {
                transaction_id: 77,
                connection_id,
            } => self.connection_id = connection_id,
            other => panic!("{other:?}"),
        }
    }

    /// (seeders, completed, leechers) of `hash`, by a scrape on this client's connection id.
    pub fn scrape(&self, hash: [u8; 20]) -> (u32, u32, u32) {
        let mut p = Vec::new();
        udp::write_scrape_request(&mut p, self.connection_id, 8, &[hash]);
        let r = self
            .exchange(&p, Duration::from_secs(2))
            .expect("scrape answer");
        let udp::Response::Scrape { entries, .. } = udp::parse_response(&r).unwrap() else {
            panic!("{r:?}")
        };
        let v = |i: usize| u32::from_be_bytes(entries[i..i + 4].try_into().unwrap());
        (v(0), v(4), v(8))
    }

    pub fn announce(&self, hash: [u8; 20], n: u8, port: u16, left: u64, event: Event) -> Vec<u8> {
        let a = udp::AnnounceRequest {
            connection_id: self.connection_id,
            transaction_id: 5,
            info_hash: hash,
            peer_id: [n; 20],
            downloaded: 0,
            left,
            uploaded: 0,
            event,
            ip: 0,
            key: 1,
            num_want: -1,
            port,
            options: udp::Options(&[
                2, 9, b'/', b'a', b'n', b'n', b'o', b'u', b'n', b'c', b'e', 0,
            ]),
        };
        let mut p = Vec::new();
        udp::write_announce_request(&mut p, &a);
        self.exchange(&p, Duration::from_secs(2))
            .expect("announce answer")
    }
}

/// The value of the metric line `name` (its labels written out) in the /metrics of the admin
/// listener at `admin`, if there is one.
pub fn metric_at(admin: SocketAddr, name: &str) -> Option<f64> {
    metric_in(
        &String::from_utf8(Client::connect(admin).get("/metrics").body).unwrap(),
        name,
    )
}

/// The value of the metric line `name` (its labels written out) in a `/metrics` text.
pub fn metric_in(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// Sends `signal` ("-TERM", "-KILL", …) to `target` (a PID, or `-PGID` for a process group,
/// after `--`) with kill(1); whether it was delivered.
pub fn send_signal(signal: &str, target: &str) -> bool {
    std::process::Command::new("kill")
        .args([signal, "--", target])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A `hotpath serve` process, killed (by its PID) if the test ends while it still runs; its
/// log lines are kept for the test to read.
pub struct Proc {
    pub child: std::process::Child,
    pub log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    pub http: SocketAddr,
    pub admin: Option<SocketAddr>,
}

impl Proc {
    /// Starts the binary with `config`, in `cwd`, and waits until it has started its workers.
    pub fn spawn(config: &std::path::Path, cwd: &std::path::Path) -> Proc {
        use std::io::BufRead;
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_hotpath"))
            .args(["serve", "--config"])
            .arg(config)
            .current_dir(cwd)
            .env("RUST_LOG", "info")
            // Not the test's own: a process it starts (an upgrade's successor) must not hold
            // the test harness's pipe open after the test.
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("hotpath starts");
        let stderr = child.stderr.take().unwrap();
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let lines = log.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if line.contains("workers started") {
                    let _ = tx.send(());
                }
                lines.lock().unwrap().push(line);
            }
        });
        let started = rx.recv_timeout(Duration::from_secs(30)).is_ok();
        let mut proc = Proc {
            child,
            log,
            http: "0.0.0.0:0".parse().unwrap(),
            admin: None,
        };
        assert!(started, "hotpath did not start:\n{}", proc.log_text());
        let text = proc.log_text();
        let addr = |kind: &str| {
            text.lines().find_map(|l| {
                let rest = l.split("listening on ").nth(1)?;
                rest.strip_suffix(kind)?.trim().parse::<SocketAddr>().ok()
            })
        };
        proc.http = addr("(HTTP)").expect("an HTTP listener");
        proc.admin = addr("(admin)");
        proc
    }

    /// Everything logged so far.
    pub fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// Sends `signal` (e.g. "-KILL", "-TERM") and waits for the exit; returns its status.
    pub fn signal(&mut self, signal: &str) -> std::process::ExitStatus {
        assert!(
            send_signal(signal, &self.child.id().to_string()),
            "kill {signal}"
        );
        self.wait_exit(Duration::from_secs(60))
    }

    /// Waits up to `within` for the process to exit; returns its status.
    pub fn wait_exit(&mut self, within: Duration) -> std::process::ExitStatus {
        let deadline = std::time::Instant::now() + within;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "hotpath did not exit within {within:?}:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The value of a metric line from /metrics.
    pub fn metric(&self, name: &str) -> f64 {
        metric_at(self.admin.expect("an admin listener"), name)
            .unwrap_or_else(|| panic!("no metric {name}"))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A TCP forwarder in front of a database that can be cut (connections reset, new ones
/// refused) and restored on the same port.
pub struct Proxy {
    pub addr: SocketAddr,
    up: Arc<AtomicBool>,
    /// What the proxy's thread last acted on: `up` once it listens, or is down with every
    /// carried connection reset.
    applied: Arc<AtomicBool>,
    done: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Proxy {
    pub fn start(target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let up = Arc::new(AtomicBool::new(true));
        let done = Arc::new(AtomicBool::new(false));
        let applied = Arc::new(AtomicBool::new(true));
        let (u, d, a) = (up.clone(), done.clone(), applied.clone());
        let thread = std::thread::spawn(move || {
            let mut listener = Some(listener);
            let mut pipes: Vec<TcpStream> = Vec::new();
            while !d.load(Ordering::Relaxed) {
                if !u.load(Ordering::Relaxed) {
                    // Down: no listener (connects are refused), live connections reset.
                    listener = None;
                    for p in pipes.drain(..) {
                        let _ = p.shutdown(std::net::Shutdown::Both);
                    }
                    a.store(false, Ordering::Release);
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
                let l = listener.get_or_insert_with(|| TcpListener::bind(addr).unwrap());
                a.store(true, Ordering::Release);
                l.set_nonblocking(true).unwrap();
                match l.accept() {
                    Ok((client, _)) => {
                        client.set_nonblocking(false).unwrap();
                        let Ok(server) = TcpStream::connect(target) else {
                            continue;
                        };
                        for (mut from, mut to) in [
                            (client.try_clone().unwrap(), server.try_clone().unwrap()),
                            (server.try_clone().unwrap(), client.try_clone().unwrap()),
                        ] {
                            std::thread::spawn(move || {
                                let _ = std::io::copy(&mut from, &mut to);
                                let _ = to.shutdown(std::net::Shutdown::Both);
                            });
                        }
                        pipes.push(client);
                        pipes.push(server);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
            for p in pipes {
                let _ = p.shutdown(std::net::Shutdown::Both);
            }
        });
        Proxy {
            addr,
            up,
            applied,
            done,
            thread: Some(thread),
        }
    }

    /// Takes the database down (connects refused, carried connections reset) or up again;
    /// returns once the proxy has done it.
    pub fn set_up(&self, up: bool) {
        self.up.store(up, Ordering::Relaxed);
        wait_until("the proxy to switch", Duration::from_secs(10), || {
            self.applied.load(Ordering::Acquire) == up
        });
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `url` with its host and port replaced by `addr`. MySQL is told to stay on TCP: by default
/// its client moves a loopback connection to the server's Unix socket, around the proxy.
pub fn via(url: &str, addr: SocketAddr) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let (auth, rest) = rest.rsplit_once('@').unwrap();
    let path = &rest[rest.find('/').unwrap()..];
    let tcp_only = if scheme == "mysql" {
        "?prefer_socket=false"
    } else {
        ""
    };
    format!("{scheme}://{auth}@{addr}{path}{tcp_only}")
}

/// The `host:port` of a database URL.
pub fn server_addr(url: &str) -> SocketAddr {
    let rest = url.split_once('@').unwrap().1;
    rest[..rest.find('/').unwrap()].parse().unwrap()
}

/// XBT's tables as its own schema file has them (MariaDB), NOT NULL columns without defaults
/// included.
pub const XBT_SCHEMA: [&str; 3] = [
    "CREATE TABLE xbt_users (uid INT NOT NULL AUTO_INCREMENT, torrent_pass CHAR(32) NOT NULL, \
     downloaded BIGINT UNSIGNED NOT NULL DEFAULT 0, uploaded BIGINT UNSIGNED NOT NULL DEFAULT \
     0, PRIMARY KEY (uid))",
    "CREATE TABLE xbt_torrents (tid INT NOT NULL AUTO_INCREMENT, info_hash BINARY(20) NOT \
     NULL, seeders INT NOT NULL DEFAULT 0, leechers INT NOT NULL DEFAULT 0, completed INT NOT \
     NULL DEFAULT 0, flags INT NOT NULL DEFAULT 0, mtime INT NOT NULL, ctime INT NOT NULL, \
     PRIMARY KEY (tid), UNIQUE KEY (info_hash))",
    "CREATE TABLE xbt_peers (tid INT NOT NULL, uid INT NOT NULL, active TINYINT NOT NULL, \
     completed INT NOT NULL, downloaded BIGINT UNSIGNED NOT NULL, `left` BIGINT UNSIGNED NOT \
     NULL, uploaded BIGINT UNSIGNED NOT NULL, mtime INT NOT NULL, PRIMARY KEY (tid, uid), KEY \
     (uid))",
];

/// TorrentPier's tracker tables as its schema has them (MariaDB), the columns hotpath reads
/// and writes with those beside them.
/// Gazelle's tables as its schema has them (the columns Ocelot reads and writes, and NOT
/// NULL ones it never fills).
pub const GAZELLE_SCHEMA: [&str; 8] = [
    "CREATE TABLE users_main (ID INT UNSIGNED NOT NULL AUTO_INCREMENT, Username VARCHAR(20) \
     NOT NULL, IP VARCHAR(15) NOT NULL DEFAULT '0.0.0.0', Enabled ENUM('0','1','2') NOT NULL \
     DEFAULT '0', Visible ENUM('1','0') NOT NULL DEFAULT '1', can_leech TINYINT NOT NULL \
     DEFAULT 1, torrent_pass CHAR(32) NOT NULL, PRIMARY KEY (ID))",
    "CREATE TABLE torrents (ID INT NOT NULL AUTO_INCREMENT, GroupID INT NOT NULL, info_hash \
     BLOB NOT NULL, FreeTorrent ENUM('0','1','2') NOT NULL DEFAULT '0', Size BIGINT NOT NULL \
     DEFAULT 0, PRIMARY KEY (ID), UNIQUE KEY InfoHash (info_hash(40)))",
    "CREATE TABLE users_leech_stats (UserID INT UNSIGNED NOT NULL, Uploaded BIGINT UNSIGNED \
     NOT NULL DEFAULT 0, Downloaded BIGINT UNSIGNED NOT NULL DEFAULT 0, PRIMARY KEY (UserID))",
    "CREATE TABLE torrents_leech_stats (TorrentID INT NOT NULL, Seeders INT UNSIGNED NOT NULL \
     DEFAULT 0, Leechers INT UNSIGNED NOT NULL DEFAULT 0, Snatched INT UNSIGNED NOT NULL \
     DEFAULT 0, Balance BIGINT NOT NULL DEFAULT 0, last_action DATETIME NULL, PRIMARY KEY \
     (TorrentID))",
    "CREATE TABLE users_freeleeches (UserID INT NOT NULL, TorrentID INT NOT NULL, Time \
     DATETIME NOT NULL, Expired TINYINT(1) NOT NULL DEFAULT 0, Downloaded BIGINT NOT NULL \
     DEFAULT 0, Uses INT NOT NULL DEFAULT 1, PRIMARY KEY (UserID, TorrentID))",
    "CREATE TABLE xbt_files_users (uid INT NOT NULL, active TINYINT(1) NOT NULL DEFAULT 1, \
     announced INT NOT NULL DEFAULT 0, completed TINYINT(1) NOT NULL DEFAULT 0, downloaded \
     BIGINT NOT NULL DEFAULT 0, remaining BIGINT NOT NULL DEFAULT 0, uploaded BIGINT NOT NULL \
     DEFAULT 0, upspeed INT UNSIGNED NOT NULL DEFAULT 0, downspeed INT UNSIGNED NOT NULL \
     DEFAULT 0, corrupt BIGINT NOT NULL DEFAULT 0, timespent INT UNSIGNED NOT NULL DEFAULT 0, \
     useragent VARCHAR(51) NOT NULL DEFAULT '', connectable TINYINT NOT NULL DEFAULT 1, \
     peer_id BINARY(20) NOT NULL, fid INT NOT NULL, mtime INT NOT NULL DEFAULT 0, ip \
     VARCHAR(15) NOT NULL DEFAULT '', PRIMARY KEY (peer_id, fid, uid))",
    "CREATE TABLE xbt_snatched (uid INT NOT NULL DEFAULT 0, tstamp INT NOT NULL, fid INT NOT \
     NULL, IP VARCHAR(15) NOT NULL, seedtime INT NOT NULL DEFAULT 0)",
    "CREATE TABLE xbt_client_whitelist (id INT UNSIGNED NOT NULL AUTO_INCREMENT, peer_id \
     VARCHAR(20), vstring VARCHAR(200) DEFAULT '', PRIMARY KEY (id), UNIQUE KEY (peer_id))",
];

pub const TORRENTPIER_SCHEMA: [&str; 3] = [
    "CREATE TABLE bb_bt_users (user_id MEDIUMINT NOT NULL DEFAULT 0, auth_key CHAR(20) \
     CHARACTER SET utf8mb3 COLLATE utf8mb3_bin NOT NULL DEFAULT '', u_up_total BIGINT \
     UNSIGNED NOT NULL DEFAULT 0, u_down_total BIGINT UNSIGNED NOT NULL DEFAULT 0, \
     u_up_release BIGINT UNSIGNED NOT NULL DEFAULT 0, u_up_bonus BIGINT UNSIGNED NOT NULL \
     DEFAULT 0, PRIMARY KEY (user_id), UNIQUE KEY (auth_key))",
    "CREATE TABLE bb_bt_torrents (topic_id MEDIUMINT UNSIGNED NOT NULL DEFAULT 0, \
     info_hash VARBINARY(20) DEFAULT NULL, poster_id MEDIUMINT NOT NULL DEFAULT 0, \
     tor_type TINYINT(1) NOT NULL DEFAULT 0, complete_count MEDIUMINT UNSIGNED NOT NULL \
     DEFAULT 0, PRIMARY KEY (topic_id), UNIQUE KEY (info_hash))",
    "CREATE TABLE bb_bt_tracker (peer_hash VARCHAR(32) CHARACTER SET utf8mb3 COLLATE \
     utf8mb3_bin NOT NULL DEFAULT '', topic_id MEDIUMINT UNSIGNED NOT NULL DEFAULT 0, \
     peer_id VARCHAR(20) NOT NULL DEFAULT '0', user_id MEDIUMINT NOT NULL DEFAULT 0, ip \
     VARCHAR(42) DEFAULT NULL, ipv6 VARCHAR(42) DEFAULT NULL, port SMALLINT UNSIGNED NOT \
     NULL DEFAULT 0, client VARCHAR(51) NOT NULL DEFAULT 'Unknown', seeder TINYINT(1) NOT \
     NULL DEFAULT 0, releaser TINYINT(1) NOT NULL DEFAULT 0, tor_type TINYINT(1) NOT NULL \
     DEFAULT 0, uploaded BIGINT UNSIGNED NOT NULL DEFAULT 0, downloaded BIGINT UNSIGNED \
     NOT NULL DEFAULT 0, remain BIGINT UNSIGNED NOT NULL DEFAULT 0, speed_up INT UNSIGNED \
     NOT NULL DEFAULT 0, speed_down INT UNSIGNED NOT NULL DEFAULT 0, up_add BIGINT \
     UNSIGNED NOT NULL DEFAULT 0, down_add BIGINT UNSIGNED NOT NULL DEFAULT 0, update_time \
     INT NOT NULL DEFAULT 0, complete_percent BIGINT NOT NULL DEFAULT 0, complete INT NOT \
     NULL DEFAULT 0, PRIMARY KEY (peer_hash), KEY (topic_id), KEY (user_id)) \
     DEFAULT CHARSET utf8mb4",
];

/// What TorrentPier's cron does with `bb_bt_tracker`: adds up_add and down_add to the users'
/// totals, zeroes them, deletes rows not updated since `expire`.
pub fn torrentpier_cron(site: &mut dyn hotpath_store::Backend, expire: i64) {
    // Per torrent and user, as its cron sums them: a releaser's upload also counts as release.
    site.execute(
        "UPDATE bb_bt_users u JOIN (SELECT user_id, SUM(up) AS up, SUM(down) AS down, \
         SUM(rel) AS rel FROM (SELECT user_id, SUM(up_add) AS up, SUM(down_add) AS down, \
         IF(MAX(releaser), SUM(up_add), 0) AS rel FROM bb_bt_tracker GROUP BY topic_id, \
         user_id) x GROUP BY user_id) t ON u.user_id = t.user_id SET u.u_up_total = \
         u.u_up_total + t.up, u.u_down_total = u.u_down_total + t.down, u.u_up_release = \
         u.u_up_release + t.rel",
    )
    .unwrap();
    site.execute("UPDATE bb_bt_tracker SET up_add = 0, down_add = 0")
        .unwrap();
    site.execute(&format!(
        "DELETE FROM bb_bt_tracker WHERE update_time < {expire}"
    ))
    .unwrap();
}

/// UNIT3D's tables as its schema file has them (the columns UNIT3D-Announce reads and writes,
/// and NOT NULL ones it never fills).
pub const UNIT3D_SCHEMA: [&str; 10] = [
    "CREATE TABLE users (id INT UNSIGNED NOT NULL AUTO_INCREMENT, username VARCHAR(255) NOT \
     NULL, passkey VARCHAR(255) NOT NULL, group_id INT NOT NULL, uploaded BIGINT UNSIGNED NOT \
     NULL DEFAULT 0, downloaded BIGINT UNSIGNED NOT NULL DEFAULT 0, can_download TINYINT(1) \
     NOT NULL DEFAULT 1, deleted_at TIMESTAMP NULL DEFAULT NULL, PRIMARY KEY (id), UNIQUE KEY \
     (passkey))",
    "CREATE TABLE `groups` (id INT NOT NULL AUTO_INCREMENT, name VARCHAR(255) NOT NULL, slug \
     VARCHAR(255) NOT NULL, download_slots INT DEFAULT NULL, is_immune TINYINT(1) NOT NULL \
     DEFAULT 0, is_freeleech TINYINT(1) NOT NULL DEFAULT 0, is_double_upload TINYINT(1) NOT \
     NULL DEFAULT 0, PRIMARY KEY (id), UNIQUE KEY (slug))",
    "CREATE TABLE torrents (id INT UNSIGNED NOT NULL AUTO_INCREMENT, name VARCHAR(255) NOT \
     NULL, leechers INT NOT NULL DEFAULT 0, seeders INT NOT NULL DEFAULT 0, times_completed \
     INT NOT NULL DEFAULT 0, user_id INT UNSIGNED NOT NULL, free SMALLINT NOT NULL DEFAULT 0, \
     doubleup TINYINT(1) NOT NULL DEFAULT 0, status SMALLINT NOT NULL DEFAULT 0, deleted_at \
     TIMESTAMP NULL DEFAULT NULL, balance BIGINT NOT NULL DEFAULT 0, info_hash BINARY(20) NOT \
     NULL, PRIMARY KEY (id))",
    "CREATE TABLE peers (peer_id BINARY(20) NOT NULL, ip VARBINARY(16) NOT NULL, port SMALLINT \
     UNSIGNED NOT NULL, agent VARCHAR(64) NOT NULL, uploaded BIGINT UNSIGNED NOT NULL, \
     downloaded BIGINT UNSIGNED NOT NULL, `left` BIGINT UNSIGNED NOT NULL, seeder TINYINT(1) \
     NOT NULL, created_at TIMESTAMP NULL DEFAULT NULL, updated_at TIMESTAMP NULL DEFAULT NULL, \
     torrent_id INT UNSIGNED NOT NULL, user_id INT UNSIGNED NOT NULL, connectable TINYINT(1) \
     NOT NULL DEFAULT 0, active TINYINT(1) NOT NULL, visible TINYINT(1) NOT NULL, PRIMARY KEY \
     (user_id, torrent_id, peer_id))",
    "CREATE TABLE history (user_id INT UNSIGNED NOT NULL, torrent_id INT UNSIGNED NOT NULL, \
     agent VARCHAR(64) NOT NULL, uploaded BIGINT UNSIGNED NOT NULL DEFAULT 0, actual_uploaded \
     BIGINT UNSIGNED NOT NULL DEFAULT 0, client_uploaded BIGINT UNSIGNED NOT NULL, downloaded \
     BIGINT UNSIGNED NOT NULL DEFAULT 0, actual_downloaded BIGINT UNSIGNED NOT NULL DEFAULT 0, \
     client_downloaded BIGINT UNSIGNED NOT NULL, seeder TINYINT(1) NOT NULL, active TINYINT(1) \
     NOT NULL DEFAULT 1, seedtime BIGINT UNSIGNED NOT NULL DEFAULT 0, immune TINYINT(1) NOT \
     NULL, hitrun TINYINT(1) NOT NULL DEFAULT 0, prewarned_at TIMESTAMP NULL DEFAULT NULL, \
     created_at TIMESTAMP NULL DEFAULT NULL, updated_at TIMESTAMP NULL DEFAULT NULL, \
     deleted_at TIMESTAMP NULL DEFAULT NULL, completed_at DATETIME DEFAULT NULL, PRIMARY KEY \
     (user_id, torrent_id))",
    "CREATE TABLE featured_torrents (id INT UNSIGNED NOT NULL AUTO_INCREMENT, user_id INT \
     UNSIGNED NOT NULL, torrent_id INT UNSIGNED NOT NULL, PRIMARY KEY (id))",
    "CREATE TABLE freeleech_tokens (id INT UNSIGNED NOT NULL AUTO_INCREMENT, user_id INT \
     UNSIGNED NOT NULL, torrent_id INT UNSIGNED NOT NULL, PRIMARY KEY (id))",
    "CREATE TABLE personal_freeleeches (id INT UNSIGNED NOT NULL AUTO_INCREMENT, user_id INT \
     UNSIGNED NOT NULL, PRIMARY KEY (id))",
    "CREATE TABLE blacklist_clients (id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT, name \
     VARCHAR(255) NOT NULL, peer_id_prefix VARCHAR(255) NOT NULL, PRIMARY KEY (id))",
    "CREATE TABLE unregistered_info_hashes (user_id INT UNSIGNED NOT NULL, info_hash \
     BINARY(20) NOT NULL, created_at TIMESTAMP NULL DEFAULT NULL, updated_at TIMESTAMP NULL \
     DEFAULT NULL, PRIMARY KEY (info_hash, user_id), FOREIGN KEY (user_id) REFERENCES \
     users (id))",
];
