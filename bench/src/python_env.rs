//! Benchmark 9: Python environments — a cold build (nothing cached: uv
//! resolves, creates and installs), a warm reuse by the same host (the
//! resolution remembered, the environment found), and a reuse after the
//! host restarted (resolved again, the environment found on disk). The
//! package is the test suite's tiny wheel, offline, so the figures are the
//! installer's and the host's own cost, not the network's.
//!
//! Then the path a researcher waits on: a real master and host running the
//! CartPole trainer in its environment (numpy and gymnasium, from the
//! package index), warmed by a first task; for each next task, the time
//! from submission to its first episode's progress point, next to the
//! environment's own Python start-up with the trainer's imports. Goal: the
//! difference under 1 s.

use super::env::BenchEnv;
use super::report::{human, median_p99, Row};
use anyhow::Context;
use std::path::Path;
use std::time::{Duration, Instant};
use trainyard_host::metrics::HostMetrics;
use trainyard_host::python_env::{PythonEnvs, PythonSettings};

pub async fn run(env: &BenchEnv) -> anyhow::Result<Vec<Row>> {
    let rounds = env.size(5, 1);
    let dir = env.dir.join("python-env");
    let wheels = dir.join("wheels");
    trainyard_testkit::write_tiny_wheel(&wheels);
    let settings = PythonSettings {
        uv: trainyard_testkit::uv().display().to_string(),
        find_links: vec![wheels],
        no_index: true,
        ..PythonSettings::default()
    };
    let python = Path::new("/usr/bin/python3");
    let requirements = ["tinypkg".to_string()];
    let (mut cold, mut warm, mut restarted) = (vec![], vec![], vec![]);
    for round in 0..rounds {
        let cache = dir.join(format!("cache-{round}"));
        let envs = PythonEnvs::open(&settings, Some(&cache), "bench", HostMetrics::default())?;
        cold.push(timed(&envs, python, &requirements).await?);
        warm.push(timed(&envs, python, &requirements).await?);
        let again = PythonEnvs::open(&settings, Some(&cache), "bench", HostMetrics::default())?;
        restarted.push(timed(&again, python, &requirements).await?);
        std::fs::remove_dir_all(&cache).ok();
    }
    let median = |samples: &mut Vec<f64>| -> anyhow::Result<String> {
        let (m, _) = median_p99(samples).context("no sample")?;
        Ok(human(Duration::from_secs_f64(m / 1e6)))
    };
    let mut rows = vec![
        Row::info(
            "python env",
            "cold build (resolve, venv, install), median",
            median(&mut cold)?,
        ),
        Row::info(
            "python env",
            "warm reuse, same host, median",
            median(&mut warm)?,
        ),
        Row::info(
            "python env",
            "reuse after a host restart (resolved again), median",
            median(&mut restarted)?,
        ),
    ];
    match first_episode(env).await {
        Ok(r) => rows.extend(r),
        Err(e) => rows.push(Row::failed("python env", "dispatch to first episode", &e)),
    }
    Ok(rows)
}

/// What dispatch may add to a warm environment's own start-up.
const FIRST_EPISODE_OVERHEAD: Duration = Duration::from_secs(1);

/// Submission to the first episode of CartPole tasks in a warm environment,
/// next to the environment's `python -c "import numpy, gymnasium"`.
async fn first_episode(env: &BenchEnv) -> anyhow::Result<Vec<Row>> {
    let rounds = env.size(5, 1);
    let mut stage = env.stage("python-env", "sqlite").await?;
    let c = &mut stage.cluster;
    let listed = std::fs::read_to_string(env.adapters.join("../cartpole/requirements.txt"))?;
    let mut entry = trainyard::settings::AdapterEntry::new(env.adapter("cartpole"), &["python3"]);
    entry.python = Some(trainyard_host::python_env::PythonRequirements::from_lines(
        &listed,
    ));
    c.settings.host.adapters = vec![entry];
    c.settings.host.python.uv = trainyard_testkit::uv().display().to_string();
    c.write_config()?;
    let mut master = c.spawn_master()?;
    let client = c.wait_for_master(Duration::from_secs(60)).await?;
    let mut host = c.spawn_host("host-py")?;
    super::storm::wait_registered(&client, 1, Duration::from_secs(60)).await?;
    let task = serde_json::json!({"adapter": "cartpole", "params": {"episodes": 1}});
    // Builds the environment.
    let warm_up = client.submit(&task).await?;
    super::api::wait_terminal(&client, 1, Duration::from_secs(600)).await?;
    anyhow::ensure!(
        client.task(warm_up).await?.task.status == trainyard_master::model::TaskStatus::Completed,
        "the warm-up CartPole task did not complete: see {}",
        c.dir.display()
    );
    let mut latencies = vec![];
    for round in 0..rounds {
        let sent = trainyard_proto::now_ms();
        let id = client.submit(&task).await?;
        super::api::wait_terminal(&client, round + 2, Duration::from_secs(120)).await?;
        let token = std::fs::read_to_string(&c.settings.api.token_file)?;
        let first = first_point_ms(client.base_url(), token.trim(), id).await?;
        latencies.push((first - sent) as f64 * 1e3);
    }
    let python = environment_python(c)?;
    let mut imports = vec![];
    for _ in 0..rounds {
        let started = Instant::now();
        let status = std::process::Command::new(&python)
            .args([
                "-c",
                "import numpy, gymnasium; gymnasium.make('CartPole-v1')",
            ])
            .status()?;
        anyhow::ensure!(
            status.success(),
            "{} cannot import the trainer's libraries",
            python.display()
        );
        imports.push(started.elapsed().as_secs_f64() * 1e6);
    }
    host.stop(Duration::from_secs(10));
    master.stop(Duration::from_secs(10));
    let (dispatch, _) = median_p99(&mut latencies).context("no sample")?;
    let (own, _) = median_p99(&mut imports).context("no sample")?;
    let overhead = Duration::from_secs_f64(((dispatch - own) / 1e6).max(0.0));
    Ok(vec![
        Row::info(
            "python env",
            "Python start-up with numpy and gymnasium imported, in the environment, median",
            human(Duration::from_secs_f64(own / 1e6)),
        ),
        Row::checked(
            "python env",
            "CartPole task: submission to its first episode, warm environment, median",
            format!(
                "{} ({} above Python's own start-up)",
                human(Duration::from_secs_f64(dispatch / 1e6)),
                human(overhead)
            ),
            "< 1 s above start-up",
            overhead < FIRST_EPISODE_OVERHEAD,
        ),
    ])
}

/// When the task's first progress point was recorded, in ms since the epoch.
async fn first_point_ms(base_url: &str, token: &str, id: u64) -> anyhow::Result<i64> {
    let url = format!(
        "{}/v1/tasks/{id}/progress?limit=1",
        base_url.trim_end_matches('/')
    );
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let body: serde_json::Value = reqwest::Client::new()
            .get(&url)
            .bearer_auth(token)
            .send()
            .await?
            .json()
            .await?;
        if let Some(at) = body["points"][0]["at_ms"].as_i64() {
            return Ok(at);
        }
        anyhow::ensure!(Instant::now() < until, "task {id} has no progress point");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The interpreter of the one environment the stage's host built.
fn environment_python(c: &trainyard::cluster::Cluster) -> anyhow::Result<std::path::PathBuf> {
    let root = c
        .settings
        .host
        .cache_dir
        .as_ref()
        .context("no cache dir")?
        .join("python/host-py");
    std::fs::read_dir(&root)?
        .flatten()
        .map(|e| e.path().join("bin/python"))
        .find(|p| p.exists())
        .with_context(|| format!("no environment under {}", root.display()))
}

/// One preparation of the environment, in µs.
async fn timed(envs: &PythonEnvs, python: &Path, requirements: &[String]) -> anyhow::Result<f64> {
    let started = Instant::now();
    let env = envs
        .prepare(python, requirements)
        .await
        .map_err(|f| anyhow::anyhow!("{}", f.message))?;
    let took = started.elapsed().as_secs_f64() * 1e6;
    drop(env);
    Ok(took)
}
