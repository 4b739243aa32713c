//! Benchmark 5: a reconnect storm. A thousand light hosts are connected and
//! busy; the master is killed with SIGKILL and started again at once. The
//! figures: how long until every host is registered again, how their first
//! reconnect attempts spread (the jittered backoff, reset to its minimum by
//! the last successful handshake), the new master's peak CPU and memory, and
//! that every task submitted around the restart still completed exactly once.

use super::api::{read_tasks, wait_terminal};
use super::env::BenchEnv;
use super::fleet::{Fleet, FleetSpec};
use super::probe::Sampler;
use super::report::{mib, quantile, Row};
use anyhow::{bail, Context};
use serde_json::json;
use std::time::{Duration, Instant};
use trainyard::client::ApiClient;
use trainyard_master::model::TaskStatus;

pub async fn run(env: &BenchEnv) -> anyhow::Result<Vec<Row>> {
    let hosts = env.size(1_000, 20);
    let tasks = env.size(5_000, 100);
    let mut stage = env.stage("storm", "sqlite").await?;
    let c = &mut stage.cluster;
    let timers = c.settings.timers.clone();
    c.write_config()?;
    let mut master = c.spawn_master()?;
    let client = c.wait_for_master(Duration::from_secs(30)).await?;
    let started = Instant::now();
    let fleet = Fleet::start(c, &FleetSpec::noop(env, hosts, 1)).await?;
    wait_registered(&client, hosts, Duration::from_secs(120)).await?;
    let first_connect = started.elapsed();

    // Work in flight across the restart: submitted, then the master dies.
    let batch: Vec<serde_json::Value> = (0..tasks)
        .map(|_| json!({"adapter": "noop", "params": {}}))
        .collect();
    let mut ids = vec![];
    for chunk in batch.chunks(1000) {
        ids.extend(client.submit_batch(chunk).await?);
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    let killed = Instant::now();
    master.kill();
    master.restart()?;
    let restarted = Instant::now();
    let sampler = Sampler::start(
        master.pid().context("the new master has no pid")?,
        Duration::from_millis(100),
    );
    let client = c.wait_for_master(Duration::from_secs(30)).await?;
    wait_registered(&client, hosts, Duration::from_secs(120)).await?;
    let all_back = restarted.elapsed();
    wait_terminal(&client, tasks, Duration::from_secs(300)).await?;
    let peaks = sampler.finish();

    let firsts: Vec<Duration> = fleet
        .first_attempts_after(killed)
        .into_iter()
        .enumerate()
        .map(|(i, f)| f.with_context(|| format!("light-{i} never tried to reconnect")))
        .collect::<anyhow::Result<_>>()?;
    let mut sorted = firsts.clone();
    sorted.sort();
    let (lo, hi) = (sorted[0], sorted[sorted.len() - 1]);
    let p50 = quantile(&sorted, 0.5).unwrap_or_default();
    let welcomes = fleet.first_welcomes_after(killed);
    let reconnected = welcomes.iter().filter(|w| w.is_some()).count();
    // No task lost or run twice.
    let ended = read_tasks(&client, &ids).await?;
    let lost: Vec<u64> = ended
        .iter()
        .filter(|t| t.status != TaskStatus::Completed)
        .map(|t| t.id)
        .collect();
    let twice = ended.iter().filter(|t| t.runs > 1).count();
    fleet.shutdown().await;
    master.stop(Duration::from_secs(10));
    if !lost.is_empty() {
        bail!(
            "{} tasks did not complete after the restart: {:?}…",
            lost.len(),
            &lost[..lost.len().min(5)]
        );
    }

    let min = timers
        .reconnect_initial
        .mul_f64(1.0 - timers.reconnect_jitter);
    let max = timers
        .reconnect_initial
        .mul_f64(1.0 + timers.reconnect_jitter);
    let within_30s = all_back <= Duration::from_secs(30);
    let under_200 = peaks.rss < 200 << 20;
    Ok(vec![
        Row::info(
            "storm",
            "setup",
            format!(
                "{hosts} light hosts (first connection of all: {:.1} s), {tasks} tasks in flight, master SIGKILLed and restarted",
                first_connect.as_secs_f64()
            ),
        ),
        Row::checked(
            "storm",
            "restart → every host registered again",
            format!("{:.2} s ({reconnected}/{hosts} welcomed)", all_back.as_secs_f64()),
            "≤ 30 s",
            within_30s && reconnected == hosts,
        ),
        Row::checked(
            "storm",
            "first reconnect attempts after the kill",
            format!(
                "{:.0}–{:.0} ms, median {:.0} ms (spread {:.0} ms)",
                lo.as_secs_f64() * 1e3,
                hi.as_secs_f64() * 1e3,
                p50.as_secs_f64() * 1e3,
                (hi - lo).as_secs_f64() * 1e3
            ),
            format!(
                "backoff reset: within {:.0}–{:.0} ms of the loss",
                min.as_secs_f64() * 1e3,
                max.as_secs_f64() * 1e3
            ),
            // A host notices the loss a little after the kill; never sooner
            // than the minimum delay, and not long after the maximum.
            lo >= min && hi <= max + Duration::from_millis(500),
        ),
        Row::checked(
            "storm",
            "new master: peak RSS, peak CPU",
            format!("{}, {:.2} cores", mib(peaks.rss), peaks.cpu),
            "< 200 MiB",
            under_200,
        ),
        Row::checked(
            "storm",
            "tasks across the restart",
            format!("{tasks} of {tasks} COMPLETED, {twice} ran more than once"),
            "none lost",
            lost.is_empty(),
        ),
    ])
}

/// Waits until the scheduler counts `n` registered hosts.
pub async fn wait_registered(
    client: &ApiClient,
    n: usize,
    timeout: Duration,
) -> anyhow::Result<()> {
    let until = Instant::now() + timeout;
    loop {
        if let Ok(health) = client.health().await {
            if health["scheduler"]["hosts"].as_u64().unwrap_or(0) as usize >= n {
                return Ok(());
            }
        }
        if Instant::now() > until {
            bail!("fewer than {n} hosts registered within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
