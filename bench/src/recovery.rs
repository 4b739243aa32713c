//! Benchmark 4: how fast a dead host's task runs again. A real host process
//! runs the reference trainer; it is killed with SIGKILL mid-task; the
//! figures are the times from the kill until the master dispatches the next
//! attempt, until another host starts it, and until the task completes
//! (resumed from its checkpoint).
//!
//! The master may requeue only after the lease has lapsed, and it notices at
//! its next sweep, so recovery follows
//!
//! ```text
//! kill → redispatch ≤ (lease TTL − time since the last renewal) + sweep interval
//!                   ≤ lease TTL + sweep interval
//! ```
//!
//! The lease's real expiry is read from Redis (`PTTL`) right after the
//! kill, and every round checks the redispatch did not come before it.

use super::env::BenchEnv;
use super::report::{median_p99, Row};
use anyhow::{bail, Context};
use redis::AsyncCommands;
use serde_json::json;
use std::time::{Duration, Instant};
use trainyard::client::ApiClient;
use trainyard::cluster::Process;
use trainyard_master::model::{TaskDetail, TaskStatus};
use trainyard_proto::{now_ms, Timers};
use trainyard_testkit::fast_timers;

/// One kill and what followed, in ms after the kill.
struct Round {
    lease_left_ms: i64,
    redispatched_ms: i64,
    started_ms: i64,
    completed_ms: i64,
}

pub async fn run(env: &BenchEnv) -> anyhow::Result<Vec<Row>> {
    let mut rows = vec![];
    let runs: Vec<(&str, Timers, usize)> = if env.smoke {
        vec![("fast", fast_timers(), 1)]
    } else {
        vec![
            ("fast", fast_timers(), 5),
            ("default", Timers::default(), 1),
        ]
    };
    for (name, timers, rounds) in runs {
        rows.extend(timers_run(env, name, timers, rounds).await?);
    }
    Ok(rows)
}

async fn timers_run(
    env: &BenchEnv,
    name: &str,
    timers: Timers,
    rounds: usize,
) -> anyhow::Result<Vec<Row>> {
    let mut stage = env.stage(&format!("recovery-{name}"), "sqlite").await?;
    let c = &mut stage.cluster;
    c.settings.timers = timers.clone();
    c.settings.host.slots = 1;
    c.settings.host.adapters = vec![trainyard::settings::AdapterEntry::new(
        env.adapter("python-trainer"),
        &["python3"],
    )];
    c.write_config()?;
    let _master = c.spawn_master()?;
    let client = c.wait_for_master(Duration::from_secs(30)).await?;
    let mut hosts: Vec<Process> = vec![c.spawn_host("host-a")?, c.spawn_host("host-b")?];
    c.wait_for_hosts(&client, 2, Duration::from_secs(30))
        .await?;
    let mut redis = redis::Client::open(stage.redis.url())?
        .get_multiplexed_async_connection()
        .await?;
    let bound_ms = (timers.lease_ttl + timers.sweep_interval).as_millis() as i64;

    let mut done = vec![];
    for round in 0..rounds {
        let id = client
            .submit(&json!({
                "adapter": "python-trainer",
                "params": {"episodes": 300, "step_delay_ms": 10, "checkpoint_every": 20},
            }))
            .await?;
        let detail = wait(&client, id, Duration::from_secs(60), |d| {
            d.task.status == TaskStatus::Running && d.task.checkpoint.is_some()
        })
        .await
        .context("the task never ran and checkpointed")?;
        let victim = detail
            .task
            .host
            .clone()
            .context("a running task has a host")?;
        let process = hosts
            .iter_mut()
            .find(|p| p.name == victim)
            .context("the task runs on an unknown host")?;
        process.kill();
        let killed_ms = now_ms();
        let killed = Instant::now();
        let lease_left_ms: i64 = redis
            .pttl(format!("{}task:{id}:workerId", c.settings.redis_key_prefix))
            .await?;

        let limit = timers.lease_ttl + timers.sweep_interval + Duration::from_secs(60);
        let finished = wait(&client, id, limit, |d| d.task.status.is_terminal()).await?;
        if finished.task.status != TaskStatus::Completed {
            bail!(
                "round {round}: the task ended {} ({:?}) instead of completing",
                finished.task.status.as_str(),
                finished.task.error
            );
        }
        let second = finished
            .attempts
            .iter()
            .find(|a| a.attempt == 2)
            .context("the task completed without a second attempt")?;
        let r = Round {
            lease_left_ms,
            redispatched_ms: second.dispatched_at_ms - killed_ms,
            started_ms: second.started_at_ms.context("attempt 2 never started")? - killed_ms,
            completed_ms: finished.task.finished_at_ms.unwrap_or_default() - killed_ms,
        };
        if r.redispatched_ms < r.lease_left_ms {
            bail!(
                "round {round}: attempt 2 was dispatched {} ms after the kill, before the lease lapsed ({} ms)",
                r.redispatched_ms,
                r.lease_left_ms
            );
        }
        eprintln!(
            "   {name} round {round}: lease lapsed +{} ms, redispatched +{} ms, started +{} ms, completed +{} ms ({:.1} s wall)",
            r.lease_left_ms,
            r.redispatched_ms,
            r.started_ms,
            r.completed_ms,
            killed.elapsed().as_secs_f64()
        );
        done.push(r);
        // Back to two hosts for the next round.
        if let Some(p) = hosts.iter_mut().find(|p| p.name == victim) {
            p.restart()?;
        }
        c.wait_for_hosts(&client, 2, Duration::from_secs(30))
            .await?;
    }
    for h in &mut hosts {
        h.stop(Duration::from_secs(5));
    }

    let ttl = timers.lease_ttl.as_millis();
    let sweep = timers.sweep_interval.as_millis();
    let mut redispatch: Vec<f64> = done.iter().map(|r| r.redispatched_ms as f64).collect();
    let mut started: Vec<f64> = done.iter().map(|r| r.started_ms as f64).collect();
    let mut completed: Vec<f64> = done.iter().map(|r| r.completed_ms as f64).collect();
    let worst_start = started.iter().cloned().fold(0.0, f64::max);
    let (d50, _) = median_p99(&mut redispatch).unwrap_or_default();
    let (s50, _) = median_p99(&mut started).unwrap_or_default();
    let (c50, _) = median_p99(&mut completed).unwrap_or_default();
    let rounds = done.len();
    let target_ms = bound_ms + 1000;
    Ok(vec![
        Row::info(
            "recovery",
            format!("{name} timers"),
            format!(
                "lease TTL {ttl} ms, sweep every {sweep} ms, heartbeat {} ms; {rounds} kill(s)",
                timers.heartbeat_interval.as_millis()
            ),
        ),
        Row::checked(
            "recovery",
            format!("{name}: kill → running elsewhere (median; worst)"),
            format!(
                "{:.2} s; {:.2} s (redispatch {:.2} s)",
                s50 / 1e3,
                worst_start / 1e3,
                d50 / 1e3
            ),
            format!(
                "≤ TTL + sweep + 1 s = {:.2} s, never before the lease lapsed",
                target_ms as f64 / 1e3
            ),
            worst_start <= target_ms as f64,
        ),
        Row::info(
            "recovery",
            format!("{name}: kill → completed, resumed from its checkpoint (median)"),
            format!("{:.2} s", c50 / 1e3),
        ),
    ])
}

async fn wait(
    client: &ApiClient,
    id: u64,
    timeout: Duration,
    done: impl Fn(&TaskDetail) -> bool,
) -> anyhow::Result<TaskDetail> {
    let until = Instant::now() + timeout;
    loop {
        let detail = client.task(id).await?;
        if done(&detail) {
            return Ok(detail);
        }
        if Instant::now() > until {
            bail!(
                "task {id} is {} after {timeout:?}",
                detail.task.status.as_str()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
