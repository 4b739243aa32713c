//! A new adapter author's path, as the guide walks it: `trainyard adapter
//! new` makes a project outside the repository, one command builds it, its
//! own unit tests pass, the conformance suite passes (the params schema
//! included), one local attempt succeeds, nothing compiled lands in the
//! project, and a cluster whose host loads the component runs a submitted
//! task to COMPLETED and refuses bad params. Without a trainyard on PATH,
//! `make check` says how to name one.

// `serial()` holds a std mutex across each whole test on purpose: the
// multi-process tests take the machine's ports and CPU one at a time.
#![allow(clippy::await_holding_lock)]

use crate::common;

use common::{explain, serial, Setup, TestCluster};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;
use trainyard::client::ClientError;
use trainyard_master::model::TaskStatus;

const NAME: &str = "my-bandit";
const PATIENCE: Duration = Duration::from_secs(60);

fn trainyard() -> &'static str {
    env!("CARGO_BIN_EXE_trainyard")
}

/// Runs `trainyard args…` in `dir` with no configuration file, as an author
/// would in their project.
fn author_runs(dir: &Path, args: &[&str]) -> Output {
    Command::new(trainyard())
        .args(args)
        .current_dir(dir)
        .env_remove("TRAINYARD_CONFIG")
        .output()
        .expect("run trainyard")
}

/// Runs a goal of the project's own Makefile. The compiled dependencies stay
/// in one directory under the repository's target/, so later runs of this
/// test rebuild only the adapter.
fn make(project: &Path, goal: &str) -> String {
    make_with(project, goal, &[])
}

fn make_with(project: &Path, goal: &str, vars: &[String]) -> String {
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/adapter-template");
    // The system's programs first, as on a host: the trainer runs as an
    // unprivileged user, who cannot reach a `python3` in a home directory.
    let ours = std::env::var("PATH").unwrap_or_default();
    let path = format!("{}:{ours}", trainyard::cluster::SYSTEM_PATH);
    let out = Command::new("make")
        .env("PATH", path)
        .arg("-C")
        .arg(project)
        .arg(goal)
        .args(vars)
        // As a user runs it: not as a sub-make of `make test`.
        .env_remove("MAKEFLAGS")
        .env_remove("MFLAGS")
        .env_remove("MAKELEVEL")
        .env("CARGO_TARGET_DIR", &target)
        .env("TRAINYARD", trainyard())
        .env("XDG_CACHE_HOME", project.join("../user-cache"))
        .output()
        .expect("run make (install the Debian package make)");
    assert!(
        out.status.success(),
        "make {goal} failed: {}",
        explain(&out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `trainyard adapter new` into a fresh directory, built.
fn new_project(root: &Path) -> PathBuf {
    let project = root.join(NAME);
    let out = author_runs(root, &["adapter", "new", NAME]);
    assert!(out.status.success(), "{}", explain(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("make check"));
    // The contract comes with the project, as this binary's hosts speak it.
    let vendored = std::fs::read_to_string(project.join("wit/adapter.wit")).unwrap();
    let ours =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("wit/adapter.wit"))
            .unwrap();
    assert_eq!(vendored, ours);
    make(&project, "build");
    // The project's own unit tests pass as generated; so does trainyard's
    // conformance suite, and one attempt on this machine succeeds.
    make(&project, "test");
    let checked = make(&project, "check");
    assert!(
        checked.contains("passed") && checked.contains("metadata/params-schema"),
        "{checked}"
    );
    let ran = make(&project, "run");
    assert!(ran.contains("mean_return"), "{ran}");
    project
}

/// A cluster whose host carries `component`, shipped like any adapter: an
/// entry in the host's configuration. `compiled` is where the host caches
/// the compiled component, when not the suite's shared cache.
async fn cluster_carrying(component: &Path, compiled: Option<PathBuf>) -> TestCluster {
    let mut c = TestCluster::prepare(Setup::new("sqlite")).await;
    let host = &mut c.cluster.settings.host;
    host.adapters.push(trainyard::settings::AdapterEntry::new(
        component,
        &["python3"],
    ));
    if compiled.is_some() {
        host.adapter_cache_dir = compiled;
    }
    c.cluster.write_config().expect("config");
    c.start_master().await;
    c.start_host("host-1");
    c.wait_for_hosts(1).await;
    c
}

#[test]
fn a_project_is_never_written_over_and_a_bad_name_is_refused() {
    let root = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("keep.txt"), "mine").unwrap();
    let out = author_runs(root.path(), &["adapter", "new", NAME, "--dir", "."]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is not empty"),
        "{}",
        explain(&out)
    );
    assert_eq!(
        std::fs::read_to_string(root.path().join("keep.txt")).unwrap(),
        "mine"
    );
    let out = author_runs(root.path(), &["adapter", "new", "My_Adapter"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("lower-case letters"),
        "{}",
        explain(&out)
    );
    assert!(!root.path().join("My_Adapter").exists());
}

#[tokio::test]
async fn a_new_rust_adapter_builds_and_completes_a_task_on_a_cluster() {
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let project = new_project(root.path());
    let component = project.join(format!("dist/{NAME}.wasm"));
    assert!(component.exists(), "make built no {}", component.display());

    let c = cluster_carrying(&component, None).await;

    let id = c
        .submit(json!({"adapter": NAME, "params": {"episodes": 40, "arms": 4, "seed": 7}}))
        .await;
    let done = c.wait_for_status(id, TaskStatus::Completed, PATIENCE).await;
    let result = done.task.result.as_ref().expect("a result");
    let mean = *result
        .metrics
        .get("mean_return")
        .expect("the sample trainer's mean_return");
    assert!((0.0..=20.0).contains(&mean), "{mean}");
    let progress = done
        .task
        .progress
        .as_ref()
        .unwrap_or_else(|| panic!("no progress on {done:#?}\n{}", c.all_logs()));
    assert_eq!(progress.episode, Some(40));

    // The adapter declares a schema of its params: bad ones are refused at
    // submit, naming the field, and never reach a host.
    let before = c
        .client()
        .tasks(None, None, Some(100), None)
        .await
        .unwrap()
        .len();
    for (params, field) in [
        (json!({"episodes": "many"}), "/episodes"),
        (json!({"arms": 1}), "/arms"),
        (json!({"epsilon": 0.1, "episods": 3}), "episods"),
    ] {
        match c
            .client()
            .submit(&json!({"adapter": NAME, "params": params}))
            .await
        {
            Err(ClientError::Refused { status, message }) => {
                assert_eq!(status, 422, "{message}");
                assert!(
                    message.contains("invalid params") && message.contains(field),
                    "{params}: {message}"
                );
            }
            other => panic!("{params} was not refused: {other:?}"),
        }
    }
    let after = c
        .client()
        .tasks(None, None, Some(100), None)
        .await
        .unwrap()
        .len();
    assert_eq!(before, after, "nothing was stored");

    // And the metrics its results hold: a sweep on another is refused.
    match c
        .client()
        .create_sweep(&json!({"adapter": NAME, "metric": "mean_retrun", "seeds": 2}))
        .await
    {
        Err(ClientError::Refused { status, message }) => {
            assert_eq!(status, 422, "{message}");
            assert!(
                message.contains("it declares best_possible, episodes, mean_return"),
                "{message}"
            );
        }
        other => panic!("the sweep was not refused: {other:?}"),
    }
    let sweep = c
        .client()
        .create_sweep(&json!({
            "adapter": NAME, "metric": "mean_return", "seeds": 2,
            "params": {"episodes": 10},
        }))
        .await
        .expect("a sweep on a declared metric");
    assert!(sweep.metric_checked);
}

/// The componentize-py `make python-tools` installs under `target/`, so
/// the test does not install one into each project.
fn componentize_py() -> String {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("target/python-tools/bin/componentize-py");
    assert!(
        path.is_file(),
        "componentize-py is missing from target/python-tools: run `make python-tools`"
    );
    format!("COMPONENTIZE_PY={}", path.display())
}

#[tokio::test]
async fn a_new_python_adapter_builds_checks_runs_and_completes_a_task_on_a_cluster() {
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let name = "my-py";
    let out = author_runs(root.path(), &["adapter", "new", name, "--lang", "python"]);
    assert!(out.status.success(), "{}", explain(&out));
    let project = root.path().join(name);
    assert!(project.join("app.py").is_file() && project.join("wit/adapter.wit").is_file());
    let tool = componentize_py();
    make_with(&project, "all", std::slice::from_ref(&tool));
    // Its own unit tests pass as generated, with plain python3.
    make_with(&project, "test", &[]);
    let checked = make_with(&project, "check", std::slice::from_ref(&tool));
    assert!(
        checked.contains("passed") && checked.contains("metadata/params-schema"),
        "{checked}"
    );
    let ran = make_with(&project, "run", std::slice::from_ref(&tool));
    assert!(ran.contains("best_return"), "{ran}");
    // What check and run compiled is in the user's cache, not the project.
    let project_files = files_under(&project);
    assert!(
        !project_files
            .iter()
            .any(|p| p.starts_with(project.join("data"))),
        "the tools wrote into the project: {project_files:?}"
    );
    assert!(
        !files_under(&root.path().join("user-cache")).is_empty(),
        "nothing was cached in the user's cache directory"
    );

    let component = project.join(format!("dist/{name}.wasm"));
    // componentize-py's output differs from build to build: compiled in a
    // cache of its own, not the suite's shared one, which would keep a new
    // entry every run.
    let c = cluster_carrying(&component, Some(root.path().join("compiled"))).await;
    let id = c
        .submit(json!({"adapter": name, "params": {"episodes": 10}}))
        .await;
    let done = c.wait_for_status(id, TaskStatus::Completed, PATIENCE).await;
    let result = done.task.result.as_ref().expect("a result");
    assert!(result.metrics.contains_key("best_return"), "{result:?}");
    assert_eq!(
        done.task.progress.as_ref().and_then(|p| p.episode),
        Some(10)
    );
    // Its params schema: bad params are refused at submit, naming the field.
    for (params, field) in [
        (json!({"episodes": 0}), "/episodes"),
        (json!({"episods": 3}), "episods"),
    ] {
        match c
            .client()
            .submit(&json!({"adapter": name, "params": params}))
            .await
        {
            Err(ClientError::Refused { status, message }) => {
                assert_eq!(status, 422, "{message}");
                assert!(message.contains(field), "{params}: {message}");
            }
            other => panic!("{params} was not refused: {other:?}"),
        }
    }
}

/// Every file under `dir`, recursively (none if it does not exist).
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = vec![];
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                found.push(path);
            }
        }
    }
    found
}

#[test]
fn check_and_run_without_a_trainyard_on_path_say_how_to_name_one() {
    let root = tempfile::tempdir().unwrap();
    for lang in ["rust", "python"] {
        let out = author_runs(root.path(), &["adapter", "new", lang, "--lang", lang]);
        assert!(out.status.success(), "{}", explain(&out));
        let project = root.path().join(lang);
        for goal in ["check", "run"] {
            let out = Command::new("make")
                .env("PATH", trainyard::cluster::SYSTEM_PATH)
                .env_remove("TRAINYARD")
                .env_remove("MAKEFLAGS")
                .env_remove("MAKELEVEL")
                .arg("-C")
                .arg(&project)
                .arg(goal)
                .output()
                .expect("run make");
            assert!(!out.status.success(), "{lang} {goal}: {}", explain(&out));
            let said = String::from_utf8_lossy(&out.stdout);
            assert!(
                said.contains("trainyard not found")
                    && said.contains(&format!("make {goal} TRAINYARD=/path/to/trainyard")),
                "{lang} {goal}: {}",
                explain(&out)
            );
            // Nothing was built first: the check comes before the build.
            assert!(!project.join("dist").exists(), "{lang} {goal}");
        }
    }
}
