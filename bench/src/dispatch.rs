//! Benchmarks 1 and 2: tasks through the whole path — submit, queue,
//! dispatch, lease write, adapter, report, lease clear, database — with the
//! `noop` adapter, whose task does no work (or, for `spawn`, launches
//! `true`, the process spawn every real trainer pays). `spawn` then runs
//! the same load once more with `seq 20` per task: twenty progress events
//! and twenty captured log lines each, recorded by the master, and reports
//! what watching trainers costs the dispatch rate (target: under 10 %).
//!
//! Each backend gets a fresh master, Redis and database, and a fleet of
//! light hosts. Three phases:
//! 1. warm-up (connections, caches), not measured;
//! 2. saturation: every task submitted at once, in batches of 500 by four
//!    concurrent clients; throughput is tasks over the time from the first
//!    submission to the last completion;
//! 3. half load: tasks submitted at half that rate in small batches for a
//!    few seconds; the latency that matters is measured here.
//!
//! Latency is from the moment the client sent a task's submission to the
//! task's `finished_at` in the database (the master's clock on the same
//! machine, taken in the turn that records the report).
//!
//! The `tls` benchmark runs the same on SQLite three times: over plain TCP,
//! over TLS (hosts' channel and the API, certificates from `trainyard
//! certs`), and over mutual TLS (each light host presenting its own
//! certificate, which the master checks against the CA and the host's id);
//! it reports the throughput of each and their ratios to plain TCP.

use super::env::BenchEnv;
use super::fleet::{Fleet, FleetSpec};
use super::report::{human, median_p99, Row};
use super::Backends;
use anyhow::{bail, Context};
use futures::StreamExt;
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};
use trainyard::client::ApiClient;
use trainyard_master::model::{Task, TaskStatus};

/// Tasks per submission in the saturation phase.
const SUBMIT_BATCH: usize = 500;
/// Submissions in flight at once in the saturation phase.
const SUBMITTERS: usize = 4;
/// How often the half-load phase submits.
pub const PACE: Duration = Duration::from_millis(10);

/// Lines of output (progress events and log lines) per task when the
/// benchmark measures what watching trainers costs.
const WATCHED_LINES: u32 = 20;
/// The share of the spawn rate watching may cost.
const WATCHING_BUDGET: f64 = 0.10;

/// What each task does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Work {
    /// Nothing: no process.
    Nothing,
    /// Launches `true`.
    Spawn,
    /// Launches `seq N`: N progress events and N log lines.
    Lines(u32),
}

impl Work {
    fn params(self) -> serde_json::Value {
        match self {
            Work::Nothing => json!({ "spawn": false }),
            Work::Spawn => json!({ "spawn": true }),
            Work::Lines(n) => json!({ "lines": n }),
        }
    }

    fn programs(self) -> Vec<String> {
        match self {
            Work::Nothing => vec![],
            Work::Spawn => vec!["true".into()],
            Work::Lines(_) => vec!["seq".into()],
        }
    }
}

pub async fn run(env: &BenchEnv, backends: Backends, work: Work) -> anyhow::Result<Vec<Row>> {
    let mut rows = vec![];
    let bench = if work == Work::Nothing {
        "dispatch"
    } else {
        "spawn"
    };
    for backend in backends.list() {
        match one_backend(env, backend, work, Transport::Plain, false).await {
            Ok((r, rate)) => {
                rows.extend(r);
                if work == Work::Spawn {
                    rows.extend(watched(env, backend, rate).await);
                }
            }
            Err(e) => rows.push(Row::failed(bench, format!("run on {backend}"), &e)),
        }
    }
    Ok(rows)
}

/// The spawn load again with [`WATCHED_LINES`] lines of progress and logs
/// per task, next to the plain spawn rate.
async fn watched(env: &BenchEnv, backend: &str, spawn_rate: f64) -> Vec<Row> {
    let work = Work::Lines(WATCHED_LINES);
    match one_backend(env, backend, work, Transport::Plain, false).await {
        Ok((run, rate)) => {
            let mut rows: Vec<Row> = run
                .into_iter()
                .filter(|r| {
                    r.measure.starts_with("throughput") || r.measure.starts_with("CPU per task")
                })
                .collect();
            let ratio = rate / spawn_rate.max(1.0);
            rows.push(Row::checked(
                "visibility",
                format!("dispatch rate with {WATCHED_LINES} progress events and log lines per task / without ({backend})"),
                format!("{ratio:.2} ({:+.0} %)", (ratio - 1.0) * 100.0),
                format!(">= {:.2}", 1.0 - WATCHING_BUDGET),
                ratio >= 1.0 - WATCHING_BUDGET,
            ));
            rows
        }
        Err(e) => vec![Row::failed("visibility", format!("run on {backend}"), &e)],
    }
}

/// What hosts and the API client reach the master over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Transport {
    Plain,
    Tls,
    /// TLS, and every host presents a certificate naming its id.
    MutualTls,
}

impl Transport {
    /// How the rows of a run over it are labelled, after the backend.
    fn label(self) -> &'static str {
        match self {
            Transport::Plain => "",
            Transport::Tls => ", TLS",
            Transport::MutualTls => ", mTLS",
        }
    }
}

/// Dispatch throughput on SQLite over plain TCP, TLS and mutual TLS, each
/// on a fresh master, Redis and database.
pub async fn run_tls(env: &BenchEnv) -> anyhow::Result<Vec<Row>> {
    let mut rows = vec![];
    let mut rates = vec![];
    for transport in [Transport::Plain, Transport::Tls, Transport::MutualTls] {
        let (run, rate) = one_backend(env, "sqlite", Work::Nothing, transport, true).await?;
        // Setup once; then what each transport changes: throughput and the
        // CPU it costs per task.
        rows.extend(run.into_iter().filter(|r| {
            (rates.is_empty() && r.measure.starts_with("setup"))
                || r.measure.starts_with("throughput")
                || r.measure.starts_with("CPU per task")
        }));
        rates.push(rate);
    }
    for row in &mut rows {
        row.bench = "tls".into();
        row.target.clear();
        row.verdict = super::report::Verdict::Info;
    }
    let (plain, tls, mtls) = (rates[0], rates[1], rates[2]);
    let ratio = |on: f64| {
        format!(
            "{:.2} ({:+.0} %)",
            on / plain.max(1.0),
            (on / plain.max(1.0) - 1.0) * 100.0
        )
    };
    rows.push(Row::info(
        "tls",
        "dispatch throughput, TLS off / TLS / mTLS (sqlite)",
        format!("{plain:.0} / {tls:.0} / {mtls:.0} tasks/s"),
    ));
    rows.push(Row::info("tls", "ratio TLS / off", ratio(tls)));
    rows.push(Row::info("tls", "ratio mTLS / off", ratio(mtls)));
    Ok(rows)
}

/// Turns the stage's cluster to TLS: a development CA and a master
/// certificate from `trainyard certs`, HTTPS for the API client; for mutual
/// TLS, a certificate per light host too, which the master requires.
/// Returns the directory of the hosts' certificates under mutual TLS.
fn use_tls(
    cluster: &mut trainyard::cluster::Cluster,
    mutual: bool,
    hosts: usize,
) -> anyhow::Result<Option<std::path::PathBuf>> {
    let dir = cluster.dir.join("tls");
    let ids: Vec<String> = if mutual {
        (0..hosts).map(super::fleet::host_id).collect()
    } else {
        vec![]
    };
    trainyard::certs::write(&trainyard::certs::Request {
        dir: &dir,
        master_names: &["127.0.0.1".to_string()],
        hosts: &ids,
        days: 1,
        reissue: false,
    })?;
    let s = &mut cluster.settings;
    s.tls.enabled = true;
    s.tls.ca = Some(dir.join("ca.pem"));
    s.tls.cert = Some(dir.join("master.pem"));
    s.tls.key = Some(dir.join("master-key.pem"));
    s.tls.require_host_certificates = mutual;
    s.api.url = s.api.url.replace("http://", "https://");
    Ok(mutual.then_some(dir))
}

/// Submission times of tasks, by id, in ms since the Unix epoch.
/// Submitted tasks: id -> when the submission was sent (ms since the epoch).
pub type Sent = HashMap<u64, i64>;

/// One run; its rows and its throughput in tasks/s.
async fn one_backend(
    env: &BenchEnv,
    backend: &str,
    work: Work,
    transport: Transport,
    tls_comparison: bool,
) -> anyhow::Result<(Vec<Row>, f64)> {
    // Names the rows and the run directory.
    let bench = match (work, transport) {
        (Work::Spawn, _) => "spawn",
        (Work::Lines(_), _) => "visibility",
        (Work::Nothing, Transport::Plain) if !tls_comparison => "dispatch",
        (Work::Nothing, Transport::Plain) => "tls-off",
        (Work::Nothing, Transport::Tls) => "tls",
        (Work::Nothing, Transport::MutualTls) => "mtls",
    };
    let spawn = work != Work::Nothing;
    let tasks: usize = env.size(10_000, 60);
    let (hosts, slots) = env.size((16, 32), (2, 4));
    let mut stage = env.stage(bench, backend).await?;
    let host_certificates = match transport {
        Transport::Plain => None,
        Transport::Tls => use_tls(&mut stage.cluster, false, hosts)?,
        Transport::MutualTls => use_tls(&mut stage.cluster, true, hosts)?,
    };
    stage.cluster.write_config()?;
    let mut master = stage.cluster.spawn_master()?;
    let client = stage
        .cluster
        .wait_for_master(Duration::from_secs(30))
        .await?;
    let programs = work.programs();
    let fleet = Fleet::start(
        &stage.cluster,
        &FleetSpec {
            count: hosts,
            slots,
            adapters: vec![(env.adapter("noop"), programs)],
            certificates: host_certificates,
        },
    )
    .await?;
    stage
        .cluster
        .wait_for_hosts(&client, hosts, Duration::from_secs(60))
        .await?;
    let params = work.params();

    // 1. Warm-up.
    let warm = env.size(1_000, 10);
    let mut sent = Sent::new();
    submit(&client, &params, warm, &mut sent).await?;
    wait_terminal(&client, warm, Duration::from_secs(120)).await?;

    // 2. Saturation.
    let pids = Pids {
        master: master.pid().context("the master has no pid")?,
        redis: stage.redis.pid().context("redis has no pid")?,
        hosts: std::process::id(),
        // The PostgreSQL server's processes (SQLite runs inside the master).
        database: if backend == "postgres" {
            super::probe::named("postgres")
        } else {
            vec![]
        },
    };
    let cpu_before = pids.cpu();
    let turns_before = turns(&client).await?;
    let started = Instant::now();
    let sent = submit_all(&client, &params, tasks).await?;
    let submitted_in = started.elapsed();
    wait_terminal(&client, warm + tasks, Duration::from_secs(600)).await?;
    let cpu_used = pids.cpu().since(&cpu_before);
    let turns_used = turns(&client).await?.saturating_sub(turns_before);
    let saturated = collect(&client, &sent).await?;
    let first_sent = *sent.values().min().context("nothing submitted")?;
    let last_done = saturated
        .iter()
        .map(|t| t.finished)
        .max()
        .unwrap_or(first_sent);
    let span = Duration::from_millis((last_done - first_sent).max(1) as u64);
    let rate = tasks as f64 / span.as_secs_f64();
    let mut lat: Vec<f64> = saturated.iter().map(|t| t.latency_ms).collect();
    let (sat_p50, sat_p99) = median_p99(&mut lat).unwrap_or_default();

    // 3. Half load.
    let half = (rate / 2.0).max(1.0);
    let phase = env.size(Duration::from_secs(5), Duration::from_millis(500));
    let per_tick = ((half * PACE.as_secs_f64()).round() as usize).max(1);
    let mut paced = Sent::new();
    let phase_start = Instant::now();
    let mut tick = tokio::time::interval(PACE);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while phase_start.elapsed() < phase {
        tick.tick().await;
        submit(&client, &params, per_tick, &mut paced).await?;
    }
    let paced_rate = paced.len() as f64 / phase_start.elapsed().as_secs_f64();
    wait_terminal(
        &client,
        warm + tasks + paced.len(),
        Duration::from_secs(600),
    )
    .await?;
    let half_done = collect(&client, &paced).await?;
    let mut lat: Vec<f64> = half_done.iter().map(|t| t.latency_ms).collect();
    let (half_p50, half_p99) = median_p99(&mut lat).unwrap_or_default();

    let peaks = master.pid().and_then(super::probe::rss_bytes);
    if let Work::Lines(n) = work {
        let last = *paced.keys().max().context("nothing paced")?;
        check_watched(&client, last, n).await?;
    }
    fleet.shutdown().await;
    master.stop(Duration::from_secs(10));

    // Every task ran once and completed.
    for t in saturated.iter().chain(&half_done) {
        if t.status != TaskStatus::Completed || t.runs != 1 {
            bail!(
                "task {} ended {} after {} runs; every no-work task must complete in one",
                t.id,
                t.status.as_str(),
                t.runs
            );
        }
    }

    let label = format!("{backend}{}", transport.label());
    let what = match work {
        Work::Nothing => "no-work tasks".to_string(),
        Work::Spawn => "`true` per task".to_string(),
        Work::Lines(n) => format!("`seq {n}` per task"),
    };
    let slots_total = hosts as u32 * slots;
    let mut rows = vec![Row::info(
        bench,
        format!("setup ({label})"),
        format!("{tasks} {what}, {hosts} light hosts × {slots} slots = {slots_total} slots"),
    )];
    let throughput = format!("{rate:.0} tasks/s");
    if spawn {
        rows.push(Row::info(
            bench,
            format!("throughput ({label})"),
            throughput,
        ));
    } else {
        rows.push(Row::checked(
            bench,
            format!("throughput ({label})"),
            throughput,
            ">= 5000 tasks/s",
            rate >= 5000.0,
        ));
    }
    rows.push(Row::info(
        bench,
        format!("submit→complete at saturation ({label})"),
        format!(
            "p50 {sat_p50:.0} ms, p99 {sat_p99:.0} ms (submitting took {})",
            human(submitted_in)
        ),
    ));
    let half_fig = format!("p50 {half_p50:.1} ms, p99 {half_p99:.1} ms at {paced_rate:.0} tasks/s");
    if spawn {
        rows.push(Row::info(
            bench,
            format!("submit→complete at half load ({label})"),
            half_fig,
        ));
    } else {
        rows.push(Row::checked(
            bench,
            format!("submit→complete at half load ({label})"),
            half_fig,
            "p99 < 50 ms",
            half_p99 < 50.0,
        ));
    }
    let per_task = |d: Duration| d.as_secs_f64() * 1e6 / tasks as f64;
    rows.push(Row::info(
        bench,
        format!("CPU per task at saturation ({label})"),
        format!(
            "master {:.0} µs{}, light hosts {:.0} µs, Redis {:.0} µs{} (master alone: {:.0} tasks/s per core)",
            per_task(cpu_used.master),
            if pids.database.is_empty() { " (SQLite included)" } else { "" },
            per_task(cpu_used.hosts),
            per_task(cpu_used.redis),
            if pids.database.is_empty() {
                String::new()
            } else {
                format!(", PostgreSQL server {:.0} µs", per_task(cpu_used.database))
            },
            1e6 / per_task(cpu_used.master).max(1.0)
        ),
    ));
    rows.push(Row::info(
        bench,
        format!("scheduler turns at saturation ({label})"),
        format!(
            "{turns_used} turns (one transaction each), {:.0} tasks per turn",
            tasks as f64 / turns_used.max(1) as f64
        ),
    ));
    if let Some(rss) = peaks {
        rows.push(Row::info(
            bench,
            format!("master RSS after the run ({label})"),
            super::report::mib(rss),
        ));
    }
    Ok((rows, rate))
}

/// Submits `n` tasks of the noop adapter with these params, one request.
pub async fn submit(
    client: &ApiClient,
    params: &serde_json::Value,
    n: usize,
    sent: &mut Sent,
) -> anyhow::Result<()> {
    if n == 0 {
        return Ok(());
    }
    let batch: Vec<serde_json::Value> = (0..n)
        .map(|_| json!({ "adapter": "noop", "params": params }))
        .collect();
    let at = trainyard_proto::now_ms();
    let ids = client.submit_batch(&batch).await?;
    for id in ids {
        sent.insert(id, at);
    }
    Ok(())
}

/// Submits `tasks` tasks of the noop adapter at once: batches of
/// [`SUBMIT_BATCH`], [`SUBMITTERS`] requests in flight, as several of a
/// fleet's users would (the saturation phase).
pub async fn submit_all(
    client: &ApiClient,
    params: &serde_json::Value,
    tasks: usize,
) -> anyhow::Result<Sent> {
    let sizes: Vec<usize> = (0..tasks)
        .step_by(SUBMIT_BATCH)
        .map(|start| SUBMIT_BATCH.min(tasks - start))
        .collect();
    let batches: Vec<anyhow::Result<Sent>> = futures::stream::iter(sizes)
        .map(|n| async move {
            let mut part = Sent::new();
            submit(client, params, n, &mut part).await?;
            Ok(part)
        })
        .buffer_unordered(SUBMITTERS)
        .collect()
        .await;
    let mut sent = Sent::new();
    for part in batches {
        sent.extend(part?);
    }
    Ok(sent)
}

/// The task's `n` lines reached the master as progress points and log
/// lines (they may arrive just after the report: waited for briefly), so
/// the watched run measured what it claims.
async fn check_watched(client: &ApiClient, id: u64, n: u32) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let url = format!(
        "{}/v1/tasks/{id}/progress",
        client.base_url().trim_end_matches('/')
    );
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let progress: serde_json::Value = http.get(&url).send().await?.json().await?;
        let points = progress["points"].as_array().map_or(0, Vec::len);
        let logs = client.logs(id, Default::default()).await?.lines.len();
        if points == n as usize && logs == n as usize {
            return Ok(());
        }
        if Instant::now() > until {
            bail!("task {id} printed {n} lines; the master holds {points} progress points and {logs} log lines");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The scheduler's turn counter.
async fn turns(client: &ApiClient) -> anyhow::Result<u64> {
    let health = client.health().await?;
    health["scheduler"]["turns"]
        .as_u64()
        .context("the health endpoint shows no scheduler turns")
}

/// Waits until `n` tasks are terminal, by the master's status counts.
pub async fn wait_terminal(client: &ApiClient, n: usize, timeout: Duration) -> anyhow::Result<()> {
    let until = Instant::now() + timeout;
    loop {
        let health = client.health().await?;
        let done: u64 = ["COMPLETED", "FAILED", "CANCELLED"]
            .iter()
            .filter_map(|s| health["tasks"][s].as_u64())
            .sum();
        if done as usize >= n {
            return Ok(());
        }
        if Instant::now() > until {
            bail!("only {done} of {n} tasks ended within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One task's outcome.
pub struct Done {
    pub id: u64,
    pub status: TaskStatus,
    pub runs: u32,
    pub finished: i64,
    pub latency_ms: f64,
}

/// Reads the tasks of `sent` back and measures each one's latency.
pub async fn collect(client: &ApiClient, sent: &Sent) -> anyhow::Result<Vec<Done>> {
    let ids: Vec<u64> = sent.keys().copied().collect();
    Ok(read_tasks(client, &ids)
        .await?
        .into_iter()
        .map(|t| {
            let finished = t.finished_at_ms.unwrap_or(i64::MAX);
            Done {
                id: t.id,
                status: t.status,
                runs: t.runs,
                finished,
                latency_ms: (finished - sent[&t.id]) as f64,
            }
        })
        .collect())
}

/// Reads these tasks through the API, newest first, a page of 1000 at a
/// time; fails if any is missing.
pub async fn read_tasks(client: &ApiClient, ids: &[u64]) -> anyhow::Result<Vec<Task>> {
    let wanted: HashSet<u64> = ids.iter().copied().collect();
    let lowest = *ids.iter().min().context("no task to read")?;
    let mut before = ids.iter().max().map(|m| m + 1);
    let mut out = Vec::with_capacity(ids.len());
    while out.len() < wanted.len() {
        let page = client.tasks(None, None, Some(1000), before).await?;
        let Some(last) = page.last() else { break };
        before = Some(last.id);
        let past = last.id <= lowest;
        out.extend(page.into_iter().filter(|t| wanted.contains(&t.id)));
        if past {
            break;
        }
    }
    if out.len() != wanted.len() {
        bail!(
            "{} of {} tasks are missing from the task list",
            wanted.len() - out.len(),
            wanted.len()
        );
    }
    Ok(out)
}

/// The processes whose CPU time the benchmark accounts for.
struct Pids {
    master: u32,
    redis: u32,
    /// This process: the light hosts.
    hosts: u32,
    database: Vec<u32>,
}

/// CPU time used by each of [`Pids`].
#[derive(Clone, Copy, Default)]
struct CpuUse {
    master: Duration,
    redis: Duration,
    hosts: Duration,
    database: Duration,
}

impl Pids {
    fn cpu(&self) -> CpuUse {
        let t = |pid| super::probe::cpu_time(pid).unwrap_or_default();
        CpuUse {
            master: t(self.master),
            redis: t(self.redis),
            hosts: t(self.hosts),
            database: self.database.iter().map(|p| t(*p)).sum(),
        }
    }
}

impl CpuUse {
    fn since(&self, before: &CpuUse) -> CpuUse {
        CpuUse {
            master: self.master.saturating_sub(before.master),
            redis: self.redis.saturating_sub(before.redis),
            hosts: self.hosts.saturating_sub(before.hosts),
            database: self.database.saturating_sub(before.database),
        }
    }
}
