//! Shared harness of the multi-process tests: a private Redis, a fresh
//! database (SQLite or PostgreSQL), a real master and real hosts started from
//! the built binaries, fast timers, and helpers that wait for what a user
//! would look at (task status in the API, keys in Redis, processes gone).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use trainyard::client::ApiClient;
use trainyard::cluster::{Binaries, Cluster, Process};
use trainyard_master::model::{TaskDetail, TaskStatus};
use trainyard_proto::Timers;
use trainyard_testkit::{Database, RedisServer};

pub use trainyard::cluster::fast_timers;

/// The adapters built by `make -C adapters build`.
pub fn adapter(name: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("adapters/dist")
        .join(format!("{name}.wasm"));
    assert!(
        path.exists(),
        "{} is missing: run `make -C adapters build` (make test does)",
        path.display()
    );
    path
}

pub fn binaries() -> Binaries {
    Binaries::at(env!("CARGO_BIN_EXE_trainyard"))
        .expect("trainyard binaries (make test builds them)")
}

/// A running test cluster. Everything it started dies with it.
pub struct TestCluster {
    pub cluster: Cluster,
    pub redis: RedisServer,
    pub db: Database,
    pub master: Option<Process>,
    pub hosts: Vec<Process>,
    pub client: Option<ApiClient>,
    _dir: tempfile::TempDir,
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
            timers: fast_timers(),
            slots: 1,
            adapters: vec![("python-trainer", vec!["python3"]), ("noop", vec!["true"])],
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
        cluster.settings.timers = setup.timers;
        cluster.settings.host.slots = setup.slots;
        cluster.settings.host.adapters = setup
            .adapters
            .iter()
            .map(|(name, programs)| trainyard::settings::AdapterEntry {
                path: adapter(name),
                programs: programs.iter().map(|p| p.to_string()).collect(),
            })
            .collect();
        cluster.settings.host.progress_interval = Duration::from_millis(50);
        cluster.env.push((
            "RUST_LOG".into(),
            "info,trainyard_host=debug,trainyard_master=debug".into(),
        ));
        (setup.configure)(&mut cluster.settings);
        cluster.write_config().expect("config");
        TestCluster {
            cluster,
            redis,
            db,
            master: None,
            hosts: vec![],
            client: None,
            _dir: dir,
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

    pub async fn redis(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.redis.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .expect("redis")
    }
}

/// Serialises the tests of one binary: multi-process tests with sub-second
/// leases should not compete for the machine's two cores.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Milliseconds since the epoch, as the master records times.
pub fn now_ms() -> i64 {
    trainyard_proto::now_ms()
}

/// Reads a trainer trace file: `(attempt, event, time)` per line.
pub fn read_trace(path: &Path) -> Vec<(u32, String, f64)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|v| {
            (
                v["attempt"].as_u64().unwrap_or(0) as u32,
                v["event"].as_str().unwrap_or("").to_string(),
                v["t"].as_f64().unwrap_or(0.0),
            )
        })
        .collect()
}

/// Asserts that no two attempts' traced lifetimes overlap.
pub fn assert_attempts_never_overlapped(trace: &[(u32, String, f64)]) {
    let mut spans: std::collections::BTreeMap<u32, (f64, f64)> = Default::default();
    for (attempt, _, t) in trace {
        let span = spans.entry(*attempt).or_insert((*t, *t));
        span.0 = span.0.min(*t);
        span.1 = span.1.max(*t);
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
