//! The `hotpath` binary: parses the command line (defined in the library, [`hotpath::Cli`])
//! and hands over to it.

use std::process::ExitCode;

use clap::Parser as _;

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    match hotpath::run(hotpath::Cli::parse().command) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            log::error!("{}", hotpath::error_text(&e));
            ExitCode::FAILURE
        }
    }
}
