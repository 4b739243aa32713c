//! Python environments prepared by the host: real hosts (running as root,
//! as the suite does) build, with the `uv` of `make python-tools`, the
//! environment the `script-trainer` adapter's entry asks for, from a wheel
//! directory the test writes (offline: `find_links` and `no_index`), and
//! run its scripts with that environment's interpreter, read-only. An
//! unknown package and a package whose build fails end the task FAILED at
//! once, with the installer's message; an unreachable index is retried.

use crate::common;

use common::{verdict, Setup, TestCluster};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use trainyard::settings::Settings;
use trainyard_host::python_env::PythonRequirements;
use trainyard_master::model::TaskStatus;

const LONG: Duration = Duration::from_secs(180);

/// The log line a host writes once per environment it builds.
const BUILD_LINE: &str = "building a Python environment";

/// A wheel directory holding `tinypkg-1.2.3`, a package no index has.
fn wheel_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("python-env-wheels");
    trainyard_testkit::write_tiny_wheel(&dir);
    dir
}

/// A host whose `script-trainer` entry asks for `requirements`, offline.
fn offline(s: &mut Settings, requirements: &[&str]) {
    s.host.python.uv = trainyard_testkit::uv().display().to_string();
    s.host.python.find_links = vec![wheel_dir()];
    s.host.python.no_index = true;
    for entry in &mut s.host.adapters {
        entry.python = Some(PythonRequirements {
            requirements: requirements.iter().map(|r| r.to_string()).collect(),
        });
    }
}

fn setup(configure: fn(&mut Settings)) -> Setup {
    assert!(
        nix::unistd::geteuid().is_root(),
        "the Python environment tests run contained trainers as another user: run them as root"
    );
    Setup {
        adapters: vec![("script-trainer", vec!["python3"])],
        slots: 2,
        configure,
        ..Setup::new("sqlite")
    }
}

/// Imports the package, says where it ran, and tries to write into its
/// own environment.
const PROBE: &str = r#"
import json, os, sys
import tinypkg
try:
    with open(os.path.join(sys.prefix, "planted.py"), "w") as f:
        f.write("x = 1\n")
    wrote = True
except OSError as e:
    wrote = str(e)
json.dump({"value": tinypkg.VALUE, "prefix": sys.prefix, "wrote": wrote}, open("verdict.txt", "w"))
"#;

/// Where the one host of these tests, `host-1`, keeps its environments.
fn environments_root(c: &TestCluster) -> PathBuf {
    c.cluster
        .settings
        .host
        .cache_dir
        .as_ref()
        .expect("cache dir")
        .join("python")
        .join("host-1")
}

/// The entries of the environments' directory (complete or not).
fn entries(root: &Path) -> Vec<String> {
    std::fs::read_dir(root)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simultaneous_attempts_share_one_read_only_environment_built_once() {
    let c = TestCluster::start(setup(|s| offline(s, &["tinypkg>=1"])), 1).await;
    let task = json!({"adapter": "script-trainer", "params": {"script": PROBE}, "max_attempts": 1});
    let (a, b) = (c.submit(task.clone()).await, c.submit(task).await);
    let root = environments_root(&c);
    let mut prefixes = vec![];
    for id in [a, b] {
        let detail = c.wait_for_status(id, TaskStatus::Completed, LONG).await;
        let v = verdict(&detail);
        assert_eq!(
            v["value"], 42,
            "the trainer imported the environment's package"
        );
        let prefix = PathBuf::from(v["prefix"].as_str().unwrap());
        assert!(
            prefix.starts_with(root.canonicalize().unwrap()) || prefix.starts_with(&root),
            "the trainer ran in an environment under {}: {v}",
            root.display()
        );
        assert_ne!(
            v["wrote"], true,
            "the trainer wrote into its environment: {v}"
        );
        prefixes.push(prefix);
    }
    assert_eq!(
        prefixes[0], prefixes[1],
        "both attempts used one environment"
    );
    assert!(!prefixes[0].join("planted.py").exists());
    let log = c.log("host-1");
    assert_eq!(
        log.matches(BUILD_LINE).count(),
        1,
        "one build for both:\n{log}"
    );

    let key = prefixes[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let hosts = c
        .wait_for_hosts_where("the environment listed", |hosts| {
            hosts[0]
                .environments
                .iter()
                .any(|e| e.key == key && e.in_use == 0)
        })
        .await;
    let listed = &hosts[0].environments[0];
    assert_eq!(listed.requirements, ["tinypkg>=1"]);
    assert!(listed.size_bytes > 0);
    let table = c.cli(&["hosts"]);
    assert!(
        table.contains(&key[..12]) && table.contains("tinypkg>=1"),
        "`trainyard hosts` lists the environment:\n{table}"
    );

    // A later attempt reuses it without building again.
    let again = c
        .submit(json!({"adapter": "script-trainer", "params": {"script": PROBE}}))
        .await;
    c.wait_for_status(again, TaskStatus::Completed, LONG).await;
    assert_eq!(c.log("host-1").matches(BUILD_LINE).count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_package_fails_the_task_for_good_with_the_installers_reason() {
    let c = TestCluster::start(setup(|s| offline(s, &["nosuchpkg-zz"])), 1).await;
    let error = failed_for_good(&c).await;
    assert!(
        error.contains("nosuchpkg-zz") && error.contains("Python environment"),
        "the error names the package and the installer's reason: {error}"
    );
}

/// Runs the probe allowing 3 attempts and waits until it has FAILED after
/// one, leaving no environment behind; returns its error.
async fn failed_for_good(c: &TestCluster) -> String {
    let id = c
        .submit(
            json!({"adapter": "script-trainer", "params": {"script": PROBE}, "max_attempts": 3}),
        )
        .await;
    let detail = c.wait_for_status(id, TaskStatus::Failed, LONG).await;
    let error = detail.task.error.clone().unwrap_or_default();
    assert_eq!(
        detail.attempts.len(),
        1,
        "not retried: {:?}",
        detail.attempts
    );
    let left = entries(&environments_root(c));
    assert!(left.is_empty(), "no environment left behind: {left:?}");
    error
}

/// A host whose `script-trainer` entry asks for `brokenpkg`, whose source
/// package (in a directory of its own, offline) fails to build.
fn broken(s: &mut Settings) {
    offline(s, &["brokenpkg"]);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("python-env-broken");
    trainyard_testkit::write_broken_sdist(&dir);
    s.host.python.find_links = vec![dir];
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_package_that_fails_to_build_fails_the_task_for_good_with_the_installers_message() {
    let c = TestCluster::start(setup(broken), 1).await;
    let error = failed_for_good(&c).await;
    assert!(
        error.contains("Python environment")
            && error.contains("Failed to build `brokenpkg==1.0`")
            && error.contains(trainyard_testkit::BROKEN_BUILD_MESSAGE),
        "the error carries the installer's message and the build's own: {error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_over_its_size_evicts_the_environment_no_attempt_uses() {
    let c = TestCluster::start(
        setup(|s| {
            offline(s, &["tinypkg"]);
            s.host.python.cache_bytes = Some(1);
        }),
        1,
    )
    .await;
    let id = c
        .submit(
            json!({"adapter": "script-trainer", "params": {"script": PROBE}, "max_attempts": 1}),
        )
        .await;
    let detail = c.wait_for_status(id, TaskStatus::Completed, LONG).await;
    assert_eq!(verdict(&detail)["value"], 42, "kept while in use");
    let root = environments_root(&c);
    let until = Instant::now() + LONG;
    while !entries(&root).is_empty() {
        assert!(
            Instant::now() < until,
            "the idle environment was not evicted: {:?}\n{}",
            entries(&root),
            c.log("host-1")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    c.wait_for_hosts_where("no environment listed", |hosts| {
        hosts[0].environments.is_empty()
    })
    .await;
    assert!(c
        .log("host-1")
        .contains("evicted the least recently used Python environment"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_without_the_installer_refuses_to_start_naming_it() {
    let mut c = TestCluster::prepare(setup(|s| offline(s, &["tinypkg"]))).await;
    c.start_master().await;
    let at = c.start_host_with("host-1", "host-1", |s| {
        s.host.python.uv = "no-such-uv-installer".into();
    });
    let log = common::exited(&mut c.hosts[at], LONG).await;
    assert!(
        log.contains("host.python.uv") && log.contains("pip install uv"),
        "the refusal names the key and what to install:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_index_fails_the_attempt_as_retryable() {
    let c = TestCluster::start(
        setup(|s| {
            offline(s, &["tinypkg"]);
            // A port nothing listens on: the index cannot be reached.
            let port = trainyard_testkit::free_port();
            s.host.python.index_url = Some(format!("http://127.0.0.1:{port}/simple"));
            s.host.python.find_links = vec![];
            s.host.python.no_index = false;
        }),
        1,
    )
    .await;
    let id = c
        .submit(
            json!({"adapter": "script-trainer", "params": {"script": PROBE}, "max_attempts": 2}),
        )
        .await;
    let detail = c.wait_for_status(id, TaskStatus::Failed, LONG).await;
    let error = detail.task.error.clone().unwrap_or_default();
    assert!(
        error.contains("Python environment") && error.contains("127.0.0.1"),
        "the error carries the installer's reason: {error}"
    );
    assert_eq!(
        detail.attempts.len(),
        2,
        "retried, since the index may come back: {:?}",
        detail.attempts
    );
    assert!(entries(&environments_root(&c)).is_empty());
}
