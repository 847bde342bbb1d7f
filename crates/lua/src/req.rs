//! The `req` a script's `handle(req)` gets: one object per VM, refilled for every request
//! from reused buffers. Nothing is made for the script until it asks: `req.method` makes one
//! string, `req:header("x")` looks one header up, and only `req:headers()` or `req:args()`
//! build a table.

use hotpath_service::Request;
use hotpath_wire::query;
use mlua::{UserData, UserDataFields, UserDataMethods};

/// The request as the script sees it.
#[derive(Default)]
pub struct Req {
    method: String,
    path: String,
    query: Vec<u8>,
    /// Header names and values, back to back in `head`: (name end, value end) per header.
    head: Vec<u8>,
    headers: Vec<(usize, usize, usize)>,
    body: Vec<u8>,
    /// The remote address (its port is not shown to scripts).
    remote: Option<std::net::IpAddr>,
    /// The remote address's text, made again only when the address changes (a kept-alive
    /// connection's requests share it).
    remote_text: String,
}

impl Req {
    /// Takes the request's parts into this object's buffers.
    pub fn fill(&mut self, req: &Request<'_, '_>, remote: std::net::SocketAddr) {
        self.method.clear();
        self.method.push_str(req.method);
        self.path.clear();
        self.path.push_str(req.path);
        self.query.clear();
        self.query.extend_from_slice(req.query);
        self.head.clear();
        self.headers.clear();
        for h in req.headers {
            let start = self.head.len();
            self.head.extend_from_slice(h.name.as_bytes());
            let name_end = self.head.len();
            self.head.extend_from_slice(h.value);
            self.headers.push((start, name_end, self.head.len()));
        }
        self.body.clear();
        self.body.extend_from_slice(req.body);
        if self.remote != Some(remote.ip()) {
            use std::fmt::Write;
            self.remote = Some(remote.ip());
            self.remote_text.clear();
            let _ = write!(self.remote_text, "{}", remote.ip());
        }
    }

    fn header(&self, name: &[u8]) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|&&(s, n, _)| self.head[s..n].eq_ignore_ascii_case(name))
            .map(|&(_, n, e)| &self.head[n..e])
    }

    fn arg(&self, name: &[u8]) -> Option<Vec<u8>> {
        query::pairs(&self.query)
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
        fields.add_field_method_get("method", |lua, this| lua.create_string(&this.method));
        fields.add_field_method_get("path", |lua, this| lua.create_string(&this.path));
        fields.add_field_method_get("query", |lua, this| lua.create_string(&this.query));
        fields.add_field_method_get("body", |lua, this| lua.create_string(&this.body));
        fields.add_field_method_get("remote", |lua, this| lua.create_string(&this.remote_text));
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
            let pairs: Vec<_> = query::pairs(&this.query).collect();
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
        assert_eq!(r.remote_text, "");
        for (addr, text) in [
            ("127.0.0.1:4000", "127.0.0.1"),
            ("127.0.0.1:4001", "127.0.0.1"),
            ("[::1]:4000", "::1"),
            ("[::ffff:10.0.0.1]:80", "::ffff:10.0.0.1"),
            ("10.0.0.2:80", "10.0.0.2"),
        ] {
            r.fill(&req, addr.parse().unwrap());
            assert_eq!(r.remote_text, text, "{addr}");
        }
    }
}
