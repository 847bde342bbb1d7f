//! The `req` a script's `handle(req)` gets: one object per VM, refilled for every request
//! from reused buffers. Nothing is made for the script until it asks: `req.method` makes one
//! string, `req:header("x")` looks one header up, and only `req:headers()` or `req:args()`
//! build a table.

use std::cell::RefCell;

use hotpath_service::Request;
use hotpath_wire::query;
use mlua::{UserData, UserDataFields, UserDataMethods};

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

/// One of the request's texts, and the Lua string last made of it: a route's requests mostly
/// repeat their method, path and address, and making a Lua string is a protected call into
/// the VM (interning it, or allocating it past 40 bytes) where handing out the one kept is a
/// reference. Only what a script asked for is made, at most one string per field is kept, and
/// a new text drops it.
#[derive(Default)]
struct Field {
    bytes: Vec<u8>,
    made: RefCell<Option<mlua::String>>,
}

impl Field {
    fn set(&mut self, new: &[u8]) {
        // Compared only when a string was made of the text before (nothing to keep
        // otherwise), and only when the lengths agree.
        let made = self.made.get_mut();
        if made.is_some() && self.bytes.len() == new.len() && (new.is_empty() || self.bytes == new)
        {
            return;
        }
        *made = None;
        self.bytes.clear();
        self.bytes.extend_from_slice(new);
    }

    fn get(&self, lua: &mlua::Lua) -> mlua::Result<mlua::String> {
        if let Some(s) = &*self.made.borrow() {
            return Ok(s.clone());
        }
        let s = lua.create_string(&self.bytes)?;
        *self.made.borrow_mut() = Some(s.clone());
        Ok(s)
    }
}

impl Req {
    /// Takes the request's parts into this object's buffers.
    pub fn fill(&mut self, req: &Request<'_, '_>, remote: std::net::SocketAddr) {
        self.method.set(req.method.as_bytes());
        self.path.set(req.path.as_bytes());
        self.query.set(req.query);
        self.head.clear();
        self.headers.clear();
        for h in req.headers {
            let start = self.head.len();
            self.head.extend_from_slice(h.name.as_bytes());
            let name_end = self.head.len();
            self.head.extend_from_slice(h.value);
            self.headers.push((start, name_end, self.head.len()));
        }
        self.body.set(req.body);
        if self.remote != Some(remote.ip()) {
            self.remote = Some(remote.ip());
            self.remote_text.set(remote.ip().to_string().as_bytes());
        }
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
        let mut r = Req::default();
        r.fill(&req("GET", "/a", b"x=1", b""), peer);
        let first = r.path.get(&lua).unwrap();
        assert_eq!(first.as_bytes(), b"/a");
        // The same text: the same Lua string, not a new one.
        r.fill(&req("GET", "/a", b"x=1", b""), peer);
        assert_eq!(r.path.get(&lua).unwrap().to_pointer(), first.to_pointer());
        // Every field follows a new text.
        r.fill(&req("POST", "/b", b"y=2", b"hello"), peer);
        assert_eq!(r.method.get(&lua).unwrap().as_bytes(), b"POST");
        assert_eq!(r.path.get(&lua).unwrap().as_bytes(), b"/b");
        assert_eq!(r.query.get(&lua).unwrap().as_bytes(), b"y=2");
        assert_eq!(r.body.get(&lua).unwrap().as_bytes(), b"hello");
        assert_eq!(r.remote_text.get(&lua).unwrap().as_bytes(), b"127.0.0.1");
        r.fill(&req("POST", "/b", b"", b""), "[::1]:1".parse().unwrap());
        assert_eq!(r.query.get(&lua).unwrap().as_bytes(), b"");
        assert_eq!(r.body.get(&lua).unwrap().as_bytes(), b"");
        assert_eq!(r.remote_text.get(&lua).unwrap().as_bytes(), b"::1");
    }
}
