//! Lua 5.4 string patterns, matched in Rust with every step counted, so that a script's time
//! budget holds inside `string.find`, `match`, `gmatch` and `gsub`: Lua's own matcher runs in
//! C, where no hook can stop it, and backtracking makes some patterns quadratic or worse in
//! the subject's length (`("x" .. (" "):rep(65536) .. "x"):match("^%s*(.-)%s*$")` took 24 s).
//!
//! The semantics are Lua 5.4's (the reference manual, section 6.4.1), error messages
//! included; the tests compare every function against the C library on generated patterns.
//! No I/O and no Lua here: [`Matcher`] works on bytes and reports its steps to a callback
//! that may stop it.

/// Captures a pattern may hold (Lua's `LUA_MAXCAPTURES`).
pub const MAX_CAPTURES: usize = 32;
/// Nesting of the matcher's recursion (Lua's `MAXCCALLS`): "pattern too complex" beyond.
const MAX_DEPTH: usize = 200;
/// Steps between two calls of the budget callback.
pub const STEPS_PER_TICK: u64 = 4096;

/// The characters that make a pattern more than a plain string.
const SPECIALS: &[u8] = b"^$*+?.([%-";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Len {
    /// Opened, not closed yet.
    Unfinished,
    /// A position capture `()`.
    Position,
    Closed(usize),
}

/// One capture's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capture {
    /// A substring of the subject, as a byte range.
    Text(usize, usize),
    /// A position capture: the 1-based position.
    Position(usize),
}

/// Why a match stopped: a malformed pattern, or the callback's own error.
#[derive(Debug)]
pub enum Stop<E> {
    /// The pattern is malformed (Lua's message).
    Pattern(String),
    /// The step callback refused to go on.
    Budget(E),
}

/// A matcher of one pattern over one subject.
pub struct Matcher<'a, E> {
    src: &'a [u8],
    pat: &'a [u8],
    level: usize,
    capture: [(usize, Len); MAX_CAPTURES],
    depth: usize,
    steps: u64,
    tick: &'a mut dyn FnMut(u64) -> Result<(), E>,
}

type R<T, E> = Result<T, Stop<E>>;

fn bad<T, E>(why: impl Into<String>) -> R<T, E> {
    Err(Stop::Pattern(why.into()))
}

/// Whether `c` is in class `cl` (the letter after `%`; an upper-case letter is the
/// complement; any other character stands for itself). C locale.
fn match_class(c: u8, cl: u8) -> bool {
    let yes = match cl.to_ascii_lowercase() {
        b'a' => c.is_ascii_alphabetic(),
        b'c' => c.is_ascii_control(),
        b'd' => c.is_ascii_digit(),
        b'g' => c.is_ascii_graphic(),
        b'l' => c.is_ascii_lowercase(),
        b'p' => c.is_ascii_punctuation(),
        b's' => matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r'),
        b'u' => c.is_ascii_uppercase(),
        b'w' => c.is_ascii_alphanumeric(),
        b'x' => c.is_ascii_hexdigit(),
        // Deprecated, still in Lua 5.4: the NUL byte.
        b'z' => c == 0,
        _ => return cl == c,
    };
    if cl.is_ascii_uppercase() {
        !yes
    } else {
        yes
    }
}

impl<'a, E> Matcher<'a, E> {
    /// A matcher of `pat` (without a leading `^` anchor, which callers handle) over `src`;
    /// `tick(n)` is told of every [`STEPS_PER_TICK`] steps and may stop the match.
    pub fn new(
        src: &'a [u8],
        pat: &'a [u8],
        tick: &'a mut dyn FnMut(u64) -> Result<(), E>,
    ) -> Self {
        Matcher {
            src,
            pat,
            level: 0,
            capture: [(0, Len::Unfinished); MAX_CAPTURES],
            depth: 0,
            steps: 0,
            tick,
        }
    }

    /// Tries a match starting at byte `s`; the end of the match if there is one.
    pub fn find_at(&mut self, s: usize) -> R<Option<usize>, E> {
        self.level = 0;
        self.depth = 0;
        self.do_match(s, 0)
    }

    /// Steps not yet reported to the callback, reported (at the end of a call).
    pub fn settle(&mut self) -> Result<(), E> {
        let n = std::mem::take(&mut self.steps);
        if n > 0 {
            (self.tick)(n)
        } else {
            Ok(())
        }
    }

    fn step(&mut self) -> R<(), E> {
        self.steps += 1;
        if self.steps >= STEPS_PER_TICK {
            self.steps = 0;
            (self.tick)(STEPS_PER_TICK).map_err(Stop::Budget)?;
        }
        Ok(())
    }

    /// Captures of the last match (`s..e`): `level` of them, or the whole match when there
    /// are none and `whole` is set.
    pub fn captures(&self, s: usize, e: usize, whole: bool) -> R<Vec<Capture>, E> {
        let n = if self.level == 0 && whole {
            1
        } else {
            self.level
        };
        (0..n).map(|i| self.capture(i, s, e)).collect()
    }

    /// Capture `i` of the last match (`s..e`); the whole match for `i == 0` when there are
    /// no captures.
    pub fn capture(&self, i: usize, s: usize, e: usize) -> R<Capture, E> {
        if i >= self.level {
            if i == 0 {
                return Ok(Capture::Text(s, e));
            }
            return bad(format!("invalid capture index %{}", i + 1));
        }
        let (start, len) = self.capture[i];
        match len {
            Len::Unfinished => bad("unfinished capture"),
            Len::Position => Ok(Capture::Position(start + 1)),
            Len::Closed(l) => Ok(Capture::Text(start, start + l)),
        }
    }

    /// The number of captures of the last match.
    pub fn level(&self) -> usize {
        self.level
    }

    fn class_end(&self, mut p: usize) -> R<usize, E> {
        let c = self.pat[p];
        p += 1;
        if c == b'%' {
            if p >= self.pat.len() {
                return bad("malformed pattern (ends with '%')");
            }
            return Ok(p + 1);
        }
        if c == b'[' {
            if self.pat.get(p) == Some(&b'^') {
                p += 1;
            }
            // The first character is taken as is ("[]]" is a set of one ']').
            loop {
                if p >= self.pat.len() {
                    return bad("malformed pattern (missing ']')");
                }
                let c = self.pat[p];
                p += 1;
                if c == b'%' && p < self.pat.len() {
                    p += 1;
                }
                if self.pat.get(p) == Some(&b']') {
                    return Ok(p + 1);
                }
            }
        }
        Ok(p)
    }

    /// Whether `c` is in the set `[...]` from `p` (the `[`) to `ec` (the `]`).
    fn match_bracket(&self, c: u8, mut p: usize, ec: usize) -> bool {
        let pat = self.pat;
        let mut sig = true;
        if pat[p + 1] == b'^' {
            sig = false;
            p += 1;
        }
        p += 1;
        while p < ec {
            if pat[p] == b'%' {
                p += 1;
                if match_class(c, pat[p]) {
                    return sig;
                }
                p += 1;
            } else if pat[p + 1] == b'-' && p + 2 < ec {
                if pat[p] <= c && c <= pat[p + 2] {
                    return sig;
                }
                p += 3;
            } else {
                if pat[p] == c {
                    return sig;
                }
                p += 1;
            }
        }
        !sig
    }

    fn single(&self, s: usize, p: usize, ep: usize) -> bool {
        let Some(&c) = self.src.get(s) else {
            return false;
        };
        match self.pat[p] {
            b'.' => true,
            b'%' => match_class(c, self.pat[p + 1]),
            b'[' => self.match_bracket(c, p, ep - 1),
            pc => pc == c,
        }
    }

    fn do_match(&mut self, s: usize, p: usize) -> R<Option<usize>, E> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return bad("pattern too complex");
        }
        let r = self.match_here(s, p);
        self.depth -= 1;
        r
    }

    fn match_here(&mut self, mut s: usize, mut p: usize) -> R<Option<usize>, E> {
        let len = self.pat.len();
        loop {
            self.step()?;
            if p == len {
                return Ok(Some(s));
            }
            match self.pat[p] {
                b'(' => {
                    return if self.pat.get(p + 1) == Some(&b')') {
                        self.start_capture(s, p + 2, Len::Position)
                    } else {
                        self.start_capture(s, p + 1, Len::Unfinished)
                    };
                }
                b')' => return self.end_capture(s, p + 1),
                b'$' if p + 1 == len => {
                    return Ok((s == self.src.len()).then_some(s));
                }
                b'%' if self.pat.get(p + 1) == Some(&b'b') => {
                    match self.match_balance(s, p + 2)? {
                        Some(e) => {
                            s = e;
                            p += 4;
                            continue;
                        }
                        None => return Ok(None),
                    }
                }
                b'%' if self.pat.get(p + 1) == Some(&b'f') => {
                    p += 2;
                    if self.pat.get(p) != Some(&b'[') {
                        return bad("missing '[' after '%f' in pattern");
                    }
                    let ep = self.class_end(p)?;
                    let prev = if s == 0 { 0 } else { self.src[s - 1] };
                    let cur = self.src.get(s).copied().unwrap_or(0);
                    if !self.match_bracket(prev, p, ep - 1) && self.match_bracket(cur, p, ep - 1) {
                        p = ep;
                        continue;
                    }
                    return Ok(None);
                }
                b'%' if self.pat.get(p + 1).is_some_and(u8::is_ascii_digit) => {
                    match self.match_capture(s, self.pat[p + 1])? {
                        Some(e) => {
                            s = e;
                            p += 2;
                            continue;
                        }
                        None => return Ok(None),
                    }
                }
                _ => {}
            }
            let ep = self.class_end(p)?;
            let quantifier = self.pat.get(ep).copied();
            if !self.single(s, p, ep) {
                if matches!(quantifier, Some(b'*' | b'?' | b'-')) {
                    // Zero occurrences will do.
                    p = ep + 1;
                    continue;
                }
                return Ok(None);
            }
            match quantifier {
                Some(b'?') => {
                    if let Some(e) = self.do_match(s + 1, ep + 1)? {
                        return Ok(Some(e));
                    }
                    p = ep + 1;
                }
                Some(b'+') => return self.max_expand(s + 1, p, ep),
                Some(b'*') => return self.max_expand(s, p, ep),
                Some(b'-') => return self.min_expand(s, p, ep),
                _ => {
                    s += 1;
                    p = ep;
                }
            }
        }
    }

    fn max_expand(&mut self, s: usize, p: usize, ep: usize) -> R<Option<usize>, E> {
        let mut i = 0;
        while self.single(s + i, p, ep) {
            self.step()?;
            i += 1;
        }
        loop {
            if let Some(e) = self.do_match(s + i, ep + 1)? {
                return Ok(Some(e));
            }
            if i == 0 {
                return Ok(None);
            }
            i -= 1;
        }
    }

    fn min_expand(&mut self, mut s: usize, p: usize, ep: usize) -> R<Option<usize>, E> {
        loop {
            if let Some(e) = self.do_match(s, ep + 1)? {
                return Ok(Some(e));
            }
            if !self.single(s, p, ep) {
                return Ok(None);
            }
            s += 1;
        }
    }

    fn start_capture(&mut self, s: usize, p: usize, what: Len) -> R<Option<usize>, E> {
        if self.level >= MAX_CAPTURES {
            return bad("too many captures");
        }
        self.capture[self.level] = (s, what);
        self.level += 1;
        let r = self.do_match(s, p)?;
        if r.is_none() {
            self.level -= 1;
        }
        Ok(r)
    }

    fn end_capture(&mut self, s: usize, p: usize) -> R<Option<usize>, E> {
        let Some(l) = (0..self.level)
            .rev()
            .find(|&l| self.capture[l].1 == Len::Unfinished)
        else {
            return bad("invalid pattern capture");
        };
        self.capture[l].1 = Len::Closed(s - self.capture[l].0);
        let r = self.do_match(s, p)?;
        if r.is_none() {
            self.capture[l].1 = Len::Unfinished;
        }
        Ok(r)
    }

    fn match_balance(&mut self, s: usize, p: usize) -> R<Option<usize>, E> {
        if p + 1 >= self.pat.len() {
            return bad("malformed pattern (missing arguments to '%b')");
        }
        let (open, close) = (self.pat[p], self.pat[p + 1]);
        if self.src.get(s) != Some(&open) {
            return Ok(None);
        }
        let mut depth = 1;
        for i in s + 1..self.src.len() {
            self.step()?;
            let c = self.src[i];
            if c == close {
                depth -= 1;
                if depth == 0 {
                    return Ok(Some(i + 1));
                }
            } else if c == open {
                depth += 1;
            }
        }
        Ok(None)
    }

    fn match_capture(&mut self, s: usize, digit: u8) -> R<Option<usize>, E> {
        let l = usize::from(digit).wrapping_sub(usize::from(b'1'));
        if l >= self.level || self.capture[l].1 == Len::Unfinished {
            return bad(format!("invalid capture index %{}", l.wrapping_add(1)));
        }
        let (start, Len::Closed(len)) = self.capture[l] else {
            // A position capture has no length: Lua compares 0 bytes... of a negative
            // length, which never fits; treat it as a failed match.
            return Ok(None);
        };
        for _ in 0..len / 64 {
            self.step()?;
        }
        let ok = self.src.len() - s >= len && self.src[start..start + len] == self.src[s..s + len];
        Ok(ok.then_some(s + len))
    }
}

/// Whether `pat` has no special characters (a plain search will do).
pub fn is_plain(pat: &[u8]) -> bool {
    !pat.iter().any(|c| SPECIALS.contains(c))
}

/// Lua's `posrelatI`: a 1-based start position (negative from the end) made 1-based and
/// positive, at least 1.
pub fn start_position(pos: i64, len: usize) -> usize {
    if pos > 0 {
        usize::try_from(pos).unwrap_or(usize::MAX)
    } else if pos == 0 || pos.unsigned_abs() > len as u64 {
        1
    } else {
        len - pos.unsigned_abs() as usize + 1
    }
}

/// The first occurrence of `needle` in `hay`, searched in steps of at most `chunk` bytes so
/// the callback is told of the work.
pub fn find_plain<E>(
    hay: &[u8],
    needle: &[u8],
    tick: &mut dyn FnMut(u64) -> Result<(), E>,
) -> Result<Option<usize>, E> {
    if needle.is_empty() {
        return Ok(Some(0));
    }
    if needle.len() > hay.len() {
        return Ok(None);
    }
    let finder = memchr::memmem::Finder::new(needle);
    let chunk = 1 << 16;
    let mut at = 0;
    while at + needle.len() <= hay.len() {
        let end = (at + chunk + needle.len() - 1).min(hay.len());
        tick(((end - at) / 16) as u64)?;
        if let Some(i) = finder.find(&hay[at..end]) {
            return Ok(Some(at + i));
        }
        at += chunk;
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(src: &str, pat: &str) -> Option<(usize, usize, Vec<Capture>)> {
        let mut tick = |_: u64| Ok::<(), ()>(());
        let (anchor, pat) = match pat.strip_prefix('^') {
            Some(p) => (true, p),
            None => (false, pat),
        };
        let mut mt = Matcher::new(src.as_bytes(), pat.as_bytes(), &mut tick);
        let mut s = 0;
        loop {
            if let Some(e) = mt.find_at(s).ok()? {
                return Some((s, e, mt.captures(s, e, true).ok()?));
            }
            s += 1;
            if anchor || s > src.len() {
                return None;
            }
        }
    }

    #[test]
    fn the_manual_examples() {
        assert_eq!(m("hello world", "o w").map(|r| (r.0, r.1)), Some((4, 7)));
        assert_eq!(
            m("  trim  ", "^%s*(.-)%s*$").unwrap().2,
            vec![Capture::Text(2, 6)]
        );
        assert_eq!(
            m("THE (quick) fox", "%((%a+)%)").unwrap().2,
            vec![Capture::Text(5, 10)]
        );
        assert_eq!(
            m("hello", "()ll()").unwrap().2,
            vec![Capture::Position(3), Capture::Position(5)]
        );
        assert_eq!(m("x = [[a]] y", "%b[]").map(|r| (r.0, r.1)), Some((4, 9)));
        assert_eq!(
            m("THE (quick) fox", "%f[%a]%a+").map(|r| (r.0, r.1)),
            Some((0, 3))
        );
        assert_eq!(m("abcabc", "(abc)%1").map(|r| (r.0, r.1)), Some((0, 6)));
        assert!(m("abc", "[a-").is_none());
    }

    #[test]
    fn a_quadratic_pattern_is_counted_and_can_be_stopped() {
        let src = format!("x{}x", " ".repeat(20_000));
        let mut steps = 0u64;
        let mut tick = |n: u64| {
            steps += n;
            if steps > 1_000_000 {
                Err("stop")
            } else {
                Ok(())
            }
        };
        let mut mt = Matcher::new(src.as_bytes(), b"%s*(.-)%s*$", &mut tick);
        let mut stopped = false;
        for s in 0..src.len() {
            match mt.find_at(s) {
                Err(Stop::Budget("stop")) => {
                    stopped = true;
                    break;
                }
                Ok(Some(_)) => break,
                other => assert!(matches!(other, Ok(None))),
            }
        }
        assert!(stopped);
    }
}
