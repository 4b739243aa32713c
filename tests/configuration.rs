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

mod common;

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

#[test]
fn every_layer_overrides_the_one_below_for_plain_nested_list_and_duration_keys() {
    let dir = tempfile::tempdir().unwrap();
    let here = dir.path();

    // No file, no variables: the defaults.
    let config = effective(here, &[], &[]);
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

    // The file.
    let file = here.join("trainyard.toml");
    std::fs::write(
        &file,
        "redis_url = \"redis://file:1\"\n\
         [master]\napi_listen = \"127.0.0.1:1001\"\nknown_adapters = [\"from-file\"]\n\
         [timers]\nlease_ttl = \"10s\"\n",
    )
    .unwrap();
    let file_arg = file.display().to_string();
    let file_name = Some(file_arg.as_str());
    let config = effective(here, &[], &["--config", &file_arg]);
    assert_layer(
        &config,
        [
            json!("redis://file:1"),
            json!("127.0.0.1:1001"),
            json!(["from-file"]),
            json!("10s"),
        ],
        "file",
        [file_name; 4],
    );

    // The environment, over the file (named by TRAINYARD_CONFIG this time).
    let env = [
        ("TRAINYARD_CONFIG", file_arg.as_str()),
        ("TRAINYARD_REDIS_URL", "redis://env:2"),
        ("TRAINYARD_MASTER__API_LISTEN", "127.0.0.1:2002"),
        (
            "TRAINYARD_MASTER__KNOWN_ADAPTERS",
            "[python-trainer, \"with,comma\"]",
        ),
        ("TRAINYARD_TIMERS__LEASE_TTL", "30s"),
    ];
    let config = effective(here, &env, &[]);
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
    // Keys no layer above the file set still come from the file or the defaults.
    assert_eq!(config["master.hosts_listen"]["source"], "default");

    // Flags, over the environment.
    let config = effective(
        here,
        &env,
        &[
            "--set",
            "redis_url=redis://flag:3",
            "--set",
            "master.api_listen=127.0.0.1:3003",
            "--set",
            "master.known_adapters=[noop]",
            "--set",
            "timers.lease_ttl=45s",
        ],
    );
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

fn owned(env: &[(&str, String)]) -> Vec<(String, String)> {
    env.iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

#[tokio::test]
async fn a_master_host_and_cli_configured_by_the_environment_alone_follow_it() {
    let _serial = serial();
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let here = dir.path().canonicalize().unwrap();
    let (api_port, hosts_port) = (free_port(), free_port());
    let api_url = format!("http://127.0.0.1:{api_port}");
    let at = |name: &str| here.join(name).display().to_string();
    // What master, host and CLI share: the Redis, the secret and token files.
    let shared = [
        ("TRAINYARD_REDIS_URL", redis.url()),
        ("TRAINYARD_CLUSTER__SECRET_FILE", at("cluster-secret")),
        ("TRAINYARD_API__TOKEN_FILE", at("api-token")),
    ];
    let mut master_env = owned(&shared);
    master_env.extend(owned(&[
        ("TRAINYARD_DATA_DIR", at("data")),
        (
            "TRAINYARD_DATABASE_URL",
            format!("sqlite://{}", at("tasks.db")),
        ),
        (
            "TRAINYARD_MASTER__API_LISTEN",
            format!("127.0.0.1:{api_port}"),
        ),
        (
            "TRAINYARD_MASTER__HOSTS_LISTEN",
            format!("127.0.0.1:{hosts_port}"),
        ),
    ]));
    let bins = binaries();
    let master = Process::spawn(
        "master",
        &bins.trainyard,
        &["master".into()],
        &master_env,
        &here.join("master.log"),
    )
    .unwrap();

    // It listens where the environment says...
    let client = ApiClient::new(&api_url, None).unwrap();
    let health = wait_until(
        "the master's API on the port of TRAINYARD_MASTER__API_LISTEN",
        &[&master],
        async || client.health().await.ok(),
    )
    .await;
    assert_eq!(health["redis"], "ok", "{health}");
    // ... and uses the Redis it names: the master wrote its epoch there.
    let mut con = redis::Client::open(redis.url())
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

    let work = here.join("work");
    let mut host_env = owned(&shared);
    host_env.extend(owned(&[
        ("TRAINYARD_HOST__ID", "env-host".to_string()),
        ("TRAINYARD_HOST__MASTER", format!("127.0.0.1:{hosts_port}")),
        ("TRAINYARD_HOST__SLOTS", "3".to_string()),
        ("TRAINYARD_HOST__KEEP_WORKSPACES", "true".to_string()),
        ("TRAINYARD_HOST__WORK_DIR", work.display().to_string()),
        ("TRAINYARD_HOST__CACHE_DIR", at("cache")),
        (
            "TRAINYARD_HOST__SUPERVISOR",
            bins.supervisor.display().to_string(),
        ),
        (
            "TRAINYARD_HOST__ADAPTERS",
            format!(
                "[{{path = \"{}\", programs = [\"true\"]}}]",
                adapter("noop").display()
            ),
        ),
    ]));
    let host = Process::spawn(
        "env-host",
        &bins.trainyard,
        &["host".into()],
        &host_env,
        &here.join("host.log"),
    )
    .unwrap();

    // The CLI goes where TRAINYARD_API__URL says (there is no config file
    // here, and the default URL has no master) and sees 3 slots.
    let cli_env = [
        ("TRAINYARD_API__URL", api_url.as_str()),
        ("TRAINYARD_API__TOKEN_FILE", &at("api-token")),
    ];
    let hosts = wait_until(
        "env-host with 3 slots in `trainyard hosts`",
        &[&master, &host],
        async || {
            let out = trainyard(&here, &cli_env, &["hosts", "--json"]);
            let hosts: Value = serde_json::from_slice(&out.stdout).ok()?;
            let host = hosts
                .as_array()?
                .iter()
                .find(|h| h["id"] == "env-host" && h["connected"] == true)?;
            Some(host.clone())
        },
    )
    .await;
    assert_eq!(hosts["slots"], 3, "{hosts}");

    // A task submitted through the CLI runs, and its workspace is kept.
    let out = trainyard(&here, &cli_env, &["submit", "--adapter", "noop"]);
    assert!(
        out.status.success(),
        "submit: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id: u64 = String::from_utf8_lossy(&out.stdout)
        .split(|c: char| !c.is_ascii_digit())
        .find(|w| !w.is_empty())
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no task id in {:?}", String::from_utf8_lossy(&out.stdout)));
    let task = wait_until("the task COMPLETED", &[&master, &host], async || {
        client
            .task(id)
            .await
            .ok()
            .filter(|d| d.task.status.is_terminal())
    })
    .await;
    assert_eq!(task.task.status, TaskStatus::Completed, "{:?}", task.task);
    let kept: PathBuf = work.join(format!("{id}-1"));
    assert!(
        kept.is_dir(),
        "TRAINYARD_HOST__KEEP_WORKSPACES=true, yet {} is gone",
        kept.display()
    );
    drop(host);
    drop(master);
}

#[tokio::test]
async fn a_flag_wins_over_the_environment_for_a_real_master() {
    let _serial = serial();
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let here = dir.path().canonicalize().unwrap();
    let (env_port, flag_port) = (free_port(), free_port());
    let at = |name: &str| here.join(name).display().to_string();
    let env = owned(&[
        ("TRAINYARD_REDIS_URL", redis.url()),
        ("TRAINYARD_DATA_DIR", at("data")),
        (
            "TRAINYARD_DATABASE_URL",
            format!("sqlite://{}", at("tasks.db")),
        ),
        ("TRAINYARD_CLUSTER__SECRET_FILE", at("cluster-secret")),
        ("TRAINYARD_API__TOKEN_FILE", at("api-token")),
        (
            "TRAINYARD_MASTER__API_LISTEN",
            format!("127.0.0.1:{env_port}"),
        ),
        (
            "TRAINYARD_MASTER__HOSTS_LISTEN",
            format!("127.0.0.1:{}", free_port()),
        ),
    ]);
    let args = [
        "master".to_string(),
        "--api-listen".into(),
        format!("127.0.0.1:{flag_port}"),
    ];
    let master = Process::spawn(
        "master",
        &binaries().trainyard,
        &args,
        &env,
        &here.join("master.log"),
    )
    .unwrap();
    let client = ApiClient::new(&format!("http://127.0.0.1:{flag_port}"), None).unwrap();
    wait_until(
        "the master on the --api-listen port",
        &[&master],
        async || client.health().await.ok(),
    )
    .await;
    let env_client = ApiClient::new(&format!("http://127.0.0.1:{env_port}"), None).unwrap();
    assert!(
        env_client.health().await.is_err(),
        "the master also listens on the environment's port"
    );
    drop(master);
}
