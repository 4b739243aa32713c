//! `GET /v1/tasks/{id}/logs` and `trainyard logs`: a trainer's stdout and
//! stderr and its adapter's records reach the master in order with their
//! streams, on SQLite and PostgreSQL; a trainer printing as fast as it can
//! is bounded, with its drops counted and marked, while another task runs
//! to its end; `follow=true` delivers lines printed after the request
//! began and ends with the task; bad requests are refused.

// `serial()` holds a std mutex across each whole test on purpose: the
// multi-process tests take the machine's ports and CPU one at a time.
#![allow(clippy::await_holding_lock)]

use crate::common;

use common::{serial, Setup, TestCluster};
use futures::StreamExt;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use trainyard::client::{LogEvent, LogLine, LogPage, LogQuery};
use trainyard_master::logs::bound::{MAX_BYTES, MAX_LINES};
use trainyard_master::model::TaskStatus;

fn setup(backend: &'static str) -> Setup {
    let mut setup = Setup::new(backend);
    setup.adapters.push(("script-trainer", vec!["python3"]));
    setup
}

async fn script(c: &TestCluster, source: &str) -> u64 {
    c.submit(json!({
        "adapter": "script-trainer",
        "params": {"script": source},
        "max_attempts": 1,
    }))
    .await
}

fn texts<'a>(lines: &'a [LogLine], stream: &str) -> Vec<&'a str> {
    lines
        .iter()
        .filter(|l| l.stream == stream)
        .map(|l| l.text.as_str())
        .collect()
}

/// Reads the task's lines until `done` holds for them.
async fn logs_until(
    c: &TestCluster,
    id: u64,
    query: LogQuery,
    what: &str,
    done: impl Fn(&LogPage) -> bool,
) -> LogPage {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let page = c.client().logs(id, query).await.expect("logs");
        if done(&page) {
            return page;
        }
        assert!(
            Instant::now() < until,
            "{what} not seen within 30 s: {page:#?}\n{}",
            c.all_logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn get(c: &TestCluster, url: &str) -> (u16, Value) {
    let response = c.http_get(url).send().await.expect("request");
    let status = response.status().as_u16();
    let body = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&body).unwrap_or(Value::String(body)),
    )
}

const PRINTS_BOTH_STREAMS: &str = r#"import sys
for i in range(5):
    print(f'out {i}', flush=True)
    print(f'err {i}', file=sys.stderr, flush=True)
"#;

async fn trainer_and_adapter_lines_arrive_in_order(backend: &'static str) {
    let _serial = serial();
    let c = TestCluster::start(setup(backend), 1).await;
    let id = script(&c, PRINTS_BOTH_STREAMS).await;
    c.wait_for_status(id, TaskStatus::Completed, Duration::from_secs(60))
        .await;
    let page = logs_until(&c, id, LogQuery::default(), "10 lines", |p| {
        p.lines.len() >= 10
    })
    .await;
    let expect = |prefix: &str| (0..5).map(|i| format!("{prefix} {i}")).collect::<Vec<_>>();
    assert_eq!(texts(&page.lines, "stdout"), expect("out"), "{page:#?}");
    assert_eq!(texts(&page.lines, "stderr"), expect("err"), "{page:#?}");
    assert!(page.lines.iter().all(|l| l.attempt == 1));
    assert!(
        page.lines.windows(2).all(|w| w[0].seq < w[1].seq),
        "oldest first: {page:#?}"
    );
    assert_eq!(page.dropped, 0);

    // Paging: the last two, then forward from the first.
    let tail = c
        .client()
        .logs(
            id,
            LogQuery {
                tail: Some(2),
                ..LogQuery::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(tail.lines, page.lines[page.lines.len() - 2..]);
    let after = c
        .client()
        .logs(
            id,
            LogQuery {
                after: Some(page.lines[0].seq),
                tail: Some(3),
                ..LogQuery::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(after.lines, page.lines[1..4]);

    // The adapter's records: python-trainer says what it prepares.
    let trained = c
        .submit(json!({
            "adapter": "python-trainer",
            "params": {"episodes": 5, "seed": 1},
        }))
        .await;
    c.wait_for_status(trained, TaskStatus::Completed, Duration::from_secs(60))
        .await;
    // The master records log batches apart from the task's end, so the
    // lines may land just after the status reads COMPLETED.
    let page = logs_until(
        &c,
        trained,
        LogQuery::default(),
        "the adapter's record and the trainer's output",
        |p| {
            p.lines.iter().any(|l| l.stream == "adapter")
                && p.lines.iter().any(|l| l.stream == "stdout")
        },
    )
    .await;
    let record = texts(&page.lines, "adapter")[0];
    assert!(
        record.starts_with(&format!("info: attempt 1 of task {trained}")),
        "{record}"
    );

    // The CLI prints them, stream-prefixed, in the same order.
    let printed = c.cli(&["logs", &id.to_string()]);
    let shown: Vec<&str> = printed.lines().collect();
    let want: Vec<String> = page_lines_as_printed(&c, id).await;
    assert_eq!(shown, want);
    assert!(
        shown.contains(&"out 0") && shown.contains(&"[stderr] err 4"),
        "{printed}"
    );
}

/// The lines of `id` as `trainyard logs` should print them.
async fn page_lines_as_printed(c: &TestCluster, id: u64) -> Vec<String> {
    let page = c.client().logs(id, LogQuery::default()).await.unwrap();
    page.lines
        .iter()
        .map(|l| match l.stream.as_str() {
            "stdout" => l.text.clone(),
            s => format!("[{s}] {}", l.text),
        })
        .collect()
}

#[tokio::test]
async fn trainer_and_adapter_lines_arrive_in_order_on_sqlite() {
    trainer_and_adapter_lines_arrive_in_order("sqlite").await;
}

#[tokio::test]
async fn trainer_and_adapter_lines_arrive_in_order_on_postgres() {
    trainer_and_adapter_lines_arrive_in_order("postgres").await;
}

/// Prints on stderr as fast as it can for six seconds (stderr does not go
/// through the adapter, so nothing slows it), pauses while the host ships
/// its backlog, then prints one last line.
const FLOODS: &str = r#"import sys, time
end = time.time() + 6
i = 0
pad = 'x' * 100
while time.time() < end:
    for _ in range(1000):
        sys.stderr.write(f'flood {i} {pad}\n')
        i += 1
sys.stderr.flush()
time.sleep(3)
print(f'done after {i} lines', flush=True)
"#;

#[tokio::test]
async fn a_flooding_trainer_is_bounded_with_a_visible_drop_count_while_another_task_completes() {
    let _serial = serial();
    let mut s = setup("sqlite");
    s.slots = 2;
    let mut c = TestCluster::start(s, 1).await;
    let flood = script(&c, FLOODS).await;
    logs_until(&c, flood, LogQuery::default(), "the flood", |p| {
        p.lines.len() >= 100
    })
    .await;

    // Dispatch and the other task go on meanwhile.
    let started = Instant::now();
    let other = script(&c, "print('calm', flush=True)\n").await;
    c.wait_for_status(other, TaskStatus::Completed, Duration::from_secs(30))
        .await;
    let calm = started.elapsed();
    let flood_state = c.task(flood).await.task.status;
    assert_eq!(flood_state, TaskStatus::Running, "the flood still ran");
    eprintln!("another task completed in {calm:?} during the flood");

    c.wait_for_status(flood, TaskStatus::Completed, Duration::from_secs(120))
        .await;
    // Stored, then trimmed past the bound in the same write: read every
    // stored line until the last one is in and the bound holds.
    let until = Instant::now() + Duration::from_secs(30);
    let (lines, dropped) = loop {
        let (lines, dropped) = stored(&c, flood).await;
        let done = lines
            .last()
            .is_some_and(|l| l.text.starts_with("done after"));
        if done && lines.len() <= MAX_LINES {
            break (lines, dropped);
        }
        assert!(
            Instant::now() < until,
            "{} lines stored, the last {:?}\n{}",
            lines.len(),
            lines.last(),
            c.all_logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let printed: u64 = lines.last().unwrap().text["done after ".len()..]
        .trim_end_matches(" lines")
        .parse()
        .unwrap();
    let bytes: usize = lines.iter().map(|l| l.text.len()).sum();
    let markers = lines
        .iter()
        .filter(|l| l.text.starts_with("[trainyard] "))
        .count();
    eprintln!(
        "flood: {printed} lines printed, {} stored ({bytes} bytes, {markers} markers), {dropped} dropped",
        lines.len(),
    );
    assert!(bytes <= MAX_BYTES, "{bytes}");
    assert!(dropped > 0);
    assert!(
        (lines.len() - markers) as u64 + dropped > printed,
        "every line printed is stored or counted dropped"
    );
    let page = LogPage { lines, dropped };
    // Neither process held the flood: their peak memory stays far below
    // what it printed (some 350 MB).
    for process in [c.master().pid(), c.host("host-1").pid()] {
        let peak = peak_rss_mib(process.expect("running"));
        eprintln!("peak resident memory: {peak} MiB");
        assert!(peak < 128, "{peak} MiB");
    }
    assert!(
        page.lines
            .iter()
            .any(|l| l.stream == "stderr" && l.text.contains("stderr lines dropped here")),
        "a marker shows where lines went"
    );
    // The newest lines stay: the flood's tail is there, in order.
    let flooded: Vec<u64> = page
        .lines
        .iter()
        .filter_map(|l| l.text.strip_prefix("flood "))
        .map(|t| t.split(' ').next().unwrap().parse().unwrap())
        .collect();
    assert!(flooded.windows(2).all(|w| w[0] < w[1]));
    assert!(*flooded.last().unwrap() > printed / 2, "{flooded:?}");

    let printed = c.cli(&["logs", &flood.to_string(), "--tail", "5"]);
    assert!(
        printed.starts_with(&format!("[{} lines dropped]\n", page.dropped)),
        "{printed}"
    );
    assert!(printed.trim_end().ends_with(" lines"), "{printed}");
}

/// The peak resident memory of process `pid` (`VmHWM`), in MiB.
fn peak_rss_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .expect("VmHWM");
    kib / 1024
}

/// Every line stored for `id` (paging forward), and the drop count.
async fn stored(c: &TestCluster, id: u64) -> (Vec<LogLine>, u64) {
    let mut lines: Vec<LogLine> = vec![];
    let mut dropped = 0;
    loop {
        let page = c
            .client()
            .logs(
                id,
                LogQuery {
                    after: Some(lines.last().map_or(0, |l| l.seq)),
                    tail: Some(trainyard_master::store::MAX_LOG_READ),
                    ..LogQuery::default()
                },
            )
            .await
            .expect("logs");
        dropped = dropped.max(page.dropped);
        if page.lines.is_empty() {
            return (lines, dropped);
        }
        lines.extend(page.lines);
    }
}

const WAITS_THEN_PRINTS: &str = r#"import time
print('before', flush=True)
time.sleep(3)
print('after', flush=True)
"#;

#[tokio::test]
async fn following_delivers_lines_printed_after_the_request_and_ends_with_the_task() {
    let _serial = serial();
    let c = TestCluster::start(setup("sqlite"), 1).await;
    let id = script(&c, WAITS_THEN_PRINTS).await;
    let seen = logs_until(&c, id, LogQuery::default(), "before", |p| {
        !p.lines.is_empty()
    })
    .await;
    assert_eq!(texts(&seen.lines, "stdout"), ["before"], "not yet 'after'");

    let cli = tokio::process::Command::new(&c.cluster.bins.trainyard)
        .arg("--config")
        .arg(&c.cluster.config_path)
        .args(["logs", "-f", &id.to_string()])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("trainyard logs -f");
    let stream = c
        .client()
        .follow_logs(id, LogQuery::default())
        .await
        .expect("follow");
    let events =
        match tokio::time::timeout(Duration::from_secs(60), stream.collect::<Vec<_>>()).await {
            Ok(events) => events,
            Err(_) => panic!(
                "the stream did not end with the task (now {})\n{}",
                c.task(id).await.task.status.as_str(),
                c.all_logs()
            ),
        };
    let events: Vec<LogEvent> = events.into_iter().map(|e| e.expect("event")).collect();
    let lines: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            LogEvent::Line(l) => Some(l.text.as_str()),
            LogEvent::Dropped { .. } => None,
        })
        .collect();
    assert_eq!(lines, ["before", "after"]);
    assert!(c.task(id).await.task.status.is_terminal());

    let out = tokio::time::timeout(Duration::from_secs(60), cli.wait_with_output())
        .await
        .expect("trainyard logs -f ends with the task")
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "before\nafter\n");
}

#[tokio::test]
async fn each_attempt_keeps_its_own_lines_and_the_cli_marks_where_attempts_change() {
    let _serial = serial();
    let c = TestCluster::start(setup("sqlite"), 1).await;
    let id = c
        .submit(json!({
            "adapter": "test-trainer",
            "params": {"episodes": 6, "fail_at_episode": 3, "fail_until_attempt": 1},
        }))
        .await;
    let done = c
        .wait_for_status(id, TaskStatus::Completed, Duration::from_secs(90))
        .await;
    assert_eq!(done.task.attempt, 2, "the first attempt failed");
    let one = LogQuery {
        attempt: Some(1),
        ..LogQuery::default()
    };
    let two = LogQuery {
        attempt: Some(2),
        ..LogQuery::default()
    };
    let first = logs_until(&c, id, one, "attempt 1's lines", |p| !p.lines.is_empty()).await;
    // Following a finished task answers once every line it shipped is
    // stored: then the page is complete.
    let followed: Vec<_> = c
        .client()
        .follow_logs(id, two)
        .await
        .expect("follow")
        .collect()
        .await;
    assert!(followed.iter().all(|e| e.is_ok()), "{followed:?}");
    let second = c.client().logs(id, two).await.unwrap();
    assert!(
        second.lines.iter().any(|l| l.stream == "stdout"),
        "{second:#?}"
    );
    assert!(first.lines.iter().all(|l| l.attempt == 1), "{first:#?}");
    assert!(second.lines.iter().all(|l| l.attempt == 2), "{second:#?}");
    assert!(first.lines.last().unwrap().seq < second.lines[0].seq);

    let printed = c.cli(&["logs", &id.to_string(), "--tail", "10000"]);
    let separators: Vec<&str> = printed
        .lines()
        .filter(|l| l.starts_with("[attempt "))
        .collect();
    assert_eq!(separators, ["[attempt 2]"], "{printed}");
    let only_two = c.cli(&["logs", &id.to_string(), "--attempt", "2"]);
    assert!(only_two.starts_with("[attempt 2]\n"), "{only_two}");
    assert_eq!(only_two.lines().count(), second.lines.len() + 1);
}

#[tokio::test]
async fn bad_log_requests_are_refused_with_a_json_error() {
    let _serial = serial();
    let c = TestCluster::start(setup("sqlite"), 1).await;
    let id = script(&c, "print('hi')\n").await;
    c.wait_for_status(id, TaskStatus::Completed, Duration::from_secs(60))
        .await;
    let base = &c.cluster.settings.api.url;
    let (status, body) = get(&c, &format!("{base}/v1/tasks/999999/logs")).await;
    assert_eq!(status, 404, "{body}");
    assert!(body["error"].is_string(), "{body}");
    let (status, body) = get(&c, &format!("{base}/v1/tasks/999999/logs?follow=true")).await;
    assert_eq!(status, 404, "{body}");
    let url = format!("{base}/v1/tasks/{id}/logs");
    for bad in [
        "tail=abc",
        "tail=0",
        "tail=10001",
        "tail=-1",
        "attempt=0",
        "after=-1",
        "follow=maybe",
        "colour=red",
    ] {
        let (status, body) = get(&c, &format!("{url}?{bad}")).await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert!(body["error"].is_string(), "{bad}: {body}");
    }
    logs_until(&c, id, LogQuery::default(), "the line", |p| {
        !p.lines.is_empty()
    })
    .await;
    let (status, body) = get(&c, &format!("{url}?attempt=1&tail=10000")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["lines"][0]["text"], "hi", "{body}");
    assert_eq!(body["lines"][0]["stream"], "stdout", "{body}");
    assert_eq!(body["dropped"], 0, "{body}");
}
