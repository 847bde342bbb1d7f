//! The `hotpath` binary: parses the command line and hands over to the libraries.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// One binary that answers the hot path of poll-heavy network services from memory.
#[derive(Parser)]
#[command(name = "hotpath", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the server (BitTorrent tracker over HTTP and UDP, admin endpoints).
    Serve {
        /// A TOML config file; without it every setting takes its default.
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
    /// Print the full default configuration as commented TOML, or check a file.
    Config {
        /// Check this file instead: parse and validate it, print errors naming the key.
        #[arg(long)]
        check: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let cli = Cli::parse();
    match hotpath::run(cli_command(cli.command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

fn cli_command(c: Command) -> hotpath::Command {
    match c {
        Command::Serve { config } => hotpath::Command::Serve { config },
        Command::Config { check } => hotpath::Command::Config { check },
    }
}
