//! `trainyard demo`: the whole path on the embedded defaults. It starts a
//! private Redis (unless `TRAINYARD_REDIS_URL` names one), a master on a
//! fresh SQLite database and two hosts, submits several Q-learning tasks,
//! shows their progress live, prints a final table, and stops everything it
//! started. It exits 0 only if every task completed. While it runs, the
//! master's web dashboard is open at the URL it prints; with `--stay` the
//! cluster stays up after the tasks end, for a look around, until Ctrl-C.
//! With `--cartpole` the hosts also carry the CartPole adapter, with a Python
//! environment built for it ([`provide_cartpole_python`]), and two CartPole
//! tasks run beside the Q-learning ones.

use crate::cli::DemoArgs;
use crate::client::{ApiClient, ClientError, StreamEvent, TaskEvent};
use crate::cluster::{Binaries, Cluster, Process};
use crate::commands::table::{render_final_table, FinalRow};
use anyhow::bail;
use futures::StreamExt;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use trainyard_local_redis::RedisServer;
use trainyard_master::model::TaskStatus;

const HOSTS: [&str; 2] = ["host-1", "host-2"];
/// How many CartPole tasks `--cartpole` adds.
const CARTPOLE_TASKS: usize = 2;
/// uv, where `make python-tools` installs it.
const UV: &str = "target/python-tools/bin/uv";
const CARTPOLE_REQUIREMENTS: &str = "adapters/cartpole/requirements.txt";
/// The whole demo must end within this.
const DEMO_TIMEOUT: Duration = Duration::from_secs(300);

/// The master's event stream, as the demo follows it.
type EventStream = Pin<Box<dyn futures::Stream<Item = Result<StreamEvent, ClientError>> + Send>>;

pub async fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    let bins = Binaries::current()?;
    let adapters = Path::new("adapters/dist");
    let trainer = adapters.join("python-trainer.wasm");
    if !trainer.exists() {
        bail!(
            "{} is missing: run `make demo`, which builds the adapters first",
            trainer.display()
        );
    }
    if which("python3").is_none() {
        bail!("python3 is not on PATH: install the Debian package `python3`");
    }

    let name = run_name(unix_seconds(), std::process::id());
    let dir = PathBuf::from("data").join(&name);
    let (redis_url, _redis) = local_redis()?;
    std::fs::create_dir_all(&dir)?;
    let db = dir.canonicalize()?.join("trainyard.db");
    let database_url = format!("sqlite://{}", db.display());
    let mut cluster = Cluster::new(&dir, bins, &redis_url, &database_url)?;
    cluster.settings.redis_key_prefix = format!("{name}:");
    // A one-person cluster on loopback: its dashboard opens without a token.
    cluster.settings.api.open_reads = true;
    cluster.settings.host.adapters = vec![crate::settings::AdapterEntry::new(
        trainer.canonicalize()?,
        &["python3"],
    )];
    if args.cartpole {
        provide_cartpole_python(&mut cluster, &adapters.join("cartpole.wasm"))?;
    }
    cluster.write_config()?;
    cluster.env.push((
        "RUST_LOG".into(),
        std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
    ));

    println!("Demo directory: {} (database, config, logs)", dir.display());
    let mut processes: Vec<Process> = vec![];
    let outcome = drive(&cluster, &mut processes, &args).await;
    for p in processes.iter_mut().rev() {
        p.stop(Duration::from_secs(10));
    }
    crate::cluster::remove_cgroup_parent(&cluster.settings);
    if !args.keep && outcome.as_ref().is_ok_and(|ok| *ok) {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        println!("Logs kept in {}", dir.display());
    }
    match outcome {
        Ok(true) => {
            println!("Every task COMPLETED.");
            Ok(ExitCode::SUCCESS)
        }
        Ok(false) => {
            println!("Not every task completed; see the logs above.");
            Ok(ExitCode::FAILURE)
        }
        Err(e) => Err(e),
    }
}

async fn drive(
    cluster: &Cluster,
    processes: &mut Vec<Process>,
    args: &DemoArgs,
) -> anyhow::Result<bool> {
    let client = start(cluster, processes).await?;
    // Start following events before submitting, so no change is missed.
    let events = Box::pin(client.events(None).await?);
    let ids = client.submit_batch(&demo_tasks(args)).await?;
    println!("Submitted {} tasks: {:?}\n", ids.len(), ids);
    follow(&client, events, &ids).await?;
    let rows = final_rows(&client, &ids).await?;
    println!("\n{}", render_final_table(&rows));
    if args.stay {
        stay_up(cluster).await?;
    }
    Ok(rows.iter().all(|r| r.status == TaskStatus::Completed))
}

/// Starts the master and the hosts and waits until every host connected.
async fn start(cluster: &Cluster, processes: &mut Vec<Process>) -> anyhow::Result<ApiClient> {
    processes.push(cluster.spawn_master()?);
    let client = cluster.wait_for_master(Duration::from_secs(60)).await?;
    println!("Master up at {}", cluster.settings.api.url);
    println!("Dashboard: {}", dashboard_url(cluster));
    for id in HOSTS {
        processes.push(cluster.spawn_host(id)?);
    }
    cluster
        .wait_for_hosts(&client, HOSTS.len(), Duration::from_secs(60))
        .await?;
    println!("Hosts connected: {}", HOSTS.join(", "));
    Ok(client)
}

/// The demo's submissions: Q-learning tasks over three learning rates, and
/// CartPole tasks when asked for.
fn demo_tasks(args: &DemoArgs) -> Vec<serde_json::Value> {
    let q_learning = (0..args.tasks).map(|i| {
        serde_json::json!({
            "adapter": "python-trainer",
            "name": format!("q-learning seed {i}"),
            "params": {
                "episodes": args.episodes,
                "seed": i,
                "learning_rate": ([0.3, 0.5, 0.7])[i % 3],
                "step_delay_ms": 5,
            },
        })
    });
    let cartpole = (0..if args.cartpole { CARTPOLE_TASKS } else { 0 }).map(|i| {
        serde_json::json!({
            "adapter": "cartpole",
            "name": format!("cartpole seed {i}"),
            "params": {"episodes": 300, "seed": i},
        })
    });
    q_learning.chain(cartpole).collect()
}

/// Prints the tasks' events (progress at most once a second per task) until
/// every one has ended, polling when the stream is quiet or breaks.
async fn follow(client: &ApiClient, mut events: EventStream, ids: &[u64]) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut status: HashMap<u64, TaskStatus> =
        ids.iter().map(|id| (*id, TaskStatus::Pending)).collect();
    let mut last_print: HashMap<u64, Instant> = HashMap::new();
    while status.values().any(|s| !s.is_terminal()) {
        if started.elapsed() > DEMO_TIMEOUT {
            bail!("the demo's tasks did not finish within {DEMO_TIMEOUT:?}");
        }
        let next = tokio::time::timeout(Duration::from_secs(2), events.next()).await;
        match next {
            Ok(Some(Ok(StreamEvent::Task(e)))) if status.contains_key(&e.task) => {
                let at = started.elapsed().as_secs_f64();
                if e.kind != "progress" {
                    status.insert(e.task, e.status);
                    print_change(at, &e);
                } else if last_print
                    .get(&e.task)
                    .is_none_or(|t| t.elapsed() >= Duration::from_secs(1))
                {
                    last_print.insert(e.task, Instant::now());
                    print_progress(at, &e);
                }
            }
            Ok(Some(Ok(_))) => {}
            Ok(Some(Err(e))) => {
                println!("event stream error: {e}; polling instead");
                refresh(client, &mut status).await;
            }
            Ok(None) => {
                events = Box::pin(client.events(None).await?);
                refresh(client, &mut status).await;
            }
            // Quiet for a while: make sure no change was missed.
            Err(_) => refresh(client, &mut status).await,
        }
    }
    Ok(())
}

fn print_progress(at: f64, e: &TaskEvent) {
    if let Some(p) = e.progress.as_ref() {
        println!(
            "[{at:6.1}s] task {:>3}  {:<7} attempt {}  episode {:>4}/{:<4}  return {:>7.3}",
            e.task,
            e.host.as_deref().unwrap_or("-"),
            e.attempt,
            p.episode.unwrap_or(0),
            p.total_episodes.unwrap_or(0),
            p.episode_return.unwrap_or(f64::NAN),
        );
    }
}

fn print_change(at: f64, e: &TaskEvent) {
    println!(
        "[{at:6.1}s] task {:>3}  {:<7} attempt {}  {}{}",
        e.task,
        e.host.as_deref().unwrap_or("-"),
        e.attempt,
        e.status,
        e.error
            .as_deref()
            .map(|m| format!(": {m}"))
            .unwrap_or_default()
    );
}

/// The final table's rows, read from the master.
async fn final_rows(client: &ApiClient, ids: &[u64]) -> anyhow::Result<Vec<FinalRow>> {
    let mut rows = vec![];
    for id in ids {
        let detail = client.task(*id).await?;
        let t = &detail.task;
        let metrics: BTreeMap<String, f64> = t
            .result
            .as_ref()
            .map(|r| r.metrics.clone())
            .unwrap_or_default();
        rows.push(FinalRow {
            task: t.id,
            host: t.host.clone().unwrap_or_else(|| "-".into()),
            attempt: t.attempt,
            status: t.status,
            metric: metrics
                .get("mean_return")
                .map(|v| ("mean_return".to_string(), *v))
                .or_else(|| metrics.iter().next().map(|(k, v)| (k.clone(), *v))),
            duration: match (t.started_at_ms, t.finished_at_ms) {
                (Some(s), Some(f)) => Some(Duration::from_millis((f - s).max(0) as u64)),
                _ => None,
            },
            error: t.error.clone(),
        });
    }
    Ok(rows)
}

/// `--stay`: keeps the cluster up until Ctrl-C.
async fn stay_up(cluster: &Cluster) -> anyhow::Result<()> {
    // Listening before saying so: a Ctrl-C right after the message must
    // reach this, not end the process before it cleans up.
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    println!(
        "\nThe cluster stays up: dashboard at {}. Press Ctrl-C to stop.",
        dashboard_url(cluster)
    );
    interrupt.recv().await;
    println!("Stopping.");
    Ok(())
}

/// The Redis of a cluster on this machine (the demo, `trainyard dev`): the
/// one `TRAINYARD_REDIS_URL` names, else a private server started here
/// (returned, so it lives as long as the cluster). Says which on stdout.
pub(crate) fn local_redis() -> anyhow::Result<(String, Option<RedisServer>)> {
    match std::env::var("TRAINYARD_REDIS_URL") {
        Ok(url) if !url.is_empty() => {
            println!("Using Redis at {url} (TRAINYARD_REDIS_URL)");
            Ok((url, None))
        }
        _ => {
            let server = RedisServer::try_start()
                .map_err(|e| anyhow::anyhow!("{e}; or set TRAINYARD_REDIS_URL"))?;
            println!("Started a private redis-server on port {}", server.port());
            Ok((server.url(), Some(server)))
        }
    }
}

/// Adds the CartPole adapter to the hosts, its entry asking for the
/// trainer's requirements: each host builds the Python environment with the
/// uv of `make python-tools` (from the package index, once, into its cache)
/// and runs the trainer's `python3` from it.
fn provide_cartpole_python(cluster: &mut Cluster, adapter: &Path) -> anyhow::Result<()> {
    if !adapter.exists() {
        bail!(
            "{} is missing: run `make demo`, which builds the adapters first",
            adapter.display()
        );
    }
    if !Path::new(UV).exists() {
        bail!("{UV} is missing: run `make python-tools` (it installs uv, which builds CartPole's Python environment)");
    }
    let listed = std::fs::read_to_string(CARTPOLE_REQUIREMENTS)?;
    cluster.settings.host.python.uv = std::fs::canonicalize(UV)?.display().to_string();
    let mut entry = crate::settings::AdapterEntry::new(adapter.canonicalize()?, &["python3"]);
    entry.python = Some(trainyard_host::python_env::PythonRequirements::from_lines(
        &listed,
    ));
    cluster.settings.host.adapters.push(entry);
    Ok(())
}

/// Where the master serves its dashboard: the API's address.
pub(crate) fn dashboard_url(cluster: &Cluster) -> String {
    format!("{}/", cluster.settings.api.url.trim_end_matches('/'))
}

async fn refresh(client: &ApiClient, status: &mut HashMap<u64, TaskStatus>) {
    for (id, s) in status.iter_mut() {
        if let Ok(detail) = client.task(*id).await {
            *s = detail.task.status;
        }
    }
}

pub(crate) fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// The name of one run's directory (under `data/`) and Redis key prefix:
/// its start time and process id, so demos started in the same second
/// (tests run several at once) never share a database, logs or keys.
fn run_name(unix_seconds: u64, pid: u32) -> String {
    format!("demo-{unix_seconds}-{pid}")
}

fn unix_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demos_started_in_the_same_second_get_runs_of_their_own() {
        assert_ne!(run_name(1_700_000_000, 41), run_name(1_700_000_000, 42));
        assert_eq!(run_name(1_700_000_000, 41), "demo-1700000000-41");
    }
}
