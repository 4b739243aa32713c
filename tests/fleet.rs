//! A fleet that holds when one host is wrong: a host whose trainers cannot
//! start fails no task and is quarantined, a host whose memory limit is too
//! small for Python burns no attempt, hosts drain (gracefully or at once),
//! and their standing outlives a master restart and a failover — real
//! master and host processes, Redis, SQLite and PostgreSQL.

// `serial()` holds a std mutex across each whole test on purpose: the
// multi-process tests take the machine's ports and CPU one at a time.
#![allow(clippy::await_holding_lock)]

use crate::common::{self, serial, Setup, TestCluster};
use serde_json::json;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use trainyard::client::HostView;
use trainyard::cluster::{Process, SYSTEM_PATH};
use trainyard_master::model::{AttemptOutcome, TaskDetail, TaskStatus};

const LONG: Duration = Duration::from_secs(240);

/// A directory holding a `python3` that runs the system's, for a host's
/// `PATH`; every user may run it until [`lock`] closes the directory.
fn wrapper_bin(c: &TestCluster) -> PathBuf {
    let bin = c.cluster.dir.join("wrapper-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let python = bin.join("python3");
    std::fs::write(&python, "#!/bin/sh\nexec /usr/bin/python3 \"$@\"\n").unwrap();
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

/// Closes `dir` to everyone but its owner (root): the trainer's user can no
/// longer run what is in it.
fn lock(dir: &PathBuf) {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
}

/// Starts host `id` with `bin` first on its `PATH`.
fn start_host_with_path(c: &mut TestCluster, id: &str, bin: &std::path::Path) {
    let work = c.cluster.dir.join("work").join(id);
    let mut env: Vec<(String, String)> = c
        .cluster
        .env
        .iter()
        .filter(|(k, _)| k != "PATH")
        .cloned()
        .collect();
    env.push(("PATH".into(), format!("{}:{SYSTEM_PATH}", bin.display())));
    let args: Vec<String> = [
        "--config",
        &c.cluster.config_path.display().to_string(),
        "host",
        "--id",
        id,
        "--work-dir",
        &work.display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let log = c.cluster.dir.join(format!("{id}.log"));
    let process = Process::spawn(id, &c.cluster.bins.trainyard, &args, &env, &log)
        .unwrap_or_else(|e| panic!("cannot start {id}: {e:#}"));
    c.hosts.push(process);
}

fn host<'a>(hosts: &'a [HostView], id: &str) -> Option<&'a HostView> {
    hosts.iter().find(|h| h.id == id)
}

fn quarantined(hosts: &[HostView], id: &str) -> bool {
    host(hosts, id).is_some_and(|h| h.state == "quarantined" && h.standing.quarantine.is_some())
}

fn short_task() -> serde_json::Value {
    json!({"adapter": "test-trainer", "params": {"episodes": 20}})
}

fn long_task() -> serde_json::Value {
    json!({"adapter": "test-trainer", "params": {"episodes": 600, "step_delay_ms": 10}})
}

fn hosts_of(d: &TaskDetail, outcome: AttemptOutcome) -> Vec<String> {
    d.attempts
        .iter()
        .filter(|a| a.outcome == Some(outcome))
        .map(|a| a.host.clone())
        .collect()
}

async fn a_broken_host_is_quarantined_and_costs_no_task_an_attempt(backend: &'static str) {
    let _serial = serial();
    let mut c = TestCluster::prepare(Setup {
        slots: 2,
        ..Setup::new(backend)
    })
    .await;
    c.start_master().await;
    c.start_host("host-1");
    let bin = wrapper_bin(&c);
    start_host_with_path(&mut c, "host-2", &bin);
    c.wait_for_hosts(2).await;
    // host-2 passed its start-up checks; now its trainers' python3 is out
    // of their user's reach, as a pyenv Python in root's home is.
    lock(&bin);

    // Long enough that host-1's slots stay busy while host-2 cools down
    // after each failure and comes back for more.
    let mut ids = vec![];
    for _ in 0..12 {
        let task =
            json!({"adapter": "test-trainer", "params": {"episodes": 100, "step_delay_ms": 10}});
        ids.push(c.submit(task).await);
    }
    let mut faults = 0;
    for id in &ids {
        let done = c.wait_for_status(*id, TaskStatus::Completed, LONG).await;
        assert_eq!(
            done.task.runs, 1,
            "task {id} used an attempt on the broken host: {:#?}",
            done.attempts
        );
        assert_eq!(hosts_of(&done, AttemptOutcome::Completed), ["host-1"]);
        let faulted = hosts_of(&done, AttemptOutcome::HostFault);
        assert!(
            faulted.iter().all(|h| h == "host-2"),
            "{:#?}",
            done.attempts
        );
        assert!(
            faulted.len() <= 1,
            "it kept off host-2 after failing there: {:#?}",
            done.attempts
        );
        for a in done
            .attempts
            .iter()
            .filter(|a| a.outcome == Some(AttemptOutcome::HostFault))
        {
            let error = a.error.as_deref().unwrap_or_default();
            assert!(error.contains("Permission denied"), "{error}");
        }
        faults += faulted.len();
    }
    assert!(
        faults >= 3,
        "the broken host got work ({faults} host faults)\n{}",
        c.all_logs()
    );

    let hosts = c
        .wait_for_hosts_where("host-2 quarantined", |h| quarantined(h, "host-2"))
        .await;
    let q = host(&hosts, "host-2")
        .unwrap()
        .standing
        .quarantine
        .clone()
        .unwrap();
    assert_eq!(
        q.reason,
        "its last 3 attempts failed for the host's own reasons"
    );
    assert!(
        q.last_error
            .as_deref()
            .is_some_and(|e| e.contains("Permission denied")),
        "{q:?}"
    );
    assert_eq!(host(&hosts, "host-1").unwrap().state, "open");
    let listed = c.cli(&["hosts"]);
    assert!(
        listed.contains("host-2 quarantined") && listed.contains("Permission denied"),
        "{listed}"
    );
    let metrics = reqwest::get(format!("{}/metrics", c.cluster.settings.api.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(r#"trainyard_host_standing{host="host-2",state="quarantined"} 1"#),
        "{metrics}"
    );
}

async fn a_host_whose_memory_limit_is_too_small_for_python_burns_no_attempt(backend: &'static str) {
    let _serial = serial();
    let mut setup = Setup::new(backend);
    setup.configure = |s| {
        // Too small for the interpreter to start: every trainer is killed.
        s.host.containment.limits.memory = Some(2 << 20);
        s.master.quarantine.probe_after = Duration::from_secs(2);
    };
    let c = TestCluster::start(setup, 1).await;
    let ids = [c.submit(short_task()).await, c.submit(short_task()).await];

    let hosts = c
        .wait_for_hosts_where("host-1 quarantined after a failed probe", |h| {
            host(h, "host-1")
                .and_then(|h| h.standing.quarantine.as_ref())
                .is_some_and(|q| q.failed_probes >= 1)
        })
        .await;
    let q = host(&hosts, "host-1")
        .unwrap()
        .standing
        .quarantine
        .clone()
        .unwrap();
    assert!(
        q.last_error
            .as_deref()
            .is_some_and(|e| e.contains("memory limit") && e.contains("exceeded")),
        "{q:?}\n{}",
        c.all_logs()
    );
    for id in ids {
        // Between probes (a probe may be running it on a loaded machine:
        // its run is taken back when it fails for the host's reasons).
        let d = c
            .wait_for(id, LONG, "pending between probes", |d| {
                d.task.status == TaskStatus::Pending
            })
            .await;
        assert_eq!(d.task.runs, 0, "no attempt used: {d:#?}");
        assert!(
            !hosts_of(&d, AttemptOutcome::HostFault).is_empty() || d.attempts.is_empty(),
            "{d:#?}"
        );
        let waiting = d.waiting.clone().unwrap_or_default();
        assert!(
            waiting.contains("host host-1 is quarantined") && waiting.contains("memory limit"),
            "{waiting}"
        );
    }
    let said = c.cli(&["hosts", "unquarantine", "host-1"]);
    assert!(said.contains("quarantine lifted"), "{said}");
}

/// Waits until task `id` runs on `host` and has reported progress.
async fn running_on(c: &TestCluster, id: u64, on: &str) {
    c.wait_for(id, LONG, "running with progress", |d| {
        d.task.status == TaskStatus::Running
            && d.task.progress.is_some()
            && d.task.host.as_deref() == Some(on)
    })
    .await;
}

async fn a_drained_host_finishes_its_attempt_takes_no_new_work_and_stays_drained_across_a_restart(
    backend: &'static str,
) {
    let _serial = serial();
    let mut c = TestCluster::start(Setup::new(backend), 1).await;
    let running = c.submit(long_task()).await;
    running_on(&c, running, "host-1").await;
    c.start_host("host-2");
    c.wait_for_hosts(2).await;

    let said = c.cli(&["hosts", "drain", "host-1"]);
    assert!(said.contains("host host-1 drained"), "{said}");
    let next = c.submit(short_task()).await;
    let done = c.wait_for_status(next, TaskStatus::Completed, LONG).await;
    assert_eq!(hosts_of(&done, AttemptOutcome::Completed), ["host-2"]);
    let done = c
        .wait_for_status(running, TaskStatus::Completed, LONG)
        .await;
    assert_eq!(
        (
            hosts_of(&done, AttemptOutcome::Completed),
            done.attempts.len()
        ),
        (vec!["host-1".to_string()], 1),
        "the running attempt finished where it ran"
    );

    c.restart_master().await;
    c.wait_for_hosts(2).await;
    let hosts = c.client().hosts().await.unwrap();
    assert_eq!(
        host(&hosts, "host-1").unwrap().state,
        "drained",
        "{hosts:#?}"
    );
    assert!(host(&hosts, "host-1")
        .unwrap()
        .standing
        .drained_at_ms
        .is_some());
    for _ in 0..2 {
        let id = c.submit(short_task()).await;
        let done = c.wait_for_status(id, TaskStatus::Completed, LONG).await;
        assert_eq!(hosts_of(&done, AttemptOutcome::Completed), ["host-2"]);
    }
    c.cli(&["hosts", "undrain", "host-1"]);
    let hosts = c.client().hosts().await.unwrap();
    assert_eq!(host(&hosts, "host-1").unwrap().state, "open");
}

async fn draining_now_stops_the_attempt_and_requeues_it_without_using_an_attempt(
    backend: &'static str,
) {
    let _serial = serial();
    let mut c = TestCluster::start(Setup::new(backend), 1).await;
    let id = c.submit(long_task()).await;
    running_on(&c, id, "host-1").await;
    c.start_host("host-2");
    c.wait_for_hosts(2).await;

    c.cli(&["hosts", "drain", "host-1", "--now"]);
    let done = c.wait_for_status(id, TaskStatus::Completed, LONG).await;
    assert_eq!(
        hosts_of(&done, AttemptOutcome::Drained),
        ["host-1"],
        "{:#?}",
        done.attempts
    );
    assert_eq!(hosts_of(&done, AttemptOutcome::Completed), ["host-2"]);
    assert_eq!(
        done.task.runs, 1,
        "the stopped run did not count: {:#?}",
        done.task
    );
}

/// A host whose trainers' user cannot run an adapter's `python3` refuses to
/// start, naming the program, where it resolved, the user and the fix.
#[tokio::test(flavor = "multi_thread")]
async fn a_host_whose_trainers_cannot_run_an_adapters_program_refuses_to_start() {
    let _serial = serial();
    let mut c = TestCluster::prepare(Setup::new("sqlite")).await;
    c.start_master().await;
    let (bin, blocked) = common::unreachable_python(&c.cluster.dir);
    start_host_with_path(&mut c, "host-1", &bin);
    let until = Instant::now() + LONG;
    while c.hosts[0].running() {
        assert!(
            Instant::now() < until,
            "the host did not refuse to start\n{}",
            c.log("host-1")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log = c.log("host-1");
    let expected = format!(
        "program \"python3\" resolves to {}, which user \"nobody\" cannot execute: {} does not let it through",
        bin.join("python3").canonicalize().unwrap_or_else(|_| bin.join("python3")).display(),
        blocked.display()
    );
    assert!(log.contains(&expected), "wanted {expected:?} in\n{log}");
    assert!(
        log.contains("install the program where \"nobody\" can reach it"),
        "{log}"
    );
}

on_both_backends!(
    a_broken_host_is_quarantined_and_costs_no_task_an_attempt,
    a_host_whose_memory_limit_is_too_small_for_python_burns_no_attempt,
    a_drained_host_finishes_its_attempt_takes_no_new_work_and_stays_drained_across_a_restart,
    draining_now_stops_the_attempt_and_requeues_it_without_using_an_attempt,
);

/// PostgreSQL with a standby: the drain and the quarantine an operator
/// sees stay when the standby takes over from a killed leader.
#[tokio::test(flavor = "multi_thread")]
async fn a_hosts_standing_survives_a_failover_to_a_standby() {
    let _serial = serial();
    let mut c = TestCluster::prepare(Setup::new("postgres")).await;
    let mut standbys = c.plan_standbys(1, Duration::from_secs(3));
    let direct = c.cluster.settings.database_url.clone();
    c.start_master().await;
    c.start_standbys(&mut standbys, &direct).await;
    c.start_host("host-1");
    c.start_host("host-2");
    c.wait_for_hosts(2).await;
    c.cli(&["hosts", "drain", "host-1"]);

    c.master().kill();
    let until = Instant::now() + LONG;
    loop {
        let hosts = c.client().hosts().await.unwrap_or_default();
        let connected = hosts.iter().filter(|h| h.connected).count();
        if connected == 2 {
            assert_eq!(
                host(&hosts, "host-1").unwrap().state,
                "drained",
                "{hosts:#?}"
            );
            break;
        }
        assert!(
            Instant::now() < until,
            "no standby took over\n{}{}",
            c.all_logs(),
            standbys.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for _ in 0..2 {
        let id = c.submit(short_task()).await;
        let done = c.wait_for_status(id, TaskStatus::Completed, LONG).await;
        assert_eq!(hosts_of(&done, AttemptOutcome::Completed), ["host-2"]);
    }
    drop(standbys);
}
