//! Stalled trainers (issue #42), on a real cluster and both databases: a
//! trainer that reports 20 episodes then blocks, as on a hung data loader,
//! is ended STALLED within its `progress_timeout_secs` and a sweep, with its
//! last lines in the reason, shows how long it has been quiet meanwhile (the
//! task's `quiet_for_ms`, `/metrics`), and resumes from its checkpoint
//! without using an attempt; a slow but steady trainer with the same
//! timeout, whose whole run is longer than it, is left alone.

// `serial()` holds a std mutex across each whole test on purpose: the
// multi-process tests take the machine's ports and CPU one at a time.
#![allow(clippy::await_holding_lock)]

use crate::common;

use common::{serial, verdict, Setup, TestCluster};
use serde_json::json;
use std::time::{Duration, Instant};
use trainyard_master::model::{AttemptOutcome, TaskStatus};

const LONG: Duration = Duration::from_secs(120);

/// The progress timeout of both trainers.
const PROGRESS_TIMEOUT: Duration = Duration::from_secs(4);

/// Reports episodes 1 to 40, a checkpoint before every fifth (so that the
/// newest progress is an episode); on its first attempt it blocks after
/// episode 20, saying so on stderr. A resumed attempt starts
/// after its checkpoint's episode and says where it started.
const HANGS_AFTER_20: &str = r#"
import json, os, sys, time
resume = os.environ.get("RESUME_FROM")
start = int(open(resume).read()) if resume else 0
for episode in range(start + 1, 41):
    time.sleep(0.02)
    if episode % 5 == 0:
        open("ckpt.txt", "w").write(str(episode))
        print("checkpoint ckpt.txt", flush=True)
    print(f"episode {episode}", flush=True)
    if episode == 20 and not resume:
        print("waiting for the data loader", file=sys.stderr, flush=True)
        while True:
            time.sleep(1)
open("verdict.txt", "w").write(json.dumps({"started_after": start}))
"#;

/// One episode a second for eight seconds: never quiet for its 4 s
/// progress timeout, though it runs twice as long.
const SLOW_BUT_STEADY: &str = r#"
import time
for episode in range(1, 9):
    time.sleep(1)
    print(f"episode {episode}", flush=True)
open("verdict.txt", "w").write('"steady"')
"#;

fn setup(backend: &'static str) -> Setup {
    Setup {
        adapters: vec![("script-trainer", vec!["python3"])],
        slots: 2,
        ..Setup::new(backend)
    }
}

async fn submit(c: &TestCluster, script: &str) -> u64 {
    c.submit(json!({
        "adapter": "script-trainer",
        "params": {"script": script},
        // One attempt: the stall must not use it.
        "max_attempts": 1,
        "progress_timeout_secs": PROGRESS_TIMEOUT.as_secs(),
    }))
    .await
}

/// Whether `/metrics` shows how long the attempt `task`/1 has been quiet.
async fn quiet_in_metrics(c: &TestCluster, task: u64) -> bool {
    let url = format!("{}/metrics", c.cluster.settings.api.url);
    let body = reqwest::get(&url).await.unwrap().text().await.unwrap();
    body.lines().any(|l| {
        l.starts_with("trainyard_attempt_quiet_seconds{")
            && l.contains(&format!("task=\"{task}\""))
            && l.contains("attempt=\"1\"")
    })
}

/// Waits for the hung trainer's episode 20, then sees it shown quiet in
/// the task and in `/metrics` before it is ended; returns when the test saw
/// episode 20 (ms since the epoch).
async fn goes_quiet_and_shows_it(c: &TestCluster, hung: u64) -> i64 {
    let at_20 = c
        .wait_for(hung, LONG, "episode 20", |d| {
            d.task.attempt == 1 && d.task.progress.as_ref().and_then(|p| p.episode) == Some(20)
        })
        .await;
    let seen_at_20 = common::now_ms();
    assert_eq!(at_20.task.progress_timeout_secs, Some(4));
    let quiet = c
        .wait_for(hung, LONG, "quiet for a second", |d| {
            d.task.attempt == 1 && d.quiet_for_ms.is_some_and(|q| q >= 1_000)
        })
        .await;
    assert_eq!(quiet.task.status, TaskStatus::Running);
    let until = Instant::now() + LONG;
    while !quiet_in_metrics(c, hung).await {
        assert!(
            c.task(hung).await.task.attempt == 1 && Instant::now() < until,
            "/metrics never showed the quiet attempt"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    seen_at_20
}

/// Waits for the hung trainer's first attempt to end, and checks it ended
/// STALLED in time with its last lines in the reason.
async fn ended_stalled_in_time(c: &TestCluster, hung: u64, seen_at_20: i64) {
    let ended = c
        .wait_for(hung, LONG, "attempt 1 ended", |d| {
            d.attempts.first().is_some_and(|a| a.outcome.is_some())
        })
        .await;
    let first = &ended.attempts[0];
    assert_eq!(first.outcome, Some(AttemptOutcome::Stalled), "{first:#?}");
    // The host counts from the last progress it read, which the master
    // heard (and this test saw) later: ending at most the timeout, one
    // sweep, the trainer's stop grace and a report's delivery on a loaded
    // machine after the test saw episode 20.
    let timers = &c.cluster.settings.timers;
    let bound =
        PROGRESS_TIMEOUT + timers.sweep_interval + timers.stop_grace + Duration::from_secs(2);
    let took = Duration::from_millis((first.finished_at_ms.unwrap() - seen_at_20).max(0) as u64);
    assert!(took <= bound, "stalled after {took:?}, more than {bound:?}");
    let reason = first.error.clone().unwrap_or_default();
    for expected in [
        "stalled: no progress for",
        "(progress timeout 4 s)",
        "episode 20",
        "waiting for the data loader",
    ] {
        assert!(reason.contains(expected), "{expected:?} not in: {reason}");
    }
}

async fn a_hung_trainer_is_ended_as_stalled_and_resumes(backend: &'static str) {
    let _serial = serial();
    let c = TestCluster::start(setup(backend), 1).await;
    let hung = submit(&c, HANGS_AFTER_20).await;
    let steady = submit(&c, SLOW_BUT_STEADY).await;

    let seen_at_20 = goes_quiet_and_shows_it(&c, hung).await;
    ended_stalled_in_time(&c, hung, seen_at_20).await;

    let done = c.wait_for_status(hung, TaskStatus::Completed, LONG).await;
    assert_eq!(
        verdict(&done),
        json!({"started_after": 20}),
        "the second attempt resumed from the checkpoint of episode 20"
    );
    assert_eq!(done.task.attempt, 2);
    assert_eq!(
        done.task.runs, 1,
        "the first stall did not use one of its attempts (max_attempts 1)"
    );

    let left_alone = c.wait_for_status(steady, TaskStatus::Completed, LONG).await;
    assert_eq!(left_alone.attempts.len(), 1, "{:#?}", left_alone.attempts);
    assert_eq!(
        left_alone.attempts[0].outcome,
        Some(AttemptOutcome::Completed)
    );
    assert_eq!(verdict(&left_alone), json!("steady"));
}

#[tokio::test]
async fn a_hung_trainer_is_ended_as_stalled_and_resumes_while_a_steady_one_is_left_alone_on_sqlite()
{
    a_hung_trainer_is_ended_as_stalled_and_resumes("sqlite").await;
}

#[tokio::test]
async fn a_hung_trainer_is_ended_as_stalled_and_resumes_while_a_steady_one_is_left_alone_on_postgres(
) {
    a_hung_trainer_is_ended_as_stalled_and_resumes("postgres").await;
}
