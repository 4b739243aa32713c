//! `/metrics` on a real cluster: a master and a host with
//! `host.metrics_listen` run a few tasks, and both endpoints, read back with
//! a Prometheus text-format parser, count exactly those tasks. The scrapes
//! carry no token: the endpoints are open like the API's reads.

// `serial()` holds a std mutex across each whole test on purpose: the
// multi-process tests take the machine's ports and CPU one at a time.
#![allow(clippy::await_holding_lock)]

use crate::common;

use common::{serial, Setup, TestCluster};
use prometheus_parse::{Scrape, Value};
use serde_json::json;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use trainyard_master::model::TaskStatus;
use trainyard_testkit::free_port;

/// Reads `url` and parses it as the Prometheus text format.
async fn scrape(url: &str) -> Scrape {
    let response = reqwest::get(url).await.expect("scrape");
    assert_eq!(response.status().as_u16(), 200, "{url}");
    let content_type = response.headers()[reqwest::header::CONTENT_TYPE]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "the Prometheus text format: {content_type}"
    );
    let body = response.text().await.expect("body");
    Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).expect("a valid exposition")
}

/// The value of the sample `name` with exactly `labels`.
fn value(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    scrape
        .samples
        .iter()
        .find(|s| {
            s.metric == name
                && s.labels.len() == labels.len()
                && labels.iter().all(|(k, v)| s.labels.get(k) == Some(v))
        })
        .and_then(|s| match s.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => Some(v),
            _ => None,
        })
}

/// Whether `name` is a histogram (its buckets parsed as one) in `scrape`.
fn is_histogram(scrape: &Scrape, name: &str) -> bool {
    scrape
        .samples
        .iter()
        .any(|s| s.metric == name && matches!(s.value, Value::Histogram(_)))
}

/// Scrapes `url` until `done` holds (the scheduler publishes its counts at
/// the end of the turn that recorded a task's end, just after the database
/// shows it).
async fn scrape_until(url: &str, what: &str, done: impl Fn(&Scrape) -> bool) -> Scrape {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let s = scrape(url).await;
        if done(&s) {
            return s;
        }
        assert!(Instant::now() < until, "{what}: {:#?}", s.samples);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn metrics_count_the_tasks_a_cluster_ran() {
    let _serial = serial();
    let mut c = TestCluster::prepare(Setup::new("sqlite")).await;
    c.start_master().await;
    let host_metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    c.start_host_with("host-1", "host-1", |s| {
        s.host.metrics_listen = Some(host_metrics)
    });
    c.wait_for_hosts(1).await;

    let mut completed = vec![];
    for _ in 0..3 {
        completed.push(
            c.submit(json!({"adapter": "noop", "params": {"spawn": true}}))
                .await,
        );
    }
    let failed = c
        .submit(json!({"adapter": "python-trainer", "params": {"learning_rate": 7}}))
        .await;
    for id in &completed {
        c.wait_for_status(*id, TaskStatus::Completed, Duration::from_secs(60))
            .await;
    }
    c.wait_for_status(failed, TaskStatus::Failed, Duration::from_secs(60))
        .await;

    let master = format!("{}/metrics", c.cluster.settings.api.url);
    let m = scrape_until(&master, "the master counts every task's end", |m| {
        value(m, "trainyard_tasks_completed_total", &[("adapter", "noop")]) == Some(3.0)
            && value(
                m,
                "trainyard_tasks_failed_total",
                &[("adapter", "python-trainer")],
            ) == Some(1.0)
            && value(m, "trainyard_recovery_sweep_duration_seconds_count", &[])
                .is_some_and(|n| n >= 1.0)
    })
    .await;
    let noop = [("adapter", "noop")];
    let python = [("adapter", "python-trainer")];
    assert_eq!(
        value(&m, "trainyard_tasks_submitted_total", &noop),
        Some(3.0)
    );
    assert_eq!(
        value(&m, "trainyard_tasks_submitted_total", &python),
        Some(1.0)
    );
    assert_eq!(value(&m, "trainyard_tasks_retried_total", &noop), Some(0.0));
    assert_eq!(value(&m, "trainyard_tasks_failed_total", &noop), Some(0.0));
    assert_eq!(
        value(&m, "trainyard_tasks_cancelled_total", &python),
        Some(0.0)
    );
    let status = |s: &str| value(&m, "trainyard_tasks", &[("status", s)]);
    assert_eq!(status("COMPLETED"), Some(3.0));
    assert_eq!(status("FAILED"), Some(1.0));
    assert_eq!(status("PENDING"), Some(0.0));
    assert_eq!(status("RUNNING"), Some(0.0));
    // Every task waited in the queue once and started once.
    for histogram in [
        "trainyard_queue_wait_seconds",
        "trainyard_submit_to_start_seconds",
    ] {
        assert!(is_histogram(&m, histogram), "{histogram}");
        let count = value(&m, &format!("{histogram}_count"), &[]);
        assert_eq!(count, Some(4.0), "{histogram}");
    }
    for histogram in [
        "trainyard_scheduler_turn_duration_seconds",
        "trainyard_scheduler_turn_commands",
        "trainyard_recovery_sweep_duration_seconds",
    ] {
        assert!(is_histogram(&m, histogram), "{histogram}");
    }
    let turns = value(&m, "trainyard_scheduler_turns_total", &[]).unwrap();
    let commands = value(&m, "trainyard_scheduler_turn_commands_count", &[]).unwrap();
    assert!(turns >= commands && commands >= 1.0, "{turns} {commands}");
    assert!(value(&m, "trainyard_recovery_sweep_redis_round_trips_total", &[]).unwrap() >= 1.0);
    assert_eq!(value(&m, "trainyard_hosts_connected", &[]), Some(1.0));
    assert_eq!(value(&m, "trainyard_slots", &[]), Some(1.0));
    assert_eq!(value(&m, "trainyard_slots_free", &[]), Some(1.0));
    // A report may arrive twice (over the connection and from Redis).
    assert!(value(&m, "trainyard_reports_duplicate_total", &[]).is_some());
    assert_eq!(
        value(&m, "trainyard_lease_renewal_failures_total", &[]),
        Some(0.0)
    );
    assert_eq!(value(&m, "trainyard_redis_up", &[]), Some(1.0));

    // The host: each adapter call timed, each trainer's end counted.
    let h = scrape(&format!("http://{host_metrics}/metrics")).await;
    let calls = "trainyard_host_adapter_call_duration_seconds";
    assert!(is_histogram(&h, calls));
    let count = |adapter: &str, function: &str| {
        value(
            &h,
            &format!("{calls}_count"),
            &[("adapter", adapter), ("function", function)],
        )
    };
    assert_eq!(count("noop", "prepare"), Some(3.0));
    assert_eq!(count("noop", "finish"), Some(3.0));
    assert_eq!(count("python-trainer", "prepare"), Some(1.0));
    assert_eq!(
        count("python-trainer", "finish"),
        None,
        "a task failed by prepare launches nothing"
    );
    assert_eq!(
        value(
            &h,
            "trainyard_host_trainer_exits_total",
            &[("reason", "exited_zero")]
        ),
        Some(3.0),
        "{:#?}",
        h.samples
    );
    assert_eq!(value(&h, "trainyard_host_attempts_running", &[]), Some(0.0));
    assert!(value(&h, "trainyard_host_reports_resent_total", &[]).is_some());

    // The scheduler keeps the counts by status; a new master starts them
    // from the database, though it counted no task's end itself.
    c.restart_master().await;
    let m = scrape(&master).await;
    let ended_here = value(&m, "trainyard_tasks_completed_total", &noop);
    assert_eq!(ended_here.unwrap_or(0.0), 0.0);
    let status = |s: &str| value(&m, "trainyard_tasks", &[("status", s)]);
    assert_eq!(status("COMPLETED"), Some(3.0), "{:#?}", m.samples);
    assert_eq!(status("FAILED"), Some(1.0), "{:#?}", m.samples);
    assert_eq!(status("PENDING"), Some(0.0), "{:#?}", m.samples);
    let health = common::health(&c.cluster.settings.api.url)
        .await
        .expect("the restarted master answers /v1/health");
    assert_eq!(health["tasks"]["COMPLETED"], 3, "{health}");
    assert_eq!(health["tasks"]["FAILED"], 1, "{health}");
}
