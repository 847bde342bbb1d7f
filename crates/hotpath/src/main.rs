//! The `hotpath` binary: parses the command line (defined in the library, [`hotpath::Cli`])
//! and hands over to it.

use std::process::ExitCode;

use clap::Parser as _;

fn main() -> ExitCode {
    let cli = hotpath::Cli::parse();
    hotpath::logging::init(cli.log_level.as_deref());
    // Output piped into `head` and the like: the reader left early and nothing is wrong, but
    // `println!` panics on the broken pipe. End quietly with 141, the status a program killed
    // by SIGPIPE reports in the shell, instead of a stack trace.
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let p = info.payload();
        let text = p
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| p.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if text.starts_with("failed printing to stdout") && text.contains("Broken pipe") {
            std::process::exit(141);
        }
        default(info)
    }));
    match hotpath::run(cli.command) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            log::error!("{}", hotpath::error_text(&e));
            ExitCode::FAILURE
        }
    }
}
