//! Recovery that never loses or duplicates a task: the original scheduler's
//! scenarios, done for real — processes killed with SIGKILL, frozen with
//! SIGSTOP, a Redis restarted empty — against both databases where the
//! database matters.

// `serial()` holds a std mutex across each whole test on purpose: the
// multi-process tests take the machine's ports and CPU one at a time.
#![allow(clippy::await_holding_lock)]

use crate::common;

use common::{
    assert_attempts_never_overlapped, last_seen, read_trace, serial, test_timers, traced,
    trainer_alive, trainer_pids, Setup, TestCluster,
};
use redis::AsyncCommands;
use serde_json::json;
use std::time::{Duration, Instant};
use trainyard_master::model::{AttemptOutcome, TaskStatus};

const LONG: Duration = Duration::from_secs(120);

/// Timers with a lease long enough to ride out a master restart.
fn patient(backend: &'static str) -> Setup {
    let mut setup = Setup::new(backend);
    setup.timers.lease_ttl = Duration::from_secs(8);
    setup
}

// 1. The original's testTaskRecoversAfterMasterRestart.
async fn a_task_survives_a_master_restart(backend: &'static str) {
    let _serial = serial();
    let mut c = TestCluster::start(patient(backend), 1).await;
    let id = c
        .submit(
            json!({"adapter": "python-trainer", "params": {"episodes": 300, "step_delay_ms": 10}}),
        )
        .await;
    c.wait_for(id, LONG, "progress", |d| {
        d.task.status == TaskStatus::Running && d.task.progress.is_some()
    })
    .await;

    c.master().kill();
    // The host keeps the trainer running and its lease alive meanwhile.
    let mut redis = c.redis().await;
    let owner: Option<String> = redis.get(format!("task:{id}:workerId")).await.unwrap();
    assert_eq!(owner.as_deref(), Some("host-1/0@1"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    c.start_master().await;
    c.wait_for_hosts(1).await;
    assert_eq!(
        c.task(id).await.task.status,
        TaskStatus::Running,
        "still tracked as RUNNING after the restart"
    );

    let done = c.wait_for_status(id, TaskStatus::Completed, LONG).await;
    assert_eq!(done.task.attempt, 1, "completed once, by its first attempt");
    assert_eq!(done.attempts.len(), 1);
    assert!(done
        .task
        .result
        .unwrap()
        .metrics
        .contains_key("mean_return"));
}

#[tokio::test]
async fn a_task_survives_a_master_restart_on_sqlite() {
    a_task_survives_a_master_restart("sqlite").await;
}

#[tokio::test]
async fn a_task_survives_a_master_restart_on_postgres() {
    a_task_survives_a_master_restart("postgres").await;
}

/// A master that stalls (a slow database commit, a loaded machine) for less
/// than what a lease survives costs running attempts nothing: the hosts hear
/// from it again in time. The test clusters' timers leave a loaded machine
/// that slack; the fast timers' 2 s lease did not, and a stall like this one
/// lost the attempt.
#[tokio::test]
async fn a_master_stalled_for_two_seconds_costs_a_running_attempt_nothing() {
    let _serial = serial();
    let mut c = TestCluster::start(Setup::new("postgres"), 1).await;
    let id = c
        .submit(json!({"adapter": "test-trainer", "params": {"episodes": 600, "step_delay_ms": 10, "trace_file": "trace.jsonl"}}))
        .await;
    c.wait_for(id, LONG, "progress", |d| {
        d.task.status == TaskStatus::Running && d.task.progress.is_some()
    })
    .await;
    // The stall itself is the scenario: a frozen process, not a wait.
    c.master().pause();
    tokio::time::sleep(Duration::from_secs(2)).await;
    c.master().resume();
    let done = c.wait_for_status(id, TaskStatus::Completed, LONG).await;
    assert_eq!(
        done.attempts.len(),
        1,
        "the stall cost an attempt: {:#?}\n{}",
        done.attempts,
        c.all_logs()
    );
    let events = read_trace(&c.trace("trace.jsonl"));
    assert_eq!(trainer_pids(&events, 1).len(), 1, "one trainer ran");
    assert!(traced(&events, 1, "end"));
}

// 2. The original's testTaskRequeuedWhenDispatchInterrupted: the master dies
// after recording the dispatch and before the host receives it.
async fn an_interrupted_dispatch_is_run_after_the_restart(backend: &'static str) {
    let _serial = serial();
    let mut setup = patient(backend);
    // Declared, so that it is accepted before any host carries it.
    setup.configure = |s| s.master.known_adapters = vec!["python-trainer".into()];
    let mut c = TestCluster::prepare(setup).await;
    let crash = [(
        "FAILPOINTS".to_string(),
        "master-crash-after-dispatch-commit=return".to_string(),
    )];
    c.start_master_with(&crash).await;
    if backend == "postgres" {
        // It answers as a standby until it has won the lead.
        let api = format!(
            "http://127.0.0.1:{}",
            c.cluster.settings.master.api_listen.port()
        );
        let until = Instant::now() + Duration::from_secs(60);
        while common::leadership(&api)
            .await
            .is_none_or(|l| l.role != "leader")
        {
            assert!(
                Instant::now() < until,
                "the master did not lead
{}",
                c.all_logs()
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
    // Submitted with no host yet: the answer is in before any dispatch, and
    // so before the master dies at the fail point.
    let id = c
        .submit(json!({"adapter": "python-trainer", "params": {"episodes": 50}}))
        .await;
    c.start_host("host-1");
    // The master records the dispatch, then dies before sending it.
    let until = Instant::now() + Duration::from_secs(60);
    while c.master().running() {
        assert!(
            Instant::now() < until,
            "the master did not reach the fail point\n{}",
            c.all_logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut redis = c.redis().await;
    let owner: Option<String> = redis.get(format!("task:{id}:workerId")).await.unwrap();
    assert_eq!(owner, None, "the host never took a lease");

    c.start_master().await;
    let recorded = c.task(id).await;
    assert_eq!(
        (recorded.task.status, recorded.task.attempt),
        (TaskStatus::Dispatched, 1)
    );
    let done = c.wait_for_status(id, TaskStatus::Completed, LONG).await;
    assert_eq!(done.task.attempt, 2);
    assert_eq!(done.attempts[0].outcome, Some(AttemptOutcome::Undelivered));
    assert_eq!(done.attempts[0].started_at_ms, None);
    assert_eq!(
        done.task.runs, 1,
        "the undelivered dispatch does not count as a run"
    );
}

#[tokio::test]
async fn an_interrupted_dispatch_is_run_after_the_restart_on_sqlite() {
    an_interrupted_dispatch_is_run_after_the_restart("sqlite").await;
}

#[tokio::test]
async fn an_interrupted_dispatch_is_run_after_the_restart_on_postgres() {
    an_interrupted_dispatch_is_run_after_the_restart("postgres").await;
}

// 3. The original's testTaskMarkedCompletedWhenNotificationLost, done right:
// the true outcome is recorded, whether the host is still there or not.
async fn finish_while_the_master_is_down(
    backend: &'static str,
    adapter: &str,
    params: serde_json::Value,
    kill_host: bool,
) -> trainyard_master::model::TaskDetail {
    let mut c = TestCluster::start(patient(backend), 1).await;
    let id = c
        .submit(json!({"adapter": adapter, "max_attempts": 1, "params": params}))
        .await;
    c.wait_for(id, LONG, "progress", |d| {
        d.task.status == TaskStatus::Running && d.task.progress.is_some()
    })
    .await;
    c.master().kill();

    // The attempt ends while the master is down; its report waits in Redis.
    let mut redis = c.redis().await;
    let member = format!("{id}@1");
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let pending: Vec<String> = redis.smembers("reports:pending").await.unwrap();
        if pending.contains(&member) {
            break;
        }
        assert!(
            Instant::now() < until,
            "no report stored in Redis\n{}",
            c.all_logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if kill_host {
        // Nobody is left to re-send it: only Redis has the result.
        c.host("host-1").kill();
    }
    c.start_master().await;
    let done = c
        .wait_for(id, LONG, "a final status", |d| d.task.status.is_terminal())
        .await;
    assert_eq!(done.attempts.len(), 1);
    let pending: Vec<String> = redis.smembers("reports:pending").await.unwrap();
    assert!(
        !pending.contains(&member),
        "the recorded report is removed from Redis"
    );
    done
}

#[tokio::test]
async fn a_success_reported_while_the_master_was_down_is_recorded_as_completed_with_its_metrics() {
    let _serial = serial();
    for (backend, kill_host) in [("sqlite", false), ("sqlite", true), ("postgres", true)] {
        let done = finish_while_the_master_is_down(
            backend,
            "python-trainer",
            json!({"episodes": 100, "step_delay_ms": 10}),
            kill_host,
        )
        .await;
        assert_eq!(
            done.task.status,
            TaskStatus::Completed,
            "{backend}, host killed: {kill_host}"
        );
        let metrics = done.task.result.unwrap().metrics;
        assert_eq!(metrics.get("episodes"), Some(&100.0));
        assert!(metrics.contains_key("mean_return"));
    }
}

#[tokio::test]
async fn a_failure_reported_while_the_master_was_down_is_recorded_as_failed_with_its_error() {
    let _serial = serial();
    for (backend, kill_host) in [("sqlite", true), ("postgres", false)] {
        let params = json!({"episodes": 200, "step_delay_ms": 10, "fail_at_episode": 60});
        let done =
            finish_while_the_master_is_down(backend, "test-trainer", params, kill_host).await;
        assert_eq!(
            done.task.status,
            TaskStatus::Failed,
            "the seed would have said COMPLETED here"
        );
        let error = done.task.error.unwrap_or_default();
        assert!(error.contains("simulated failure at episode 60"), "{error}");
    }
}

// 5. A host killed mid-task: requeued only after its lease lapsed, resumed
// from the last checkpoint by attempt 2.
async fn a_killed_hosts_task_resumes_elsewhere_after_the_lease_lapses(backend: &'static str) {
    let _serial = serial();
    let mut c = TestCluster::start(Setup::new(backend), 1).await;
    let id = c
        .submit(json!({
            "adapter": "test-trainer",
            "params": {"episodes": 300, "checkpoint_every": 25, "step_delay_ms": 10, "trace_file": "trace.jsonl"},
        }))
        .await;
    let checkpointed = c
        .wait_for(id, LONG, "a checkpoint", |d| d.task.checkpoint.is_some())
        .await;
    let saved_at = checkpointed.task.checkpoint.unwrap();
    c.start_host("host-2");
    c.wait_for_hosts(2).await;
    let killed_at = common::now_ms();
    c.host("host-1").kill();

    let done = c.wait_for_status(id, TaskStatus::Completed, LONG).await;
    assert_eq!(
        (done.task.attempt, done.task.host.as_deref()),
        (2, Some("host-2"))
    );
    assert_eq!(done.attempts[0].outcome, Some(AttemptOutcome::LeaseLost));
    // Requeued only once the lease had lapsed: its last renewal was at most a
    // heartbeat before the kill.
    let t = test_timers();
    let earliest = killed_at + (t.lease_ttl - t.heartbeat_interval).as_millis() as i64;
    assert!(
        done.attempts[1].dispatched_at_ms >= earliest - 50,
        "attempt 2 dispatched {} ms after the kill, before the lease could have lapsed",
        done.attempts[1].dispatched_at_ms - killed_at
    );
    let resumed = done
        .task
        .result
        .unwrap()
        .metrics
        .get("resumed_from")
        .copied()
        .unwrap_or(0.0);
    assert!(
        resumed >= saved_at.attempt as f64 && resumed > 0.0,
        "attempt 2 resumed from episode {resumed}"
    );
    let events = read_trace(&c.trace("trace.jsonl"));
    assert!(traced(&events, 2, "start"), "attempt 2 started");
    assert!(traced(&events, 1, "alive"));
    assert!(!traced(&events, 1, "end"), "attempt 1 never finished");
    assert_attempts_never_overlapped(&events);
}

#[tokio::test]
async fn a_killed_hosts_task_resumes_elsewhere_after_the_lease_lapses_on_sqlite() {
    a_killed_hosts_task_resumes_elsewhere_after_the_lease_lapses("sqlite").await;
}

#[tokio::test]
async fn a_killed_hosts_task_resumes_elsewhere_after_the_lease_lapses_on_postgres() {
    a_killed_hosts_task_resumes_elsewhere_after_the_lease_lapses("postgres").await;
}

// 6. A zombie host: frozen past its lease, the task moves on, then it wakes up.
#[tokio::test]
async fn a_frozen_host_wakes_up_to_find_its_attempt_stopped_and_its_late_report_ignored() {
    let _serial = serial();
    let mut c = TestCluster::start(Setup::new("sqlite"), 1).await;
    let trace = c.trace("trace.jsonl");
    let id = c
        .submit(json!({
            "adapter": "test-trainer",
            // Long enough that the trainer is still running when its
            // supervisor's deadline passes (a lease after the freeze).
            "params": {"episodes": 800, "checkpoint_every": 25, "step_delay_ms": 10, "trace_file": "trace.jsonl"},
        }))
        .await;
    c.wait_for(id, LONG, "a checkpoint", |d| d.task.checkpoint.is_some())
        .await;
    c.start_host("host-2");
    c.wait_for_hosts(2).await;
    let first = c.running_trainers(&read_trace(&trace), 1);
    assert_eq!(first.len(), 1, "attempt 1's trainer traced its start");
    c.host("host-1").pause();

    // The task moves on to host-2 while host-1 is frozen...
    c.wait_for(id, LONG, "attempt 2 running", |d| {
        d.task.attempt == 2 && d.task.status == TaskStatus::Running
    })
    .await;
    // ...and host-1's trainer was already stopped by its supervisor, alone:
    // the master gave attempt 1 up only once its lease had lapsed, and the
    // supervisor stops the trainer before that.
    assert!(
        !trainer_alive(first[0]),
        "attempt 1's trainer (pid {}) still runs while attempt 2 runs",
        first[0]
    );
    assert!(
        !traced(&read_trace(&trace), 1, "end"),
        "attempt 1 was stopped, not finished"
    );

    c.host("host-1").resume();
    let done = c.wait_for_status(id, TaskStatus::Completed, LONG).await;
    assert_eq!(
        (done.task.attempt, done.task.host.as_deref()),
        (2, Some("host-2"))
    );
    assert_eq!(done.attempts.len(), 2);
    assert_eq!(done.attempts[0].outcome, Some(AttemptOutcome::LeaseLost));
    assert_eq!(done.attempts[1].outcome, Some(AttemptOutcome::Completed));
    // The woken host reported its dead attempt; the master ignored it.
    let until = Instant::now() + Duration::from_secs(30);
    while !c.log("master").contains("no longer current") {
        assert!(
            Instant::now() < until,
            "the zombie's late report never arrived\n{}",
            c.all_logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        c.task(id).await.task.status,
        TaskStatus::Completed,
        "the late report changed nothing"
    );
    assert_attempts_never_overlapped(&read_trace(&trace));

    // And the woken host serves again.
    c.host("host-2").kill();
    let next = c
        .submit(json!({"adapter": "python-trainer", "params": {"episodes": 20}}))
        .await;
    let done = c.wait_for_status(next, TaskStatus::Completed, LONG).await;
    assert_eq!(done.task.host.as_deref(), Some("host-1"));
}

// 7. Redis restarted empty while tasks run.
#[tokio::test]
async fn a_redis_that_loses_its_data_loses_no_task_and_duplicates_none() {
    let _serial = serial();
    let mut c = TestCluster::start(Setup::new("sqlite"), 2).await;
    let traces: Vec<String> = (0..2).map(|i| format!("trace-{i}.jsonl")).collect();
    let mut ids = vec![];
    for trace in &traces {
        ids.push(
            c.submit(json!({"adapter": "test-trainer", "params": {"episodes": 600, "step_delay_ms": 10, "trace_file": trace}}))
                .await,
        );
    }
    for id in &ids {
        c.wait_for(*id, LONG, "running", |d| {
            d.task.status == TaskStatus::Running && d.task.progress.is_some()
        })
        .await;
    }
    // The hosts are frozen (for less than a lease) across the restart, so for
    // a while Redis holds no lease of tasks that are very much running: the
    // master must not take that as evidence. They stay frozen until a sweep
    // has seen the empty Redis (the master says so).
    let noticed = "Redis holds no epoch";
    let before = c.log("master").matches(noticed).count();
    for h in ["host-1", "host-2"] {
        c.host(h).pause();
    }
    c.redis.restart_empty();
    let until = Instant::now() + Duration::from_secs(30);
    while c.log("master").matches(noticed).count() == before {
        assert!(
            Instant::now() < until,
            "the master never noticed that Redis lost its data\n{}",
            c.all_logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for h in ["host-1", "host-2"] {
        c.host(h).resume();
    }

    // The hosts' next heartbeats write the leases again.
    let mut redis = c.redis().await;
    let until = Instant::now() + Duration::from_secs(10);
    for id in &ids {
        loop {
            let owner: Option<String> = redis
                .get(format!("task:{id}:workerId"))
                .await
                .unwrap_or(None);
            if owner.is_some_and(|o| o.ends_with("@1")) {
                break;
            }
            assert!(
                Instant::now() < until,
                "lease of task {id} not rebuilt\n{}",
                c.all_logs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    for (id, trace) in ids.iter().zip(&traces) {
        let done = c.wait_for_status(*id, TaskStatus::Completed, LONG).await;
        assert_eq!(
            done.attempts.len(),
            1,
            "task {id} was requeued needlessly: {:?}",
            done.attempts
        );
        let events = read_trace(&c.trace(trace));
        assert_eq!(
            events.iter().filter(|e| e.event == "start").count(),
            1,
            "task {id} ran twice"
        );
    }
    let _ = &mut c;
}

/// When the master restarts in the window after Redis lost its data.
#[derive(Clone, Copy, Debug)]
enum Restart {
    /// The old master saw the loss and wrote the new epoch, then died: the
    /// new one finds an epoch, and must still wait out the window.
    AfterTheLossWasSeen,
    /// The master was down when Redis lost its data: the new one is the
    /// first to see it.
    BeforeTheLossWasSeen,
}

/// How many recovery sweeps the master at `api` has made, once it answers.
async fn sweeps_made(api: &str) -> Option<u64> {
    common::health(api).await?["scheduler"]["sweeps"].as_u64()
}

/// Live tasks on frozen hosts (no lease in Redis while they stay frozen)
/// across a Redis that lost its data and a master restarted inside the
/// window in which missing leases prove nothing: the new master sweeps
/// several times and gives nothing up; woken, the hosts rebuild their
/// leases and every task completes on its first attempt.
async fn a_master_restarted_inside_the_window_gives_up_no_live_attempt(restart: Restart) {
    let mut setup = Setup::new("sqlite");
    // The hosts stay frozen through the master's restart and its first
    // sweeps; their trainers' supervisors would stop the trainers at the
    // end of the lease.
    setup.timers.lease_ttl = Duration::from_secs(30);
    let mut c = TestCluster::start(setup, 2).await;
    let traces = ["trace-0.jsonl", "trace-1.jsonl"];
    let mut ids = vec![];
    for trace in traces {
        ids.push(
            c.submit(json!({"adapter": "test-trainer", "params": {"episodes": 800, "step_delay_ms": 10, "trace_file": trace}}))
                .await,
        );
    }
    for id in &ids {
        c.wait_for(*id, LONG, "running", |d| {
            d.task.status == TaskStatus::Running && d.task.progress.is_some()
        })
        .await;
    }
    for h in ["host-1", "host-2"] {
        c.host(h).pause();
    }
    match restart {
        Restart::AfterTheLossWasSeen => {
            let noticed = "Redis holds no epoch";
            let before = c.log("master").matches(noticed).count();
            c.redis.restart_empty();
            let until = Instant::now() + Duration::from_secs(30);
            while c.log("master").matches(noticed).count() == before {
                assert!(
                    Instant::now() < until,
                    "the master never noticed that Redis lost its data\n{}",
                    c.all_logs()
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            c.master().kill();
        }
        Restart::BeforeTheLossWasSeen => {
            c.master().kill();
            c.redis.restart_empty();
        }
    }
    c.start_master().await;

    // The new master sweeps while Redis holds none of the live leases.
    let api = c.cluster.settings.api.url.clone();
    let until = Instant::now() + Duration::from_secs(60);
    while sweeps_made(&api).await.is_none_or(|n| n < 4) {
        assert!(
            Instant::now() < until,
            "the new master made no sweeps\n{}",
            c.all_logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for id in &ids {
        let detail = c.task(*id).await;
        assert_eq!(
            (detail.task.status, detail.attempts.len()),
            (TaskStatus::Running, 1),
            "{restart:?}: task {id} was given up while its host lived: {:?}\n{}",
            detail.attempts,
            c.all_logs()
        );
    }
    for h in ["host-1", "host-2"] {
        c.host(h).resume();
    }
    for (id, trace) in ids.iter().zip(traces) {
        let done = c.wait_for_status(*id, TaskStatus::Completed, LONG).await;
        assert_eq!(done.attempts.len(), 1, "task {id}: {:?}", done.attempts);
        let events = read_trace(&c.trace(trace));
        assert_eq!(
            events.iter().filter(|e| e.event == "start").count(),
            1,
            "task {id} ran twice"
        );
    }
}

#[tokio::test]
async fn a_master_restarted_after_it_saw_redis_lose_its_data_gives_up_no_live_attempt() {
    let _serial = serial();
    a_master_restarted_inside_the_window_gives_up_no_live_attempt(Restart::AfterTheLossWasSeen)
        .await;
}

#[tokio::test]
async fn a_master_restarted_before_anyone_saw_redis_lose_its_data_gives_up_no_live_attempt() {
    let _serial = serial();
    a_master_restarted_inside_the_window_gives_up_no_live_attempt(Restart::BeforeTheLossWasSeen)
        .await;
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// A host that can no longer renew its lease (`cut_off` takes Redis or the
/// master away) stops the trainer itself, before the lease would expire; once
/// the world is back the task runs again and completes.
async fn a_cut_off_host_stops_its_trainer_before_the_lease_expires(cut_off: &str) {
    let mut c = TestCluster::start(Setup::new("sqlite"), 1).await;
    let trace = c.trace("trace.jsonl");
    let id = c
        .submit(json!({
            "adapter": "test-trainer",
            "params": {"episodes": 1000, "checkpoint_every": 25, "step_delay_ms": 10, "trace_file": "trace.jsonl"},
        }))
        .await;
    c.wait_for(id, LONG, "progress", |d| {
        d.task.status == TaskStatus::Running && d.task.progress.is_some()
    })
    .await;
    let pids = c.running_trainers(&read_trace(&trace), 1);
    let cut_at = unix_now();
    match cut_off {
        "redis" => c.redis.kill(),
        _ => c.master().pause(),
    }
    let ttl = test_timers().lease_ttl.as_secs_f64();
    c.wait_for_trainers_gone(&pids, LONG, &format!("cut off from {cut_off}"))
        .await;
    let events = read_trace(&trace);
    assert!(
        !traced(&events, 1, "end"),
        "attempt 1 was stopped, not finished"
    );
    let stopped_at = last_seen(&events, 1);
    assert!(
        stopped_at > cut_at - 1.0,
        "the trainer was running when {cut_off} went away"
    );
    assert!(
        stopped_at < cut_at + ttl,
        "the trainer ran {:.2} s after {cut_off} went away, past its {ttl} s lease",
        stopped_at - cut_at
    );
    match cut_off {
        "redis" => c.redis.restart_empty(),
        _ => c.master().resume(),
    }
    let done = c.wait_for_status(id, TaskStatus::Completed, LONG).await;
    assert_eq!(done.attempts[0].outcome, Some(AttemptOutcome::LeaseLost));
    assert!(done.task.attempt >= 2);
    assert_attempts_never_overlapped(&read_trace(&trace));
}

#[tokio::test]
async fn a_host_cut_off_from_redis_stops_its_trainer_before_the_lease_expires() {
    let _serial = serial();
    a_cut_off_host_stops_its_trainer_before_the_lease_expires("redis").await;
}

#[tokio::test]
async fn a_host_cut_off_from_the_master_stops_its_trainer_before_the_lease_expires() {
    let _serial = serial();
    a_cut_off_host_stops_its_trainer_before_the_lease_expires("master").await;
}

#[tokio::test]
async fn a_crashed_trainer_is_retried_from_its_checkpoint_and_a_hopeless_one_fails_with_every_reason_kept(
) {
    let _serial = serial();
    let c = TestCluster::start(Setup::new("sqlite"), 1).await;
    // All 55 episodes come within a few milliseconds, so the failure's
    // report is in Redis before the master has handled the progress that
    // carried the last checkpoints: the sweep must leave a connected host's
    // report to its connection (recovery::take_redis_report).
    let retried = c
        .submit(json!({
            "adapter": "test-trainer",
            "params": {"episodes": 100, "checkpoint_every": 10, "fail_at_episode": 55, "fail_until_attempt": 1},
        }))
        .await;
    let hopeless = c
        .submit(json!({
            "adapter": "test-trainer",
            "max_attempts": 2,
            "params": {"episodes": 100, "fail_at_episode": 30},
        }))
        .await;

    let done = c
        .wait_for_status(retried, TaskStatus::Completed, LONG)
        .await;
    assert_eq!(done.task.attempt, 2);
    assert_eq!(done.attempts[0].outcome, Some(AttemptOutcome::Failed));
    assert!(done.attempts[0]
        .error
        .as_deref()
        .unwrap_or("")
        .contains("simulated failure at episode 55"));
    let resumed = done
        .task
        .result
        .unwrap()
        .metrics
        .get("resumed_from")
        .copied()
        .unwrap_or(0.0);
    assert_eq!(
        resumed, 50.0,
        "attempt 2 resumed from the checkpoint of episode 50"
    );

    let failed = c.wait_for_status(hopeless, TaskStatus::Failed, LONG).await;
    assert_eq!(failed.attempts.len(), 2);
    for a in &failed.attempts {
        assert_eq!(a.outcome, Some(AttemptOutcome::Failed));
        assert!(
            a.error
                .as_deref()
                .unwrap_or("")
                .contains("simulated failure at episode 30"),
            "{a:?}"
        );
    }
    let error = failed.task.error.unwrap_or_default();
    assert!(error.starts_with("gave up after 2 attempts"), "{error}");
}
