//! The private tracker's push API and its log: a request (first byte: the method; then the
//! path up to a NUL; the rest the body) decodes to checked changes or to an error with a 4xx
//! status; the changes that fit apply to a policy with small caps, which never holds more
//! than them; every logged change, and the state the log is compacted to, reads back as
//! itself. The whole input is also read as one log line.
#![no_main]

use hotpath_fuzz as _;
use hotpath_tracker::private::policy::Policy;
use hotpath_tracker::private::push::{decode, decode_line, encode_line, Call};
use hotpath_tracker::private::Rules;
use libfuzzer_sys::fuzz_target;

const METHODS: [&str; 5] = ["GET", "PUT", "DELETE", "POST", "PATCH"];

fn round_trips(op: &hotpath_tracker::private::push::Push) {
    let mut line = Vec::new();
    encode_line(op, &mut line);
    assert_eq!(line.iter().filter(|&&b| b == b'\n').count(), 1);
    assert_eq!(decode_line(&line).as_ref(), Some(op));
}

fuzz_target!(|data: &[u8]| {
    if let Some(op) = decode_line(data) {
        assert!(!op.is_registry());
        round_trips(&op);
    }
    let Some((&m, rest)) = data.split_first() else {
        return;
    };
    let method = METHODS[usize::from(m) % METHODS.len()];
    let split = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
    let Ok(path) = std::str::from_utf8(&rest[..split]) else {
        return;
    };
    let body = rest.get(split + 1..).unwrap_or_default();
    let ops = match decode(method, path, body) {
        Err(e) => {
            assert!((400..500).contains(&e.status), "{e:?}");
            assert!(!e.message.is_empty());
            return;
        }
        Ok(Call::Push(ops)) => ops,
        Ok(_) => return,
    };
    assert!(ops.len() <= hotpath_tracker::private::push::MAX_BATCH);
    let mut policy = Policy::new(Rules::default(), 8, 4);
    let at = 1_000;
    for op in &ops {
        assert!(op.check().is_ok());
        if !op.is_registry() {
            round_trips(op);
        }
        if policy.room_for(std::slice::from_ref(op), at).is_ok() {
            policy.apply(op);
        }
        assert!(policy.tokens() <= 8 && policy.personal() <= 4);
    }
    for op in policy.snapshot(at) {
        round_trips(&op);
    }
});
