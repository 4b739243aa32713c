//! Benchmark 3: what the adapter runtime adds to one task — instantiation
//! and every adapter call the task makes — next to the start-up of the
//! Python interpreter every real trainer pays, measured in the same run.
//! The adapters written in Rust come first, then `cartpole-py`, written in
//! Python (a CPython component built by componentize-py), with its costs
//! broken down by call.
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
    // What the reference trainers leave behind, so `finish` reads and checks
    // real result files as it does after a real run (the grid world's and
    // CartPole's metrics together, so both adapters accept it).
    std::fs::write(
        workspace.join("result.json"),
        r#"{"mean_return":0.81,"success_rate":1.0,"eval_episodes":20,"episodes":200,"best_return":1.0}"#,
    )?;
    std::fs::write(
        workspace.join("policy.json"),
        r#"{"q":[[0.0,0.5],[0.25,1.0]]}"#,
    )?;
    let mut rows = vec![];

    // Loading: compiling a component versus deserialising the cached one.
    let cache = dir.join("cache");
    for name in ["python-trainer", PYTHON_ADAPTER] {
        let (compile, cached) = load_times(env, &cache, name).await?;
        rows.push(Row::info(
            "adapter",
            format!("load {name}.wasm: compile / from the disk cache"),
            format!("{} / {}", human(compile), human(cached)),
        ));
    }

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
        assignment: Default::default(),
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
    let python_adapter = runtime.load(&env.adapter(PYTHON_ADAPTER)).await?;
    rows.extend(python_adapter_rows(env, &python_adapter, &context).await?);
    Ok(rows)
}

/// The adapter written in Python, and the params of its tasks here.
const PYTHON_ADAPTER: &str = "cartpole-py";
const PYTHON_ADAPTER_PARAMS: &str = r#"{"episodes": 200, "seed": 7}"#;
/// What instantiate + prepare + finish of a Python adapter should stay
/// under: a small share of the trainer's own start-up (reported, never
/// asserted).
const PYTHON_ADAPTER_GOAL: Duration = Duration::from_millis(20);

/// A CPython component's costs, call by call: a fresh instance, `prepare`,
/// one `on-output` and `finish`, each a median over many tasks.
async fn python_adapter_rows(
    env: &BenchEnv,
    adapter: &LoadedAdapter,
    context: &AttemptContext,
) -> anyhow::Result<Vec<Row>> {
    let rounds = env.size(200, 5);
    // Columns: instantiate, prepare, on-output, finish.
    let mut calls: [Vec<f64>; 4] = Default::default();
    for round in 0..rounds + 3 {
        let times = timed_calls(adapter, context, PYTHON_ADAPTER_PARAMS).await?;
        // The first rounds fault in the pool's pages; not measured.
        if round >= 3 {
            for (column, time) in calls.iter_mut().zip(times) {
                column.push(time.as_secs_f64() * 1e6);
            }
        }
    }
    let mut medians = [0.0; 4];
    for (median, column) in medians.iter_mut().zip(calls.iter_mut()) {
        *median = median_p99(column).context("no sample")?.0;
    }
    let [instantiate, prepare, on_output, finish] = medians;
    let task = Duration::from_secs_f64((instantiate + prepare + finish) / 1e6);
    Ok(vec![
        Row::info(
            "adapter",
            format!("{PYTHON_ADAPTER}: instantiate / prepare / on-output / finish, median"),
            format!("{instantiate:.0} / {prepare:.0} / {on_output:.0} / {finish:.0} µs"),
        ),
        Row::checked(
            "adapter",
            format!("{PYTHON_ADAPTER}: instantiate + prepare + finish, per task"),
            human(task),
            format!("< {}", human(PYTHON_ADAPTER_GOAL)),
            task < PYTHON_ADAPTER_GOAL,
        ),
    ])
}

/// The four calls of one task on a fresh instance, each timed.
async fn timed_calls(
    adapter: &LoadedAdapter,
    context: &AttemptContext,
    params: &str,
) -> anyhow::Result<[Duration; 4]> {
    let started = Instant::now();
    let mut instance = adapter.instantiate(context.clone()).await?;
    let instantiated = started.elapsed();
    let started = Instant::now();
    instance
        .prepare(&input(context, params))
        .await?
        .map_err(|f| anyhow::anyhow!("prepare refused: {}", f.message))?;
    let prepared = started.elapsed();
    let started = Instant::now();
    instance.on_output(EPISODE_LINE).await?;
    let read = started.elapsed();
    let started = Instant::now();
    let result = instance
        .finish(&ExitReport {
            status: ExitStatus::Exited(0),
            stderr_tail: String::new(),
            duration_ms: 1,
        })
        .await?;
    let finished = started.elapsed();
    if let Err(failure) = result {
        anyhow::bail!("the adapter failed a clean run: {}", failure.message);
    }
    Ok([instantiated, prepared, read, finished])
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
    Ok(timed_calls(adapter, context, params).await?.iter().sum())
}

/// Median time to load adapter `name`'s component without a cache
/// (compile) and from a warm cache (deserialise).
async fn load_times(
    env: &BenchEnv,
    cache: &std::path::Path,
    name: &str,
) -> anyhow::Result<(Duration, Duration)> {
    let path = env.adapter(name);
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
