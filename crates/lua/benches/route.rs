//! A Lua route's cost in user space, as a worker pays it: the request (parsed from the bytes
//! a load generator sends) handed to the Lua service's worker, the script run, its answer
//! checked and copied out. No socket: what the kernel costs every route the same is left out,
//! so what a change to the VM's side saves shows here at a precision the flat-out runs of
//! `bench/compare lua-json` cannot give. The scripts are the benchmark's own
//! (`examples/lua/health.lua` and `echo.lua`).
#![allow(missing_docs)]

use std::net::{Ipv4Addr, SocketAddr};

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use hotpath_config::Config;
use hotpath_lua::LuaService;
use hotpath_service::{Context, HttpResponse, Service};
use hotpath_wire::http::{header_slots, parse_request, Limits, Parsed};

fn route(c: &mut Criterion) {
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/lua");
    let cfg = Config::parse(&format!(
        "[[lua.routes]]\npath = \"/lua/health\"\nscript = \"{examples}/health.lua\"\n\
         [[lua.routes]]\npath = \"/echo\"\nscript = \"{examples}/echo.lua\"\n"
    ))
    .unwrap();
    let service = LuaService::new(&cfg.lua, None).unwrap();
    let mut worker = service.worker(0);
    let ctx = Context {
        peer: SocketAddr::from((Ipv4Addr::LOCALHOST, 54321)),
        now: 1,
    };
    // The server's default limits, as its worker builds them.
    let limits = Limits {
        max_header_bytes: cfg.server.max_header_bytes,
        max_url_bytes: cfg.server.max_url_bytes,
        max_body_bytes: cfg.server.max_body_bytes,
    };
    let mut resp = HttpResponse::default();
    let mut group = c.benchmark_group("lua_route");
    for (name, bytes) in [
        (
            "health",
            &b"GET /lua/health HTTP/1.1\r\nHost: 127.0.0.1:18080\r\n\r\n"[..],
        ),
        (
            "echo",
            &b"GET /echo?name=hp HTTP/1.1\r\nHost: 127.0.0.1:18080\r\n\r\n"[..],
        ),
    ] {
        let mut slots = header_slots::<16>();
        let Ok(Parsed::Complete(req, _)) = parse_request(bytes, &mut slots, &limits) else {
            panic!("the request does not parse");
        };
        group.bench_function(name, |b| {
            b.iter(|| {
                resp.status = 200;
                resp.extra_headers.clear();
                resp.body.clear();
                let handled = worker.http(black_box(&req), &ctx, &mut resp);
                assert!(
                    handled.is_some() && resp.status == 200,
                    "{name}: not answered"
                );
                black_box(resp.body.len())
            })
        });
    }
    group.finish();
}

criterion_group!(benches, route);
criterion_main!(benches);
