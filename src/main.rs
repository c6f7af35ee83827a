//! The `selfheal` binary: parse the command line, run, exit with the status the library
//! chose. Everything else lives in the library.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = selfheal::cli::Cli::parse();
    ExitCode::from(selfheal::app::run(cli))
}
