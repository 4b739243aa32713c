//! Hostile adapters through the whole path: every misbehaviour fails its own
//! task with a reason an operator understands (or, for sandbox escapes,
//! finds nothing to escape to), the host survives, and the same host then
//! runs a normal task. And trainers: cancelled, over their time limit, or
//! with a cleared environment. And submitters: no parameter of a shipped
//! adapter makes a host write outside the task's workspace.

// `serial()` holds a std mutex across each whole test on purpose: the
// multi-process tests take the machine's ports and CPU one at a time.
#![allow(clippy::await_holding_lock)]

use crate::common;

use common::{read_trace, serial, traced, trainer_alive, Setup, TestCluster};
use serde_json::{json, Value};
use std::time::Duration;
use trainyard_master::model::TaskStatus;

const LONG: Duration = Duration::from_secs(60);

fn hostile_setup() -> Setup {
    let mut setup = Setup::new("sqlite");
    setup.adapters = vec![
        ("python-trainer", vec!["python3"]),
        ("hostile", vec!["python3"]),
    ];
    setup.configure = |s| {
        s.host.adapter_call_timeout = Duration::from_millis(500);
        s.host.adapter_memory_bytes = 48 << 20;
        s.host
            .trainer_env
            .insert("SET_BY_OPERATOR".into(), "1".into());
    };
    setup
}

/// The summary of a hostile `finish`: what each probe observed.
fn observed(summary: Option<String>) -> Vec<Value> {
    let v: Value = serde_json::from_str(&summary.unwrap_or_default()).unwrap_or_default();
    v["observed"].as_array().cloned().unwrap_or_default()
}

#[tokio::test]
async fn every_hostile_adapter_fails_only_its_own_task_and_the_host_keeps_serving() {
    let _serial = serial();
    let mut c = TestCluster::start(hostile_setup(), 1).await;
    let pid = c.host("host-1").pid();
    let attacks: &[(Value, &str)] = &[
        (
            json!({"attack": "loop-prepare"}),
            "exceeded its 500 ms deadline in prepare",
        ),
        (
            json!({"attack": "loop-output"}),
            "exceeded its 500 ms deadline in on-output",
        ),
        (
            json!({"attack": "loop-finish"}),
            "exceeded its 500 ms deadline in finish",
        ),
        (
            json!({"attack": "memory-bomb"}),
            "exceeded its memory limit of 48 MiB",
        ),
        (json!({"attack": "trap"}), "trapped in prepare"),
        (json!({"attack": "panic"}), "panics on purpose"),
        (json!({"attack": "sleep"}), "deadline in prepare"),
        (
            json!({"attack": "launch", "program": "sh", "args": ["-c", "id"]}),
            "not on its allowlist",
        ),
        (
            json!({"attack": "launch", "program": "/bin/sh"}),
            "not on its allowlist",
        ),
        (
            json!({"attack": "launch", "program": "/usr/bin/python3"}),
            "not on its allowlist",
        ),
        (
            json!({"attack": "huge-plan", "shape": "args"}),
            "launch plan refused",
        ),
        (
            json!({"attack": "huge-plan", "shape": "file-bytes"}),
            "launch plan refused",
        ),
        (
            json!({"attack": "huge-plan", "shape": "parent-path"}),
            "launch plan refused",
        ),
        (json!({"attack": "huge-result"}), "oversized"),
        (
            json!({"attack": "progress-flood", "over": true}),
            "oversized",
        ),
    ];
    for (params, says) in attacks {
        let id = c
            .submit(json!({"adapter": "hostile", "params": params, "max_attempts": 1}))
            .await;
        let done = c
            .wait_for(id, LONG, "a final status", |d| d.task.status.is_terminal())
            .await;
        let error = done.task.error.clone().unwrap_or_default();
        assert_eq!(
            done.task.status,
            TaskStatus::Failed,
            "{params}: {:?}",
            done.task
        );
        assert!(
            error.contains(says),
            "{params}: the reason {error:?} does not say {says:?}"
        );
        assert!(
            error.contains("hostile") || says.contains("allowlist") || says.contains("refused"),
            "{params}: {error}"
        );
    }

    // A huge error message is cut, not stored whole.
    let id = c
        .submit(
            json!({"adapter": "hostile", "params": {"attack": "huge-error"}, "max_attempts": 1}),
        )
        .await;
    let done = c.wait_for_status(id, TaskStatus::Failed, LONG).await;
    assert!(done.task.error.unwrap_or_default().len() <= 4200);

    // A log flood is cut at the per-attempt budget.
    let id = c
        .submit(json!({"adapter": "hostile", "params": {"attack": "log-flood", "records": 100000}}))
        .await;
    c.wait_for_status(id, TaskStatus::Completed, LONG).await;
    let flood_lines = c.log("host-1").matches("hostile log flood").count();
    assert!(
        (1..=1001).contains(&flood_lines),
        "{flood_lines} adapter log records reached the host log"
    );

    // Reading outside the workspace, directly or through a trainer's symlinks, finds nothing.
    let config = c.cluster.config_path.display().to_string();
    let outside = json!([
        "/etc/passwd",
        "/workspace/../../etc/passwd",
        "/workspace/..",
        config,
        "/"
    ]);
    for params in [
        json!({"attack": "read-file", "paths": outside}),
        json!({"attack": "read-symlink", "targets": ["/etc/passwd", config, "../../.."]}),
    ] {
        let id = c
            .submit(json!({"adapter": "hostile", "params": params}))
            .await;
        let done = c.wait_for_status(id, TaskStatus::Completed, LONG).await;
        let probes = observed(done.task.result.unwrap().summary);
        assert!(!probes.is_empty(), "{params}");
        for probe in probes {
            assert_eq!(
                probe["read"]["ok"], false,
                "read outside its workspace: {probe}"
            );
            assert_eq!(
                probe["list"]["ok"], false,
                "listed outside its workspace: {probe}"
            );
        }
    }

    // The same host process, still serving: a real training task completes.
    assert_eq!(c.host("host-1").pid(), pid);
    assert!(c.host("host-1").running());
    let id = c
        .submit(json!({"adapter": "python-trainer", "params": {"episodes": 50}}))
        .await;
    let done = c.wait_for_status(id, TaskStatus::Completed, LONG).await;
    assert_eq!(done.task.host.as_deref(), Some("host-1"));
}

#[tokio::test]
async fn a_trainer_sees_only_the_environment_its_adapter_and_operator_gave_it() {
    let _serial = serial();
    let mut setup = hostile_setup();
    setup.configure = |s| {
        s.host
            .trainer_env
            .insert("SET_BY_OPERATOR".into(), "1".into());
    };
    let mut c = TestCluster::prepare(setup).await;
    c.cluster
        .env
        .push(("HOST_SECRET_TOKEN".into(), "must-not-leak".into()));
    c.start_master().await;
    c.start_host("host-1");
    c.wait_for_hosts(1).await;
    let id = c
        .submit(json!({"adapter": "hostile", "params": {"attack": "dump-env"}}))
        .await;
    let done = c.wait_for_status(id, TaskStatus::Completed, LONG).await;
    let env = observed(done.task.result.unwrap().summary).pop().unwrap();
    let names: Vec<&str> = env
        .as_array()
        .unwrap_or_else(|| panic!("no env dump: {env}"))
        .iter()
        .filter_map(Value::as_str)
        .collect();
    // The host's own variables: its share of devices (none asked, none
    // given), and the trace directory the test cluster names.
    for wanted in [
        "PATH",
        "SET_BY_ADAPTER",
        "SET_BY_OPERATOR",
        "CUDA_VISIBLE_DEVICES",
        "TRAINYARD_GPUS",
        "TRAINYARD_TRACE_DIR",
    ] {
        assert!(
            names.contains(&wanted),
            "{wanted} missing from the trainer's environment {names:?}"
        );
    }
    // Nothing else of the host's environment: not its secrets, not even HOME.
    // (A pyenv `python3` shim adds PYENV_* and PWD itself, on its way to the
    // real interpreter. The test harness, as operator, names the trace
    // directory in every trainer's environment.)
    for name in &names {
        let expected = [
            "PATH",
            "SET_BY_ADAPTER",
            "SET_BY_OPERATOR",
            "CUDA_VISIBLE_DEVICES",
            "TRAINYARD_GPUS",
            "TRAINYARD_TRACE_DIR",
            // Set by the host to the attempt's workspace and its tmp/.
            "HOME",
            "TMPDIR",
            "PWD",
            "SHLVL",
            "_",
            "LC_CTYPE",
        ]
        .contains(name)
            || name.contains("PYENV_");
        assert!(
            expected,
            "the host's {name} leaked into the trainer's environment: {names:?}"
        );
    }
}

#[tokio::test]
async fn a_cancelled_task_has_its_trainer_stopped_and_ends_cancelled() {
    let _serial = serial();
    let c = TestCluster::start(Setup::new("sqlite"), 1).await;
    let id = c
        .submit(json!({"adapter": "test-trainer", "params": {"episodes": 2000, "step_delay_ms": 10, "trace_file": "trace.jsonl"}}))
        .await;
    c.wait_for(id, LONG, "progress", |d| d.task.progress.is_some())
        .await;
    let pids = c.running_trainers(&read_trace(&c.trace("trace.jsonl")), 1);
    assert_eq!(pids.len(), 1, "one trainer process traced its start");
    let answer = c.client().cancel(id).await.unwrap();
    assert_eq!(answer["cancel_requested"], true, "{answer}");
    let done = c.wait_for_status(id, TaskStatus::Cancelled, LONG).await;
    assert_eq!(done.attempts.len(), 1);
    // The host reports an attempt only once its trainer has exited.
    assert!(
        !trainer_alive(pids[0]),
        "the trainer (pid {}) still runs although its task is CANCELLED",
        pids[0]
    );
    let trace = read_trace(&c.trace("trace.jsonl"));
    assert!(traced(&trace, 1, "alive") && !traced(&trace, 1, "end"));
    // Cancelling it again is refused with the reason.
    let err = c.client().cancel(id).await.unwrap_err().to_string();
    assert!(
        err.contains("409") && err.contains("already ended CANCELLED"),
        "{err}"
    );
}

#[tokio::test]
async fn a_trainer_over_its_time_limit_is_stopped_and_its_task_fails() {
    let _serial = serial();
    let c = TestCluster::start(Setup::new("sqlite"), 1).await;
    let id = c
        .submit(json!({"adapter": "python-trainer", "timeout_secs": 1, "params": {"episodes": 5000, "step_delay_ms": 10}}))
        .await;
    let done = c.wait_for_status(id, TaskStatus::Failed, LONG).await;
    let error = done.task.error.unwrap_or_default();
    assert!(error.contains("time limit of 1 s"), "{error}");
    assert_eq!(done.attempts.len(), 1, "a time limit is not retried");
}

#[tokio::test]
async fn a_submitter_cannot_make_a_shipped_adapter_write_outside_the_workspace() {
    let _serial = serial();
    let c = TestCluster::start(Setup::new("sqlite"), 1).await;
    // A file beside the cluster's own, and one in the machine's /tmp.
    let beside = c.cluster.dir.join("written-by-a-submitter.log");
    let tmp = std::env::temp_dir().join(format!(
        "trainyard-written-by-a-submitter-{}.log",
        std::process::id()
    ));
    let mut refused = vec![];
    for victim in [&beside, &tmp] {
        let victim = victim.display().to_string();
        for params in [
            json!({"episodes": 5, "trace_file": victim}),
            json!({"episodes": 5, "fail_at_episode": 1, "trace_file": victim}),
            json!({"episodes": 5, "fail_at_episode": 1, "fail_until_attempt": 9}),
            json!({"episodes": 5, "seed": victim}),
            json!({"episodes": victim}),
        ] {
            refused.push(("python-trainer", params));
        }
        refused.push(("noop", json!({"spawn": true, "trace_file": victim})));
        // Not even the test adapter takes a path: a trace file is a name in
        // the directory its operator chose.
        refused.push(("test-trainer", json!({"episodes": 5, "trace_file": victim})));
    }
    for (adapter, params) in &refused {
        let id = c
            .submit(json!({"adapter": adapter, "params": params}))
            .await;
        let done = c
            .wait_for(id, LONG, "a final status", |d| d.task.status.is_terminal())
            .await;
        let error = done.task.error.clone().unwrap_or_default();
        assert_eq!(
            (done.task.status, done.attempts.len()),
            (TaskStatus::Failed, 1),
            "{adapter} {params}: failed at once, not retried: {error}"
        );
        assert!(
            error.contains("invalid params"),
            "{adapter} {params}: {error}"
        );
        assert!(
            !c.log("host-1")
                .contains(&format!("trainer launched attempt=task {id} attempt")),
            "{adapter} {params}: a trainer was launched"
        );
    }
    for victim in [&beside, &tmp] {
        assert!(!victim.exists(), "{} was written", victim.display());
    }
    let traces: Vec<_> = std::fs::read_dir(c.trace_dir()).unwrap().collect();
    assert!(traces.is_empty(), "trace files were written: {traces:?}");

    // The same observation sees a write when there is one: the test
    // adapter's trace file, inside the trace directory.
    let id = c
        .submit(json!({"adapter": "test-trainer", "params": {"episodes": 5, "trace_file": "control.jsonl"}}))
        .await;
    c.wait_for_status(id, TaskStatus::Completed, LONG).await;
    assert!(traced(&read_trace(&c.trace("control.jsonl")), 1, "end"));
}

/// A host configured with a corrupt adapter, one that is not a component, and
/// one built for another contract version, next to a good one.
fn broken_adapters(
    s: &mut trainyard::settings::Settings,
    policy: trainyard::settings::OnAdapterError,
) {
    let dir = s.data_dir.join("broken");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("corrupt.wasm"), b"\0asm\x0d\0\x01\0garbage").unwrap();
    std::fs::write(dir.join("core.wasm"), b"\0asm\x01\0\0\0").unwrap();
    for path in [
        dir.join("corrupt.wasm"),
        dir.join("core.wasm"),
        common::adapter("wrong-version"),
    ] {
        s.host
            .adapters
            .push(trainyard::settings::AdapterEntry::new(path, &[]));
    }
    s.host.on_adapter_error = policy;
}

#[tokio::test]
async fn broken_adapters_are_refused_at_load_and_the_host_skips_them_or_refuses_to_start() {
    let _serial = serial();
    // Skip: the host starts with the good adapter only.
    let mut setup = Setup::new("sqlite");
    setup.adapters = vec![("noop", vec!["true"])];
    setup.configure = |s| broken_adapters(s, trainyard::settings::OnAdapterError::Skip);
    let mut c = TestCluster::start(setup, 1).await;
    let hosts = c.client().hosts().await.unwrap();
    let names: Vec<&str> = hosts[0].adapters.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, vec!["noop"]);
    let log = c.log("host-1");
    assert!(
        log.contains("targets trainyard:adapter@0.2.0"),
        "the version mismatch is named in the log"
    );
    assert!(
        log.contains("core.wasm") && log.contains("corrupt.wasm"),
        "every broken file is named in the log"
    );
    let id = c.submit(json!({"adapter": "noop"})).await;
    c.wait_for_status(id, TaskStatus::Completed, LONG).await;

    // Refuse: the host does not start, and says why.
    c.cluster.settings.host.on_adapter_error = trainyard::settings::OnAdapterError::Refuse;
    c.cluster.write_config().unwrap();
    c.start_host("host-2");
    let until = std::time::Instant::now() + LONG;
    while c.host("host-2").running() {
        assert!(
            std::time::Instant::now() < until,
            "a host with a broken adapter started anyway"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        c.log("host-2").contains("cannot be loaded"),
        "{}",
        c.log("host-2")
    );
}
