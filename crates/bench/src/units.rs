//! Durations and rates as people type them: `10s`, `500ms`, `2m`, `250us`, `1.5s`; `100k`.

use std::time::Duration;

/// Parses a duration: a number followed by `ns`, `us`, `ms`, `s`, `m` or `h` (a bare number is
/// seconds).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a duration (try 10s, 500ms, 2m)"))?;
    let scale = match unit.trim() {
        "ns" => 1e-9,
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "" | "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        u => {
            return Err(format!(
                "`{u}` in `{s}` is not a time unit (ns, us, ms, s, m, h)"
            ))
        }
    };
    let secs = n * scale;
    if !secs.is_finite() || secs > 1e9 {
        return Err(format!("`{s}` is too long"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Parses a count or rate: digits with an optional `k` (thousand) or `m` (million) suffix.
pub fn parse_count(s: &str) -> Result<f64, String> {
    let s = s.trim();
    let (num, scale) = match s.as_bytes().last() {
        Some(b'k' | b'K') => (&s[..s.len() - 1], 1e3),
        Some(b'm' | b'M') => (&s[..s.len() - 1], 1e6),
        _ => (s, 1.0),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a number (try 5000, 100k, 1.5m)"))?;
    if !n.is_finite() || n < 0.0 {
        return Err(format!("`{s}` must be a non-negative number"));
    }
    Ok(n * scale)
}

/// Formats nanoseconds for people: `812ns`, `41.2us`, `3.05ms`, `1.20s`.
pub fn fmt_nanos(ns: u64) -> String {
    let n = ns as f64;
    if ns < 1_000 {
        format!("{ns}ns")
    } else if ns < 1_000_000 {
        format!("{:.1}us", n / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.2}ms", n / 1e6)
    } else {
        format!("{:.2}s", n / 1e9)
    }
}

/// Formats microseconds (as reports hold them) the same way.
pub fn fmt_micros(us: f64) -> String {
    fmt_nanos((us * 1e3) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("fast")
            .unwrap_err()
            .contains("not a duration"));
        assert!(parse_duration("3 weeks")
            .unwrap_err()
            .contains("not a time unit"));
    }

    #[test]
    fn counts() {
        assert_eq!(parse_count("5000"), Ok(5000.0));
        assert_eq!(parse_count("100k"), Ok(100_000.0));
        assert_eq!(parse_count("1.5m"), Ok(1_500_000.0));
        assert!(parse_count("-3").is_err());
        assert!(parse_count("lots").is_err());
    }

    #[test]
    fn nanos() {
        assert_eq!(fmt_nanos(812), "812ns");
        assert_eq!(fmt_nanos(41_200), "41.2us");
        assert_eq!(fmt_nanos(3_050_000), "3.05ms");
        assert_eq!(fmt_nanos(1_200_000_000), "1.20s");
    }
}
