//! Answers that acknowledge a change wait for the service's commit: one commit per event-loop
//! turn, however many such answers it holds, and none of them is sent when the commit fails.

use std::io::{Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hotpath_config::Config;
use hotpath_server::RunningServer;
use hotpath_service::{
    Context, Handled, HttpResponse, Kind, Outcome, Request, Service, ServiceWorker,
};

/// A service whose `/change` (or a UDP datagram "change") changes something that its commit
/// makes durable; the commit succeeds while `durable` is set.
#[derive(Default)]
struct Journaled {
    durable: AtomicBool,
    commits: AtomicU64,
}

struct JournaledWorker {
    service: Arc<Journaled>,
    pending: usize,
}

impl ServiceWorker for JournaledWorker {
    fn http(
        &mut self,
        req: &Request<'_, '_>,
        _: &Context,
        resp: &mut HttpResponse,
    ) -> Option<Handled> {
        if req.path == "/change" {
            self.pending += 1;
        }
        resp.body.extend_from_slice(b"done");
        Some((Kind::OTHER, Outcome::Ok).into())
    }

    fn udp(&mut self, packet: &[u8], _: &Context, out: &mut Vec<u8>) -> (Kind, Outcome) {
        if packet == b"change" {
            self.pending += 1;
        }
        out.extend_from_slice(b"done");
        (Kind::OTHER, Outcome::Ok)
    }

    fn uncommitted(&self) -> bool {
        self.pending > 0
    }

    fn commit(&mut self) -> bool {
        self.service.commits.fetch_add(1, Ordering::SeqCst);
        self.pending = 0;
        self.service.durable.load(Ordering::SeqCst)
    }
}

struct Shared(Arc<Journaled>);

impl Service for Shared {
    fn worker(&self, _: usize) -> Box<dyn ServiceWorker> {
        Box::new(JournaledWorker {
            service: self.0.clone(),
            pending: 0,
        })
    }
}

fn start() -> (RunningServer, Arc<Journaled>) {
    let mut config = Config::default();
    config.listen.http = vec!["127.0.0.1:0".parse().unwrap()];
    config.listen.udp = vec!["127.0.0.1:0".parse().unwrap()];
    config.listen.admin = vec![];
    config.listen.ipv6 = false;
    config.server.workers = 1;
    let service = Arc::new(Journaled::default());
    let server = RunningServer::start(&config, Arc::new(Shared(service.clone()))).unwrap();
    (server, service)
}

/// Sends `raw` in one write and reads until `answers` answers or the connection closes.
fn exchange(server: &RunningServer, raw: &[u8], answers: usize) -> String {
    let mut s = TcpStream::connect(server.http_addr().unwrap()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(raw).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while String::from_utf8_lossy(&got).matches("done").count() < answers {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

#[test]
fn pipelined_changes_share_one_commit_and_plain_answers_need_none() {
    let (server, service) = start();
    service.durable.store(true, Ordering::SeqCst);
    let text = exchange(&server, b"GET /plain HTTP/1.1\r\n\r\n", 1);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert_eq!(service.commits.load(Ordering::SeqCst), 0);
    let five = "GET /change HTTP/1.1\r\n\r\n".repeat(5);
    let text = exchange(&server, five.as_bytes(), 5);
    assert_eq!(text.matches("HTTP/1.1 200").count(), 5);
    assert_eq!(service.commits.load(Ordering::SeqCst), 1);
    server.shutdown().unwrap();
}

#[test]
fn answers_are_withheld_when_the_commit_fails() {
    let (server, service) = start();
    let text = exchange(&server, b"GET /change HTTP/1.1\r\n\r\n", 1);
    assert_eq!(text, "", "the connection closes without an answer");
    assert_eq!(service.commits.load(Ordering::SeqCst), 1);

    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    udp.send_to(b"change", server.udp_addr().unwrap()).unwrap();
    let mut buf = [0u8; 64];
    assert!(
        udp.recv_from(&mut buf).is_err(),
        "no datagram acknowledges it"
    );
    service.durable.store(true, Ordering::SeqCst);
    udp.send_to(b"change", server.udp_addr().unwrap()).unwrap();
    let (n, _) = udp.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"done");
    server.shutdown().unwrap();
}
