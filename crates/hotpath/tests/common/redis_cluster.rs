//! A real Redis Cluster on loopback for the cluster-mode tests: `redis-server` processes in
//! cluster mode (nothing saved to disk) in a scratch directory, joined with
//! `redis-cli --cluster create`; each server stopped by its PID when the test ends.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::wait_until;

/// A running Redis Cluster.
pub struct RedisCluster {
    /// Every server's port, masters first.
    pub ports: Vec<u16>,
    servers: Vec<Child>,
    dir: PathBuf,
}

/// A port whose cluster bus port (10000 above it) is free too.
fn free_pair() -> u16 {
    loop {
        let p = fastrand::u16(20_000..30_000);
        let a = TcpListener::bind(("127.0.0.1", p));
        let b = TcpListener::bind(("127.0.0.1", p + 10_000));
        if a.is_ok() && b.is_ok() {
            return p;
        }
    }
}

fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("redis-cli runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl RedisCluster {
    /// `masters` masters with `replicas` replicas each, every slot covered.
    pub fn start(masters: usize, replicas: usize) -> RedisCluster {
        let dir = super::data_dir().join("redis-cluster");
        std::fs::create_dir_all(&dir).unwrap();
        let mut c = RedisCluster {
            ports: Vec::new(),
            servers: Vec::new(),
            dir,
        };
        for _ in 0..masters * (1 + replicas) {
            let port = free_pair();
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string()])
                .args(["--bind", "127.0.0.1", "--protected-mode", "no"])
                .args(["--cluster-enabled", "yes"])
                .args(["--cluster-config-file", &format!("nodes-{port}.conf")])
                .args(["--cluster-node-timeout", "2000"])
                .args(["--save", "", "--appendonly", "no"])
                .arg("--dir")
                .arg(&c.dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server starts (Debian's redis-server package)");
            c.ports.push(port);
            c.servers.push(child);
        }
        for &p in &c.ports {
            wait_until("redis-server answers", Duration::from_secs(20), || {
                cli(p, &["PING"]).trim() == "PONG"
            });
        }
        let nodes: Vec<String> = c.ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&nodes)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("redis-cli runs");
        assert!(
            out.status.success(),
            "redis-cli --cluster create: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        for &p in &c.ports {
            wait_until("the Redis Cluster is up", Duration::from_secs(30), || {
                cli(p, &["CLUSTER", "INFO"]).contains("cluster_state:ok")
            });
        }
        c
    }

    /// The seed addresses for `cluster.redis`.
    pub fn seeds(&self) -> Vec<String> {
        self.ports
            .iter()
            .take(2)
            .map(|p| format!("127.0.0.1:{p}"))
            .collect()
    }

    /// Runs a command through redis-cli in cluster mode (following redirects), with `last`
    /// as its last argument, bytes as they are; its output.
    pub fn command(&self, args: &[&str], last: &[u8]) -> String {
        use std::io::Write as _;
        let mut child = Command::new("redis-cli")
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.ports[0].to_string(),
                "-c",
                "-x",
            ])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("redis-cli runs");
        child.stdin.take().unwrap().write_all(last).unwrap();
        let out = child.wait_with_output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for s in &mut self.servers {
            let _ = s.kill();
            let _ = s.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
