//! What the server changes on the host itself: it raises the soft open-file limit to the
//! hard one at start, so the configured connections fit without hand tuning, and lowers its
//! background threads' priority (`server.background_nice`). Whether even the
//! hard limit is enough is reported by hotpath-doctor, with every other host setting.

use nix::sys::resource::{getrlimit, setrlimit, Resource};

/// The soft limit to set, if it should be raised.
pub fn nofile_raise(soft: u64, hard: u64) -> Option<u64> {
    (soft < hard).then_some(hard)
}

/// Raises the soft open-file limit to the hard one.
pub fn raise_nofile() {
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) => {
            if let Some(to) = nofile_raise(soft, hard) {
                match setrlimit(Resource::RLIMIT_NOFILE, to, hard) {
                    Ok(()) => log::debug!("raised the open-file limit from {soft} to {to}"),
                    Err(e) => log::warn!("cannot raise the open-file limit to {to}: {e}"),
                }
            }
        }
        Err(e) => log::warn!("cannot read RLIMIT_NOFILE: {e}"),
    }
}

/// Lowers the calling thread's scheduling priority to `nice` (Linux keeps a nice value per
/// thread, and threads it starts inherit it). Done with renice(1) on the thread id: a safe
/// call, once per background thread at start. Workers keep the default priority, so on a
/// busy core the scheduler runs them first and housekeeping takes the idle time.
pub fn lower_priority(thread: &str, nice: u32) {
    let tid = nix::unistd::gettid().to_string();
    let done = std::process::Command::new("renice")
        .args(["-n", &nice.to_string(), "-p", &tid])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
    match done {
        Ok(s) if s.success() => {}
        Ok(s) => {
            log::warn!("{thread}: renice -n {nice} failed ({s}); it keeps the workers' priority")
        }
        Err(e) => log::warn!("{thread}: cannot run renice ({e}); it keeps the workers' priority"),
    }
}

/// The calling thread's nice value (from /proc), if it can be read.
pub fn thread_nice() -> Option<i32> {
    let tid = nix::unistd::gettid();
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    // Field 19 (nice), counted after the parenthesised command name.
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(16)?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nofile() {
        assert_eq!(nofile_raise(1024, 1024), None);
        assert_eq!(nofile_raise(1024, 65536), Some(65536));
    }

    #[test]
    fn a_thread_lowers_only_its_own_priority() {
        let before = thread_nice().expect("readable");
        let lowered = std::thread::spawn(|| {
            lower_priority("test", 7);
            thread_nice()
        })
        .join()
        .unwrap();
        assert_eq!(lowered, Some((before + 7).min(19)));
        assert_eq!(thread_nice(), Some(before), "the caller's is unchanged");
    }
}
