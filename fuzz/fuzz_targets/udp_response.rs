//! BEP 15 answers as the load generator reads them from the tracker it measures.
#![no_main]

use hotpath_fuzz as _;
use hotpath_wire::udp::{parse_response, Response};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match parse_response(data) {
        Ok(Response::Announce { peers, .. }) => assert!(peers.len() + 20 == data.len()),
        Ok(Response::Scrape { entries, .. }) => assert!(entries.len() % 12 == 0),
        Ok(Response::Connect { .. } | Response::Error { .. }) | Err(_) => {}
    }
});
