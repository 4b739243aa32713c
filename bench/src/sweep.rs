//! Benchmark 6: what the recovery sweep and the start-up reconciliation cost
//! with 10,000 RUNNING tasks — time per sweep, and Redis round trips per
//! sweep, which must not grow with the number of tasks.
//!
//! The tasks are written straight into the database through the master's
//! store (inserted, dispatched, started), and their leases straight into
//! Redis, both keys of each, as a host's `acquire.lua` writes them, with a
//! ten-minute TTL so none lapses during the run. Redis already holds an
//! epoch, so the master trusts what it reads from the first sweep on: this
//! is a master restarted over an intact Redis, the path that gives up
//! attempts whose lease is missing. Then a real master starts with fast
//! sweeps, and `/v1/health` is polled for the figures the master records
//! itself (`scheduler.reconcile`, `scheduler.last_sweep`), each sweep
//! recognised by the `scheduler.sweeps` counter.
//!
//! No host connects: with every lease in place the sweep keeps every task,
//! and the run checks that it did — all N still RUNNING, nothing given up.

use super::env::BenchEnv;
use super::report::{human, median_p99, Row};
use super::Backends;
use anyhow::{bail, ensure, Context};
use std::time::{Duration, Instant};
use trainyard::client::ApiClient;
use trainyard_master::model::NewTask;
use trainyard_master::recovery::leases::MAX_ROUND_TRIPS;
use trainyard_master::scheduler::{ReconcileStats, SweepStats};
use trainyard_master::store::{Batch, Store, Write};
use trainyard_proto::keys::{self, Keys};
use trainyard_proto::{now_ms, AttemptRef, HostId, TaskId, WorkerId};

const BENCH: &str = "sweep";
/// How often the master sweeps during the run: fast, to collect samples
/// quickly; the cost of a sweep does not depend on the interval.
const SWEEP_INTERVAL: Duration = Duration::from_millis(250);
/// Hosts the tasks are spread over (`sweep-h0` … `sweep-h99`).
const HOSTS: usize = 100;
/// Tasks (or keys) per database batch and per Redis pipeline while seeding.
const CHUNK: usize = 1000;
/// The leases' TTL: far longer than the run, so none lapses.
const LEASE_TTL: Duration = Duration::from_secs(600);
/// The target for one sweep of 10,000 live tasks.
const SWEEP_TARGET: Duration = Duration::from_millis(50);

pub async fn run(env: &BenchEnv, backends: Backends) -> anyhow::Result<Vec<Row>> {
    let mut rows = vec![];
    for backend in backends.list() {
        rows.extend(one_backend(env, backend).await?);
    }
    Ok(rows)
}

async fn one_backend(env: &BenchEnv, backend: &str) -> anyhow::Result<Vec<Row>> {
    let tasks: usize = env.size(10_000, 200);
    let wanted: usize = env.size(20, 3);
    let mut stage = env.stage(BENCH, backend).await?;
    stage.cluster.settings.timers.sweep_interval = SWEEP_INTERVAL;
    stage.cluster.settings.timers.validate()?;
    let keys = Keys::new(stage.cluster.settings.redis_key_prefix.clone());

    let seeded = seed_running(&stage.database.url, tasks).await?;
    write_leases(&stage.redis.url(), &keys, &seeded).await?;

    stage.cluster.write_config()?;
    let mut master = stage.cluster.spawn_master()?;
    let client = stage
        .cluster
        .wait_for_master(Duration::from_secs(60))
        .await?;
    let timeout = Duration::from_secs(60) + SWEEP_INTERVAL * wanted as u32 * 4;
    let watched = watch_sweeps(&client, wanted, timeout).await;
    let health = client.health().await;
    master.stop(Duration::from_secs(10));
    let watched = watched
        .with_context(|| format!("see {}", stage.cluster.dir.join("master.log").display()))?;

    // The measurement only holds if the sweeps kept every task.
    let running = health?["tasks"]["RUNNING"].as_u64().unwrap_or(0);
    ensure!(
        running == tasks as u64,
        "{running} of {tasks} tasks still RUNNING after the sweeps: with every lease held, none may be requeued"
    );
    for s in &watched.samples {
        ensure!(
            s.tasks == tasks && s.given_up == 0,
            "a sweep read {} live tasks and gave up {} (expected {tasks} and 0)",
            s.tasks,
            s.given_up
        );
    }
    let r = watched.reconcile;
    ensure!(
        r.leases == tasks && r.confirmed == tasks,
        "reconciliation found {} leases, confirmed {} (expected {tasks})",
        r.leases,
        r.confirmed
    );

    Ok(rows(backend, tasks, &watched))
}

/// What the poller saw.
struct Watched {
    reconcile: ReconcileStats,
    /// Distinct sweeps, in order.
    samples: Vec<SweepStats>,
    /// Sweeps that ran between two polls and were not seen.
    missed: u64,
    /// The master's own record of its slowest sweep.
    slowest: SweepStats,
}

/// Inserts `n` tasks and takes each to RUNNING at attempt 1 on worker
/// `sweep-h{i % 100}/{i / 100}`, through the master's own store (which also
/// creates the schema). Returns each task with its worker.
async fn seed_running(url: &str, n: usize) -> anyhow::Result<Vec<(TaskId, WorkerId)>> {
    let store = Store::connect(url).await?;
    let mut seeded = Vec::with_capacity(n);
    let deadline_ms = now_ms() + LEASE_TTL.as_millis() as i64;
    while seeded.len() < n {
        let count = CHUNK.min(n - seeded.len());
        let inserts = (0..count)
            .map(|_| NewTask {
                name: None,
                adapter: "noop".into(),
                version: None,
                kind: "noop".into(),
                params: "{}".into(),
                priority: 0,
                max_attempts: 3,
                timeout_secs: None,
                progress_timeout_secs: None,
                resources: Default::default(),
                team: "default".into(),
            })
            .collect();
        let batch = Batch {
            sweeps: vec![],
            inserts,
            writes: vec![],
            now_ms: now_ms(),
            points: vec![],
        };
        let ids = store.apply(&batch).await?.inserted;
        ensure!(
            ids.len() == count,
            "inserted {} of {count} tasks",
            ids.len()
        );
        let chunk: Vec<(TaskId, WorkerId)> = ids
            .into_iter()
            .enumerate()
            .map(|(j, id)| {
                let i = seeded.len() + j;
                let host = HostId::new(format!("sweep-h{}", i % HOSTS))?;
                Ok((id, host.worker((i / HOSTS) as u32)))
            })
            .collect::<anyhow::Result<_>>()?;
        let dispatches = chunk
            .iter()
            .map(|(task, worker)| Write::Dispatch {
                task: *task,
                from_attempt: 0,
                attempt: 1,
                host: worker.host.to_string(),
                deadline_ms,
                version: Some("0.1.0".into()),
            })
            .collect();
        let starts = chunk
            .iter()
            .map(|(task, worker)| Write::Start {
                attempt: AttemptRef::new(*task, 1),
                slot: worker.slot,
                assignment: None,
            })
            .collect();
        for writes in [dispatches, starts] {
            let result = store
                .apply(&Batch {
                    sweeps: vec![],
                    inserts: vec![],
                    writes,
                    now_ms: now_ms(),
                    points: vec![],
                })
                .await?;
            ensure!(
                result.applied.iter().all(|a| *a),
                "a seeding write did not apply"
            );
        }
        seeded.extend(chunk);
    }
    store.close().await;
    Ok(seeded)
}

/// Writes both lease keys of every task (what `acquire.lua` sets), pipelined,
/// and the dataset's epoch, so the master trusts the leases it reads.
async fn write_leases(
    redis_url: &str,
    keys: &Keys,
    seeded: &[(TaskId, WorkerId)],
) -> anyhow::Result<()> {
    let mut con = redis::Client::open(redis_url)?
        .get_multiplexed_async_connection()
        .await?;
    let ttl = LEASE_TTL.as_millis() as u64;
    for chunk in seeded.chunks(CHUNK) {
        let mut pipe = redis::pipe();
        for (task, worker) in chunk {
            pipe.pset_ex(keys.task_owner(*task), keys::owner_value(worker, 1), ttl)
                .ignore()
                .pset_ex(
                    keys.worker_task(worker),
                    keys::attempt_value(AttemptRef::new(*task, 1)),
                    ttl,
                )
                .ignore();
        }
        pipe.query_async::<()>(&mut con).await?;
    }
    redis::cmd("SET")
        .arg(keys.epoch())
        .arg("sweep-bench")
        .query_async::<()>(&mut con)
        .await?;
    Ok(())
}

/// Polls `/v1/health` until the reconciliation's figures and `wanted`
/// distinct sweeps have been seen.
async fn watch_sweeps(
    client: &ApiClient,
    wanted: usize,
    timeout: Duration,
) -> anyhow::Result<Watched> {
    let until = Instant::now() + timeout;
    let mut samples = vec![];
    let mut seen_count = 0;
    let mut missed = 0;
    loop {
        let health = client.health().await?;
        let scheduler = &health["scheduler"];
        let count = scheduler["sweeps"].as_u64().unwrap_or(0);
        if count > seen_count {
            if let Ok(sample) =
                serde_json::from_value::<SweepStats>(scheduler["last_sweep"].clone())
            {
                if !samples.is_empty() {
                    missed += count - seen_count - 1;
                }
                samples.push(sample);
                seen_count = count;
            }
        }
        let reconcile = serde_json::from_value::<ReconcileStats>(scheduler["reconcile"].clone());
        let slowest = serde_json::from_value::<SweepStats>(scheduler["slowest_sweep"].clone());
        if samples.len() >= wanted {
            let reconcile = reconcile
                .context("the master recorded no start-up reconciliation (was Redis reachable?)")?;
            return Ok(Watched {
                reconcile,
                samples,
                missed,
                slowest: slowest.context("the master recorded no slowest sweep")?,
            });
        }
        if Instant::now() > until {
            bail!(
                "saw {} of {wanted} sweeps within {timeout:?} (health: {scheduler})",
                samples.len()
            );
        }
        tokio::time::sleep(SWEEP_INTERVAL / 3).await;
    }
}

fn rows(backend: &str, tasks: usize, w: &Watched) -> Vec<Row> {
    let us = |v: u64| Duration::from_micros(v);
    let r = &w.reconcile;
    // Keys in Redis: two lease keys per task and the epoch.
    let keyspace = 2 * tasks + 1;
    // A round trip per SCAN step; a step returns about SCAN COUNT (1,000)
    // keys, so twice that many steps is generous — and a round trip per
    // lease would be 20 times over.
    let reconcile_bound = keyspace / 500 + 2;
    let mut durations: Vec<f64> = w.samples.iter().map(|s| s.duration_us as f64).collect();
    let (median, p99) = median_p99(&mut durations).unwrap_or_default();
    let mut redis: Vec<f64> = w.samples.iter().map(|s| s.redis_us as f64).collect();
    let (redis_median, _) = median_p99(&mut redis).unwrap_or_default();
    let rt_min = w.samples.iter().map(|s| s.round_trips).min().unwrap_or(0);
    let rt_max = w.samples.iter().map(|s| s.round_trips).max().unwrap_or(0);
    let round_trips = if rt_min == rt_max {
        format!("{rt_max} per sweep")
    } else {
        format!("{rt_min}–{rt_max} per sweep")
    };
    let median = Duration::from_micros(median as u64);
    vec![
        Row::info(
            BENCH,
            format!("setup ({backend})"),
            format!(
                "{tasks} RUNNING tasks on {HOSTS} hosts' leases, Redis epoch intact, \
                 sweep every {}; {} sweeps sampled ({} between polls unseen)",
                human(SWEEP_INTERVAL),
                w.samples.len(),
                w.missed
            ),
        ),
        Row::info(
            BENCH,
            format!("start-up reconciliation, {} leases ({backend})", r.leases),
            format!(
                "{} (Redis {}), {} confirmed",
                human(us(r.duration_us)),
                human(us(r.redis_us)),
                r.confirmed
            ),
        ),
        Row::checked(
            BENCH,
            format!("reconciliation round trips, {keyspace} keys in Redis ({backend})"),
            r.round_trips.to_string(),
            format!("one per SCAN step (≤ {reconcile_bound})"),
            (r.round_trips as usize) <= reconcile_bound,
        ),
        Row::checked(
            BENCH,
            format!("sweep, {tasks} RUNNING tasks ({backend}), median"),
            format!(
                "{} (Redis {})",
                human(median),
                human(Duration::from_micros(redis_median as u64))
            ),
            format!("< {}", human(SWEEP_TARGET)),
            median < SWEEP_TARGET,
        ),
        Row::info(
            BENCH,
            format!("sweep, {tasks} RUNNING tasks ({backend}), p99"),
            human(Duration::from_micros(p99 as u64)),
        ),
        Row::info(
            BENCH,
            format!("slowest sweep since start ({backend})"),
            format!(
                "{} (Redis {}, {} round trips)",
                human(us(w.slowest.duration_us)),
                human(us(w.slowest.redis_us)),
                w.slowest.round_trips
            ),
        ),
        Row::checked(
            BENCH,
            format!("Redis round trips per sweep ({backend})"),
            round_trips,
            format!("bounded: ≤ {MAX_ROUND_TRIPS}, whatever the task count"),
            rt_max <= MAX_ROUND_TRIPS,
        ),
    ]
}
