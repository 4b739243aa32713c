//! Every benchmark at a tiny size, so they keep working: `trainyard-bench
//! all --smoke` must run each one to the end — real master, hosts, Redis,
//! SQLite and PostgreSQL — and print its rows. Figures are not checked: a
//! benchmark is a measurement, not a test.

use std::process::Command;

#[test]
fn every_benchmark_runs_at_smoke_size() {
    // The workspace root: `adapters/dist` and `target/` are found from there.
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let output = Command::new(env!("CARGO_BIN_EXE_trainyard-bench"))
        .args(["all", "--smoke"])
        .current_dir(root)
        .output()
        .expect("cannot run trainyard-bench");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "trainyard-bench --smoke failed ({}):\n{stderr}\n{stdout}",
        output.status
    );
    for bench in [
        "dispatch",
        "spawn",
        "visibility",
        "adapter",
        "recovery",
        "failover",
        "storm",
        "sweep",
        "memory",
        "dashboard",
        "python env",
    ] {
        assert!(
            stdout.lines().any(|l| l.contains(&format!(" {bench} "))),
            "no row for the {bench} benchmark in:\n{stdout}"
        );
    }
    for backend in ["(sqlite)", "(postgres)"] {
        assert!(
            stdout.contains(backend),
            "no {backend} figures in:\n{stdout}"
        );
    }
    assert!(
        stdout.contains("(smoke)"),
        "a smoke run must not claim targets met or missed:\n{stdout}"
    );
}
