//! Who may do what, against a real master, host, Redis and database (both
//! SQLite and PostgreSQL): two teams' tokens, issued with `trainyard team`
//! and `trainyard token`, cannot read or cancel each other's work — on any
//! read endpoint or the event stream, where another team's task is 404 —
//! a viewer cannot submit, a team runs only the adapters the configuration
//! gives it, a revoked token is refused on its next request, reads without
//! a token are refused unless `api.open_reads` is on, and the audit log
//! (`trainyard audit`) holds every change the test made, with who made it
//! and from where.

// `serial()` holds a std mutex across each whole test on purpose: the
// multi-process tests take the machine's ports and CPU one at a time.
#![allow(clippy::await_holding_lock)]

use crate::common::{serial, Setup, TestCluster};
use futures::StreamExt;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use trainyard::client::{ApiClient, StreamEvent, TaskEvent};
use trainyard_master::model::TaskStatus;

const LONG: Duration = Duration::from_secs(240);

/// A task that keeps running (and reporting progress) until cancelled.
fn long_task() -> Value {
    json!({"adapter": "test-trainer", "params": {"episodes": 100000, "step_delay_ms": 20}})
}

/// Runs `trainyard <args>` against the cluster; (succeeded, stdout, stderr).
fn cli(c: &TestCluster, args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(&c.cluster.bins.trainyard)
        .arg("--config")
        .arg(&c.cluster.config_path)
        .args(args)
        .output()
        .expect("run trainyard");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Issues a token with `trainyard token create`; the token it printed.
fn issue(c: &TestCluster, name: &str, role: &str, team: Option<&str>) -> String {
    let mut args = vec!["token", "create", "--name", name, "--role", role];
    if let Some(team) = team {
        args.extend(["--team", team]);
    }
    let (ok, out, err) = cli(c, &args);
    assert!(ok, "token create failed: {err}");
    let token = out.trim().to_string();
    assert!(token.starts_with("tyt_"), "{out:?}");
    token
}

fn client_of(c: &TestCluster, token: &str) -> ApiClient {
    ApiClient::new(&c.cluster.settings.api.url, Some(token.to_string())).expect("client")
}

/// The status of `GET path` with `token` (none when `None`), and its body.
async fn get(c: &TestCluster, token: Option<&str>, path: &str) -> (u16, String) {
    let mut request = reqwest::Client::new().get(format!("{}{path}", c.cluster.settings.api.url));
    if let Some(t) = token {
        request = request.bearer_auth(t);
    }
    let response = request.send().await.expect("the API answers");
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

/// The status of `POST path` (a JSON body) with `token`, and its body.
async fn post(c: &TestCluster, token: Option<&str>, path: &str, body: Value) -> (u16, String) {
    let mut request = reqwest::Client::new()
        .post(format!("{}{path}", c.cluster.settings.api.url))
        .json(&body);
    if let Some(t) = token {
        request = request.bearer_auth(t);
    }
    let response = request.send().await.expect("the API answers");
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

/// Every read endpoint of one task (and its sweep), as a team's principal
/// would ask them.
fn reads_of(task: u64, sweep: u64) -> Vec<String> {
    vec![
        format!("/v1/tasks/{task}"),
        format!("/v1/tasks/{task}/progress"),
        format!("/v1/tasks/{task}/logs?tail=10"),
        format!("/v1/tasks/{task}/artifacts"),
        format!("/v1/tasks/{task}/artifacts/1"),
        format!("/v1/events?task={task}"),
        format!("/v1/sweeps/{sweep}"),
    ]
}

/// Opens `client`'s event stream (subscribed once this returns), then
/// collects the events it hears until `stop` says enough (or the deadline
/// passes).
async fn listen(
    client: ApiClient,
    stop: impl Fn(&TaskEvent) -> bool + Send + 'static,
) -> tokio::task::JoinHandle<Vec<TaskEvent>> {
    let stream = client.events(None).await.expect("the event stream");
    tokio::spawn(heard_until(Box::pin(stream), LONG, stop))
}

async fn heard_until(
    mut stream: std::pin::Pin<
        Box<
            impl futures::Stream<Item = Result<StreamEvent, trainyard::client::ClientError>>
                + Send
                + 'static,
        >,
    >,
    deadline: Duration,
    stop: impl Fn(&TaskEvent) -> bool,
) -> Vec<TaskEvent> {
    let mut heard = vec![];
    let until = Instant::now() + deadline;
    while let Ok(Some(item)) = tokio::time::timeout_at(until.into(), stream.next()).await {
        if let Ok(StreamEvent::Task(e)) = item {
            let enough = stop(&e);
            heard.push(e);
            if enough {
                break;
            }
        }
    }
    heard
}

async fn two_teams_cannot_read_or_cancel_each_others_work_and_every_change_is_audited(
    backend: &'static str,
) {
    let _serial = serial();
    let mut setup = Setup::new(backend);
    setup.slots = 3;
    setup.configure = |s| {
        s.master.team_adapters =
            BTreeMap::from([("red".to_string(), vec!["test-trainer".to_string()])]);
    };
    let c = TestCluster::start(setup, 1).await;
    let admin = c.client();

    // Teams and tokens, the way an admin makes them.
    for team in ["red", "blue"] {
        let (ok, _, err) = cli(&c, &["team", "create", team]);
        assert!(ok, "{err}");
    }
    let red = issue(&c, "red-member", "member", Some("red"));
    let red_viewer = issue(&c, "red-viewer", "viewer", Some("red"));
    let blue = issue(&c, "blue-member", "member", Some("blue"));
    let (red_c, blue_c) = (client_of(&c, &red), client_of(&c, &blue));

    // Red's task reports progress until cancelled: red's stream, opened
    // after it was submitted, hears it (and not only its sweep's trial).
    let red_task = red_c.submit(&long_task()).await.expect("red submits");
    let red_heard = listen(client_of(&c, &red), move |e| {
        e.kind == "progress" && e.task == red_task
    })
    .await;
    let (status, body) = post(
        &c,
        Some(&red),
        "/v1/sweeps",
        json!({"adapter": "test-trainer", "metric": "mean_return", "grid": {"episodes": [5]}}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let created: Value = serde_json::from_str(&body).unwrap();
    let red_sweep = created["id"].as_u64().unwrap();
    let red_trial = created["tasks"][0].as_u64().unwrap();
    c.wait_for_status(red_task, TaskStatus::Running, LONG).await;
    let red_events = red_heard.await.unwrap();
    assert!(
        red_events.iter().any(|e| e.task == red_task),
        "red hears its own task: {red_events:?}"
    );

    // Blue: red's task and sweep do not exist, on any read.
    for path in reads_of(red_task, red_sweep) {
        let (status, body) = get(&c, Some(&blue), &path).await;
        assert_eq!(status, 404, "blue GET {path}: {body}");
        assert!(!body.contains("test-trainer"), "{path}: {body}");
        // Red reads them (the artifact id is a guess, and red's event
        // stream is read below).
        if !path.contains("/artifacts/") && !path.contains("/events") {
            let (status, body) = get(&c, Some(&red), &path).await;
            assert!(status == 200, "red GET {path}: {status} {body}");
        }
    }
    let blue_list = blue_c.tasks(None, None, None, None).await.unwrap();
    assert!(blue_list.iter().all(|t| t.id != red_task), "{blue_list:?}");
    let (_, sweeps) = get(&c, Some(&blue), "/v1/sweeps").await;
    assert_eq!(
        serde_json::from_str::<Value>(&sweeps).unwrap()["sweeps"],
        json!([])
    );
    let hosts = blue_c.hosts().await.unwrap();
    assert!(
        hosts
            .iter()
            .all(|h| h.running.iter().all(|r| r.task != red_task)),
        "blue sees no task of red's on the hosts: {hosts:?}"
    );
    assert_eq!(
        blue_c.cancel(red_task).await.unwrap_err().status(),
        Some(404)
    );
    let (status, _) = post(
        &c,
        Some(&blue),
        &format!("/v1/sweeps/{red_sweep}/cancel"),
        json!({}),
    )
    .await;
    assert_eq!(status, 404);

    // Blue's own work, and the event stream: while red's task reports
    // progress, blue hears its own task to the end and nothing of red's.
    let blue_heard = listen(client_of(&c, &blue), |e| e.status == TaskStatus::Completed).await;
    let listening_from = crate::common::now_ms();
    let blue_task = blue_c
        .submit(&json!({"adapter": "noop"}))
        .await
        .expect("blue may run any adapter");
    let heard = blue_heard.await.unwrap();
    let done = heard
        .iter()
        .find(|e| e.task == blue_task && e.status == TaskStatus::Completed)
        .unwrap_or_else(|| panic!("blue hears its task end: {heard:?}"));
    let tasks: Vec<u64> = heard.iter().map(|e| e.task).collect();
    assert!(
        !tasks.contains(&red_task),
        "blue heard red's task: {tasks:?}"
    );
    assert!(
        !tasks.contains(&red_trial),
        "blue heard red's trial: {tasks:?}"
    );
    // Red's task kept running (and reporting progress) meanwhile.
    let points = red_c.progress(red_task, None, None).await.unwrap().points;
    assert!(!points.is_empty() && listening_from <= done.at_ms);
    let (status, _) = get(&c, Some(&red), &format!("/v1/tasks/{blue_task}")).await;
    assert_eq!(status, 404, "red cannot read blue's task either");

    // Roles and adapter rules.
    let viewer_c = client_of(&c, &red_viewer);
    let refused = viewer_c.submit(&long_task()).await.unwrap_err();
    assert_eq!(refused.status(), Some(403), "{refused}");
    assert!(refused.to_string().contains("may not submit"), "{refused}");
    assert_eq!(viewer_c.task(red_task).await.unwrap().task.team, "red");
    assert_eq!(
        viewer_c.cancel(red_task).await.unwrap_err().status(),
        Some(403)
    );
    let refused = red_c.submit(&json!({"adapter": "noop"})).await.unwrap_err();
    assert_eq!(refused.status(), Some(403));
    assert!(
        refused
            .to_string()
            .contains("team red may not run adapter noop"),
        "{refused}"
    );

    // Red cancels its own task; the admin sees every team's.
    red_c.cancel(red_task).await.expect("red cancels its task");
    c.wait_for_status(red_task, TaskStatus::Cancelled, LONG)
        .await;
    let all = admin.tasks(None, None, None, None).await.unwrap();
    assert!(all.iter().any(|t| t.id == red_task) && all.iter().any(|t| t.id == blue_task));

    // Revocation holds from the next request on.
    let blue_id = cli(&c, &["token", "list", "--json"]).1;
    let blue_id = serde_json::from_str::<Vec<Value>>(&blue_id)
        .unwrap()
        .into_iter()
        .find(|t| t["name"] == "blue-member")
        .unwrap()["id"]
        .as_i64()
        .unwrap();
    let (ok, _, err) = cli(&c, &["token", "revoke", &blue_id.to_string()]);
    assert!(ok, "{err}");
    let (status, body) = get(&c, Some(&blue), &format!("/v1/tasks/{blue_task}")).await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("revoked"), "{body}");
    let (status, body) = get(&c, None, "/v1/tasks").await;
    assert_eq!(status, 401, "reads need a token: {body}");
    assert_eq!(get(&c, Some("tyt_not-a-token"), "/v1/tasks").await.0, 401);

    // The audit log holds every change above, with who and from where.
    let (ok, out, err) = cli(&c, &["audit", "--json", "--limit", "100"]);
    assert!(ok, "{err}");
    let entries: Vec<Value> = serde_json::from_str(&out).unwrap();
    let did = |who: &str, action: &str, target: &str| {
        entries
            .iter()
            .any(|e| e["principal"] == who && e["action"] == action && e["target"] == target)
    };
    for team in ["red", "blue"] {
        assert!(
            did("api.token", "team.create", &format!("team {team}")),
            "{out}"
        );
    }
    let token_creates = entries
        .iter()
        .filter(|e| e["action"] == "token.create")
        .count();
    assert_eq!(token_creates, 3, "{out}");
    assert!(
        did("red-member", "task.submit", &format!("task {red_task}")),
        "{out}"
    );
    assert!(
        did("red-member", "sweep.create", &format!("sweep {red_sweep}")),
        "{out}"
    );
    assert!(
        did("blue-member", "task.submit", &format!("task {blue_task}")),
        "{out}"
    );
    assert!(
        did("red-member", "task.cancel", &format!("task {red_task}")),
        "{out}"
    );
    assert!(
        did("api.token", "token.revoke", &format!("token {blue_id}")),
        "{out}"
    );
    // Refused requests changed nothing, and are not changes.
    assert_eq!(entries.len(), 2 + 3 + 4 + 1, "{out}");
    assert!(entries.iter().all(|e| e["source"]
        .as_str()
        .is_some_and(|s| s.starts_with("127.0.0.1:"))));
    // Members may not read it.
    assert_eq!(get(&c, Some(&red), "/v1/audit").await.0, 403);
}

/// `api.open_reads`: a lab keeps reading without a token; changes still
/// need one.
#[tokio::test(flavor = "multi_thread")]
async fn open_reads_let_reads_through_without_a_token_but_not_changes() {
    let _serial = serial();
    let mut setup = Setup::new("sqlite");
    setup.configure = |s| s.api.open_reads = true;
    let c = TestCluster::start(setup, 1).await;
    let id = c
        .client()
        .submit(&json!({"adapter": "noop"}))
        .await
        .unwrap();
    let (status, body) = get(&c, None, &format!("/v1/tasks/{id}")).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = post(&c, None, "/v1/tasks", json!({"adapter": "noop"})).await;
    assert_eq!(status, 401, "{body}");
    let (status, _) = post(&c, None, &format!("/v1/tasks/{id}/cancel"), json!({})).await;
    assert_eq!(status, 401);
}

on_both_backends!(two_teams_cannot_read_or_cancel_each_others_work_and_every_change_is_audited,);
