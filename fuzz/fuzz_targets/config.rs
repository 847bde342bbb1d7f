//! Config files: parsed and validated, or refused with errors naming the key, each placed
//! within the text; a config that passes is written out as commented TOML (what `hotpath
//! config` prints) that parses back to the same text.
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
        Err(e) => {
            assert!(!e.errors.is_empty() && !e.to_string().is_empty());
            // Every place given is in the text.
            let lines = text.split('\n').count();
            for (at, _) in &e.errors {
                if let Some(at) = at {
                    assert!(at.line >= 1 && at.line <= lines && at.column >= 1, "{at:?}");
                }
            }
        }
    }
});
