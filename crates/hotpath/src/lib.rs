//! Wiring for the `hotpath` binary: load the config, build the services, run the server.
//! Kept out of `main.rs` so the integration tests drive exactly what the binary does.

pub mod logging;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use clap::{Parser, Subcommand};

use hotpath_config::{Config, ConfigErrors};
use hotpath_lua::LuaService;
use hotpath_popups::Popups;
use hotpath_server::RunningServer;
use hotpath_service::{Background, Component, Composite, Service};
use hotpath_tracker::Tracker;

/// The command line: the one definition both the binary and the tests parse.
#[derive(Parser, Debug)]
#[command(
    name = "hotpath",
    version,
    about,
    after_help = "Start here: `hotpath serve` runs the tracker on http://0.0.0.0:6969/announce and \
udp://0.0.0.0:6969 with every setting at its default, keeping its state in ./data; the live \
dashboard is at http://127.0.0.1:9090/, /metrics and /stats beside it. `hotpath config > \
hotpath.toml` writes every setting with a comment (popups.enabled, [[lua.routes]], the \
database in store.url); `hotpath serve --config hotpath.toml` runs it."
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
    /// The least severe log messages written ("error", "warn", "info", "debug", "trace"),
    /// optionally per module ("info,hotpath_store=debug"); wins over RUST_LOG and log.level.
    #[arg(long, global = true, value_name = "LEVEL", value_parser = log_level)]
    pub log_level: Option<String>,
}

fn log_level(s: &str) -> Result<String, String> {
    hotpath_config::check_log_level(s).map(|()| s.to_string())
}

/// What the binary was asked to do.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the server: the BitTorrent tracker (HTTP and UDP), popups and Lua routes as the
    /// config enables them, the admin endpoints, and the write-behind store.
    Serve {
        /// A TOML config file; without it every setting takes its default.
        #[arg(long, short, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Print the full default configuration as commented TOML, or check a file.
    Config {
        /// Check this file instead, as `serve` would before starting anything: keys, values,
        /// the Lua scripts it names (compiled) and its access list. Every error is printed,
        /// with the file, line and column; exit status 1 when there is one.
        #[arg(long, value_name = "FILE")]
        check: Option<PathBuf>,
    },
    /// Load-test a server: HTTP/1.1 or the BEP 15 UDP tracker mix, closed loop or a fixed
    /// rate, with latency percentiles, errors by class and objectives (exit status 2 when
    /// one is missed, 3 when nothing was answered or errors passed --max-errors).
    Bench(Box<hotpath_bench::Args>),
    /// Check this host's kernel and process limits against the configuration (exit status 1
    /// when one would break a configured limit).
    Doctor {
        /// The config file to check against; the defaults without it.
        #[arg(long, short, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Print the findings as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Database commands: `migrate` applies pending schema migrations; `status` lists them
    /// (exit status 1 when some are pending) and shows the journal; `refused` lists or
    /// replays the rows the database refused.
    Db {
        /// What to do.
        #[command(subcommand)]
        action: DbAction,
        /// The config file whose [store] to use; the defaults (data/hotpath.db) without it.
        #[arg(long, short, global = true, value_name = "FILE")]
        config: Option<PathBuf>,
    },
}

/// `hotpath db …`.
#[derive(Subcommand, Debug, Clone, Copy, PartialEq, Eq)]
pub enum DbAction {
    /// Apply pending schema migrations.
    Migrate,
    /// Show applied and pending migrations, the journal and refused rows; only reads.
    Status,
    /// List the rows the database refused (kept in data_dir/refused.jsonl), or write them
    /// again once their cause is fixed.
    Refused {
        /// Write them again: rows still refused go back to the file.
        #[arg(long)]
        replay: bool,
    },
}

/// Exit status of `hotpath bench` when an objective was missed.
pub const EXIT_SLO_MISSED: u8 = 2;
/// Exit status of `hotpath bench` when the run failed: no request answered without error, or
/// errors past `--max-errors`.
pub const EXIT_BENCH_FAILED: u8 = 3;
/// Exit status of `hotpath doctor` when a host limit breaks the configuration.
pub const EXIT_DOCTOR_FAIL: u8 = 1;

/// Loads the config file, or the defaults when there is none, and checks what its keys name
/// as `serve` needs it, before anything is started or written: every error at once, each
/// placed in the file.
pub fn load_config(path: Option<&PathBuf>) -> Result<Config, ConfigErrors> {
    let Some(path) = path else {
        return Ok(Config::default());
    };
    Config::load_with(path, preflight)
}

/// SIGHUP: the config file read again and checked whole, as `serve` checks it. A file with
/// an error changes nothing (the errors are logged). Otherwise what can change in place is
/// applied from the next request on (README, "Reload": server limits and timeouts, the
/// tracker's intervals, numwant, scrape and proxy settings and growth caps, private and
/// popups secrets and some of their settings, the log's level and format), and the log says
/// which changed keys were applied and which wait for a restart, their running values
/// staying until then.
fn reload_config(path: Option<&PathBuf>, running: &mut Config, server: &RunningServer) {
    let Some(path) = path else {
        return;
    };
    let new = match load_config(Some(path)) {
        Ok(c) => c,
        Err(e) => {
            log::error!(
                "SIGHUP: {} has errors, no setting changed:\n{e}",
                path.display()
            );
            return;
        }
    };
    let changed = running.changed_keys(&new);
    if changed.is_empty() {
        log::info!("SIGHUP: {}: no setting changed", path.display());
        return;
    }
    let mut applied = server.reconfigure(&new);
    for (key, differs) in [
        ("log.level", running.log.level != new.log.level),
        ("log.format", running.log.format != new.log.format),
    ] {
        if differs {
            applied.push(key);
        }
    }
    logging::configure(&new.log);
    // What the file changed, of what was applied (a service may name a key it set again).
    applied.retain(|k| changed.iter().any(|c| c == k));
    applied.sort_unstable();
    applied.dedup();
    let restart: Vec<&str> = changed
        .iter()
        .map(String::as_str)
        .filter(|k| !applied.contains(k))
        .collect();
    *running = running.with_keys_of(&new, &applied);
    let list = |keys: &[&str]| {
        if keys.is_empty() {
            "none".to_string()
        } else {
            keys.join(", ")
        }
    };
    log::info!(
        "SIGHUP: {}: applied: {}; need a restart (their running values stay until then): {}",
        path.display(),
        list(&applied),
        list(&restart)
    );
}

/// What the config names that would stop a start: Lua scripts that cannot be read or do not
/// compile (or define no `handle`), a module directory that is not one, an access list that
/// cannot be read or parsed. Each as (key, what is wrong). Nothing is started or written.
fn preflight(config: &Config) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let dir = &config.lua.module_dir;
    if !dir.is_empty() && !std::path::Path::new(dir).is_dir() {
        out.push(("lua.module_dir".into(), format!("{dir}: not a directory")));
    }
    for (i, e) in LuaService::check(&config.lua) {
        out.push((format!("lua.routes[{i}].script"), e.to_string()));
    }
    if let hotpath_config::AccessLog::File(file) = config.log.access_target(&config.server) {
        let dir = file.parent().filter(|d| !d.as_os_str().is_empty());
        if dir.is_some_and(|d| !d.is_dir()) {
            out.push((
                "log.access_log".into(),
                format!("{}: no such directory", dir.unwrap().display()),
            ));
        } else if file.is_dir() {
            out.push((
                "log.access_log".into(),
                format!("{}: a directory", file.display()),
            ));
        }
    }
    let list = &config.access_list;
    if list.mode != hotpath_config::AccessListMode::Off && !list.path.is_empty() {
        if let Err(e) = hotpath_tracker::access::AccessList::load(list.mode, &list.path) {
            out.push(("access_list.path".into(), e.to_string()));
        }
    }
    let cluster = &config.cluster;
    if cluster.enabled && !cluster.secret_file.is_empty() {
        if let Err(e) = hotpath_cluster::Keys::load(cluster) {
            out.push(("cluster.secret_file".into(), e.to_string()));
        }
    }
    let tls = &config.tls;
    if !config.listen.https.is_empty() && !tls.cert_file.is_empty() && !tls.key_file.is_empty() {
        // The pair as serve loads it: readable, PEM, a key that matches the certificate.
        if let Err(e) = hotpath_server::tls::Tls::new(tls) {
            let key = match &e {
                hotpath_server::tls::TlsError::File { key, .. } => *key,
                hotpath_server::tls::TlsError::Pair(_) => "tls.key_file",
            };
            out.push((key.into(), e.to_string()));
        }
    }
    out
}

/// `hotpath doctor`'s word on the HTTPS listeners' certificate and key, when there are any.
fn tls_finding(config: &Config) -> Option<hotpath_doctor::Finding> {
    if config.listen.https.is_empty() {
        return None;
    }
    let tls = &config.tls;
    let loaded = hotpath_server::tls::load_pair(tls)
        .map_err(|e| e.to_string())
        .and_then(|(chain, _)| {
            hotpath_server::tls::Tls::new(tls)
                .map(|_| chain.len())
                .map_err(|e| e.to_string())
        });
    let value = format!("{} and {}", tls.cert_file, tls.key_file);
    Some(match loaded {
        Ok(n) => hotpath_doctor::Finding {
            setting: "tls.cert_file".into(),
            value,
            status: hotpath_doctor::Status::Ok,
            why: format!(
                "a chain of {n} certificate(s) and its key load and match; SIGHUP reads them \
                 again (a renewal needs no restart)"
            ),
            fix: None,
        },
        Err(e) => hotpath_doctor::Finding {
            setting: "tls.cert_file".into(),
            value,
            status: hotpath_doctor::Status::Fail,
            why: e,
            fix: Some(
                "point tls.cert_file and tls.key_file at a PEM chain (leaf first) and its key, \
                 e.g. a certificate authority's fullchain.pem and privkey.pem"
                    .into(),
            ),
        },
    })
}

/// An error and its causes on one line, each said once: a cause whose text the line holds
/// already (an error that shows its source in its own message) is left out.
pub fn error_text(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let part = cause.to_string();
        if text.contains(part.as_str()) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    text
}

/// Runs a command to completion; returns the process's exit status.
pub fn run(command: Command) -> anyhow::Result<u8> {
    match command {
        Command::Config { check: None } => {
            print!("{}", Config::default_toml());
            Ok(0)
        }
        Command::Config { check: Some(path) } => {
            let config = match load_config(Some(&path)) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("{e}");
                    return Ok(1);
                }
            };
            let mut notes = vec![format!(
                "{}: ok (data in {}",
                path.display(),
                config.store.data_dir
            )];
            if !config.lua.routes.is_empty() {
                notes.push(format!(", {} Lua routes compiled", config.lua.routes.len()));
            }
            println!("{})", notes.concat());
            Ok(0)
        }
        Command::Serve { config: path } => {
            // Started by a running hotpath to take over its sockets (SIGUSR2): said once the
            // config is read, and served once that process has stopped.
            let mut handshake = hotpath_server::upgrade::Handshake::from_env()
                .context("the upgrade's handshake")?;
            // SIGUSR2 starts this binary again from the path it was started from (where a
            // package upgrade puts the new version), with the same arguments.
            let successor = std::env::current_exe()
                .ok()
                .map(|exe| (exe, std::env::args_os().skip(1).collect::<Vec<_>>()));
            let config = match load_config(path.as_ref()) {
                Ok(c) => c,
                Err(e) => {
                    if let Some(h) = handshake.as_mut() {
                        h.failed(&e.to_string());
                    }
                    return Err(e.into());
                }
            };
            logging::configure(&config.log);
            let inherited = match hotpath_server::upgrade::Inherited::from_env() {
                Ok(i) => i,
                Err(e) => {
                    if let Some(h) = handshake.as_mut() {
                        h.failed(&e.to_string());
                    }
                    return Err(anyhow::Error::from(e).context("the sockets handed over"));
                }
            };
            if let Some(mut h) = handshake {
                // systemd follows this process from now on: the old one's exit is not the
                // service's.
                hotpath_server::upgrade::notify_systemd(&format!("MAINPID={}", std::process::id()));
                h.ready().context("the upgrade's handshake")?;
                log::info!("upgrade: ready; waiting for the running hotpath to stop");
                h.wait_for_exit();
                log::info!("upgrade: it stopped; taking over its sockets");
            }
            // The host checks of `hotpath doctor`, as warnings.
            for f in hotpath_doctor::check(&config, &hotpath_doctor::Host::local()) {
                if f.status >= hotpath_doctor::Status::Warn {
                    let fix = f.fix.map(|x| format!(" Fix: {x}")).unwrap_or_default();
                    log::warn!("{} = {}: {}.{fix}", f.setting, f.value, f.why);
                }
            }
            let (tracker, service) = services(&config)?;
            let mut running = config.clone();
            let ended = hotpath_server::run(
                &config,
                service,
                hotpath_server::RunOptions {
                    inherited,
                    successor,
                    on_hup: &mut |server| reload_config(path.as_ref(), &mut running, server),
                },
            )
            .context("server")?;
            tracker.save();
            log::info!("stopped");
            // An upgrade's successor starts once this process has exited: the pair's end it
            // holds closes then, with the store's locks.
            std::mem::forget(ended);
            Ok(0)
        }
        Command::Bench(args) => match hotpath_bench::command(&args)? {
            hotpath_bench::Exit::Met => Ok(0),
            hotpath_bench::Exit::Missed => Ok(EXIT_SLO_MISSED),
            hotpath_bench::Exit::Failed => Ok(EXIT_BENCH_FAILED),
        },
        Command::Db { config, action } => {
            let config = load_config(config.as_ref())?;
            logging::configure(&config.log);
            db(&config, action)
        }
        Command::Doctor { config, json } => {
            let config = load_config(config.as_ref())?;
            let mut findings = hotpath_doctor::check(&config, &hotpath_doctor::Host::local());
            findings.extend(tls_finding(&config));
            if json {
                println!("{}", hotpath_doctor::to_json(&findings));
            } else {
                print!("{}", hotpath_doctor::to_text(&findings));
            }
            Ok(
                if hotpath_doctor::worst(&findings) == hotpath_doctor::Status::Fail {
                    EXIT_DOCTOR_FAIL
                } else {
                    0
                },
            )
        }
    }
}

/// Starts the server in this process (for tests and benchmarks) and returns its handle.
pub fn start(config: &Config) -> anyhow::Result<RunningServer> {
    let (_, service) = services(config)?;
    Ok(RunningServer::start(config, service)?)
}

/// Every service that writes through the store, as the store knows it: the binary's wiring
/// (a new service adds itself here, and nowhere in the store). Private mode writes hotpath's
/// own tables here; [`stored`] gives the list for a config.
pub static STORED: [&hotpath_store::Service; 4] = [
    &hotpath_tracker::stored::TRACKER,
    &hotpath_tracker::private::stored::PRIVATE,
    &hotpath_popups::stored::POPUPS,
    &hotpath_lua::stored::LUA,
];

/// [`STORED`] with private mode writing the tables of `config`'s schema preset (a site's
/// own, for XBT's and TorrentPier's).
pub fn stored(config: &Config) -> Vec<&'static hotpath_store::Service> {
    let mut all = STORED.to_vec();
    all[1] = hotpath_tracker::private::stored::service(&config.private);
    all
}

/// The services the config asks for, on one store when `store.enabled` (connected, migrated,
/// journal replayed): the tracker always, the popup service when `popups.enabled`. Returns
/// the tracker too (its swarms are saved after the server stops).
fn services(config: &Config) -> anyhow::Result<(Arc<Tracker>, Arc<dyn Service>)> {
    let store = if config.store.enabled {
        // In cluster mode each node takes its own writer lock and journal numbers, so the
        // nodes write into one database.
        let node = if config.cluster.enabled {
            config.cluster.node_id
        } else {
            0
        };
        let (store, _) = hotpath_store::Store::open_for_node(&config.store, &stored(config), node)
            .context("store")?;
        log::info!("store: {}", store.name);
        Some(Arc::new(store))
    } else {
        log::info!("store disabled: nothing is kept across restarts");
        None
    };
    let node_keys = if config.cluster.enabled {
        Some(hotpath_cluster::Keys::load(&config.cluster).context("cluster")?)
    } else {
        None
    };
    let tracker = Arc::new(
        match &node_keys {
            Some(keys) => Tracker::for_node(config, store.clone(), keys.connection),
            None => Tracker::with_store(config, store.clone()),
        }
        .context("tracker")?,
    );
    // The tracker first (it answers UDP), then the popup service, then the Lua routes: a
    // path the tracker or the popups serve is theirs.
    let mut all: Vec<Arc<dyn Service>> = vec![tracker.clone()];
    if let (Some(store), true) = (store.clone(), config.popups.enabled) {
        let popups =
            Popups::new(&config.popups, &config.store.data_dir, store).context("popups")?;
        all.push(Arc::new(popups));
    }
    if !config.lua.routes.is_empty() {
        let lua = LuaService::new(&config.lua, store.clone()).context("lua")?;
        log::info!("lua: {} routes", config.lua.routes.len());
        all.push(Arc::new(lua));
    }
    let node = match node_keys {
        Some(keys) => {
            let node = hotpath_cluster::Node::new(&config.cluster, keys, tracker.shared().clone())
                .context("cluster")?;
            log::info!(
                "cluster: node {} of the swarms exchanged through Redis Cluster at {}",
                config.cluster.node_id,
                config.cluster.redis.join(", ")
            );
            Some(Arc::new(hotpath_cluster::NodeComponent(Arc::new(node))))
        }
        None => None,
    };
    if store.is_none() && node.is_none() && all.len() == 1 {
        return Ok((tracker.clone(), tracker));
    }
    let mut composite = Composite::new(all);
    if let Some(store) = store {
        composite = composite.with_component(Arc::new(StoreComponent(store)));
    }
    if let Some(node) = node {
        composite = composite.with_component(node);
    }
    Ok((tracker, Arc::new(composite)))
}

/// The write-behind store every service shares, run beside them: its flusher (with the
/// journal's syncer), its `hotpath_store_*` metrics and its `/stats` section.
struct StoreComponent(Arc<hotpath_store::Store>);

impl Component for StoreComponent {
    fn collect(&self, out: &mut hotpath_service::Samples) {
        self.0.collect(out);
    }

    fn background(&self) -> Vec<Background> {
        let db = self.0.clone();
        // Bulk work under no lock a worker waits on for long: it may yield to the workers.
        vec![Background::new("store-flusher", move |stop| db.run_flusher(&stop)).low_priority()]
    }
}

/// `hotpath db migrate|status`.
fn db(config: &Config, action: DbAction) -> anyhow::Result<u8> {
    use hotpath_store::{backend, migrations};
    let cfg = &config.store;
    let name = backend::display_name(&cfg.url, &cfg.data_dir);
    let mut b =
        backend::connect(&cfg.url, std::path::Path::new(&cfg.data_dir)).context("store.url")?;
    match action {
        DbAction::Migrate => {
            let applied =
                migrations::migrate(&mut *b, &stored(config)).with_context(|| name.clone())?;
            if applied.is_empty() {
                println!(
                    "{name}: schema is current (version {})",
                    migrations::latest()
                );
            } else {
                for m in applied {
                    println!("{name}: applied {} ({})", migration_label(&m), m.name);
                }
            }
            Ok(0)
        }
        DbAction::Refused { replay } => refused(&mut *b, &name, config, replay),
        DbAction::Status => {
            if let Some(file) = backend::sqlite_file(&cfg.url, std::path::Path::new(&cfg.data_dir))
            {
                if !file.exists() {
                    println!(
                        "{name}: no database yet (`hotpath serve` or `hotpath db migrate` creates it)"
                    );
                    let known = migrations::known(&stored(config));
                    let w = known.iter().map(|m| m.name.len()).max().unwrap_or(0);
                    for m in known {
                        println!("  {:>9}  {:<w$}  PENDING", migration_label(&m), m.name);
                    }
                    return Ok(1);
                }
            }
            let status =
                migrations::status(&mut *b, &stored(config)).with_context(|| name.clone())?;
            println!("{name}");
            let mut pending = 0;
            // One column per field, as wide as its longest entry.
            let w = status.iter().map(|s| s.name.len()).max().unwrap_or(0);
            for s in &status {
                match s.applied_at {
                    Some(at) => println!(
                        "  {:>9}  {:<w$}  applied {}",
                        migration_label(s),
                        s.name,
                        utc(at)
                    ),
                    None => {
                        pending += 1;
                        println!("  {:>9}  {:<w$}  PENDING", migration_label(s), s.name);
                    }
                }
            }
            if pending == 0 {
                let mut positions = b.journal_positions().with_context(|| name.clone())?;
                positions.sort_unstable();
                let list: Vec<String> =
                    positions.iter().map(|(w, s)| format!("w{w}={s}")).collect();
                println!(
                    "  journal positions held by the database: {}",
                    if list.is_empty() {
                        "none".into()
                    } else {
                        list.join(" ")
                    }
                );
            }
            let dir = hotpath_store::journal_dir(&cfg.data_dir);
            let files = hotpath_store::journal::list_segments(&dir).unwrap_or_default();
            let bytes: u64 = files
                .iter()
                .filter_map(|(_, _, p)| std::fs::metadata(p).ok())
                .map(|m| m.len())
                .sum();
            println!(
                "  journal {}: {} files, {bytes} bytes",
                dir.display(),
                files.len()
            );
            let file = hotpath_store::refused::path(std::path::Path::new(&cfg.data_dir));
            let (entries, _) = hotpath_store::refused::read(&file).unwrap_or_default();
            println!(
                "  refused rows {}: {} (`hotpath db refused` lists them)",
                file.display(),
                entries.len()
            );
            // Pending migrations make `hotpath serve` with store.migrate = false refuse to start.
            Ok(u8::from(pending > 0))
        }
    }
}

/// Unix second `t` as a UTC date and time, `2026-11-25 03:04:05 UTC`.
fn utc(t: i64) -> String {
    format!("{} UTC", hotpath_wire::http::civil_time(t))
}

/// A migration as `db status` and `db migrate` name it: the store's by number, a service's
/// as `service/number`.
fn migration_label(m: &hotpath_store::migrations::MigrationState) -> String {
    if m.owner == hotpath_store::migrations::STORE {
        m.version.to_string()
    } else {
        format!("{}/{}", m.owner, m.version)
    }
}

/// `hotpath db refused [--replay]`.
fn refused(
    b: &mut dyn hotpath_store::Backend,
    name: &str,
    config: &Config,
    replay: bool,
) -> anyhow::Result<u8> {
    use hotpath_store::refused;
    let cfg = &config.store;
    let dir = std::path::Path::new(&cfg.data_dir);
    let file = refused::path(dir);
    if replay {
        let tables = hotpath_store::queue::tables(&stored(config));
        let r = refused::replay(b, &tables, dir, name).with_context(|| name.to_string())?;
        println!(
            "{}: {} entries ({} copies dropped), {} rows written, {} refused again{}",
            file.display(),
            r.entries,
            r.copies,
            r.written,
            r.refused,
            if r.bad_lines > 0 {
                format!(
                    "; {} unreadable lines kept in refused.bad-lines.jsonl",
                    r.bad_lines
                )
            } else {
                String::new()
            }
        );
        return Ok(u8::from(r.refused > 0));
    }
    let (entries, bad) = refused::read(&file).with_context(|| file.display().to_string())?;
    println!("{}: {} refused rows", file.display(), entries.len());
    for e in &entries {
        println!("  line {}: {} {}\n    {}", e.line, e.table, e.row, e.error);
    }
    for (n, why) in &bad {
        println!("  line {n}: unreadable: {why}");
    }
    Ok(u8::from(!entries.is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory as _;

    #[test]
    fn unix_seconds_read_as_utc_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(1_795_485_296), "2026-11-24 01:54:56 UTC");
        assert_eq!(utc(-1), "1969-12-31 23:59:59 UTC");
        assert_eq!(utc(4_102_444_799), "2099-12-31 23:59:59 UTC");
    }

    #[test]
    fn the_command_line_is_well_formed_and_parses_what_the_readme_shows() {
        Cli::command().debug_assert();
        let parse = |args: &[&str]| Cli::try_parse_from(args).map(|c| c.command);
        assert!(matches!(
            parse(&["hotpath", "serve", "-c", "x.toml"]),
            Ok(Command::Serve { config: Some(_) })
        ));
        assert!(matches!(
            parse(&["hotpath", "config", "--check", "x.toml"]),
            Ok(Command::Config { check: Some(_) })
        ));
        assert!(matches!(
            parse(&["hotpath", "db", "refused", "--replay", "--config", "x.toml"]),
            Ok(Command::Db {
                action: DbAction::Refused { replay: true },
                config: Some(_)
            })
        ));
        let e = parse(&["hotpath", "serve", "--bogus"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--bogus"), "{e}");
    }
}
