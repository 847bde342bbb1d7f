//! `hp.json.decode`, which scripts call on request bodies: JSON to a Lua value in a VM with a
//! memory limit, or a Lua error; never a crash or a stack overflow.
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
        if decoded.is_ok() {
            assert!(serde_json::from_slice::<serde_json::Value>(data).is_ok());
        }
        drop(decoded);
        lua.gc_collect().expect("a full collection");
    });
});
