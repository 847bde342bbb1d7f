//! Show tokens posted back with clicks: a token passes only for the user, popup and time it
//! was signed for; anything else is refused without a panic, whatever its digits.
#![no_main]

use hotpath_fuzz as _;
use hotpath_wire::popup_token::Signer;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (token, user) = text.split_once('\n').unwrap_or((text, "user"));
    let signer = Signer::new(b"fuzz secret");
    let now = 1_800_000_000;
    if let Ok(at) = signer.verify(token, user, 7, now, 86_400) {
        // A forged token that passes would be a broken MAC; only a signed one may.
        let mut signed = Vec::new();
        signer.sign(&mut signed, user, 7, at);
        assert_eq!(
            u64::from_str_radix(&token[token.len() - 16..], 16).ok(),
            u64::from_str_radix(
                std::str::from_utf8(&signed[signed.len() - 16..]).unwrap(),
                16
            )
            .ok()
        );
    }
    let mut out = Vec::new();
    signer.sign(&mut out, user, 7, now);
    let signed = std::str::from_utf8(&out).expect("ASCII");
    assert_eq!(signer.verify(signed, user, 7, now, 86_400), Ok(now));
    assert!(signer.verify(signed, user, 8, now, 86_400).is_err());
});
