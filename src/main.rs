//! The `trainyard` binary: parse the command line, set up logging, and hand
//! over to the library.

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = trainyard::cli::Cli::parse();
    trainyard::logging::init();
    // Fault-injection points stay inert unless FAILPOINTS arms them (tests do).
    let _failpoints = fail::FailScenario::setup();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(trainyard::run(cli)) {
        Ok(code) => code,
        Err(e) => {
            // `{:#}` prints the whole chain of causes on one line.
            tracing::error!("{e:#}");
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
