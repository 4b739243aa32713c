//! Benchmark 8: what containment costs one attempt, layer by layer — the
//! attempt cgroup made with its limits and emptied and removed afterwards,
//! Landlock, the network namespace, the mount namespace and its view, the
//! PID namespace with its first process, the workspace's quota filesystem,
//! the system-call filter, the switch of user — measured as the median time
//! to start and end `true` under its supervisor (workspace made and removed
//! included) with one layer on, with the four layers trainyard had before the
//! mount, PID, disk and seccomp layers, and with all of them, confined at
//! launch (the cold path) and in a sandbox prepared ahead (the warm path,
//! whose preparation is not timed but its CPU is counted), against the same
//! with none, next to the start-up of the Python interpreter every real
//! trainer pays, all in one run.

use super::env::BenchEnv;
use super::probe::{process_cpu_time, tree_cpu_time};
use super::report::{human, median_p99, quantile, Row};
use anyhow::Context;
use std::path::Path;
use std::time::{Duration, Instant};
use trainyard_host::containment::sandbox::split;
use trainyard_host::containment::{
    AdapterContainment, ContainmentSettings, Enforcement, Switch, USER_OFF,
};
use trainyard_host::process::{Deadline, ExitKind, LaunchSpec, PreparedSandbox, Trainer};
use trainyard_host::workspace::{prepare_base, Workspace};
use trainyard_proto::resources::Assignment;
use trainyard_proto::AttemptRef;

/// Per-attempt share of a Python start-up containment may add.
const SHARE_OF_PYTHON: f64 = 0.05;

/// The workspace quota of the benchmark's attempts.
const DISK_QUOTA: u64 = 64 << 20;

/// Each layer, by its key, and the settings with it alone on.
fn layers(base: &ContainmentSettings) -> Vec<(&'static str, ContainmentSettings)> {
    let none = ContainmentSettings {
        cgroup: Switch::Off,
        landlock: Switch::Off,
        network: Switch::Off,
        mount: Switch::Off,
        pid: Switch::Off,
        disk: Switch::Off,
        seccomp: Switch::Off,
        user: USER_OFF.into(),
        ..base.clone()
    };
    let only = |set: fn(&mut ContainmentSettings)| {
        let mut settings = none.clone();
        set(&mut settings);
        settings
    };
    vec![
        ("cgroup", only(|s| s.cgroup = Switch::On)),
        ("landlock", only(|s| s.landlock = Switch::On)),
        ("network", only(|s| s.network = Switch::On)),
        ("mount", only(|s| s.mount = Switch::On)),
        ("pid", only(|s| s.pid = Switch::On)),
        ("disk", only(|s| s.disk = Switch::On)),
        ("seccomp", only(|s| s.seccomp = Switch::On)),
        ("user", only(|s| s.user = "nobody".into())),
        (
            "cgroup, landlock, network and user",
            only(|s| {
                s.cgroup = Switch::On;
                s.landlock = Switch::On;
                s.network = Switch::On;
                s.user = "nobody".into();
            }),
        ),
        ("all", base.clone()),
    ]
}

pub async fn run(env: &BenchEnv) -> anyhow::Result<Vec<Row>> {
    let rounds = env.size(40, 1);
    let work = env.dir.join("containment");
    prepare_base(&work)?;
    let mut base = ContainmentSettings {
        cgroup_parent: format!("trainyard/bench-{}", std::process::id()),
        ..ContainmentSettings::default()
    };
    base.limits.disk = Some(DISK_QUOTA);
    let mut configs = vec![];
    for (name, settings) in layers(&base) {
        let host_dir = trainyard_host::containment::cgroup::name_part(name);
        let enforcement = Enforcement::probe(&settings, &host_dir, &env.bins.supervisor, &work)
            .with_context(|| {
                format!("containment layer {name} is not available here (the benchmark needs root)")
            })?;
        configs.push((name, enforcement, vec![]));
    }
    let mut bare = vec![];
    let mut warm = Warm::default();
    let mut n = 0;
    for _ in 0..rounds {
        // Interleaved blocks, so a noisy moment weighs on every layer alike.
        // Within a block the attempts follow each other as a busy host's
        // do, each paying for what the kernel tears down after the one
        // before it ended (namespaces, mounts); the block's first attempt,
        // which would pay for another configuration's, is not counted.
        block(env, &work, &mut n, None, &mut bare).await?;
        for (_, enforcement, samples) in configs.iter_mut() {
            block(env, &work, &mut n, Some(enforcement), samples).await?;
        }
        let (_, all, _) = configs.last().context("no configuration")?;
        warm_block(env, &work, &mut n, all, &mut warm).await?;
    }
    for (_, enforcement, _) in &configs {
        enforcement.release();
    }
    trainyard_host::containment::cgroup::remove_empty_tree(&base.cgroup_parent);
    let python = python_startup(env.size(30, 3))?;
    let (off, _) = median_p99(&mut bare).context("no sample")?;
    let mut rows = vec![Row::info(
        "containment",
        "attempt of `true`, bare, median",
        human(micros(off)),
    )];
    for (name, enforcement, mut samples) in configs {
        let (on, _) = median_p99(&mut samples).context("no sample")?;
        let added = micros((on - off).max(0.0));
        let share = added.as_secs_f64() / python.as_secs_f64();
        if name != "all" {
            rows.push(Row::info(
                "containment",
                format!("added by `{name}` alone, median"),
                format!("{} ({:.1} % of Python)", human(added), share * 100.0),
            ));
            continue;
        }
        rows.push(Row::info(
            "containment",
            format!(
                "attempt of `true`, contained ({}), median",
                enforcement.layers().join(", ")
            ),
            human(micros(on)),
        ));
        rows.push(Row::info(
            "containment",
            format!(
                "all layers, cold (confined at launch): share of a `python3 -c pass` start-up ({})",
                human(python)
            ),
            format!("{:.1} % ({})", share * 100.0, human(added)),
        ));
    }
    rows.extend(warm.rows(off, python)?);
    Ok(rows)
}

/// The warm path's samples: each attempt's time, and the CPU its
/// sandbox's preparation took (the host's and the sandbox's processes').
#[derive(Default)]
struct Warm {
    samples: Vec<f64>,
    host_cpu: Vec<f64>,
    sandbox_cpu: Vec<f64>,
}

impl Warm {
    /// The warm path's rows, against the bare median `off` (µs) and
    /// Python's start-up.
    fn rows(mut self, off: f64, python: Duration) -> anyhow::Result<Vec<Row>> {
        let (on, _) = median_p99(&mut self.samples).context("no warm sample")?;
        // Below the bare attempt's when the prepared supervisor's own start,
        // which a bare attempt pays at launch, weighs more than what is
        // left to do at launch.
        let added = micros((on - off).max(0.0));
        let share = added.as_secs_f64() / python.as_secs_f64();
        let lowest = self.samples.first().copied().unwrap_or(on) - off;
        let p90 = quantile(&self.samples, 0.9).unwrap_or(on) - off;
        let (host, _) = median_p99(&mut self.host_cpu).context("no CPU sample")?;
        let (sandbox, _) = median_p99(&mut self.sandbox_cpu).context("no CPU sample")?;
        let signed = |us: f64| {
            if us < 0.0 {
                format!("−{}", human(micros(-us)))
            } else {
                human(micros(us))
            }
        };
        Ok(vec![
            Row::info(
                "containment",
                "attempt of `true`, all layers, warm (a sandbox prepared ahead), median",
                human(micros(on)),
            ),
            Row::info(
                "containment",
                format!(
                    "all layers, warm: added per attempt, median (lowest … p90 of {} attempts)",
                    self.samples.len()
                ),
                format!("{} ({} … {})", signed(on - off), signed(lowest), signed(p90)),
            ),
            Row::checked(
                "containment",
                format!(
                    "all layers, warm: share of a `python3 -c pass` start-up ({})",
                    human(python)
                ),
                format!("{:.1} % ({})", share * 100.0, human(added)),
                format!("< {:.0} %", SHARE_OF_PYTHON * 100.0),
                share < SHARE_OF_PYTHON,
            ),
            Row::info(
                "containment",
                "preparing one sandbox, off the attempt's path: CPU, median (host + sandbox processes)",
                format!(
                    "{} ({} + {})",
                    human(micros(host + sandbox)),
                    human(micros(host)),
                    human(micros(sandbox))
                ),
            ),
        ])
    }
}

/// A block of attempts in sandboxes prepared ahead, each prepared (not
/// timed) before its attempt; all but the first counted.
async fn warm_block(
    env: &BenchEnv,
    work: &Path,
    n: &mut u64,
    enforcement: &Enforcement,
    warm: &mut Warm,
) -> anyhow::Result<()> {
    let adapter = AdapterContainment::default();
    // The plan does not depend on the workspace's name.
    let probe = enforcement.confine(
        "plan",
        &work.join("plan"),
        Path::new("/bin/true"),
        &adapter,
        &Assignment::default(),
    );
    let (plan, _) = split(&probe);
    for i in 0..BLOCK {
        let host_before = process_cpu_time();
        let sandbox = PreparedSandbox::prepare(&env.bins.supervisor, plan.clone()).await?;
        let host_cpu = process_cpu_time().saturating_sub(host_before);
        let sandbox_cpu = sandbox.pid().map_or(Duration::ZERO, tree_cpu_time);
        let took = attempt_in(env, work, n, Some(enforcement), Some(sandbox)).await?;
        if i > 0 {
            warm.samples.push(took);
            warm.host_cpu.push(host_cpu.as_secs_f64() * 1e6);
            warm.sandbox_cpu.push(sandbox_cpu.as_secs_f64() * 1e6);
        }
    }
    Ok(())
}

/// Attempts in a row in each block.
const BLOCK: usize = 5;

/// A block of attempts under one configuration; all but the first counted.
async fn block(
    env: &BenchEnv,
    work: &Path,
    n: &mut u64,
    enforcement: Option<&Enforcement>,
    samples: &mut Vec<f64>,
) -> anyhow::Result<()> {
    for i in 0..BLOCK {
        let took = attempt(env, work, n, enforcement).await?;
        if i > 0 {
            samples.push(took);
        }
    }
    Ok(())
}

fn micros(us: f64) -> Duration {
    Duration::from_secs_f64(us / 1e6)
}

/// One attempt of `true` in a fresh workspace, start to end, in µs.
async fn attempt(
    env: &BenchEnv,
    work: &Path,
    n: &mut u64,
    enforcement: Option<&Enforcement>,
) -> anyhow::Result<f64> {
    attempt_in(env, work, n, enforcement, None).await
}

/// One attempt of `true`, in `sandbox` if one is given, start to end, in
/// µs.
async fn attempt_in(
    env: &BenchEnv,
    work: &Path,
    n: &mut u64,
    enforcement: Option<&Enforcement>,
    sandbox: Option<PreparedSandbox>,
) -> anyhow::Result<f64> {
    *n += 1;
    let adapter = AdapterContainment::default();
    let started = Instant::now();
    let quota = enforcement.and_then(|e| e.workspace_quota(&adapter));
    let workspace = Workspace::create_with_quota(work, AttemptRef::new(*n, 1), None, quota)?;
    workspace.hand_over(enforcement.and_then(Enforcement::credentials))?;
    let executable = Path::new("/bin/true");
    let confinement = enforcement.map(|e| {
        e.confine(
            &format!("bench-{n}"),
            workspace.path(),
            executable,
            &adapter,
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
    let deadline = Deadline::after(Duration::from_secs(60));
    let (trainer, lines) = match sandbox {
        Some(sandbox) => Trainer::launch(sandbox, spec, deadline).await?,
        None => Trainer::spawn(spec, deadline).await?,
    };
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
