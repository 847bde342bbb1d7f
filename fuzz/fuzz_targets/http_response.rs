//! HTTP response heads and chunked bodies as the load generator reads them from the server it
//! measures (which may be any server): the head, then the body fed in pieces of every size.
#![no_main]

use hotpath_fuzz as _;
use hotpath_wire::http::{parse_response_head, ChunkedBody};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&step, data)) = data.split_first() else {
        return;
    };
    if let Ok(Some(head)) = parse_response_head(data) {
        assert!(head.head_len <= data.len());
        if head.chunked {
            assert!(head.content_length.is_none());
        }
    }
    // The same bytes as a chunked body, whole and in pieces: both must agree.
    let whole = ChunkedBody::default().feed(data);
    let mut body = ChunkedBody::default();
    let mut at = 0;
    let piece = usize::from(step).max(1);
    let pieces = loop {
        let end = (at + piece).min(data.len());
        match body.feed(&data[at..end]) {
            Ok((used, true)) => break Ok((at + used, true)),
            Ok((used, false)) => {
                assert_eq!(used, end - at);
                at = end;
                if at == data.len() {
                    break Ok((at, false));
                }
            }
            Err(e) => break Err(e),
        }
    };
    assert_eq!(whole, pieces, "fed whole and in pieces of {piece}");
});
