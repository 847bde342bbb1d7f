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
    /// Load-test a server: HTTP/1.1 or the BEP 15 UDP tracker mix, closed loop or a fixed
    /// rate, with latency percentiles, errors by class and objectives (exit status 2 when
    /// one is missed).
    Bench(Box<hotpath_bench::Args>),
    /// Check this host's kernel and process limits against the configuration (exit status 1
    /// when one would break a configured limit).
    Doctor {
        /// The config file to check against; the defaults without it.
        #[arg(long, short)]
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
        action: DbCommand,
        /// The config file whose [store] to use; the defaults (data/hotpath.db) without it.
        #[arg(long, short, global = true)]
        config: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum DbCommand {
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

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let cli = Cli::parse();
    match hotpath::run(cli_command(cli.command)) {
        Ok(code) => ExitCode::from(code),
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
        Command::Bench(args) => hotpath::Command::Bench(args),
        Command::Doctor { config, json } => hotpath::Command::Doctor { config, json },
        Command::Db { action, config } => hotpath::Command::Db {
            config,
            action: match action {
                DbCommand::Migrate => hotpath::DbAction::Migrate,
                DbCommand::Status => hotpath::DbAction::Status,
                DbCommand::Refused { replay } => hotpath::DbAction::Refused { replay },
            },
        },
    }
}
