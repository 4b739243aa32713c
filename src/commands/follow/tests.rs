//! The follower: which events it shows, that a terminal status is final,
//! and — against a canned master — that it reconnects and re-reads tasks so
//! that an end missed while disconnected is still seen.

use super::*;
use crate::client::canned::{sample_task, serve, Reply};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

fn event(task: TaskId, status: TaskStatus) -> TaskEvent {
    TaskEvent {
        task,
        kind: "status".into(),
        status,
        attempt: 1,
        host: Some("host-1".into()),
        progress: None,
        metrics: None,
        error: None,
        at_ms: 1_700_000_001_000,
    }
}

fn sse(e: &TaskEvent) -> String {
    format!(
        "event: {}\ndata: {}\n\n",
        e.kind,
        serde_json::to_string(e).unwrap()
    )
}

fn fast() -> Following {
    Following {
        until_done: true,
        reconnect_delay: Duration::from_millis(20),
        quiet_check: Duration::from_millis(500),
    }
}

#[test]
fn a_terminal_status_is_final_and_other_tasks_are_not_followed() {
    let mut w = Watched::only(&[3, 4]);
    assert!(w.record(3, TaskStatus::Running));
    assert!(!w.record(3, TaskStatus::Running), "no news");
    assert!(w.record(3, TaskStatus::Completed));
    assert!(
        !w.record(3, TaskStatus::Running),
        "an older event cannot revive an ended task"
    );
    assert!(!w.record(5, TaskStatus::Failed));
    assert!(!w.shows(5));
    assert!(!w.all_ended());
    assert_eq!(w.unfinished(), vec![4]);
    assert!(w.record(4, TaskStatus::Failed));
    assert!(w.all_ended());
    assert_eq!(w.not_completed(), vec![(4, Some(TaskStatus::Failed))]);
    assert_eq!(
        w.shortfall().as_deref(),
        Some("1 of 2 tasks did not complete: 4 FAILED")
    );
    assert!(!Watched::everything().all_ended());
    assert_eq!(Watched::only(&[9]).single(), Some(9));
    assert_eq!(w.single(), None);
}

#[test]
fn event_lines_carry_progress_or_the_outcome() {
    let mut progress = event(3, TaskStatus::Running);
    progress.kind = "progress".into();
    progress.progress = Some(trainyard_master::model::ProgressView {
        attempt: 1,
        episode: Some(120),
        total_episodes: Some(300),
        episode_return: Some(0.82),
        ..Default::default()
    });
    assert_eq!(
        event_line(&progress),
        "22:13:21  task 3  attempt 1  host-1  RUNNING  episode 120/300  return 0.82"
    );

    let mut failed = event(4, TaskStatus::Failed);
    failed.host = None;
    failed.error = Some("trainer exited with status 1\nTraceback ...".into());
    assert_eq!(
        event_line(&failed),
        "22:13:21  task 4  attempt 1  -  FAILED  error: trainer exited with status 1 Traceback ..."
    );

    let mut done = event(5, TaskStatus::Completed);
    done.metrics = Some(
        [
            ("mean_return".to_string(), 0.5),
            ("episodes".to_string(), 300.0),
        ]
        .into(),
    );
    assert!(event_line(&done).ends_with("COMPLETED  episodes 300, mean_return 0.5"));
}

#[tokio::test]
async fn an_end_missed_while_disconnected_is_found_by_re_reading_the_task() {
    // The first stream shows task 3 running and then breaks off; the task
    // completes while the follower is away, and the second stream is silent.
    let streams = Arc::new(AtomicUsize::new(0));
    let reads = Arc::new(AtomicUsize::new(0));
    let (s, r) = (streams.clone(), reads.clone());
    let server = serve(move |req| {
        if req.target.starts_with("/v1/events") {
            let pieces = match s.fetch_add(1, Ordering::SeqCst) {
                0 => vec![sse(&event(3, TaskStatus::Running))],
                _ => vec![],
            };
            Reply::Sse(pieces)
        } else {
            let status = match r.fetch_add(1, Ordering::SeqCst) {
                0 => TaskStatus::Dispatched,
                _ => TaskStatus::Completed,
            };
            let detail = trainyard_master::model::TaskDetail {
                task: sample_task(3, status),
                attempts: vec![],
                waiting: None,
                quiet_for_ms: None,
            };
            Reply::Json(200, serde_json::to_string(&detail).unwrap())
        }
    })
    .await;
    let client = ApiClient::new(&server.url, None).unwrap();
    let mut watched = Watched::only(&[3]);
    let mut lines = vec![];

    follow(&client, &mut watched, &fast(), None, &mut |l| {
        lines.push(l.to_string())
    })
    .await
    .unwrap();

    assert!(watched.all_ended());
    assert!(watched.not_completed().is_empty(), "{watched:?}");
    let text = lines.join("\n");
    for expected in [
        "task 3  attempt 1  host-1  DISPATCHED",
        "host-1  RUNNING",
        "the master closed the event stream",
        "reconnected",
        "host-1  COMPLETED",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    let requests = server.requests();
    assert!(requests
        .iter()
        .all(|r| !r.target.starts_with("/v1/events") || r.target == "/v1/events?task=3"));
}

#[tokio::test]
async fn only_the_tasks_asked_for_are_shown_until_they_end() {
    let events = vec![
        sse(&event(3, TaskStatus::Running)),
        sse(&event(5, TaskStatus::Running)),
        sse(&event(4, TaskStatus::Failed)),
        sse(&event(3, TaskStatus::Completed)),
    ];
    let server = serve(move |req| {
        if req.target.starts_with("/v1/events") {
            Reply::Sse(events.clone())
        } else {
            let id: u64 = req
                .target
                .rsplit('/')
                .next()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            let detail = trainyard_master::model::TaskDetail {
                task: sample_task(id, TaskStatus::Pending),
                attempts: vec![],
                waiting: None,
                quiet_for_ms: None,
            };
            Reply::Json(200, serde_json::to_string(&detail).unwrap())
        }
    })
    .await;
    let client = ApiClient::new(&server.url, None).unwrap();
    let mut watched = Watched::only(&[3, 4]);
    let mut lines = vec![];

    follow(&client, &mut watched, &fast(), None, &mut |l| {
        lines.push(l.to_string())
    })
    .await
    .unwrap();

    assert_eq!(watched.not_completed(), vec![(4, Some(TaskStatus::Failed))]);
    assert!(!lines.iter().any(|l| l.contains("task 5")), "{lines:?}");
    assert_eq!(
        lines.iter().filter(|l| l.contains("PENDING")).count(),
        2,
        "{lines:?}"
    );
    assert_eq!(
        server
            .requests()
            .iter()
            .filter(|r| r.target == "/v1/events")
            .count(),
        1
    );
}

#[tokio::test]
async fn a_task_that_does_not_exist_stops_the_follower_with_the_masters_reason() {
    let server = serve(|req| {
        if req.target.starts_with("/v1/events") {
            Reply::Sse(vec![])
        } else {
            Reply::Json(404, r#"{"error": "no task 99"}"#.into())
        }
    })
    .await;
    let client = ApiClient::new(&server.url, None).unwrap();
    let mut watched = Watched::only(&[99]);

    let e = follow(&client, &mut watched, &fast(), None, &mut |_| {})
        .await
        .unwrap_err();
    assert_eq!(
        format!("{e:#}"),
        "cannot follow task 99: the master refused the request (404): no task 99"
    );
}
