//! The operations kit under contrib/, checked with the tools that will read it: the systemd unit
//! with `systemd-analyze verify`, the Prometheus config and alert rules with `promtool` (syntax,
//! and the rules' own unit tests), the Grafana dashboard's queries parsed by promtool too, every
//! metric any of them names found in a running server's /metrics, and the sysctl file passing
//! every kernel check of `hotpath doctor`; and the Debian package scripts/deb builds from them,
//! listed, unpacked into a scratch root, its unit verified, and checked by lintian. scripts/test
//! installs promtool (Debian's prometheus package, without starting it), systemd-analyze,
//! dpkg-dev and lintian when they are missing.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{start, test_config, Client};
use hotpath_config::TrackerMode;

fn contrib() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../contrib")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(contrib().join(rel)).unwrap_or_else(|e| panic!("contrib/{rel}: {e}"))
}

/// Runs `cmd`; panics with its output unless it succeeds; returns stdout and stderr.
fn run(cmd: &mut Command) -> (String, String) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?} runs (scripts/test installs it): {e}"));
    let (o, e) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "{cmd:?}: {}\n{o}\n{e}", out.status);
    (o, e)
}

#[test]
fn the_systemd_unit_verifies_and_reloads_with_sighup() {
    let unit = read("systemd/hotpath.service");
    for line in [
        "ExecReload=/bin/kill -HUP $MAINPID",
        "KillSignal=SIGTERM",
        "LimitNOFILE=",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "StateDirectory=hotpath",
        "Type=notify",
        "NotifyAccess=all",
    ] {
        assert!(unit.contains(line), "the unit has {line}");
    }
    let ours = systemd_verify(
        &unit,
        "/usr/local/bin/hotpath",
        env!("CARGO_BIN_EXE_hotpath"),
        None,
    );
    assert!(ours.is_empty(), "systemd-analyze verify: {ours:#?}");

    // And the check is real: a misspelt key in the same unit is reported.
    let ours = systemd_verify(
        &unit.replace("ProtectHome=yes", "ProtectHomes=yes"),
        "/usr/local/bin/hotpath",
        env!("CARGO_BIN_EXE_hotpath"),
        None,
    );
    assert!(ours.iter().any(|l| l.contains("ProtectHomes")), "{ours:#?}");
}

/// What `systemd-analyze verify` says of `unit` (the lines naming it), with its programs at
/// `installed` found at `binary` instead: it checks that they exist, and that `man` finds the
/// pages its `Documentation=` names (in `man_path` when given).
fn systemd_verify(
    unit: &str,
    installed: &str,
    binary: &str,
    man_path: Option<&Path>,
) -> Vec<String> {
    let dir = common::data_dir();
    let file = dir.join("hotpath.service");
    std::fs::write(&file, unit.replace(installed, binary)).unwrap();
    let mut cmd = Command::new("systemd-analyze");
    if let Some(p) = man_path {
        cmd.env("MANPATH", p);
    }
    let (_, err) = run(cmd.arg("verify").arg(&file));
    let _ = std::fs::remove_dir_all(&dir);
    // It exits 0 on unknown keys and bad values too, and says so on stderr.
    err.lines()
        .filter(|l| l.contains("hotpath.service"))
        .map(str::to_string)
        .collect()
}

#[test]
fn the_debian_package_has_every_part_installs_into_a_scratch_root_and_passes_lintian() {
    let dir = common::data_dir();
    let binary = env!("CARGO_BIN_EXE_hotpath");
    // The test's own build, packaged as scripts/deb packages the release build.
    let (out, _) = run(Command::new(contrib().join("../scripts/deb"))
        .args(["--binary", binary, "--out"])
        .arg(&dir));
    let deb = PathBuf::from(out.trim());
    let name = deb.file_name().unwrap().to_str().unwrap().to_string();
    assert!(
        name.starts_with(&format!("hotpath_{}-1_", env!("CARGO_PKG_VERSION")))
            && name.ends_with(".deb"),
        "{name}"
    );

    // Its contents, as dpkg-deb lists them.
    let (list, _) = run(Command::new("dpkg-deb").arg("-c").arg(&deb));
    for path in [
        "./usr/bin/hotpath",
        "./lib/systemd/system/hotpath.service",
        "./etc/hotpath/hotpath.toml",
        "./usr/lib/sysctl.d/90-hotpath.conf",
        "./usr/share/doc/hotpath/copyright",
        "./usr/share/doc/hotpath/changelog.Debian.gz",
        "./usr/share/doc/hotpath/README.md.gz",
        "./usr/share/man/man1/hotpath.1.gz",
    ] {
        assert!(
            list.lines().any(|l| l.ends_with(&format!(" {path}"))),
            "{path} in\n{list}"
        );
    }
    assert!(
        list.lines()
            .any(|l| l.starts_with("-rwxr-xr-x root/root") && l.ends_with(" ./usr/bin/hotpath")),
        "{list}"
    );
    let field = |f: &str| run(Command::new("dpkg-deb").arg("-f").arg(&deb).arg(f)).0;
    let depends = field("Depends");
    for dep in ["libc6 (>= ", "adduser"] {
        assert!(depends.contains(dep), "Depends: {depends}");
    }
    let (conffiles, _) = run(Command::new("dpkg-deb")
        .arg("-I")
        .arg(&deb)
        .arg("conffiles"));
    assert_eq!(conffiles.trim(), "/etc/hotpath/hotpath.toml");
    let (postinst, _) = run(Command::new("dpkg-deb").arg("-I").arg(&deb).arg("postinst"));
    for step in [
        "adduser --system",
        "dpkg-statoverride",
        "deb-systemd-helper enable",
    ] {
        assert!(postinst.contains(step), "postinst: {step}");
    }

    // Unpacked into a scratch root: the binary runs, takes the config it ships, which is
    // `hotpath config`'s own; the sysctl file is contrib's.
    let root = dir.join("root");
    run(Command::new("dpkg").arg("-x").arg(&deb).arg(&root));
    let bin = root.join("usr/bin/hotpath");
    let config = root.join("etc/hotpath/hotpath.toml");
    run(Command::new(&bin).args(["config", "--check"]).arg(&config));
    let (printed, _) = run(Command::new(binary).arg("config"));
    assert_eq!(std::fs::read_to_string(&config).unwrap(), printed);
    assert_eq!(
        std::fs::read_to_string(root.join("usr/lib/sysctl.d/90-hotpath.conf")).unwrap(),
        read("sysctl/90-hotpath.conf")
    );

    // The unit: contrib's, with the packaged binary and the package's system user; it
    // verifies with its programs and its manual page where the package puts them.
    let unit = std::fs::read_to_string(root.join("lib/systemd/system/hotpath.service")).unwrap();
    for line in [
        "ExecStart=/usr/bin/hotpath serve --config /etc/hotpath/hotpath.toml",
        "User=hotpath",
        "StateDirectory=hotpath",
        "ProtectSystem=strict",
        "Documentation=man:hotpath(1)",
    ] {
        assert!(
            unit.lines().any(|l| l.starts_with(line)),
            "the packaged unit has {line}:\n{unit}"
        );
    }
    assert!(
        !unit.contains("DynamicUser") && !unit.contains("/usr/local/"),
        "{unit}"
    );
    let ours = systemd_verify(
        &unit,
        "/usr/bin/hotpath",
        bin.to_str().unwrap(),
        Some(&root.join("usr/share/man")),
    );
    assert!(ours.is_empty(), "systemd-analyze verify: {ours:#?}");

    // lintian: no error and no warning (its notes at info level are not asked for).
    let out = Command::new("lintian")
        .args(["--fail-on", "error,warning"])
        .arg(&deb)
        .output()
        .expect("lintian runs (scripts/test installs it)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "lintian {}:\n{text}", out.status);
    assert!(
        !text
            .lines()
            .any(|l| l.starts_with("E:") || l.starts_with("W:")),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_prometheus_config_and_alert_rules_pass_promtool_and_their_tests() {
    let dir = contrib().join("prometheus");
    run(Command::new("promtool")
        .args(["check", "config", "prometheus.yml"])
        .current_dir(&dir));
    run(Command::new("promtool")
        .args(["check", "rules", "hotpath-alerts.yml"])
        .current_dir(&dir));
    let (out, _) = run(Command::new("promtool")
        .args(["test", "rules", "hotpath-alerts.test.yml"])
        .current_dir(&dir));
    assert!(out.contains("SUCCESS"), "{out}");
}

/// Every `hotpath_…` name in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("hotpath_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        out.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    out
}

/// The series names a server serves on /metrics, with one running in private mode too.
fn served_names() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut open = test_config();
    open.popups.enabled = true;
    let mut private = test_config();
    private.tracker.mode = TrackerMode::Private;
    for config in [open, private] {
        let server = start(&config);
        let text = String::from_utf8(
            Client::connect(server.admin_addr().unwrap())
                .get("/metrics")
                .body,
        )
        .unwrap();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            names.insert(line[..end].to_string());
        }
        server.shutdown().unwrap();
    }
    names
}

#[test]
fn the_alerts_and_the_grafana_dashboard_name_only_metrics_hotpath_serves() {
    let served = served_names();
    let alerts = read("prometheus/hotpath-alerts.yml");
    let grafana: serde_json::Value =
        serde_json::from_str(&read("grafana/hotpath.json")).expect("the dashboard is JSON");

    // Every query of the dashboard, and every panel placed once.
    let mut exprs = Vec::new();
    let mut ids = BTreeSet::new();
    for p in grafana["panels"].as_array().expect("panels") {
        assert!(ids.insert(p["id"].as_u64().expect("a panel id")), "{p}");
        assert!(p["gridPos"]["w"].as_u64().unwrap() > 0);
        for t in p["targets"].as_array().into_iter().flatten() {
            exprs.push(t["expr"].as_str().expect("a query").to_string());
        }
    }
    assert!(exprs.len() >= 10, "{exprs:?}");

    let named = metric_names(&alerts)
        .into_iter()
        .chain(exprs.iter().flat_map(|e| metric_names(e)));
    let mut missing = Vec::new();
    let mut count = 0;
    for name in named {
        count += 1;
        if !served.contains(&name) {
            missing.push(name);
        }
    }
    assert!(count >= 20, "{count} names");
    assert!(missing.is_empty(), "not in /metrics: {missing:?}");

    // The dashboard's queries are PromQL that promtool parses, with Grafana's variables set as
    // Grafana would set them.
    let dir = common::data_dir();
    let mut rules = String::from("groups:\n  - name: grafana\n    rules:\n");
    for (i, e) in exprs.iter().enumerate() {
        let e = e
            .replace("$__rate_interval", "1m")
            .replace("$instance", ".*");
        rules.push_str(&format!(
            "      - record: grafana:q{i}\n        expr: {}\n",
            serde_json::Value::String(e)
        ));
    }
    std::fs::write(dir.join("grafana.yml"), rules).unwrap();
    run(Command::new("promtool")
        .args(["check", "rules", "grafana.yml"])
        .current_dir(&dir));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_sysctl_file_passes_every_kernel_check_of_doctor() {
    let text = read("sysctl/90-hotpath.conf");
    let root = common::data_dir();
    let mut keys = 0;
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let (key, value) = line.split_once('=').expect("key = value");
        let (key, value) = (key.trim(), value.trim());
        let rel = format!("proc/sys/{}", key.replace('.', "/"));
        // A real key of this kernel, not a misspelling.
        assert!(
            Path::new("/").join(&rel).exists(),
            "{key} is not a sysctl here"
        );
        let path = root.join(&rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, format!("{value}\n")).unwrap();
        keys += 1;
    }
    assert!(keys >= 5);
    let etc = root.join("etc/sysctl.d");
    std::fs::create_dir_all(&etc).unwrap();
    std::fs::write(etc.join("90-hotpath.conf"), &text).unwrap();
    // tcp_tw_reuse is left at the kernel's default.
    std::fs::write(root.join("proc/sys/net/ipv4/tcp_tw_reuse"), "2\n").unwrap();

    let host = hotpath_doctor::Host {
        root: root.clone(),
        nofile: Some((1 << 20, 1 << 20)),
        cpus: 2,
        privileged: false,
    };
    let findings = hotpath_doctor::check(&hotpath_config::Config::default(), &host);
    let kernel: Vec<_> = findings
        .iter()
        .filter(|f| f.setting.starts_with("net."))
        .collect();
    assert!(kernel.len() >= 6, "{findings:#?}");
    for f in kernel {
        assert_eq!(f.status, hotpath_doctor::Status::Ok, "{f:#?}");
    }
    let _ = std::fs::remove_dir_all(&root);
}

/// The cluster's balancer files as their tools read them: HAProxy's checker, and nft's on a
/// namespace of the test's own (loaded, then its table listed back).
#[test]
fn the_cluster_balancer_files_pass_haproxy_and_nft() {
    let cfg = contrib().join("cluster/haproxy.cfg");
    let (out, err) = run(Command::new("haproxy").arg("-c").arg("-f").arg(&cfg));
    assert!(
        format!("{out}{err}").contains("Configuration file is valid"),
        "{out}{err}"
    );
    let haproxy = read("cluster/haproxy.cfg");
    for line in [
        "send-proxy-v2",
        "check-send-proxy",
        "httpchk GET /healthz",
        "hash-type consistent",
    ] {
        assert!(haproxy.contains(line), "haproxy.cfg has {line}");
    }
    let ns = format!("hpct{}", std::process::id());
    run(Command::new("ip").args(["netns", "add", &ns]));
    let rules = contrib().join("cluster/udp-balance.nft");
    let loaded = Command::new("ip")
        .args(["netns", "exec", &ns, "nft", "-f"])
        .arg(&rules)
        .output()
        .expect("nft runs (scripts/test installs nftables)");
    let listed = Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns,
            "nft",
            "list",
            "chain",
            "ip",
            "hotpath_udp",
            "postrouting",
        ])
        .output()
        .unwrap();
    let _ = Command::new("ip").args(["netns", "del", &ns]).status();
    assert!(
        loaded.status.success(),
        "{}",
        String::from_utf8_lossy(&loaded.stderr)
    );
    let text = String::from_utf8_lossy(&listed.stdout);
    assert!(text.contains("ip saddr set 10.0.0.10"), "{text}");
    // The health checker that keeps the map on live nodes parses, and names the map the rules
    // define.
    run(Command::new("bash")
        .arg("-n")
        .arg(contrib().join("cluster/udp-health")));
    assert!(read("cluster/udp-health").contains("ip hotpath_udp node_of"));
}
