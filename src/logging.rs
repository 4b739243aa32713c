//! Logging through `tracing`, filtered by `RUST_LOG` (default: `info` for
//! trainyard, `warn` for its dependencies).

use tracing_subscriber::EnvFilter;

pub fn init() {
    init_with("warn,trainyard=info,trainyard_master=info,trainyard_host=info,trainyard_proto=info");
}

/// Errors only unless `RUST_LOG` says otherwise: for tools that run many
/// in-process hosts (the benchmarks), whose routine warnings (a connection
/// lost when the master is killed on purpose) would drown the output.
pub fn init_quiet() {
    init_with("error");
}

/// Warnings and errors unless `RUST_LOG` says otherwise, and nothing of
/// what adapters log: for the adapter author's commands, whose output is
/// the attempt itself (`adapter run` prints the adapter's records with it).
pub fn init_tool() {
    init_with("warn,trainyard::adapter=off");
}

fn init_with(default: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colours only for a terminal; log files stay plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}
