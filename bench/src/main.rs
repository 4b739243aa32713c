//! `trainyard-bench`: the benchmarks of `make bench`; see the crate's library.

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = trainyard_bench::Args::parse();
    trainyard::logging::init_quiet();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("cannot start the tokio runtime");
    match runtime.block_on(trainyard_bench::run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("trainyard-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}
