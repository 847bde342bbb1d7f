//! A service may park a request it cannot answer yet (its data is being fetched): the
//! worker keeps serving other connections, keeps the parked connection's later pipelined
//! requests in order behind it, and asks again when the service wakes it.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hotpath_config::Config;
use hotpath_server::RunningServer;
use hotpath_service::{
    Context, Handled, HttpResponse, Kind, Outcome, Request, Service, ServiceWorker, Wake,
};

/// `/slow` is answerable once `ready` is set; `/fast` always is.
#[derive(Default)]
struct Gate {
    ready: AtomicBool,
    asked: AtomicU64,
    wakes: Mutex<Vec<Wake>>,
}

impl Gate {
    fn open(&self) {
        self.ready.store(true, Ordering::SeqCst);
        for w in self.wakes.lock().unwrap().iter() {
            w();
        }
    }
}

struct GateWorker(Arc<Gate>);

impl ServiceWorker for GateWorker {
    fn http(
        &mut self,
        req: &Request<'_, '_>,
        _: &Context,
        resp: &mut HttpResponse,
    ) -> Option<Handled> {
        if req.path == "/slow" {
            self.0.asked.fetch_add(1, Ordering::SeqCst);
            if !self.0.ready.load(Ordering::SeqCst) {
                return Some(Handled::Parked);
            }
        }
        resp.body.extend_from_slice(req.path.as_bytes());
        Some((Kind::OTHER, Outcome::Ok).into())
    }

    fn set_wake(&mut self, wake: Wake) {
        self.0.wakes.lock().unwrap().push(wake);
    }

    fn udp(&mut self, _: &[u8], _: &Context, _: &mut Vec<u8>) -> (Kind, Outcome) {
        (Kind::OTHER, Outcome::Dropped)
    }
}

struct GateService(Arc<Gate>);

impl Service for GateService {
    fn worker(&self, _: usize) -> Box<dyn ServiceWorker> {
        Box::new(GateWorker(self.0.clone()))
    }
}

fn read_bodies(s: &mut TcpStream, want: usize) -> Vec<String> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text = String::from_utf8_lossy(&got).into_owned();
        let bodies: Vec<String> = text
            .split("HTTP/1.1 ")
            .skip(1)
            .filter_map(|a| a.split("\r\n\r\n").nth(1).map(str::to_string))
            .collect();
        if bodies.len() >= want && bodies.iter().all(|b| b.len() == 5) || Instant::now() > deadline
        {
            return bodies;
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return bodies,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
}

#[test]
fn parked_requests_wait_in_order_while_others_are_served() {
    let mut config = Config::default();
    config.listen.http = vec!["127.0.0.1:0".parse().unwrap()];
    config.listen.udp = vec![];
    config.listen.admin = vec![];
    config.listen.ipv6 = false;
    config.server.workers = 1;
    let gate = Arc::new(Gate::default());
    let server = RunningServer::start(&config, Arc::new(GateService(gate.clone()))).unwrap();
    let addr = server.http_addr().unwrap();

    let mut parked = TcpStream::connect(addr).unwrap();
    parked
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    parked
        .write_all(
            b"GET /fast HTTP/1.1\r\n\r\nGET /slow HTTP/1.1\r\n\r\nGET /fast HTTP/1.1\r\n\r\n",
        )
        .unwrap();
    let before = read_bodies(&mut parked, 3);
    assert_eq!(before, ["/fast"], "only the answer before the parked one");

    // The same worker serves another connection meanwhile.
    let mut other = TcpStream::connect(addr).unwrap();
    other
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    other.write_all(b"GET /fast HTTP/1.1\r\n\r\n").unwrap();
    assert_eq!(read_bodies(&mut other, 1), ["/fast"]);
    let asked = gate.asked.load(Ordering::SeqCst);
    assert_eq!(asked, 1, "a parked request is not asked again until a wake");

    gate.open();
    parked
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    assert_eq!(read_bodies(&mut parked, 2), ["/slow", "/fast"], "in order");
    assert_eq!(gate.asked.load(Ordering::SeqCst), 2);
    server.shutdown().unwrap();
}
