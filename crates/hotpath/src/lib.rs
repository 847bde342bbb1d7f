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
}

/// Loads the config file, or the defaults when there is none.
pub fn load_config(path: Option<&PathBuf>) -> anyhow::Result<Config> {
    match path {
        Some(p) => Config::load(p).with_context(|| format!("config file {}", p.display())),
        None => Ok(Config::default()),
    }
}

/// Runs a command to completion.
pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Config { check: None } => {
            print!("{}", Config::default_toml());
            Ok(())
        }
        Command::Config { check: Some(path) } => {
            load_config(Some(&path))?;
            println!("{}: ok", path.display());
            Ok(())
        }
        Command::Serve { config } => {
            let config = load_config(config.as_ref())?;
            let tracker = Tracker::new(&config).map_err(anyhow::Error::msg)?;
            hotpath_server::run(&config, Arc::new(tracker)).context("server")?;
            log::info!("stopped");
            Ok(())
        }
    }
}

/// Starts the server in this process (for tests and benchmarks) and returns its handle.
pub fn start(config: &Config) -> anyhow::Result<RunningServer> {
    let tracker = Tracker::new(config).map_err(anyhow::Error::msg)?;
    Ok(RunningServer::start(config, Arc::new(tracker))?)
}
