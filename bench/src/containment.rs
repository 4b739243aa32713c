//! Benchmark 8: what containment costs one attempt — the attempt cgroup
//! made with its limits and emptied and removed afterwards, the network
//! namespace, the Landlock ruleset, the switch of user — measured as the
//! median time to start and end `true` under its supervisor with every
//! layer on, against the same with none, next to the start-up of the Python
//! interpreter every real trainer pays.

use super::env::BenchEnv;
use super::report::{human, median_p99, Row};
use anyhow::Context;
use std::path::Path;
use std::time::{Duration, Instant};
use trainyard_host::containment::{AdapterContainment, ContainmentSettings, Enforcement};
use trainyard_host::process::{Deadline, ExitKind, LaunchSpec, Trainer};
use trainyard_host::workspace::{prepare_base, Workspace};
use trainyard_proto::resources::Assignment;
use trainyard_proto::AttemptRef;

/// Per-attempt budget of containment, and its share of a Python start-up.
const BUDGET: Duration = Duration::from_millis(5);
const SHARE_OF_PYTHON: f64 = 0.05;

pub async fn run(env: &BenchEnv) -> anyhow::Result<Vec<Row>> {
    let rounds = env.size(200, 3);
    let work = env.dir.join("containment");
    prepare_base(&work)?;
    let settings = ContainmentSettings {
        cgroup_parent: format!("trainyard/bench-{}", std::process::id()),
        ..ContainmentSettings::default()
    };
    let enforcement = Enforcement::probe(&settings, "host", &env.bins.supervisor, &work)
        .context("containment is not available here (the benchmark needs root)")?;
    let mut contained = vec![];
    let mut bare = vec![];
    for round in 0..rounds {
        // Interleaved, so a noisy moment weighs on both alike.
        bare.push(attempt(env, &work, round * 2, None).await?);
        contained.push(attempt(env, &work, round * 2 + 1, Some(&enforcement)).await?);
    }
    enforcement.release();
    trainyard_host::containment::cgroup::remove_empty_tree(&settings.cgroup_parent);
    let python = python_startup(env.size(30, 3))?;
    let (on, _) = median_p99(&mut contained).context("no sample")?;
    let (off, _) = median_p99(&mut bare).context("no sample")?;
    let added = Duration::from_secs_f64((on - off).max(0.0) / 1e6);
    let share = added.as_secs_f64() / python.as_secs_f64();
    Ok(vec![
        Row::info(
            "containment",
            format!(
                "attempt of `true`, contained ({}) / bare, median",
                enforcement.layers().join(", ")
            ),
            format!(
                "{} / {}",
                human(Duration::from_secs_f64(on / 1e6)),
                human(Duration::from_secs_f64(off / 1e6))
            ),
        ),
        Row::checked(
            "containment",
            "added per attempt, median",
            human(added),
            format!("< {}", human(BUDGET)),
            added < BUDGET,
        ),
        Row::checked(
            "containment",
            format!("share of a `python3 -c pass` start-up ({})", human(python)),
            format!("{:.1} %", share * 100.0),
            format!("< {:.0} %", SHARE_OF_PYTHON * 100.0),
            share < SHARE_OF_PYTHON,
        ),
    ])
}

/// One attempt of `true` in a fresh workspace, start to end, in µs.
async fn attempt(
    env: &BenchEnv,
    work: &Path,
    n: u32,
    enforcement: Option<&Enforcement>,
) -> anyhow::Result<f64> {
    let started = Instant::now();
    let workspace = Workspace::create(work, AttemptRef::new(u64::from(n) + 1, 1), None)?;
    workspace.hand_over(enforcement.and_then(Enforcement::credentials))?;
    let executable = Path::new("/bin/true");
    let confinement = enforcement.map(|e| {
        e.confine(
            &format!("bench-{n}"),
            workspace.path(),
            executable,
            &AdapterContainment::default(),
            &Assignment::default(),
        )
    });
    let spec = LaunchSpec {
        executable: executable.into(),
        program_name: "true".into(),
        args: vec![],
        env: vec![],
        workspace: workspace.path().to_path_buf(),
        supervisor: env.bins.supervisor.clone(),
        max_line_bytes: 1024,
        stderr_tail_bytes: 1024,
        confinement,
        logs: None,
    };
    let (trainer, lines) = Trainer::spawn(spec, Deadline::after(Duration::from_secs(60))).await?;
    drop(lines);
    let exit = trainer.wait().await;
    anyhow::ensure!(
        exit.status == ExitKind::Exited(0),
        "`true` ended {:?}: {}",
        exit.status,
        exit.stderr_tail
    );
    workspace.remove()?;
    Ok(started.elapsed().as_secs_f64() * 1e6)
}

fn python_startup(rounds: usize) -> anyhow::Result<Duration> {
    let mut samples = vec![];
    for _ in 0..rounds {
        let started = Instant::now();
        let status = std::process::Command::new("/usr/bin/python3")
            .args(["-c", "pass"])
            .status()
            .context("cannot run /usr/bin/python3 (Debian package `python3`)")?;
        anyhow::ensure!(status.success(), "python3 -c pass failed: {status}");
        samples.push(started.elapsed().as_secs_f64() * 1e6);
    }
    let (median, _) = median_p99(&mut samples).context("no python sample")?;
    Ok(Duration::from_secs_f64(median / 1e6))
}
