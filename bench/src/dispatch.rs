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
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};
use trainyard::client::ApiClient;
use trainyard_master::model::{Task, TaskStatus};

/// The project's target for no-work tasks through the whole path, on
/// either database, with everything on this machine's two cores.
const TARGET_RATE: u32 = 10_000;
/// Tasks per submission in the saturation phase.
const SUBMIT_BATCH: usize = 500;
/// Submissions in flight at once in the saturation phase.
const SUBMITTERS: usize = 4;
/// How often the half-load phase submits.
pub const PACE: Duration = Duration::from_millis(10);

/// The dispatch benchmark's fleet at full size, light hosts × slots: 2,048
/// slots. At 512 a slot's cycle (two of the master's turns and the host's
/// round trips) bounds the rate while the cores idle a fifth of the time
/// (BENCHMARKS.md, "at 512 slots"), which the narrow run shows beside it.
const DISPATCH_FLEET: (usize, u32) = (16, 128);
/// Every other load's fleet, and the dispatch benchmark's narrow run.
const FLEET: (usize, u32) = (16, 32);
/// Every load's fleet at smoke size.
const SMOKE_FLEET: (usize, u32) = (2, 4);

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

/// One run's load: its name (the rows' benchmark, the run's directory),
/// what each task does, the channel, and the fleet at full size.
#[derive(Clone, Copy, Debug)]
struct Load {
    bench: &'static str,
    work: Work,
    transport: Transport,
    fleet: (usize, u32),
}

impl Load {
    fn plain(bench: &'static str, work: Work, fleet: (usize, u32)) -> Self {
        Self {
            bench,
            work,
            transport: Transport::Plain,
            fleet,
        }
    }
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
    let load = match work {
        Work::Nothing => Load::plain("dispatch", work, DISPATCH_FLEET),
        _ => Load::plain("spawn", work, FLEET),
    };
    for backend in backends.list() {
        match one_backend(env, backend, load).await {
            Ok((r, rate)) => {
                rows.extend(r);
                match work {
                    Work::Nothing => rows.extend(narrow(env, backend).await),
                    _ => rows.extend(watched(env, backend, rate).await),
                }
            }
            Err(e) => rows.push(Row::failed(load.bench, format!("run on {backend}"), &e)),
        }
    }
    Ok(rows)
}

/// The dispatch load again on the narrower fleet of every other load (and
/// of the dispatch rows before 2026-12-05): its throughput and CPU per task.
async fn narrow(env: &BenchEnv, backend: &str) -> Vec<Row> {
    let load = Load::plain("dispatch-narrow", Work::Nothing, FLEET);
    let slots = env.size(FLEET, SMOKE_FLEET);
    let at = format!("at {} slots (", slots.0 as u32 * slots.1);
    match one_backend(env, backend, load).await {
        Ok((run, _)) => run
            .into_iter()
            .filter(rate_or_cpu)
            .map(|mut r| {
                r.bench = "dispatch".into();
                r.measure = r.measure.replacen('(', &at, 1);
                r.target.clear();
                r.verdict = super::report::Verdict::Info;
                r
            })
            .collect(),
        Err(e) => vec![Row::failed(
            "dispatch",
            format!("narrow run on {backend}"),
            &e,
        )],
    }
}

/// Whether a run's row is its throughput or its CPU per task: what a run
/// set beside another keeps.
fn rate_or_cpu(row: &Row) -> bool {
    row.measure.starts_with("throughput") || row.measure.starts_with("CPU per task")
}

/// The spawn load again with [`WATCHED_LINES`] lines of progress and logs
/// per task, next to the plain spawn rate.
async fn watched(env: &BenchEnv, backend: &str, spawn_rate: f64) -> Vec<Row> {
    let load = Load::plain("visibility", Work::Lines(WATCHED_LINES), FLEET);
    match one_backend(env, backend, load).await {
        Ok((run, rate)) => {
            let mut rows: Vec<Row> = run.into_iter().filter(rate_or_cpu).collect();
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
        let bench = match transport {
            Transport::Plain => "tls-off",
            Transport::Tls => "tls",
            Transport::MutualTls => "mtls",
        };
        let load = Load {
            transport,
            ..Load::plain(bench, Work::Nothing, FLEET)
        };
        let (run, rate) = one_backend(env, "sqlite", load).await?;
        // Setup once; then what each transport changes: throughput and the
        // CPU it costs per task.
        rows.extend(
            run.into_iter()
                .filter(|r| (rates.is_empty() && r.measure.starts_with("setup")) || rate_or_cpu(r)),
        );
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

/// Submitted tasks: id -> when the submission was sent (ms since the epoch).
pub type Sent = HashMap<u64, i64>;

/// What one run measured.
struct Measured {
    tasks: usize,
    /// Tasks per second at saturation.
    rate: f64,
    submitted_in: Duration,
    /// Submit→complete at saturation: p50, p99 in ms.
    saturated: (f64, f64),
    /// Submit→complete at half load: p50, p99 in ms, and the rate paced.
    half: (f64, f64, f64),
    cpu: CpuUse,
    turns: u64,
}

/// One run; its rows and its throughput in tasks/s.
async fn one_backend(env: &BenchEnv, backend: &str, load: Load) -> anyhow::Result<(Vec<Row>, f64)> {
    let Load {
        bench,
        work,
        transport,
        fleet,
    } = load;
    let (hosts, slots) = env.size(fleet, SMOKE_FLEET);
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
    let fleet = Fleet::start(
        &stage.cluster,
        &FleetSpec {
            count: hosts,
            slots,
            adapters: vec![(env.adapter("noop"), work.programs())],
            certificates: host_certificates,
        },
    )
    .await?;
    stage
        .cluster
        .wait_for_hosts(&client, hosts, Duration::from_secs(60))
        .await?;
    let pids = Pids {
        master: master.pid().context("the master has no pid")?,
        redis: stage.redis.pid().context("redis has no pid")?,
        hosts: std::process::id(),
        postgres: backend == "postgres",
    };
    let measured = measure(env, &stage.cluster, &client, work, &pids).await?;
    let master_rss = master.pid().and_then(super::probe::rss_bytes);
    fleet.shutdown().await;
    master.stop(Duration::from_secs(10));

    let label = format!("{backend}{}", transport.label());
    let what = match work {
        Work::Nothing => "no-work tasks".to_string(),
        Work::Spawn => "`true` per task".to_string(),
        Work::Lines(n) => format!("`seq {n}` per task"),
    };
    let mut rows = vec![Row::info(
        bench,
        format!("setup ({label})"),
        format!(
            "{} {what}, {hosts} light hosts × {slots} slots = {} slots",
            measured.tasks,
            hosts as u32 * slots
        ),
    )];
    let spawn = work != Work::Nothing;
    rows.extend(rows_of(bench, &label, spawn, &measured, master_rss));
    Ok((rows, measured.rate))
}

/// The three phases against a running cluster and fleet; fails unless
/// every task completed in one run.
async fn measure(
    env: &BenchEnv,
    cluster: &trainyard::cluster::Cluster,
    client: &ApiClient,
    work: Work,
    pids: &Pids,
) -> anyhow::Result<Measured> {
    let tasks: usize = env.size(10_000, 60);
    let params = work.params();

    // 1. Warm-up.
    let warm = env.size(1_000, 10);
    let mut sent = Sent::new();
    submit(client, &params, warm, &mut sent).await?;
    wait_terminal(client, warm, Duration::from_secs(120)).await?;

    // 2. Saturation. The users' side runs on a thread of its own, so that
    // the light hosts' CPU is this process's less that thread's.
    let cpu_before = pids.cpu();
    let turns_before = turns(client).await?;
    let users = cluster.client()?;
    let users_params = params.clone();
    let ((sent, submitted_in), users_cpu) = super::users::on_own_thread(move || async move {
        let started = Instant::now();
        let sent = submit_all(&users, &users_params, tasks).await?;
        let submitted_in = started.elapsed();
        wait_terminal(&users, warm + tasks, Duration::from_secs(600)).await?;
        Ok((sent, submitted_in))
    })
    .await?;
    let cpu = pids.cpu().since(&cpu_before).less_users(users_cpu);
    let turns = turns(client).await?.saturating_sub(turns_before);
    let saturated = collect(client, &sent).await?;
    let first_sent = *sent.values().min().context("nothing submitted")?;
    let last_done = saturated
        .iter()
        .map(|t| t.finished)
        .max()
        .unwrap_or(first_sent);
    let span = Duration::from_millis((last_done - first_sent).max(1) as u64);
    let rate = tasks as f64 / span.as_secs_f64();
    let mut lat: Vec<f64> = saturated.iter().map(|t| t.latency_ms).collect();
    let saturated_lat = median_p99(&mut lat).unwrap_or_default();

    // 3. Half load.
    let (half_done, paced_rate) = half_load(env, client, &params, rate, warm + tasks).await?;
    let mut lat: Vec<f64> = half_done.iter().map(|t| t.latency_ms).collect();
    let (half_p50, half_p99) = median_p99(&mut lat).unwrap_or_default();
    if let Work::Lines(n) = work {
        let last = half_done
            .iter()
            .map(|t| t.id)
            .max()
            .context("nothing paced")?;
        check_watched(client, last, n).await?;
    }

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
    Ok(Measured {
        tasks,
        rate,
        submitted_in,
        saturated: saturated_lat,
        half: (half_p50, half_p99, paced_rate),
        cpu,
        turns,
    })
}

/// Submits at `rate / 2` in small batches for a few seconds, waits for
/// those tasks (`before` tasks ended earlier); returns them and the rate
/// actually paced.
async fn half_load(
    env: &BenchEnv,
    client: &ApiClient,
    params: &serde_json::Value,
    rate: f64,
    before: usize,
) -> anyhow::Result<(Vec<Done>, f64)> {
    let half = (rate / 2.0).max(1.0);
    let phase = env.size(Duration::from_secs(5), Duration::from_millis(500));
    let per_tick = ((half * PACE.as_secs_f64()).round() as usize).max(1);
    let mut paced = Sent::new();
    let phase_start = Instant::now();
    let mut tick = tokio::time::interval(PACE);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while phase_start.elapsed() < phase {
        tick.tick().await;
        submit(client, params, per_tick, &mut paced).await?;
    }
    let paced_rate = paced.len() as f64 / phase_start.elapsed().as_secs_f64();
    wait_terminal(client, before + paced.len(), Duration::from_secs(600)).await?;
    Ok((collect(client, &paced).await?, paced_rate))
}

/// The rows of a run after its setup row, the master's RSS after it last;
/// `spawn` runs report without the no-work targets.
fn rows_of(
    bench: &str,
    label: &str,
    spawn: bool,
    m: &Measured,
    master_rss: Option<u64>,
) -> Vec<Row> {
    let measure = |what: &str| format!("{what} ({label})");
    let mut rows = vec![];
    let throughput = format!("{:.0} tasks/s", m.rate);
    rows.push(match spawn {
        true => Row::info(bench, measure("throughput"), throughput),
        false => Row::checked(
            bench,
            measure("throughput"),
            throughput,
            format!(">= {TARGET_RATE} tasks/s"),
            m.rate >= f64::from(TARGET_RATE),
        ),
    });
    let (sat_p50, sat_p99) = m.saturated;
    rows.push(Row::info(
        bench,
        measure("submit→complete at saturation"),
        format!(
            "p50 {sat_p50:.0} ms, p99 {sat_p99:.0} ms (submitting took {})",
            human(m.submitted_in)
        ),
    ));
    let (half_p50, half_p99, paced_rate) = m.half;
    let half_fig = format!("p50 {half_p50:.1} ms, p99 {half_p99:.1} ms at {paced_rate:.0} tasks/s");
    let half_measure = measure("submit→complete at half load");
    rows.push(match spawn {
        true => Row::info(bench, half_measure, half_fig),
        false => Row::checked(
            bench,
            half_measure,
            half_fig,
            "p99 < 50 ms",
            half_p99 < 50.0,
        ),
    });
    rows.push(Row::info(
        bench,
        measure("CPU per task at saturation"),
        m.cpu.per_task(m.tasks),
    ));
    rows.push(Row::info(
        bench,
        measure("scheduler turns at saturation"),
        format!(
            "{} turns (one transaction each), {:.0} tasks per turn",
            m.turns,
            m.tasks as f64 / m.turns.max(1) as f64
        ),
    ));
    if let Some(rss) = master_rss {
        rows.push(Row::info(
            bench,
            measure("master RSS after the run"),
            super::report::mib(rss),
        ));
    }
    rows
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
    /// This process: the light hosts, and the users' thread.
    hosts: u32,
    /// Whether a PostgreSQL server runs beside (SQLite runs in the master).
    postgres: bool,
}

/// The names of the threads sqlx runs SQLite connections on (truncated
/// to 15 bytes by the kernel).
const SQLITE_THREADS: &str = "sqlx-sqlite";

/// CPU time used by each of [`Pids`].
#[derive(Clone, Default)]
struct CpuUse {
    master: Duration,
    /// The part of `master` on SQLite's threads: sqlx runs each SQLite
    /// connection, the engine and its own marshalling, on a thread of its
    /// own ([`SQLITE_THREADS`]). Zero on PostgreSQL.
    sqlite: Duration,
    redis: Duration,
    hosts: Duration,
    /// Submitting and polling, on the users' thread of this process.
    users: Duration,
    /// Each PostgreSQL server process's, by pid; `None` for SQLite. Read
    /// afresh each time: the server starts a process per connection, and
    /// the master may open one during the run.
    database: Option<BTreeMap<u32, Duration>>,
}

impl Pids {
    fn cpu(&self) -> CpuUse {
        let t = |pid| super::probe::cpu_time(pid).unwrap_or_default();
        CpuUse {
            master: t(self.master),
            sqlite: super::probe::threads_cpu_time(self.master, SQLITE_THREADS),
            redis: t(self.redis),
            hosts: t(self.hosts),
            users: Duration::ZERO,
            database: self.postgres.then(|| {
                super::probe::named("postgres")
                    .into_iter()
                    .map(|pid| (pid, t(pid)))
                    .collect()
            }),
        }
    }
}

impl CpuUse {
    fn since(&self, before: &CpuUse) -> CpuUse {
        // A server process that started since counts from zero.
        let database = self.database.as_ref().map(|now| {
            let then = before.database.clone().unwrap_or_default();
            now.iter()
                .map(|(pid, t)| {
                    (
                        *pid,
                        t.saturating_sub(then.get(pid).copied().unwrap_or_default()),
                    )
                })
                .collect()
        });
        CpuUse {
            master: self.master.saturating_sub(before.master),
            sqlite: self.sqlite.saturating_sub(before.sqlite),
            redis: self.redis.saturating_sub(before.redis),
            hosts: self.hosts.saturating_sub(before.hosts),
            users: self.users.saturating_sub(before.users),
            database,
        }
    }

    /// The users' thread's `users` taken out of this process's time.
    fn less_users(self, users: Duration) -> CpuUse {
        CpuUse {
            hosts: self.hosts.saturating_sub(users),
            users,
            ..self
        }
    }

    /// The figure of the CPU row, over `tasks` tasks.
    fn per_task(&self, tasks: usize) -> String {
        let us = |d: Duration| d.as_secs_f64() * 1e6 / tasks.max(1) as f64;
        let (database, sqlite) = match &self.database {
            Some(d) => (
                format!(", PostgreSQL server {:.0} µs", us(d.values().sum())),
                String::new(),
            ),
            None => (
                String::new(),
                format!(" (SQLite's threads {:.0} µs of it)", us(self.sqlite)),
            ),
        };
        format!(
            "master {:.0} µs{sqlite}, light hosts {:.0} µs, Redis {:.0} µs{database}; users' side (submitting, polling) {:.0} µs (master alone: {:.0} tasks/s per core)",
            us(self.master),
            us(self.hosts),
            us(self.redis),
            us(self.users),
            1e6 / us(self.master).max(1.0)
        )
    }
}
