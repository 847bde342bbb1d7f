//! `hp.json`: JSON straight between Lua values and bytes, with no tree in between (no I/O).
//!
//! Encoding walks the Lua value once, writing into a buffer the caller keeps from call to
//! call, and refuses a value nested deeper than [`MAX_DEPTH`] as it meets it (the walk
//! recurses once per level, so a deeper table would overflow the worker's stack). Decoding
//! drives serde_json's parser (which stops at the same depth) and builds the Lua tables as it
//! reads, instead of a `serde_json::Value` first and Lua values from that.
//!
//! What maps to what, both ways:
//! - `nil` and `hp.json.null` are `null`; `null` decodes to `hp.json.null`;
//! - booleans; integers as integers; floats as serde_json writes them (`1.0`, `1e+300`), a NaN
//!   or an infinity as `null`; a JSON integer outside a Lua integer's range decodes to a float;
//! - a string that is UTF-8 as a JSON string, any other as an array of its bytes;
//! - a table whose length (`#`) is above 0, or that has the array metatable (decoded arrays
//!   get it, so `[]` comes back as `[]`), as an array of its items 1 to `#`; any other as an
//!   object, its keys UTF-8 strings, integers, floats or booleans (written as strings);
//! - a function, a coroutine or a userdata is an error.
//!
//! Encoding reads the value on the VM's stack through Lua's C API (see [`encode`], and
//! `raw.rs`), and `hp.json.encode` is a C function of its own ([`encode_function`]), which
//! takes `unsafe`; each block says why it is sound, and the tests below and the `lua_json`
//! fuzz target drive it.
#![allow(unsafe_code)]

use std::cell::RefCell;
use std::ffi::{c_int, c_void};
use std::rc::Rc;

use mlua::{ffi, Lua, LuaSerdeExt, Table, Value};
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::raw::bytes;

/// The deepest nesting encoded: as deep as serde_json's parser reads.
pub const MAX_DEPTH: usize = 128;

/// What an encoding charges the request's budget: each table's entries as it walks them,
/// then the text's size.
pub type Charge<'a> = &'a dyn Fn(u64) -> mlua::Result<()>;

/// How an encoding is bounded, and what its errors name.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// The function named in errors (`hp.json.encode`, `hp.store.enqueue`).
    pub caller: &'static str,
    /// The longest text: past it the encoding stops.
    pub limit: Limit,
}

/// The longest text an encoding may make (the text is built outside the VM's memory cap, and
/// a table can hold one long string many times over).
#[derive(Debug, Clone, Copy)]
pub enum Limit {
    /// The VM's memory cap, in bytes: past it, a memory error, as for the VM's own
    /// allocations (`lua.max_memory_mb`).
    Memory(usize),
    /// A length of the caller's own, in bytes: past it, an error saying so.
    Length(usize),
}

/// Appends `v` as JSON to `out` (cleared first).
///
/// The walk reads the value where it lies on the VM's stack (Lua's C API, inside mlua's
/// protected `exec_raw`), not through mlua's values: those make and drop a reference for
/// every string and table met, most of the cost of a small table's encoding (see TUNING.md,
/// "lua-echo and lua-json"). Nothing the walk calls can raise a Lua error: it reads (raw
/// gets, `lua_next` over keys it never changes, strings only where they are strings) and
/// grows the stack only after `lua_checkstack` said there was room.
pub fn encode(
    lua: &Lua,
    out: &mut Vec<u8>,
    v: &Value,
    array: &Table,
    charge: Charge<'_>,
    bounds: Bounds,
) -> mlua::Result<()> {
    out.clear();
    let mut enc = Encoder {
        out,
        array: array.to_pointer(),
        charge,
        bounds,
    };
    let mut walked = Ok(());
    // SAFETY: `exec_raw` pushes `v` (slot 1 of a fresh protected call) and runs the closure
    // inside `lua_pcall`; `walk` reads slot 1. The stack is emptied before the closure
    // returns, so nothing comes back.
    unsafe {
        lua.exec_raw::<()>(v, |state| {
            walked = enc.walk(state);
            ffi::lua_settop(state, 0);
        })?;
    }
    walked
}

/// What `hp.json.encode`'s C function keeps from call to call: the text's buffer and what
/// the walk needs, and the error of a failed call until the function that raises it takes
/// it.
struct EncodeFn {
    buf: RefCell<Vec<u8>>,
    array: *const c_void,
    charge: crate::strlib::Charge,
    bounds: Bounds,
    failed: RefCell<Option<mlua::Error>>,
}

/// Keeps every [`EncodeFn`] of a VM in its app data: mlua drops app data after it closes
/// the state, so the address a C function holds stays good for every call it can get,
/// finalizers run at the close included.
struct KeepEncodeFn(Vec<Rc<EncodeFn>>);

/// The largest buffer `hp.json.encode` keeps for the next call.
const MAX_KEPT: usize = 64 << 10;

impl EncodeFn {
    /// Encodes slot 1 into the buffer. Returns the text's address and length, or `None`
    /// with the error kept in `failed`. Every Rust value it makes is dropped when it
    /// returns.
    ///
    /// # Safety
    /// Slot 1 exists; the text is used only until the buffer is next borrowed.
    unsafe fn run(&self, state: *mut ffi::lua_State) -> Option<(*const u8, usize)> {
        let walked = match self.buf.try_borrow_mut() {
            Ok(mut buf) => {
                buf.clear();
                let mut enc = Encoder {
                    out: &mut buf,
                    array: self.array,
                    charge: &*self.charge,
                    bounds: self.bounds,
                };
                // SAFETY: slot 1 exists (the caller's contract).
                unsafe { enc.walk(state) }
                    .and_then(|()| (self.charge)(enc.out.len() as u64 / 2))
                    .map(|()| (buf.as_ptr(), buf.len()))
            }
            // Nothing the walk calls runs Lua code, so no call can come while one is under way.
            Err(_) => Err(mlua::Error::runtime(format!(
                "{}: called while encoding",
                self.bounds.caller
            ))),
        };
        match walked {
            Ok(text) => Some(text),
            Err(e) => {
                *self.failed.borrow_mut() = Some(e);
                None
            }
        }
    }

    /// After a call: a large text's buffer is not held on to.
    fn trim(&self) {
        if let Ok(mut buf) = self.buf.try_borrow_mut() {
            if buf.capacity() > MAX_KEPT {
                *buf = Vec::new();
            }
        }
    }
}

/// `hp.json.encode(v)` as a C closure: upvalue 1 raises a failed call's error, upvalue 2
/// points at the [`EncodeFn`].
///
/// The walk reads `v` where the caller passed it and raises nothing, so this needs none of
/// what an mlua callback pays on every call: converting the argument to an mlua value (a
/// reference made and dropped), a protected call for the walk, another to make the string.
/// Lua errors unwind by `longjmp`, which must not pass a Rust value with a destructor: the
/// two calls below that may raise (making the string: a memory error; the error function)
/// come after [`EncodeFn::run`] has returned, when this frame holds only a reference and
/// plain numbers.
unsafe extern "C-unwind" fn encode_c(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: `encode_function` made this closure with these two upvalues; the `EncodeFn`
    // lives in the VM's app data until after the state is closed (see `KeepEncodeFn`).
    // Lua calls a C function with LUA_MINSTACK free slots: `lua_settop` uses at most one,
    // the walk checks for its own, and the result or the error function takes one.
    unsafe {
        let this = &*ffi::lua_touserdata(state, ffi::lua_upvalueindex(2)).cast::<EncodeFn>();
        // Only the first argument; none is nil, as it was for the callback.
        ffi::lua_settop(state, 1);
        match this.run(state) {
            Some((text, len)) => {
                // Copies the text before anything else runs (a finalizer that calls here
                // again may run when the string is made, after the copy).
                ffi::lua_pushlstring(state, text.cast(), len);
                this.trim();
                1
            }
            None => {
                ffi::lua_pushvalue(state, ffi::lua_upvalueindex(1));
                ffi::lua_call(state, 0, 0);
                // Not reached: the error function raises.
                0
            }
        }
    }
}

/// `hp.json.encode` for a VM: a value to JSON text, bounded by `bounds`, its work charged
/// by `charge` (each table's entries, then the text's size at 2 bytes a unit).
pub fn encode_function(
    lua: &Lua,
    charge: crate::strlib::Charge,
    bounds: Bounds,
) -> mlua::Result<mlua::Function> {
    let this = Rc::new(EncodeFn {
        buf: RefCell::new(Vec::new()),
        array: lua.array_metatable().to_pointer(),
        charge,
        bounds,
        failed: RefCell::new(None),
    });
    let kept = this.clone();
    let raise = lua.create_function(move |_, ()| -> mlua::Result<()> {
        Err(kept
            .failed
            .borrow_mut()
            .take()
            .unwrap_or_else(|| mlua::Error::runtime(format!("{}: failed", kept.bounds.caller))))
    })?;
    let at = Rc::as_ptr(&this).cast_mut().cast::<c_void>();
    match lua.app_data_mut::<KeepEncodeFn>() {
        Some(mut kept) => kept.0.push(this),
        None => drop(lua.set_app_data(KeepEncodeFn(vec![this]))),
    }
    // SAFETY: `exec_raw` pushes `raise` (slot 1 of a protected call); the closure pushes
    // one more value and `lua_pushcclosure` pops both as its upvalues, leaving the new
    // function as the one result.
    unsafe {
        lua.exec_raw(raise, |state| {
            ffi::lua_pushlightuserdata(state, at);
            ffi::lua_pushcclosure(state, encode_c, 2);
        })
    }
}

struct Encoder<'o, 'c> {
    out: &'o mut Vec<u8>,
    /// The array metatable, by address.
    array: *const c_void,
    charge: Charge<'c>,
    bounds: Bounds,
}

/// A type's name as mlua's `Value::type_name` gives it.
///
/// # Safety
/// Slot `idx` exists and holds a value of Lua type `t`.
unsafe fn type_name(state: *mut ffi::lua_State, idx: c_int, t: c_int) -> &'static str {
    match t {
        ffi::LUA_TNIL | ffi::LUA_TNONE => "nil",
        ffi::LUA_TBOOLEAN => "boolean",
        ffi::LUA_TLIGHTUSERDATA => "lightuserdata",
        // SAFETY: the caller's contract.
        ffi::LUA_TNUMBER if unsafe { ffi::lua_isinteger(state, idx) } != 0 => "integer",
        ffi::LUA_TNUMBER => "number",
        ffi::LUA_TSTRING => "string",
        ffi::LUA_TTABLE => "table",
        ffi::LUA_TFUNCTION => "function",
        ffi::LUA_TTHREAD => "thread",
        _ => "userdata",
    }
}

impl Encoder<'_, '_> {
    /// The value in slot 1, whole, within its bound. Raises no Lua error: it keeps its
    /// pushes within the room it checks for.
    ///
    /// # Safety
    /// Slot 1 exists.
    unsafe fn walk(&mut self, state: *mut ffi::lua_State) -> mlua::Result<()> {
        // SAFETY: the caller's contract.
        unsafe { self.value(state, 1, 0) }?;
        self.fits()
    }

    fn error(&self, what: impl std::fmt::Display) -> mlua::Error {
        mlua::Error::runtime(format!("{}: {what}", self.bounds.caller))
    }

    /// An error once the text is past its bound.
    fn fits(&self) -> mlua::Result<()> {
        match self.bounds.limit {
            Limit::Memory(max) if self.out.len() > max => Err(mlua::Error::MemoryError(format!(
                "not enough memory: {}'s text passed {max} bytes (lua.max_memory_mb)",
                self.bounds.caller
            ))),
            Limit::Length(max) if self.out.len() > max => {
                Err(self.error(format!("the JSON text is longer than {max} bytes")))
            }
            _ => Ok(()),
        }
    }

    /// The value at absolute slot `idx`, a table's items `depth` levels down.
    ///
    /// # Safety
    /// `state` is inside a protected call and slot `idx` exists.
    unsafe fn value(
        &mut self,
        state: *mut ffi::lua_State,
        idx: c_int,
        depth: usize,
    ) -> mlua::Result<()> {
        // SAFETY: the caller's contract; each accessor is called for the type it reads.
        unsafe {
            match ffi::lua_type(state, idx) {
                ffi::LUA_TNIL => self.out.extend_from_slice(b"null"),
                ffi::LUA_TLIGHTUSERDATA if ffi::lua_touserdata(state, idx).is_null() => {
                    self.out.extend_from_slice(b"null")
                }
                ffi::LUA_TBOOLEAN => {
                    self.out
                        .extend_from_slice(if ffi::lua_toboolean(state, idx) != 0 {
                            b"true"
                        } else {
                            b"false"
                        })
                }
                ffi::LUA_TNUMBER if ffi::lua_isinteger(state, idx) != 0 => {
                    let i = ffi::lua_tointegerx(state, idx, std::ptr::null_mut());
                    self.out
                        .extend_from_slice(itoa::Buffer::new().format(i).as_bytes())
                }
                ffi::LUA_TNUMBER => {
                    self.float(ffi::lua_tonumberx(state, idx, std::ptr::null_mut()))
                }
                ffi::LUA_TSTRING => self.string(bytes(state, idx)),
                ffi::LUA_TTABLE => self.table(state, idx, depth + 1)?,
                t => {
                    return Err(self.error(format!("cannot encode a {}", type_name(state, idx, t))))
                }
            }
        }
        Ok(())
    }

    fn float(&mut self, n: f64) {
        if n.is_finite() {
            // serde_json's own text for it (ryu, `.0` on whole numbers); no allocation.
            let _ = serde_json::to_writer(&mut *self.out, &n);
        } else {
            self.out.extend_from_slice(b"null");
        }
    }

    /// A JSON string with serde_json's escapes, or an array of the bytes when not UTF-8.
    fn string(&mut self, bytes: &[u8]) {
        if !self.text(bytes) {
            let _ = serde_json::to_writer(&mut *self.out, bytes);
        }
    }

    /// `bytes` as a JSON string when they are UTF-8 text; false, with nothing written, when
    /// they are not.
    fn text(&mut self, bytes: &[u8]) -> bool {
        // Most keys and values are printable ASCII with nothing to escape: copied as they are.
        if bytes
            .iter()
            .all(|&b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
        {
            self.out.reserve(bytes.len() + 2);
            self.out.push(b'"');
            self.out.extend_from_slice(bytes);
            self.out.push(b'"');
            return true;
        }
        match std::str::from_utf8(bytes) {
            Ok(s) => {
                let _ = serde_json::to_writer(&mut *self.out, s);
                true
            }
            Err(_) => false,
        }
    }

    /// The table at absolute slot `idx`, `depth` levels down.
    ///
    /// # Safety
    /// `state` is inside a protected call and slot `idx` holds a table.
    unsafe fn table(
        &mut self,
        state: *mut ffi::lua_State,
        idx: c_int,
        depth: usize,
    ) -> mlua::Result<()> {
        if depth > MAX_DEPTH {
            return Err(self.error(format!(
                "nested deeper than {MAX_DEPTH} levels (or a table holds itself)"
            )));
        }
        let mut entries = 1u64;
        // SAFETY: slot `idx` holds a table (the caller's contract); every push below (a
        // metatable, an item, a key and its value: at most two at a time) fits in the room
        // `lua_checkstack` made, and each is popped before the next level's check.
        unsafe {
            if ffi::lua_checkstack(state, 2) == 0 {
                return Err(self.error("no room on the Lua stack"));
            }
            let len = ffi::lua_rawlen(state, idx);
            let array = len > 0
                || (ffi::lua_getmetatable(state, idx) != 0 && {
                    let ours = ffi::lua_topointer(state, -1) == self.array;
                    ffi::lua_pop(state, 1);
                    ours
                });
            if array {
                self.out.push(b'[');
                // Items 1 to `#`, raw (as mlua's own serializer reads an array).
                for i in 1..=len {
                    if i > 1 {
                        self.out.push(b',');
                    }
                    entries += 1;
                    ffi::lua_rawgeti(state, idx, i as ffi::lua_Integer);
                    let item = self.value(state, ffi::lua_gettop(state), depth);
                    ffi::lua_pop(state, 1);
                    item?;
                    self.fits()?;
                }
                self.out.push(b']');
            } else {
                self.out.push(b'{');
                ffi::lua_pushnil(state);
                while ffi::lua_next(state, idx) != 0 {
                    if entries > 1 {
                        self.out.push(b',');
                    }
                    entries += 1;
                    let top = ffi::lua_gettop(state);
                    let pair = self.key(state, top - 1).and_then(|()| {
                        self.out.push(b':');
                        self.value(state, top, depth)
                    });
                    // Back to the key alone, for `lua_next` (after an error the walk ends and
                    // `encode` empties the stack).
                    ffi::lua_settop(state, top - 1);
                    pair?;
                    self.fits()?;
                }
                self.out.push(b'}');
            }
        }
        (self.charge)(entries)
    }

    /// An object's key at slot `idx`: a string, or a number or boolean written as one (read,
    /// never converted in place, so `lua_next` finds its place again).
    ///
    /// # Safety
    /// Slot `idx` exists.
    unsafe fn key(&mut self, state: *mut ffi::lua_State, idx: c_int) -> mlua::Result<()> {
        // SAFETY: the caller's contract; each accessor is called for the type it reads.
        unsafe {
            match ffi::lua_type(state, idx) {
                ffi::LUA_TSTRING => {
                    if !self.text(bytes(state, idx)) {
                        return Err(self.error("an object's key must be UTF-8 text"));
                    }
                }
                ffi::LUA_TNUMBER if ffi::lua_isinteger(state, idx) != 0 => {
                    let i = ffi::lua_tointegerx(state, idx, std::ptr::null_mut());
                    self.out.push(b'"');
                    self.out
                        .extend_from_slice(itoa::Buffer::new().format(i).as_bytes());
                    self.out.push(b'"');
                }
                ffi::LUA_TNUMBER => {
                    let n = ffi::lua_tonumberx(state, idx, std::ptr::null_mut());
                    if !n.is_finite() {
                        return Err(self.error("an object's key must be a finite number"));
                    }
                    self.out.push(b'"');
                    self.float(n);
                    self.out.push(b'"');
                }
                ffi::LUA_TBOOLEAN => {
                    self.out
                        .extend_from_slice(if ffi::lua_toboolean(state, idx) != 0 {
                            b"\"true\""
                        } else {
                            b"\"false\""
                        })
                }
                t => {
                    return Err(self.error(format!(
                        "an object's key must be a string or a number, not a {}",
                        type_name(state, idx, t)
                    )))
                }
            }
        }
        Ok(())
    }
}

/// Decodes JSON text to a Lua value; arrays get `array` as their metatable.
pub fn decode(lua: &Lua, text: &[u8], array: &Table) -> mlua::Result<Value> {
    let mut de = serde_json::Deserializer::from_slice(text);
    let v = Seed { lua, array }
        .deserialize(&mut de)
        .and_then(|v| de.end().map(|()| v))
        .map_err(|e| mlua::Error::runtime(format!("hp.json.decode: {e}")))?;
    Ok(v)
}

/// Builds one Lua value from what the parser reads.
#[derive(Clone, Copy)]
struct Seed<'l> {
    lua: &'l Lua,
    array: &'l Table,
}

/// A Lua error (memory, mostly) as the parser's error.
fn lua_error<E: serde::de::Error>(e: mlua::Error) -> E {
    E::custom(e)
}

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Value, E> {
        Ok(self.lua.null())
    }

    fn visit_bool<E: serde::de::Error>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Boolean(b))
    }

    fn visit_i64<E: serde::de::Error>(self, i: i64) -> Result<Value, E> {
        Ok(Value::Integer(i))
    }

    fn visit_u64<E: serde::de::Error>(self, u: u64) -> Result<Value, E> {
        Ok(i64::try_from(u).map_or(Value::Number(u as f64), Value::Integer))
    }

    fn visit_f64<E: serde::de::Error>(self, n: f64) -> Result<Value, E> {
        Ok(Value::Number(n))
    }

    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Value, E> {
        self.lua
            .create_string(s)
            .map(Value::String)
            .map_err(lua_error)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let t = self
            .lua
            .create_table_with_capacity(seq.size_hint().unwrap_or(0), 0)
            .map_err(lua_error)?;
        t.set_metatable(Some(self.array.clone()));
        let mut i = 0;
        while let Some(v) = seq.next_element_seed(self)? {
            i += 1;
            t.raw_seti(i, v).map_err(lua_error)?;
        }
        Ok(Value::Table(t))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        // Room for a few keys up front (the parser does not say how many come): most
        // objects are small, and a table grown key by key rehashes at 1, 2 and 4.
        let t = self
            .lua
            .create_table_with_capacity(0, map.size_hint().unwrap_or(4))
            .map_err(lua_error)?;
        while let Some(k) = map.next_key_seed(self)? {
            let v = map.next_value_seed(self)?;
            t.raw_set(k, v).map_err(lua_error)?;
        }
        Ok(Value::Table(t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ANY: Bounds = Bounds {
        caller: "hp.json.encode",
        limit: Limit::Length(usize::MAX),
    };

    fn lua() -> Lua {
        Lua::new()
    }

    fn enc(lua: &Lua, code: &str) -> Result<String, String> {
        let v: Value = lua.load(code).eval().unwrap();
        let mut out = Vec::new();
        encode(lua, &mut out, &v, &lua.array_metatable(), &|_| Ok(()), ANY)
            .map(|()| String::from_utf8(out).unwrap())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn encodes_what_the_module_doc_says() {
        let l = lua();
        l.globals().set("null", l.null()).unwrap();
        let cases = [
            ("nil", "null"),
            ("null", "null"),
            ("true", "true"),
            ("-42", "-42"),
            ("1.5", "1.5"),
            ("3.0", "3.0"),
            ("1e300", "1e+300"),
            ("0/0", "null"),
            ("1/0", "null"),
            (r#""a\"b\n\0é""#, r#""a\"b\n\u0000é""#),
            (r#""\xff\x01""#, "[255,1]"),
            (r#""back\\slash \x1f""#, r#""back\\slash \u001f""#),
            (r#"{ ["k\"ey"] = 'v\t' }"#, r#"{"k\"ey":"v\t"}"#),
            ("{}", "{}"),
            ("{1, 2, {}}", "[1,2,{}]"),
            ("{ a = { b = 'c' } }", r#"{"a":{"b":"c"}}"#),
            ("{ [7] = 'x' }", r#"{"7":"x"}"#),
            ("{ [1.5] = 'x' }", r#"{"1.5":"x"}"#),
            ("{ [true] = 'x' }", r#"{"true":"x"}"#),
        ];
        for (code, want) in cases {
            assert_eq!(
                enc(&l, &format!("return {code}")).as_deref(),
                Ok(want),
                "{code}"
            );
        }
        // A table with both parts: its array items only (as `#` counts them).
        assert_eq!(enc(&l, "return { 1, 2, x = 3 }").as_deref(), Ok("[1,2]"));
        let refused = [
            ("return print", "cannot encode a function"),
            ("return { f = print }", "cannot encode a function"),
            (
                "return { coroutine.create(print) }",
                "cannot encode a thread",
            ),
            (
                "return { [{}] = 1 }",
                "key must be a string or a number, not a table",
            ),
            ("return { [1/0] = 1 }", "key must be a finite number"),
            (r#"return { ["\xff"] = 1 }"#, "key must be UTF-8 text"),
        ];
        for (code, want) in refused {
            let e = enc(&l, code).unwrap_err();
            assert!(e.contains(want), "{code}: {e}");
        }
    }

    #[test]
    fn depth_is_bounded_and_a_table_holding_itself_is_an_error() {
        let l = lua();
        let deep = |n: usize| format!("local t = {{}} for i = 1, {n} do t = {{ t }} end return t");
        // 128 levels (the empty table and 127 around it) encode; 129 do not.
        assert_eq!(enc(&l, &deep(127)).unwrap().len(), 256);
        assert!(enc(&l, &deep(128)).unwrap_err().contains("deeper than 128"));
        let e = enc(&l, "local t = {} t.me = t return t").unwrap_err();
        assert!(e.contains("holds itself"), "{e}");
        // A table reached twice, but not inside itself, is fine.
        assert_eq!(
            enc(&l, "local t = { 1 } return { a = t, b = t }").map(|s| s.len()),
            Ok(r#"{"a":[1],"b":[1]}"#.len())
        );
    }

    #[test]
    fn the_c_function_encodes_raises_what_the_walk_found_and_outlives_the_state() {
        let l = lua();
        let charged = Rc::new(std::cell::Cell::new(0u64));
        let c = charged.clone();
        let limit = Rc::new(std::cell::Cell::new(u64::MAX));
        let lim = limit.clone();
        let charge: Rc<dyn Fn(u64) -> mlua::Result<()>> = Rc::new(move |n| {
            c.set(c.get() + n);
            if c.get() > lim.get() {
                return Err(mlua::Error::runtime("out of budget"));
            }
            Ok(())
        });
        let bounds = Bounds {
            caller: "hp.json.encode",
            limit: Limit::Memory(1 << 20),
        };
        let f = encode_function(&l, charge, bounds).unwrap();
        l.globals().set("enc", f).unwrap();
        let run = |code: &str| l.load(code).eval::<String>().map_err(|e| e.to_string());
        // Values as the walk writes them; only the first argument counts, none is null.
        assert_eq!(
            run("return enc({ a = { 1, 2 } }, 'ignored')").unwrap(),
            r#"{"a":[1,2]}"#
        );
        assert_eq!(run("return enc()").unwrap(), "null");
        // Entries, then the text at 2 bytes a unit: two tables (each counted with its
        // entries) and 11 bytes, then 4 bytes of "null".
        assert_eq!(charged.get(), 2 + 3 + 11 / 2 + 4 / 2);
        // What the walk refuses is raised as a Lua error a script can catch, and the next
        // call works.
        let caught = run("local ok, e = pcall(enc, { f = print }) \
             return tostring(ok) .. ' ' .. tostring(e) .. ' ' .. enc({ 1 })")
        .unwrap();
        assert!(caught.starts_with("false "), "{caught}");
        assert!(
            caught.contains("hp.json.encode: cannot encode a function"),
            "{caught}"
        );
        assert!(caught.ends_with(" [1]"), "{caught}");
        let e = run("local t = {} t[1] = t return enc(t)").unwrap_err();
        assert!(e.contains("nested deeper than 128 levels"), "{e}");
        // Past the memory bound: a memory error, as before the text is made.
        let e = l
            .load("local s = string.rep('x', 100000) local t = {} for i = 1, 100 do t[i] = s end return enc(t)")
            .eval::<String>()
            .unwrap_err();
        assert!(is_memory_error(&e), "{e}");
        // The budget's error stops it.
        limit.set(charged.get() + 3);
        let e = run("return enc({ 1, 2, 3, 4, 5 })").unwrap_err();
        assert!(e.contains("out of budget"), "{e}");
        limit.set(u64::MAX);
        // A large text's buffer is let go after the call; the next small one still works.
        assert_eq!(
            run("return #enc({ string.rep('y', 100000) })").unwrap(),
            "100004"
        );
        assert_eq!(run("return enc({ ok = true })").unwrap(), r#"{"ok":true}"#);
        // Finalizers run at the state's close may call it: the state it points at is still
        // there.
        l.load("setmetatable({}, { __gc = function() enc({ 1, { 2 } }) end })")
            .exec()
            .unwrap();
        let before = charged.get();
        drop(l);
        assert!(charged.get() > before, "the finalizer's call ran");
    }

    fn is_memory_error(e: &mlua::Error) -> bool {
        match e {
            mlua::Error::MemoryError(_) => true,
            mlua::Error::CallbackError { cause, .. } => is_memory_error(cause),
            _ => false,
        }
    }

    #[test]
    fn the_budget_is_charged_per_entry() {
        let l = lua();
        let v: Value = l.load("return { 1, 2, { 3 } }").eval().unwrap();
        let charged = std::cell::Cell::new(0);
        let charge = |n| {
            charged.set(charged.get() + n);
            Ok(())
        };
        let mut out = Vec::new();
        encode(&l, &mut out, &v, &l.array_metatable(), &charge, ANY).unwrap();
        assert_eq!(charged.get(), 4 + 2);
        let stop = |_| Err(mlua::Error::runtime("out of budget"));
        let e = encode(&l, &mut Vec::new(), &v, &l.array_metatable(), &stop, ANY).unwrap_err();
        assert!(e.to_string().contains("out of budget"), "{e}");
        // A bound on the text stops a large table early, naming the caller.
        let big: Value = l
            .load("local t = {} for i = 1, 100000 do t[i] = i end return t")
            .eval()
            .unwrap();
        let bounds = Bounds {
            caller: "hp.store.enqueue",
            limit: Limit::Length(1000),
        };
        let mut out = Vec::new();
        let e = encode(
            &l,
            &mut out,
            &big,
            &l.array_metatable(),
            &|_| Ok(()),
            bounds,
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("hp.store.enqueue: the JSON text is longer than 1000 bytes"),
            "{e}"
        );
        assert!(out.len() < 1100, "stopped at {} bytes", out.len());
        // One long string held many times: stopped at the memory cap, as a memory error.
        let wide: Value = l
            .load("local s = string.rep('x', 100000) local t = {} for i = 1, 1000 do t[i] = s end return t")
            .eval()
            .unwrap();
        let bounds = Bounds {
            caller: "hp.json.encode",
            limit: Limit::Memory(1 << 20),
        };
        let e = encode(
            &l,
            &mut out,
            &wide,
            &l.array_metatable(),
            &|_| Ok(()),
            bounds,
        )
        .unwrap_err();
        assert!(matches!(e, mlua::Error::MemoryError(_)), "{e}");
        assert!(
            out.len() < (1 << 20) + 200_000,
            "stopped at {} bytes",
            out.len()
        );
    }

    #[test]
    fn decodes_and_round_trips() {
        let l = lua();
        let mt = l.array_metatable();
        let text = r#"{"a":[1,2.5,"x",null,true,[],{}],"big":18446744073709551615,"neg":-7}"#;
        let v = decode(&l, text.as_bytes(), &mt).unwrap();
        let t = v.as_table().unwrap();
        let a: Table = t.get("a").unwrap();
        assert_eq!(a.raw_len(), 7);
        assert_eq!(a.get::<Value>(4).unwrap(), l.null());
        assert_eq!(t.get::<f64>("big").unwrap(), u64::MAX as f64);
        assert_eq!(t.get::<i64>("neg").unwrap(), -7);
        // Encoded again: the same document (an empty array stays one; keys in any order).
        let mut out = Vec::new();
        encode(&l, &mut out, &v, &mt, &|_| Ok(()), ANY).unwrap();
        let back: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let mut want: serde_json::Value = serde_json::from_str(text).unwrap();
        want["big"] = serde_json::json!(u64::MAX as f64);
        assert_eq!(back, want);
        for bad in ["", "{", "[1,]", "nul", "1 2", r#"{"a":1}x"#] {
            let e = decode(&l, bad.as_bytes(), &mt).unwrap_err().to_string();
            assert!(e.contains("hp.json.decode:"), "{bad}: {e}");
        }
        let deep = "[".repeat(200) + &"]".repeat(200);
        assert!(decode(&l, deep.as_bytes(), &mt).is_err());
    }
}
