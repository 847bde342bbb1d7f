//! WebSocket frames as a client sends them: whatever the bytes, a refusal, "incomplete" with
//! a length past what is there, or a frame within them whose payload respects the limit,
//! never a panic. Decoded frames are taken one after the other, as the server does.
#![no_main]

use hotpath_fuzz as _;
use hotpath_wire::ws::{close_code, decode, Decoded, Opcode};
use libfuzzer_sys::fuzz_target;

const MAX: usize = 4096;

fuzz_target!(|data: &[u8]| {
    let mut buf = data.to_vec();
    let mut at = 0;
    while at < buf.len() {
        match decode(&mut buf[at..], MAX) {
            Ok(Decoded::Incomplete(n)) => {
                assert!(n > buf.len() - at);
                break;
            }
            Ok(Decoded::Frame(f)) => {
                assert!(f.payload_len <= MAX);
                assert!(f.size() <= buf.len() - at);
                if f.opcode.is_control() {
                    assert!(f.fin && f.payload_len <= 125);
                }
                if f.opcode == Opcode::Close {
                    let _ = close_code(f.payload(&buf[at..]));
                }
                at += f.size();
            }
            Err(_) => break,
        }
    }
});
