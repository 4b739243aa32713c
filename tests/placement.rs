//! Placement through real processes: a master, hosts carrying different
//! versions of an adapter or declaring fake GPUs, and trainers that print
//! what they were given.
//!
//! - Routing: a task goes only to a host whose adapter serves its kind; the
//!   master accepts every kind any host has offered (connected or not) and
//!   keeps a task PENDING, saying why, while no connected host can run it.
//! - Versions: one host may carry several versions of an adapter; a task
//!   pinned to a version requirement (`noop@=0.1.0`) runs only on one it
//!   allows, an unpinned one on the newest the fleet carries (or, with
//!   `master.unpinned_version = "host"`, its host carries), and each
//!   attempt records the version it ran.
//! - Resources: hosts declare devices in `[host.resources]`; a task asking
//!   for GPUs gets devices of its own (the `hostile` adapter's `env-values`
//!   trainer prints `CUDA_VISIBLE_DEVICES` and the rest as its progress
//!   message, so the test reads what the trainer really saw), waits while
//!   they are taken, and a request no host could hold is refused at submit.
//!   The adapter is told the same devices and share through the contract's
//!   `host.assigned-resources` (0.1.2), which `env-values` reports in its
//!   result's summary.

// `serial()` holds a std mutex across each whole test on purpose: the
// multi-process tests take the machine's ports and CPU one at a time.
#![allow(clippy::await_holding_lock)]

use crate::common;

use common::{serial, Setup, TestCluster};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;
use trainyard::settings::Settings;
use trainyard_host::config::GpuSetting;
use trainyard_master::model::{TaskDetail, TaskStatus};

const WAIT: Duration = Duration::from_secs(60);

/// The variables the `env-values` trainer prints.
const SHARE_VARIABLES: [&str; 4] = [
    "CUDA_VISIBLE_DEVICES",
    "TRAINYARD_GPUS",
    "TRAINYARD_CPUS",
    "TRAINYARD_MEMORY_BYTES",
];

fn gpus(names: &[&str]) -> GpuSetting {
    GpuSetting::Listed(names.iter().map(|n| n.to_string()).collect())
}

/// Hosts carrying the `hostile` adapter (its `env-values` trainer), with two
/// fake GPUs, four CPUs and 8 GiB each unless a test says otherwise.
fn gpu_setup(slots: u32) -> Setup {
    Setup {
        slots,
        adapters: vec![("hostile", vec!["python3"])],
        configure: |s: &mut Settings| {
            s.host.resources.cpus = Some(4.0);
            s.host.resources.memory = Some(8 << 30);
            s.host.resources.gpus = gpus(&["gpu0", "gpu1"]);
        },
        ..Setup::new("sqlite")
    }
}

/// A task whose trainer prints its share and then runs until cancelled.
fn holding_task(resources: Value) -> Value {
    json!({
        "adapter": "hostile",
        "params": {"attack": "env-values", "names": SHARE_VARIABLES, "hold_secs": 600},
        "resources": resources,
    })
}

/// Waits until the task runs and its trainer has printed its environment;
/// returns what it printed and the task.
async fn trainer_env(c: &TestCluster, id: u64) -> (HashMap<String, Option<String>>, TaskDetail) {
    let d = c
        .wait_for(id, WAIT, "the trainer's environment", |d| {
            d.task.status == TaskStatus::Running
                && d.task
                    .progress
                    .as_ref()
                    .is_some_and(|p| p.message.is_some())
        })
        .await;
    let message = d.task.progress.as_ref().and_then(|p| p.message.clone());
    let env = serde_json::from_str(&message.unwrap_or_default()).expect("the trainer prints JSON");
    (env, d)
}

fn var(env: &HashMap<String, Option<String>>, name: &str) -> String {
    env.get(name).cloned().flatten().unwrap_or_default()
}

async fn cancel(c: &TestCluster, id: u64) {
    c.client().cancel(id).await.expect("cancel");
    c.wait_for_status(id, TaskStatus::Cancelled, WAIT).await;
}

/// Waits until the PENDING task's reason is `reason`.
async fn waits_because(c: &TestCluster, id: u64, reason: &str) -> TaskDetail {
    c.wait_for(id, WAIT, &format!("waiting: {reason}"), |d| {
        d.task.status == TaskStatus::Pending && d.waiting.as_deref() == Some(reason)
    })
    .await
}

#[tokio::test]
async fn a_task_waits_pending_for_a_host_that_serves_its_kind_and_runs_there() {
    let _serial = serial();
    let mut c = noop_cluster().await;
    // A host with the newer noop (kinds noop and next) is seen, then leaves.
    let next = |s: &mut Settings| {
        s.host.adapters[0].path = common::adapter("noop-next");
    };
    let newer = c.start_host_with("host-next", "host-next", next);
    c.wait_for_hosts(1).await;
    c.hosts[newer].kill();
    c.wait_for_hosts_where("host-next gone", |h| h.iter().all(|h| !h.connected))
        .await;
    // Only a host with the older noop (kind noop) is connected now.
    c.start_host("host-old");
    c.wait_for_hosts_where("host-old connected", |h| {
        h.iter().any(|h| h.id == "host-old" && h.connected)
    })
    .await;

    // The kind stays known although the last host to connect lacks it.
    let id = c.submit(json!({"adapter": "noop", "kind": "next"})).await;
    let reason = "no connected host carries noop with kind next";
    let pending = waits_because(&c, id, reason).await;
    assert!(pending.attempts.is_empty(), "{pending:#?}");
    let report = c.cli(&["task", &id.to_string()]);
    assert!(
        report.contains(&format!("waiting     {reason}\n")),
        "{report}"
    );
    // A task of a kind both serve runs meanwhile, and unknown kinds are refused.
    let plain = c.submit(json!({"adapter": "noop", "kind": "noop"})).await;
    c.wait_for_status(plain, TaskStatus::Completed, WAIT).await;
    let err = c
        .client()
        .submit(&json!({"adapter": "noop", "kind": "chess"}))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("422") && err.contains("serves no kind"),
        "{err}"
    );

    // Once a host serving the kind connects, the task runs there, once.
    c.start_host_with("host-next-again", "host-next", next);
    let done = c.wait_for_status(id, TaskStatus::Completed, WAIT).await;
    assert_eq!(done.task.host.as_deref(), Some("host-next"));
    assert_eq!((done.task.runs, done.attempts.len()), (1, 1));
    assert_eq!(done.waiting, None);
}

#[tokio::test]
async fn two_one_gpu_tasks_on_a_two_gpu_host_get_different_devices() {
    let _serial = serial();
    let c = TestCluster::start(gpu_setup(2), 1).await;
    let share = json!({"gpus": 1, "cpus": 1.5, "memory": "64MiB"});
    let a = c.submit(holding_task(share.clone())).await;
    let b = c.submit(holding_task(share)).await;
    let (env_a, task_a) = trainer_env(&c, a).await;
    let (env_b, _) = trainer_env(&c, b).await;

    // Both run at once, each seeing one device, never the same one.
    let (dev_a, dev_b) = (
        var(&env_a, "CUDA_VISIBLE_DEVICES"),
        var(&env_b, "CUDA_VISIBLE_DEVICES"),
    );
    let mut both = [dev_a.clone(), dev_b.clone()];
    both.sort();
    assert_eq!(both, ["gpu0", "gpu1"], "{env_a:?} {env_b:?}");
    assert_eq!(var(&env_a, "TRAINYARD_GPUS"), dev_a);
    assert_eq!(var(&env_a, "TRAINYARD_CPUS"), "1.5");
    assert_eq!(
        var(&env_a, "TRAINYARD_MEMORY_BYTES"),
        (64u64 << 20).to_string()
    );
    // The assignment is recorded with the attempt, as the trainer saw it.
    let recorded = task_a.attempts[0].assignment.clone().expect("assignment");
    assert_eq!(recorded.gpus, [dev_a]);
    let hosts = c.client().hosts().await.unwrap();
    assert_eq!(hosts[0].free.gpus, 0, "{hosts:?}");

    cancel(&c, a).await;
    cancel(&c, b).await;
    // A task that asked for no GPU sees none.
    let none = c.submit(holding_task(json!({}))).await;
    let (env, _) = trainer_env(&c, none).await;
    assert_eq!(env.get("CUDA_VISIBLE_DEVICES"), Some(&Some(String::new())));
    assert_eq!(env.get("TRAINYARD_CPUS"), Some(&None));
    cancel(&c, none).await;
}

#[tokio::test]
async fn the_adapter_is_told_the_very_device_and_share_its_trainer_was_given() {
    let _serial = serial();
    let c = TestCluster::start(gpu_setup(2), 1).await;
    // The host's first device is taken, so the task's is not a guess.
    let holder = c.submit(holding_task(json!({"gpus": 1}))).await;
    let (held, _) = trainer_env(&c, holder).await;
    let task = json!({
        "adapter": "hostile",
        "params": {"attack": "env-values", "names": SHARE_VARIABLES},
        "resources": {"gpus": 1, "cpus": 1},
    });
    let id = c.submit(task).await;
    let done = c
        .wait_for(id, WAIT, "completed with the trainer's environment", |d| {
            d.task.status == TaskStatus::Completed
                && d.task
                    .progress
                    .as_ref()
                    .is_some_and(|p| p.message.is_some())
        })
        .await;
    let printed = done.task.progress.as_ref().and_then(|p| p.message.clone());
    let env: HashMap<String, Option<String>> =
        serde_json::from_str(&printed.unwrap_or_default()).expect("the trainer prints JSON");
    let device = var(&env, "TRAINYARD_GPUS");
    assert_eq!(var(&env, "TRAINYARD_CPUS"), "1");
    assert_ne!(device, var(&held, "TRAINYARD_GPUS"), "{env:?} {held:?}");
    assert_eq!(
        done.attempts[0].assignment.as_ref().map(|a| a.gpus.clone()),
        Some(vec![device.clone()])
    );

    // What the adapter read through `host.assigned-resources` in `prepare`.
    let summary = done.task.result.as_ref().and_then(|r| r.summary.clone());
    let summary: Value =
        serde_json::from_str(&summary.unwrap_or_default()).expect("a JSON summary");
    assert_eq!(
        summary["observed"][0]["assigned"],
        json!({"gpus": [device], "cpus": 1.0, "memory_bytes": null}),
        "the adapter was told what the trainer got: {summary}"
    );
    cancel(&c, holder).await;
}

#[tokio::test]
async fn a_two_gpu_task_waits_until_both_devices_are_free() {
    let _serial = serial();
    let c = TestCluster::start(gpu_setup(3), 1).await;
    let a = c.submit(holding_task(json!({"gpus": 1}))).await;
    let b = c.submit(holding_task(json!({"gpus": 1}))).await;
    trainer_env(&c, a).await;
    trainer_env(&c, b).await;

    let big = c.submit(holding_task(json!({"gpus": 2}))).await;
    waits_because(&c, big, "needs 2 GPUs; largest free: 0 GPUs on host-1").await;
    cancel(&c, a).await;
    // With one device free it still waits: the whole request must fit.
    let pending = waits_because(&c, big, "needs 2 GPUs; largest free: 1 GPU on host-1").await;
    assert!(pending.attempts.is_empty());
    let report = c.cli(&["task", &big.to_string()]);
    assert!(report.contains("resources   2 GPUs\n"), "{report}");

    cancel(&c, b).await;
    let (env, _) = trainer_env(&c, big).await;
    assert_eq!(var(&env, "CUDA_VISIBLE_DEVICES"), "gpu0,gpu1");
    cancel(&c, big).await;
}

#[tokio::test]
async fn a_request_larger_than_any_host_is_refused_at_submit() {
    let _serial = serial();
    let c = TestCluster::start(gpu_setup(1), 1).await;
    let refused = |resources: Value| {
        let task = holding_task(resources);
        let client = c.client().clone();
        async move { client.submit(&task).await.unwrap_err().to_string() }
    };
    let err = refused(json!({"gpus": 3})).await;
    assert!(
        err.contains("422") && err.contains("3 GPUs") && err.contains("2 GPUs (host-1)"),
        "{err}"
    );
    let err = refused(json!({"memory": "64GiB"})).await;
    assert!(
        err.contains("422") && err.contains("64 GiB memory"),
        "{err}"
    );
    let err = refused(json!({"cpus": 16})).await;
    assert!(err.contains("422") && err.contains("16 CPUs"), "{err}");
    let err = refused(json!({"gpus": -1})).await;
    assert!(err.contains("resources") || err.contains("gpus"), "{err}");
    assert!(
        c.client()
            .tasks(None, None, Some(10), None)
            .await
            .unwrap()
            .is_empty(),
        "nothing refused was stored"
    );
    // The largest request that fits is accepted.
    let id = c
        .submit(holding_task(
            json!({"gpus": 2, "cpus": 4, "memory": "8GiB"}),
        ))
        .await;
    trainer_env(&c, id).await;
    cancel(&c, id).await;
}

#[tokio::test]
async fn a_host_killed_with_devices_assigned_frees_them_for_the_next_attempt_elsewhere() {
    let _serial = serial();
    let one_gpu = |s: &mut Settings| {
        s.host.resources.gpus = gpus(&["gpu0"]);
    };
    let mut c = TestCluster::prepare(Setup {
        configure: one_gpu,
        ..gpu_setup(1)
    })
    .await;
    c.start_master().await;
    let first = c.start_host_with("host-1", "host-1", one_gpu);
    c.wait_for_hosts(1).await;
    let id = c.submit(holding_task(json!({"gpus": 1}))).await;
    let (_, running) = trainer_env(&c, id).await;
    assert_eq!(running.task.host.as_deref(), Some("host-1"));

    c.start_host_with("host-2", "host-2", one_gpu);
    c.wait_for_hosts(2).await;
    c.hosts[first].kill();
    // The lost attempt's lease lapses; attempt 2 gets host-2's device.
    let moved = c
        .wait_for(id, WAIT, "attempt 2 running on host-2", |d| {
            d.task.attempt == 2
                && d.task.status == TaskStatus::Running
                && d.task.host.as_deref() == Some("host-2")
        })
        .await;
    let (env, _) = trainer_env(&c, id).await;
    assert_eq!(var(&env, "CUDA_VISIBLE_DEVICES"), "gpu0");
    assert_eq!(
        moved.attempts[1]
            .assignment
            .as_ref()
            .map(|a| a.gpus.clone()),
        Some(vec!["gpu0".to_string()])
    );

    // host-1 comes back: what the lost attempt held there is free again.
    c.hosts[first].restart().expect("restart host-1");
    c.wait_for_hosts(2).await;
    let next = c.submit(holding_task(json!({"gpus": 1}))).await;
    let (env, task) = trainer_env(&c, next).await;
    assert_eq!(task.task.host.as_deref(), Some("host-1"));
    assert_eq!(var(&env, "CUDA_VISIBLE_DEVICES"), "gpu0");
    cancel(&c, id).await;
    cancel(&c, next).await;
}

#[tokio::test]
async fn a_large_request_that_waited_reserves_a_host_and_small_ones_wait_behind_it() {
    let _serial = serial();
    let c = TestCluster::start(
        Setup {
            configure: |s: &mut Settings| {
                s.host.resources.gpus = gpus(&["gpu0", "gpu1"]);
                s.master.reserve_after = Duration::from_secs(1);
            },
            ..gpu_setup(4)
        },
        1,
    )
    .await;
    let a = c.submit(holding_task(json!({"gpus": 1}))).await;
    let b = c.submit(holding_task(json!({"gpus": 1}))).await;
    trainer_env(&c, a).await;
    trainer_env(&c, b).await;
    let big = c.submit(holding_task(json!({"gpus": 2}))).await;
    // Once it has waited master.reserve_after, it holds the host.
    waits_because(
        &c,
        big,
        "host host-1 is reserved for it; waiting there for 2 GPUs",
    )
    .await;

    // A later one-GPU task does not take the device the first one frees.
    let small = c.submit(holding_task(json!({"gpus": 1}))).await;
    cancel(&c, a).await;
    waits_because(
        &c,
        small,
        &format!("the host with room (host-1) is reserved for task {big}, which has waited longer"),
    )
    .await;
    cancel(&c, b).await;
    let (env, _) = trainer_env(&c, big).await;
    assert_eq!(var(&env, "CUDA_VISIBLE_DEVICES"), "gpu0,gpu1");
    // The reservation ended with its placement; the small task waits its turn.
    waits_because(&c, small, "needs 1 GPU; largest free: 0 GPUs on host-1").await;
    cancel(&c, big).await;
    trainer_env(&c, small).await;
    cancel(&c, small).await;
}

/// A directory holding both versions of `noop`: 0.1.0 (kind noop) and
/// 0.2.0-next (kinds noop and next).
fn both_noops() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for name in ["noop", "noop-next"] {
        std::fs::copy(
            common::adapter(name),
            dir.path().join(format!("{name}.wasm")),
        )
        .unwrap();
    }
    dir
}

/// A master whose hosts carry `noop` (unless started with other adapters).
async fn noop_cluster() -> TestCluster {
    noop_cluster_with(|_| {}).await
}

async fn noop_cluster_with(configure: fn(&mut Settings)) -> TestCluster {
    let mut c = TestCluster::prepare(Setup {
        adapters: vec![("noop", vec!["true"])],
        configure,
        ..Setup::new("sqlite")
    })
    .await;
    c.start_master().await;
    c
}

/// Starts a host whose adapters are the components in `dir`.
fn start_host_on(c: &mut TestCluster, id: &str, dir: &Path) -> usize {
    let dir = dir.to_path_buf();
    c.start_host_with(id, id, move |s: &mut Settings| {
        s.host.adapters[0].path = dir;
    })
}

/// Waits until the task completes; returns the adapter version it ran.
async fn ran(c: &TestCluster, id: u64) -> String {
    let done = c.wait_for_status(id, TaskStatus::Completed, WAIT).await;
    assert_eq!(done.attempts.len(), 1, "{done:#?}");
    done.attempts[0].adapter_version.clone().unwrap_or_default()
}

/// Submits `task`, which must be refused with a 422 saying `expected`.
async fn refused(c: &TestCluster, task: Value, expected: &str) {
    let err = c.client().submit(&task).await.unwrap_err().to_string();
    assert!(
        err.contains("422") && err.contains(expected),
        "{task}: {err}"
    );
}

#[tokio::test]
async fn one_host_carries_two_versions_and_a_pinned_task_runs_the_one_it_names() {
    let _serial = serial();
    let mut c = noop_cluster().await;
    let dir = both_noops();
    let both = start_host_on(&mut c, "host-both", dir.path());
    c.start_host("host-old");
    c.wait_for_hosts(2).await;
    let hosts = c.client().hosts().await.unwrap();
    let host_both = hosts.iter().find(|h| h.id == "host-both").unwrap();
    let versions: Vec<&str> = host_both
        .adapters
        .iter()
        .map(|a| a.version.as_str())
        .collect();
    assert_eq!(versions, ["0.1.0", "0.2.0-next"], "{hosts:?}");

    // Unpinned: the newest version the fleet carries, so never on host-old
    // (master.unpinned_version = "fleet"); pinned: the version named.
    let mut unpinned = vec![];
    for _ in 0..4 {
        unpinned.push(c.submit(json!({"adapter": "noop"})).await);
    }
    for id in unpinned {
        assert_eq!(ran(&c, id).await, "0.2.0-next");
        let done = c.client().task(id).await.unwrap();
        assert_eq!(done.task.host.as_deref(), Some("host-both"));
    }
    let old = c.submit(json!({"adapter": "noop@=0.1.0"})).await;
    assert_eq!(ran(&c, old).await, "0.1.0");
    let out = c.cli(&["submit", "--adapter", "noop@>=0.2.0-next", "--kind", "next"]);
    let next: u64 = out.trim().parse().expect("submit prints the id");
    assert_eq!(ran(&c, next).await, "0.2.0-next");
    let report = c.cli(&["task", &old.to_string()]);
    assert!(
        report.contains("adapter     noop@=0.1.0, kind noop\n"),
        "{report}"
    );
    assert!(
        report.contains(" 0.1.0 "),
        "the attempt's version: {report}"
    );

    // What no known version can run is refused, and nothing is stored.
    let before = c
        .client()
        .tasks(None, None, None, None)
        .await
        .unwrap()
        .len();
    refused(
        &c,
        json!({"adapter": "noop@^0.3"}),
        "no version of adapter \"noop\" matches ^0.3",
    )
    .await;
    refused(
        &c,
        json!({"adapter": "noop@0.1", "kind": "next"}),
        "serves no kind \"next\"",
    )
    .await;
    refused(
        &c,
        json!({"adapter": "noop@newest"}),
        "not a semver version requirement",
    )
    .await;
    assert_eq!(
        c.client()
            .tasks(None, None, None, None)
            .await
            .unwrap()
            .len(),
        before
    );

    // A host carrying only 0.1.0: a task pinned past it waits, saying
    // why; an unpinned one runs there.
    c.hosts[both].kill();
    c.wait_for_hosts_where("host-both gone", |h| {
        h.iter().all(|h| h.connected == (h.id == "host-old"))
    })
    .await;
    let newer = c.submit(json!({"adapter": "noop@>=0.2.0-next"})).await;
    waits_because(
        &c,
        newer,
        "no connected host carries noop@>=0.2.0-next with kind noop",
    )
    .await;
    let plain = c.submit(json!({"adapter": "noop"})).await;
    assert_eq!(ran(&c, plain).await, "0.1.0");
    c.client().cancel(newer).await.expect("cancel");
    c.wait_for_status(newer, TaskStatus::Cancelled, WAIT).await;
}

#[tokio::test]
async fn with_unpinned_version_host_each_host_runs_the_newest_it_carries() {
    let _serial = serial();
    let mut c = noop_cluster_with(|s| {
        s.master.unpinned_version = trainyard_master::placement::VersionChoice::Host;
    })
    .await;
    let dir = both_noops();
    start_host_on(&mut c, "host-both", dir.path());
    c.start_host("host-old");
    c.wait_for_hosts(2).await;
    let mut ran_on = std::collections::BTreeMap::new();
    for _ in 0..4 {
        let id = c.submit(json!({"adapter": "noop"})).await;
        let version = ran(&c, id).await;
        let host = c.client().task(id).await.unwrap().task.host.unwrap();
        ran_on.insert(host, version);
    }
    // Dispatches spread over both hosts, each running its own newest.
    assert_eq!(
        ran_on,
        [
            ("host-both".into(), "0.2.0-next".into()),
            ("host-old".into(), "0.1.0".into())
        ]
        .into(),
    );
}

#[tokio::test]
async fn a_host_refuses_two_files_of_one_adapter_version() {
    let _serial = serial();
    let mut c = noop_cluster().await;
    let dir = both_noops();
    std::fs::copy(common::adapter("noop"), dir.path().join("noop-copy.wasm")).unwrap();
    let host = start_host_on(&mut c, "host-twice", dir.path());
    let log = common::exited(&mut c.hosts[host], WAIT).await;
    assert!(
        log.contains("two files carry adapter noop 0.1.0")
            && log.contains("noop-copy.wasm")
            && log.contains("noop.wasm"),
        "{log}"
    );
}
