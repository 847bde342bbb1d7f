//! Wiring for the `hotpath` binary: load the config, build the services, run the server.
//! Kept out of `main.rs` so the integration tests drive exactly what the binary does.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;

use hotpath_config::Config;
use hotpath_server::RunningServer;
use hotpath_tracker::Tracker;

/// What the binary was asked to do.
pub enum Command {
    /// Run the server.
    Serve {
        /// The config file, if any.
        config: Option<PathBuf>,
    },
    /// Print the defaults, or check a file.
    Config {
        /// The file to check.
        check: Option<PathBuf>,
    },
    /// Run the load generator.
    Bench(Box<hotpath_bench::Args>),
    /// Check the host against the configuration.
    Doctor {
        /// The config file, if any.
        config: Option<PathBuf>,
        /// Print JSON.
        json: bool,
    },
}

/// Exit status of `hotpath bench` when an objective was missed.
pub const EXIT_SLO_MISSED: u8 = 2;
/// Exit status of `hotpath doctor` when a host limit breaks the configuration.
pub const EXIT_DOCTOR_FAIL: u8 = 1;

/// Loads the config file, or the defaults when there is none.
pub fn load_config(path: Option<&PathBuf>) -> anyhow::Result<Config> {
    match path {
        Some(p) => Config::load(p).with_context(|| format!("config file {}", p.display())),
        None => Ok(Config::default()),
    }
}

/// Runs a command to completion; returns the process's exit status.
pub fn run(command: Command) -> anyhow::Result<u8> {
    match command {
        Command::Config { check: None } => {
            print!("{}", Config::default_toml());
            Ok(0)
        }
        Command::Config { check: Some(path) } => {
            load_config(Some(&path))?;
            println!("{}: ok", path.display());
            Ok(0)
        }
        Command::Serve { config } => {
            let config = load_config(config.as_ref())?;
            // The host checks of `hotpath doctor`, as warnings.
            for f in hotpath_doctor::check(&config, &hotpath_doctor::Host::local()) {
                if f.status >= hotpath_doctor::Status::Warn {
                    let fix = f.fix.map(|x| format!(" Fix: {x}")).unwrap_or_default();
                    log::warn!("{} = {}: {}.{fix}", f.setting, f.value, f.why);
                }
            }
            let tracker = Tracker::new(&config).map_err(anyhow::Error::msg)?;
            hotpath_server::run(&config, Arc::new(tracker)).context("server")?;
            log::info!("stopped");
            Ok(0)
        }
        Command::Bench(args) => match hotpath_bench::command(&args)? {
            hotpath_bench::Exit::Met => Ok(0),
            hotpath_bench::Exit::Missed => Ok(EXIT_SLO_MISSED),
        },
        Command::Doctor { config, json } => {
            let config = load_config(config.as_ref())?;
            let findings = hotpath_doctor::check(&config, &hotpath_doctor::Host::local());
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
    let tracker = Tracker::new(config).map_err(anyhow::Error::msg)?;
    Ok(RunningServer::start(config, Arc::new(tracker))?)
}
