//! The request budget's hook, set through Lua's C API on every Lua thread of a VM.
//!
//! mlua keeps one hook callback per VM and ties it to the thread it was last set for: a hook
//! firing on any other thread removes itself. A coroutine a script made (`coroutine.wrap`),
//! or the main thread once a route's coroutine had its hook set, then ran with no budget at
//! all, and a loop in it held its worker for good. This hook belongs to no thread: Lua copies
//! a thread's hook into each coroutine made from it, and every copy finds the one budget of
//! its VM through the VM's extra space (the pointer-sized block Lua gives each thread, copied
//! from the main thread's into every new one).
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int};
use std::rc::Rc;

use mlua::{ffi, Lua, Thread};

use crate::vm::{Budget, CHECK_EVERY};

/// Keeps a VM's budget alive as long as its Lua state: mlua drops app data after it closes
/// the state, so finalizers run by the close, which the hook may interrupt, still find it.
struct Keep(#[allow(dead_code)] Rc<Budget>);

/// Points the VM's threads at `budget` and sets the hook on its main thread (every coroutine
/// made from a hooked thread is hooked too).
pub(crate) fn install(lua: &Lua, budget: &Rc<Budget>) {
    lua.set_app_data(Keep(budget.clone()));
    main_thread(lua, Some(Rc::as_ptr(budget)));
}

/// Sets the main thread's hook back to a check every [`CHECK_EVERY`] instructions, after a
/// spent budget made it fire at every one.
pub(crate) fn rearm(lua: &Lua) {
    main_thread(lua, None);
}

fn main_thread(lua: &Lua, budget: Option<*const Budget>) {
    // SAFETY: `exec_raw` runs the closure in a protected call with room on the stack for the
    // one value it pushes (the main thread, from the registry, where Lua always keeps it).
    // The extra space of a Lua 5.4 thread is LUA_EXTRASPACE (pointer-sized, pointer-aligned)
    // bytes before its `lua_State`, unused by mlua and by Lua itself; the main thread's is
    // copied into every thread made after this. The budget it points to lives as long as the
    // state (`Keep`). `lua_sethook` only stores the hook, its mask and its count.
    let set = unsafe {
        lua.exec_raw::<()>((), |state| {
            ffi::lua_rawgeti(state, ffi::LUA_REGISTRYINDEX, ffi::LUA_RIDX_MAINTHREAD);
            let main = ffi::lua_tothread(state, -1);
            ffi::lua_pop(state, 1);
            if let Some(budget) = budget {
                *ffi::lua_getextraspace(main).cast::<*const Budget>() = budget;
            }
            ffi::lua_sethook(
                main,
                Some(budget_hook),
                ffi::LUA_MASKCOUNT,
                CHECK_EVERY as c_int,
            );
        })
    };
    // Nothing in the closure can fail but the protected call's own setup (room for its frame
    // on a stack that already has it), which only a VM out of memory could see.
    set.expect("the budget's hook is set");
}

/// Sets the hook on `thread` (a route's coroutine, made by mlua from a thread of its own that
/// has none).
pub(crate) fn set(lua: &Lua, thread: &Thread) -> mlua::Result<()> {
    // SAFETY: `exec_raw` pushes `thread` (slot 1 of a fresh protected call), so `lua_tothread`
    // gives its state, alive while it is on the stack. `lua_sethook` only stores the hook.
    unsafe {
        lua.exec_raw::<()>(thread, |state| {
            let t = ffi::lua_tothread(state, 1);
            if !t.is_null() {
                ffi::lua_sethook(
                    t,
                    Some(budget_hook),
                    ffi::LUA_MASKCOUNT,
                    CHECK_EVERY as c_int,
                );
            }
        })
    }
}

/// Counts [`CHECK_EVERY`] instructions against the budget, and raises the budget's message as
/// a Lua error once it is spent (the request ends in a 500).
unsafe extern "C-unwind" fn budget_hook(state: *mut ffi::lua_State, _: *mut ffi::lua_Debug) {
    // SAFETY: Lua calls the hook with a live state. Its extra space holds null (mlua's own
    // threads, made before `install`, which never run scripts) or the VM's budget, which
    // outlives the state (`Keep`); a budget is only ever used on its VM's thread, so the
    // shared reference to its cells is never used concurrently.
    let budget = unsafe { *ffi::lua_getextraspace(state).cast::<*const Budget>() };
    if budget.is_null() {
        return;
    }
    // SAFETY: as above: non-null, so the VM's budget, alive.
    let Err(message) = (unsafe { &*budget }).tick() else {
        return;
    };
    // SAFETY: setting the hook of the running thread from its hook is allowed (the stored
    // values are read at the next instruction). Raising an error from a count hook is too
    // (Lua's own interpreter stops a script so). The message is borrowed from the budget,
    // which outlives the state, so nothing in this frame owns memory or needs dropping when
    // `lua_error` jumps out of it (nor when `lua_pushlstring` does, on a memory error).
    unsafe {
        // From now on every instruction of this thread raises it: a `pcall` that catches it
        // gets it again at its caller's next instruction, so it leaves the script however
        // deep the `pcall`s. The next request sets the count back (`rearm`).
        ffi::lua_sethook(state, Some(budget_hook), ffi::LUA_MASKCOUNT, 1);
        ffi::lua_pushlstring(state, message.as_ptr().cast::<c_char>(), message.len());
        ffi::lua_error(state);
    }
}
