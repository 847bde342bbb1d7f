//! The process's log: messages of every crate (the `log` facade) to standard error, filtered
//! by level per module and written as text or JSON lines.
//!
//! It starts before the config is read, from `--log-level` or RUST_LOG (else "info"), as text;
//! [`configure`] then applies the config's `[log]`, the command line and RUST_LOG still
//! winning over `log.level`. Under systemd, when standard error is the journal
//! (`JOURNAL_STREAM` names it), text lines carry no time (the journal stamps them) and begin
//! with the level as a syslog priority, `<3>` to `<7>`, which the journal records as the
//! message's priority.

use std::io::Write as _;
use std::sync::RwLock;
use std::time::SystemTime;

use hotpath_config::{LogConfig, LogFormat};
use log::{LevelFilter, Log, Metadata, Record};

/// Levels per module: the longest module prefix of a message's target decides; the level
/// without a module for the rest.
#[derive(Debug, Clone, PartialEq)]
pub struct Directives {
    default: LevelFilter,
    /// (module, level), longest module first.
    modules: Vec<(String, LevelFilter)>,
}

impl Directives {
    /// Parses RUST_LOG's form, `LEVEL,MODULE=LEVEL,...`: a bare module name is that module at
    /// every level, and a `/filter` suffix is ignored. Unknown levels are left out (as
    /// RUST_LOG's own parser leaves them); `log.level` and `--log-level` are checked before
    /// they get here (`hotpath_config::check_log_level`).
    pub fn parse(spec: &str) -> Directives {
        let spec = spec.split('/').next().unwrap_or("");
        let mut default = LevelFilter::Off;
        let mut modules = Vec::new();
        let mut any_default = false;
        for d in spec.split(',').map(str::trim).filter(|d| !d.is_empty()) {
            match d.split_once('=') {
                Some((module, level)) => {
                    if let Ok(level) = level.trim().parse() {
                        modules.push((module.trim().to_string(), level));
                    }
                }
                None => match d.parse::<LevelFilter>() {
                    Ok(level) => {
                        default = level;
                        any_default = true;
                    }
                    Err(_) => modules.push((d.to_string(), LevelFilter::Trace)),
                },
            }
        }
        if !any_default && modules.is_empty() {
            default = LevelFilter::Info;
        }
        modules.sort_by_key(|m| std::cmp::Reverse(m.0.len()));
        Directives { default, modules }
    }

    /// The level in force for messages of `target`.
    pub fn level(&self, target: &str) -> LevelFilter {
        self.modules
            .iter()
            .find(|(m, _)| {
                target.starts_with(m.as_str())
                    && (target.len() == m.len() || target[m.len()..].starts_with("::"))
            })
            .map_or(self.default, |(_, l)| *l)
    }

    /// The most verbose level any module gets.
    pub fn max(&self) -> LevelFilter {
        self.modules
            .iter()
            .map(|(_, l)| *l)
            .fold(self.default, std::cmp::Ord::max)
    }
}

/// How lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// `[2026-11-29T14:30:37Z INFO  module] message`.
    Text,
    /// `<6>module: message`, for the journal.
    Journal,
    /// `{"ts":"2026-11-29T14:30:37.123Z","level":"INFO","target":"module","msg":"message"}`.
    Json,
}

struct State {
    directives: Directives,
    style: Style,
    /// `--log-level`, which wins over RUST_LOG and the config.
    cli: Option<String>,
}

struct Logger {
    state: RwLock<Option<State>>,
}

static LOGGER: Logger = Logger {
    state: RwLock::new(None),
};

impl Log for Logger {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        state
            .as_ref()
            .is_some_and(|s| m.level() <= s.directives.level(m.target()))
    }

    fn log(&self, record: &Record<'_>) {
        let style = {
            let state = self.state.read().unwrap_or_else(|e| e.into_inner());
            match state.as_ref() {
                Some(s) if record.level() <= s.directives.level(record.target()) => s.style,
                _ => return,
            }
        };
        let line = format_line(style, SystemTime::now(), record);
        // One write per line: lines of several threads never interleave.
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn flush(&self) {}
}

/// `record` as one line (with its newline) in `style`.
pub fn format_line(style: Style, now: SystemTime, record: &Record<'_>) -> String {
    let level = record.level();
    let msg = record.args().to_string();
    match style {
        Style::Text => format!(
            "[{} {level:<5} {}] {msg}\n",
            hotpath_wire::http::rfc3339(now, false),
            record.target()
        ),
        Style::Journal => {
            // syslog priorities: err 3, warning 4, info 6, debug 7.
            let priority = match level {
                log::Level::Error => 3,
                log::Level::Warn => 4,
                log::Level::Info => 6,
                log::Level::Debug | log::Level::Trace => 7,
            };
            // A message of several lines stays one journal entry per line, each with its level.
            let mut out = String::new();
            for l in msg.lines() {
                out.push_str(&format!("<{priority}>{}: {l}\n", record.target()));
            }
            if out.is_empty() {
                out = format!("<{priority}>{}:\n", record.target());
            }
            out
        }
        Style::Json => {
            // The fields in this order (ts first, msg last), each value escaped by serde_json.
            let q = |s: &str| serde_json::Value::from(s).to_string();
            format!(
                "{{\"ts\":\"{}\",\"level\":\"{}\",\"target\":{},\"msg\":{}}}\n",
                hotpath_wire::http::rfc3339(now, true),
                level.as_str(),
                q(record.target()),
                q(&msg)
            )
        }
    }
}

/// Whether standard error is the systemd journal: `JOURNAL_STREAM` (`DEVICE:INODE`, set by
/// systemd for a unit whose output goes to the journal) names the file standard error is.
fn stderr_is_journal() -> bool {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(stream) = std::env::var("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = stream.split_once(':') else {
        return false;
    };
    let Ok(m) = std::fs::metadata("/proc/self/fd/2") else {
        return false;
    };
    dev.parse() == Ok(m.dev()) && ino.parse() == Ok(m.ino())
}

/// The level list in force: the command line's, else RUST_LOG, else `config`'s.
fn spec(cli: Option<&str>, config: &str) -> String {
    cli.map(str::to_string)
        .or_else(|| std::env::var("RUST_LOG").ok().filter(|v| !v.is_empty()))
        .unwrap_or_else(|| config.to_string())
}

fn set(state: State) {
    log::set_max_level(state.directives.max());
    *LOGGER.state.write().unwrap_or_else(|e| e.into_inner()) = Some(state);
}

/// Starts the log, before the config is read: `cli` (`--log-level`), else RUST_LOG, else
/// "info"; text (for the journal under systemd).
pub fn init(cli: Option<&str>) {
    let text = if stderr_is_journal() {
        Style::Journal
    } else {
        Style::Text
    };
    set(State {
        directives: Directives::parse(&spec(cli, "info")),
        style: text,
        cli: cli.map(str::to_string),
    });
    // A second logger (a test that runs the binary's code twice) keeps the first.
    let _ = log::set_logger(&LOGGER);
}

/// Applies the config's `[log]`: its format, and its level unless `--log-level` or RUST_LOG
/// gave one.
pub fn configure(config: &LogConfig) {
    let cli = LOGGER
        .state
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .and_then(|s| s.cli.clone());
    let style = match config.format {
        LogFormat::Json => Style::Json,
        LogFormat::Text if stderr_is_journal() => Style::Journal,
        LogFormat::Text => Style::Text,
    };
    set(State {
        directives: Directives::parse(&spec(cli.as_deref(), &config.level)),
        style,
        cli,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn the_longest_module_decides_and_the_bare_level_does_the_rest() {
        let d = Directives::parse("warn,hotpath_store=debug,hotpath_store::journal=error");
        assert_eq!(d.level("hotpath_server"), LevelFilter::Warn);
        assert_eq!(d.level("hotpath_store"), LevelFilter::Debug);
        assert_eq!(d.level("hotpath_store::flusher"), LevelFilter::Debug);
        assert_eq!(d.level("hotpath_store::journal"), LevelFilter::Error);
        // A module name is a whole path segment, not any prefix.
        assert_eq!(d.level("hotpath_storeroom"), LevelFilter::Warn);
        assert_eq!(d.max(), LevelFilter::Debug);
        // RUST_LOG's forms: a bare module is that module at every level, nothing else shown.
        let d = Directives::parse("hotpath_lua");
        assert_eq!(d.level("hotpath_lua"), LevelFilter::Trace);
        assert_eq!(d.level("hotpath"), LevelFilter::Off);
        assert_eq!(
            Directives::parse("debug/some regex").level("x"),
            LevelFilter::Debug
        );
        assert_eq!(Directives::parse("").level("x"), LevelFilter::Info);
        assert_eq!(Directives::parse("OFF").max(), LevelFilter::Off);
    }

    fn line(style: Style, level: log::Level, msg: &str) -> String {
        let t = UNIX_EPOCH + Duration::from_millis(1_796_000_000_123);
        format_line(
            style,
            t,
            &Record::builder()
                .level(level)
                .target("hotpath_server")
                .args(format_args!("{msg}"))
                .build(),
        )
    }

    #[test]
    fn lines_as_text_for_the_journal_and_as_json() {
        assert_eq!(
            line(Style::Text, log::Level::Warn, "x = 1"),
            "[2026-11-30T00:53:20Z WARN  hotpath_server] x = 1\n"
        );
        assert_eq!(
            line(Style::Journal, log::Level::Error, "two\nlines"),
            "<3>hotpath_server: two\n<3>hotpath_server: lines\n"
        );
        assert_eq!(
            line(Style::Journal, log::Level::Info, "ok"),
            "<6>hotpath_server: ok\n"
        );
        // JSON: one object per line, whatever the message holds.
        let text = line(Style::Json, log::Level::Info, "a \"quoted\"\nline\u{7}");
        assert!(text.starts_with("{\"ts\":\"2026-11-30T00:53:20.123Z\",\"level\":\"INFO\","));
        assert_eq!(text.matches('\n').count(), 1);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["ts"], "2026-11-30T00:53:20.123Z");
        assert_eq!(v["level"], "INFO");
        assert_eq!(v["target"], "hotpath_server");
        assert_eq!(v["msg"], "a \"quoted\"\nline\u{7}");
    }
}
