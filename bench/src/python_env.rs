//! Benchmark 9: Python environments — a cold build (nothing cached: uv
//! resolves, creates and installs), a warm reuse by the same host (the
//! resolution remembered, the environment found), and a reuse after the
//! host restarted (resolved again, the environment found on disk). The
//! package is the test suite's tiny wheel, offline, so the figures are the
//! installer's and the host's own cost, not the network's.

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
    Ok(vec![
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
    ])
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
