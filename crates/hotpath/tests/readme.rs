//! README's examples as a reader would use them: every TOML block is a config (or part of
//! one) that hotpath takes as it stands, and the Lua route example, written beside its config
//! as README says, answers as README shows.

mod common;

use common::{data_dir, start, Client};
use hotpath_config::Config;

const README: &str = include_str!("../../../README.md");

/// The fenced blocks of `lang` in README, in order.
fn blocks(lang: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    for line in README.lines() {
        match (&mut current, line.trim_start()) {
            (None, l) if l == format!("```{lang}") => current = Some(String::new()),
            (Some(text), "```") => {
                out.push(std::mem::take(text));
                current = None;
            }
            (Some(text), _) => {
                text.push_str(line);
                text.push('\n');
            }
            (None, _) => {}
        }
    }
    out
}

#[test]
fn every_toml_example_is_a_config_hotpath_takes() {
    let tomls = blocks("toml");
    assert!(tomls.len() >= 4, "README's TOML examples: {}", tomls.len());
    for text in &tomls {
        if let Err(e) = Config::parse(text) {
            panic!("README's example does not parse:\n{text}\n{e}");
        }
    }
}

#[test]
fn the_lua_route_example_answers_as_shown() {
    let route = blocks("toml")
        .into_iter()
        .find(|t| t.contains("[[lua.routes]]"))
        .expect("README shows a Lua route");
    let script = blocks("lua")
        .into_iter()
        .find(|t| t.contains("function handle"))
        .expect("README shows a script");
    let dir = data_dir();
    std::fs::write(dir.join("echo.lua"), script).unwrap();
    let mut c = Config::parse(&route).unwrap();
    c.resolve_paths(&dir);
    let t = common::test_config();
    c.listen = t.listen;
    c.store.enabled = false;
    c.store.data_dir = t.store.data_dir;
    let server = start(&c);
    let mut http = Client::connect(server.http_addr().unwrap());
    let r = http.get("/echo");
    assert_eq!(r.status, 200);
    assert_eq!(String::from_utf8_lossy(&r.body), "GET /echo\n");
    assert!(r.head.contains("Content-Type: text/plain"), "{}", r.head);
    // The methods the example names, and no other.
    let r = http.request("PUT", "/echo", None, "");
    assert_eq!(r.status, 405);
    server.shutdown().unwrap();
}
