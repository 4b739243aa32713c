//! Adapters change under a running host: a component copied into its
//! adapter directory is loaded and offered without a restart, a replaced
//! one is offered at its new version, a removed one is no longer offered
//! while the attempt it runs finishes on the instance it started with, and
//! a broken file is refused with the reason, taking nothing else down.

// `serial()` holds a std mutex across each whole test on purpose: the
// multi-process tests take the machine's ports and CPU one at a time.
#![allow(clippy::await_holding_lock)]

use crate::common;

use common::{adapter, logged, serial, Setup, TestCluster};
use serde_json::json;
use std::path::Path;
use std::time::Duration;
use trainyard::client::HostView;
use trainyard_master::model::TaskStatus;

const PATIENCE: Duration = Duration::from_secs(60);

/// Puts a component into the directory as an operator should: written
/// under another name, then renamed, so the host never reads half a file.
fn install(from: &Path, dir: &Path, name: &str) {
    let part = dir.join(format!("{name}.part"));
    std::fs::copy(from, &part).expect("copy the component");
    std::fs::rename(&part, dir.join(name)).expect("rename it into place");
}

/// The version of `name` host-1 offers, if any.
fn offered(hosts: &[HostView], name: &str) -> Option<String> {
    hosts
        .iter()
        .find(|h| h.id == "host-1")?
        .adapters
        .iter()
        .find(|a| a.name == name)
        .map(|a| a.version.clone())
}

#[tokio::test]
async fn a_host_loads_replaces_and_drops_adapters_while_it_runs() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    install(&adapter("noop"), dir.path(), "noop.wasm");
    let mut c = TestCluster::prepare(Setup::new("sqlite")).await;
    let s = &mut c.cluster.settings;
    s.host.adapters = vec![trainyard::settings::AdapterEntry::new(
        dir.path(),
        &["true", "seq", "python3"],
    )];
    s.host.watch_adapters = Duration::from_millis(200);
    c.cluster.write_config().expect("config");
    c.start_master().await;
    c.start_host("host-1");
    c.wait_for_hosts(1).await;
    let hosts = c.client().hosts().await.unwrap();
    assert!(offered(&hosts, "noop").is_some());
    assert!(offered(&hosts, "python-trainer").is_none());

    // A new component: offered, and runs tasks.
    install(
        &adapter("python-trainer"),
        dir.path(),
        "python-trainer.wasm",
    );
    c.wait_for_hosts_where("python-trainer offered", |h| {
        offered(h, "python-trainer").is_some()
    })
    .await;
    let quick = c
        .submit(json!({"adapter": "python-trainer", "params": {"episodes": 20}}))
        .await;
    c.wait_for_status(quick, TaskStatus::Completed, PATIENCE)
        .await;

    // A broken file is refused with the reason; the others stay.
    std::fs::write(dir.path().join("broken.wasm"), b"not a component").unwrap();
    let log = logged(&c.hosts[0], "broken.wasm", PATIENCE).await;
    assert!(log.contains("adapter not loaded"), "{log}");
    let hosts = c.client().hosts().await.unwrap();
    assert!(offered(&hosts, "noop").is_some() && offered(&hosts, "python-trainer").is_some());

    // A replaced component is offered at its new version, with its new kind.
    install(&adapter("noop-next"), dir.path(), "noop.wasm");
    c.wait_for_hosts_where("noop at its new version", |h| {
        offered(h, "noop").as_deref() == Some("0.2.0-next")
    })
    .await;
    let next = c.submit(json!({"adapter": "noop", "kind": "next"})).await;
    c.wait_for_status(next, TaskStatus::Completed, PATIENCE)
        .await;

    // A removed component is no longer offered; the attempt running on it
    // finishes on the instance it started with.
    let long = c
        .submit(json!({
            "adapter": "python-trainer",
            "params": {"episodes": 30, "step_delay_ms": 100},
        }))
        .await;
    c.wait_for_status(long, TaskStatus::Running, PATIENCE).await;
    std::fs::remove_file(dir.path().join("python-trainer.wasm")).unwrap();
    c.wait_for_hosts_where("python-trainer no longer offered", |h| {
        offered(h, "python-trainer").is_none()
    })
    .await;
    let done = c
        .wait_for_status(long, TaskStatus::Completed, PATIENCE)
        .await;
    assert_eq!(done.attempts.len(), 1, "the attempt was not disturbed");
    assert_eq!(done.task.progress.and_then(|p| p.episode), Some(30));
}
