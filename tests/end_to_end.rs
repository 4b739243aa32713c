//! The whole path, for real: a task submitted over HTTP, dispatched over TCP
//! to a host, run by the python-trainer adapter (WebAssembly) launching the
//! Python Q-learning trainer, its lease in Redis, its result in SQLite and in
//! PostgreSQL. The tests run one at a time (`serial()`).

// `serial()` holds a std mutex across each whole test on purpose: the
// multi-process tests take the machine's ports and CPU one at a time.
#![allow(clippy::await_holding_lock)]

use crate::common;

use common::{read_trace, serial, traced, Setup, TestCluster};
use redis::AsyncCommands;
use serde_json::json;
use std::time::{Duration, Instant};
use trainyard_master::model::{AttemptOutcome, TaskStatus};

async fn a_training_task_completes_with_its_metrics(backend: &'static str) {
    let _serial = serial();
    let c = TestCluster::start(Setup::new(backend), 1).await;
    let id = c
        .submit(json!({
            "adapter": "python-trainer",
            "params": {"episodes": 200, "seed": 3, "checkpoint_every": 50, "step_delay_ms": 5},
        }))
        .await;

    // While it runs, both lease keys name the host and attempt 1.
    let running = c
        .wait_for(id, Duration::from_secs(60), "progress while running", |d| {
            d.task.status == TaskStatus::Running && d.task.progress.is_some()
        })
        .await;
    assert_eq!(running.task.host.as_deref(), Some("host-1"));
    let mut redis = c.redis().await;
    let owner: Option<String> = redis.get(format!("task:{id}:workerId")).await.unwrap();
    let worker: Option<String> = redis.get("worker:host-1/0:task").await.unwrap();
    assert_eq!(owner.as_deref(), Some("host-1/0@1"));
    assert_eq!(worker, Some(format!("{id}@1")));

    let done = c
        .wait_for_status(id, TaskStatus::Completed, Duration::from_secs(120))
        .await;
    let result = done
        .task
        .result
        .as_ref()
        .expect("a completed task has a result");
    let mean = result
        .metrics
        .get("mean_return")
        .copied()
        .expect("mean_return metric");
    assert!(mean.is_finite());
    assert_eq!(result.metrics.get("episodes"), Some(&200.0));
    assert_eq!(done.task.attempt, 1);
    assert_eq!(done.attempts.len(), 1);
    assert_eq!(done.attempts[0].outcome, Some(AttemptOutcome::Completed));
    assert!(
        done.task.checkpoint.is_some(),
        "the trainer's checkpoints reached the master"
    );
    // Its final policy is kept as an output, for the user to download.
    let kept = c.client().artifacts(id).await.expect("artifacts");
    let output = kept
        .iter()
        .find(|a| a.name == "outputs/policy.json")
        .unwrap_or_else(|| panic!("no outputs/policy.json in {kept:#?}"));
    assert_eq!(output.kind, trainyard_artifacts::ArtifactKind::Output);
    let url = format!(
        "{}/v1/tasks/{id}/artifacts/{}",
        c.cluster.settings.api.url, output.id
    );
    let response = c.http_get(&url).send().await.unwrap();
    let bytes = response.bytes().await.unwrap();
    assert_eq!(bytes.len() as u64, output.size);
    let mut digest = trainyard_artifacts::Digest::new();
    digest.update(&bytes);
    assert_eq!(digest.hex(), output.sha256);
    let policy: serde_json::Value = serde_json::from_slice(&bytes).expect("the policy as JSON");
    assert!(
        policy["q"].as_array().is_some_and(|q| !q.is_empty()),
        "{policy}"
    );

    // After the report both lease keys are gone (the host cleared them in the
    // step that stored the report), and the stored report is removed once the
    // master has recorded it.
    let owner: Option<String> = redis.get(format!("task:{id}:workerId")).await.unwrap();
    let worker: Option<String> = redis.get("worker:host-1/0:task").await.unwrap();
    assert_eq!((owner, worker), (None, None));
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let pending: Vec<String> = redis.smembers("reports:pending").await.unwrap();
        let stored: bool = redis.exists(format!("task:{id}:report:1")).await.unwrap();
        if pending.is_empty() && !stored {
            break;
        }
        assert!(
            Instant::now() < until,
            "the recorded report is still in Redis: pending {pending:?}, report stored: {stored}\n{}",
            c.all_logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_training_task_completes_with_its_metrics_on_sqlite() {
    a_training_task_completes_with_its_metrics("sqlite").await;
}

#[tokio::test]
async fn a_training_task_completes_with_its_metrics_on_postgres() {
    a_training_task_completes_with_its_metrics("postgres").await;
}

#[tokio::test]
async fn invalid_params_fail_the_task_at_once_with_the_adapters_message() {
    let _serial = serial();
    let c = TestCluster::start(Setup::new("sqlite"), 1).await;
    let id = c
        .submit(json!({"adapter": "python-trainer", "params": {"learning_rate": 7}}))
        .await;
    let done = c
        .wait_for_status(id, TaskStatus::Failed, Duration::from_secs(60))
        .await;
    let error = done.task.error.unwrap_or_default();
    assert!(
        error.contains("learning_rate"),
        "the adapter's message reaches the operator: {error}"
    );
    assert_eq!(done.attempts.len(), 1, "an invalid task is not retried");
    assert_eq!(done.task.runs, 1);
}

#[tokio::test]
async fn an_unknown_adapter_or_a_malformed_request_is_refused_and_nothing_is_stored() {
    let _serial = serial();
    let c = TestCluster::start(Setup::new("sqlite"), 1).await;
    let err = c
        .client()
        .submit(&json!({"adapter": "no-such-adapter", "params": {}}))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("422") && err.contains("unknown adapter"),
        "{err}"
    );

    let http = reqwest::Client::new();
    let token = std::fs::read_to_string(&c.cluster.settings.api.token_file).unwrap();
    let url = format!("{}/v1/tasks", c.cluster.settings.api.url);
    for (body, status, says) in [
        ("{not json", 400, "malformed JSON"),
        (r#"{"params": {}}"#, 422, "missing field `adapter`"),
        (
            r#"{"adapter": "python-trainer", "params": [1]}"#,
            422,
            "must be a JSON object",
        ),
    ] {
        let response = http
            .post(&url)
            .bearer_auth(token.trim())
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), status, "{body}");
        let error: serde_json::Value = response.json().await.unwrap();
        assert!(
            error["error"].as_str().unwrap_or("").contains(says),
            "{body}: {error}"
        );
    }
    // Without the token nothing mutates either.
    let response = http
        .post(&url)
        .json(&json!({"adapter": "noop"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 401);
    let response = http
        .post(&url)
        .bearer_auth("guessed-token")
        .json(&json!({"adapter": "noop"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 401);
    let cancel = format!("{}/v1/tasks/1/cancel", c.cluster.settings.api.url);
    assert_eq!(
        http.post(&cancel).send().await.unwrap().status().as_u16(),
        401
    );

    assert!(
        c.client()
            .tasks(None, None, None, None)
            .await
            .unwrap()
            .is_empty(),
        "nothing was stored"
    );
}

async fn a_host_killed_mid_task_has_it_finished_elsewhere_as_attempt_2(backend: &'static str) {
    let _serial = serial();
    let mut c = TestCluster::start(Setup::new(backend), 1).await;
    let id = c
        .submit(json!({
            "adapter": "test-trainer",
            "params": {"episodes": 400, "checkpoint_every": 20, "step_delay_ms": 10, "trace_file": "trace.jsonl"},
        }))
        .await;
    c.wait_for(id, Duration::from_secs(60), "a checkpoint", |d| {
        d.task.checkpoint.is_some()
    })
    .await;
    // The second host joins only now, so the first attempt surely ran on host-1.
    c.start_host("host-2");
    c.wait_for_hosts(2).await;
    c.host("host-1").kill();

    let done = c
        .wait_for_status(id, TaskStatus::Completed, Duration::from_secs(120))
        .await;
    assert_eq!(
        (done.task.attempt, done.task.host.as_deref()),
        (2, Some("host-2")),
        "{:#?}\n{}",
        done.attempts,
        c.all_logs()
    );
    assert_eq!(done.attempts[0].outcome, Some(AttemptOutcome::LeaseLost));
    assert_eq!(done.attempts[1].outcome, Some(AttemptOutcome::Completed));
    let resumed = done
        .task
        .result
        .as_ref()
        .and_then(|r| r.metrics.get("resumed_from").copied())
        .unwrap_or(0.0);
    assert!(
        resumed > 0.0,
        "attempt 2 resumed from attempt 1's checkpoint, not from scratch"
    );
    let trace = read_trace(&c.trace("trace.jsonl"));
    assert!(traced(&trace, 1, "alive") && traced(&trace, 2, "end"));
    assert!(!traced(&trace, 1, "end"), "attempt 1 never finished");
    common::assert_attempts_never_overlapped(&trace);
}

#[tokio::test]
async fn a_host_killed_mid_task_has_it_finished_elsewhere_as_attempt_2_on_sqlite() {
    a_host_killed_mid_task_has_it_finished_elsewhere_as_attempt_2("sqlite").await;
}

#[tokio::test]
async fn a_host_killed_mid_task_has_it_finished_elsewhere_as_attempt_2_on_postgres() {
    a_host_killed_mid_task_has_it_finished_elsewhere_as_attempt_2("postgres").await;
}
