//! `GET /v1/tasks/{id}/progress`: a training task's progress points are
//! stored as it runs, stay after it ends and after the master restarts,
//! page with `after=`, and bad requests are refused.

// `serial()` holds a std mutex across each whole test on purpose: the
// multi-process tests take the machine's ports and CPU one at a time.
#![allow(clippy::await_holding_lock)]

use crate::common;

use common::{serial, Setup, TestCluster};
use serde_json::{json, Value};
use std::time::Duration;
use trainyard_master::model::TaskStatus;

async fn get(c: &TestCluster, url: &str) -> (u16, Value) {
    let response = c.http_get(url).send().await.expect("request");
    let status = response.status().as_u16();
    let body = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&body).unwrap_or(Value::String(body)),
    )
}

fn episodes(page: &Value) -> Vec<u64> {
    page["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["episode"].as_u64().unwrap())
        .collect()
}

#[tokio::test]
async fn a_tasks_progress_history_is_stored_pages_and_survives_a_master_restart() {
    let _serial = serial();
    let mut c = TestCluster::start(Setup::new("sqlite"), 1).await;
    let id = c
        .submit(json!({
            "adapter": "python-trainer",
            "params": {"episodes": 100, "seed": 1, "step_delay_ms": 2},
        }))
        .await;
    let done = c
        .wait_for_status(id, TaskStatus::Completed, Duration::from_secs(120))
        .await;
    let latest = done
        .task
        .progress
        .and_then(|p| p.episode)
        .expect("the task reported progress");
    let url = format!("{}/v1/tasks/{id}/progress", c.cluster.settings.api.url);
    // Stored with the turn that heard them, before the task could end.
    let (status, all) = get(&c, &url).await;
    assert_eq!(status, 200, "{all}");
    assert_eq!(
        episodes(&all).last(),
        Some(&latest),
        "the latest progress is stored: {all}"
    );
    let seen = episodes(&all);
    // The trainer reports every episode; the host batches them (its
    // progress_interval holds updates back) rather than dropping any. (An
    // episode announcing a checkpoint is reported twice.)
    let mut distinct = seen.clone();
    distinct.dedup();
    assert_eq!(
        distinct,
        (1..=100).collect::<Vec<u64>>(),
        "oldest first, none missing"
    );
    assert!(all["points"][0]["episode_return"].is_number(), "{all}");

    // Paging: one point at a time from a cursor.
    let (_, first) = get(&c, &format!("{url}?limit=1")).await;
    assert_eq!(episodes(&first), seen[..1]);
    let (_, second) = get(&c, &format!("{url}?limit=1&after={}", first["next"])).await;
    assert_eq!(episodes(&second), seen[1..2]);

    // Curves survive the master.
    c.restart_master().await;
    let (status, again) = get(&c, &url).await;
    assert_eq!(status, 200);
    assert_eq!(episodes(&again), seen);

    // Bad input.
    let base = &c.cluster.settings.api.url;
    let (status, body) = get(&c, &format!("{base}/v1/tasks/999999/progress")).await;
    assert_eq!(status, 404, "{body}");
    for bad in [
        "after=-1",
        "after=abc",
        "limit=0",
        "limit=10001",
        "colour=red",
    ] {
        let (status, body) = get(&c, &format!("{url}?{bad}")).await;
        assert_eq!(status, 400, "{bad}: {body}");
    }
}
