//! What a popup is: its payload, priority, active window, targeting, rollout and frequency
//! rules, as the admin API and the database hand it over (JSON), checked once on the way in
//! so that deciding never meets a malformed rule.

use serde::{Deserialize, Serialize};

/// A version like `2.14.1` (missing parts are 0), compared part by part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Version(pub [u32; 3]);

impl std::str::FromStr for Version {
    type Err = String;

    fn from_str(text: &str) -> Result<Version, String> {
        let mut parts = [0u32; 3];
        for (n, piece) in text.split('.').enumerate() {
            let slot = parts
                .get_mut(n)
                .ok_or_else(|| format!("version {text:?}: at most three parts"))?;
            *slot = piece
                .parse()
                .map_err(|_| format!("version {text:?}: parts are whole numbers"))?;
        }
        Ok(Version(parts))
    }
}

impl TryFrom<String> for Version {
    type Error = String;
    fn try_from(s: String) -> Result<Version, String> {
        s.parse()
    }
}

impl From<Version> for String {
    fn from(v: Version) -> String {
        format!("{}.{}.{}", v.0[0], v.0[1], v.0[2])
    }
}

/// How long after an event the user may see a popup again: a number of seconds, or `"never"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Wait {
    /// After this many seconds.
    Secs(u64),
    /// Never again: the string `"never"`.
    Never(Never),
}

/// The word `never`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Never {
    /// Never.
    Never,
}

impl<'de> Deserialize<'de> for Wait {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Wait, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Wait;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a whole number of seconds or \"never\"")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Wait, E> {
                Ok(Wait::Secs(v))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Wait, E> {
                if v == "never" {
                    Ok(Wait::Never(Never::Never))
                } else {
                    Err(E::invalid_value(serde::de::Unexpected::Str(v), &self))
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// Parses JSON into `T`; an error names the field it is in (`frequency.cooldown: invalid
/// type: …`), clipped to [`crate::api::MAX_ERROR_BYTES`].
pub fn parse_json<'a, T: Deserialize<'a>>(text: &'a [u8]) -> Result<T, String> {
    let clip = |msg: String| crate::api::clip(msg, crate::api::MAX_ERROR_BYTES);
    let mut de = serde_json::Deserializer::from_slice(text);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let inner = e.inner();
        let mut path: Vec<String> = e.path().iter().map(|s| s.to_string()).collect();
        if inner.to_string().starts_with("unknown field") {
            // The path ends in the unknown name itself, which the message quotes.
            path.pop();
        }
        let path = path.join(".");
        clip(if !inner.is_data() {
            format!("body: invalid JSON: {inner}")
        } else if path.is_empty() {
            format!("body: {inner}")
        } else {
            format!("{path}: {inner}")
        })
    })?;
    de.end()
        .map_err(|e| clip(format!("body: invalid JSON: {e}")))?;
    Ok(value)
}

impl Wait {
    /// The unix second from which the user is eligible again after an event at `now`
    /// (`u64::MAX`: never).
    pub fn after(self, now: u64) -> u64 {
        match self {
            Wait::Secs(s) => now.saturating_add(s),
            Wait::Never(_) => u64::MAX,
        }
    }
}

/// An include/exclude pair over one attribute: empty `include` means everyone.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Filter {
    /// Only these values (empty: any).
    pub include: Vec<String>,
    /// Never these values.
    pub exclude: Vec<String>,
}

impl Filter {
    /// Whether a request with `value` (none when the front end sent nothing) passes. A value
    /// that is missing passes an empty include list only.
    pub fn admits(&self, value: Option<&str>) -> bool {
        match value {
            Some(v) => {
                !self.exclude.iter().any(|x| x == v)
                    && (self.include.is_empty() || self.include.iter().any(|x| x == v))
            }
            None => self.include.is_empty(),
        }
    }

    /// Like [`admits`](Self::admits) for a user in several segments: excluded if any is
    /// excluded, included if any is included.
    pub fn admits_any(&self, values: &[&str]) -> bool {
        !values.iter().any(|v| self.exclude.iter().any(|x| x == v))
            && (self.include.is_empty()
                || values.iter().any(|v| self.include.iter().any(|x| x == v)))
    }
}

/// Who may see a popup, by what the front end sends.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Targeting {
    /// By `platform` (e.g. "ios", "android", "web").
    pub platform: Filter,
    /// By `country` (e.g. "DE").
    pub country: Filter,
    /// By `segment` (a user may be in several).
    pub segment: Filter,
    /// Lowest `app_version`, inclusive.
    pub app_version_min: Option<Version>,
    /// Highest `app_version`, inclusive.
    pub app_version_max: Option<Version>,
}

/// How often a user may see a popup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Frequency {
    /// After a show with no action yet: when the user may see it again.
    pub cooldown: Wait,
    /// After the user closed it.
    pub after_close: Wait,
    /// After the user clicked it.
    pub after_click: Wait,
    /// Most shows per user (none: no limit).
    pub max_shows: Option<u32>,
    /// Most shows per UTC day, all users together (none: no limit).
    pub daily_cap: Option<u64>,
}

impl Default for Frequency {
    fn default() -> Frequency {
        Frequency {
            cooldown: Wait::Secs(86_400),
            after_close: Wait::Secs(7 * 86_400),
            after_click: Wait::Never(Never::Never),
            max_shows: None,
            daily_cap: None,
        }
    }
}

/// The largest popup id: the stores keep ids in signed 32-bit columns.
pub const MAX_ID: u32 = i32::MAX as u32;

/// One popup configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Popup {
    /// Its id.
    pub id: u32,
    /// A name for people.
    pub name: String,
    /// Handed to the front end as is: a JSON object.
    pub payload: serde_json::Value,
    /// Higher first.
    #[serde(default)]
    pub priority: i32,
    /// Shown from this unix second on (none: already).
    #[serde(default)]
    pub starts_at: Option<u64>,
    /// Shown until before this unix second (none: no end).
    #[serde(default)]
    pub ends_at: Option<u64>,
    /// Who may see it.
    #[serde(default)]
    pub targeting: Targeting,
    /// The share of users (by a stable hash of the user id) who may see it, 0 to 100.
    #[serde(default = "full_rollout")]
    pub rollout_percent: u8,
    /// How often.
    #[serde(default)]
    pub frequency: Frequency,
    /// Off: never shown.
    #[serde(default = "yes")]
    pub enabled: bool,
}

fn full_rollout() -> u8 {
    100
}

fn yes() -> bool {
    true
}

impl Popup {
    /// Parses and checks a popup from JSON; the error names the field.
    pub fn from_json(text: &[u8]) -> Result<Popup, String> {
        let p: Popup = parse_json(text)?;
        p.check()?;
        Ok(p)
    }

    /// Rejects rules that parse but make no sense, naming the field.
    pub fn check(&self) -> Result<(), String> {
        if self.id > MAX_ID {
            return Err(format!(
                "id: at most {MAX_ID} (every database's signed 32-bit column)"
            ));
        }
        if self.name.trim().is_empty() {
            return Err("name: must not be empty".into());
        }
        if !self.payload.is_object() {
            return Err("payload: must be a JSON object".into());
        }
        if self.rollout_percent > 100 {
            return Err("rollout_percent: must be between 0 and 100".into());
        }
        if let (Some(s), Some(e)) = (self.starts_at, self.ends_at) {
            if e <= s {
                return Err("ends_at: must be after starts_at".into());
            }
        }
        let t = &self.targeting;
        if let (Some(lo), Some(hi)) = (t.app_version_min, t.app_version_max) {
            if hi < lo {
                return Err("targeting.app_version_max: must not be below app_version_min".into());
            }
        }
        if self.frequency.max_shows == Some(0) {
            return Err("frequency.max_shows: 0 would never show it; disable it instead".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_and_order() {
        let v = |s: &str| s.parse::<Version>().unwrap();
        assert!(v("2.10") > v("2.9.9"));
        assert_eq!(v("3"), Version([3, 0, 0]));
        assert!("1.2.3.4".parse::<Version>().is_err());
        assert!("1.x".parse::<Version>().is_err());
    }

    #[test]
    fn popups_parse_with_defaults_and_errors_name_the_field() {
        let p = Popup::from_json(
            br#"{"id": 1, "name": "welcome", "payload": {"title": "Hi"},
            "frequency": {"after_click": "never", "after_close": 3600, "max_shows": 3}}"#,
        )
        .unwrap();
        assert_eq!(p.rollout_percent, 100);
        assert!(p.enabled);
        assert_eq!(p.frequency.after_click, Wait::Never(Never::Never));
        assert_eq!(p.frequency.after_close, Wait::Secs(3600));
        assert_eq!(p.frequency.cooldown, Wait::Secs(86_400));
        for (json, field) in [
            (r#"{"id":1,"name":"x","payload":[1]}"#, "payload"),
            (r#"{"id":1,"name":" ","payload":{}}"#, "name"),
            (
                r#"{"id":1,"name":"x","payload":{},"rollout_percent":101}"#,
                "rollout_percent",
            ),
            (
                r#"{"id":1,"name":"x","payload":{},"starts_at":10,"ends_at":5}"#,
                "ends_at",
            ),
            (
                r#"{"id":1,"name":"x","payload":{},"frequency":{"max_shows":0}}"#,
                "max_shows",
            ),
            (
                r#"{"id":1,"name":"x","payload":{},"colour":"red"}"#,
                "colour",
            ),
            (
                r#"{"id":1,"name":"x","payload":{},"targeting":{"app_version_min":"2","app_version_max":"1.9"}}"#,
                "app_version_max",
            ),
        ] {
            let e = Popup::from_json(json.as_bytes()).unwrap_err();
            assert!(e.contains(field), "{json}: {e}");
        }
        // Type errors start with the field's path too.
        for (json, start) in [
            (
                r#"{"id":1,"name":"x","payload":{},"priority":"high"}"#,
                "priority: invalid type: string \"high\", expected i32",
            ),
            (
                r#"{"id":1,"name":"x","payload":{},"frequency":{"cooldown":"soon"}}"#,
                "frequency.cooldown: invalid value: string \"soon\", expected a whole number of seconds or \"never\"",
            ),
            (
                r#"{"id":1,"name":"x","payload":{},"frequency":{"after_close":-5}}"#,
                "frequency.after_close: invalid type: integer `-5`",
            ),
            (
                r#"{"id":1,"name":"x","payload":{},"targeting":{"country":{"include":"DE"}}}"#,
                "targeting.country.include: invalid type: string",
            ),
            (r#"{"id":3000000000,"name":"x","payload":{}}"#, "id: at most"),
            (r#"{"id":1,"name":"x""#, "body: invalid JSON"),
        ] {
            let e = Popup::from_json(json.as_bytes()).unwrap_err();
            assert!(e.starts_with(start), "{json}: {e}");
        }
    }

    #[test]
    fn filters_include_and_exclude() {
        let f = Filter {
            include: vec!["DE".into(), "AT".into()],
            exclude: vec!["AT".into()],
        };
        assert!(f.admits(Some("DE")));
        assert!(!f.admits(Some("AT")), "exclude wins");
        assert!(!f.admits(Some("FR")));
        assert!(!f.admits(None));
        assert!(Filter::default().admits(None));
        let segs = Filter {
            include: vec![],
            exclude: vec!["churned".into()],
        };
        assert!(segs.admits_any(&["vip", "new"]));
        assert!(!segs.admits_any(&["vip", "churned"]));
    }
}
