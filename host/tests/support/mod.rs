//! Helpers for the runtime's integration tests: the built components, a
//! runtime with fast limits, attempt workspaces, and a bound on how long a
//! safety property may take to hold.

#![allow(dead_code)]

use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use trainyard_host::runtime::{
    AdapterRuntime, AttemptContext, ExitReport, ExitStatus, LoadedAdapter, RuntimeConfig, TaskInput,
};
use trainyard_proto::AttemptRef;

/// The deadline tests give every call.
pub const DEADLINE: Duration = Duration::from_millis(500);
/// The memory limit tests give every instance.
pub const MEMORY: u64 = 16 << 20;
/// How long a limit may take to stop a misbehaving adapter. Generous on
/// purpose: this bounds a safety property, it does not measure speed.
pub const STOPPED_WITHIN: Duration = Duration::from_secs(5);

/// `adapters/dist/<name>.wasm`, which `make -C adapters build` produces.
pub fn component(name: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../adapters/dist")
        .join(format!("{name}.wasm"));
    assert!(
        path.exists(),
        "{} is missing: run make -C adapters build first",
        path.display()
    );
    path
}

/// Fast limits, and a compiled-component cache shared by the tests of this
/// binary (under cargo's per-target temporary directory) so each adapter is
/// compiled once per build, not once per test.
pub fn fast_config() -> RuntimeConfig {
    RuntimeConfig {
        memory_limit: MEMORY,
        call_timeout: DEADLINE,
        cache_dir: Some(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("adapter-cache")),
        max_instances: 8,
        log_records: 1000,
        log_bytes: 1 << 20,
    }
}

pub fn runtime() -> AdapterRuntime {
    AdapterRuntime::new(fast_config()).expect("runtime")
}

pub async fn load(runtime: &AdapterRuntime, name: &str) -> LoadedAdapter {
    match runtime.load(&component(name)).await {
        Ok(adapter) => adapter,
        Err(e) => panic!("loading {name}: {e}"),
    }
}

/// A fresh workspace directory inside a temporary directory, so tests can
/// put files *next to* the workspace and check they stay out of reach.
pub struct Attempt {
    pub root: tempfile::TempDir,
    pub context: AttemptContext,
}

impl Attempt {
    pub fn new(task: u64) -> Attempt {
        let root = tempfile::tempdir().expect("tempdir");
        let workspace = root.path().join("workspace");
        std::fs::create_dir(&workspace).expect("workspace");
        Attempt {
            context: AttemptContext {
                attempt: AttemptRef::new(task, 1),
                workspace,
                logs: None,
                assignment: Default::default(),
            },
            root,
        }
    }

    pub fn workspace(&self) -> &std::path::Path {
        &self.context.workspace
    }
}

pub fn task(attempt: &Attempt, params: &str) -> TaskInput {
    TaskInput {
        attempt: attempt.context.attempt,
        kind: String::new(),
        params: params.to_owned(),
        checkpoint: None,
    }
}

pub fn not_launched() -> ExitReport {
    ExitReport {
        status: ExitStatus::NotLaunched,
        stderr_tail: String::new(),
        duration_ms: 0,
    }
}

/// Awaits `future`, failing the test if it takes longer than
/// [`STOPPED_WITHIN`].
pub async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    let started = Instant::now();
    let out = tokio::time::timeout(STOPPED_WITHIN, future)
        .await
        .unwrap_or_else(|_| panic!("{what} was not stopped within {STOPPED_WITHIN:?}"));
    let took = started.elapsed();
    assert!(took < STOPPED_WITHIN, "{what} took {took:?}");
    out
}

/// The hostile adapter's benign mode, start to finish: proves an adapter
/// (and the runtime under it) still serve after an earlier attempt failed.
pub async fn run_benign(adapter: &LoadedAdapter) {
    let attempt = Attempt::new(999);
    let mut instance = adapter
        .instantiate(attempt.context.clone())
        .await
        .expect("instantiate");
    let plan = instance
        .prepare(&task(&attempt, r#"{"attack":"none"}"#))
        .await
        .expect("no fault")
        .expect("a plan");
    assert!(plan.command.is_none() && plan.files.is_empty());
    assert_eq!(instance.on_output("a line").await.expect("no fault"), None);
    let success = instance
        .finish(&not_launched())
        .await
        .expect("no fault")
        .expect("success");
    assert_eq!(success.metrics.len(), 1);
    assert_eq!(success.metrics[0].name, "ok");
}

/// The JSON report the hostile adapter puts in its `finish` summary.
pub fn observed(summary: Option<String>) -> Vec<serde_json::Value> {
    let summary = summary.expect("a summary");
    let report: serde_json::Value = serde_json::from_str(&summary).expect("summary is JSON");
    report["observed"]
        .as_array()
        .expect("observed list")
        .clone()
}
