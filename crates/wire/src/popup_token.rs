//! Show tokens: a click or close must name a show that happened. The token handed out with a
//! popup is the show's unix second and a keyed SipHash of (popup, second, user) under the
//! service's secret, so it cannot be forged for another user or popup and expires.
//! Format: `<second in hex>.<16 hex digits>`.

use std::hash::Hasher as _;

use siphasher::sip::SipHasher13;

/// Signs and checks show tokens under one secret.
#[derive(Clone)]
pub struct Signer {
    k0: u64,
    k1: u64,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Signer(..)")
    }
}

/// Why a token was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenError {
    /// Not a token at all.
    Malformed,
    /// Signed for another user or popup, or under another secret.
    Mismatch,
    /// Older than the allowed age (or from the future).
    Expired,
}

impl TokenError {
    /// The message for the client.
    pub fn message(self) -> &'static str {
        match self {
            TokenError::Malformed => "token: not a show token",
            TokenError::Mismatch => "token: not issued for this user and popup",
            TokenError::Expired => "token: expired",
        }
    }
}

impl Signer {
    /// A signer keyed from `secret` (any length).
    pub fn new(secret: &[u8]) -> Signer {
        let key = |salt: u64| {
            let mut h = SipHasher13::new_with_keys(salt, !salt);
            h.write(secret);
            h.finish()
        };
        Signer {
            k0: key(0x746f_6b65_6e5f_6b30),
            k1: key(0x746f_6b65_6e5f_6b31),
        }
    }

    fn mac(&self, user: &str, popup: u32, at: u64) -> u64 {
        let mut h = SipHasher13::new_with_keys(self.k0, self.k1);
        h.write(&popup.to_le_bytes());
        h.write(&at.to_le_bytes());
        h.write(user.as_bytes());
        h.finish()
    }

    /// Appends the token of a show of `popup` to `user` at unix second `at`.
    pub fn sign(&self, out: &mut Vec<u8>, user: &str, popup: u32, at: u64) {
        use std::io::Write as _;
        let _ = write!(out, "{at:x}.{:016x}", self.mac(user, popup, at));
    }

    /// Checks a token for `user` and `popup` at unix second `now`: valid when signed for
    /// them and at most `ttl` seconds old (a minute of clock skew allowed). Returns the
    /// show's unix second.
    pub fn verify(
        &self,
        token: &str,
        user: &str,
        popup: u32,
        now: u64,
        ttl: u64,
    ) -> Result<u64, TokenError> {
        let (at, mac) = token.split_once('.').ok_or(TokenError::Malformed)?;
        if at.is_empty() || at.len() > 16 || mac.len() != 16 {
            return Err(TokenError::Malformed);
        }
        let at = u64::from_str_radix(at, 16).map_err(|_| TokenError::Malformed)?;
        let mac = u64::from_str_radix(mac, 16).map_err(|_| TokenError::Malformed)?;
        // Compared as integers: the time taken does not depend on how many digits match.
        if mac != self.mac(user, popup, at) {
            return Err(TokenError::Mismatch);
        }
        if at > now.saturating_add(60) || now.saturating_sub(at) > ttl {
            return Err(TokenError::Expired);
        }
        Ok(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(s: &Signer, user: &str, popup: u32, at: u64) -> String {
        let mut out = Vec::new();
        s.sign(&mut out, user, popup, at);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn tokens_verify_only_for_their_user_popup_secret_and_age() {
        let s = Signer::new(b"a secret of sixteen+");
        let t = token(&s, "alice", 7, 1_000_000);
        assert_eq!(s.verify(&t, "alice", 7, 1_000_010, 3600), Ok(1_000_000));
        assert_eq!(
            s.verify(&t, "bob", 7, 1_000_010, 3600),
            Err(TokenError::Mismatch)
        );
        assert_eq!(
            s.verify(&t, "alice", 8, 1_000_010, 3600),
            Err(TokenError::Mismatch)
        );
        let other = Signer::new(b"another secret!!!");
        assert_eq!(
            other.verify(&t, "alice", 7, 1_000_010, 3600),
            Err(TokenError::Mismatch)
        );
        assert_eq!(
            s.verify(&t, "alice", 7, 1_003_601, 3600),
            Err(TokenError::Expired)
        );
        assert_eq!(
            s.verify(&t, "alice", 7, 999_000, 3600),
            Err(TokenError::Expired),
            "from the future"
        );
        for bad in [
            "",
            ".",
            "zz.0000000000000000",
            "f4240",
            "f4240.123",
            "f4240.xyzxyzxyzxyzxyzx",
        ] {
            assert_eq!(
                s.verify(bad, "alice", 7, 1_000_010, 3600),
                Err(TokenError::Malformed),
                "{bad:?}"
            );
        }
        // A changed digit is a mismatch, never a pass.
        let mut forged = t.clone().into_bytes();
        let last = forged.len() - 1;
        forged[last] = if forged[last] == b'0' { b'1' } else { b'0' };
        assert_eq!(
            s.verify(
                std::str::from_utf8(&forged).unwrap(),
                "alice",
                7,
                1_000_010,
                3600
            ),
            Err(TokenError::Mismatch)
        );
    }
}
