//! The client against a canned HTTP server: what it sends, how it reads the
//! answers, and what it says when the master refuses or cannot be reached.

use super::canned::{sample_task, serve, Reply};
use super::*;
use futures::StreamExt;
use serde_json::json;

fn status_event(task: u64, status: &str) -> String {
    format!(
        "event: status\ndata: {{\"task\":{task},\"kind\":\"status\",\"status\":\"{status}\",\"attempt\":1,\"host\":\"host-1\",\"progress\":null,\"metrics\":null,\"error\":null,\"at_ms\":1700000000000}}\n\n"
    )
}

#[tokio::test]
async fn the_event_stream_yields_status_progress_and_lagged_events_split_across_reads() {
    let progress = "event: progress\ndata: {\"task\":3,\"kind\":\"progress\",\"status\":\"RUNNING\",\"attempt\":1,\"host\":\"host-1\",\
        \"progress\":{\"attempt\":1,\"episode\":120,\"total_episodes\":300,\"episode_return\":0.82,\"metrics\":{},\"message\":null,\"at_ms\":1},\
        \"metrics\":null,\"error\":null,\"at_ms\":1}\n\n";
    let (head, tail) = progress.split_at(40);
    let pieces = vec![
        ":\n\n".to_string(), // keep-alive comment
        status_event(3, "RUNNING"),
        head.to_string(),
        tail.to_string(),
        "event: lagged\ndata: 12\n\n".to_string(),
        "event: something-new\ndata: {}\n\n".to_string(),
        status_event(3, "COMPLETED"),
    ];
    let server = serve(move |_| Reply::Sse(pieces.clone())).await;
    let client = ApiClient::new(&server.url, None).unwrap();

    let items: Vec<_> = client.events(Some(3)).await.unwrap().collect().await;
    let items: Vec<StreamEvent> = items
        .into_iter()
        .map(|i| i.expect("every event decodes"))
        .collect();

    assert_eq!(items.len(), 4, "{items:?}");
    let StreamEvent::Task(first) = &items[0] else {
        panic!("{items:?}")
    };
    assert_eq!(
        (first.task, first.status, first.is_progress()),
        (3, TaskStatus::Running, false)
    );
    let StreamEvent::Task(second) = &items[1] else {
        panic!("{items:?}")
    };
    assert!(second.is_progress());
    assert_eq!(second.progress.as_ref().and_then(|p| p.episode), Some(120));
    assert_eq!(items[2], StreamEvent::Lagged(12));
    let StreamEvent::Task(last) = &items[3] else {
        panic!("{items:?}")
    };
    assert_eq!(last.status, TaskStatus::Completed);

    let request = &server.requests()[0];
    assert_eq!(request.target, "/v1/events?task=3");
    assert_eq!(request.header("accept"), Some("text/event-stream"));
}

#[tokio::test]
async fn a_malformed_event_is_reported_and_the_stream_goes_on() {
    let pieces = vec![
        "event: status\ndata: {\"task\": \"x\"}\n\n".to_string(),
        status_event(4, "FAILED"),
    ];
    let server = serve(move |_| Reply::Sse(pieces.clone())).await;
    let client = ApiClient::new(&server.url, None).unwrap();

    let items: Vec<_> = client.events(None).await.unwrap().collect().await;
    assert_eq!(items.len(), 2);
    assert!(
        matches!(&items[0], Err(ClientError::Unexpected { .. })),
        "{items:?}"
    );
    assert!(
        matches!(&items[1], Ok(StreamEvent::Task(e)) if e.task == 4 && e.status == TaskStatus::Failed)
    );
    assert_eq!(server.requests()[0].target, "/v1/events");
}

#[tokio::test]
async fn submit_sends_the_task_with_the_token_and_returns_its_id() {
    let server = serve(|_| Reply::Json(201, r#"{"id": 7, "status": "PENDING"}"#.into())).await;
    let client = ApiClient::new(&server.url, Some("s3cret".into())).unwrap();
    let task = json!({"adapter": "python-trainer", "params": {"seed": 1}});

    assert_eq!(client.submit(&task).await.unwrap(), 7);

    let request = &server.requests()[0];
    assert_eq!(
        (request.method.as_str(), request.target.as_str()),
        ("POST", "/v1/tasks")
    );
    assert_eq!(request.header("authorization"), Some("Bearer s3cret"));
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&request.body).unwrap(),
        task
    );
}

#[tokio::test]
async fn a_batch_is_sent_as_one_request_and_its_ids_come_back_in_order() {
    let server = serve(|_| Reply::Json(201, r#"{"ids": [8, 9, 10]}"#.into())).await;
    let client = ApiClient::new(&server.url, Some("t".into())).unwrap();
    let tasks = vec![
        json!({"adapter": "a"}),
        json!({"adapter": "b"}),
        json!({"adapter": "c"}),
    ];

    assert_eq!(client.submit_batch(&tasks).await.unwrap(), vec![8, 9, 10]);
    let body: serde_json::Value = serde_json::from_str(&server.requests()[0].body).unwrap();
    assert_eq!(body, json!({"tasks": tasks}));
    assert_eq!(server.requests()[0].target, "/v1/tasks/batch");
}

#[tokio::test]
async fn a_refused_submission_carries_the_masters_reason() {
    let server = serve(|_| {
        Reply::Json(
            422,
            r#"{"error": "unknown adapter \"x\"; known adapters: python-trainer, noop"}"#.into(),
        )
    })
    .await;
    let client = ApiClient::new(&server.url, Some("t".into())).unwrap();

    let e = client.submit(&json!({"adapter": "x"})).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        r#"the master refused the request (422): unknown adapter "x"; known adapters: python-trainer, noop"#
    );
}

#[tokio::test]
async fn a_missing_token_is_explained_not_just_reported_as_401() {
    let server = serve(|_| {
        Reply::Json(
            401,
            r#"{"error": "this endpoint needs `Authorization: Bearer <token>`"}"#.into(),
        )
    })
    .await;
    let client = ApiClient::new(&server.url, None).unwrap();

    let e = client.cancel(3).await.unwrap_err();
    assert_eq!(e.status(), Some(401));
    assert!(
        e.to_string()
            .contains("set api.token or api.token_file, or TRAINYARD_API__TOKEN"),
        "{e}"
    );
    assert_eq!(server.requests()[0].header("authorization"), None);
    assert_eq!(server.requests()[0].target, "/v1/tasks/3/cancel");
}

#[tokio::test]
async fn a_master_that_is_not_running_is_named_with_the_cause() {
    // A port that was just free: nothing listens on it any more.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let client = ApiClient::new(&url, None).unwrap();

    let e = client.health().await.unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "cannot reach the master at {url}: connection refused (is `trainyard master` running?)"
        )
    );
    assert!(e.is_transient());
    assert!(matches!(
        client.events(None).await,
        Err(ClientError::Unreachable { .. })
    ));
}

#[tokio::test]
async fn task_lists_pass_their_filters_and_decode_the_masters_tasks() {
    let tasks = vec![
        sample_task(12, TaskStatus::Running),
        sample_task(11, TaskStatus::Running),
    ];
    let body = serde_json::to_string(&json!({ "tasks": tasks })).unwrap();
    let server = serve(move |_| Reply::Json(200, body.clone())).await;
    let client = ApiClient::new(&server.url, None).unwrap();

    let got = client
        .tasks(Some("RUNNING"), Some("python-trainer"), Some(5), Some(100))
        .await
        .unwrap();
    assert_eq!(got, tasks);
    assert_eq!(
        server.requests()[0].target,
        "/v1/tasks?status=RUNNING&adapter=python-trainer&limit=5&before=100"
    );
}

#[tokio::test]
async fn one_task_comes_back_with_its_attempts() {
    let detail = trainyard_master::model::TaskDetail {
        task: sample_task(5, TaskStatus::Failed),
        attempts: vec![trainyard_master::model::Attempt {
            attempt: 1,
            host: "host-2".into(),
            adapter_version: None,
            slot: Some(0),
            dispatched_at_ms: 1,
            started_at_ms: Some(2),
            finished_at_ms: Some(3),
            outcome: Some(trainyard_master::model::AttemptOutcome::LeaseLost),
            error: Some("lease lapsed".into()),
            metrics: None,
            assignment: None,
        }],
        waiting: None,
        quiet_for_ms: None,
    };
    let body = serde_json::to_string(&detail).unwrap();
    let server = serve(move |_| Reply::Json(200, body.clone())).await;
    let client = ApiClient::new(&server.url, None).unwrap();

    assert_eq!(client.task(5).await.unwrap(), detail);
    assert_eq!(server.requests()[0].target, "/v1/tasks/5");
}

#[tokio::test]
async fn hosts_decode_from_the_masters_host_view() {
    let body = r#"{"hosts": [{"id": "host-1", "connected": true, "addr": "127.0.0.1:5000", "slots": 2, "free_slots": 1,
        "adapters": [{"name": "python-trainer", "version": "0.1.0", "kinds": ["train"]}], "agent": "trainyard-host/0.1.0",
        "last_seen_ms": 1700000000000, "running": [{"task": 3, "attempt": 2, "status": "RUNNING", "slot": 0}]}]}"#;
    let server = serve(move |_| Reply::Json(200, body.into())).await;
    let client = ApiClient::new(&server.url, None).unwrap();

    let hosts = client.hosts().await.unwrap();
    assert_eq!(hosts.len(), 1);
    assert_eq!((hosts[0].id.as_str(), hosts[0].free_slots), ("host-1", 1));
    assert_eq!(hosts[0].running[0].task, 3);
    assert_eq!(hosts[0].adapters[0].name, "python-trainer");
}

#[tokio::test]
async fn an_answer_of_the_wrong_shape_names_the_call_and_the_field() {
    let server = serve(|_| Reply::Json(201, r#"{"status": "PENDING"}"#.into())).await;
    let client = ApiClient::new(&server.url, Some("t".into())).unwrap();

    let e = client.submit(&json!({"adapter": "a"})).await.unwrap_err();
    let text = e.to_string();
    assert!(
        text.starts_with("unexpected answer from the master to POST /v1/tasks: missing field `id`"),
        "{text}"
    );
}

#[tokio::test]
async fn a_path_prefix_in_the_base_url_is_kept() {
    let server = serve(|_| Reply::Json(200, r#"{"status": "ok"}"#.into())).await;
    let client = ApiClient::new(&format!("{}/trainyard", server.url), None).unwrap();

    assert_eq!(client.health().await.unwrap()["status"], "ok");
    assert_eq!(server.requests()[0].target, "/trainyard/v1/health");
}

#[test]
fn urls_the_client_cannot_use_are_refused_up_front() {
    let https = ApiClient::new("https://master:7701", None)
        .unwrap_err()
        .to_string();
    assert!(https.contains("https:// needs tls.ca"), "{https}");
    let ftp = ApiClient::new("ftp://master:7701", None)
        .unwrap_err()
        .to_string();
    assert!(
        ftp.contains("use http://HOST:PORT or https://HOST:PORT"),
        "{ftp}"
    );
    let junk = ApiClient::new("master:7701 x", None)
        .unwrap_err()
        .to_string();
    assert!(
        junk.starts_with("invalid master URL \"master:7701 x\""),
        "{junk}"
    );
}

#[tokio::test]
async fn a_degraded_master_still_gives_its_health_report() {
    let server = serve(|_| {
        Reply::Json(
            503,
            r#"{"status": "degraded", "redis": "unreachable"}"#.into(),
        )
    })
    .await;
    let client = ApiClient::new(&server.url, None).unwrap();

    let (ok, report) = client.probe("v1/health").await.unwrap();
    assert!(!ok);
    assert_eq!(report["redis"], "unreachable");
    assert_eq!(client.health().await.unwrap()["status"], "degraded");
}

/// A local port nothing listens on any more.
fn dead_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    url
}

fn standby(status: u16, headers: Vec<(&'static str, String)>, body: &str) -> Reply {
    let mut headers = headers;
    headers.push(("trainyard-served-by", "standby".into()));
    Reply::Headed(status, headers, body.into())
}

#[tokio::test]
async fn when_the_first_master_is_down_the_second_answers_and_is_kept() {
    let dead = dead_url();
    let body =
        serde_json::to_string(&json!({"tasks": [sample_task(1, TaskStatus::Running)]})).unwrap();
    let server = serve(move |_| Reply::Json(200, body.clone())).await;
    let client = ApiClient::new(&format!("{dead}, {}", server.url), None).unwrap();

    assert_eq!(
        client.tasks(None, None, Some(1), None).await.unwrap().len(),
        1
    );
    assert_eq!(client.base_url(), server.url, "the master that answered");
    client.task(1).await.unwrap_err(); // any answer: it goes to the second
    let targets: Vec<String> = server.requests().iter().map(|r| r.target.clone()).collect();
    assert_eq!(targets, ["/v1/tasks?limit=1", "/v1/tasks/1"]);
}

#[tokio::test]
async fn when_no_master_can_be_reached_every_url_is_named() {
    let (a, b) = (dead_url(), dead_url());
    let client = ApiClient::new(&format!("{a},{b}"), None).unwrap();

    let e = client.health().await.unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("cannot reach the master at {a}, {b}: connection refused (is `trainyard master` running?)")
    );
}

#[tokio::test]
async fn a_standbys_redirect_is_followed_with_the_same_method_token_and_body() {
    let leader = serve(|_| {
        Reply::Headed(
            201,
            vec![("trainyard-served-by", "leader".into())],
            r#"{"id": 7, "status": "PENDING"}"#.into(),
        )
    })
    .await;
    let location = format!("{}/v1/tasks", leader.url);
    let standby_master =
        serve(move |_| standby(307, vec![("location", location.clone())], "")).await;
    let client = ApiClient::new(&standby_master.url, Some("s3cret".into())).unwrap();
    let task = json!({"adapter": "noop", "params": {"seed": 3}});

    assert_eq!(client.submit(&task).await.unwrap(), 7);

    assert_eq!(standby_master.requests().len(), 1);
    let sent = &leader.requests()[0];
    assert_eq!(
        (sent.method.as_str(), sent.target.as_str()),
        ("POST", "/v1/tasks")
    );
    assert_eq!(sent.header("authorization"), Some("Bearer s3cret"));
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&sent.body).unwrap(),
        task
    );
}

#[tokio::test]
async fn redirects_that_never_reach_a_leader_end_in_an_error() {
    let looping = serve(|r| standby(307, vec![("location", r.target.clone())], "")).await;
    let client = ApiClient::new(&looping.url, Some("t".into())).unwrap();

    let e = client.cancel(4).await.unwrap_err();
    assert!(matches!(e, ClientError::Redirects { hops: 3, .. }), "{e}");
    assert_eq!(looping.requests().len(), 4, "the first try and three hops");
}

#[tokio::test]
async fn a_standby_without_a_leader_sends_the_client_to_the_next_url() {
    let no_leader = r#"{"error": "this master is a standby and no master leads"}"#;
    let first = serve(move |_| standby(503, vec![], no_leader)).await;
    let second = serve(|_| Reply::Json(200, r#"{"id": 5, "status": "CANCELLED"}"#.into())).await;
    let client =
        ApiClient::new(&format!("{},{}", first.url, second.url), Some("t".into())).unwrap();

    assert_eq!(client.cancel(5).await.unwrap()["status"], "CANCELLED");
    assert_eq!(first.requests().len(), 1);
    assert_eq!(second.requests()[0].target, "/v1/tasks/5/cancel");
    assert_eq!(
        second.requests()[0].header("authorization"),
        Some("Bearer t")
    );
}

#[tokio::test]
async fn when_every_master_is_a_leaderless_standby_their_reason_is_reported() {
    let no_leader = r#"{"error": "this master is a standby and no master leads"}"#;
    let first = serve(move |_| standby(503, vec![], no_leader)).await;
    let second = serve(move |_| standby(503, vec![], no_leader)).await;
    let client =
        ApiClient::new(&format!("{},{}", first.url, second.url), Some("t".into())).unwrap();

    let e = client.cancel(5).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "the master failed the request (503): this master is a standby and no master leads"
    );
    assert_eq!((first.requests().len(), second.requests().len()), (1, 1));
}

#[tokio::test]
async fn a_read_served_by_a_standby_is_noted_once() {
    let detail = serde_json::to_string(&trainyard_master::model::TaskDetail {
        task: sample_task(2, TaskStatus::Pending),
        attempts: vec![],
        waiting: None,
        quiet_for_ms: None,
    })
    .unwrap();
    let server = serve(move |_| standby(200, vec![], &detail)).await;
    let client = ApiClient::new(&server.url, None).unwrap();

    assert!(!client.told_standby.load(Ordering::Relaxed));
    assert_eq!(client.task(2).await.unwrap().task.id, 2);
    assert!(client.told_standby.load(Ordering::Relaxed));
}

/// A master that takes connections and requests and never answers: paused
/// or stalled.
async fn silent_master() -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let held = tokio::spawn(async move {
        let mut open = vec![];
        while let Ok((stream, _)) = listener.accept().await {
            open.push(stream);
        }
    });
    (url, held)
}

#[tokio::test]
async fn a_submission_a_master_took_without_answering_is_not_sent_to_the_next() {
    let (silent, _held) = silent_master().await;
    let second = serve(|_| Reply::Json(201, r#"{"id": 9}"#.into())).await;
    let mut client = ApiClient::new(&format!("{silent},{}", second.url), None).unwrap();
    client.answer_timeout = Duration::from_millis(300);

    let task = json!({"adapter": "noop", "params": {}});
    let e = client.submit(&task).await.unwrap_err();
    assert!(matches!(e, ClientError::NoAnswer { .. }), "{e}");
    assert!(e.to_string().contains("may have been applied"), "{e}");
    assert!(
        !e.is_transient(),
        "a caller retrying transient errors would submit twice"
    );
    assert!(
        second.requests().is_empty(),
        "sent twice: {:?}",
        second.requests()
    );

    // The command's next request starts with the next master.
    assert_eq!(client.submit(&task).await.unwrap(), 9);
    assert_eq!(client.base_url(), second.url);
}

#[tokio::test]
async fn a_read_a_master_took_without_answering_goes_to_the_next() {
    let (silent, _held) = silent_master().await;
    let detail = serde_json::to_string(&trainyard_master::model::TaskDetail {
        task: sample_task(2, TaskStatus::Pending),
        attempts: vec![],
        waiting: None,
        quiet_for_ms: None,
    })
    .unwrap();
    let second = serve(move |_| Reply::Json(200, detail.clone())).await;
    let mut client = ApiClient::new(&format!("{silent},{}", second.url), None).unwrap();
    client.answer_timeout = Duration::from_millis(300);

    assert_eq!(client.task(2).await.unwrap().task.id, 2);
    assert_eq!(second.requests().len(), 1);
}
