//! The request budget's hook, set through Lua's C API on every Lua thread of a VM, and the
//! timer that sets it on a worker's main thread only when a script runs long.
//!
//! mlua keeps one hook callback per VM and ties it to the thread it was last set for: a hook
//! firing on any other thread removes itself. A coroutine a script made (`coroutine.wrap`),
//! or the main thread once a route's coroutine had its hook set, then ran with no budget at
//! all, and a loop in it held its worker for good. This hook belongs to no thread: Lua copies
//! a thread's hook into each coroutine made from it, and every copy finds the one budget of
//! its VM through the VM's extra space (the pointer-sized block Lua gives each thread, copied
//! from the main thread's into every new one).
//!
//! While a count hook is set, Lua runs every instruction of that thread through its tracing
//! path: the echo route's time in the VM fell 15 % without it (`cargo bench -p hotpath-lua
//! --bench route`). So a worker's main thread runs unhooked between scripts' long runs. Each
//! worker thread that runs scripts has a timer on its own CPU time that sends it `SIGURG`
//! (ignored by default) every [`ARM_AFTER`] of it, nothing while it sleeps. Entering a script
//! bumps a thread-local number; a tick that finds the same script call as the tick before
//! (after one to two periods of its CPU time) sets the hook on the running main thread, as
//! Lua's own interpreter does on Ctrl-C, and the call's end takes it off. From then on the
//! budget counts as before. What it does not count is the script's first one or two periods of
//! instructions (the time budget starts [`ARM_AFTER`] early to make up for it). Coroutines are
//! hooked throughout: `coroutine.create` and `coroutine.wrap` make them with the hook set, and
//! a route's own coroutine (`hp.tcp`) has it from the start.
#![allow(unsafe_code)]

use std::cell::{Cell, RefCell};
use std::ffi::{c_char, c_int};
use std::ptr;
use std::rc::Rc;
use std::sync::atomic::{compiler_fence, AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use mlua::{ffi, Lua, Thread};

use crate::vm::{Budget, CHECK_EVERY};

/// The period of a worker's CPU-time timer: a script is hooked after one to two of these.
pub(crate) const ARM_AFTER: Duration = Duration::from_millis(1);

/// The signal a worker's timer sends it.
const SIGNAL: c_int = libc::SIGURG;

/// Keeps a VM's budget alive as long as its Lua state: mlua drops app data after it closes
/// the state, so finalizers run by the close, which the hook may interrupt, still find it.
struct Keep(#[allow(dead_code)] Rc<Budget>);

/// A VM's main Lua thread, whose hook is set and taken off without going through mlua. Only
/// `install` makes one and only the VM it was made for keeps it, for the life of its Lua
/// state: so [`rearm`] and [`disarm`] always reach a live thread.
#[derive(Clone, Copy)]
pub(crate) struct MainThread(*mut ffi::lua_State);

/// Points the VM's threads at `budget` and sets the hook on its main thread (every coroutine
/// made from a hooked thread is hooked too). With `watched`, `coroutine.create` and
/// `coroutine.wrap` make hooked coroutines whatever the thread that calls them, so the main
/// thread's hook can be taken off between its scripts' long runs ([`disarm`]).
pub(crate) fn install(lua: &Lua, budget: &Rc<Budget>, watched: bool) -> MainThread {
    lua.set_app_data(Keep(budget.clone()));
    let budget = Rc::as_ptr(budget);
    let mut main = ptr::null_mut();
    // SAFETY: `exec_raw` runs the closure in a protected call (an error in it, such as
    // memory, becomes the call's result) with room on the stack for the two values it holds
    // at once. The main thread is in the registry for the state's life. The extra space of a
    // Lua 5.4 thread is LUA_EXTRASPACE (pointer-sized, pointer-aligned) bytes before its
    // `lua_State`, unused by mlua and by Lua itself; the main thread's is copied into every
    // thread made after this. The budget it points to lives as long as the state (`Keep`).
    // `lua_sethook` only stores the hook, its mask and its count.
    let set = unsafe {
        lua.exec_raw::<()>((), |state| {
            ffi::lua_rawgeti(state, ffi::LUA_REGISTRYINDEX, ffi::LUA_RIDX_MAINTHREAD);
            main = ffi::lua_tothread(state, -1);
            ffi::lua_pop(state, 1);
            *ffi::lua_getextraspace(main).cast::<*const Budget>() = budget;
            hook_count(main);
            if watched && ffi::lua_getglobal(state, c"coroutine".as_ptr()) == ffi::LUA_TTABLE {
                for name in [c"create", c"wrap"] {
                    if ffi::lua_getfield(state, -1, name.as_ptr()) == ffi::LUA_TFUNCTION {
                        ffi::lua_pushcclosure(state, hooked_coroutine, 1);
                        ffi::lua_setfield(state, -2, name.as_ptr());
                    } else {
                        ffi::lua_pop(state, 1);
                    }
                }
            }
        })
    };
    // Nothing in the closure can fail but for memory, before any script ran: a VM that
    // cannot hold two library functions is no VM.
    set.expect("the budget's hook is set on a new VM");
    MainThread(main)
}

/// Sets the main thread's hook back to a check every [`CHECK_EVERY`] instructions, after a
/// spent budget made it fire at every one (or for good, before a watched VM closes: the
/// finalizers the close runs are scripts too).
pub(crate) fn rearm(main: MainThread) {
    // SAFETY: `main` is the main thread of a VM its caller holds, so alive; `lua_sethook`
    // only stores values and raises no error, so it needs no protected call.
    unsafe { hook_count(main.0) }
}

/// Sets the budget's hook on `state`, at its usual count: a check every [`CHECK_EVERY`]
/// instructions.
///
/// # Safety
/// `state` is a live Lua thread. `lua_sethook` only stores the hook, its mask and its count
/// (and sets the running calls' trap flags), raises no error, and may be called from a
/// signal handler.
unsafe fn hook_count(state: *mut ffi::lua_State) {
    // SAFETY: the caller's contract.
    unsafe {
        ffi::lua_sethook(
            state,
            Some(budget_hook),
            ffi::LUA_MASKCOUNT,
            CHECK_EVERY as c_int,
        )
    }
}

/// Takes the hook off the main thread (a watched VM, once its scripts are loaded).
pub(crate) fn disarm(main: MainThread) {
    // SAFETY: as for `rearm`.
    unsafe { ffi::lua_sethook(main.0, None, 0, 0) }
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
                hook_count(t);
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
    TICKED.with(|t| t.store(true, Ordering::Relaxed));
    // SAFETY: as above: non-null, so the VM's budget, alive.
    let budget = unsafe { &*budget };
    // Only the main thread's hook answers the timer's call: it is the thread the timer set
    // to a count of 1 (a coroutine's hook taking the call would leave main at that count,
    // and every later instruction of main would count as a thousand).
    let main = RUNNING.with(|r| r.load(Ordering::Relaxed)) == state;
    let checked = if main && CLOCK_DUE.with(|d| d.swap(false, Ordering::Relaxed)) {
        // The timer found no check in a whole period (see `on_signal`): a look at the clock,
        // counting nothing, then the usual count again unless the budget is spent.
        let checked = budget.check_time();
        if checked.is_ok() {
            // SAFETY: the running thread, from its hook: setting its hook is allowed here.
            unsafe { hook_count(state) };
        }
        checked
    } else {
        budget.tick()
    };
    let Err(message) = checked else {
        return;
    };
    // SAFETY: the running thread, from its hook (see `trip`).
    unsafe { trip(state, message) }
}

/// Raises a spent budget's `message` on `state`, which runs a script, and makes every later
/// instruction of that thread raise it too: a `pcall` that catches it gets it again at its
/// caller's next instruction, so it leaves the script however deep the `pcall`s. The next
/// request sets the count back (`rearm`, or `Running`'s end on a watched VM).
///
/// # Safety
/// `state` is the running thread, in a hook or a C function Lua called. Setting its hook is
/// allowed there (the stored values are read at the next instruction), and so is raising an
/// error (Lua's own interpreter stops a script so from a hook). `message` is borrowed from the
/// budget, which outlives the state, so nothing in the caller's frame may own memory or need
/// dropping when `lua_error` jumps out of it (nor when `lua_pushlstring` does, on a memory
/// error).
unsafe fn trip(state: *mut ffi::lua_State, message: &str) -> ! {
    // SAFETY: the caller's contract.
    unsafe {
        ARMED.with(|a| a.store(true, Ordering::Relaxed));
        ffi::lua_sethook(state, Some(budget_hook), ffi::LUA_MASKCOUNT, 1);
        ffi::lua_pushlstring(state, message.as_ptr().cast::<c_char>(), message.len());
        ffi::lua_error(state)
    }
}

/// What making a coroutine is charged against the budget, in instructions: about what Lua
/// spends on it. A loop that makes one per turn (`coroutine.wrap(function() end)()`) runs few
/// instructions on each thread, none reaching the hook's count, so the making is what counts.
const COROUTINE_COST: u64 = 100;

/// `coroutine.create` or `coroutine.wrap` (its first upvalue), charged against the budget
/// ([`COROUTINE_COST`]) and called with the caller's thread hooked, so that the coroutine it
/// makes is hooked too. A caller that was not hooked has its hook taken off again; a hooked
/// caller is left as it is (setting its hook again restarted its count, so a loop making a
/// coroutine per turn never reached it: 1.7 s under a 100 ms budget).
unsafe extern "C-unwind" fn hooked_coroutine(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: Lua calls this C function with a live state, its arguments on the stack and
    // the library function as upvalue 1; its extra space holds null or the VM's budget, alive
    // (see `budget_hook`). `lua_call` may raise (a bad argument, memory), as `trip` does: the
    // error jumps out of this frame, which owns nothing, and skips taking the hook off;
    // marking the worker armed first has the main thread's hook taken off when the script
    // ends. The stack has room for the one value pushed (LUA_MINSTACK is free in a C call).
    unsafe {
        let budget = *ffi::lua_getextraspace(state).cast::<*const Budget>();
        if !budget.is_null() {
            if let Err(message) = (*budget).spend(COROUTINE_COST) {
                trip(state, message);
            }
        }
        let unhooked = ffi::lua_gethookmask(state) == 0;
        ARMED.with(|a| a.store(true, Ordering::Relaxed));
        if unhooked {
            hook_count(state);
        }
        let args = ffi::lua_gettop(state);
        ffi::lua_pushvalue(state, ffi::lua_upvalueindex(1));
        ffi::lua_insert(state, 1);
        ffi::lua_call(state, args, ffi::LUA_MULTRET);
        if unhooked {
            // A timer tick that came meanwhile found the thread hooked and left it so; the
            // next one hooks it again (a millisecond of CPU later at most).
            ffi::lua_sethook(state, None, 0, 0);
        }
        ffi::lua_gettop(state)
    }
}

thread_local! {
    /// The main thread of the VM whose script this OS thread runs, or null: what the signal
    /// handler hooks. This and the other words below are constant-initialised and have no
    /// destructor, so the handler reads them as plain thread-local words.
    static RUNNING: AtomicPtr<ffi::lua_State> = const { AtomicPtr::new(ptr::null_mut()) };
    /// The hook was set on `RUNNING` during this run (by the handler, a coroutine's making,
    /// or a spent budget): take it off at the end.
    static ARMED: AtomicBool = const { AtomicBool::new(false) };
    /// The hook ran since the timer's last tick.
    static TICKED: AtomicBool = const { AtomicBool::new(false) };
    /// The timer asked the hook to look at the clock at the main thread's next instruction.
    static CLOCK_DUE: AtomicBool = const { AtomicBool::new(false) };
    /// Odd while a script runs; bumped at each start and end. The handler hooks a script
    /// still running under the number it saw at its last tick.
    static SEQ: AtomicU64 = const { AtomicU64::new(0) };
    static SEEN: AtomicU64 = const { AtomicU64::new(0) };
    /// Whether this OS thread's timer was made (or could not be: then its scripts run
    /// hooked), and the timer, deleted when the thread ends.
    static TIMED: Cell<Timed> = const { Cell::new(Timed::Not) };
    static TIMER: RefCell<Option<Timer>> = const { RefCell::new(None) };
}

#[derive(Clone, Copy, PartialEq)]
enum Timed {
    Not,
    Yes,
    Failed,
}

/// A timer on this OS thread's CPU time that signals it every [`ARM_AFTER`] of it: nothing
/// while the thread sleeps, a signal a millisecond while it works (the handler's cost).
struct Timer(libc::timer_t);

impl Timer {
    fn new() -> std::io::Result<Timer> {
        // SAFETY: `sigevent` is plain data (zero is a valid value of every field); the
        // timer is this thread's own (`SIGEV_THREAD_ID`, its kernel id) and `timer_create`
        // writes its id into `id`, read only on success.
        unsafe {
            let mut ev: libc::sigevent = std::mem::zeroed();
            ev.sigev_notify = libc::SIGEV_THREAD_ID;
            ev.sigev_signo = SIGNAL;
            ev.sigev_notify_thread_id = libc::gettid();
            let mut id: libc::timer_t = ptr::null_mut();
            if libc::timer_create(libc::CLOCK_THREAD_CPUTIME_ID, &mut ev, &mut id) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let timer = Timer(id);
            let period = libc::timespec {
                tv_sec: 0,
                tv_nsec: ARM_AFTER.as_nanos() as libc::c_long,
            };
            let spec = libc::itimerspec {
                it_interval: period,
                it_value: period,
            };
            if libc::timer_settime(id, 0, &spec, ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(timer)
        }
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        // SAFETY: the id came from a successful `timer_create` and is deleted once.
        unsafe { libc::timer_delete(self.0) };
    }
}

static HANDLER: OnceLock<bool> = OnceLock::new();

/// Whether scripts can run unhooked: the timer signal's handler is in place (installed at
/// the first call). `false` when it could not be; VMs are then hooked throughout.
pub(crate) fn timer_signal() -> bool {
    *HANDLER.get_or_init(|| {
        // SAFETY: the handler only reads and writes thread-locals that need no
        // initialisation and calls `lua_sethook`, which Lua allows from a signal handler (it
        // stores the hook and sets the running calls' trap flags); it allocates nothing and
        // takes no lock.
        match unsafe { signal_hook::low_level::register(SIGNAL, on_signal) } {
            Ok(_) => true,
            Err(e) => {
                log::warn!("lua: no timer signal ({e}): scripts run hooked throughout");
                false
            }
        }
    })
}

fn on_signal() {
    let seq = SEQ.with(|s| s.load(Ordering::Relaxed));
    let seen = SEEN.with(|s| s.swap(seq, Ordering::Relaxed));
    if seq & 1 == 0 || seq != seen {
        return;
    }
    let main = RUNNING.with(|r| r.load(Ordering::Relaxed));
    if main.is_null() {
        return;
    }
    // SAFETY: `RUNNING` is set only while a script of that VM runs on this thread (the VM
    // is alive), and the signal interrupts that run. Lua documents `lua_sethook` as callable
    // from a signal handler. A hooked thread whose hook did not run for a whole period of
    // CPU time runs instructions that each take long (a comparison of two 10 MB strings: a
    // thousand of them between checks took 210-290 ms under a 100 ms budget, now 100-107):
    // its hook runs at its next instruction, to look at the clock. Each such change walks
    // the thread's calls (a millisecond for a recursion a million slots deep), so it is made
    // only then, never while the hook runs as it should, and not again before that hook
    // ran: a handler that took longer than the period must not make work for the next one.
    unsafe {
        let ticked = TICKED.with(|t| t.swap(false, Ordering::Relaxed));
        if ffi::lua_gethookmask(main) == 0 {
            hook_count(main);
        } else if !ticked && !CLOCK_DUE.with(|d| d.swap(true, Ordering::Relaxed)) {
            ffi::lua_sethook(main, Some(budget_hook), ffi::LUA_MASKCOUNT, 1);
        }
    }
    ARMED.with(|a| a.store(true, Ordering::Relaxed));
}

/// A script's run on a watched VM's main thread: the timer's signal may hook it until this
/// ends, which takes the hook off again.
pub(crate) struct Running {
    main: MainThread,
    /// Whether this is the outermost run on this thread (an inner one leaves it to it).
    outer: bool,
}

impl Running {
    /// Starts a run on `main`.
    pub(crate) fn start(main: MainThread) -> Running {
        if !RUNNING.with(|r| r.load(Ordering::Relaxed)).is_null() {
            return Running { main, outer: false };
        }
        let timed = TIMED.with(|t| {
            if t.get() == Timed::Not {
                let made = TIMER.try_with(|slot| match Timer::new() {
                    Ok(timer) => {
                        *slot.borrow_mut() = Some(timer);
                        Timed::Yes
                    }
                    Err(e) => {
                        log::warn!("lua: no CPU-time timer ({e}): this worker's scripts run hooked throughout");
                        Timed::Failed
                    }
                });
                t.set(made.unwrap_or(Timed::Failed));
            }
            t.get()
        });
        CLOCK_DUE.with(|d| d.store(false, Ordering::Relaxed));
        TICKED.with(|t| t.store(false, Ordering::Relaxed));
        RUNNING.with(|r| r.store(main.0, Ordering::Relaxed));
        compiler_fence(Ordering::SeqCst);
        SEQ.with(|s| s.fetch_add(1, Ordering::Relaxed));
        if timed == Timed::Failed {
            ARMED.with(|a| a.store(true, Ordering::Relaxed));
            rearm(main);
        }
        Running { main, outer: true }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.outer {
            return;
        }
        SEQ.with(|s| s.fetch_add(1, Ordering::Relaxed));
        RUNNING.with(|r| r.store(ptr::null_mut(), Ordering::Relaxed));
        compiler_fence(Ordering::SeqCst);
        if ARMED.with(|a| a.swap(false, Ordering::Relaxed)) {
            disarm(self.main);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vm::Limits;

    fn hook_mask(lua: &Lua, thread: Option<&Thread>) -> c_int {
        let mut mask = 0;
        // SAFETY: as in `set`: the thread (or, without one, the running state) is alive for
        // the call, and `lua_gethookmask` only reads.
        unsafe {
            lua.exec_raw::<()>(thread, |state| {
                let t = match thread {
                    Some(_) => ffi::lua_tothread(state, 1),
                    None => state,
                };
                mask = ffi::lua_gethookmask(t);
            })
            .unwrap();
        }
        mask
    }

    #[test]
    fn a_watched_main_thread_is_hooked_only_once_a_call_runs_long_and_coroutines_always() {
        assert!(timer_signal());
        let lua = Lua::new();
        let budget = Rc::new(Budget::new(
            Limits {
                instructions: u64::MAX,
                time: Duration::from_millis(50),
                memory: 1 << 30,
            },
            ARM_AFTER,
        ));
        let main = install(&lua, &budget, true);
        // Hooked while scripts load, then taken off.
        assert_ne!(hook_mask(&lua, None), 0);
        disarm(main);
        assert_eq!(hook_mask(&lua, None), 0);

        // A short call runs unhooked, and leaves no hook behind.
        let function = |src: &str| -> mlua::Function { lua.load(src).eval().unwrap() };
        let short = function("return function() return 1 + 1 end");
        {
            let _run = Running::start(main);
            assert_eq!(short.call::<i64>(()).unwrap(), 2);
        }
        assert_eq!(hook_mask(&lua, None), 0);

        // A coroutine made on the unhooked main thread is hooked.
        let co: Thread = lua
            .load("return coroutine.create(function() end)")
            .eval()
            .unwrap();
        assert_ne!(hook_mask(&lua, Some(&co)), 0);
        assert_eq!(hook_mask(&lua, None), 0);

        // A call that runs on is hooked by the timer, and stopped by the time budget.
        let spin = function("return function() local n = 0 while true do n = n + 1 end end");
        {
            let _run = Running::start(main);
            let e = spin.call::<()>(()).unwrap_err().to_string();
            assert!(e.contains("time budget exceeded"), "{e}");
        }
        // Its end took the hook off again.
        assert_eq!(hook_mask(&lua, None), 0);
    }
}
