//! Start-up checks of the host's limits that the field reports tuned by hand: the listen
//! backlog cap (net.core.somaxconn) and the open-file limit. The decisions are pure functions
//! of the values read, so they are tested without touching the host.

use nix::sys::resource::{getrlimit, setrlimit, Resource};

/// The warning to give when the kernel caps the backlog below the configured one.
pub fn somaxconn_warning(somaxconn: u64, backlog: u32) -> Option<String> {
    (somaxconn < u64::from(backlog)).then(|| {
        format!(
            "net.core.somaxconn is {somaxconn}, below server.backlog {backlog}: the kernel caps \
             every listen backlog at it, so bursts of new connections are dropped. Fix: \
             sysctl -w net.core.somaxconn={backlog} (and put it in /etc/sysctl.d/ to keep it)"
        )
    })
}

/// What to do about RLIMIT_NOFILE: the soft limit to set (if it should be raised) and a
/// warning when even the hard limit is below what the configured connections need.
pub fn nofile_plan(soft: u64, hard: u64, needed: u64) -> (Option<u64>, Option<String>) {
    let raise = (soft < hard).then_some(hard);
    let effective = hard.max(soft);
    let warning = (effective < needed).then(|| {
        format!(
            "the open-file limit (RLIMIT_NOFILE) is {effective}, below the {needed} that \
             server.workers x server.max_connections_per_worker needs: connections beyond it \
             fail to be accepted. Fix: raise the hard limit (ulimit -Hn, LimitNOFILE= in a \
             systemd unit, or /etc/security/limits.conf)"
        )
    });
    (raise, warning)
}

/// Reads the host's values, raises the soft open-file limit to the hard one, and logs a
/// warning for each limit below what the config needs.
pub fn check(backlog: u32, needed_files: u64) {
    match std::fs::read_to_string("/proc/sys/net/core/somaxconn") {
        Ok(text) => {
            if let Some(w) = text
                .trim()
                .parse()
                .ok()
                .and_then(|v| somaxconn_warning(v, backlog))
            {
                log::warn!("{w}");
            }
        }
        Err(e) => log::debug!("cannot read net.core.somaxconn: {e}"),
    }
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) => {
            let (raise, warning) = nofile_plan(soft, hard, needed_files);
            if let Some(to) = raise {
                match setrlimit(Resource::RLIMIT_NOFILE, to, hard) {
                    Ok(()) => log::info!("raised the open-file limit from {soft} to {to}"),
                    Err(e) => log::warn!("cannot raise the open-file limit to {to}: {e}"),
                }
            }
            if let Some(w) = warning {
                log::warn!("{w}");
            }
        }
        Err(e) => log::warn!("cannot read RLIMIT_NOFILE: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn somaxconn() {
        assert!(somaxconn_warning(4096, 4096).is_none());
        let w = somaxconn_warning(128, 4096).unwrap();
        assert!(
            w.contains("net.core.somaxconn") && w.contains("sysctl -w net.core.somaxconn=4096")
        );
    }

    #[test]
    fn nofile() {
        assert_eq!(nofile_plan(1024, 1024, 100), (None, None));
        assert_eq!(nofile_plan(1024, 65536, 100).0, Some(65536));
        let (raise, warning) = nofile_plan(1024, 4096, 32_768);
        assert_eq!(raise, Some(4096));
        assert!(warning.unwrap().contains("RLIMIT_NOFILE"));
    }
}
