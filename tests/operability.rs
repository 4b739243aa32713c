//! What an operator and their tooling see of a real master: its files are
//! private to its user; `/v1/health` says 503 when Redis is gone while
//! `/v1/health/live` stays 200 and `/v1/health/ready` tells a load balancer
//! to wait; reads answer while the scheduler waits on a frozen Redis; and a
//! command writing into a closed pipe ends quietly.

// `serial()` holds a std mutex across each whole test on purpose.
#![allow(clippy::await_holding_lock)]

use crate::common;

use common::{serial, Setup, TestCluster};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use trainyard::client::ApiClient;

/// How long any read of the API may take while the scheduler is stuck: far
/// below the scheduler's own wait on the frozen Redis ([`FROZEN_WAIT`]).
const PROMPT: Duration = Duration::from_secs(5);
/// The scheduler's Redis timeout in the frozen-Redis test: a read queued
/// behind the scheduler would wait this long.
const FROZEN_WAIT: Duration = Duration::from_secs(30);
const LONG: Duration = Duration::from_secs(60);

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

#[tokio::test]
async fn the_data_directory_and_the_masters_files_are_private_to_its_user() {
    let _serial = serial();
    let mut c = TestCluster::prepare(Setup::new("sqlite")).await;
    let data = c.cluster.dir.join("data");
    let db = data.join("trainyard.db");
    let s = &mut c.cluster.settings;
    s.data_dir = data.clone();
    s.database_url = format!("sqlite://{}", db.display());
    s.cluster.secret_file = data.join("cluster-secret");
    s.api.token_file = data.join("api-token");
    c.cluster.write_config().unwrap();
    c.start_master().await;

    let files = [
        "trainyard.db",
        "trainyard.db-wal",
        "trainyard.db-shm",
        "cluster-secret",
        "api-token",
    ];
    assert_eq!(mode(&data), 0o700, "the data directory");
    for name in files {
        assert_eq!(mode(&data.join(name)), 0o600, "{name}\n{}", c.log("master"));
    }

    // A database an older version left readable is narrowed at start.
    c.master().stop(Duration::from_secs(10));
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
    c.start_master().await;
    assert_eq!(mode(&db), 0o600, "{}", c.log("master"));
}

/// A health endpoint's answer: 200 or not, and the report.
async fn probe(client: &ApiClient, path: &str) -> (bool, Value) {
    tokio::time::timeout(PROMPT, client.probe(path))
        .await
        .unwrap_or_else(|_| panic!("GET /{path} did not answer within {PROMPT:?}"))
        .unwrap_or_else(|e| panic!("GET /{path}: {e}"))
}

/// Polls `path` until it answers `ok` with a report `check` accepts.
async fn wait_for_probe(
    c: &TestCluster,
    path: &str,
    ok: bool,
    check: impl Fn(&Value) -> bool,
) -> Value {
    let until = Instant::now() + LONG;
    loop {
        let (answered_ok, report) = probe(c.client(), path).await;
        if answered_ok == ok && check(&report) {
            return report;
        }
        assert!(
            Instant::now() < until,
            "/{path} still answers ok={answered_ok}: {report}\n{}",
            c.all_logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn health_is_503_without_redis_while_the_master_stays_live_and_not_ready() {
    let _serial = serial();
    let mut c = TestCluster::prepare(Setup::new("sqlite")).await;
    c.start_master().await;
    let report = wait_for_probe(&c, "v1/health", true, |_| true).await;
    assert_eq!(
        (&report["status"], &report["database"], &report["redis"]),
        (&json!("ok"), &json!("ok"), &json!("ok"))
    );
    assert!(probe(c.client(), "v1/health/live").await.0);
    let ready = probe(c.client(), "v1/health/ready").await;
    assert!(ready.0, "{}", ready.1);
    assert_eq!(ready.1["reconciled"], true);

    c.redis.kill();
    let report = wait_for_probe(&c, "v1/health", false, |_| true).await;
    assert_eq!(
        (&report["status"], &report["redis"], &report["database"]),
        (&json!("degraded"), &json!("unreachable"), &json!("ok")),
        "the same report, saying what is wrong"
    );
    assert!(report["scheduler"]["queued"].is_u64(), "{report}");
    let (live, body) = probe(c.client(), "v1/health/live").await;
    assert!(live, "a master without Redis is still live: {body}");
    let (ready, body) = probe(c.client(), "v1/health/ready").await;
    assert!(!ready, "a master without Redis is not ready: {body}");
    assert_eq!(body["redis"], "unreachable");

    c.redis.restart_empty();
    wait_for_probe(&c, "v1/health/ready", true, |r| r["redis"] == "ok").await;
    wait_for_probe(&c, "v1/health", true, |r| r["status"] == "ok").await;
}

/// Thaws a frozen process when dropped, whatever the test's outcome.
struct Frozen(u32);

impl Frozen {
    fn freeze(pid: u32) -> Self {
        kill(Pid::from_raw(pid as i32), Signal::SIGSTOP).expect("SIGSTOP");
        Frozen(pid)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        let _ = kill(Pid::from_raw(self.0 as i32), Signal::SIGCONT);
    }
}

#[tokio::test]
async fn reads_answer_while_the_scheduler_waits_on_a_frozen_redis() {
    let _serial = serial();
    let mut setup = Setup::new("sqlite");
    setup.timers.redis_timeout = FROZEN_WAIT;
    let c = TestCluster::start(setup, 1).await;
    wait_for_probe(&c, "v1/health", true, |_| true).await;

    let frozen = Frozen::freeze(c.redis.pid().expect("redis runs"));
    // The scheduler's next sweep waits on Redis (for FROZEN_WAIT): no sweep
    // completes any more, as the health report shows...
    let stuck_for = 8 * c.cluster.settings.timers.sweep_interval;
    let report = wait_for_probe(&c, "v1/health", false, |r| {
        r["scheduler"]["last_sweep_ms_ago"]
            .as_u64()
            .is_some_and(|ago| ago > stuck_for.as_millis() as u64)
    })
    .await;
    // ... which still answers at once, and sees Redis for what it is.
    assert_eq!(report["redis"], "unreachable", "{report}");
    assert_eq!(report["scheduler"]["hosts"], 1, "{report}");
    let hosts = tokio::time::timeout(PROMPT, c.client().hosts())
        .await
        .expect("/v1/hosts answers while the scheduler waits on Redis")
        .unwrap();
    assert!(
        hosts.iter().any(|h| h.id == "host-1" && h.connected),
        "{hosts:?}"
    );
    let (live, body) = probe(c.client(), "v1/health/live").await;
    assert!(live, "a scheduler waiting on Redis is alive: {body}");
    assert!(!probe(c.client(), "v1/health/ready").await.0);

    drop(frozen);
    wait_for_probe(&c, "v1/health", true, |r| {
        r["scheduler"]["last_sweep_ms_ago"]
            .as_u64()
            .is_some_and(|ago| ago < stuck_for.as_millis() as u64)
    })
    .await;
}

/// Runs `trainyard args…` with its stdout a pipe nobody reads any more.
fn into_a_closed_pipe(c: &TestCluster, args: &[&str]) -> std::process::Output {
    let (read, write) = nix::unistd::pipe().expect("pipe");
    drop(read);
    let child = Command::new(&c.cluster.bins.trainyard)
        .arg("--config")
        .arg(&c.cluster.config_path)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::from(write))
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot run trainyard");
    child.wait_with_output().expect("trainyard")
}

#[tokio::test]
async fn a_command_writing_into_a_closed_pipe_ends_quietly_like_other_tools() {
    let _serial = serial();
    let mut c = TestCluster::prepare(Setup::new("sqlite")).await;
    // No host runs here: the task waits, listed.
    c.cluster.settings.master.known_adapters = vec!["noop".into()];
    c.cluster.write_config().unwrap();
    c.start_master().await;
    c.submit(json!({"adapter": "noop"})).await;

    for args in [&["tasks"][..], &["task", "1"], &["hosts"], &["config"]] {
        let out = into_a_closed_pipe(&c, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGPIPE),
            "`trainyard {}` into a closed pipe ended with {} and said:\n{stderr}",
            args.join(" "),
            out.status
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}
