//! Lua's C API where a route pays mlua's per-call costs on every request: reading a string
//! where it lies on the VM's stack (the JSON encoder's walk), `hp.now` as a plain C function
//! (mlua's callbacks convert arguments and results through its values), and calling
//! `handle(req)` with its answer read where the call leaves it.
//!
//! The only Lua errors raised here are those of the script's run (its own, its budget's, a
//! memory error), inside [`call`]'s protected call, through frames that hold nothing to drop.
#![allow(unsafe_code)]

use std::ffi::c_int;

use hotpath_service::HttpResponse;
use mlua::{ffi, Function, Lua, Table, Value};

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

/// What [`call`] found.
pub(crate) struct Called {
    /// The answer.
    pub answer: Answer,
    /// The script wrote into `req` with `rawset` (its metatable refuses plain writes): the
    /// next request must get a new one.
    pub req_written: bool,
}

/// `handle`'s answer, as [`call`] found it.
pub(crate) enum Answer {
    /// Read into the response, or found wrong (why).
    Read(Result<(), String>),
    /// `handle`'s three results, for the full reading (a status, headers or a body of a kind
    /// the quick one leaves to it: a float, a number as a header, anything wrong but a bad
    /// header or status).
    Values(Value, Value, Value),
}

/// Calls `handle(req)` and reads its answer (status, headers, body) into `resp` in the same
/// protected call, where each result lies: mlua's `Function::call` would make a value of
/// each result (a reference made and dropped for the table and the string), and reading the
/// headers' table through it takes another protected call and a value for every name and
/// value.
pub(crate) fn call(
    lua: &Lua,
    handle: &Function,
    req: &Table,
    resp: &mut HttpResponse,
) -> mlua::Result<Called> {
    let mut read = None;
    let mut req_written = false;
    let mut out_of_memory = false;
    // SAFETY: `exec_raw` pushes `req`, `handle` and `req` again (slots 1 to 3) and runs the
    // closure in a protected call with mlua's traceback handler, as `Function::call` does.
    // The closure puts `short_traceback` under `handle` (slot 2) and `lua_pcall`s slot 3 with
    // slot 4: on success it leaves exactly three results in slots 3 to 5, and the handler is
    // removed (results in 2 to 4). On a memory error the closure notes it and leaves three
    // nils; on another error, raised again with `lua_error` from this shallow stack, it
    // unwinds to mlua's protected call through this closure and mlua's trampoline, which hold
    // only references then (the closure captures `read`, `req_written`, `out_of_memory` and
    // `resp` by reference and makes nothing before the call). Nothing after the call raises:
    // `read_answer` reads, `lua_next` walks a table it does not change. What the closure
    // leaves on the stack comes back as the three values. The stack has room for the
    // handler (LUA_MINSTACK is free in the closure's C call, and three slots are used).
    let values = unsafe {
        lua.exec_raw::<(Value, Value, Value)>((req, handle, req), |state| {
            ffi::lua_pushcfunction(state, short_traceback);
            ffi::lua_insert(state, 2);
            match ffi::lua_pcall(state, 1, 3, 2) {
                ffi::LUA_OK => ffi::lua_remove(state, 2),
                ffi::LUA_ERRMEM => {
                    out_of_memory = true;
                    ffi::lua_settop(state, 1);
                    for _ in 0..3 {
                        ffi::lua_pushnil(state);
                    }
                    return;
                }
                _ => {
                    ffi::lua_error(state);
                }
            }
            ffi::lua_pushnil(state);
            if ffi::lua_next(state, 1) != 0 {
                req_written = true;
            }
            ffi::lua_settop(state, 4);
            let (headers, body) = (resp.extra_headers.len(), resp.body.len());
            match read_answer(state, 2, resp) {
                Some(r) => {
                    read = Some(r);
                    ffi::lua_settop(state, 0);
                }
                None => {
                    // Left to the full reading, from the start.
                    resp.extra_headers.truncate(headers);
                    resp.body.truncate(body);
                    ffi::lua_rotate(state, 1, -1);
                    ffi::lua_settop(state, 3);
                }
            }
        })?
    };
    if out_of_memory {
        return Err(mlua::Error::MemoryError("not enough memory".into()));
    }
    let answer = match read {
        Some(r) => Answer::Read(r),
        None => Answer::Values(values.0, values.1, values.2),
    };
    Ok(Called {
        answer,
        req_written,
    })
}

/// The message handler of a route's call: the error with where it came from, the innermost
/// [`TRACEBACK_LEVELS`] levels. mlua's own handler walks the whole stack (Lua's
/// `luaL_traceback` finds its depth by walking it dozens of times): a budget or stack error
/// deep in a recursion spent 1.4 s there, after the budget was spent. Raised again from
/// [`call`]'s shallow stack, the error meets mlua's handler where it costs nothing.
unsafe extern "C-unwind" fn short_traceback(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: Lua calls the handler with the error object at slot 1; `lua_checkstack` makes
    // room for what is pushed (or the message stays as it is). `lua_getstack` and
    // `lua_getinfo` only read, each level reached in as many steps as its depth. The strings
    // pushed are Lua's (nothing of this frame needs dropping if a push fails for memory), and
    // the top value, their concatenation, is the handler's result.
    unsafe {
        if ffi::lua_type(state, 1) != ffi::LUA_TSTRING || ffi::lua_checkstack(state, 64) == 0 {
            return 1;
        }
        ffi::lua_pushstring(state, c"\nstack traceback (innermost levels):".as_ptr());
        let mut pieces = 2;
        let mut ar: ffi::lua_Debug = std::mem::zeroed();
        for level in 1..=TRACEBACK_LEVELS {
            if ffi::lua_getstack(state, level, &mut ar) == 0
                || ffi::lua_getinfo(state, c"Sl".as_ptr(), &mut ar) == 0
            {
                break;
            }
            ffi::lua_pushstring(state, c"\n\t".as_ptr());
            ffi::lua_pushstring(state, ar.short_src.as_ptr());
            ffi::lua_pushstring(state, c":".as_ptr());
            pieces += 3;
            if ar.currentline > 0 {
                ffi::lua_pushinteger(state, ffi::lua_Integer::from(ar.currentline));
                ffi::lua_pushstring(state, c":".as_ptr());
                pieces += 2;
            }
        }
        ffi::lua_concat(state, pieces);
        1
    }
}

/// [`short_traceback`] as a Lua function.
pub(crate) fn short_traceback_function(lua: &Lua) -> mlua::Result<mlua::Function> {
    // SAFETY: `short_traceback` keeps to the stack room it checks for, and raises nothing
    // but a memory error from Lua's own pushes.
    unsafe { lua.create_c_function(short_traceback) }
}

/// The levels [`short_traceback`] shows.
const TRACEBACK_LEVELS: c_int = 10;

/// The answer in slots `at` to `at + 2` read into `resp`, as [`crate::vm`]'s `answer` reads
/// it, for an integer status, a table of string names and values or nil, and a string body or
/// nil; `None` for anything else, with the stack as it was.
///
/// # Safety
/// Slots `at` to `at + 2` are the top three, with room for two more.
unsafe fn read_answer(
    state: *mut ffi::lua_State,
    at: c_int,
    resp: &mut HttpResponse,
) -> Option<Result<(), String>> {
    let (status, headers, body) = (at, at + 1, at + 2);
    // SAFETY: the caller's contract; each accessor is called for the type it reads, and
    // `lua_next` walks a table it does not change (raw: no metamethod runs).
    unsafe {
        if ffi::lua_isinteger(state, status) == 0 {
            return None;
        }
        let code = ffi::lua_tointegerx(state, status, std::ptr::null_mut());
        match ffi::lua_type(state, headers) {
            ffi::LUA_TNIL | ffi::LUA_TTABLE => {}
            _ => return None,
        }
        match ffi::lua_type(state, body) {
            ffi::LUA_TNIL | ffi::LUA_TSTRING => {}
            _ => return None,
        }
        if let Err(e) = crate::vm::begin_answer(code, resp) {
            return Some(Err(e));
        }
        if ffi::lua_type(state, headers) == ffi::LUA_TTABLE {
            ffi::lua_pushnil(state);
            while ffi::lua_next(state, headers) != 0 {
                if ffi::lua_type(state, -2) != ffi::LUA_TSTRING
                    || ffi::lua_type(state, -1) != ffi::LUA_TSTRING
                {
                    ffi::lua_settop(state, body);
                    return None;
                }
                let added = crate::vm::header(bytes(state, -2), bytes(state, -1), resp);
                // Back to the key alone, for `lua_next`.
                ffi::lua_settop(state, body + 1);
                if let Err(e) = added {
                    ffi::lua_settop(state, body);
                    return Some(Err(e));
                }
            }
        }
        if ffi::lua_type(state, body) == ffi::LUA_TSTRING {
            resp.body.extend_from_slice(bytes(state, body));
        }
        Some(crate::vm::end_answer(resp))
    }
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
