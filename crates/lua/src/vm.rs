//! One worker's Lua VM: the scripts compiled once (each in an environment of its own, so two
//! scripts' globals never mix), the `hp` API, the per-request budget and the memory cap.

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hotpath_service::{HttpResponse, Request};
use mlua::{
    Function, Lua, LuaOptions, LuaSerdeExt, StdLib, Thread, ThreadStatus, UserData,
    UserDataMethods, Value, Variadic,
};

use crate::req::ReqObj;
use hotpath_store::JournalWriter;

use crate::stored::{LuaChange, MAX_KEY_LEN, MAX_NAME_LEN, MAX_ROW_LEN};

use crate::shared::{SharedDict, Val};
use crate::tcp::{TcpHandle, Until};
use crate::udp::{UdpCounters, UdpPool};
use crate::{Counters, LuaError};

/// The budget is checked every this many VM instructions.
pub(crate) const CHECK_EVERY: u32 = 1000;

/// What one request may use.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// VM instructions per request.
    pub instructions: u64,
    /// Time per request.
    pub time: Duration,
    /// Bytes the VM may hold.
    pub memory: usize,
}

/// What every worker's VM reaches: the same for all.
pub struct Env {
    /// `hp.shared`.
    pub shared: Arc<SharedDict>,
    /// The service's counters (and the scripts' own, `hp.metrics`).
    pub counters: Arc<Counters>,
    /// The per-request limits.
    pub limits: Limits,
    /// The UDP pools' counters.
    pub udp: Arc<UdpCounters>,
    /// `lua.unsafe_stdlib`: the whole standard library instead of the sandbox.
    pub unsafe_stdlib: bool,
    /// Where `require` finds modules in the sandbox.
    pub module_dir: std::path::PathBuf,
    /// Scripts on a worker's main thread run unhooked until one runs long (see `hook`); when
    /// false (a check of the scripts), hooked throughout.
    pub watched: bool,
}

/// One script's source.
#[derive(Debug, Clone)]
pub struct Script {
    /// Its file, as configured (the name in error messages).
    pub name: String,
    /// Its text.
    pub source: Vec<u8>,
}

/// Instructions and time used by the request under way.
pub(crate) struct Budget {
    /// A request is being handled (`hp.store` is only for requests).
    active: Cell<bool>,
    /// Instructions run, and work the library functions of [`crate::strlib`] charged.
    used: Cell<u64>,
    /// When the request's first time check came (a request that never reaches one, as most
    /// do not, reads no clock for its budget).
    started: Cell<Option<Instant>>,
    tripped: Cell<bool>,
    limits: Limits,
    /// How long a request may have run before its first time check ([`crate::hook`]'s
    /// timer hooks a script after one to two of these), counted as run before it.
    head_start: Duration,
    /// What a request past each budget is told, made once (the hook raises it without
    /// allocating).
    over_instructions: String,
    over_time: String,
}

impl Budget {
    pub(crate) fn new(limits: Limits, head_start: Duration) -> Budget {
        Budget {
            head_start,
            active: Cell::new(false),
            used: Cell::new(0),
            started: Cell::new(None),
            tripped: Cell::new(false),
            limits,
            over_instructions: format!(
                "instruction budget exceeded ({} instructions; lua.max_instructions)",
                limits.instructions
            ),
            over_time: format!(
                "time budget exceeded ({} ms; lua.max_ms)",
                limits.time.as_millis()
            ),
        }
    }

    fn start(&self) {
        self.used.set(0);
        self.started.set(None);
        self.tripped.set(false);
    }

    /// What the hook does every [`CHECK_EVERY`] instructions: counts them, and says why the
    /// request must stop once a budget is spent.
    pub(crate) fn tick(&self) -> Result<(), &str> {
        self.spend(u64::from(CHECK_EVERY))
    }

    /// Whether the request spent a budget: from then on its scripts get the budget's error
    /// at every instruction, and no code of theirs runs that would not be hooked.
    pub(crate) fn tripped(&self) -> bool {
        self.tripped.get()
    }

    /// Reads the clock (starting it, `head_start` early, if no check did yet) and fails once
    /// the time budget is spent, counting nothing: the timer's look between the hook's counts.
    pub(crate) fn check_time(&self) -> Result<(), &str> {
        match self.started.get() {
            Some(started) if started.elapsed() > self.limits.time => {
                self.tripped.set(true);
                Err(&self.over_time)
            }
            Some(_) => Ok(()),
            None => {
                let now = Instant::now();
                self.started
                    .set(Some(now.checked_sub(self.head_start).unwrap_or(now)));
                Ok(())
            }
        }
    }

    /// [`spend`](Self::spend) as a Lua error, for the library functions that charge work.
    fn charge(&self, n: u64) -> mlua::Result<()> {
        self.spend(n).map_err(mlua::Error::runtime)
    }

    /// Counts `n` units of work (an instruction each, or its time's worth of library work)
    /// and fails once either budget is spent.
    ///
    /// The clock is read only when the count passes a multiple of [`CHECK_EVERY`] (every hook
    /// tick does, and any large charge). The first check starts the clock, `head_start`
    /// early: what ran before it (under [`CHECK_EVERY`] instructions and cheap library calls
    /// when hooked throughout; up to two timer periods on a watched VM) is counted as that.
    pub(crate) fn spend(&self, n: u64) -> Result<(), &str> {
        let before = self.used.get();
        let used = before.saturating_add(n);
        self.used.set(used);
        if used > self.limits.instructions {
            self.tripped.set(true);
            return Err(&self.over_instructions);
        }
        if used / u64::from(CHECK_EVERY) == before / u64::from(CHECK_EVERY) {
            return Ok(());
        }
        self.check_time()
    }
}

/// Starts a request's budget (or a script's load), with the main thread's hook back to its
/// usual count when the last one spent its budget (a watched VM's was taken off instead).
fn begin(main: crate::hook::MainThread, watched: bool, budget: &Budget) {
    if budget.tripped.get() && !watched {
        crate::hook::rearm(main);
    }
    budget.start();
}

/// Why a request's script failed.
#[derive(Debug)]
pub enum Failure {
    /// The script raised an error or returned something that is not an answer.
    Error(String),
    /// It ran past its instruction or time budget.
    Budget(String),
    /// Its VM ran out of memory (`lua.max_memory_mb`).
    Memory(String),
}

/// One worker's VM.
pub struct Vm {
    lua: Lua,
    handlers: Vec<Function>,
    /// Per route: its script uses `hp.tcp`, so `handle` runs in a coroutine that can wait
    /// (a plain call otherwise, which costs less).
    in_coroutine: Vec<bool>,
    /// The request object handed to the next `handle`; a parked request keeps its own.
    req: RefCell<ReqObj>,
    /// Builds a request object (see [`ReqObj::maker`]).
    make_req: Function,
    budget: Rc<Budget>,
    /// What `hp.tcp.request` yields first, so the worker knows the yield is its own.
    mark: mlua::Table,
    /// Finished coroutines, reused for the next requests.
    free: RefCell<Vec<Thread>>,
    /// The main Lua thread, and whether its hook is set only on long runs (see `hook`).
    main: crate::hook::MainThread,
    watched: bool,
}

impl Drop for Vm {
    fn drop(&mut self) {
        // Closing the state runs the scripts' finalizers: they are bounded as scripts are.
        if self.watched {
            crate::hook::rearm(self.main);
        }
    }
}

/// Coroutines kept for reuse.
const FREE_THREADS: usize = 64;

/// Where a request stands after its script ran.
pub enum Step {
    /// Answered (the response is filled in).
    Done,
    /// Waiting for TCP exchange `job`; resume it with [`Vm::resume`].
    Waiting(Parked),
}

/// A request whose script waits for a TCP answer.
pub struct Parked {
    thread: Thread,
    /// Its request object, no longer the VM's.
    _req: ReqObj,
    /// The exchange it waits for.
    pub job: u64,
}

/// The libraries a sandboxed script gets besides the base library (`os` is cut down to
/// its clock functions by [`sandbox`]).
fn sandbox_libs() -> StdLib {
    StdLib::STRING | StdLib::TABLE | StdLib::MATH | StdLib::UTF8 | StdLib::COROUTINE | StdLib::OS
}

/// The `os` functions a sandboxed script keeps: clocks and dates, nothing that touches files,
/// processes, the environment or the locale.
const SANDBOX_OS: [&str; 4] = ["time", "clock", "date", "difftime"];

/// The longest module `require` reads.
pub(crate) const MAX_SCRIPT_BYTES: u64 = 1 << 20;

/// Closes what a script must not reach (see README, "What a script can reach"): files,
/// processes and the environment; `dofile` and `loadfile`; bytecode (`load` takes text
/// only and `string.dump` is gone, since crafted bytecode can crash the VM); `require`
/// loads text modules from `module_dir` only.
fn sandbox(lua: &Lua, module_dir: &std::path::Path) -> mlua::Result<()> {
    let g = lua.globals();
    for name in ["dofile", "loadfile"] {
        g.raw_set(name, Value::Nil)?;
    }
    let os: mlua::Table = g.get("os")?;
    let kept = lua.create_table()?;
    for name in SANDBOX_OS {
        kept.raw_set(name, os.raw_get::<Value>(name)?)?;
    }
    g.raw_set("os", kept)?;
    let string: mlua::Table = g.get("string")?;
    string.raw_set("dump", Value::Nil)?;
    // load(chunk [, name [, mode [, env]]]) with the mode forced to text; `env` passed on
    // only when given (Lua tells an absent env from a nil one).
    let raw_load: Function = g.get("load")?;
    g.raw_set(
        "load",
        lua.create_function(move |lua, args: mlua::MultiValue| {
            let mut args: Vec<Value> = args.into_iter().collect();
            args.resize(args.len().max(3), Value::Nil);
            args[2] = Value::String(lua.create_string("t")?);
            raw_load.call::<mlua::MultiValue>(mlua::MultiValue::from_vec(args))
        })?,
    )?;
    let dir = module_dir.to_path_buf();
    let loaded = lua.create_table()?;
    g.raw_set(
        "require",
        lua.create_function(move |lua, name: mlua::String| {
            let name = name.to_str()?.to_string();
            if let Some(v) = loaded.raw_get::<Option<Value>>(name.as_str())? {
                return Ok(v);
            }
            let ok = !name.is_empty()
                && name.len() <= 128
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
                && !name.starts_with('.')
                && !name.ends_with('.')
                && !name.contains("..");
            if !ok {
                return Err(mlua::Error::runtime(format!(
                    "require {name:?}: a module name is letters, digits, _ and dots"
                )));
            }
            let path = dir.join(format!("{}.lua", name.replace('.', "/")));
            let fail = |why: String| {
                mlua::Error::runtime(format!("require {name:?}: {}: {why}", path.display()))
            };
            let source = hotpath_config::file::read_bounded(&path, MAX_SCRIPT_BYTES)
                .map_err(|e| fail(e.to_string()))?;
            let globals = lua.globals();
            let scope = lua.create_table()?;
            let meta = lua.create_table()?;
            meta.raw_set("__index", &globals)?;
            scope.set_metatable(Some(meta));
            let v: Value = lua
                .load(&source[..])
                .set_mode(mlua::ChunkMode::Text)
                .set_name(format!("@{}", path.display()))
                .set_environment(scope)
                .call(name.as_str())?;
            let v = if v.is_nil() { Value::Boolean(true) } else { v };
            loaded.raw_set(name.as_str(), &v)?;
            Ok(v)
        })?,
    )?;
    Ok(())
}

/// Closes the ways code of a script ran outside the budget's hook, whatever the library set:
///
/// - **`xpcall`'s message handler.** A budget error is raised from the hook, and Lua runs
///   the message handler of the `xpcall` it unwinds to before it leaves the hook, with hooks
///   off: a loop there ran for good. Once the budget is spent, a handler is not called; the
///   error goes on as it is (and comes back at the caller's next instruction).
/// - **`__gc` finalizers**, which Lua runs with hooks off, at any allocation of any later
///   request: `setmetatable` refuses a metatable with a `__gc` field (a field added later
///   makes no finalizer, as Lua only marks an object for finalization when its metatable is
///   set).
///
/// Coroutines made in a loop are charged in `hook` (see `hooked_coroutine`).
fn guard_budget(lua: &Lua, budget: Rc<Budget>) -> mlua::Result<()> {
    let spent = lua.create_function(move |_, ()| Ok(budget.tripped()))?;
    lua.load(
        r#"
        local spent = ...
        local xpcall, setmetatable, type, rawget, error = xpcall, setmetatable, type, rawget, error
        _G.xpcall = function(f, handler, ...)
          if type(handler) ~= "function" then
            return xpcall(f, handler, ...)
          end
          return xpcall(f, function(m)
            if spent() then return m end
            return handler(m)
          end, ...)
        end
        _G.setmetatable = function(t, mt)
          if type(mt) == "table" and rawget(mt, "__gc") ~= nil then
            error("setmetatable: a __gc finalizer would run outside any request's time "
              .. "budget; it is not allowed", 2)
          end
          return setmetatable(t, mt)
        end
        "#,
    )
    .set_name("=budget")
    .call::<()>(spent)
}

fn script_error(s: &Script, message: String) -> LuaError {
    LuaError::Script {
        script: s.name.clone(),
        message,
    }
}

impl Vm {
    /// A VM with every script loaded: each compiled once and its top-level code run (within
    /// the budget of one request), each defining a global function `handle(req)`.
    pub fn new(
        scripts: &[Script],
        env: &Env,
        pool: Rc<RefCell<UdpPool>>,
        journal: Option<Rc<RefCell<JournalWriter>>>,
        tcp: Option<Rc<RefCell<TcpHandle>>>,
    ) -> Result<Vm, LuaError> {
        let lua = if env.unsafe_stdlib {
            Lua::new_with(StdLib::ALL_SAFE, LuaOptions::default())?
        } else {
            let lua = Lua::new_with(sandbox_libs(), LuaOptions::default())?;
            sandbox(&lua, &env.module_dir)?;
            lua
        };
        lua.set_memory_limit(env.limits.memory)?;
        // Generational: a request's tables die young, and a minor collection visits only the
        // young (see TUNING.md, "lua-echo and lua-json").
        lua.gc_gen(0, 0);
        let watched = env.watched && crate::hook::timer_signal();
        let budget = Rc::new(Budget::new(
            env.limits,
            if watched {
                crate::hook::ARM_AFTER
            } else {
                Duration::ZERO
            },
        ));
        // Hooked while the scripts load, whatever `watched` says.
        let main = crate::hook::install(&lua, &budget, watched);
        let b = budget.clone();
        let charge: crate::strlib::Charge = Rc::new(move |n| b.charge(n));
        crate::strlib::install(&lua, charge.clone(), env.limits.memory)?;
        install_api(&lua, env, pool.clone(), charge)?;
        let mark = install_tcp(&lua, pool, tcp, budget.clone())?;
        install_store(&lua, journal, budget.clone())?;
        // Before any script runs (see `ReqObj::maker`).
        let make_req = ReqObj::maker(&lua)?;
        // A route that runs in a coroutine: its errors are caught where they happen, with
        // [`crate::raw`]'s short traceback, and raised again from the coroutine's first level,
        // where mlua's own traceback (which walks the whole stack) costs nothing.
        let in_shallow: Function = lua
            .load(
                r#"
                local xpcall, error, short = xpcall, error, ...
                return function(handle)
                  return function(req)
                    local ok, status, headers, body = xpcall(handle, short, req)
                    if ok then return status, headers, body end
                    error(status, 0)
                  end
                end
                "#,
            )
            .set_name("=route")
            .call(crate::raw::short_traceback_function(&lua)?)?;
        guard_budget(&lua, budget.clone())?;
        let globals = lua.globals();
        let mut handlers = Vec::with_capacity(scripts.len());
        let mut in_coroutine = Vec::with_capacity(scripts.len());
        for s in scripts {
            let scope = lua.create_table()?;
            let meta = lua.create_table()?;
            meta.raw_set("__index", &globals)?;
            scope.set_metatable(Some(meta));
            begin(main, false, &budget);
            let mut chunk = lua.load(&s.source[..]);
            if !env.unsafe_stdlib {
                chunk = chunk.set_mode(mlua::ChunkMode::Text);
            }
            let chunk = chunk
                .set_name(format!("@{}", s.name))
                .set_environment(scope.clone())
                .into_function()
                .map_err(|e| script_error(s, e.to_string()))?;
            env.counters.compiles.add(1);
            chunk
                .call::<()>(())
                .map_err(|e| script_error(s, e.to_string()))?;
            in_coroutine.push(s.source.windows(6).any(|w| w == b"hp.tcp"));
            match scope.raw_get::<Value>("handle")? {
                Value::Function(f) if *in_coroutine.last().unwrap_or(&false) => {
                    handlers.push(in_shallow.call::<Function>(f)?);
                }
                Value::Function(f) => handlers.push(f),
                _ => return Err(script_error(s, "defines no function handle(req)".into())),
            }
        }
        let req = ReqObj::new(&lua, &make_req)?;
        if watched {
            crate::hook::disarm(main);
        }
        Ok(Vm {
            lua,
            handlers,
            in_coroutine,
            req: RefCell::new(req),
            make_req,
            budget,
            mark,
            free: RefCell::new(Vec::new()),
            main,
            watched,
        })
    }

    /// Runs route `route`'s `handle(req)` in a coroutine and writes its answer into `resp`,
    /// or says what it waits for.
    pub fn handle(
        &self,
        route: usize,
        req: &Request<'_, '_>,
        peer: SocketAddr,
        resp: &mut HttpResponse,
    ) -> Result<Step, Failure> {
        let _running = self.watched.then(|| crate::hook::Running::start(self.main));
        if !self.in_coroutine[route] {
            let obj = self.req.borrow();
            obj.fill(req, peer)
                .map_err(|e| Failure::Error(e.to_string()))?;
            begin(self.main, self.watched, &self.budget);
            self.budget.active.set(true);
            let result = crate::raw::call(&self.lua, &self.handlers[route], &obj.table, resp);
            self.budget.active.set(false);
            drop(obj);
            let called = match result {
                Ok(called) => called,
                Err(e) => {
                    // It may have written into `req` before it failed.
                    if self.req.borrow().written() {
                        self.fresh_req()?;
                    }
                    return Err(self.failure(e));
                }
            };
            if called.req_written {
                self.fresh_req()?;
            }
            let read = match called.answer {
                crate::raw::Answer::Read(r) => r,
                crate::raw::Answer::Values(status, headers, body) => {
                    answer(status, headers, body, resp)
                }
            };
            read.map_err(|e| {
                resp.extra_headers.clear();
                resp.body.clear();
                Failure::Error(e)
            })?;
            return Ok(Step::Done);
        }
        let obj = self.req.borrow().clone();
        obj.fill(req, peer)
            .map_err(|e| Failure::Error(e.to_string()))?;
        let handler = self.handlers[route].clone();
        let reused = self.free.borrow_mut().pop();
        let thread = match reused {
            Some(t) => {
                t.reset(handler)
                    .map_err(|e| Failure::Error(e.to_string()))?;
                t
            }
            None => {
                let t = self
                    .lua
                    .create_thread(handler)
                    .map_err(|e| Failure::Error(e.to_string()))?;
                // A coroutine has hooks of its own: the budget's too.
                crate::hook::set(&self.lua, &t).map_err(|e| Failure::Error(e.to_string()))?;
                t
            }
        };
        self.run(thread, obj, mlua::MultiValue::from_vec(vec![]), true, resp)
    }

    /// Resumes a parked request with its TCP exchange's result (the answer, or nil and why).
    pub fn resume(
        &self,
        parked: Parked,
        result: Result<Vec<u8>, String>,
        resp: &mut HttpResponse,
    ) -> Result<Step, Failure> {
        let _running = self.watched.then(|| crate::hook::Running::start(self.main));
        let to_lua = |r: Result<Vec<u8>, String>| -> mlua::Result<mlua::MultiValue> {
            Ok(match r {
                Ok(a) => {
                    mlua::MultiValue::from_vec(vec![Value::String(self.lua.create_string(a)?)])
                }
                Err(e) => mlua::MultiValue::from_vec(vec![
                    Value::Nil,
                    Value::String(self.lua.create_string(e)?),
                ]),
            })
        };
        let args = to_lua(result).map_err(|e| Failure::Error(e.to_string()))?;
        self.run(parked.thread, parked._req, args, false, resp)
    }

    /// Resumes `thread` (the first time with the request object) and sorts out how it ended.
    fn run(
        &self,
        thread: Thread,
        obj: ReqObj,
        args: mlua::MultiValue,
        first: bool,
        resp: &mut HttpResponse,
    ) -> Result<Step, Failure> {
        begin(self.main, self.watched, &self.budget);
        self.budget.active.set(true);
        let result = if first {
            thread.resume::<mlua::MultiValue>(obj.table.clone())
        } else {
            thread.resume::<mlua::MultiValue>(args)
        };
        self.budget.active.set(false);
        let values = match result {
            Ok(values) => values,
            Err(e) => {
                if first && obj.written() {
                    self.fresh_req()?;
                }
                return Err(self.failure(e));
            }
        };
        let mut values = values.into_iter();
        if thread.status() == ThreadStatus::Resumable {
            let ours = matches!(values.next(), Some(Value::Table(t)) if t == self.mark);
            let job = match values.next() {
                Some(Value::Integer(id)) if ours => id as u64,
                _ => {
                    return Err(Failure::Error(
                        "the script yielded outside hp.tcp.request (coroutine.yield at the top of handle)"
                            .into(),
                    ))
                }
            };
            if first {
                // The request object stays with the parked request; the next gets a new one.
                self.fresh_req()?;
            }
            return Ok(Step::Waiting(Parked {
                thread,
                _req: obj,
                job,
            }));
        }
        if first && obj.written() {
            self.fresh_req()?;
        }
        let (status, headers, body) = (
            values.next().unwrap_or(Value::Nil),
            values.next().unwrap_or(Value::Nil),
            values.next().unwrap_or(Value::Nil),
        );
        let mut free = self.free.borrow_mut();
        if free.len() < FREE_THREADS {
            free.push(thread);
        }
        answer(status, headers, body, resp).map_err(|e| {
            resp.extra_headers.clear();
            resp.body.clear();
            Failure::Error(e)
        })?;
        Ok(Step::Done)
    }

    /// Gives the next request a new `req` (the one it had is a parked request's, or the
    /// script wrote into it).
    fn fresh_req(&self) -> Result<(), Failure> {
        let fresh =
            ReqObj::new(&self.lua, &self.make_req).map_err(|e| Failure::Error(e.to_string()))?;
        *self.req.borrow_mut() = fresh;
        Ok(())
    }

    /// What a script's error was.
    fn failure(&self, e: mlua::Error) -> Failure {
        if self.budget.tripped.get() {
            Failure::Budget(e.to_string())
        } else if is_memory(&e) {
            // What the request held is garbage now: give it back before the next one.
            let _ = self.lua.gc_collect();
            Failure::Memory(e.to_string())
        } else {
            Failure::Error(e.to_string())
        }
    }

    /// Bytes the VM holds.
    pub fn memory(&self) -> usize {
        self.lua.used_memory()
    }
}

fn is_memory(e: &mlua::Error) -> bool {
    match e {
        mlua::Error::MemoryError(_) => true,
        // Caught and raised again as a string by a coroutine route's first level.
        mlua::Error::RuntimeError(m) => m.starts_with("not enough memory"),
        mlua::Error::CallbackError { cause, .. } => is_memory(cause),
        _ => false,
    }
}

/// Header names the server writes itself.
const FRAMING: [&str; 5] = [
    "content-length",
    "transfer-encoding",
    "connection",
    "date",
    "server",
];

fn is_token(name: &[u8]) -> bool {
    !name.is_empty()
        && name
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Adds one header `handle` returned to the response, or says why it may not be sent.
pub(crate) fn header(name: &[u8], value: &[u8], resp: &mut HttpResponse) -> Result<(), String> {
    if !is_token(name) {
        return Err(format!(
            "handle returned a bad header name {:?}",
            String::from_utf8_lossy(name)
        ));
    }
    if FRAMING
        .iter()
        .any(|f| name.eq_ignore_ascii_case(f.as_bytes()))
    {
        return Err(format!(
            "handle returned header {}, which the server sets",
            String::from_utf8_lossy(name)
        ));
    }
    if value.iter().any(|&b| b == b'\r' || b == b'\n' || b == 0) {
        return Err(format!(
            "handle returned header {} with a line break in its value",
            String::from_utf8_lossy(name)
        ));
    }
    if name.eq_ignore_ascii_case(b"content-type") {
        resp.content_type = "";
    }
    resp.extra_headers.extend_from_slice(name);
    resp.extra_headers.extend_from_slice(b": ");
    resp.extra_headers.extend_from_slice(value);
    resp.extra_headers.extend_from_slice(b"\r\n");
    Ok(())
}

/// Starts the response with the status `handle` returned (200 to 599) and the default
/// content type; headers and body follow, then [`end_answer`].
pub(crate) fn begin_answer(status: i64, resp: &mut HttpResponse) -> Result<(), String> {
    resp.status = u16::try_from(status)
        .ok()
        .filter(|s| (200..=599).contains(s))
        .ok_or_else(|| format!("handle returned status {status}, not 200..599"))?;
    resp.content_type = "text/plain";
    Ok(())
}

/// The check made once the whole answer is in the response.
pub(crate) fn end_answer(resp: &HttpResponse) -> Result<(), String> {
    if resp.status == 204 && !resp.body.is_empty() {
        return Err("handle returned a body with status 204".into());
    }
    Ok(())
}

/// Turns `handle`'s three results (status, headers or nil, body or nil) into the response.
fn answer(
    status: Value,
    headers: Value,
    body: Value,
    resp: &mut HttpResponse,
) -> Result<(), String> {
    let status = match status {
        Value::Integer(i) => i,
        Value::Number(f) if f.fract() == 0.0 => f as i64,
        other => {
            return Err(format!(
                "handle returned {} for the status, not a number",
                other.type_name()
            ))
        }
    };
    begin_answer(status, resp)?;
    match headers {
        Value::Nil => {}
        Value::Table(t) => {
            // A header's own error is kept apart from the walk's (a key or value that is not
            // a string), which mlua reports as its conversion error.
            let mut bad = None;
            let walked = t.for_each::<mlua::String, mlua::String>(|name, value| {
                header(&name.as_bytes(), &value.as_bytes(), resp).map_err(|e| {
                    bad = Some(e);
                    mlua::Error::runtime("bad header")
                })
            });
            if let Some(e) = bad {
                return Err(e);
            }
            walked.map_err(|e| {
                format!("handle returned headers that are not name = string pairs: {e}")
            })?;
        }
        other => {
            return Err(format!(
                "handle returned {} for the headers, not a table or nil",
                other.type_name()
            ))
        }
    }
    match body {
        Value::Nil => {}
        Value::String(s) => resp.body.extend_from_slice(&s.as_bytes()),
        other => {
            return Err(format!(
                "handle returned {} for the body, not a string or nil",
                other.type_name()
            ))
        }
    }
    end_answer(resp)
}

/// `hp.shared` as the scripts see it: `hp.shared:get(key)` and so on.
struct SharedHandle(Arc<SharedDict>);

fn to_val(v: Value) -> mlua::Result<Val> {
    Ok(match v {
        Value::String(s) => Val::Str(s.as_bytes().to_vec().into()),
        Value::Integer(i) => Val::Int(i),
        Value::Number(f) => Val::Num(f),
        Value::Boolean(b) => Val::Bool(b),
        other => {
            return Err(mlua::Error::runtime(format!(
                "hp.shared holds strings, numbers and booleans, not {}",
                other.type_name()
            )))
        }
    })
}

fn from_val(lua: &Lua, v: Val) -> mlua::Result<Value> {
    Ok(match v {
        Val::Str(s) => Value::String(lua.create_string(&s)?),
        Val::Int(i) => Value::Integer(i),
        Val::Num(f) => Value::Number(f),
        Val::Bool(b) => Value::Boolean(b),
    })
}

fn ttl(secs: Option<f64>) -> mlua::Result<Option<Duration>> {
    match secs {
        None => Ok(None),
        Some(0.0) => Ok(None),
        Some(s) if s > 0.0 && s.is_finite() => Ok(Some(Duration::from_secs_f64(s))),
        Some(s) => Err(mlua::Error::runtime(format!(
            "hp.shared: a time to live is seconds >= 0, not {s}"
        ))),
    }
}

impl UserData for SharedHandle {
    fn add_methods<M: UserDataMethods<Self>>(methods: &mut M) {
        // get(key) -> value or nil; nil, err for a bad key.
        methods.add_method("get", |lua, this, key: mlua::String| {
            match this.0.get(&key.to_str()?) {
                Ok(Some(v)) => Ok((from_val(lua, v)?, Value::Nil)),
                Ok(None) => Ok((Value::Nil, Value::Nil)),
                Err(e) => Ok((Value::Nil, Value::String(lua.create_string(e.to_string())?))),
            }
        });
        // set(key, value, ttl_secs?) -> true, or nil, err; set(key, nil) deletes.
        methods.add_method(
            "set",
            |lua, this, (key, value, secs): (mlua::String, Value, Option<f64>)| {
                let key = key.to_str()?;
                let done = if value.is_nil() {
                    this.0.delete(&key).map(|_| ())
                } else {
                    this.0.set(&key, to_val(value)?, ttl(secs)?)
                };
                match done {
                    Ok(()) => Ok((Value::Boolean(true), Value::Nil)),
                    Err(e) => Ok((Value::Nil, Value::String(lua.create_string(e.to_string())?))),
                }
            },
        );
        // incr(key, delta, init?, init_ttl_secs?) -> the new value, or nil, err ("not found"
        // without init, "not a number").
        methods.add_method(
            "incr",
            |lua, this, (key, delta, init, secs): (mlua::String, Value, Option<Value>, Option<f64>)| {
                let delta = to_val(delta)?;
                let init = init.map(to_val).transpose()?;
                match this.0.incr(&key.to_str()?, delta, init, ttl(secs)?) {
                    Ok(v) => Ok((from_val(lua, v)?, Value::Nil)),
                    Err(e) => Ok((Value::Nil, Value::String(lua.create_string(e.to_string())?))),
                }
            },
        );
        // delete(key) -> whether it was there.
        methods.add_method("delete", |_, this, key: mlua::String| {
            Ok(this.0.delete(&key.to_str()?).unwrap_or(false))
        });
    }
}

/// The longest name of a script's own counter.
const MAX_METRIC_NAME: usize = 64;

fn install_api(
    lua: &Lua,
    env: &Env,
    pool: Rc<RefCell<UdpPool>>,
    charge: crate::strlib::Charge,
) -> mlua::Result<()> {
    let hp = lua.create_table()?;
    hp.set("now", crate::raw::now_function(lua)?)?;
    hp.set(
        "log",
        lua.create_function(|_, (level, parts): (mlua::String, Variadic<Value>)| {
            let level = match &*level.to_str()? {
                "debug" => log::Level::Debug,
                "info" => log::Level::Info,
                "warn" => log::Level::Warn,
                "error" => log::Level::Error,
                other => {
                    return Err(mlua::Error::runtime(format!(
                        "hp.log: the level is debug, info, warn or error, not {other:?}"
                    )))
                }
            };
            if !log::log_enabled!(target: "lua", level) {
                return Ok(());
            }
            let mut text = String::new();
            for (i, p) in parts.iter().enumerate() {
                if i > 0 {
                    text.push(' ');
                }
                text.push_str(&p.to_string()?);
            }
            // What a script logs may be what a client sent, as often as it is sent: a line
            // is cut at 4 KiB, and all scripts together write 100 lines a second at most
            // (the rest counted, and said in the next line written).
            let text = hotpath_metrics::shortened(text, MAX_LOG_LINE);
            const MAX_LOG_LINE: usize = 4096;
            static LIMIT: hotpath_metrics::LogLimit = hotpath_metrics::LogLimit::new(100);
            if let Some(n) = LIMIT.allow() {
                log::log!(target: "lua", level, "{text}{}", hotpath_metrics::LeftOut(n));
            }
            Ok(())
        })?,
    )?;
    let json = lua.create_table()?;
    // JSON runs at about 2 bytes per unit of the budget (see `strlib`): decoding is charged
    // before it starts, encoding once the text is made (its size is not known before).
    let bounds = crate::json::Bounds {
        caller: "hp.json.encode",
        limit: crate::json::Limit::Memory(env.limits.memory),
    };
    json.set(
        "encode",
        crate::json::encode_function(lua, charge.clone(), bounds)?,
    )?;
    let array = lua.array_metatable();
    json.set(
        "decode",
        lua.create_function(move |lua, s: mlua::String| {
            let bytes = s.as_bytes();
            charge(bytes.len() as u64 / 2)?;
            crate::json::decode(lua, &bytes, &array)
        })?,
    )?;
    json.set("null", lua.null())?;
    hp.set("json", json)?;
    hp.set("shared", SharedHandle(env.shared.clone()))?;
    let metrics = lua.create_table()?;
    let counters = env.counters.clone();
    metrics.set(
        "incr",
        lua.create_function(move |_, (name, by): (mlua::String, Option<u64>)| {
            let name = name.to_str()?;
            let ok = !name.is_empty()
                && name.len() <= MAX_METRIC_NAME
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                && !name.as_bytes()[0].is_ascii_digit();
            if !ok {
                return Err(mlua::Error::runtime(format!(
                    "hp.metrics.incr: a name is letters, digits and _ (not first a digit), at most 64, not {:?}",
                    &*name
                )));
            }
            counters
                .user_incr(&name, by.unwrap_or(1))
                .map_err(mlua::Error::runtime)
        })?,
    )?;
    hp.set("metrics", metrics)?;
    let udp = lua.create_table()?;
    let counters = env.udp.clone();
    // hp.udp.send("host:port", bytes) -> true (sent), false (dropped: the socket's buffer
    // was full), or nil, err.
    udp.set(
        "send",
        lua.create_function(move |lua, (target, msg): (mlua::String, mlua::String)| {
            let mut pool = pool.borrow_mut();
            let to = match pool.resolve(&target.to_str()?) {
                Ok(a) => a,
                Err(e) => return Ok((Value::Nil, Value::String(lua.create_string(e)?))),
            };
            match pool.send(to, &msg.as_bytes(), &counters) {
                Ok(sent) => Ok((Value::Boolean(sent), Value::Nil)),
                Err(e) => Ok((
                    Value::Nil,
                    Value::String(lua.create_string(format!("{to}: {e}"))?),
                )),
            }
        })?,
    )?;
    hp.set("udp", udp)?;
    lua.globals().set("hp", hp)?;
    Ok(())
}

/// `hp.json.decode`: JSON text (often a request body) to a Lua value (no I/O: the decoder the
/// fuzz target drives).
pub fn json_decode(lua: &Lua, text: &[u8]) -> mlua::Result<Value> {
    crate::json::decode(lua, text, &lua.array_metatable())
}

/// `hp.json.encode` without the request's budget: a Lua value to JSON text (the fuzz target
/// encodes what it decoded).
pub fn json_encode(lua: &Lua, v: &Value) -> mlua::Result<Vec<u8>> {
    let mut out = Vec::new();
    let bounds = crate::json::Bounds {
        caller: "hp.json.encode",
        limit: crate::json::Limit::Length(usize::MAX),
    };
    crate::json::encode(
        lua,
        &mut out,
        v,
        &lua.array_metatable(),
        &|_| Ok(()),
        bounds,
    )?;
    Ok(out)
}

/// A table or column name: letters, digits and `_`, at most [`MAX_NAME_LEN`] bytes.
fn check_name(what: &str, name: &str) -> mlua::Result<()> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(mlua::Error::runtime(format!(
            "hp.store: {what} {name:?} must be letters, digits and _, at most {MAX_NAME_LEN} bytes"
        )))
    }
}

fn unix_now() -> u32 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as u32)
}

/// `hp.store`: changes written behind through the worker's journal, durable before the answer
/// leaves (the server holds answers until the turn's journal write), merged and written to
/// the database in batches by the store's flusher.
fn install_store(
    lua: &Lua,
    journal: Option<Rc<RefCell<JournalWriter>>>,
    budget: Rc<Budget>,
) -> mlua::Result<()> {
    let store = lua.create_table()?;
    let usable = move || -> mlua::Result<Rc<RefCell<JournalWriter>>> {
        if !budget.active.get() {
            return Err(mlua::Error::runtime(
                "hp.store: only while handling a request, not while the script loads",
            ));
        }
        journal.clone().ok_or_else(|| {
            mlua::Error::runtime("hp.store: the store is off (store.enabled = false)")
        })
    };
    let enqueue_usable = usable.clone();
    let array = lua.array_metatable();
    // hp.store.enqueue(table, row) -> true, or nil, err when the store is full: appends `row`
    // (a table, encoded to JSON) to the script table `table` (`hp_lua_rows`).
    store.set(
        "enqueue",
        lua.create_function(move |lua, (table, row): (mlua::String, Value)| {
            let journal = enqueue_usable()?;
            let table = table.to_str()?;
            check_name("table", &table)?;
            // Bounded in depth and length as it is made (a table nested past the depth
            // would overflow the stack of a recursive encoder).
            let mut data = Vec::new();
            let bounds = crate::json::Bounds {
                caller: "hp.store.enqueue",
                limit: crate::json::Limit::Length(MAX_ROW_LEN),
            };
            crate::json::encode(lua, &mut data, &row, &array, &|_| Ok(()), bounds)?;
            let data = String::from_utf8(data).expect("JSON text is UTF-8");
            let change = LuaChange::Row {
                table: (*table).into(),
                at: unix_now(),
                data: data.into(),
            };
            let ok = journal.borrow_mut().append(&change).is_ok();
            stored(lua, ok)
        })?,
    )?;
    // hp.store.add(table, key, column, delta) -> true, or nil, err when the store is full:
    // adds the integer `delta` to the counter (`hp_lua_counters`).
    store.set(
        "add",
        lua.create_function(
            move |lua, (table, key, column, delta): (mlua::String, mlua::String, mlua::String, i64)| {
                let journal = usable()?;
                let (table, key, column) = (table.to_str()?, key.to_str()?, column.to_str()?);
                check_name("table", &table)?;
                check_name("column", &column)?;
                if key.is_empty() || key.len() > MAX_KEY_LEN {
                    return Err(mlua::Error::runtime(format!(
                        "hp.store.add: a key is 1 to {MAX_KEY_LEN} bytes"
                    )));
                }
                if let Some(why) = hotpath_store::unstorable(&key, MAX_KEY_LEN) {
                    return Err(mlua::Error::runtime(format!(
                        "hp.store.add: the key {}",
                        why.message()
                    )));
                }
                let change = LuaChange::Add {
                    table: (*table).into(),
                    key: (*key).into(),
                    column: (*column).into(),
                    delta,
                    at: unix_now(),
                };
                let ok = journal.borrow_mut().append(&change).is_ok();
                stored(lua, ok)
            },
        )?,
    )?;
    let hp: mlua::Table = lua.globals().get("hp")?;
    hp.set("store", store)
}

fn stored(lua: &Lua, ok: bool) -> mlua::Result<(Value, Value)> {
    if ok {
        Ok((Value::Boolean(true), Value::Nil))
    } else {
        Ok((
            Value::Nil,
            Value::String(lua.create_string("store full: try again later")?),
        ))
    }
}

/// `hp.tcp.request(addr, data, opts)`: the script's coroutine yields to the worker, which
/// parks the HTTP request until the worker's TCP thread has the answer. Returns the table
/// the wrapper yields first, which marks the yield as hp.tcp's.
fn install_tcp(
    lua: &Lua,
    pool: Rc<RefCell<UdpPool>>,
    tcp: Option<Rc<RefCell<TcpHandle>>>,
    budget: Rc<Budget>,
) -> mlua::Result<mlua::Table> {
    let submit = lua.create_function(
        move |lua, (target, data, opts): (mlua::String, mlua::String, Option<mlua::Table>)| {
            let fail = |e: String| -> mlua::Result<(Value, Value)> {
                Ok((Value::Nil, Value::String(lua.create_string(e)?)))
            };
            if !budget.active.get() {
                return Err(mlua::Error::runtime(
                    "hp.tcp.request: only while handling a request, not while the script loads",
                ));
            }
            let Some(tcp) = &tcp else {
                return Err(mlua::Error::runtime("hp.tcp.request: not available here"));
            };
            let to = match pool.borrow_mut().resolve(&target.to_str()?) {
                Ok(a) => a,
                Err(e) => return fail(e),
            };
            let mut tcp = tcp.borrow_mut();
            let mut until = Until::Delimiter(b"\n".to_vec());
            let mut timeout = tcp.timeout;
            if let Some(o) = opts {
                // `delimiter`; `until` is a Lua keyword, so it is only reachable as
                // `["until"]`, which older scripts may use.
                for key in ["until", "delimiter"] {
                    if let Some(d) = o.get::<Option<mlua::String>>(key)? {
                        until = Until::Delimiter(d.as_bytes().to_vec());
                    }
                }
                if let Some(n) = o.get::<Option<u64>>("bytes")? {
                    until = Until::Bytes(n.min(crate::tcp::MAX_ANSWER as u64) as usize);
                }
                if let Some(ms) = o.get::<Option<u64>>("timeout_ms")? {
                    timeout = Duration::from_millis(ms.clamp(1, 60_000));
                }
            }
            match tcp.submit(to, data.as_bytes().to_vec(), until, timeout) {
                Ok(id) => Ok((Value::Integer(id as i64), Value::Nil)),
                Err(e) => fail(e),
            }
        },
    )?;
    let hp: mlua::Table = lua.globals().get("hp")?;
    hp.set("_tcp_submit", submit)?;
    lua.load(
        r#"
        local submit, yield = hp._tcp_submit, coroutine.yield
        hp._tcp_submit = nil
        local mark = {}
        hp.tcp = {
          -- hp.tcp.request(addr, data, {delimiter = "\n" | bytes = n, timeout_ms = ms})
          --   -> the answer, or nil, err
          request = function(addr, data, opts)
            local id, err = submit(addr, data, opts)
            if not id then return nil, err end
            return yield(mark, id)
          end,
        }
        return mark
        "#,
    )
    .set_name("=hp.tcp")
    .eval()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(instructions: u64, time: Duration) -> Budget {
        Budget::new(
            Limits {
                instructions,
                time,
                memory: 1 << 20,
            },
            Duration::ZERO,
        )
    }

    #[test]
    fn the_time_budget_is_checked_at_each_check_point_from_the_first() {
        let b = budget(u64::MAX, Duration::from_millis(20));
        b.start();
        // Small charges below a check point read no clock: nothing has started.
        for _ in 0..99 {
            b.charge(10).unwrap();
        }
        assert!(b.started.get().is_none());
        // The first check point starts the clock.
        b.charge(10).unwrap();
        assert!(b.started.get().is_some());
        std::thread::sleep(Duration::from_millis(40));
        // Past the time, a charge that stays short of the next check point passes...
        b.charge(1).unwrap();
        // ...and the next check point (a hook tick) trips the budget.
        let e = b.tick().expect_err("tripped").to_string();
        assert!(e.contains("time budget exceeded"), "{e}");
        assert!(b.tripped.get());
        // A new request starts over.
        b.start();
        assert!(!b.tripped.get() && b.started.get().is_none());
        assert!(b.tick().is_ok());
    }

    /// The timer's look at the clock counts nothing, starts the clock when no check did,
    /// and trips the budget once its time is spent.
    #[test]
    fn a_look_at_the_clock_counts_nothing() {
        let b = budget(u64::MAX, Duration::from_millis(20));
        b.start();
        assert!(b.check_time().is_ok());
        assert!(b.started.get().is_some());
        assert_eq!(b.used.get(), 0);
        std::thread::sleep(Duration::from_millis(40));
        let e = b.check_time().unwrap_err().to_string();
        assert!(e.contains("time budget exceeded") && b.tripped(), "{e}");
    }

    #[test]
    fn the_instruction_budget_is_checked_at_every_charge() {
        let b = budget(1500, Duration::from_secs(60));
        b.start();
        b.charge(1000).unwrap();
        b.charge(499).unwrap();
        let e = b.charge(2).unwrap_err().to_string();
        assert!(e.contains("instruction budget exceeded"), "{e}");
    }
}
