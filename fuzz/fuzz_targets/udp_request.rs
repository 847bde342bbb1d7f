//! BEP 15 datagrams with BEP 41 options, as a UDP worker reads them: whatever parses must write
//! back byte for byte, an error answer never outgrows the request (no amplification), and the
//! URL data of the options is a query the announce parser takes or refuses cleanly.
#![no_main]

use hotpath_fuzz as _;
use hotpath_wire::query::parse_announce;
use hotpath_wire::udp::{
    parse_request, write_announce_request, write_connect_request, write_error,
    write_scrape_request, ParseError, Request,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut out = Vec::new();
    match parse_request(data) {
        Ok(Request::Connect { transaction_id }) => {
            write_connect_request(&mut out, transaction_id);
            assert_eq!(out, data[..16]);
        }
        Ok(Request::Announce(a)) => {
            write_announce_request(&mut out, &a);
            assert_eq!(out, data);
            let options: Vec<_> = a.options.iter().collect();
            assert!(options.iter().all(Result::is_ok));
            let mut url = Vec::new();
            a.options.url_data(&mut url);
            assert!(url.len() <= data.len());
            let query = url.splitn(2, |&b| b == b'?').nth(1).unwrap_or(&[]);
            let _ = parse_announce(query);
        }
        Ok(Request::Scrape {
            connection_id,
            transaction_id,
            info_hashes,
        }) => {
            let hashes: Vec<[u8; 20]> = info_hashes
                .chunks(20)
                .map(|h| h.try_into().expect("20 bytes"))
                .collect();
            assert!((1..=74).contains(&hashes.len()));
            write_scrape_request(&mut out, connection_id, transaction_id, &hashes);
            assert_eq!(out, data);
        }
        Err(ParseError::Drop) => {}
        Err(ParseError::Error {
            transaction_id,
            message,
        }) => {
            write_error(&mut out, transaction_id, message, data.len());
            assert!(out.len() <= data.len(), "an error answer amplifies");
        }
    }
});
