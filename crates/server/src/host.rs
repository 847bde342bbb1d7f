//! The one host limit the server changes itself: it raises the soft open-file limit to the
//! hard one at start, so the configured connections fit without hand tuning. Whether even the
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nofile() {
        assert_eq!(nofile_raise(1024, 1024), None);
        assert_eq!(nofile_raise(1024, 65536), Some(65536));
    }
}
