//! Configuration through the real `trainyard` binary, as an operator sets
//! it: defaults < config file < `TRAINYARD_*` environment < flags, for a
//! top-level key, a nested key, a list and a duration (read back with
//! `trainyard config --json`); unknown and invalid variables refused by
//! name; and real processes configured by the environment alone — a master
//! listening where the environment says and using its Redis, the CLI
//! following `TRAINYARD_API__URL`, a host advertising
//! `TRAINYARD_HOST__SLOTS` and keeping its workspaces.

// `serial()` holds a std mutex across each multi-process test on purpose.
#![allow(clippy::await_holding_lock)]

use crate::common;

use common::{adapter, binaries, serial};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};
use trainyard::client::ApiClient;
use trainyard::cluster::Process;
use trainyard_master::model::TaskStatus;
use trainyard_testkit::{free_port, RedisServer};

/// Runs `trainyard args…` in `dir` with exactly the `TRAINYARD_` variables
/// given (the test runner's own are removed).
fn trainyard(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut command = Command::new(binaries().trainyard);
    for (name, _) in std::env::vars() {
        if name.starts_with("TRAINYARD_") {
            command.env_remove(name);
        }
    }
    command
        .args(args)
        .envs(env.iter().copied())
        .current_dir(dir)
        .output()
        .expect("cannot run trainyard")
}

/// `trainyard config --json`, parsed; panics with stderr on failure.
fn effective(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["config", "--json"]);
    let out = trainyard(dir, env, &all);
    assert!(
        out.status.success(),
        "trainyard config failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("trainyard config --json prints JSON")
}

/// The four keys every layer is tried on, and the value each layer gives them.
const KEYS: [&str; 4] = [
    "redis_url",
    "master.api_listen",
    "master.known_adapters",
    "timers.lease_ttl",
];

fn assert_layer(config: &Value, values: [Value; 4], source: &str, from: [Option<&str>; 4]) {
    for ((key, value), from) in KEYS.iter().zip(values).zip(from) {
        let entry = &config[*key];
        assert_eq!(entry["value"], value, "{key}: {entry}");
        assert_eq!(entry["source"], source, "{key}: {entry}");
        assert_eq!(entry["from"].as_str(), from, "{key}: {entry}");
    }
}

/// A config file setting the four keys, in a fresh directory with no
/// `config.toml`; returns the directory and the file's path as given.
fn with_file() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("trainyard.toml");
    std::fs::write(
        &file,
        "redis_url = \"redis://file:1\"\n\
         [master]\napi_listen = \"127.0.0.1:1001\"\nknown_adapters = [\"from-file\"]\n\
         [timers]\nlease_ttl = \"10s\"\n",
    )
    .unwrap();
    let file = file.display().to_string();
    (dir, file)
}

/// Variables setting the four keys (and naming the file by TRAINYARD_CONFIG).
fn environment(file: &str) -> [(&str, &str); 5] {
    [
        ("TRAINYARD_CONFIG", file),
        ("TRAINYARD_REDIS_URL", "redis://env:2"),
        ("TRAINYARD_MASTER__API_LISTEN", "127.0.0.1:2002"),
        (
            "TRAINYARD_MASTER__KNOWN_ADAPTERS",
            "[python-trainer, \"with,comma\"]",
        ),
        ("TRAINYARD_TIMERS__LEASE_TTL", "30s"),
    ]
}

#[test]
fn with_nothing_set_every_key_has_its_default() {
    let dir = tempfile::tempdir().unwrap();
    let config = effective(dir.path(), &[], &[]);
    assert_layer(
        &config,
        [
            json!("redis://127.0.0.1:6379"),
            json!("127.0.0.1:7701"),
            json!([]),
            json!("2m"),
        ],
        "default",
        [None; 4],
    );
}

#[test]
fn the_file_overrides_the_defaults() {
    let (dir, file) = with_file();
    let config = effective(dir.path(), &[], &["--config", &file]);
    assert_layer(
        &config,
        [
            json!("redis://file:1"),
            json!("127.0.0.1:1001"),
            json!(["from-file"]),
            json!("10s"),
        ],
        "file",
        [Some(file.as_str()); 4],
    );
}

#[test]
fn the_environment_overrides_the_file() {
    let (dir, file) = with_file();
    let config = effective(dir.path(), &environment(&file), &[]);
    assert_layer(
        &config,
        [
            json!("redis://env:2"),
            json!("127.0.0.1:2002"),
            json!(["python-trainer", "with,comma"]),
            json!("30s"),
        ],
        "environment",
        [
            Some("TRAINYARD_REDIS_URL"),
            Some("TRAINYARD_MASTER__API_LISTEN"),
            Some("TRAINYARD_MASTER__KNOWN_ADAPTERS"),
            Some("TRAINYARD_TIMERS__LEASE_TTL"),
        ],
    );
    // A key only the defaults set still comes from them.
    assert_eq!(config["master.hosts_listen"]["source"], "default");
}

#[test]
fn flags_override_the_environment() {
    let (dir, file) = with_file();
    let flags = [
        "--set",
        "redis_url=redis://flag:3",
        "--set",
        "master.api_listen=127.0.0.1:3003",
        "--set",
        "master.known_adapters=[noop]",
        "--set",
        "timers.lease_ttl=45s",
    ];
    let config = effective(dir.path(), &environment(&file), &flags);
    assert_layer(
        &config,
        [
            json!("redis://flag:3"),
            json!("127.0.0.1:3003"),
            json!(["noop"]),
            json!("45s"),
        ],
        "flag",
        [
            Some("--set redis_url"),
            Some("--set master.api_listen"),
            Some("--set master.known_adapters"),
            Some("--set timers.lease_ttl"),
        ],
    );
}

#[test]
fn an_unknown_variable_is_an_error_naming_it_for_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let typo = [("TRAINYARD_MASTER__API_LISTN", "0.0.0.0:7701")];
    for command in [&["config"][..], &["master"], &["tasks"]] {
        let out = trainyard(dir.path(), &typo, command);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{command:?} accepted a typo");
        assert!(
            stderr.contains(
                "unknown environment variable TRAINYARD_MASTER__API_LISTN: no key master.api_listn"
            ),
            "{command:?}: {stderr}"
        );
    }
    // The variables that are not configuration are no error.
    let out = trainyard(
        dir.path(),
        &[
            ("TRAINYARD_TEST_REDIS_URL", "redis://x"),
            ("TRAINYARD_CHAOS_SEED", "1"),
        ],
        &["config"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn an_invalid_value_names_its_variable_and_a_list_must_be_in_brackets() {
    let dir = tempfile::tempdir().unwrap();
    let out = trainyard(
        dir.path(),
        &[("TRAINYARD_HOST__SLOTS", "many")],
        &["config"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("TRAINYARD_HOST__SLOTS"), "{stderr}");

    let out = trainyard(
        dir.path(),
        &[("TRAINYARD_HOST__PASS_ENV", "PATH,HOME")],
        &["config"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("TRAINYARD_HOST__PASS_ENV") && stderr.contains("brackets"),
        "{stderr}"
    );
}

#[test]
fn an_optional_key_without_a_default_is_read_as_its_type_needs() {
    let dir = tempfile::tempdir().unwrap();
    let config = effective(
        dir.path(),
        &[
            ("TRAINYARD_HOST__RESOURCES__CPUS", "0.5"),
            ("TRAINYARD_HOST__RESOURCES__MEMORY", "8 GiB"),
            ("TRAINYARD_HOST__CONTAINMENT__LIMITS__CPUS", "1.5"),
            ("TRAINYARD_HOST__CONTAINMENT__LIMITS__PIDS", "64"),
            ("TRAINYARD_HOST__ID", "0042"),
        ],
        &[],
    );
    let value = |key: &str| config[key]["value"].clone();
    assert_eq!(value("host.resources.cpus"), json!(0.5));
    assert_eq!(value("host.resources.memory"), json!(8u64 << 30));
    assert_eq!(value("host.containment.limits.cpus"), json!(1.5));
    assert_eq!(value("host.containment.limits.pids"), json!(64));
    // A text key keeps what was written, leading zeros included.
    assert_eq!(value("host.id"), json!("0042"));
}

#[test]
fn trainyard_config_never_prints_a_secret() {
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("TRAINYARD_CLUSTER__SECRET", "cluster-secret-0123456789"),
        ("TRAINYARD_API__TOKEN", "api-token-0123456789"),
        (
            "TRAINYARD_REDIS_URL",
            "redis://:redis-password@cache:6379/0",
        ),
        (
            "TRAINYARD_DATABASE_URL",
            "postgres://app:db-password@db/trainyard",
        ),
    ];
    for format in [&["config"][..], &["config", "--json"]] {
        let out = trainyard(dir.path(), &env, format);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        for (_, secret) in env {
            for part in ["0123456789", "redis-password", "db-password"] {
                assert!(
                    !stdout.contains(part),
                    "{format:?} shows part of {secret}:\n{stdout}"
                );
            }
        }
        assert!(stdout.contains("TRAINYARD_API__TOKEN"), "{stdout}");
        assert!(
            stdout.contains("postgres://app:***@db/trainyard"),
            "{stdout}"
        );
    }
}

/// Waits until `check` holds, polling; panics with `what` and the logs.
async fn wait_until<T>(
    what: &str,
    logs: &[&Process],
    mut check: impl AsyncFnMut() -> Option<T>,
) -> T {
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if Instant::now() > until {
            let logs: Vec<String> = logs
                .iter()
                .map(|p| format!("--- {} ---\n{}", p.name, p.log_text()))
                .collect();
            panic!("{what} not seen within 60 s\n{}", logs.join("\n"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A directory, a private Redis and two free ports: what the processes of
/// one test are configured with, through their environment alone (there is
/// no config file, and the defaults name neither that Redis nor those ports).
struct Site {
    _dir: tempfile::TempDir,
    here: PathBuf,
    redis: RedisServer,
    api_port: u16,
    hosts_port: u16,
}

impl Site {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let here = dir.path().canonicalize().unwrap();
        Self {
            _dir: dir,
            here,
            redis: RedisServer::start(),
            api_port: free_port(),
            hosts_port: free_port(),
        }
    }

    fn at(&self, name: &str) -> String {
        self.here.join(name).display().to_string()
    }

    fn api_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.api_port)
    }

    /// What master, host and CLI share: the Redis, the secret and token files.
    fn shared_env(&self) -> Vec<(String, String)> {
        vec![
            ("TRAINYARD_REDIS_URL".into(), self.redis.url()),
            (
                "TRAINYARD_CLUSTER__SECRET_FILE".into(),
                self.at("cluster-secret"),
            ),
            ("TRAINYARD_API__TOKEN_FILE".into(), self.at("api-token")),
        ]
    }

    fn start_master(&self, args: &[&str]) -> Process {
        let mut env = self.shared_env();
        env.extend([
            ("TRAINYARD_DATA_DIR".into(), self.at("data")),
            (
                "TRAINYARD_DATABASE_URL".into(),
                format!("sqlite://{}", self.at("tasks.db")),
            ),
            (
                "TRAINYARD_MASTER__API_LISTEN".into(),
                format!("127.0.0.1:{}", self.api_port),
            ),
            (
                "TRAINYARD_MASTER__HOSTS_LISTEN".into(),
                format!("127.0.0.1:{}", self.hosts_port),
            ),
        ]);
        let mut all = vec!["master".to_string()];
        all.extend(args.iter().map(|a| a.to_string()));
        Process::spawn(
            "master",
            &binaries().trainyard,
            &all,
            &env,
            &self.here.join("master.log"),
        )
        .unwrap()
    }

    /// A host carrying the noop adapter, with 3 slots and `extra`.
    fn start_host(&self, extra: &[(&str, &str)]) -> Process {
        let bins = binaries();
        let mut env = self.shared_env();
        env.extend([
            ("TRAINYARD_HOST__ID".into(), "env-host".into()),
            (
                "TRAINYARD_HOST__MASTER".into(),
                format!("127.0.0.1:{}", self.hosts_port),
            ),
            ("TRAINYARD_HOST__SLOTS".into(), "3".into()),
            ("TRAINYARD_HOST__WORK_DIR".into(), self.at("work")),
            ("TRAINYARD_HOST__CACHE_DIR".into(), self.at("cache")),
            (
                "TRAINYARD_HOST__SUPERVISOR".into(),
                bins.supervisor.display().to_string(),
            ),
            (
                "TRAINYARD_HOST__ADAPTERS".into(),
                format!(
                    "[{{path = \"{}\", programs = [\"true\"]}}]",
                    adapter("noop").display()
                ),
            ),
        ]);
        env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        Process::spawn(
            "env-host",
            &bins.trainyard,
            &["host".into()],
            &env,
            &self.here.join("host.log"),
        )
        .unwrap()
    }

    /// `trainyard args…` as an operator's shell runs it: the API's URL and
    /// token file from the environment.
    fn cli(&self, args: &[&str]) -> Output {
        let url = self.api_url();
        let token = self.at("api-token");
        let env = [
            ("TRAINYARD_API__URL", url.as_str()),
            ("TRAINYARD_API__TOKEN_FILE", token.as_str()),
        ];
        trainyard(&self.here, &env, args)
    }

    /// Waits until the master answers on the port of its environment.
    async fn wait_for_master(&self, master: &Process) -> Value {
        let client = ApiClient::new(&self.api_url(), None).unwrap();
        wait_until(
            "the master's API on the port of TRAINYARD_MASTER__API_LISTEN",
            &[master],
            async || client.health().await.ok(),
        )
        .await
    }

    /// Waits until `trainyard hosts` shows env-host connected; returns it.
    async fn wait_for_host(&self, master: &Process, host: &Process) -> Value {
        wait_until(
            "env-host connected in `trainyard hosts`",
            &[master, host],
            async || {
                let out = self.cli(&["hosts", "--json"]);
                let hosts: Value = serde_json::from_slice(&out.stdout).ok()?;
                let host = hosts
                    .as_array()?
                    .iter()
                    .find(|h| h["id"] == "env-host" && h["connected"] == true)?;
                Some(host.clone())
            },
        )
        .await
    }
}

#[tokio::test]
async fn a_master_configured_by_the_environment_listens_there_and_uses_its_redis() {
    let _serial = serial();
    let site = Site::new();
    let master = site.start_master(&[]);
    let health = site.wait_for_master(&master).await;
    assert_eq!(health["redis"], "ok", "{health}");
    // Hosts reach it on the port of TRAINYARD_MASTER__HOSTS_LISTEN.
    assert!(std::net::TcpStream::connect(("127.0.0.1", site.hosts_port)).is_ok());
    // It uses the Redis of TRAINYARD_REDIS_URL: its epoch is there.
    let mut con = redis::Client::open(site.redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let epoch: Option<String> = redis::cmd("GET")
        .arg("trainyard:epoch")
        .query_async(&mut con)
        .await
        .unwrap();
    assert!(
        epoch.is_some(),
        "no epoch in the Redis of TRAINYARD_REDIS_URL"
    );
}

#[tokio::test]
async fn the_cli_follows_trainyard_api_url_to_a_host_with_the_slots_of_its_environment() {
    let _serial = serial();
    let site = Site::new();
    let master = site.start_master(&[]);
    site.wait_for_master(&master).await;
    let host = site.start_host(&[]);
    // No config file here, and the default URL has no master: the CLI
    // reached it through TRAINYARD_API__URL (`GET /v1/hosts`).
    let shown = site.wait_for_host(&master, &host).await;
    assert_eq!(shown["slots"], 3, "TRAINYARD_HOST__SLOTS=3: {shown}");
}

#[tokio::test]
async fn a_host_keeps_its_workspaces_when_its_environment_says_so() {
    let _serial = serial();
    let site = Site::new();
    let master = site.start_master(&[]);
    site.wait_for_master(&master).await;
    let host = site.start_host(&[("TRAINYARD_HOST__KEEP_WORKSPACES", "true")]);
    site.wait_for_host(&master, &host).await;

    let out = site.cli(&["submit", "--adapter", "noop"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "submit: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id: u64 = stdout
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("no task id in {stdout:?}"));
    // Reads need a token: the one the master generated, which the CLI
    // above found through TRAINYARD_API__TOKEN_FILE.
    let token = std::fs::read_to_string(site.at("api-token")).expect("the API token file");
    let client = ApiClient::new(&site.api_url(), Some(token.trim().to_string())).unwrap();
    let task = wait_until("the task's end", &[&master, &host], async || {
        client
            .task(id)
            .await
            .ok()
            .filter(|d| d.task.status.is_terminal())
    })
    .await;
    assert_eq!(task.task.status, TaskStatus::Completed, "{:?}", task.task);
    let kept = site.here.join("work").join(format!("{id}-1"));
    assert!(
        kept.is_dir(),
        "TRAINYARD_HOST__KEEP_WORKSPACES=true, yet {} is gone",
        kept.display()
    );
}

#[tokio::test]
async fn a_flag_wins_over_the_environment_for_a_real_master() {
    let _serial = serial();
    let site = Site::new();
    let flag_port = free_port();
    let master = site.start_master(&["--api-listen", &format!("127.0.0.1:{flag_port}")]);
    let client = ApiClient::new(&format!("http://127.0.0.1:{flag_port}"), None).unwrap();
    wait_until(
        "the master on the --api-listen port",
        &[&master],
        async || client.health().await.ok(),
    )
    .await;
    let env_client = ApiClient::new(&site.api_url(), None).unwrap();
    assert!(
        env_client.health().await.is_err(),
        "the master also listens on the environment's port"
    );
}
