//! What a new user meets at the command line: `trainyard watch` on a task
//! that has ended says how it ended and exits; `trainyard progress` prints
//! a finished task's curve as a table, CSV or JSON, a page at a time;
//! `trainyard sweep --wait` follows the trials to their end and `sweep
//! show` lists them; a refused request is said once.

// `serial()` holds a std mutex across each whole test on purpose: the
// multi-process tests take the machine's ports and CPU one at a time.
#![allow(clippy::await_holding_lock)]

use crate::common;

use common::{explain, serial, stdout, Setup, TestCluster};
use serde_json::{json, Value};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use trainyard_master::model::TaskStatus;

const PATIENCE: Duration = Duration::from_secs(120);

/// Runs `trainyard args…` against the cluster; kills it (and fails the
/// test) if it has not ended within `limit`.
fn trainyard(c: &TestCluster, args: &[&str], limit: Duration) -> Output {
    let mut child = Command::new(&c.cluster.bins.trainyard)
        .arg("--config")
        .arg(&c.cluster.config_path)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run trainyard");
    let until = Instant::now() + limit;
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > until {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "`trainyard {}` still ran after {limit:?}: {}",
                args.join(" "),
                explain(&out)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

#[tokio::test]
async fn watching_a_task_that_has_ended_prints_how_it_ended_and_exits() {
    let _serial = serial();
    let c = TestCluster::start(Setup::new("sqlite"), 1).await;
    let id = c.submit(json!({"adapter": "noop", "params": {}})).await;
    c.wait_for_status(id, TaskStatus::Completed, PATIENCE).await;
    let out = trainyard(&c, &["watch", &id.to_string()], Duration::from_secs(30));
    assert!(out.status.success(), "{}", explain(&out));
    let said = stdout(&out);
    assert!(
        said.contains(&format!("task {id}")) && said.contains("COMPLETED"),
        "{said}"
    );
    // With --until-done the status says whether it completed.
    let failed = c
        .submit(json!({"adapter": "test-trainer", "max_attempts": 1, "params": {"episodes": 5, "fail_at_episode": 2}}))
        .await;
    c.wait_for_status(failed, TaskStatus::Failed, PATIENCE)
        .await;
    let out = trainyard(
        &c,
        &["watch", &failed.to_string(), "--until-done"],
        Duration::from_secs(30),
    );
    assert!(!out.status.success(), "{}", explain(&out));
    assert!(stdout(&out).contains("FAILED"), "{}", explain(&out));
}

#[tokio::test]
async fn progress_prints_a_finished_tasks_curve_as_a_table_csv_or_json_a_page_at_a_time() {
    let _serial = serial();
    let c = TestCluster::start(Setup::new("sqlite"), 1).await;
    let id = c
        .submit(json!({"adapter": "python-trainer", "params": {"episodes": 30}}))
        .await;
    let done = c.wait_for_status(id, TaskStatus::Completed, PATIENCE).await;
    let points = c.progress_points(&done).await;
    let id = id.to_string();

    let json: Value = serde_json::from_str(&c.cli(&["progress", &id, "--json"])).unwrap();
    assert_eq!(json["points"].as_array().unwrap(), &points);

    let table = c.cli(&["progress", &id]);
    let rows: Vec<&str> = table.lines().collect();
    assert!(
        rows[0].starts_with("POINT") && rows[0].contains("RETURN"),
        "{table}"
    );
    assert_eq!(rows.len(), points.len() + 1, "{table}");
    assert!(table.contains("steps="), "the trainer's metrics: {table}");

    let csv = c.cli(&["progress", &id, "--csv"]);
    let lines: Vec<&str> = csv.lines().collect();
    assert!(
        lines[0].starts_with("point,attempt,episode,return,at_ms,") && lines[0].contains("epsilon"),
        "{csv}"
    );
    assert_eq!(lines.len(), points.len() + 1);
    let first: Vec<&str> = lines[1].split(',').collect();
    assert_eq!(first[0], points[0]["id"].to_string());
    assert_eq!(first[2], points[0]["episode"].to_string());

    // A page at a time, as the API pages: stderr says how to go on.
    let out = trainyard(&c, &["progress", &id, "--limit", "10", "--csv"], PATIENCE);
    assert!(out.status.success(), "{}", explain(&out));
    assert_eq!(stdout(&out).lines().count(), 11);
    let tenth = &points[9]["id"];
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains(&format!("--after {tenth}")), "{said}");
    let next = c.cli(&[
        "progress",
        &id,
        "--after",
        &tenth.to_string(),
        "--limit",
        "10",
        "--csv",
    ]);
    let next_first: Vec<&str> = next.lines().nth(1).unwrap().split(',').collect();
    assert_eq!(next_first[0], points[10]["id"].to_string());

    let out = trainyard(&c, &["progress", "999999"], PATIENCE);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no task 999999"));
}

#[tokio::test]
async fn sweep_wait_follows_the_trials_to_their_end_and_sweep_show_lists_them() {
    let _serial = serial();
    let c = TestCluster::start(
        Setup {
            slots: 4,
            ..Setup::new("sqlite")
        },
        1,
    )
    .await;
    let out = trainyard(
        &c,
        &[
            "sweep",
            "--adapter",
            "python-trainer",
            "--grid",
            "learning_rate=0.3,0.5",
            "--seeds",
            "2",
            "--param",
            "episodes=20",
            "--metric",
            "mean_return",
            "--name",
            "waited",
            "--wait",
        ],
        Duration::from_secs(180),
    );
    assert!(out.status.success(), "{}", explain(&out));
    let said = stdout(&out);
    assert!(said.contains("state       FINISHED"), "{said}");
    let listed = trials_listed(&said);
    let sweeps = c.client().sweeps(None).await.unwrap();
    let sweep = c.client().sweep(sweeps[0].sweep.id).await.unwrap();
    assert_eq!(sweep.trials.len(), 4);
    for trial in &sweep.trials {
        // It returned once every trial had ended: they all have.
        let task = c.task(trial.task).await.task;
        assert_eq!(task.status, TaskStatus::Completed, "{said}");
        assert_eq!(task.name.as_deref(), Some("waited"));
        let line = listed
            .iter()
            .find(|l| l.split_whitespace().next() == Some(&trial.task.to_string()))
            .unwrap_or_else(|| panic!("trial {} not listed:\n{said}", trial.task));
        assert!(line.contains("COMPLETED"), "{line}");
    }
    let shown = c.cli(&["sweep", "show", &sweep.summary.sweep.id.to_string()]);
    let listed = trials_listed(&shown);
    assert_eq!(listed.len(), sweep.trials.len(), "{shown}");
    for (line, trial) in listed.iter().zip(&sweep.trials) {
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(words[0], trial.task.to_string(), "{shown}");
        assert_eq!(words[2], trial.seed.to_string(), "{shown}");
    }
}

/// The lines of a sweep's trials table, below its header.
fn trials_listed(shown: &str) -> Vec<String> {
    shown
        .lines()
        .skip_while(|l| !l.starts_with("TASK"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn a_refused_request_is_said_once() {
    let _serial = serial();
    let c = TestCluster::start(Setup::new("sqlite"), 1).await;
    let out = trainyard(&c, &["submit", "--adapter", "no-such-adapter"], PATIENCE);
    assert!(!out.status.success(), "{}", explain(&out));
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        said.matches("no-such-adapter").count(),
        1,
        "the error once, not a log line and an error line: {said}"
    );
    assert!(said.starts_with("error: "), "{said}");
}
