//! A task seen to end has its output stored: the moment `trainyard submit
//! --wait` returns, `trainyard logs` prints every line its trainer printed
//! and `/v1/tasks/{id}/progress` holds every progress point, on SQLite and
//! PostgreSQL, and the task's progress is its trainer's last. And a report
//! the master takes from Redis (its host gone, the master down when the
//! attempt ended) still ends the task with the progress its trainer last
//! reported, which the master had never heard.

// `serial()` holds a std mutex across each whole test on purpose: the
// multi-process tests take the machine's ports and CPU one at a time.
#![allow(clippy::await_holding_lock)]

use crate::common;

use common::{read_trace, serial, traced, Setup, TestCluster};
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use trainyard_master::model::TaskStatus;

/// Episodes of each task: not a multiple of the trainer's checkpoint
/// interval (50), so its last progress event is an episode's.
const EPISODES: u64 = 230;
/// What the reference trainer prints for [`EPISODES`]: a line per episode,
/// one per checkpoint (every 50), and its result.
const STDOUT_LINES: usize = EPISODES as usize + 4 + 1;
/// Its progress events: the episodes and the checkpoints.
const PROGRESS_POINTS: usize = EPISODES as usize + 4;

async fn points(c: &TestCluster, id: u64) -> Vec<Value> {
    let url = format!(
        "{}/v1/tasks/{id}/progress?limit=10000",
        c.cluster.settings.api.url
    );
    let page: Value = c.http_get(&url).send().await.unwrap().json().await.unwrap();
    page["points"].as_array().cloned().unwrap_or_default()
}

async fn everything_is_stored_when_submit_wait_returns(backend: &'static str) {
    let _serial = serial();
    let mut setup = Setup::new(backend);
    setup.slots = 2;
    let c = TestCluster::start(setup, 1).await;
    let episodes = EPISODES.to_string();
    let printed = c.cli(&[
        "submit",
        "--adapter",
        "python-trainer",
        "--param",
        &format!("episodes={episodes}"),
        "--count",
        "2",
        "--wait",
    ]);
    let ids: Vec<u64> = printed
        .lines()
        .map_while(|l| l.trim().parse().ok())
        .collect();
    assert_eq!(ids.len(), 2, "{printed}");
    // Read at once, before anything else: nothing waits for a recorder.
    let mut read = vec![];
    for id in &ids {
        let logs = c.cli(&["logs", &id.to_string(), "--tail", "10000"]);
        read.push((*id, logs, points(&c, *id).await));
    }
    for (id, logs, points) in read {
        let trainer: Vec<&str> = logs.lines().filter(|l| l.starts_with('{')).collect();
        assert_eq!(
            trainer.len(),
            STDOUT_LINES,
            "task {id}: the trainer's lines when --wait returned:\n{logs}\n{}",
            c.all_logs()
        );
        assert!(
            trainer[STDOUT_LINES - 1].contains("\"type\":\"result\""),
            "{logs}"
        );
        assert_eq!(
            points.len(),
            PROGRESS_POINTS,
            "task {id}: progress points when --wait returned\n{}",
            c.all_logs()
        );
        let last = points.last().unwrap();
        assert_eq!(last["episode"], EPISODES, "{last}");
        let task = c.task(id).await.task;
        assert_eq!(task.status, TaskStatus::Completed);
        let progress = task.progress.expect("the task's progress");
        assert_eq!(progress.episode, Some(EPISODES), "the trainer's last");
        assert_eq!(
            progress.episode_return,
            last["episode_return"].as_f64(),
            "the task's progress is its last stored point"
        );
    }
}

#[tokio::test]
async fn everything_a_task_printed_is_stored_when_submit_wait_returns_on_sqlite() {
    everything_is_stored_when_submit_wait_returns("sqlite").await;
}

#[tokio::test]
async fn everything_a_task_printed_is_stored_when_submit_wait_returns_on_postgres() {
    everything_is_stored_when_submit_wait_returns("postgres").await;
}

/// The master is down as the attempt ends, and its host dies before the
/// master is back: the report is taken from Redis, and it brings the
/// progress the trainer last reported, which the master never heard.
#[tokio::test]
async fn a_report_taken_from_redis_ends_the_task_with_its_trainers_last_progress() {
    let _serial = serial();
    let mut setup = Setup::new("sqlite");
    // The trainer outlives the master's absence: its host's leases hold.
    setup.timers.lease_ttl = Duration::from_secs(30);
    let mut c = TestCluster::start(setup, 1).await;
    let id = c
        .submit(json!({
            "adapter": "test-trainer",
            "params": {"episodes": 150, "step_delay_ms": 10, "trace_file": "trace.jsonl"},
        }))
        .await;
    c.wait_for(id, Duration::from_secs(120), "progress", |d| {
        d.task.status == TaskStatus::Running && d.task.progress.is_some()
    })
    .await;
    c.master().kill();
    // The trainer ends, and its host stores the report in Redis.
    let mut redis = c.redis().await;
    let member = format!("{id}@1");
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let pending: Vec<String> = redis::cmd("SMEMBERS")
            .arg("reports:pending")
            .query_async(&mut redis)
            .await
            .unwrap();
        if pending.contains(&member) {
            break;
        }
        assert!(
            Instant::now() < until,
            "no report in Redis\n{}",
            c.all_logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(traced(&read_trace(&c.trace("trace.jsonl")), 1, "end"));
    c.host("host-1").kill();
    c.start_master().await;

    let done = c
        .wait_for_status(id, TaskStatus::Completed, Duration::from_secs(60))
        .await;
    assert!(
        c.log("master").contains("from=\"redis\"") || c.log("master").contains("from=redis"),
        "the report came from Redis\n{}",
        c.all_logs()
    );
    assert_eq!(
        done.task.progress.as_ref().and_then(|p| p.episode),
        Some(150),
        "the task ended with older progress than its trainer's last: {:?}",
        done.task.progress
    );
    let stored = points(&c, id).await;
    assert_eq!(
        stored.last().map(|p| p["episode"].clone()),
        Some(json!(150)),
        "the last point stored is the trainer's last"
    );
}
