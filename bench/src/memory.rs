//! Benchmark 7: memory. A real host process, idle and then running trainer
//! tasks (its own RSS, and separately the per-task supervisor processes it
//! starts; the trainers' own memory is theirs). A master holding a thousand
//! light hosts and 100,000 tasks — all queued, the case where the master
//! keeps every one of them in memory (terminal tasks live only in the
//! database) — and how long a Prometheus scrape of `/metrics` takes then.

use super::env::BenchEnv;
use super::fleet::{Fleet, FleetSpec};
use super::probe::{children, rss_bytes, Sampler};
use super::report::{human, mib, Row};
use super::storm::wait_registered;
use anyhow::Context;
use serde_json::json;
use std::time::{Duration, Instant};
use trainyard_master::model::{NewTask, TaskStatus};
use trainyard_master::store::{Batch, Store};

pub async fn run(env: &BenchEnv) -> anyhow::Result<Vec<Row>> {
    let hosts = env.size(1_000, 10);
    let tasks = env.size(100_000, 500);
    let busy_slots: usize = env.size(4, 1);
    let mut stage = env.stage("memory", "sqlite").await?;
    let c = &mut stage.cluster;
    c.settings.host.slots = busy_slots as u32;
    c.settings.host.adapters = vec![trainyard::settings::AdapterEntry::new(
        env.adapter("python-trainer"),
        &["python3"],
    )];
    c.write_config()?;

    // The tasks in the table before the master starts: queued for an
    // adapter no host carries, so they stay queued.
    let seed_time = seed_parked(&stage.database.url, tasks).await?;

    let mut master = c.spawn_master()?;
    let client = c.wait_for_master(Duration::from_secs(120)).await?;
    let master_pid = master.pid().context("the master has no pid")?;
    let with_tasks = rss_bytes(master_pid).unwrap_or_default();
    let sampler = Sampler::start(master_pid, Duration::from_millis(100));
    let fleet = Fleet::start(c, &FleetSpec::noop(env, hosts, 1)).await?;
    wait_registered(&client, hosts, Duration::from_secs(120)).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let with_hosts = rss_bytes(master_pid).unwrap_or_default();
    let master_peak = sampler.finish().rss;
    let scrape = scrape_metrics(client.base_url(), env.size(20, 3)).await?;

    // A real host process, idle and then busy.
    let mut host = c.spawn_host("host-m")?;
    wait_registered(&client, hosts + 1, Duration::from_secs(60)).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let host_pid = host.pid().context("the host has no pid")?;
    let idle = rss_bytes(host_pid).unwrap_or_default();
    let mut ids = vec![];
    for _ in 0..busy_slots {
        ids.push(
            client
                .submit(&json!({
                    "adapter": "python-trainer",
                    "params": {"episodes": 300, "step_delay_ms": 10},
                }))
                .await?,
        );
    }
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let mut running = 0;
        for id in &ids {
            let d = client.task(*id).await?;
            if d.task.status == TaskStatus::Running && d.task.progress.is_some() {
                running += 1;
            }
        }
        if running == ids.len() {
            break;
        }
        anyhow::ensure!(Instant::now() < until, "the trainer tasks never all ran");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let busy = rss_bytes(host_pid).unwrap_or_default();
    let supervisors: Vec<u64> = children(host_pid)
        .into_iter()
        .filter_map(rss_bytes)
        .collect();
    let supervisor_each = supervisors.iter().sum::<u64>() / supervisors.len().max(1) as u64;
    let per_task = busy.saturating_sub(idle) / busy_slots as u64;
    for id in &ids {
        let _ = client.cancel(*id).await;
    }
    host.stop(Duration::from_secs(10));
    fleet.shutdown().await;
    master.stop(Duration::from_secs(10));

    Ok(vec![
        Row::info(
            "memory",
            "host RSS, idle (python-trainer loaded)",
            mib(idle),
        ),
        Row::info(
            "memory",
            format!("host RSS per running trainer task ({busy_slots} running)"),
            format!(
                "{} (host total {}); plus {} per task in its supervisor process ({} seen)",
                mib(per_task),
                mib(busy),
                mib(supervisor_each),
                supervisors.len()
            ),
        ),
        Row::info(
            "memory",
            format!("master RSS with {tasks} queued tasks, no hosts"),
            format!(
                "{} (seeding the table took {:.1} s)",
                mib(with_tasks),
                seed_time.as_secs_f64()
            ),
        ),
        Row::checked(
            "memory",
            format!("master RSS with {hosts} hosts and {tasks} tasks (peak while they connected)"),
            format!(
                "{} ({} peak)",
                mib(with_hosts),
                mib(master_peak.max(with_hosts))
            ),
            "< 200 MiB",
            master_peak.max(with_hosts) < 200 << 20,
        ),
        Row::checked(
            "memory",
            format!("GET /metrics with {hosts} hosts and {tasks} tasks"),
            format!(
                "median {}, worst {} of {} scrapes ({} KiB)",
                human(scrape.median),
                human(scrape.worst),
                scrape.count,
                scrape.bytes / 1024
            ),
            "< 50 ms",
            scrape.worst < METRICS_SCRAPE_BUDGET,
        ),
    ])
}

/// Puts `n` tasks in the table, queued for an adapter no host carries (so
/// they stay queued), a thousand per transaction; returns how long it took.
pub async fn seed_parked(url: &str, n: usize) -> anyhow::Result<Duration> {
    let store = Store::connect(url).await?;
    let seeded = Instant::now();
    for start in (0..n).step_by(1000) {
        let inserts = (start..(start + 1000).min(n))
            .map(|i| NewTask {
                name: Some(format!("parked-{i}")),
                adapter: "parked".into(),
                version: None,
                kind: "parked".into(),
                params: r#"{"episodes":300}"#.into(),
                priority: 0,
                max_attempts: 3,
                timeout_secs: None,
                progress_timeout_secs: None,
                resources: Default::default(),
                team: "default".into(),
            })
            .collect();
        store
            .apply(&Batch {
                sweeps: vec![],
                inserts,
                writes: vec![],
                now_ms: trainyard_proto::now_ms(),
                points: vec![],
            })
            .await?;
    }
    store.close().await;
    Ok(seeded.elapsed())
}

/// What a Prometheus scrape of the master may take at this size.
const METRICS_SCRAPE_BUDGET: Duration = Duration::from_millis(50);

/// Timings of `count` scrapes of the master's `/metrics`, one after another.
struct Scrapes {
    count: usize,
    median: Duration,
    worst: Duration,
    /// The size of the last exposition.
    bytes: usize,
}

async fn scrape_metrics(base_url: &str, count: usize) -> anyhow::Result<Scrapes> {
    let http = reqwest::Client::new();
    let url = format!("{}/metrics", base_url.trim_end_matches('/'));
    let mut took = vec![];
    let mut bytes = 0;
    for _ in 0..count {
        let started = Instant::now();
        let response = http.get(&url).send().await?.error_for_status()?;
        bytes = response.bytes().await?.len();
        took.push(started.elapsed());
    }
    took.sort();
    Ok(Scrapes {
        count,
        median: took[took.len() / 2],
        worst: *took.last().context("no scrape")?,
        bytes,
    })
}
