//! A worker thread that dies is named, and the server reports it instead of carrying on silently.

use std::io::Write;
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use hotpath_config::Config;
use hotpath_server::{RunningServer, ServerError};
use hotpath_service::{
    Context, Handled, HttpResponse, Kind, Outcome, Request, Service, ServiceWorker,
};

/// A service whose handler panics on `/boom`.
struct Fragile;

struct FragileWorker;

impl ServiceWorker for FragileWorker {
    fn http(
        &mut self,
        req: &Request<'_, '_>,
        _: &Context,
        resp: &mut HttpResponse,
    ) -> Option<Handled> {
        if req.path == "/boom" {
            panic!("handler bug");
        }
        resp.body.extend_from_slice(b"fine");
        Some((Kind::OTHER, Outcome::Ok).into())
    }

    fn udp(&mut self, _: &[u8], _: &Context, _: &mut Vec<u8>) -> (Kind, Outcome) {
        (Kind::OTHER, Outcome::Dropped)
    }
}

impl Service for Fragile {
    fn worker(&self, _: usize) -> Box<dyn ServiceWorker> {
        Box::new(FragileWorker)
    }
}

#[test]
fn a_dead_worker_is_named() {
    let mut config = Config::default();
    config.listen.http = vec!["127.0.0.1:0".parse().unwrap()];
    config.listen.udp = vec![];
    config.listen.admin = vec![];
    config.listen.ipv6 = false;
    config.server.workers = 1;
    let server = RunningServer::start(&config, Arc::new(Fragile)).unwrap();
    let mut s = TcpStream::connect(server.http_addr().unwrap()).unwrap();
    s.write_all(b"GET /boom HTTP/1.1\r\n\r\n").unwrap();
    let died = server.thread_died(Duration::from_secs(5));
    assert_eq!(died.as_deref(), Some("worker-0"));
    match server.shutdown() {
        Err(ServerError::ThreadDied(name)) => assert_eq!(name, "worker-0"),
        other => panic!("{other:?}"),
    }
}
