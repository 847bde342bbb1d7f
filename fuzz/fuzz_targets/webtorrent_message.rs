//! WebTorrent messages (JSON text from a WebSocket): whatever the bytes, a message or an error
//! that names an action the reference client keeps its socket for, never a panic; a parsed
//! announce written back parses to the same announce.
#![no_main]

use hotpath_fuzz as _;
use hotpath_wire::webtorrent::{parse, write_client_announce, Message, MAX_SCRAPE_HASHES};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match parse(data) {
        Ok(Message::Announce(a)) => {
            let mut again = Vec::new();
            write_client_announce(&mut again, &a);
            assert_eq!(parse(&again).ok(), Some(Message::Announce(a)));
        }
        Ok(Message::Scrape(hashes)) => {
            assert!(!hashes.is_empty() && hashes.len() <= MAX_SCRAPE_HASHES)
        }
        Ok(Message::Answer(_)) => {}
        Err(e) => assert!(e.action == "announce" || e.action == "scrape"),
    }
});
