//! hotpath's wire codecs. Every function here takes bytes and returns values, or takes values
//! and appends bytes to a caller's buffer; nothing here touches a socket, a clock or shared state.
//! The server uses the decoding side of each codec, the load generator and the tests the
//! encoding side, so both are kept together and tested as round trips.
//!
//! Errors on the request path are `&'static str`: they become BitTorrent `failure reason`s,
//! BEP 15 error messages or HTTP 4xx bodies as they are, with no allocation.

pub mod bencode;
pub mod exchange;
pub mod http;
pub mod passkey;
pub mod popup_token;
pub mod proxy;
pub mod query;
pub mod udp;
pub mod webtorrent;
pub mod ws;
