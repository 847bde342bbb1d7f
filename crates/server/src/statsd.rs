//! The statsd exporter: every `statsd.interval_ms` the figures of /metrics go to a statsd
//! server over one connected UDP socket, made once and reused for every datagram (the Go
//! report's technique). The conversion is the registry's ([`Converter`], a codec without
//! I/O); [`run`] is the thread.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hotpath_config::StatsdConfig;

use hotpath_metrics::statsd::{packets, Converter};

use crate::worker::Shared;

/// Resolves `statsd.address` and makes the one socket, connected to it.
pub fn connect(cfg: &StatsdConfig) -> std::io::Result<(UdpSocket, SocketAddr)> {
    use std::net::ToSocketAddrs as _;
    let to = cfg
        .address
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no address"))?;
    let local: SocketAddr = if to.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = UdpSocket::bind(local)?;
    socket.connect(to)?;
    Ok((socket, to))
}

/// The exporter's thread: pushes every interval until `stop`, then once more.
pub fn run(cfg: StatsdConfig, socket: UdpSocket, shared: Arc<Shared>, stop: Arc<AtomicBool>) {
    let mut conv = Converter::new(&cfg.prefix, cfg.tags);
    let interval = Duration::from_millis(cfg.interval_ms);
    let mut last_error: Option<Instant> = None;
    let mut lines = Vec::new();
    loop {
        let next = Instant::now() + interval;
        while Instant::now() < next && !stop.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(50).min(interval));
        }
        // Read before the figures are: a stop that comes while this push is under way gets
        // one more push after it, so nothing counted before the stop is left out.
        let stopping = stop.load(Ordering::Acquire);
        lines.clear();
        conv.convert(&shared.scrape(), &mut lines);
        for p in packets(&lines, cfg.max_packet_bytes) {
            if let Err(e) = socket.send(&p) {
                // Nobody listening (ICMP refused) or a full buffer: try again next time.
                if last_error.is_none_or(|t| t.elapsed() > Duration::from_secs(60)) {
                    log::warn!("statsd: cannot send to {}: {e}", cfg.address);
                    last_error = Some(Instant::now());
                }
                break;
            }
        }
        if stopping {
            return;
        }
    }
}
