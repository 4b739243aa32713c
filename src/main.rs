//! The `trainyard` binary: parse the command line, set up logging, and hand
//! over to the library.

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = trainyard::cli::Cli::parse();
    match cli.command {
        trainyard::cli::Command::Adapter(_) => trainyard::logging::init_tool(),
        _ => trainyard::logging::init(),
    }
    if !cli.command.runs_processes() {
        end_quietly_on_a_closed_pipe();
    }
    // Fault-injection points, only in builds for the tests (FAILPOINTS).
    let _failpoints = trainyard_master::failpoints::arm();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let logs_its_errors = cli.command.runs_processes();
    match runtime.block_on(trainyard::run(cli)) {
        Ok(code) => code,
        Err(e) => {
            // Once, with the whole chain of causes on one line (`{:#}`): a
            // master or host says it in its log, whose lines go to stderr
            // too; any other command says it as its answer.
            if logs_its_errors {
                tracing::error!("{e:#}");
            } else {
                eprintln!("error: {e:#}");
            }
            std::process::ExitCode::FAILURE
        }
    }
}

/// An answer written into a closed pipe (`trainyard tasks | head -1`) ends
/// the command as it ends `cat` or `ls`: killed by SIGPIPE, which shells
/// report as status 141, with nothing on stderr. (Rust ignores SIGPIPE, so
/// the write would fail and `println!` panic.) Commands that run processes
/// keep ignoring it: a reader of theirs going away is no reason to die, and
/// their socket writes never raise it.
fn end_quietly_on_a_closed_pipe() {
    // SAFETY: called once, before any other thread exists; SIG_DFL is a
    // valid disposition for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
