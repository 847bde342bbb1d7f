//! The `req` a script's `handle(req)` gets: one object per VM, refilled for every request
//! from reused buffers. Nothing is made for the script until it asks: `req.method` makes one
//! string, `req:header("x")` looks one header up, and only `req:headers()` or `req:args()`
//! build a table.
//!
//! What the script holds is an empty table (its metatable hidden, writes refused) that
//! reads through a table of the fields made so far: a field read again while its text
//! repeats (a route's method, path and address mostly do) is a table lookup in the VM, where
//! a userdata's field is a call into mlua. The first read of a field, and a method, go on
//! to the Rust object ([`Req`], a userdata the script cannot reach).

use std::cell::Cell;

use hotpath_service::Request;
use hotpath_wire::query;
use mlua::{AnyUserData, Function, Lua, Table, UserData, UserDataFields, UserDataMethods, Value};

/// The request as the script sees it.
#[derive(Default)]
pub struct Req {
    method: Field,
    path: Field,
    query: Field,
    /// Header names and values, back to back in `head`: (name end, value end) per header.
    head: Vec<u8>,
    headers: Vec<(usize, usize, usize)>,
    body: Field,
    /// The remote address (its port is not shown to scripts).
    remote: Option<std::net::IpAddr>,
    /// The remote address's text, made again only when the address changes (a kept-alive
    /// connection's requests share it).
    remote_text: Field,
}

/// The fields, by name, in the order of [`Req::fill`]'s mask.
const FIELDS: [&str; 5] = ["method", "path", "query", "body", "remote"];

/// One of the request's texts, and whether the fields' table holds a Lua string of it (only
/// what a script asked for is made; a new text takes it out).
#[derive(Default)]
struct Field {
    bytes: Vec<u8>,
    made: Cell<bool>,
}

impl Field {
    /// Takes a new text; true when the string made of the old one must go.
    fn set(&mut self, new: &[u8]) -> bool {
        // Compared only when a string was made of the text before (nothing to keep
        // otherwise), and only when the lengths agree.
        let made = self.made.get();
        if made && self.bytes.len() == new.len() && (new.is_empty() || self.bytes == new) {
            return false;
        }
        self.made.set(false);
        self.bytes.clear();
        self.bytes.extend_from_slice(new);
        made
    }

    fn get(&self, lua: &mlua::Lua) -> mlua::Result<mlua::String> {
        let s = lua.create_string(&self.bytes)?;
        self.made.set(true);
        Ok(s)
    }
}

/// Compiled and run once per VM, when its globals are still the libraries': returns the
/// function that builds a `req` around a userdata (its argument). It keeps the library
/// functions it uses as they were then, so a script that changes the globals changes nothing
/// here. The methods become functions of the table (a method of the userdata wants the
/// userdata as `self`); each field is cached in the fields' table once read.
const MAKER: &str = r#"
local rawset, type, error, setmetatable = rawset, type, error, setmetatable
return function(ud)
  local function method(name)
    local m = ud[name]
    return function(_, ...) return m(ud, ...) end
  end
  local fields = {
    header = method("header"), headers = method("headers"),
    arg = method("arg"), args = method("args"),
  }
  setmetatable(fields, { __index = function(t, k)
    local v = ud[k]
    if type(v) == "string" then rawset(t, k, v) end
    return v
  end })
  local req = setmetatable({}, {
    __index = fields,
    __newindex = function() error("req is read-only", 2) end,
    __metatable = "req",
  })
  return req, fields
end
"#;

/// A `req` object: what the script gets, and the Rust request behind it.
#[derive(Clone)]
pub(crate) struct ReqObj {
    /// The table `handle` gets.
    pub table: Table,
    fields: Table,
    ud: AnyUserData,
}

impl ReqObj {
    /// The function [`ReqObj::new`] builds with; made once per VM, before any script runs.
    pub fn maker(lua: &Lua) -> mlua::Result<Function> {
        lua.load(MAKER).set_name("=req").call(())
    }

    /// A new `req` with an empty request, built by `maker`.
    pub fn new(lua: &Lua, maker: &Function) -> mlua::Result<ReqObj> {
        let ud = lua.create_userdata(Req::default())?;
        let (table, fields) = maker.call::<(Table, Table)>(ud.clone())?;
        Ok(ReqObj { table, fields, ud })
    }

    /// Takes the request's parts, and takes out of the fields' table the strings of texts
    /// that changed.
    pub fn fill(&self, req: &Request<'_, '_>, remote: std::net::SocketAddr) -> mlua::Result<()> {
        let stale = self.ud.borrow_mut::<Req>()?.fill(req, remote);
        if stale != 0 {
            for (i, name) in FIELDS.iter().enumerate() {
                if stale & (1 << i) != 0 {
                    self.fields.raw_set(*name, Value::Nil)?;
                }
            }
        }
        Ok(())
    }

    /// Whether the script wrote into the table it got (with `rawset`: its metatable refuses
    /// plain writes).
    pub fn written(&self) -> bool {
        self.table.clone().pairs::<Value, Value>().next().is_some()
    }
}

impl Req {
    /// Takes the request's parts into this object's buffers. Returns a mask of the fields (in
    /// the order of [`FIELDS`]) whose string made of the last text must go.
    pub fn fill(&mut self, req: &Request<'_, '_>, remote: std::net::SocketAddr) -> u8 {
        let mut stale = u8::from(self.method.set(req.method.as_bytes()));
        stale |= u8::from(self.path.set(req.path.as_bytes())) << 1;
        stale |= u8::from(self.query.set(req.query)) << 2;
        self.head.clear();
        self.headers.clear();
        for h in req.headers {
            let start = self.head.len();
            self.head.extend_from_slice(h.name.as_bytes());
            let name_end = self.head.len();
            self.head.extend_from_slice(h.value);
            self.headers.push((start, name_end, self.head.len()));
        }
        stale |= u8::from(self.body.set(req.body)) << 3;
        if self.remote != Some(remote.ip()) {
            self.remote = Some(remote.ip());
            stale |= u8::from(self.remote_text.set(remote.ip().to_string().as_bytes())) << 4;
        }
        stale
    }

    fn header(&self, name: &[u8]) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|&&(s, n, _)| self.head[s..n].eq_ignore_ascii_case(name))
            .map(|&(_, n, e)| &self.head[n..e])
    }

    fn arg(&self, name: &[u8]) -> Option<Vec<u8>> {
        query::pairs(&self.query.bytes)
            .find(|(k, _)| decode(k).as_deref() == Some(name))
            .map(|(_, v)| decode(v).unwrap_or_else(|| v.to_vec()))
    }
}

/// A query key or value percent-decoded; `None` when malformed.
fn decode(raw: &[u8]) -> Option<Vec<u8>> {
    let mut out = vec![0; raw.len()];
    let n = query::percent_decode(raw, &mut out)?;
    out.truncate(n);
    Some(out)
}

impl UserData for Req {
    fn add_fields<F: UserDataFields<Self>>(fields: &mut F) {
        fields.add_field_method_get("method", |lua, this| this.method.get(lua));
        fields.add_field_method_get("path", |lua, this| this.path.get(lua));
        fields.add_field_method_get("query", |lua, this| this.query.get(lua));
        fields.add_field_method_get("body", |lua, this| this.body.get(lua));
        fields.add_field_method_get("remote", |lua, this| this.remote_text.get(lua));
    }

    fn add_methods<M: UserDataMethods<Self>>(methods: &mut M) {
        // req:header("Name"): the first header of that name (any case), or nil.
        methods.add_method("header", |lua, this, name: mlua::String| {
            this.header(&name.as_bytes())
                .map(|v| lua.create_string(v))
                .transpose()
        });
        // req:headers(): a table of every header, names in lower case (a repeated header
        // keeps its first value).
        methods.add_method("headers", |lua, this, ()| {
            let t = lua.create_table_with_capacity(0, this.headers.len())?;
            for &(s, n, e) in this.headers.iter().rev() {
                let name = this.head[s..n].to_ascii_lowercase();
                t.raw_set(
                    lua.create_string(name)?,
                    lua.create_string(&this.head[n..e])?,
                )?;
            }
            Ok(t)
        });
        // req:arg("name"): the first query argument of that name, decoded, or nil.
        methods.add_method("arg", |lua, this, name: mlua::String| {
            this.arg(&name.as_bytes())
                .map(|v| lua.create_string(v))
                .transpose()
        });
        // req:args(): a table of every query argument, decoded (the first of a repeated
        // name wins).
        methods.add_method("args", |lua, this, ()| {
            let t = lua.create_table()?;
            let pairs: Vec<_> = query::pairs(&this.query.bytes).collect();
            for (k, v) in pairs.into_iter().rev() {
                let k = decode(k).unwrap_or_else(|| k.to_vec());
                let v = decode(v).unwrap_or_else(|| v.to_vec());
                t.raw_set(lua.create_string(k)?, lua.create_string(v)?)?;
            }
            Ok(t)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_remote_text_follows_the_address_not_the_port() {
        let req = Request {
            method: "GET",
            path: "/",
            query: b"",
            minor_version: 1,
            headers: &[],
            keep_alive: true,
            body: b"",
        };
        let mut r = Req::default();
        assert_eq!(r.remote_text.bytes, b"");
        for (addr, text) in [
            ("127.0.0.1:4000", "127.0.0.1"),
            ("127.0.0.1:4001", "127.0.0.1"),
            ("[::1]:4000", "::1"),
            ("[::ffff:10.0.0.1]:80", "::ffff:10.0.0.1"),
            ("10.0.0.2:80", "10.0.0.2"),
        ] {
            r.fill(&req, addr.parse().unwrap());
            assert_eq!(r.remote_text.bytes, text.as_bytes(), "{addr}");
        }
    }

    #[test]
    fn a_kept_string_is_handed_out_while_its_text_repeats_and_dropped_when_it_changes() {
        let lua = mlua::Lua::new();
        let req = |method, path, query: &'static [u8], body: &'static [u8]| Request {
            method,
            path,
            query,
            minor_version: 1,
            headers: &[],
            keep_alive: true,
            body,
        };
        let peer = "127.0.0.1:4000".parse().unwrap();
        let maker = ReqObj::maker(&lua).unwrap();
        let r = ReqObj::new(&lua, &maker).unwrap();
        lua.globals().set("req", r.table.clone()).unwrap();
        let field = |name: &str| -> mlua::String { r.table.get(name).unwrap() };
        r.fill(&req("GET", "/a", b"x=1", b""), peer).unwrap();
        let first = field("path");
        assert_eq!(first.as_bytes(), b"/a");
        // The same text: the same Lua string, not a new one.
        r.fill(&req("GET", "/a", b"x=1", b""), peer).unwrap();
        assert_eq!(field("path").to_pointer(), first.to_pointer());
        // Every field follows a new text, read or not before.
        for name in FIELDS {
            field(name);
        }
        r.fill(&req("POST", "/b", b"y=2", b"hello"), peer).unwrap();
        assert_eq!(field("method").as_bytes(), b"POST");
        assert_eq!(field("path").as_bytes(), b"/b");
        assert_eq!(field("query").as_bytes(), b"y=2");
        assert_eq!(field("body").as_bytes(), b"hello");
        assert_eq!(field("remote").as_bytes(), b"127.0.0.1");
        r.fill(&req("POST", "/b", b"", b""), "[::1]:1".parse().unwrap())
            .unwrap();
        assert_eq!(field("query").as_bytes(), b"");
        assert_eq!(field("body").as_bytes(), b"");
        assert_eq!(field("remote").as_bytes(), b"::1");
        assert_eq!(field("path").as_bytes(), b"/b");
        // The methods take the table as `self`, as a userdata's did.
        let (arg, n): (String, i64) = lua
            .load("return req:arg('z') or 'none', select('#', req:headers())")
            .eval()
            .unwrap();
        assert_eq!((arg.as_str(), n), ("none", 1));
        // Writes are refused, the metatable is hidden, and a `rawset` is seen.
        let e = lua.load("req.path = '/x'").exec().unwrap_err().to_string();
        assert!(e.contains("req is read-only"), "{e}");
        let mt: String = lua.load("return getmetatable(req)").eval().unwrap();
        assert_eq!(mt, "req");
        assert!(lua.load("setmetatable(req, nil)").exec().is_err());
        assert!(!r.written());
        lua.load("rawset(req, 'path', '/x')").exec().unwrap();
        assert!(r.written());
        // A script that replaces the globals it uses changes nothing in `req`.
        lua.load("rawset = nil; type = nil; error = nil; setmetatable = nil")
            .exec()
            .unwrap();
        let r = ReqObj::new(&lua, &maker).unwrap();
        r.fill(&req("GET", "/c", b"", b""), peer).unwrap();
        lua.globals().set("req", r.table.clone()).unwrap();
        let p: String = lua.load("return req.path").eval().unwrap();
        assert_eq!(p, "/c");
        let e = lua.load("req.x = 1").exec().unwrap_err().to_string();
        assert!(e.contains("req is read-only"), "{e}");
    }
}
