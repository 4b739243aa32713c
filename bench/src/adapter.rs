//! Benchmark 3: what the adapter runtime adds to one task — instantiation
//! and every adapter call the task makes — next to the start-up of the
//! Python interpreter every real trainer pays, measured in the same run.
//!
//! The runtime uses what wasmtime offers for this: components compiled once
//! and cached on disk (deserialised at load), pre-instantiation
//! (`InstancePre`), and the pooling allocator with copy-on-write memory
//! images, so an instance costs a few page mappings.

use super::env::BenchEnv;
use super::report::{human, median_p99, Row};
use anyhow::Context;
use std::time::{Duration, Instant};
use trainyard_host::runtime::{
    AdapterRuntime, AttemptContext, ExitReport, ExitStatus, LoadedAdapter, RuntimeConfig, TaskInput,
};
use trainyard_proto::AttemptRef;

/// One episode line of the reference trainer, as its adapter parses it.
const EPISODE_LINE: &str =
    r#"{"type":"episode","episode":17,"episodes":200,"return":0.81,"steps":12,"epsilon":0.12}"#;

pub async fn run(env: &BenchEnv) -> anyhow::Result<Vec<Row>> {
    let rounds = env.size(2_000, 20);
    let dir = env.dir.join("adapter");
    let workspace = dir.join("workspace");
    std::fs::create_dir_all(&workspace)?;
    // What the reference trainer leaves behind, so `finish` reads and checks
    // real result files as it does after a real run.
    std::fs::write(
        workspace.join("result.json"),
        r#"{"mean_return":0.81,"success_rate":1.0,"eval_episodes":20,"episodes":200}"#,
    )?;
    std::fs::write(
        workspace.join("policy.json"),
        r#"{"q":[[0.0,0.5],[0.25,1.0]]}"#,
    )?;
    let mut rows = vec![];

    // Loading: compiling a component versus deserialising the cached one.
    let cache = dir.join("cache");
    let (compile, cached) = load_times(env, &cache).await?;
    rows.push(Row::info(
        "adapter",
        "load python-trainer.wasm: compile / from the disk cache",
        format!("{} / {}", human(compile), human(cached)),
    ));

    let runtime = AdapterRuntime::new(RuntimeConfig {
        cache_dir: Some(cache),
        max_instances: 4,
        ..RuntimeConfig::default()
    })?;
    let noop = runtime.load(&env.adapter("noop")).await?;
    let trainer = runtime.load(&env.adapter("python-trainer")).await?;
    let context = AttemptContext {
        attempt: AttemptRef::new(1, 1),
        workspace,
        logs: None,
    };

    let python_rounds = env.size(30, 3);
    let mut python: Vec<f64> = Vec::with_capacity(python_rounds);
    for _ in 0..python_rounds {
        let started = Instant::now();
        let status = std::process::Command::new("python3")
            .args(["-c", "pass"])
            .status()
            .context("cannot run python3 (Debian package `python3`)")?;
        anyhow::ensure!(status.success(), "python3 -c pass failed: {status}");
        python.push(started.elapsed().as_secs_f64() * 1e6);
    }
    let (python_median, _) = median_p99(&mut python).context("no python sample")?;
    rows.push(Row::info(
        "adapter",
        "`python3 -c pass` start-up, median",
        human(Duration::from_secs_f64(python_median / 1e6)),
    ));

    for (adapter, name, params) in [
        (&noop, "noop", "{}"),
        (
            &trainer,
            "python-trainer",
            r#"{"episodes": 200, "seed": 7}"#,
        ),
    ] {
        let mut samples = Vec::with_capacity(rounds);
        // The first rounds fault in the pool's pages; not measured.
        for _ in 0..10 {
            one_task(adapter, &context, params).await?;
        }
        for _ in 0..rounds {
            samples.push(one_task(adapter, &context, params).await?.as_secs_f64() * 1e6);
        }
        let (median, p99) = median_p99(&mut samples).context("no sample")?;
        let ratio = median / python_median * 100.0;
        rows.push(Row::checked(
            "adapter",
            format!("{name}: instantiate + prepare + on-output + finish, per task"),
            format!("median {median:.0} µs, p99 {p99:.0} µs = {ratio:.2} % of python start-up"),
            "< 1 % of python start-up",
            ratio < 1.0,
        ));
    }

    // The trainer's adapter sees every output line; its per-line cost is
    // paid once per episode, not once per task.
    let mut instance = trainer.instantiate(context.clone()).await?;
    instance
        .prepare(&input(&context, r#"{"episodes": 200}"#))
        .await?
        .map_err(|f| anyhow::anyhow!("prepare refused: {}", f.message))?;
    let mut lines = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let started = Instant::now();
        let event = instance.on_output(EPISODE_LINE).await?;
        lines.push(started.elapsed().as_secs_f64() * 1e6);
        anyhow::ensure!(
            event.is_some(),
            "the trainer's adapter ignored an episode line"
        );
    }
    let (median, p99) = median_p99(&mut lines).context("no sample")?;
    rows.push(Row::info(
        "adapter",
        "python-trainer: one on-output call (per trainer line)",
        format!("median {median:.1} µs, p99 {p99:.1} µs"),
    ));
    Ok(rows)
}

fn input(context: &AttemptContext, params: &str) -> TaskInput {
    TaskInput {
        attempt: context.attempt,
        kind: String::new(),
        params: params.to_owned(),
        checkpoint: None,
    }
}

/// Every adapter call one task makes: a fresh instance, `prepare`, one
/// `on-output`, and `finish` after a clean exit (the trainer's adapter reads
/// and checks the result files in the workspace).
async fn one_task(
    adapter: &LoadedAdapter,
    context: &AttemptContext,
    params: &str,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let mut instance = adapter.instantiate(context.clone()).await?;
    instance
        .prepare(&input(context, params))
        .await?
        .map_err(|f| anyhow::anyhow!("prepare refused: {}", f.message))?;
    instance.on_output(EPISODE_LINE).await?;
    let result = instance
        .finish(&ExitReport {
            status: ExitStatus::Exited(0),
            stderr_tail: String::new(),
            duration_ms: 1,
        })
        .await?;
    let elapsed = started.elapsed();
    if let Err(failure) = result {
        anyhow::bail!("the adapter failed a clean run: {}", failure.message);
    }
    Ok(elapsed)
}

/// Median time to load the trainer's component without a cache (compile)
/// and from a warm cache (deserialise).
async fn load_times(
    env: &BenchEnv,
    cache: &std::path::Path,
) -> anyhow::Result<(Duration, Duration)> {
    let path = env.adapter("python-trainer");
    let rounds = env.size(5, 1);
    let mut compile = vec![];
    for _ in 0..rounds {
        let runtime = AdapterRuntime::new(RuntimeConfig {
            cache_dir: None,
            max_instances: 1,
            ..RuntimeConfig::default()
        })?;
        let started = Instant::now();
        runtime.load(&path).await?;
        compile.push(started.elapsed().as_secs_f64());
    }
    let mut cached = vec![];
    for round in 0..=rounds {
        let runtime = AdapterRuntime::new(RuntimeConfig {
            cache_dir: Some(cache.to_path_buf()),
            max_instances: 1,
            ..RuntimeConfig::default()
        })?;
        let started = Instant::now();
        runtime.load(&path).await?;
        // The first load fills the cache.
        if round > 0 {
            cached.push(started.elapsed().as_secs_f64());
        }
    }
    let (c, _) = median_p99(&mut compile).context("no sample")?;
    let (d, _) = median_p99(&mut cached).context("no sample")?;
    Ok((Duration::from_secs_f64(c), Duration::from_secs_f64(d)))
}
