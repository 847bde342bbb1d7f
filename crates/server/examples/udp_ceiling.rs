//! The UDP ceiling of this machine, for `bench/compare`: the socket path of hotpath's UDP
//! workers (one SO_REUSEPORT socket, epoll readiness, recvmmsg and sendmmsg batches of 64
//! datagrams into reused buffers) answering every BEP 15 request with the smallest valid
//! answer and no tracker work: a connect with a fixed connection id, an announce with no
//! peers, a scrape with zeros. What a tracker spends per datagram beyond this is its own.
//!
//!     udp_ceiling ADDRESS        (e.g. 127.0.0.1:18081; runs until it is stopped)

use std::net::SocketAddr;

use hotpath_server::listen::udp_socket;
use hotpath_server::udp::Batch;
use mio::{Events, Interest, Poll, Token};

/// The same buffer sizes and batch as hotpath's defaults (server.udp_recv_buffer,
/// udp_send_buffer, udp_batch).
const BUFFER: usize = 8 << 20;
const BATCH: usize = 64;

/// The smallest valid answer to a BEP 15 request (nothing to a datagram too short to be one).
fn answer(req: &[u8], out: &mut Vec<u8>) {
    if req.len() < 16 {
        return;
    }
    let action = u32::from_be_bytes([req[8], req[9], req[10], req[11]]);
    let transaction = &req[12..16];
    out.extend_from_slice(&action.to_be_bytes());
    out.extend_from_slice(transaction);
    match action {
        // connect: a connection id.
        0 => out.extend_from_slice(&0x4242_4242_4242_4242u64.to_be_bytes()),
        // announce: interval, leechers, seeders; no peers.
        1 => out.extend_from_slice(&[0, 0, 7, 8, 0, 0, 0, 0, 0, 0, 0, 0]),
        // scrape: seeders, completed, leechers of each info hash asked for.
        2 => out.resize(8 + 12 * (req.len().saturating_sub(16) / 20), 0),
        _ => out.clear(),
    }
}

fn main() -> std::io::Result<()> {
    let Some(addr) = std::env::args().nth(1) else {
        eprintln!("usage: udp_ceiling ADDRESS");
        std::process::exit(2);
    };
    let addr: SocketAddr = addr.parse().map_err(std::io::Error::other)?;
    let mut socket = mio::net::UdpSocket::from_std(udp_socket(addr, BUFFER, BUFFER)?);
    let mut poll = Poll::new()?;
    poll.registry()
        .register(&mut socket, Token(0), Interest::READABLE)?;
    let mut events = Events::with_capacity(8);
    let mut batch = Batch::new(BATCH);
    loop {
        poll.poll(&mut events, None)?;
        loop {
            let n = batch.recv(&socket, addr.is_ipv6())?;
            for j in 0..n {
                batch.outs[j].clear();
                let mut out = std::mem::take(&mut batch.outs[j]);
                answer(batch.datagram(j), &mut out);
                batch.outs[j] = out;
            }
            batch.send(&socket);
            if n < BATCH {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::answer;

    fn request(action: u32, extra: usize) -> Vec<u8> {
        let mut r = 0x41727101980u64.to_be_bytes().to_vec();
        r.extend_from_slice(&action.to_be_bytes());
        r.extend_from_slice(&[9, 8, 7, 6]);
        r.resize(16 + extra, 0);
        r
    }

    #[test]
    fn answers_each_action_with_its_smallest_valid_answer() {
        let mut out = Vec::new();
        answer(&request(0, 0), &mut out);
        assert_eq!((out.len(), &out[..8]), (16, &[0, 0, 0, 0, 9, 8, 7, 6][..]));
        out.clear();
        answer(&request(1, 82), &mut out);
        assert_eq!((out.len(), &out[..8]), (20, &[0, 0, 0, 1, 9, 8, 7, 6][..]));
        out.clear();
        answer(&request(2, 3 * 20), &mut out);
        assert_eq!(
            (out.len(), &out[..8]),
            (8 + 36, &[0, 0, 0, 2, 9, 8, 7, 6][..])
        );
        for bad in [request(7, 0), vec![0; 15]] {
            out.clear();
            answer(&bad, &mut out);
            assert!(out.is_empty());
        }
    }
}
