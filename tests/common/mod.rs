//! Shared harness of the multi-process tests: a private Redis, a fresh
//! database (SQLite or PostgreSQL), a real master and real hosts started from
//! the built binaries, fast timers ([`test_timers`]), and helpers that wait for what a user
//! would look at (task status in the API, keys in Redis, processes gone).
//!
//! Tasks that need test hooks (a trace file, a simulated failure) run on the
//! `test-trainer` adapter, which every test host carries and no shipped
//! configuration does. Its trace files all go to one directory per cluster,
//! [`TestCluster::trace_dir`], created here and named to the trainers in
//! their environment (`TRAINYARD_TRACE_DIR`).
//!
//! `TRAINYARD_TEST_KEEP_DIRS=1` keeps each cluster's directory (config,
//! logs, traces) after the test and prints where it is.
#![allow(dead_code)]

pub mod stall_proxy;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use trainyard::client::ApiClient;
use trainyard::cluster::{Binaries, Cluster, Process};
use trainyard_master::model::{TaskDetail, TaskStatus};
use trainyard_proto::Timers;
use trainyard_testkit::{Database, RedisServer};

/// The timers of the test clusters: the fast timers of the recovery
/// benchmark (leases renewed five times a second, a sweep four times a
/// second), with slack enough that a loaded two-core machine does not make a
/// test lose a lease it should keep.
///
/// A lease survives a stall of its host, of Redis or of the master (whose
/// heartbeat answer waits for its database commit) of up to `lease_ttl -
/// lease_safety_margin - heartbeat_interval`: 4.3 s here. With the fast
/// timers' 2 s lease that was 1.5 s, and a stall that long, while a parallel
/// build ran, turned an attempt that should have completed on its first
/// host into an extra lost one. A dispatch likewise survives a host stall of
/// up to `dispatch_ack_timeout`.
pub fn test_timers() -> Timers {
    Timers {
        lease_ttl: Duration::from_secs(5),
        lease_safety_margin: Duration::from_millis(500),
        dispatch_ack_timeout: Duration::from_secs(6),
        idle_timeout: Duration::from_secs(3),
        ..trainyard_testkit::fast_timers()
    }
}

/// The adapters built by `make -C adapters build fixtures`.
pub fn adapter(name: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("adapters/dist")
        .join(format!("{name}.wasm"));
    assert!(
        path.exists(),
        "{} is missing: run `make -C adapters build fixtures` (make test does)",
        path.display()
    );
    path
}

/// The user cache directory (`XDG_CACHE_HOME`) of the adapter author's
/// commands the tests run (`adapter check`, `adapter run`, `dev`), which
/// compile into it: `target/test-user-cache`, so each adapter is compiled
/// once a run and nothing goes to the home of whoever runs the suite.
pub fn user_cache_home() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-user-cache");
    std::fs::create_dir_all(&dir).expect("the tests' user cache directory");
    dir
}

pub fn binaries() -> Binaries {
    Binaries::at(env!("CARGO_BIN_EXE_trainyard"))
        .expect("trainyard binaries (make test builds them)")
}

/// A running test cluster. Everything it started dies with it.
pub struct TestCluster {
    pub cluster: Cluster,
    /// Where trace files go: `<cluster dir>/traces`.
    trace_dir: PathBuf,
    pub redis: RedisServer,
    pub db: Database,
    pub master: Option<Process>,
    pub hosts: Vec<Process>,
    pub client: Option<ApiClient>,
    /// Removed with the cluster unless `TRAINYARD_TEST_KEEP_DIRS` is set.
    dir: Option<tempfile::TempDir>,
}

/// The trainer's environment variable naming the trace directory.
const TRACE_DIR_VAR: &str = "TRAINYARD_TRACE_DIR";

impl Drop for TestCluster {
    fn drop(&mut self) {
        for host in &mut self.hosts {
            host.kill();
        }
        trainyard::cluster::remove_cgroup_parent(&self.cluster.settings);
        if std::env::var_os("TRAINYARD_TEST_KEEP_DIRS").is_some() {
            if let Some(dir) = self.dir.take() {
                eprintln!("cluster directory kept: {}", dir.keep().display());
            }
        }
    }
}

/// How to build a test cluster.
pub struct Setup {
    pub backend: &'static str,
    pub timers: Timers,
    pub slots: u32,
    pub adapters: Vec<(&'static str, Vec<&'static str>)>,
    /// Last word on the settings before they are written.
    pub configure: fn(&mut trainyard::settings::Settings),
}

impl Setup {
    pub fn new(backend: &'static str) -> Self {
        Self {
            backend,
            timers: test_timers(),
            slots: 1,
            adapters: vec![
                ("python-trainer", vec!["python3"]),
                ("test-trainer", vec!["python3"]),
                ("noop", vec!["true"]),
            ],
            configure: |_| {},
        }
    }
}

impl TestCluster {
    /// Redis, a database and the config; nothing started yet.
    pub async fn prepare(setup: Setup) -> TestCluster {
        let redis = RedisServer::start();
        let db = trainyard_testkit::fresh_database(setup.backend).await;
        let dir = tempfile::tempdir().expect("temp dir");
        let mut cluster =
            Cluster::new(dir.path(), binaries(), &redis.url(), &db.url).expect("cluster dir");
        let trace_dir = cluster.dir.join("traces");
        std::fs::create_dir_all(&trace_dir).expect("trace dir");
        // Written by trainers, which run as another user.
        std::fs::set_permissions(&trace_dir, std::fs::Permissions::from_mode(0o777))
            .expect("trace dir mode");
        cluster
            .settings
            .host
            .trainer_env
            .insert(TRACE_DIR_VAR.into(), trace_dir.display().to_string());
        cluster.settings.timers = setup.timers;
        cluster.settings.host.slots = setup.slots;
        cluster.settings.host.adapters = setup
            .adapters
            .iter()
            .map(|(name, programs)| {
                let mut entry = trainyard::settings::AdapterEntry::new(adapter(name), programs);
                if *name == "test-trainer" {
                    // The trace files are the test hooks' only way out.
                    entry.read_write.push(trace_dir.clone());
                }
                entry
            })
            .collect();
        cluster.settings.host.progress_interval = Duration::from_millis(50);
        cluster.settings.host.adapter_cache_dir = Some(trainyard_testkit::adapter_cache());
        cluster.env.push((
            "RUST_LOG".into(),
            "info,trainyard_host=debug,trainyard_master=debug".into(),
        ));
        (setup.configure)(&mut cluster.settings);
        cluster.write_config().expect("config");
        TestCluster {
            cluster,
            trace_dir,
            redis,
            db,
            master: None,
            hosts: vec![],
            client: None,
            dir: Some(dir),
        }
    }

    /// Prepares and starts a master and `hosts` hosts, all connected.
    pub async fn start(setup: Setup, hosts: usize) -> TestCluster {
        let mut c = Self::prepare(setup).await;
        c.start_master().await;
        for i in 1..=hosts {
            c.start_host(&format!("host-{i}"));
        }
        c.wait_for_hosts(hosts).await;
        c
    }

    pub async fn start_master(&mut self) {
        self.start_master_with(&[]).await;
    }

    /// Starts the master with extra environment (fail points).
    pub async fn start_master_with(&mut self, env: &[(String, String)]) {
        if let Some(mut old) = self.master.take() {
            old.kill();
        }
        self.master = Some(self.cluster.spawn_master_with(env).expect("spawn master"));
        let client = self
            .cluster
            .wait_for_master(Duration::from_secs(60))
            .await
            .unwrap_or_else(|e| panic!("{e:#}\n--- master log ---\n{}", self.log("master")));
        self.client = Some(client);
    }

    pub fn start_host(&mut self, id: &str) -> usize {
        self.hosts
            .push(self.cluster.spawn_host(id).expect("spawn host"));
        self.hosts.len() - 1
    }

    /// SIGKILL the master and start a new one on the same ports and database.
    pub async fn restart_master(&mut self) {
        self.master().kill();
        self.start_master().await;
    }

    pub fn host(&mut self, id: &str) -> &mut Process {
        self.hosts
            .iter_mut()
            .find(|h| h.name == id)
            .expect("no such host")
    }

    pub fn master(&mut self) -> &mut Process {
        self.master.as_mut().expect("master not started")
    }

    pub fn client(&self) -> &ApiClient {
        self.client.as_ref().expect("master not started")
    }

    pub async fn wait_for_hosts(&self, n: usize) {
        self.cluster
            .wait_for_hosts(self.client(), n, Duration::from_secs(60))
            .await
            .unwrap_or_else(|e| panic!("{e:#}\n{}", self.all_logs()));
    }

    /// The directory of every trace file of this cluster.
    pub fn trace_dir(&self) -> &Path {
        &self.trace_dir
    }

    /// A trace file's path, for reading; tasks name the file only
    /// (`"trace_file": name`).
    pub fn trace(&self, name: &str) -> PathBuf {
        self.trace_dir.join(name)
    }

    pub fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.cluster.dir.join(format!("{name}.log"))).unwrap_or_default()
    }

    pub fn all_logs(&self) -> String {
        let mut out = String::new();
        let mut names = vec!["master".to_string()];
        names.extend(self.hosts.iter().map(|h| h.name.clone()));
        for name in names {
            let log = self.log(&name);
            let tail: Vec<&str> = log.lines().rev().take(60).collect();
            out.push_str(&format!("\n--- {name} (last lines) ---\n"));
            for line in tail.into_iter().rev() {
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }

    pub async fn submit(&self, task: serde_json::Value) -> u64 {
        self.client()
            .submit(&task)
            .await
            .unwrap_or_else(|e| panic!("submit failed: {e}"))
    }

    pub async fn task(&self, id: u64) -> TaskDetail {
        self.client()
            .task(id)
            .await
            .unwrap_or_else(|e| panic!("task {id}: {e}"))
    }

    /// Waits until the task reaches `status` (panics with the logs if it
    /// ends otherwise or takes too long).
    pub async fn wait_for_status(
        &self,
        id: u64,
        status: TaskStatus,
        timeout: Duration,
    ) -> TaskDetail {
        let until = Instant::now() + timeout;
        loop {
            let detail = self.client().task(id).await;
            if let Ok(d) = &detail {
                if d.task.status == status {
                    return d.clone();
                }
                if d.task.status.is_terminal() {
                    panic!(
                        "task {id} ended {} instead of {status}: {:#?}\n{}",
                        d.task.status,
                        d.task,
                        self.all_logs()
                    );
                }
            }
            if Instant::now() > until {
                panic!(
                    "task {id} not {status} within {timeout:?}: {detail:#?}\n{}",
                    self.all_logs()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until `check` holds for the task.
    pub async fn wait_for(
        &self,
        id: u64,
        timeout: Duration,
        what: &str,
        check: impl Fn(&TaskDetail) -> bool,
    ) -> TaskDetail {
        let until = Instant::now() + timeout;
        loop {
            if let Ok(d) = self.client().task(id).await {
                if check(&d) {
                    return d;
                }
                if Instant::now() > until {
                    panic!(
                        "task {id}: {what} not seen within {timeout:?}: {:#?}\n{}",
                        d,
                        self.all_logs()
                    );
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until every trainer process in `pids` has ended.
    pub async fn wait_for_trainers_gone(&self, pids: &[u32], timeout: Duration, what: &str) {
        assert!(!pids.is_empty(), "{what}: no trainer process to wait for");
        let until = Instant::now() + timeout;
        loop {
            let alive: Vec<u32> = pids.iter().copied().filter(|p| trainer_alive(*p)).collect();
            if alive.is_empty() {
                return;
            }
            if Instant::now() > until {
                panic!(
                    "{what}: trainers {alive:?} still run after {timeout:?}\n{}",
                    self.all_logs()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The host's pids of the running trainers of `attempt` that wrote
    /// `events`. A trainer runs in a PID namespace of its own, so the pid it
    /// writes is its namespace's: it is found among this cluster's trainer
    /// processes (their environment names its trace directory, their working
    /// directory is an attempt's workspace) by the last pid of their `NSpid`.
    pub fn running_trainers(&self, events: &[TraceEvent], attempt: u32) -> Vec<u32> {
        let inner = trainer_pids(events, attempt);
        let trace_dir = format!("{TRACE_DIR_VAR}={}", self.trace_dir.display());
        let mut found: Vec<u32> = std::fs::read_dir("/proc")
            .expect("/proc")
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| trainer_alive(*pid))
            .filter(|pid| {
                let proc = PathBuf::from(format!("/proc/{pid}"));
                let environ = std::fs::read(proc.join("environ")).unwrap_or_default();
                let in_cluster = environ
                    .split(|b| *b == 0)
                    .any(|v| v == trace_dir.as_bytes());
                let of_attempt = std::fs::read_link(proc.join("cwd")).is_ok_and(|cwd| {
                    cwd.file_name()
                        .is_some_and(|n| n.to_string_lossy().ends_with(&format!("-{attempt}")))
                });
                let namespace_pid = std::fs::read_to_string(proc.join("status"))
                    .unwrap_or_default()
                    .lines()
                    .find_map(|l| l.strip_prefix("NSpid:"))
                    .and_then(|pids| pids.split_whitespace().last()?.parse::<u32>().ok());
                in_cluster && of_attempt && namespace_pid.is_some_and(|p| inner.contains(&p))
            })
            .collect();
        found.sort_unstable();
        found
    }

    pub async fn redis(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.redis.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .expect("redis")
    }
}

/// Serialises the tests of one binary under `cargo test`, which runs them as
/// threads of one process: multi-process tests should not compete for the
/// machine's two cores there. `make test` runs each test in a process of
/// its own under cargo-nextest, where this lock holds nothing and
/// `.config/nextest.toml` decides how many run at once.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Milliseconds since the epoch, as the master records times.
pub fn now_ms() -> i64 {
    trainyard_proto::now_ms()
}

/// One line of a test trainer's trace file.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceEvent {
    pub attempt: u32,
    /// `start`, `alive` (after each episode) or `end`.
    pub event: String,
    /// The episode done (for `start`, the one resumed from).
    pub episode: u64,
    /// Unix time, in seconds.
    pub t: f64,
    /// The trainer's process.
    pub pid: u32,
}

/// Reads a trace file (empty if it does not exist yet).
pub fn read_trace(path: &Path) -> Vec<TraceEvent> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|v| TraceEvent {
            attempt: v["attempt"].as_u64().unwrap_or(0) as u32,
            event: v["event"].as_str().unwrap_or("").to_string(),
            episode: v["episode"].as_u64().unwrap_or(0),
            t: v["t"].as_f64().unwrap_or(0.0),
            pid: v["pid"].as_u64().unwrap_or(0) as u32,
        })
        .collect()
}

/// Whether the trace holds `event` of `attempt`.
pub fn traced(events: &[TraceEvent], attempt: u32, event: &str) -> bool {
    events
        .iter()
        .any(|e| e.attempt == attempt && e.event == event)
}

/// The time of the last traced event of `attempt` (0 if none).
pub fn last_seen(events: &[TraceEvent], attempt: u32) -> f64 {
    events
        .iter()
        .filter(|e| e.attempt == attempt)
        .map(|e| e.t)
        .fold(0.0, f64::max)
}

/// The processes that traced `attempt`.
pub fn trainer_pids(events: &[TraceEvent], attempt: u32) -> Vec<u32> {
    let mut pids: Vec<u32> = events
        .iter()
        .filter(|e| e.attempt == attempt && e.pid != 0)
        .map(|e| e.pid)
        .collect();
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// Whether `pid` is a test trainer that still runs: its `/proc` entry
/// exists, it is not a zombie, and it runs `hooks.py` (so a reused pid is
/// not mistaken for it).
pub fn trainer_alive(pid: u32) -> bool {
    let proc = PathBuf::from(format!("/proc/{pid}"));
    let Ok(stat) = std::fs::read_to_string(proc.join("stat")) else {
        return false;
    };
    let state = stat
        .rsplit_once(") ")
        .and_then(|(_, rest)| rest.chars().next());
    let cmdline = std::fs::read(proc.join("cmdline")).unwrap_or_default();
    let runs_hooks = cmdline.split(|b| *b == 0).any(|arg| arg == b"hooks.py");
    runs_hooks && !matches!(state, Some('Z' | 'X') | None)
}

/// Asserts that no two attempts' traced lifetimes overlap.
pub fn assert_attempts_never_overlapped(trace: &[TraceEvent]) {
    let mut spans: std::collections::BTreeMap<u32, (f64, f64)> = Default::default();
    for e in trace {
        let span = spans.entry(e.attempt).or_insert((e.t, e.t));
        span.0 = span.0.min(e.t);
        span.1 = span.1.max(e.t);
    }
    let spans: Vec<_> = spans.into_iter().collect();
    for pair in spans.windows(2) {
        let ((a, (_, a_end)), (b, (b_start, _))) = (pair[0], pair[1]);
        assert!(
            a_end < b_start,
            "attempt {a} was still alive at {a_end:.3} after attempt {b} started at {b_start:.3}"
        );
    }
}

impl TestCluster {
    /// Writes the cluster's settings, changed by `configure`, to a config
    /// file of its own (`<dir>/<file>`), for a process that must differ
    /// from the others (another adapter, other devices, other ports).
    pub fn config_variant(
        &self,
        file: &str,
        configure: impl FnOnce(&mut trainyard::settings::Settings),
    ) -> PathBuf {
        let mut settings = self.cluster.settings.clone();
        configure(&mut settings);
        let path = self.cluster.dir.join(file);
        std::fs::write(&path, toml::to_string(&settings).expect("settings as TOML"))
            .expect("config file");
        path
    }

    /// Starts `trainyard --config <config> <args…>` as a process named
    /// `name` (its log is `<dir>/<name>.log`).
    pub fn spawn_with_config(&self, name: &str, config: &Path, args: &[&str]) -> Process {
        let mut full = vec!["--config".to_string(), config.display().to_string()];
        full.extend(args.iter().map(|a| a.to_string()));
        Process::spawn(
            name,
            &self.cluster.bins.trainyard,
            &full,
            &self.cluster.env,
            &self.cluster.dir.join(format!("{name}.log")),
        )
        .unwrap_or_else(|e| panic!("cannot start {name}: {e:#}"))
    }

    /// Starts a host with id `id` whose settings `configure` changes; the
    /// process is named `name`, so two processes may claim one id.
    pub fn start_host_with(
        &mut self,
        name: &str,
        id: &str,
        configure: impl FnOnce(&mut trainyard::settings::Settings),
    ) -> usize {
        let config = self.config_variant(&format!("{name}.toml"), configure);
        let work = self.cluster.dir.join("work").join(name);
        let work = work.display().to_string();
        let process =
            self.spawn_with_config(name, &config, &["host", "--id", id, "--work-dir", &work]);
        self.hosts.push(process);
        self.hosts.len() - 1
    }

    /// The cluster's own API token (an admin's).
    pub fn admin_token(&self) -> String {
        std::fs::read_to_string(&self.cluster.settings.api.token_file)
            .expect("the API token")
            .trim()
            .to_string()
    }

    /// `GET url` with the admin's token, for tests that read the API raw.
    pub fn http_get(&self, url: &str) -> reqwest::RequestBuilder {
        reqwest::Client::new()
            .get(url)
            .bearer_auth(self.admin_token())
    }

    /// Runs a `trainyard` command against this cluster and returns what
    /// it printed on stdout (panics if it fails).
    pub fn cli(&self, args: &[&str]) -> String {
        let out = std::process::Command::new(&self.cluster.bins.trainyard)
            .arg("--config")
            .arg(&self.cluster.config_path)
            .args(args)
            .output()
            .expect("run trainyard");
        assert!(
            out.status.success(),
            "trainyard {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits until `check` holds for the hosts the master reports.
    pub async fn wait_for_hosts_where(
        &self,
        what: &str,
        check: impl Fn(&[trainyard::client::HostView]) -> bool,
    ) -> Vec<trainyard::client::HostView> {
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(hosts) = self.client().hosts().await {
                if check(&hosts) {
                    return hosts;
                }
            }
            if Instant::now() > until {
                panic!("hosts: {what} not seen within 60 s\n{}", self.all_logs());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl TestCluster {
    /// Asks the cluster's hosts for the trainer's requirements
    /// (`adapters/cartpole/requirements.txt`) in the adapter's host entry: each
    /// host builds the environment with the `uv` of `make python-tools` from the
    /// package index, caches it, and runs the trainer's `python3` from it.
    pub fn provide_cartpole_python(&mut self) {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let listed = std::fs::read_to_string(root.join("adapters/cartpole/requirements.txt"))
            .expect("adapters/cartpole/requirements.txt");
        let requirements = trainyard_host::python_env::PythonRequirements::from_lines(&listed);
        let s = &mut self.cluster.settings;
        s.host.python.uv = trainyard_testkit::uv().display().to_string();
        for entry in &mut s.host.adapters {
            entry.python = Some(requirements.clone());
        }
    }

    /// Every progress point of a task that has ended, oldest first: all
    /// stored by then, the last one its latest progress.
    pub async fn progress_points(&self, done: &TaskDetail) -> Vec<serde_json::Value> {
        assert!(done.task.status.is_terminal(), "{:?}", done.task.status);
        let latest = done.task.progress.as_ref().and_then(|p| p.episode);
        let url = format!(
            "{}/v1/tasks/{}/progress?limit=10000",
            self.cluster.settings.api.url, done.task.id
        );
        let response = self.http_get(&url).send().await.unwrap();
        let page: serde_json::Value = response.json().await.unwrap();
        let points = page["points"].as_array().cloned().unwrap_or_default();
        assert_eq!(
            points.last().and_then(|p| p["episode"].as_u64()),
            latest,
            "the latest progress of an ended task is stored: {page}"
        );
        points
    }
}

/// A metric of a completed task's result.
pub fn metric(done: &TaskDetail, name: &str) -> f64 {
    done.task
        .result
        .as_ref()
        .and_then(|r| r.metrics.get(name).copied())
        .unwrap_or_else(|| panic!("no {name} metric in {:#?}", done.task.result))
}

/// What a command printed on its standard output.
pub fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A command's status and both its outputs, for a failure message.
pub fn explain(out: &std::process::Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        stdout(out),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Waits until `process` has exited, and returns its log.
pub async fn exited(process: &mut Process, timeout: Duration) -> String {
    let until = Instant::now() + timeout;
    while process.running() {
        assert!(
            Instant::now() < until,
            "{} still runs after {timeout:?}:\n{}",
            process.name,
            process.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    process.log_text()
}

/// Waits until the log of `process` contains `text`.
pub async fn logged(process: &Process, text: &str, timeout: Duration) -> String {
    let until = Instant::now() + timeout;
    loop {
        let log = process.log_text();
        if log.contains(text) {
            return log;
        }
        assert!(
            Instant::now() < until,
            "{} did not log {text:?} within {timeout:?}:\n{log}",
            process.name
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The verdict a completed `script-trainer` task's script wrote to
/// `verdict.txt` (the result's summary), as JSON.
pub fn verdict(detail: &TaskDetail) -> serde_json::Value {
    let summary = detail
        .task
        .result
        .as_ref()
        .and_then(|r| r.summary.clone())
        .unwrap_or_default();
    serde_json::from_str(&summary).unwrap_or_else(|e| panic!("verdict {summary:?}: {e}"))
}

/// Who leads, as one master's `/v1/health` says.
#[derive(Debug, Clone, PartialEq)]
pub struct Leadership {
    pub role: String,
    pub term: Option<i64>,
    pub leader_api: Option<String>,
}

/// The `/v1/health` body of the master whose API is at `api`, or `None`
/// if it does not answer within 2 s.
pub async fn health(api: &str) -> Option<serde_json::Value> {
    reqwest::Client::new()
        .get(format!("{api}/v1/health"))
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()
}

/// The `leadership` object of the master whose API is at `api`, or `None`
/// if it does not answer within 2 s.
pub async fn leadership(api: &str) -> Option<Leadership> {
    let body = health(api).await?;
    let l = &body["leadership"];
    Some(Leadership {
        role: l["role"].as_str()?.to_string(),
        term: l["term"].as_i64(),
        leader_api: l["leader"]["api_url"].as_str().map(str::to_string),
    })
}

/// Standby masters beside a cluster's own, on PostgreSQL.
pub struct Standbys {
    pub processes: Vec<Process>,
    /// Every master's API base URL, the cluster's own first.
    pub apis: Vec<String>,
    ports: Vec<(u16, u16)>,
}

impl TestCluster {
    /// Before its master starts: makes the hosts and the API client of
    /// this cluster know its own master and `extra` more, with a leader
    /// lease of `ttl`, and writes the config. The standbys reach the
    /// database at `direct_url` (the cluster's may go through a relay).
    pub fn plan_standbys(&mut self, extra: usize, ttl: Duration) -> Standbys {
        let own = &self.cluster.settings.master;
        let mut ports = vec![(own.hosts_listen.port(), own.api_listen.port())];
        for _ in 0..extra {
            ports.push((
                trainyard_testkit::free_port(),
                trainyard_testkit::free_port(),
            ));
        }
        let apis: Vec<String> = ports
            .iter()
            .map(|(_, a)| format!("http://127.0.0.1:{a}"))
            .collect();
        let s = &mut self.cluster.settings;
        s.master.leader_ttl = ttl;
        s.host.master = ports
            .iter()
            .map(|(h, _)| format!("127.0.0.1:{h}"))
            .collect::<Vec<_>>()
            .join(",");
        s.api.url = apis.join(",");
        self.cluster.write_config().expect("config");
        Standbys {
            processes: vec![],
            apis,
            ports,
        }
    }

    /// Starts the planned standbys (`master-2`, `master-3`, …) on the
    /// database at `database_url`, once the cluster's own master leads (it
    /// answers before it has won its first election), and waits until each
    /// stands by.
    pub async fn start_standbys(&self, standbys: &mut Standbys, database_url: &str) {
        let until = Instant::now() + Duration::from_secs(60);
        while leadership(&standbys.apis[0])
            .await
            .is_none_or(|l| l.role != "leader")
        {
            assert!(
                Instant::now() < until,
                "the cluster's master did not lead within 60 s:\n{}",
                self.log("master")
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for (i, (h, a)) in standbys.ports.iter().enumerate().skip(1) {
            let name = format!("master-{}", i + 1);
            let config = self.config_variant(&format!("{name}.toml"), |s| {
                s.master.hosts_listen = format!("127.0.0.1:{h}").parse().unwrap();
                s.master.api_listen = format!("127.0.0.1:{a}").parse().unwrap();
                s.database_url = database_url.to_string();
            });
            standbys
                .processes
                .push(self.spawn_with_config(&name, &config, &["master"]));
        }
        for standby in &standbys.processes {
            logged(
                standby,
                "standing by: another master leads",
                Duration::from_secs(60),
            )
            .await;
        }
    }
}

impl Standbys {
    /// Which master leads now (0: the cluster's own), once one says so.
    pub async fn leader(&self, timeout: Duration) -> Option<usize> {
        let until = Instant::now() + timeout;
        while Instant::now() < until {
            for (i, api) in self.apis.iter().enumerate() {
                if leadership(api).await.is_some_and(|l| l.role == "leader") {
                    return Some(i);
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    }

    /// The last lines of every standby's log.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for s in &self.processes {
            let log = s.log_text();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            out.push_str(&format!("\n--- {} (last lines) ---\n", s.name));
            for line in tail.into_iter().rev() {
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }
}

/// A directory to put first on a host's `PATH` whose `python3` the trainers'
/// user (`nobody`) cannot run, and the directory that stops it: root's
/// pyenv shims when this machine has them behind a root-only home (the
/// case seen in the field), else a script in a fresh directory only root
/// may enter under `scratch`. Says which on stderr, so neither is silent.
pub fn unreachable_python(scratch: &Path) -> (PathBuf, PathBuf) {
    let shims = Path::new("/root/.pyenv/shims");
    let root_closed = std::fs::metadata("/root").is_ok_and(|m| m.permissions().mode() & 0o001 == 0);
    if shims.join("python3").is_file() && root_closed {
        eprintln!("unreachable python3: root's pyenv shim {}", shims.display());
        return (shims.to_path_buf(), PathBuf::from("/root"));
    }
    let closed = scratch.join("closed-bin");
    std::fs::create_dir_all(&closed).expect("closed-bin");
    let python = closed.join("python3");
    std::fs::write(&python, "#!/bin/sh\nexec /usr/bin/python3 \"$@\"\n").expect("python3 script");
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).expect("mode");
    std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).expect("mode");
    eprintln!(
        "unreachable python3: no pyenv shim behind a closed /root here; using {}",
        python.display()
    );
    (closed.clone(), closed)
}

/// Runs each `async fn name(backend: &str)` named as a test on SQLite and
/// on PostgreSQL, as `sqlite::name` and `postgres::name`.
macro_rules! on_both_backends {
    ($($test:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread")]
                async fn $test() {
                    super::$test("sqlite").await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread")]
                async fn $test() {
                    super::$test("postgres").await;
                }
            )*
        }
    };
}
