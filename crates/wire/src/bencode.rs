//! Bencode (BEP 3): writing into a caller's buffer, and a bounded decoder for responses.

/// Appends `i<n>e`.
#[inline]
pub fn put_int(out: &mut Vec<u8>, n: i64) {
    out.push(b'i');
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    out.push(b'e');
}

/// Appends a byte string `<len>:<bytes>`.
#[inline]
pub fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_len(out, bytes.len());
    out.extend_from_slice(bytes);
}

/// Appends the length prefix of a byte string whose bytes the caller appends next.
#[inline]
pub fn put_len(out: &mut Vec<u8>, len: usize) {
    out.extend_from_slice(itoa::Buffer::new().format(len).as_bytes());
    out.push(b':');
}

/// Appends a whole `d14:failure reason<len>:<reason>e` dictionary.
pub fn put_failure(out: &mut Vec<u8>, reason: &str) {
    out.extend_from_slice(b"d14:failure reason");
    put_bytes(out, reason.as_bytes());
    out.push(b'e');
}

/// A decoded bencode value borrowing from the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value<'a> {
    /// An integer.
    Int(i64),
    /// A byte string.
    Bytes(&'a [u8]),
    /// A list.
    List(Vec<Value<'a>>),
    /// A dictionary, in input order.
    Dict(Vec<(&'a [u8], Value<'a>)>),
}

impl<'a> Value<'a> {
    /// The value under `key` when this is a dictionary.
    pub fn get(&self, key: &str) -> Option<&Value<'a>> {
        match self {
            Value::Dict(entries) => entries
                .iter()
                .find(|(k, _)| *k == key.as_bytes())
                .map(|(_, v)| v),
            _ => None,
        }
    }

    /// The integer, when this is one.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(n) => Some(*n),
            _ => None,
        }
    }

    /// The bytes, when this is a byte string.
    pub fn as_bytes(&self) -> Option<&'a [u8]> {
        match self {
            Value::Bytes(b) => Some(b),
            _ => None,
        }
    }
}

/// Why a bencode input did not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// The input ended inside a value.
    Truncated,
    /// A byte that cannot start or continue a value here.
    Malformed,
    /// Lists and dictionaries nest deeper than the decoder allows.
    TooDeep,
    /// Bytes follow the value.
    Trailing,
}

/// Most nesting the decoder follows.
pub const MAX_DEPTH: usize = 32;

/// Decodes exactly one value spanning the whole input.
pub fn decode(input: &[u8]) -> Result<Value<'_>, DecodeError> {
    let (value, rest) = decode_prefix(input, 0)?;
    if rest.is_empty() {
        Ok(value)
    } else {
        Err(DecodeError::Trailing)
    }
}

fn decode_prefix(input: &[u8], depth: usize) -> Result<(Value<'_>, &[u8]), DecodeError> {
    if depth > MAX_DEPTH {
        return Err(DecodeError::TooDeep);
    }
    match input.first().copied() {
        None => Err(DecodeError::Truncated),
        Some(b'i') => {
            let end = input
                .iter()
                .position(|&b| b == b'e')
                .ok_or(DecodeError::Truncated)?;
            let digits = &input[1..end];
            let valid = match digits {
                [] | [b'-'] => false,
                [b'-', b'0', ..] => false,
                [b'0', _, ..] => false,
                [b'-', rest @ ..] | rest => rest.iter().all(u8::is_ascii_digit),
            };
            if !valid {
                return Err(DecodeError::Malformed);
            }
            let n = std::str::from_utf8(digits)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or(DecodeError::Malformed)?;
            Ok((Value::Int(n), &input[end + 1..]))
        }
        Some(b'l') => {
            let mut rest = &input[1..];
            let mut items = Vec::new();
            loop {
                match rest.first() {
                    None => return Err(DecodeError::Truncated),
                    Some(b'e') => return Ok((Value::List(items), &rest[1..])),
                    Some(_) => {
                        let (v, r) = decode_prefix(rest, depth + 1)?;
                        items.push(v);
                        rest = r;
                    }
                }
            }
        }
        Some(b'd') => {
            let mut rest = &input[1..];
            let mut entries = Vec::new();
            loop {
                match rest.first() {
                    None => return Err(DecodeError::Truncated),
                    Some(b'e') => return Ok((Value::Dict(entries), &rest[1..])),
                    Some(_) => {
                        let (k, r) = decode_prefix(rest, depth + 1)?;
                        let Value::Bytes(k) = k else {
                            return Err(DecodeError::Malformed);
                        };
                        let (v, r) = decode_prefix(r, depth + 1)?;
                        entries.push((k, v));
                        rest = r;
                    }
                }
            }
        }
        Some(b'0'..=b'9') => {
            let colon = input
                .iter()
                .position(|&b| b == b':')
                .ok_or(DecodeError::Truncated)?;
            let digits = &input[..colon];
            if digits.len() > 1 && digits[0] == b'0' || !digits.iter().all(u8::is_ascii_digit) {
                return Err(DecodeError::Malformed);
            }
            let len: usize = std::str::from_utf8(digits)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or(DecodeError::Malformed)?;
            let body = &input[colon + 1..];
            if body.len() < len {
                return Err(DecodeError::Truncated);
            }
            Ok((Value::Bytes(&body[..len]), &body[len..]))
        }
        Some(_) => Err(DecodeError::Malformed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn writes_and_reads_back() {
        let mut out = Vec::new();
        out.push(b'd');
        put_bytes(&mut out, b"complete");
        put_int(&mut out, 5);
        put_bytes(&mut out, b"peers");
        put_bytes(&mut out, &[1, 2, 3, 4, 0x1a, 0xe1]);
        out.push(b'e');
        let v = decode(&out).unwrap();
        assert_eq!(v.get("complete").and_then(Value::as_int), Some(5));
        assert_eq!(
            v.get("peers").and_then(Value::as_bytes),
            Some(&[1, 2, 3, 4, 0x1a, 0xe1][..])
        );
    }

    #[test]
    fn failure_reason() {
        let mut out = Vec::new();
        put_failure(&mut out, "missing info_hash");
        assert_eq!(out, b"d14:failure reason17:missing info_hashe");
    }

    #[test]
    fn rejects_bad_input() {
        assert_eq!(decode(b"i-0e"), Err(DecodeError::Malformed));
        assert_eq!(decode(b"i03e"), Err(DecodeError::Malformed));
        assert_eq!(decode(b"ie"), Err(DecodeError::Malformed));
        assert_eq!(decode(b"5:abc"), Err(DecodeError::Truncated));
        assert_eq!(decode(b"di1ei2ee"), Err(DecodeError::Malformed));
        assert_eq!(decode(b"i1ei2e"), Err(DecodeError::Trailing));
        assert_eq!(decode(&[b'l'; 100]), Err(DecodeError::TooDeep));
        assert_eq!(decode(b"i-7e"), Ok(Value::Int(-7)));
    }

    proptest! {
        #[test]
        fn never_panics(input in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode(&input);
        }

        #[test]
        fn ints_round_trip(n in any::<i64>()) {
            let mut out = Vec::new();
            put_int(&mut out, n);
            prop_assert_eq!(decode(&out), Ok(Value::Int(n)));
        }

        #[test]
        fn bytes_round_trip(b in proptest::collection::vec(any::<u8>(), 0..300)) {
            let mut out = Vec::new();
            put_bytes(&mut out, &b);
            prop_assert_eq!(decode(&out), Ok(Value::Bytes(&b)));
        }
    }
}
