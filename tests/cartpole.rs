//! The CartPole adapter for real: a task submitted over HTTP runs the
//! gymnasium trainer on a host (contained like every trainer), learns, and
//! completes with its metrics and every episode in its progress history; a
//! host killed mid-run has the next attempt resume from the last checkpoint
//! and finish the curve.
//!
//! The trainer imports numpy and gymnasium: [`TestCluster::provide_cartpole_python`] puts
//! the adapter's requirements in its host entry, and each host builds the
//! Python environment itself.

// `serial()` holds a std mutex across each whole test on purpose: the
// multi-process tests take the machine's ports and CPU one at a time.
#![allow(clippy::await_holding_lock)]

use crate::common;

use common::{metric, serial, Setup, TestCluster};
use serde_json::{json, Value};
use std::time::Duration;
use trainyard_master::model::{AttemptOutcome, TaskStatus};

/// A random policy averages about 22 on CartPole-v1; the trainer's default
/// 300 episodes reach 270-500 over the last 20 (seeds 0-11, mostly above
/// 450). The bound leaves room for a loaded machine or another numpy.
const LEARNED_MEAN_RETURN: f64 = 150.0;
const EPISODES: u64 = 300;

/// A cluster whose hosts carry the cartpole adapter and a `python3` that
/// can run its trainer.
async fn cartpole_cluster(hosts: usize) -> TestCluster {
    let setup = Setup {
        adapters: vec![("cartpole", vec!["python3"])],
        ..Setup::new("sqlite")
    };
    let mut c = TestCluster::prepare(setup).await;
    c.provide_cartpole_python();
    c.cluster.write_config().expect("config");
    c.start_master().await;
    for i in 1..=hosts {
        c.start_host(&format!("host-{i}"));
    }
    c.wait_for_hosts(hosts).await;
    c
}

/// The distinct episodes of the points with an episode return, in order.
fn episodes_with_returns(points: &[Value]) -> Vec<u64> {
    let mut episodes: Vec<u64> = points
        .iter()
        .filter(|p| p["episode_return"].is_number())
        .filter_map(|p| p["episode"].as_u64())
        .collect();
    episodes.dedup();
    episodes
}

#[tokio::test]
async fn a_cartpole_task_learns_and_completes_with_every_episode_in_its_history() {
    let _serial = serial();
    let c = cartpole_cluster(1).await;
    let id = c
        .submit(json!({"adapter": "cartpole", "params": {"episodes": EPISODES, "seed": 1}}))
        .await;
    let done = c
        .wait_for_status(id, TaskStatus::Completed, Duration::from_secs(300))
        .await;
    assert_eq!(done.attempts.len(), 1);
    let mean = metric(&done, "mean_return");
    assert!(
        mean > LEARNED_MEAN_RETURN,
        "the last 20 episodes average {mean}, not far above a random policy's 22"
    );
    assert_eq!(metric(&done, "episodes"), EPISODES as f64);
    assert_eq!(metric(&done, "eval_episodes"), 20.0);
    assert!(metric(&done, "best_return") >= mean);
    let summary = done.task.result.as_ref().and_then(|r| r.summary.clone());
    assert!(
        summary.as_deref().unwrap_or("").starts_with("mean return "),
        "{summary:?}"
    );

    let points = c.progress_points(&done).await;
    assert_eq!(
        episodes_with_returns(&points),
        (1..=EPISODES).collect::<Vec<_>>(),
        "every episode, oldest first"
    );
    // Each episode's point carries the trainer's metrics: the loss and the
    // running mean, whose last value is the final metric.
    let last = points
        .iter()
        .rev()
        .find(|p| p["episode_return"].is_number())
        .unwrap();
    assert!(last["metrics"]["loss"].is_number(), "{last}");
    assert_eq!(last["metrics"]["mean_return"].as_f64(), Some(mean));
    let first = &points[0]["metrics"]["mean_return"];
    assert!(
        first.as_f64().unwrap() < 100.0,
        "the untrained policy starts low: {first}"
    );
}

#[tokio::test]
async fn invalid_cartpole_params_fail_the_task_at_once_with_the_adapters_message() {
    let _serial = serial();
    let c = cartpole_cluster(1).await;
    let id = c
        .submit(json!({"adapter": "cartpole", "params": {"gamma": 1.5}}))
        .await;
    let done = c
        .wait_for_status(id, TaskStatus::Failed, Duration::from_secs(60))
        .await;
    assert_eq!(
        done.task.error.as_deref(),
        Some(r#"invalid params: "gamma" must be a number in [0, 1], got 1.5"#)
    );
    assert_eq!(done.attempts.len(), 1, "an invalid task is not retried");
}

#[tokio::test]
async fn a_host_killed_mid_run_has_the_next_attempt_resume_from_the_checkpoint() {
    let _serial = serial();
    // The first checkpoint comes a tenth of a second into training, the
    // last episode seconds later: the kill lands mid-run.
    const CHECKPOINT_EVERY: u64 = 10;
    let mut c = cartpole_cluster(2).await;
    let id = c
        .submit(json!({
            "adapter": "cartpole",
            "params": {"episodes": EPISODES, "seed": 1, "checkpoint_every": CHECKPOINT_EVERY},
        }))
        .await;
    let running = c
        .wait_for(id, Duration::from_secs(120), "a checkpoint", |d| {
            d.task.checkpoint.is_some()
        })
        .await;
    let first_host = running
        .task
        .host
        .clone()
        .expect("a running task has a host");
    c.host(&first_host).kill();

    let done = c
        .wait_for_status(id, TaskStatus::Completed, Duration::from_secs(300))
        .await;
    assert_eq!(
        done.task.attempt,
        2,
        "{:#?}\n{}",
        done.attempts,
        c.all_logs()
    );
    assert_ne!(done.task.host, Some(first_host));
    assert_eq!(done.attempts[0].outcome, Some(AttemptOutcome::LeaseLost));
    let resumed_from = metric(&done, "resumed_from");
    assert!(
        resumed_from >= CHECKPOINT_EVERY as f64 && resumed_from % CHECKPOINT_EVERY as f64 == 0.0,
        "attempt 2 resumed from a checkpoint of attempt 1, not from scratch: {resumed_from}"
    );
    assert_eq!(metric(&done, "episodes"), EPISODES as f64);
    assert!(metric(&done, "mean_return") > LEARNED_MEAN_RETURN);

    // Attempt 2 continues the curve: its first episode follows the
    // checkpoint, and together the attempts cover every episode.
    let points = c.progress_points(&done).await;
    let second: Vec<u64> = episodes_with_returns(
        &points
            .iter()
            .filter(|p| p["attempt"] == 2)
            .cloned()
            .collect::<Vec<_>>(),
    );
    assert_eq!(
        second,
        (resumed_from as u64 + 1..=EPISODES).collect::<Vec<_>>()
    );
    let mut all = episodes_with_returns(&points);
    all.sort();
    all.dedup();
    assert_eq!(all, (1..=EPISODES).collect::<Vec<_>>());
}
