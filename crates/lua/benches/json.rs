//! Cost of `hp.json` against what it did before (`before`): for encoding, a walk of the
//! table bounding its depth, then serde_json over mlua's `Serialize` into a new string; for
//! decoding, a `serde_json::Value` turned into Lua values. On the JSON route's small table
//! and on a 2 KB document.
#![allow(missing_docs)]

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use mlua::{Lua, LuaSerdeExt, Value};

/// The walk `hp.json.encode` made before encoding, to refuse a value nested too deep.
fn depth_walk(v: &Value) {
    let Value::Table(t) = v else {
        return;
    };
    let mut stack = vec![(t.clone(), 1usize)];
    while let Some((t, depth)) = stack.pop() {
        assert!(depth <= 128);
        for pair in t.pairs::<Value, Value>() {
            let (k, v) = pair.unwrap();
            for x in [k, v] {
                if let Value::Table(child) = x {
                    stack.push((child, depth + 1));
                }
            }
        }
    }
}

fn json(c: &mut Criterion) {
    let lua = Lua::new();
    let health: Value = lua
        .load(r#"return { status = "ok", uptime_secs = 12345, client = "127.0.0.1:54321" }"#)
        .eval()
        .unwrap();
    let doc = {
        let items: Vec<String> = (0..20)
            .map(|i| {
                format!(
                    r#"{{"id":{i},"name":"item {i}","price":{}.5,"tags":["a","b","c"],"ok":true,"note":null}}"#,
                    i * 3
                )
            })
            .collect();
        format!(
            r#"{{"items":[{}],"total":20,"page":{{"n":1,"of":5}}}}"#,
            items.join(",")
        )
    };
    let doc_value = hotpath_lua::json_decode(&lua, doc.as_bytes()).unwrap();
    // As a VM keeps it (`hp.json` looks it up once).
    let array = lua.array_metatable();
    let bounds = hotpath_lua::json::Bounds {
        caller: "hp.json.encode",
        limit: hotpath_lua::json::Limit::Length(usize::MAX),
    };
    let mut buf = Vec::new();
    let mut group = c.benchmark_group("lua_json");
    for (name, v) in [("health", &health), ("doc_2kb", &doc_value)] {
        group.bench_function(format!("encode/{name}/hp_json"), |b| {
            b.iter(|| {
                hotpath_lua::json::encode(
                    &lua,
                    &mut buf,
                    black_box(v),
                    &array,
                    &|_| Ok(()),
                    bounds,
                )
                .unwrap();
                lua.create_string(&buf).unwrap()
            })
        });
        group.bench_function(format!("encode/{name}/before"), |b| {
            b.iter(|| {
                depth_walk(black_box(v));
                let text = serde_json::to_string(v).unwrap();
                lua.create_string(&text).unwrap()
            })
        });
    }
    let health_text = hotpath_lua::json_encode(&lua, &health).unwrap();
    for (name, text) in [("health", &health_text[..]), ("doc_2kb", doc.as_bytes())] {
        group.bench_function(format!("decode/{name}/hp_json"), |b| {
            b.iter(|| hotpath_lua::json::decode(&lua, black_box(text), &array).unwrap())
        });
        group.bench_function(format!("decode/{name}/before"), |b| {
            b.iter(|| {
                let j: serde_json::Value = serde_json::from_slice(black_box(text)).unwrap();
                lua.to_value(&j).unwrap()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, json);
criterion_main!(benches);
