//! `hotpath doctor`: checks the host for what the field reports tuned by hand (listen backlog
//! caps, local port range and TIME_WAIT reuse, a stale `tcp_tw_recycle`, open-file limits, UDP
//! buffer caps, workers vs CPUs) against the configured limits. Each finding names the
//! setting, its value, why it matters for hotpath and the exact command or file line that fixes
//! it. `serve` runs the same checks at start-up and logs what is not fine as warnings.
//!
//! Everything is read through a [`Host`], whose file-system root and process limits are
//! injectable, so the checks are tested against fake /proc and /etc trees. This crate reads;
//! it never changes the host.

#![forbid(unsafe_code)]

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use hotpath_config::{effective_workers, Config, ServerConfig};
use serde::Serialize;

/// How a finding stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// As it should be.
    Ok,
    /// Worth knowing; nothing to fix for the configured limits.
    Note,
    /// Works, but below what the configuration asks for in some case.
    Warn,
    /// A configured limit cannot take effect on this host.
    Fail,
}

impl Status {
    fn label(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Note => "note",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
        }
    }
}

/// One finding.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    /// The setting checked, e.g. `net.core.somaxconn`.
    pub setting: String,
    /// Its value on this host (`unknown` when it could not be read).
    pub value: String,
    /// How it stands.
    pub status: Status,
    /// Why it matters for hotpath.
    pub why: String,
    /// The exact command or file line that fixes it, when something should change.
    pub fix: Option<String>,
}

/// Where the host's settings are read from: the real host, or a fake tree in tests.
#[derive(Debug, Clone)]
pub struct Host {
    /// The file-system root holding proc/ and etc/ (`/` on the real host).
    pub root: PathBuf,
    /// RLIMIT_NOFILE (soft, hard), when known.
    pub nofile: Option<(u64, u64)>,
    /// CPUs this process may run on.
    pub cpus: usize,
    /// Whether the process may override the kernel's buffer caps (SO_RCVBUFFORCE needs
    /// CAP_NET_ADMIN; root has it).
    pub privileged: bool,
}

impl Host {
    /// This host, as the running process sees it.
    pub fn local() -> Self {
        use nix::sys::resource::{getrlimit, Resource};
        Self {
            root: PathBuf::from("/"),
            nofile: getrlimit(Resource::RLIMIT_NOFILE).ok(),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            privileged: nix::unistd::geteuid().is_root(),
        }
    }

    fn path(&self, p: &str) -> PathBuf {
        self.root.join(p.trim_start_matches('/'))
    }

    /// A sysctl's value from proc/sys, e.g. `net.core.somaxconn`.
    pub fn sysctl(&self, name: &str) -> Option<String> {
        let p = self.path(&format!("/proc/sys/{}", name.replace('.', "/")));
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
    }

    fn sysctl_u64(&self, name: &str) -> Option<u64> {
        self.sysctl(name)?.parse().ok()
    }

    /// The sysctl files the boot applies, in the order sysctl --system reads them.
    pub fn sysctl_files(&self) -> Vec<PathBuf> {
        let mut files = Vec::new();
        for dir in [
            "/etc/sysctl.d",
            "/run/sysctl.d",
            "/usr/local/lib/sysctl.d",
            "/usr/lib/sysctl.d",
            "/lib/sysctl.d",
        ] {
            if let Ok(rd) = std::fs::read_dir(self.path(dir)) {
                let mut names: Vec<PathBuf> = rd
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.extension().is_some_and(|x| x == "conf"))
                    .collect();
                names.sort();
                files.extend(names);
            }
        }
        let main = self.path("/etc/sysctl.conf");
        if main.exists() {
            files.push(main);
        }
        files
    }

    /// Shows `p` as a path on the host (without the injected root).
    fn shown(&self, p: &Path) -> String {
        match p.strip_prefix(&self.root) {
            Ok(rel) => format!("/{}", rel.display()),
            Err(_) => p.display().to_string(),
        }
    }
}

fn persist(name: &str, value: impl std::fmt::Display) -> String {
    format!("sysctl -w {name}={value}, and the line `{name} = {value}` in /etc/sysctl.d/90-hotpath.conf to keep it")
}

fn unknown(setting: &str, why: &str) -> Finding {
    Finding {
        setting: setting.into(),
        value: "unknown".into(),
        status: Status::Note,
        why: format!("could not be read: {why}"),
        fix: None,
    }
}

/// A sysctl that must be at least `want`: `below` (with `why_below(value)` and the fix) when
/// it is not, ok (with `why_ok`) when it is.
fn at_least(
    host: &Host,
    name: &str,
    want: u64,
    below: Status,
    why_below: impl Fn(u64) -> String,
    why_ok: String,
) -> Finding {
    match host.sysctl_u64(name) {
        Some(v) => Finding {
            setting: name.into(),
            value: v.to_string(),
            status: if v < want { below } else { Status::Ok },
            why: if v < want { why_below(v) } else { why_ok },
            fix: (v < want).then(|| persist(name, want)),
        },
        None => unknown(name, &format!("proc/sys/{}", name.replace('.', "/"))),
    }
}

/// Runs every check for `config` on `host`.
pub fn check(config: &Config, host: &Host) -> Vec<Finding> {
    let s = &config.server;
    let mut out = Vec::new();
    let tcp = !config.listen.http.is_empty() || !config.listen.admin.is_empty();
    let workers = effective_workers(s.workers);
    if tcp {
        accept_queue(s, host, &mut out);
    }
    outgoing_ports(host, &mut out);
    tw_recycle(host, &mut out);
    open_files(s, workers, host, &mut out);
    if !config.listen.udp.is_empty() {
        udp_buffers(s, host, &mut out);
    }
    out.push(worker_count(s, workers, host));
    out
}

/// The accept queue: the kernel's caps on the listen backlog.
fn accept_queue(s: &ServerConfig, host: &Host, out: &mut Vec<Finding>) {
    let b = u64::from(s.backlog);
    out.push(at_least(
        host,
        "net.core.somaxconn",
        b,
        Status::Fail,
        |v| format!("the kernel silently caps every listen backlog at it, below server.backlog = {b}: bursts of new connections beyond {v} wait in SYN retries or are dropped"),
        format!("at least server.backlog = {b}: the full accept queue is used"),
    ));
    // Past it, a SYN flood's half-open connections are answered with SYN cookies, and real
    // clients still connect: worth a warning (at start too) only where cookies are off and
    // they are dropped instead. A stock kernel has 2048 here (less than the default backlog)
    // and cookies on.
    let cookies = host.sysctl_u64("net.ipv4.tcp_syncookies") != Some(0);
    out.push(at_least(
        host,
        "net.ipv4.tcp_max_syn_backlog",
        b,
        if cookies { Status::Note } else { Status::Warn },
        |v| {
            if cookies {
                format!("half-open connections beyond {v} are answered with SYN cookies (below server.backlog = {b}): clients still connect")
            } else {
                format!("half-open connections beyond {v} are dropped (net.ipv4.tcp_syncookies = 0), below server.backlog = {b}")
            }
        },
        format!("at least server.backlog = {b}"),
    ));
}

/// Outgoing connections: local ports and TIME_WAIT reuse.
fn outgoing_ports(host: &Host, out: &mut Vec<Finding>) {
    match host.sysctl("net.ipv4.ip_local_port_range") {
        Some(range) => {
            let ports = range
                .split_whitespace()
                .filter_map(|p| p.parse::<u64>().ok())
                .collect::<Vec<_>>();
            let count = match ports[..] {
                [lo, hi] if hi >= lo => hi - lo + 1,
                _ => 0,
            };
            out.push(Finding {
                setting: "net.ipv4.ip_local_port_range".into(),
                value: range.clone(),
                status: if count < 16_384 { Status::Warn } else { Status::Ok },
                why: format!("{count} local ports for outgoing connections (to databases, or a load generator on this host); connections hotpath accepts do not use them. Each closed outgoing connection holds its port in TIME_WAIT for 60 s"),
                fix: (count < 16_384).then(|| persist("net.ipv4.ip_local_port_range", "\"10240 65535\"")),
            });
        }
        None => out.push(unknown(
            "net.ipv4.ip_local_port_range",
            "proc/sys/net/ipv4/ip_local_port_range",
        )),
    }
    match host.sysctl_u64("net.ipv4.tcp_tw_reuse") {
        Some(v) => out.push(Finding {
            setting: "net.ipv4.tcp_tw_reuse".into(),
            value: v.to_string(),
            status: if v == 0 { Status::Note } else { Status::Ok },
            why: match v {
                0 => "off: a new outgoing connection never reuses a port in TIME_WAIT. It only ever helps outgoing connections (hotpath's to its database, a load generator's); it does nothing for connections hotpath accepts".into(),
                2 => "2 (the kernel's default): TIME_WAIT ports are reused for outgoing connections over loopback only, which is where a local load generator or database lives; it does nothing for connections hotpath accepts".into(),
                _ => "on: outgoing connections (to databases) may reuse ports in TIME_WAIT; it does nothing for connections hotpath accepts".into(),
            },
            fix: (v == 0).then(|| persist("net.ipv4.tcp_tw_reuse", 2)),
        }),
        None => out.push(unknown("net.ipv4.tcp_tw_reuse", "proc/sys/net/ipv4/tcp_tw_reuse")),
    }
}

/// `tcp_tw_recycle`: removed in Linux 4.12; it broke clients behind NAT.
fn tw_recycle(host: &Host, out: &mut Vec<Finding>) {
    let mut recycle = false;
    for file in host.sysctl_files() {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        for (n, line) in text.lines().enumerate() {
            let l = line.trim();
            if l.starts_with('#') || l.starts_with(';') {
                continue;
            }
            let key = l
                .split('=')
                .next()
                .unwrap_or("")
                .trim()
                .trim_start_matches('-')
                .replace('/', ".");
            if key == "net.ipv4.tcp_tw_recycle" {
                recycle = true;
                out.push(Finding {
                    setting: "net.ipv4.tcp_tw_recycle".into(),
                    value: format!("{}:{}: {l}", host.shown(&file), n + 1),
                    status: Status::Warn,
                    why: "removed in Linux 4.12: on older kernels it dropped connections from clients behind NAT (timestamps from different hosts look out of order); on newer ones this line makes sysctl --system report an error at every boot".into(),
                    fix: Some(format!("delete line {} of {}", n + 1, host.shown(&file))),
                });
            }
        }
    }
    if let Some(v) = host.sysctl_u64("net.ipv4.tcp_tw_recycle") {
        recycle = true;
        out.push(Finding {
            setting: "net.ipv4.tcp_tw_recycle".into(),
            value: v.to_string(),
            status: if v == 0 { Status::Ok } else { Status::Fail },
            why: "this kernel predates 4.12 and still has tcp_tw_recycle: when on, it drops connections from clients behind NAT".into(),
            fix: (v != 0).then(|| persist("net.ipv4.tcp_tw_recycle", 0)),
        });
    }
    if !recycle {
        out.push(Finding {
            setting: "net.ipv4.tcp_tw_recycle".into(),
            value: "absent".into(),
            status: Status::Ok,
            why: "not set in any sysctl file (the setting was removed in Linux 4.12)".into(),
            fix: None,
        });
    }
}

/// Open files: one per connection, plus listeners, sockets, epoll and the store.
fn open_files(s: &ServerConfig, workers: usize, host: &Host, out: &mut Vec<Finding>) {
    let needed = (workers * s.max_connections_per_worker) as u64 + 64 + 8 * workers as u64;
    match host.nofile {
        Some((soft, hard)) => {
            let (status, why, fix) = if soft >= needed {
                (Status::Ok, format!("at least the {needed} that server.workers ({workers}) x server.max_connections_per_worker ({}) and hotpath's own files need", s.max_connections_per_worker), None)
            } else if hard >= needed {
                (Status::Ok, format!("the soft limit {soft} is below the {needed} needed, but serve raises it to the hard limit {hard} at start-up"), None)
            } else {
                (
                    Status::Fail,
                    format!("even the hard limit {hard} is below the {needed} that server.workers ({workers}) x server.max_connections_per_worker ({}) needs: accepts fail with EMFILE beyond it", s.max_connections_per_worker),
                    Some(format!("raise the hard limit to {needed} or more: `LimitNOFILE={needed}` in the systemd unit, `* hard nofile {needed}` in /etc/security/limits.conf, or `ulimit -Hn {needed}` in the starting shell as root")),
                )
            };
            out.push(Finding {
                setting: "RLIMIT_NOFILE".into(),
                value: format!("soft {soft}, hard {hard}"),
                status,
                why,
                fix,
            });
        }
        None => out.push(unknown("RLIMIT_NOFILE", "getrlimit failed")),
    }
}

/// UDP buffers: the kernel's caps against the configured socket buffers.
fn udp_buffers(s: &ServerConfig, host: &Host, out: &mut Vec<Finding>) {
    for (name, want, key) in [
        (
            "net.core.rmem_max",
            s.udp_recv_buffer,
            "server.udp_recv_buffer",
        ),
        (
            "net.core.wmem_max",
            s.udp_send_buffer,
            "server.udp_send_buffer",
        ),
    ] {
        let mut f = at_least(
            host,
            name,
            want as u64,
            Status::Fail,
            |v| {
                format!("the kernel caps socket buffers at it, below {key} = {want}: bursts beyond {v} bytes are dropped before hotpath reads them")
            },
            format!("at least {key} = {want}"),
        );
        if f.status == Status::Fail && host.privileged {
            f.status = Status::Note;
            f.why = format!("below {key} = {want}, but hotpath runs privileged and sets the buffer past the cap (SO_RCVBUFFORCE / SO_SNDBUFFORCE)");
            f.fix = None;
        }
        out.push(f);
    }
}

/// Workers against CPUs.
fn worker_count(s: &ServerConfig, workers: usize, host: &Host) -> Finding {
    let (status, why, fix) = if workers > host.cpus {
        (
            Status::Warn,
            format!("{workers} workers on {} CPUs: workers take turns on a core, and every request waits for its turn", host.cpus),
            Some(format!("workers = {} (or 0 = one per CPU) in [server]", host.cpus)),
        )
    } else if workers < host.cpus {
        (Status::Note, format!("{workers} workers on {} CPUs: the other CPUs are left to the database and the rest of the host", host.cpus), None)
    } else {
        (Status::Ok, format!("one worker per CPU ({}): no worker waits for a core, and none needs the thundering-herd tuning of a process pool (each has its own SO_REUSEPORT socket)", host.cpus), None)
    };
    Finding {
        setting: "server.workers".into(),
        value: if s.workers == 0 {
            format!("0 (= {workers})")
        } else {
            workers.to_string()
        },
        status,
        why,
        fix,
    }
}

/// The worst status among the findings.
pub fn worst(findings: &[Finding]) -> Status {
    findings
        .iter()
        .map(|f| f.status)
        .max()
        .unwrap_or(Status::Ok)
}

/// The findings for a terminal.
pub fn to_text(findings: &[Finding]) -> String {
    let count = |st| findings.iter().filter(|f| f.status == st).count();
    let n = |st, one: &str, many: &str| {
        let k = count(st);
        format!("{k} {}", if k == 1 { one } else { many })
    };
    let mut t = format!(
        "hotpath doctor: {} ok, {}, {}, {}\n",
        count(Status::Ok),
        n(Status::Note, "note", "notes"),
        n(Status::Warn, "warning", "warnings"),
        n(Status::Fail, "failure", "failures")
    );
    let mut sorted: Vec<&Finding> = findings.iter().collect();
    sorted.sort_by_key(|f| std::cmp::Reverse(f.status));
    for f in sorted {
        let _ = writeln!(t, "{:<4}  {} = {}", f.status.label(), f.setting, f.value);
        let _ = writeln!(t, "      {}", f.why);
        if let Some(fix) = &f.fix {
            let _ = writeln!(t, "      fix: {fix}");
        }
    }
    t
}

/// The findings as JSON.
pub fn to_json(findings: &[Finding]) -> String {
    serde_json::to_string_pretty(&serde_json::json!({
        "status": worst(findings),
        "findings": findings,
    }))
    .expect("findings serialize")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_says_one_warning_and_two_notes() {
        let f = |status| Finding {
            setting: "s".into(),
            value: "v".into(),
            status,
            why: "w".into(),
            fix: None,
        };
        let text = to_text(&[f(Status::Warn), f(Status::Note), f(Status::Note)]);
        assert!(
            text.starts_with("hotpath doctor: 0 ok, 2 notes, 1 warning, 0 failures\n"),
            "{text}"
        );
    }

    struct Tree(PathBuf);

    impl Tree {
        fn new(name: &str) -> Self {
            let p =
                std::env::temp_dir().join(format!("hotpath-doctor-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            Self(p)
        }
        fn file(&self, path: &str, text: &str) -> &Self {
            let p = self.0.join(path.trim_start_matches('/'));
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
            self
        }
        fn sysctl(&self, name: &str, value: &str) -> &Self {
            self.file(
                &format!("proc/sys/{}", name.replace('.', "/")),
                &format!("{value}\n"),
            )
        }
        fn host(&self, nofile: (u64, u64), cpus: usize) -> Host {
            Host {
                root: self.0.clone(),
                nofile: Some(nofile),
                cpus,
                privileged: false,
            }
        }
    }

    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn healthy(t: &Tree) {
        t.sysctl("net.core.somaxconn", "4096")
            .sysctl("net.ipv4.tcp_max_syn_backlog", "4096")
            .sysctl("net.ipv4.ip_local_port_range", "32768\t60999")
            .sysctl("net.ipv4.tcp_tw_reuse", "2")
            .sysctl("net.core.rmem_max", "8388608")
            .sysctl("net.core.wmem_max", "8388608");
    }

    fn find<'a>(f: &'a [Finding], setting: &str) -> &'a Finding {
        f.iter()
            .find(|x| x.setting == setting)
            .unwrap_or_else(|| panic!("no {setting} in {f:?}"))
    }

    fn config(workers: usize) -> Config {
        let mut c = Config::default();
        c.server.workers = workers;
        c
    }

    #[test]
    fn a_healthy_host_passes() {
        let t = Tree::new("healthy");
        healthy(&t);
        let f = check(&config(2), &t.host((1 << 20, 1 << 20), 2));
        assert_eq!(worst(&f), Status::Ok, "{}", to_text(&f));
        assert_eq!(
            find(&f, "net.ipv4.ip_local_port_range").value,
            "32768 60999"
        );
        assert_eq!(find(&f, "net.ipv4.tcp_tw_recycle").value, "absent");
        assert!(find(&f, "net.ipv4.tcp_tw_reuse").why.contains("outgoing"));
    }

    #[test]
    fn a_small_somaxconn_fails_with_the_fix() {
        let t = Tree::new("somaxconn");
        healthy(&t);
        t.sysctl("net.core.somaxconn", "128")
            .sysctl("net.ipv4.tcp_max_syn_backlog", "512");
        let f = check(&config(2), &t.host((1 << 20, 1 << 20), 2));
        let s = find(&f, "net.core.somaxconn");
        assert_eq!((s.status, s.value.as_str()), (Status::Fail, "128"));
        assert!(s.why.contains("server.backlog = 4096"));
        assert_eq!(
            s.fix.as_deref(),
            Some("sysctl -w net.core.somaxconn=4096, and the line `net.core.somaxconn = 4096` in /etc/sysctl.d/90-hotpath.conf to keep it")
        );
        // SYN cookies are on unless the kernel says otherwise: the clients still connect.
        assert_eq!(
            find(&f, "net.ipv4.tcp_max_syn_backlog").status,
            Status::Note
        );
        t.sysctl("net.ipv4.tcp_syncookies", "0");
        let f = check(&config(2), &t.host((1 << 20, 1 << 20), 2));
        let s = find(&f, "net.ipv4.tcp_max_syn_backlog");
        assert_eq!(s.status, Status::Warn);
        assert!(s.why.contains("dropped"), "{}", s.why);
        assert_eq!(worst(&f), Status::Fail);
    }

    #[test]
    fn tw_recycle_lines_are_named_by_file_and_line() {
        let t = Tree::new("recycle");
        healthy(&t);
        t.file("etc/sysctl.conf", "# tuned for the popup service\n#net.ipv4.tcp_tw_recycle = 1\nnet.ipv4.tcp_tw_recycle = 1\n")
            .file("etc/sysctl.d/10-net.conf", "net/ipv4/tcp_tw_recycle=1\n")
            .file("etc/sysctl.d/README", "net.ipv4.tcp_tw_recycle = 1\n");
        let f = check(&config(2), &t.host((1 << 20, 1 << 20), 2));
        let r: Vec<&Finding> = f
            .iter()
            .filter(|x| x.setting == "net.ipv4.tcp_tw_recycle")
            .collect();
        assert_eq!(r.len(), 2, "{r:?}");
        assert_eq!(
            r[0].value,
            "/etc/sysctl.d/10-net.conf:1: net/ipv4/tcp_tw_recycle=1"
        );
        assert_eq!(
            r[1].fix.as_deref(),
            Some("delete line 3 of /etc/sysctl.conf")
        );
        assert!(r
            .iter()
            .all(|x| x.status == Status::Warn && x.why.contains("4.12")));
        // An old kernel that still has it, switched on.
        t.sysctl("net.ipv4.tcp_tw_recycle", "1");
        let f = check(&config(2), &t.host((1 << 20, 1 << 20), 2));
        assert_eq!(worst(&f), Status::Fail);
    }

    #[test]
    fn open_files() {
        let t = Tree::new("nofile");
        healthy(&t);
        // 2 workers x 8192 connections + 64 + 16.
        let f = check(&config(2), &t.host((1024, 1 << 20), 2));
        let n = find(&f, "RLIMIT_NOFILE");
        assert_eq!(n.status, Status::Ok);
        assert!(n.why.contains("raises it"));
        let f = check(&config(2), &t.host((1024, 4096), 2));
        let n = find(&f, "RLIMIT_NOFILE");
        assert_eq!(
            (n.status, n.value.as_str()),
            (Status::Fail, "soft 1024, hard 4096")
        );
        assert!(n.why.contains("16464"), "{}", n.why);
        assert!(n.fix.as_deref().unwrap().contains("LimitNOFILE=16464"));
    }

    #[test]
    fn udp_buffers_and_privilege() {
        let t = Tree::new("udp");
        healthy(&t);
        t.sysctl("net.core.rmem_max", "212992");
        let mut host = t.host((1 << 20, 1 << 20), 2);
        let f = check(&config(2), &host);
        let r = find(&f, "net.core.rmem_max");
        assert_eq!(r.status, Status::Fail);
        assert!(r.why.contains("server.udp_recv_buffer = 8388608"));
        assert!(r
            .fix
            .as_deref()
            .unwrap()
            .starts_with("sysctl -w net.core.rmem_max=8388608"));
        host.privileged = true;
        assert_eq!(
            find(&check(&config(2), &host), "net.core.rmem_max").status,
            Status::Note
        );
        // Without UDP listeners the buffers do not matter.
        let mut c = config(2);
        c.listen.udp.clear();
        assert!(!check(&c, &t.host((1 << 20, 1 << 20), 2))
            .iter()
            .any(|x| x.setting == "net.core.rmem_max"));
    }

    #[test]
    fn workers_vs_cpus_and_unreadable_values() {
        let t = Tree::new("workers");
        t.sysctl("net.ipv4.ip_local_port_range", "40000 41000");
        let f = check(&config(8), &t.host((1 << 20, 1 << 20), 2));
        let w = find(&f, "server.workers");
        assert_eq!(w.status, Status::Warn);
        assert!(w.fix.as_deref().unwrap().contains("workers = 2"));
        assert_eq!(find(&f, "net.core.somaxconn").value, "unknown");
        assert_eq!(
            find(&f, "net.ipv4.ip_local_port_range").status,
            Status::Warn
        );
        let f = check(&config(1), &t.host((1 << 20, 1 << 20), 2));
        assert_eq!(find(&f, "server.workers").status, Status::Note);
        let json: serde_json::Value = serde_json::from_str(&to_json(&f)).unwrap();
        assert_eq!(json["status"], "warn");
        assert!(json["findings"]
            .as_array()
            .unwrap()
            .iter()
            .all(|x| x["setting"].is_string() && x["why"].is_string()));
        assert!(to_text(&f).starts_with("hotpath doctor: "));
    }
}
