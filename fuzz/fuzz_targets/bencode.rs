//! Bencode, as the load generator and the tests read a tracker's answers: bounded depth, and
//! whatever decodes encodes back to bytes that decode to the same value.
#![no_main]

use hotpath_fuzz as _;
use hotpath_wire::bencode::{decode, put_bytes, put_int, Value};
use libfuzzer_sys::fuzz_target;

fn encode(v: &Value<'_>, out: &mut Vec<u8>) {
    match v {
        Value::Int(n) => put_int(out, *n),
        Value::Bytes(b) => put_bytes(out, b),
        Value::List(items) => {
            out.push(b'l');
            for i in items {
                encode(i, out);
            }
            out.push(b'e');
        }
        Value::Dict(entries) => {
            out.push(b'd');
            for (k, v) in entries {
                put_bytes(out, k);
                encode(v, out);
            }
            out.push(b'e');
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(v) = decode(data) else {
        return;
    };
    let mut out = Vec::new();
    encode(&v, &mut out);
    assert_eq!(out, data, "a decoded value encodes back to its input");
    assert_eq!(decode(&out), Ok(v));
});
