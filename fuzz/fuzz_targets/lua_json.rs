//! `hp.json.decode`, which scripts call on request bodies: JSON to a Lua value in a VM with a
//! memory limit, or a Lua error; never a crash or a stack overflow. What decodes is encoded
//! again (`hp.json.encode`) and must give JSON text that decodes and encodes again.
#![no_main]

use std::cell::RefCell;

use hotpath_fuzz as _;
use libfuzzer_sys::fuzz_target;
use mlua::Lua;

thread_local! {
    static LUA: RefCell<Lua> = RefCell::new(fresh());
}

fn fresh() -> Lua {
    let lua = Lua::new();
    lua.set_memory_limit(64 << 20).expect("a memory limit");
    lua
}

fuzz_target!(|data: &[u8]| {
    LUA.with(|cell| {
        let lua = cell.borrow();
        let decoded = hotpath_lua::json_decode(&lua, data);
        if let Ok(v) = &decoded {
            assert!(serde_json::from_slice::<serde_json::Value>(data).is_ok());
            // What decodes encodes (unless the VM's memory ran out on the way), to JSON text
            // that decodes and encodes again. (Not always to the same text: serde_json's float
            // parsing is not exactly rounded, so a float's shortest text may change once.)
            if let Ok(text) = hotpath_lua::json_encode(&lua, v) {
                assert!(serde_json::from_slice::<serde_json::Value>(&text).is_ok());
                if let Ok(again) = hotpath_lua::json_decode(&lua, &text) {
                    let twice = hotpath_lua::json_encode(&lua, &again).expect("encodes");
                    assert!(serde_json::from_slice::<serde_json::Value>(&twice).is_ok());
                }
            }
        }
        drop(decoded);
        lua.gc_collect().expect("a full collection");
    });
});
