//! Request templates filled per request from declared variables. A template is text with
//! `{name}` holes (`{{` and `}}` stand for literal braces); each variable is drawn once per
//! request, so a name used in the URL and the body gets the same value in both.
//!
//! Variables: an integer range, a list, 20 random bytes percent-encoded (a BitTorrent info hash
//! or peer id), and a skewed (Zipf) pick from a pool of integers or of 20-byte values, so hot
//! keys exist as in real traffic.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher as _, BuildHasherDefault, DefaultHasher};
use std::sync::{Arc, Mutex};

use serde::Deserialize;

use hotpath_wire::popup_token::Signer;

use crate::zipf::Zipf;

/// How a variable is drawn, as written in a scenario file or on the command line.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged, deny_unknown_fields)]
pub enum VarSpec {
    /// `"random20"`: 20 random bytes, percent-encoded.
    Named(String),
    /// `{ range = [lo, hi] }`: a uniform integer in lo..=hi.
    Range {
        /// Lowest and highest value.
        range: [u64; 2],
    },
    /// `{ list = ["a", "b"] }`: one of the values, uniformly, inserted as written.
    List {
        /// The values.
        list: Vec<String>,
    },
    /// `{ zipf = 1.1, pool = 100000, of = "random20" }`: rank k of the pool drawn with
    /// probability proportional to 1/k^zipf; `of` is `"int"` (the rank itself) or `"random20"`
    /// (a fixed 20-byte value per rank, percent-encoded).
    Zipf {
        /// The exponent (1.0 is classic Zipf; larger is more skewed).
        zipf: f64,
        /// How many distinct values.
        pool: u64,
        /// What each value is.
        #[serde(default = "default_of")]
        of: String,
    },
    /// `{ popup_token = "SECRET", user = "u", popup = "p" }`: a popup show token for the
    /// values drawn for variables `u` and `p` in the same request, signed with the server's
    /// `popups.token_secret` (a click or close the server accepts). As a front end's tokens
    /// (one per show, shows coming one after another), each token of one user and popup
    /// names a later show than the one before it: the pair's first is signed a day before
    /// the current second ([`SHOWS_FROM_SECS`]), each next one a second after the pair's
    /// last. The server answers a click or close of a show no later than the last one
    /// answered with a 409, and a token signed over a minute ahead of its clock with a 403,
    /// so one pair can be drawn about once a second on average for a day.
    PopupToken {
        /// The server's token secret.
        popup_token: String,
        /// The variable holding the user id.
        user: String,
        /// The variable holding the popup id.
        popup: String,
    },
    /// `{ from = "k", modulo = 4001, add = 0, of = "bytes20" }`: a value derived from the
    /// integer variable `k` (a range, or a Zipf pool of `"int"`) drawn in the same request:
    /// `k % modulo + add` (without `modulo`, `k + add`), written as `"int"` (decimal),
    /// `"hex32"` (32 lowercase hex digits, zero-padded: a passkey) or `"bytes20"` (20 bytes,
    /// big-endian, percent-encoded: an info hash or a peer id). A population of clients keeps
    /// its torrent, user, peer id and port from one request to the next this way, and a
    /// site's tables can be filled with the same values.
    Derived {
        /// The integer variable it is derived from.
        from: String,
        /// Taken modulo this (0: not).
        #[serde(default)]
        modulo: u64,
        /// Then added.
        #[serde(default)]
        add: u64,
        /// How it is written.
        #[serde(default = "default_derived_of")]
        of: String,
    },
    /// `{ clock = "ms" }`: milliseconds since the load started, a counter that never goes
    /// down (a client's `uploaded` growing between its announces).
    Clock {
        /// The unit: `"ms"`.
        clock: String,
    },
}

fn default_derived_of() -> String {
    "int".into()
}

fn default_of() -> String {
    "random20".into()
}

impl VarSpec {
    /// Parses the command-line form: `range:LO-HI`, `list:a,b,c`, `random20`,
    /// `zipf:S:POOL[:int|random20]`.
    pub fn parse_cli(s: &str) -> Result<Self, String> {
        let (kind, rest) = s.split_once(':').unwrap_or((s, ""));
        let bad = || {
            format!("bad variable `{s}`: use range:LO-HI, list:a,b, random20 or zipf:S:POOL[:int]")
        };
        match kind {
            "random20" if rest.is_empty() => Ok(Self::Named("random20".into())),
            "range" => {
                let (lo, hi) = rest.split_once('-').ok_or_else(bad)?;
                Ok(Self::Range {
                    range: [
                        lo.parse().map_err(|_| bad())?,
                        hi.parse().map_err(|_| bad())?,
                    ],
                })
            }
            "list" if !rest.is_empty() => Ok(Self::List {
                list: rest.split(',').map(str::to_owned).collect(),
            }),
            "zipf" => {
                let mut it = rest.split(':');
                let zipf = it.next().and_then(|v| v.parse().ok()).ok_or_else(bad)?;
                let pool = it.next().and_then(|v| v.parse().ok()).ok_or_else(bad)?;
                let of = it.next().unwrap_or("random20").to_owned();
                if it.next().is_some() {
                    return Err(bad());
                }
                Ok(Self::Zipf { zipf, pool, of })
            }
            _ => Err(bad()),
        }
    }
}

/// A variable ready to draw from.
#[derive(Debug, Clone)]
enum Var {
    Random20,
    Range(u64, u64),
    List(Vec<Vec<u8>>),
    ZipfInt(Zipf),
    ZipfBytes(Zipf, u64),
    /// Signed with this signer over the values of variables `.1` (user) and `.2` (popup), at
    /// the second `.3` hands out for the user (shared by every connection and thread).
    PopupToken(Signer, usize, usize, Arc<Mutex<ShowTimes>>),
    /// Variable `.0`'s value, modulo `.1` (0: not), plus `.2`, written as `.3`.
    Derived(usize, u64, u64, Form),
    /// Milliseconds since this instant.
    Clock(std::time::Instant),
}

/// The show second each user and popup's next token is signed at, so that every token of a
/// pair names a later show than the pair's token before it (see [`VarSpec::PopupToken`]).
/// Pairs are told apart by a hash of user id and popup: two that share one share a
/// sequence, which keeps both rising as well.
#[derive(Debug)]
struct ShowTimes {
    next: HashMap<u64, u64>,
    /// Pairs followed at most ([`MAX_SHOW_PAIRS`]).
    cap: usize,
    /// The latest second handed out so far.
    ceiling: u64,
    /// Once the map was emptied: first tokens start above this (the ceiling then).
    above: Option<u64>,
}

/// Pairs [`ShowTimes`] follows at most (about 100 MB); past it the map is emptied, and a
/// pair seen after that starts above every second handed out before.
const MAX_SHOW_PAIRS: usize = 4 << 20;

/// How long before the current second a pair's first token is signed: a day, well inside
/// the server's default token lifetime (`popups.token_ttl_secs`, 7 days), as room for a pair
/// drawn more often than once a second to rise ahead.
pub const SHOWS_FROM_SECS: u64 = 86_400;

impl ShowTimes {
    fn new(cap: usize) -> ShowTimes {
        ShowTimes {
            next: HashMap::new(),
            cap,
            ceiling: 0,
            above: None,
        }
    }

    /// The second to sign the next token of `user` and `popup` at, `now` being the current one.
    fn take(&mut self, user: &[u8], popup: u32, now: u64) -> u64 {
        let key = BuildHasherDefault::<DefaultHasher>::default().hash_one((user, popup));
        let this = match self.next.get_mut(&key) {
            Some(at) => {
                let this = *at;
                *at = this.saturating_add(1);
                this
            }
            None => {
                if self.next.len() >= self.cap {
                    self.next.clear();
                    self.above = Some(self.ceiling);
                }
                let from = now.saturating_sub(SHOWS_FROM_SECS);
                let this = self.above.map_or(from, |a| from.max(a.saturating_add(1)));
                self.next.insert(key, this.saturating_add(1));
                this
            }
        };
        self.ceiling = self.ceiling.max(this);
        this
    }
}

/// How a derived value is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    Int,
    Hex32,
    Bytes20,
}

fn compile(name: &str, spec: &VarSpec, seed: u64, names: &[String]) -> Result<Var, String> {
    Ok(match spec {
        VarSpec::PopupToken {
            popup_token,
            user,
            popup,
        } => {
            let index = |v: &str, field: &str| {
                names
                    .iter()
                    .position(|n| n == v)
                    .ok_or_else(|| format!("vars.{name}.{field}: `{v}` names no declared variable"))
            };
            Var::PopupToken(
                Signer::new(popup_token.as_bytes()),
                index(user, "user")?,
                index(popup, "popup")?,
                Arc::new(Mutex::new(ShowTimes::new(MAX_SHOW_PAIRS))),
            )
        }
        VarSpec::Derived {
            from,
            modulo,
            add,
            of,
        } => {
            let i = names
                .iter()
                .position(|n| n == from)
                .ok_or_else(|| format!("vars.{name}.from: `{from}` names no declared variable"))?;
            let form = match of.as_str() {
                "int" => Form::Int,
                "hex32" => Form::Hex32,
                "bytes20" => Form::Bytes20,
                o => {
                    return Err(format!(
                        "vars.{name}.of: `{o}` is not int, hex32 or bytes20"
                    ))
                }
            };
            Var::Derived(i, *modulo, *add, form)
        }
        VarSpec::Clock { clock } => {
            if clock != "ms" {
                return Err(format!("vars.{name}.clock: `{clock}` is not ms"));
            }
            Var::Clock(std::time::Instant::now())
        }
        VarSpec::Named(n) if n == "random20" => Var::Random20,
        VarSpec::Named(n) => {
            return Err(format!(
                "vars.{name}: `{n}` is not a variable kind (random20, or a table with range, list or zipf)"
            ))
        }
        VarSpec::Range { range: [lo, hi] } => {
            if lo > hi {
                return Err(format!("vars.{name}: range [{lo}, {hi}] is empty"));
            }
            Var::Range(*lo, *hi)
        }
        VarSpec::List { list } => {
            if list.is_empty() {
                return Err(format!("vars.{name}: list is empty"));
            }
            Var::List(list.iter().map(|v| v.as_bytes().to_vec()).collect())
        }
        VarSpec::Zipf { zipf, pool, of } => {
            let z = Zipf::new(*pool, *zipf).map_err(|e| format!("vars.{name}: {e}"))?;
            match of.as_str() {
                "int" => Var::ZipfInt(z),
                "random20" => Var::ZipfBytes(z, seed),
                o => return Err(format!("vars.{name}.of: `{o}` is not int or random20")),
            }
        }
    })
}

/// A fixed pseudo-random 20-byte value for pool rank `k` (no table: 10M hot keys cost nothing).
pub fn value20(seed: u64, k: u64) -> [u8; 20] {
    let mut out = [0u8; 20];
    let mut x = seed ^ k.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    for chunk in out.chunks_mut(8) {
        x = splitmix64(x);
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
    out
}

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The declared variables of a load, compiled.
#[derive(Debug, Clone, Default)]
pub struct Vars {
    names: Vec<String>,
    vars: Vec<Var>,
}

impl Vars {
    /// Compiles the declared variables; errors name the variable.
    pub fn new(specs: &BTreeMap<String, VarSpec>, seed: u64) -> Result<Self, String> {
        let mut v = Self {
            names: specs.keys().cloned().collect(),
            vars: Vec::new(),
        };
        for (i, (name, spec)) in specs.iter().enumerate() {
            let var = compile(name, spec, seed ^ (i as u64 + 1), &v.names)?;
            if let Var::PopupToken(_, u, p, _) = &var {
                let signs_token =
                    |j: usize| matches!(specs.values().nth(j), Some(VarSpec::PopupToken { .. }));
                if signs_token(*u) || signs_token(*p) {
                    return Err(format!("vars.{name}: a token cannot sign another token"));
                }
            }
            if let Var::Derived(from, ..) = &var {
                let integer = match specs.values().nth(*from) {
                    Some(VarSpec::Range { .. }) => true,
                    Some(VarSpec::Zipf { of, .. }) => of == "int",
                    _ => false,
                };
                if !integer {
                    return Err(format!(
                        "vars.{name}.from: `{}` is not an integer variable (a range, or a zipf of int)",
                        v.names[*from]
                    ));
                }
            }
            v.vars.push(var);
        }
        Ok(v)
    }

    fn index(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n == name)
    }

    /// Draws one value of every variable into `draw` (reused between requests).
    pub fn draw(&self, rng: &mut fastrand::Rng, draw: &mut Draw) {
        draw.bytes.clear();
        draw.spans.clear();
        draw.nums.clear();
        let mut tokens = false;
        let mut derived = false;
        for var in &self.vars {
            let start = draw.bytes.len();
            let mut num = 0;
            match var {
                // Signed once the values it signs are drawn.
                Var::PopupToken(..) => tokens = true,
                // Written once the values they come from are drawn.
                Var::Derived(..) => derived = true,
                Var::Clock(since) => {
                    let ms = since.elapsed().as_millis() as u64;
                    draw.bytes
                        .extend_from_slice(itoa::Buffer::new().format(ms).as_bytes());
                }
                Var::Random20 => {
                    let mut b = [0u8; 20];
                    rng.fill(&mut b);
                    hotpath_wire::query::percent_encode(&mut draw.bytes, &b);
                }
                Var::Range(lo, hi) => {
                    let n = rng.u64(*lo..=*hi);
                    num = n;
                    draw.bytes
                        .extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
                }
                Var::List(values) => {
                    draw.bytes
                        .extend_from_slice(&values[rng.usize(..values.len())]);
                }
                Var::ZipfInt(z) => {
                    let k = z.sample(|| rng.f64());
                    num = k;
                    draw.bytes
                        .extend_from_slice(itoa::Buffer::new().format(k).as_bytes());
                }
                Var::ZipfBytes(z, seed) => {
                    let k = z.sample(|| rng.f64());
                    hotpath_wire::query::percent_encode(&mut draw.bytes, &value20(*seed, k));
                }
            }
            draw.spans.push((start, draw.bytes.len()));
            draw.nums.push(num);
        }
        if derived {
            for (i, var) in self.vars.iter().enumerate() {
                if let Var::Derived(from, modulo, add, form) = *var {
                    let k = draw.nums[from];
                    let v = if modulo > 0 { k % modulo } else { k }.wrapping_add(add);
                    let start = draw.bytes.len();
                    write_derived(&mut draw.bytes, v, form);
                    draw.spans[i] = (start, draw.bytes.len());
                }
            }
        }
        if tokens {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            for (i, var) in self.vars.iter().enumerate() {
                if let Var::PopupToken(signer, u, p, times) = var {
                    let text = |j: usize| {
                        let (s, e) = draw.spans[j];
                        String::from_utf8_lossy(&draw.bytes[s..e]).into_owned()
                    };
                    let (user, popup) = (text(*u), text(*p).parse().unwrap_or(0));
                    let at = times.lock().unwrap_or_else(|e| e.into_inner()).take(
                        user.as_bytes(),
                        popup,
                        now,
                    );
                    let start = draw.bytes.len();
                    signer.sign(&mut draw.bytes, &user, popup, at);
                    draw.spans[i] = (start, draw.bytes.len());
                }
            }
        }
    }
}

/// Writes derived value `v` in `form`.
fn write_derived(out: &mut Vec<u8>, v: u64, form: Form) {
    match form {
        Form::Int => out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes()),
        Form::Hex32 => {
            use std::io::Write;
            let _ = write!(out, "{v:032x}");
        }
        Form::Bytes20 => {
            let mut b = [0u8; 20];
            b[12..].copy_from_slice(&v.to_be_bytes());
            hotpath_wire::query::percent_encode(out, &b);
        }
    }
}

/// One request's drawn values.
#[derive(Debug, Default)]
pub struct Draw {
    bytes: Vec<u8>,
    spans: Vec<(usize, usize)>,
    /// Each variable's integer value (0 for those that have none).
    nums: Vec<u64>,
}

#[derive(Debug, Clone, PartialEq)]
enum Part {
    Lit(Vec<u8>),
    Var(usize),
}

/// A parsed template.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    parts: Vec<Part>,
}

impl Template {
    /// Parses `text`, resolving each `{name}` against `vars`; `what` names the template in
    /// errors (e.g. `request[0].path`).
    pub fn parse(text: &str, vars: &Vars, what: &str) -> Result<Self, String> {
        let mut parts = Vec::new();
        let mut lit = Vec::new();
        let b = text.as_bytes();
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b'{' if b.get(i + 1) == Some(&b'{') => {
                    lit.push(b'{');
                    i += 2;
                }
                b'}' if b.get(i + 1) == Some(&b'}') => {
                    lit.push(b'}');
                    i += 2;
                }
                b'{' => {
                    let end = text[i..]
                        .find('}')
                        .ok_or_else(|| format!("{what}: `{{` at byte {i} is never closed"))?;
                    let name = &text[i + 1..i + end];
                    let idx = vars.index(name).ok_or_else(|| {
                        format!("{what}: `{{{name}}}` names no declared variable")
                    })?;
                    if !lit.is_empty() {
                        parts.push(Part::Lit(std::mem::take(&mut lit)));
                    }
                    parts.push(Part::Var(idx));
                    i += end + 1;
                }
                b'}' => return Err(format!("{what}: stray `}}` at byte {i} (write `}}}}`)")),
                c => {
                    lit.push(c);
                    i += 1;
                }
            }
        }
        if !lit.is_empty() {
            parts.push(Part::Lit(lit));
        }
        Ok(Self { parts })
    }

    /// Whether the template has no holes.
    pub fn is_fixed(&self) -> bool {
        self.parts.iter().all(|p| matches!(p, Part::Lit(_)))
    }

    /// Appends the template filled from `draw`.
    pub fn fill(&self, draw: &Draw, out: &mut Vec<u8>) {
        for p in &self.parts {
            match p {
                Part::Lit(l) => out.extend_from_slice(l),
                Part::Var(i) => {
                    let (s, e) = draw.spans[*i];
                    out.extend_from_slice(&draw.bytes[s..e]);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(specs: &[(&str, VarSpec)]) -> Vars {
        let m = specs
            .iter()
            .map(|(n, s)| (n.to_string(), s.clone()))
            .collect();
        Vars::new(&m, 1).unwrap()
    }

    #[test]
    fn fills_every_kind_and_shares_a_draw() {
        let v = vars(&[
            ("port", VarSpec::Range { range: [10, 12] }),
            (
                "c",
                VarSpec::List {
                    list: vec!["red".into(), "blue".into()],
                },
            ),
            ("h", VarSpec::Named("random20".into())),
            (
                "u",
                VarSpec::Zipf {
                    zipf: 1.0,
                    pool: 5,
                    of: "int".into(),
                },
            ),
        ]);
        let t =
            Template::parse("/a?p={port}&c={c}&h={h}&u={u}&again={port}{{x}}", &v, "t").unwrap();
        let mut rng = fastrand::Rng::with_seed(3);
        let mut draw = Draw::default();
        for _ in 0..200 {
            v.draw(&mut rng, &mut draw);
            let mut out = Vec::new();
            t.fill(&draw, &mut out);
            let s = String::from_utf8(out).unwrap();
            let q: Vec<(&str, &str)> = s[3..]
                .split('&')
                .map(|kv| kv.split_once('=').unwrap())
                .collect();
            let port: u64 = q[0].1.parse().unwrap();
            assert!((10..=12).contains(&port));
            assert!(q[1].1 == "red" || q[1].1 == "blue");
            let mut raw = [0u8; 64];
            assert_eq!(
                hotpath_wire::query::percent_decode(q[2].1.as_bytes(), &mut raw),
                Some(20)
            );
            let u: u64 = q[3].1.parse().unwrap();
            assert!((1..=5).contains(&u));
            assert_eq!(q[4].1, format!("{port}{{x}}"));
        }
    }

    #[test]
    fn zipf_pool_of_hashes_is_skewed_and_stable() {
        let v = vars(&[(
            "h",
            VarSpec::Zipf {
                zipf: 1.2,
                pool: 1000,
                of: "random20".into(),
            },
        )]);
        let t = Template::parse("{h}", &v, "t").unwrap();
        let mut rng = fastrand::Rng::with_seed(9);
        let mut draw = Draw::default();
        let mut counts = std::collections::HashMap::new();
        for _ in 0..20_000 {
            v.draw(&mut rng, &mut draw);
            let mut out = Vec::new();
            t.fill(&draw, &mut out);
            *counts.entry(out).or_insert(0u32) += 1;
        }
        let mut c: Vec<u32> = counts.values().copied().collect();
        c.sort_unstable_by(|a, b| b.cmp(a));
        // The hottest key gets far more than a uniform share (20 of 20k) would.
        assert!(c[0] > 2_000, "hottest {}", c[0]);
        assert!(counts.len() > 100 && counts.len() <= 1000);
        assert_eq!(value20(5, 3), value20(5, 3));
        assert_ne!(value20(5, 3), value20(5, 4));
    }

    #[test]
    fn popup_tokens_sign_the_values_drawn_with_them() {
        let v = vars(&[
            (
                "a",
                VarSpec::List {
                    list: vec!["click".into()],
                },
            ),
            (
                "t",
                VarSpec::PopupToken {
                    popup_token: "bench-secret-0123456789".into(),
                    user: "u".into(),
                    popup: "p".into(),
                },
            ),
            ("p", VarSpec::Range { range: [1, 2] }),
            ("u", VarSpec::Range { range: [1, 3] }),
        ]);
        let t = Template::parse("{u} {p} {t}", &v, "body").unwrap();
        let signer = Signer::new(b"bench-secret-0123456789");
        // Each token of a user and popup names a later show than the one before (the server
        // refuses an answer to a show no later than the last one answered).
        let mut last = std::collections::HashMap::new();
        let mut rng = fastrand::Rng::with_seed(4);
        let mut draw = Draw::default();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        for _ in 0..50 {
            v.draw(&mut rng, &mut draw);
            let mut out = Vec::new();
            t.fill(&draw, &mut out);
            let s = String::from_utf8(out).unwrap();
            let f: Vec<&str> = s.split(' ').collect();
            let at = signer.verify(
                f[2],
                f[0],
                f[1].parse().unwrap(),
                now + 1,
                2 * SHOWS_FROM_SECS,
            );
            assert!(at.is_ok(), "{s}: {at:?}");
            let at = at.unwrap();
            assert!(at + SHOWS_FROM_SECS + 60 >= now, "{s}: signed too long ago");
            if let Some(before) = last.insert((f[0].to_string(), f[1].to_string()), at) {
                assert!(
                    at > before,
                    "{s}: not after the pair's token before ({before})"
                );
            }
        }
        let bad: BTreeMap<String, VarSpec> = [(
            "t".to_string(),
            VarSpec::PopupToken {
                popup_token: "s".into(),
                user: "nobody".into(),
                popup: "t".into(),
            },
        )]
        .into();
        assert!(Vars::new(&bad, 0).unwrap_err().contains("vars.t.user"));
    }

    /// Three pairs drawn again and again: each token of a pair is a second after its last;
    /// past the bound the pairs start above every second handed out.
    #[test]
    fn show_times_rise_for_a_user_and_popup() {
        let day = SHOWS_FROM_SECS;
        let mut t = ShowTimes::new(2);
        assert_eq!(t.take(b"a", 1, day + 1_000), 1_000);
        assert_eq!(t.take(b"a", 1, day + 1_000), 1_001);
        assert_eq!(t.take(b"a", 2, day + 1_001), 1_001);
        assert_eq!(t.take(b"a", 1, day + 1_001), 1_002);
        // Full: emptied, and ("b", 1) and ("a", 1) start above 1,002.
        assert_eq!(t.take(b"b", 1, day + 1_002), 1_003);
        assert_eq!(t.take(b"a", 1, day + 1_002), 1_003);
        assert_eq!(t.take(b"a", 1, day + 1_002), 1_004);
        // Once the clock has passed the ceiling by a day, a new pair starts a day back.
        assert_eq!(t.take(b"c", 1, day + 5_000), 5_000);
    }

    #[test]
    fn derived_values_follow_their_source_and_the_clock_never_goes_down() {
        let derived = |from: &str, modulo, add, of: &str| VarSpec::Derived {
            from: from.into(),
            modulo,
            add,
            of: of.into(),
        };
        let v = vars(&[
            ("k", VarSpec::Range { range: [0, 99_999] }),
            ("h", derived("k", 4001, 0, "bytes20")),
            ("pk", derived("k", 500, 0, "hex32")),
            ("port", derived("k", 64_000, 1024, "int")),
            ("up", VarSpec::Clock { clock: "ms".into() }),
        ]);
        let t = Template::parse("{k} {h} {pk} {port} {up}", &v, "t").unwrap();
        let mut rng = fastrand::Rng::with_seed(5);
        let mut draw = Draw::default();
        let mut last_up = 0;
        for _ in 0..500 {
            v.draw(&mut rng, &mut draw);
            let mut out = Vec::new();
            t.fill(&draw, &mut out);
            let s = String::from_utf8(out).unwrap();
            let f: Vec<&str> = s.split(' ').collect();
            let k: u64 = f[0].parse().unwrap();
            let mut raw = [0u8; 64];
            assert_eq!(
                hotpath_wire::query::percent_decode(f[1].as_bytes(), &mut raw),
                Some(20)
            );
            let mut want = [0u8; 20];
            want[12..].copy_from_slice(&(k % 4001).to_be_bytes());
            assert_eq!(raw[..20], want);
            assert_eq!(f[2], format!("{:032x}", k % 500));
            assert_eq!(f[3], (k % 64_000 + 1024).to_string());
            let up: u64 = f[4].parse().unwrap();
            assert!(up >= last_up);
            last_up = up;
        }
        let specs = |s: &[(&str, VarSpec)]| -> BTreeMap<String, VarSpec> {
            s.iter().map(|(n, v)| (n.to_string(), v.clone())).collect()
        };
        let err = |s: &[(&str, VarSpec)]| Vars::new(&specs(s), 0).unwrap_err();
        assert!(err(&[("a", derived("nobody", 0, 0, "int"))]).contains("vars.a.from"));
        assert!(err(&[
            ("a", derived("b", 0, 0, "int")),
            ("b", VarSpec::Named("random20".into()))
        ])
        .contains("not an integer variable"));
        assert!(err(&[
            ("a", derived("b", 0, 0, "hex64")),
            ("b", VarSpec::Range { range: [1, 2] })
        ])
        .contains("vars.a.of"));
        assert!(err(&[("c", VarSpec::Clock { clock: "s".into() })]).contains("vars.c.clock"));
    }

    #[test]
    fn errors_name_the_template_and_variable() {
        let v = vars(&[("a", VarSpec::Range { range: [1, 2] })]);
        assert!(Template::parse("/x?{b}", &v, "request[0].path")
            .unwrap_err()
            .contains("request[0].path: `{b}`"));
        assert!(Template::parse("/x?{a", &v, "p")
            .unwrap_err()
            .contains("never closed"));
        assert!(Template::parse("/x}", &v, "p")
            .unwrap_err()
            .contains("stray"));
        assert!(Template::parse("/fixed", &v, "p").unwrap().is_fixed());
        let bad: BTreeMap<String, VarSpec> =
            [("r".to_string(), VarSpec::Range { range: [5, 1] })].into();
        assert!(Vars::new(&bad, 0).unwrap_err().contains("vars.r"));
        let bad: BTreeMap<String, VarSpec> =
            [("n".to_string(), VarSpec::Named("random21".into()))].into();
        assert!(Vars::new(&bad, 0).unwrap_err().contains("vars.n"));
    }

    #[test]
    fn cli_forms() {
        assert_eq!(
            VarSpec::parse_cli("range:1-9"),
            Ok(VarSpec::Range { range: [1, 9] })
        );
        assert_eq!(
            VarSpec::parse_cli("list:a,b"),
            Ok(VarSpec::List {
                list: vec!["a".into(), "b".into()]
            })
        );
        assert_eq!(
            VarSpec::parse_cli("random20"),
            Ok(VarSpec::Named("random20".into()))
        );
        assert_eq!(
            VarSpec::parse_cli("zipf:1.1:1000:int"),
            Ok(VarSpec::Zipf {
                zipf: 1.1,
                pool: 1000,
                of: "int".into()
            })
        );
        assert!(VarSpec::parse_cli("range:9").is_err());
        assert!(VarSpec::parse_cli("gauss:1").is_err());
    }
}
