//! The scale benchmark: one master, on SQLite (the embedded default), with
//! 1,000,000 queued tasks and 5,000 connected light hosts × 8 slots.
//!
//! The queued tasks are for an adapter no host carries, so they stay queued
//! the whole run: the master holds every one of them in memory and its
//! scheduler passes over all of them each turn. Reported:
//! - the master's RSS with the queue alone, with every host connected, and
//!   its peak;
//! - how long the master takes to admit them all, from its start to its API
//!   answering with every task loaded, and to every host registered: at
//!   first start and again after a SIGKILL and restart;
//! - dispatch latency at that size: no-work tasks submitted at a steady
//!   rate beside the queue, from submission to completion.

use super::api::{collect, submit, wait_terminal, Sent};
use super::dispatch::PACE;
use super::env::BenchEnv;
use super::fleet::{Fleet, FleetSpec};
use super::memory::seed_parked;
use super::probe::{rss_bytes, Sampler};
use super::report::{human, median_p99, mib, Row};
use super::storm::wait_registered;
use anyhow::{ensure, Context};
use serde_json::json;
use std::time::{Duration, Instant};
use trainyard::client::ApiClient;
use trainyard_master::model::TaskStatus;

/// Longest any stage may take before the run is given up.
const PATIENCE: Duration = Duration::from_secs(600);
/// The master's memory at this size, the performance issue's goal.
const RSS_GOAL: u64 = 1 << 30;

pub async fn run(env: &BenchEnv) -> anyhow::Result<Vec<Row>> {
    let hosts = env.size(5_000, 10);
    let slots = env.size(8, 2);
    let queued = env.size(1_000_000, 1_000);
    let mut stage = env.stage("scale", "sqlite").await?;
    let c = &mut stage.cluster;
    // Room for every host, above the default limit of connections.
    c.settings.master.max_connections = c.settings.master.max_connections.max(hosts + 64);
    c.write_config()?;
    let seeding = seed_parked(&stage.database.url, queued).await?;

    let started = Instant::now();
    let mut master = c.spawn_master()?;
    let client = admitted(c, queued).await?;
    let first_admit = started.elapsed();
    let pid = master.pid().context("the master has no pid")?;
    let queue_rss = rss_bytes(pid).unwrap_or_default();
    let sampler = Sampler::start(pid, Duration::from_millis(100));
    let fleet = Fleet::start(c, &FleetSpec::noop(env, hosts, slots)).await?;
    wait_registered(&client, hosts, PATIENCE).await?;
    let first_join = started.elapsed();
    let hosts_rss = rss_bytes(pid).unwrap_or_default();

    let latency = paced_latency(&client, env.size(500.0, 50.0), env.size(5, 1)).await?;
    let peak = sampler.finish().rss.max(hosts_rss);

    master.kill();
    let restarted = Instant::now();
    let mut master = c.spawn_master()?;
    let client = admitted(c, queued).await?;
    let second_admit = restarted.elapsed();
    wait_registered(&client, hosts, PATIENCE).await?;
    let second_join = restarted.elapsed();
    let restarted_rss = master.pid().and_then(rss_bytes).unwrap_or_default();
    fleet.shutdown().await;
    master.stop(Duration::from_secs(10));

    let slots_total = hosts * slots as usize;
    Ok(vec![
        Row::info(
            "scale",
            "setup (sqlite)",
            format!(
                "{queued} queued tasks (seeding took {:.1} s), {hosts} light hosts × {slots} slots = {slots_total} slots",
                seeding.as_secs_f64()
            ),
        ),
        Row::checked(
            "scale",
            "master RSS: queue alone / every host connected / peak",
            format!("{} / {} / {}", mib(queue_rss), mib(hosts_rss), mib(peak)),
            "< 1 GiB",
            peak.max(restarted_rss) < RSS_GOAL,
        ),
        Row::info(
            "scale",
            "start → every task admitted / every host registered",
            format!("{} / {}", human(first_admit), human(first_join)),
        ),
        Row::info(
            "scale",
            "SIGKILL and restart → every task admitted / every host registered",
            format!(
                "{} / {} (RSS then {})",
                human(second_admit),
                human(second_join),
                mib(restarted_rss)
            ),
        ),
        Row::info(
            "scale",
            "submit→complete of no-work tasks beside the queue",
            format!(
                "p50 {:.1} ms, p99 {:.1} ms at {:.0} tasks/s ({} tasks)",
                latency.p50, latency.p99, latency.rate, latency.count
            ),
        ),
    ])
}

/// Waits for the master's API, then checks it holds every queued task.
async fn admitted(c: &trainyard::cluster::Cluster, queued: usize) -> anyhow::Result<ApiClient> {
    let client = c.wait_for_master(PATIENCE).await?;
    let health = client.health().await?;
    let pending = health["tasks"]["PENDING"].as_u64().unwrap_or(0) as usize;
    ensure!(
        pending >= queued,
        "the master answers holding {pending} queued tasks of {queued}"
    );
    Ok(client)
}

/// Submission-to-completion latency of paced no-work tasks.
struct Latency {
    count: usize,
    /// The rate reached, tasks submitted per second.
    rate: f64,
    p50: f64,
    p99: f64,
}

/// Submits no-work tasks at up to `rate` per second for `seconds` (slower
/// when each submission takes longer than its share), waits for them all,
/// and checks each completed in one run.
async fn paced_latency(client: &ApiClient, rate: f64, seconds: u64) -> anyhow::Result<Latency> {
    let params = json!({ "spawn": false });
    let per_tick = ((rate * PACE.as_secs_f64()).round() as usize).max(1);
    let mut sent = Sent::new();
    let start = Instant::now();
    let mut tick = tokio::time::interval(PACE);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while start.elapsed() < Duration::from_secs(seconds) {
        tick.tick().await;
        submit(client, &params, per_tick, &mut sent).await?;
    }
    let reached = sent.len() as f64 / start.elapsed().as_secs_f64();
    // Only these tasks can end: the queued ones have no host.
    wait_terminal(client, sent.len(), PATIENCE).await?;
    let done = collect(client, &sent).await?;
    if let Some(t) = done
        .iter()
        .find(|t| t.status != TaskStatus::Completed || t.runs != 1)
    {
        anyhow::bail!(
            "task {} ended {} after {} runs; every no-work task must complete in one",
            t.id,
            t.status.as_str(),
            t.runs
        );
    }
    let mut latencies: Vec<f64> = done.iter().map(|t| t.latency_ms).collect();
    let (p50, p99) = median_p99(&mut latencies).context("no task was submitted")?;
    Ok(Latency {
        count: done.len(),
        rate: reached,
        p50,
        p99,
    })
}
