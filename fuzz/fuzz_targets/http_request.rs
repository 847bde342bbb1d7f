//! HTTP/1.x request heads as a worker reads them: several pipelined requests in one buffer,
//! each parsed at the front of what the last left, then its query taken apart as the tracker
//! and the popups would.
#![no_main]

use hotpath_fuzz as _;
use hotpath_wire::http::{header_slots, parse_request, Limits, Parsed};
use hotpath_wire::query;
use libfuzzer_sys::fuzz_target;

const LIMITS: Limits = Limits {
    max_header_bytes: 8192,
    max_url_bytes: 4096,
    max_body_bytes: 65_536,
};

fuzz_target!(|data: &[u8]| {
    let mut at = 0;
    let mut ids = Vec::new();
    while at < data.len() {
        let mut slots = header_slots::<64>();
        match parse_request(&data[at..], &mut slots, &LIMITS) {
            Ok(Parsed::Complete(req, used)) => {
                assert!(used > 0 && used <= data.len() - at, "took {used} bytes");
                assert!(req.body.len() <= LIMITS.max_body_bytes);
                assert!(req.path.len() + req.query.len() < LIMITS.max_url_bytes + 1);
                let _ = req.accepts_gzip();
                let _ = req.header("host");
                if let Ok(a) = query::parse_announce(req.query) {
                    assert!(a.port != 0);
                }
                if query::parse_scrape(req.query, 74, &mut ids).is_ok() {
                    assert!(ids.len() <= 74);
                }
                at += used;
            }
            Ok(Parsed::Incomplete) => break,
            Err(e) => {
                assert!((400..600).contains(&e.status));
                break;
            }
        }
    }
});
