//! Config files: parsed and validated, or refused with an error naming the key; a config that
//! passes is written out as commented TOML (what `hotpath config` prints) that parses back to
//! the same text.
#![no_main]

use hotpath_config::Config;
use hotpath_fuzz as _;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Config::parse(text) {
        Ok(c) => {
            let written = c.to_commented_toml();
            let again = Config::parse(&written).expect("a written config parses");
            assert_eq!(again.to_commented_toml(), written);
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
});
