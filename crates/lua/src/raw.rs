//! Lua's C API where a route pays mlua's per-call costs on every request: reading a string
//! where it lies on the VM's stack (the JSON encoder's walk), and `hp.now` as a plain C
//! function (mlua's callbacks convert arguments and results through its values).
//!
//! Nothing here raises a Lua error, so no Lua error can cross a Rust frame.
#![allow(unsafe_code)]

use std::ffi::c_int;

use mlua::{ffi, Lua};

/// The bytes of the string at `idx`.
///
/// # Safety
/// The value at slot `idx` is a string; the slice is used only while it stays there.
pub(crate) unsafe fn bytes<'a>(state: *mut ffi::lua_State, idx: c_int) -> &'a [u8] {
    let mut len = 0usize;
    // SAFETY: the caller's contract: for a string `lua_tolstring` converts nothing and
    // returns a non-null pointer to its `len` bytes, alive while it is on the stack.
    unsafe {
        let p = ffi::lua_tolstring(state, idx, &mut len);
        std::slice::from_raw_parts(p.cast::<u8>(), len)
    }
}

/// `hp.now()`: the wall clock in seconds since the Unix epoch, with a fraction. A C function
/// of its own rather than a closure through mlua's callback (which a route calls for every
/// request): it pushes one number, which needs no allocation and raises nothing.
pub(crate) unsafe extern "C-unwind" fn now(state: *mut ffi::lua_State) -> c_int {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    // SAFETY: Lua calls this with a valid state and LUA_MINSTACK free slots; one is used.
    unsafe { ffi::lua_pushnumber(state, secs) };
    1
}

/// [`now`] as a Lua function.
pub(crate) fn now_function(lua: &Lua) -> mlua::Result<mlua::Function> {
    // SAFETY: `now` is a C function that raises no error and keeps to its stack room.
    unsafe { lua.create_c_function(now) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn now_is_the_wall_clock_in_seconds() {
        let lua = Lua::new();
        lua.globals()
            .set("now", now_function(&lua).unwrap())
            .unwrap();
        let before = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        // Arguments are ignored; the result is one float, with a fraction.
        let (t, n, ty): (f64, i64, String) = lua
            .load("local t = now(1, 'x'); return t, select('#', now()), math.type(t)")
            .eval()
            .unwrap();
        let after = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(before <= t && t <= after, "{before} <= {t} <= {after}");
        assert_eq!((n, ty.as_str()), (1, "float"));
    }
}
