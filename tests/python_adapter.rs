//! Adapters written in Python, for real.
//!
//! `cartpole-py` (adapters/cartpole-py, built by componentize-py) runs on a
//! host of a real cluster: a CartPole task completes with the trainer's
//! metrics and every episode in its progress history, and bad params end
//! the task FAILED at once with the adapter's own message. (The template
//! new Python adapters start from is tests/adapter_new.rs's business.)
//!
//! The CPython component's first compile takes seconds; every host of the
//! suite shares one compiled-adapter cache (testkit's `adapter_cache`), so
//! it is paid once per build of the component, not once per test.

// `serial()` holds a std mutex across each whole test on purpose: the
// multi-process tests take the machine's ports and CPU one at a time.
#![allow(clippy::await_holding_lock)]

use crate::common;

use common::{metric, serial, Setup, TestCluster};
use serde_json::json;
use std::time::Duration;
use trainyard_master::model::TaskStatus;

const ADAPTER: &str = "cartpole-py";
/// Enough episodes for a history and two checkpoints, few enough to keep
/// the test short (learning itself is tests/cartpole.rs's business: the
/// trainer is the same file).
const EPISODES: u64 = 60;

/// A cluster whose host carries cartpole-py and a `python3` with the
/// CartPole trainer's requirements (adapters/cartpole/requirements.txt),
/// which the host builds an environment for with `uv`.
async fn cartpole_py_cluster() -> TestCluster {
    let setup = Setup {
        adapters: vec![(ADAPTER, vec!["python3"])],
        slots: 2,
        ..Setup::new("sqlite")
    };
    let mut c = TestCluster::prepare(setup).await;
    c.provide_cartpole_python();
    c.cluster.write_config().expect("config");
    c.start_master().await;
    c.start_host("host-1");
    c.wait_for_hosts(1).await;
    c
}

#[tokio::test]
async fn a_python_adapter_completes_a_cartpole_task_and_fails_bad_params_for_good() {
    let _serial = serial();
    let c = cartpole_py_cluster().await;
    let bad = c
        .submit(json!({"adapter": ADAPTER, "params": {"gamma": 2}, "max_attempts": 3}))
        .await;
    let id = c
        .submit(json!({
            "adapter": ADAPTER,
            "params": {"episodes": EPISODES, "seed": 1, "checkpoint_every": 25},
        }))
        .await;

    let failed = c
        .wait_for_status(bad, TaskStatus::Failed, Duration::from_secs(120))
        .await;
    assert_eq!(
        failed.task.error.as_deref(),
        Some(r#"invalid params: "gamma" must be a number in [0, 1], got 2"#)
    );
    assert_eq!(failed.attempts.len(), 1, "bad params are not retried");

    let done = c
        .wait_for_status(id, TaskStatus::Completed, Duration::from_secs(300))
        .await;
    assert_eq!(done.attempts.len(), 1, "{}", c.all_logs());
    assert_eq!(metric(&done, "episodes"), EPISODES as f64);
    assert_eq!(metric(&done, "eval_episodes"), 20.0);
    assert_eq!(metric(&done, "resumed_from"), 0.0);
    let mean = metric(&done, "mean_return");
    assert!(metric(&done, "best_return") >= mean && mean > 0.0, "{mean}");
    let result = done.task.result.as_ref().expect("a result");
    let summary = result.summary.clone().unwrap_or_default();
    assert!(
        summary.starts_with("mean return ") && summary.ends_with("after 60 episodes"),
        "{summary}"
    );
    let policy = result.checkpoint.as_ref().expect("the final policy");
    assert_eq!(
        (policy.kind.as_str(), policy.name.as_str()),
        ("file", "policy.json")
    );
    assert!(policy.bytes > 0);

    let points = c.progress_points(&done).await;
    let mut episodes: Vec<u64> = points
        .iter()
        .filter(|p| p["episode_return"].is_number())
        .filter_map(|p| p["episode"].as_u64())
        .collect();
    episodes.dedup();
    assert_eq!(
        episodes,
        (1..=EPISODES).collect::<Vec<_>>(),
        "every episode"
    );
    let last = points
        .iter()
        .rev()
        .find(|p| p["episode_return"].is_number())
        .unwrap();
    assert!(last["metrics"]["loss"].is_number(), "{last}");
    assert_eq!(last["metrics"]["mean_return"].as_f64(), Some(mean));
}
