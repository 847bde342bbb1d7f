//! Private-tracker passkeys: the user's secret in its announce URL, found where the sites put
//! it. In the path (`/<passkey>/announce`, XBT's form, or `/announce/<passkey>`), in a query
//! parameter the site names (`passkey`, or TorrentPier's `uk`), or, over UDP, in the BEP 41
//! URL data, which carries the same path and query (`udp://host:port/<passkey>/announce`).
//! Parsed in place, no allocation.
//!
//! A passkey is 1 to [`MAX_LEN`] ASCII letters and digits: every site's form (XBT: 32
//! characters, TorrentPier: 10 to 20, Gazelle: 32) and nothing that needs decoding.

/// The longest passkey taken.
pub const MAX_LEN: usize = 64;

/// What a tracker request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `announce`.
    Announce,
    /// `scrape`.
    Scrape,
}

fn route_name(segment: &[u8]) -> Option<Route> {
    match segment {
        b"announce" => Some(Route::Announce),
        b"scrape" => Some(Route::Scrape),
        _ => None,
    }
}

/// Checks a passkey's form: 1 to [`MAX_LEN`] ASCII letters and digits.
pub fn check(key: &[u8]) -> Result<&[u8], &'static str> {
    if key.is_empty() || key.len() > MAX_LEN || !key.iter().all(u8::is_ascii_alphanumeric) {
        return Err("malformed passkey");
    }
    Ok(key)
}

/// The route a request path names and the passkey segment it carries, unchecked:
/// `/announce` and `/scrape` (no passkey), `/<key>/announce`, `/<key>/scrape`,
/// `/announce/<key>` and `/scrape/<key>`. `None` for any other path.
pub fn route(path: &[u8]) -> Option<(Route, Option<&[u8]>)> {
    let rest = path.strip_prefix(b"/")?;
    let mut parts = rest.splitn(3, |&b| b == b'/');
    let first = parts.next()?;
    let second = parts.next();
    if parts.next().is_some() {
        return None;
    }
    match (route_name(first), second) {
        (Some(r), None) => Some((r, None)),
        (Some(r), Some(key)) if route_name(key).is_none() => Some((r, Some(key))),
        (None, Some(name)) => route_name(name).map(|r| (r, Some(first))),
        _ => None,
    }
}

/// The value of query parameter `name`, raw; `Err` when it is given twice (two passkeys
/// would let a client pick which one a check reads). An empty `name` finds nothing.
pub fn from_query<'a>(query: &'a [u8], name: &[u8]) -> Result<Option<&'a [u8]>, &'static str> {
    if name.is_empty() {
        return Ok(None);
    }
    let mut found = None;
    for (k, v) in crate::query::pairs(query) {
        if k == name {
            if found.is_some() {
                return Err("the passkey is given twice");
            }
            found = Some(v);
        }
    }
    Ok(found)
}

/// The route and the checked passkey of a request, from its path and, when the config names
/// one, its query parameter `param`. `Ok(None)` when the path is not a tracker route;
/// `Err` when the passkey is missing, malformed or given twice (in the path and the query).
pub fn find<'a>(
    path: &'a [u8],
    query: &'a [u8],
    param: &[u8],
) -> Result<Option<(Route, &'a [u8])>, &'static str> {
    let Some((route, in_path)) = route(path) else {
        return Ok(None);
    };
    let in_query = from_query(query, param)?;
    let key = match (in_path, in_query) {
        (Some(_), Some(_)) => return Err("the passkey is given twice"),
        (Some(k), None) | (None, Some(k)) => k,
        (None, None) => return Err("this tracker is private: the announce URL needs a passkey"),
    };
    Ok(Some((route, check(key)?)))
}

/// The route and passkey in BEP 41 URL data (the tracker URL's path and query, joined by
/// [`crate::udp::Options::url_data`]). URL data that names no route (clients send an empty
/// one, or only a query) is taken as an announce's.
pub fn from_url_data<'a>(data: &'a [u8], param: &[u8]) -> Result<&'a [u8], &'static str> {
    let (path, query) = match data.iter().position(|&b| b == b'?') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &data[data.len()..]),
    };
    let path = if path.is_empty() || path == b"/" {
        b"/announce"
    } else {
        path
    };
    match find(path, query, param)? {
        Some((_, key)) => Ok(key),
        None => Err("the tracker URL's path is not /<passkey>/announce"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &[u8] = b"0123456789abcdefABCDEF0123456789";

    #[test]
    fn every_path_form_finds_its_route_and_key() {
        let a = Route::Announce;
        let s = Route::Scrape;
        for (path, want) in [
            (&b"/announce"[..], Some((a, None))),
            (b"/scrape", Some((s, None))),
            (b"/k1/announce", Some((a, Some(&b"k1"[..])))),
            (b"/k1/scrape", Some((s, Some(&b"k1"[..])))),
            (b"/announce/k1", Some((a, Some(&b"k1"[..])))),
            (b"/scrape/k1", Some((s, Some(&b"k1"[..])))),
            (b"/announce/scrape", None),
            (b"/scrape/announce", None),
            (b"/a/b/announce", None),
            (b"/announce/", Some((a, Some(&b""[..])))),
            (b"//announce", Some((a, Some(&b""[..])))),
            (b"announce", None),
            (b"/", None),
            (b"", None),
            (b"/k1/other", None),
            (b"/healthz", None),
        ] {
            assert_eq!(route(path), want, "{}", String::from_utf8_lossy(path));
        }
    }

    #[test]
    fn a_key_is_found_in_the_path_or_the_named_parameter_never_both() {
        let q = [&b"info_hash=x&uk="[..], KEY].concat();
        assert_eq!(
            find(b"/announce", &q, b"uk"),
            Ok(Some((Route::Announce, KEY)))
        );
        let p = [&b"/"[..], KEY, b"/scrape"].concat();
        assert_eq!(
            find(&p, b"info_hash=x", b"uk"),
            Ok(Some((Route::Scrape, KEY)))
        );
        assert_eq!(find(&p, &q, b"uk"), Err("the passkey is given twice"));
        let twice = [&q[..], b"&uk=", KEY].concat();
        assert_eq!(
            find(b"/announce", &twice, b"uk"),
            Err("the passkey is given twice")
        );
        // No parameter configured: only the path counts.
        assert!(find(b"/announce", &q, b"").is_err());
        assert_eq!(find(b"/healthz", &q, b"uk"), Ok(None));
    }

    #[test]
    fn malformed_keys_are_refused() {
        for bad in [
            &b""[..],
            b"ab%41",
            b"a+b",
            b"a b",
            b"\xff",
            &[b'a'; MAX_LEN + 1],
            b"abc\0",
        ] {
            assert_eq!(check(bad), Err("malformed passkey"));
            let p = [&b"/announce/"[..], bad].concat();
            assert!(find(&p, b"", b"").is_err());
        }
        assert!(check(&[b'Z'; MAX_LEN]).is_ok());
        assert_eq!(
            find(b"/announce", b"info_hash=x", b"passkey"),
            Err("this tracker is private: the announce URL needs a passkey")
        );
    }

    #[test]
    fn udp_url_data_carries_the_path_or_the_query() {
        let p = [&b"/"[..], KEY, b"/announce"].concat();
        assert_eq!(from_url_data(&p, b""), Ok(KEY));
        let q = [&b"/announce?uk="[..], KEY].concat();
        assert_eq!(from_url_data(&q, b"uk"), Ok(KEY));
        let only_query = [&b"?passkey="[..], KEY].concat();
        assert_eq!(from_url_data(&only_query, b"passkey"), Ok(KEY));
        assert!(from_url_data(b"", b"passkey").is_err());
        assert!(from_url_data(b"/other/path/x", b"passkey").is_err());
        assert!(from_url_data(b"/announce?passkey=a&passkey=b", b"passkey").is_err());
    }
}
