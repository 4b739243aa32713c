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
//! The `tls` benchmark ([`tls`]) runs the same on SQLite three times: over
//! plain TCP, over TLS (hosts' channel and the API, certificates from
//! `trainyard certs`), and over mutual TLS (each light host presenting its
//! own certificate, which the master checks against the CA and the host's
//! id); it reports the throughput of each and their ratios to plain TCP.
//! What the benchmarks ask of the API is in [`crate::api`], the CPU
//! accounting in [`crate::cpu`].

pub mod tls;

use super::api::{collect, submit, submit_all, wait_terminal, Done, Sent};
use super::cpu::{CpuUse, Pids};
use super::env::BenchEnv;
use super::fleet::{Fleet, FleetSpec};
use super::report::{human, median_p99, Row};
use super::Backends;
use anyhow::{bail, Context};
use tls::{use_tls, Transport};

use serde_json::json;

use std::time::{Duration, Instant};
use trainyard::client::ApiClient;
use trainyard_master::model::TaskStatus;

/// The project's target for no-work tasks through the whole path, on
/// either database, with everything on this machine's two cores.
const TARGET_RATE: u32 = 10_000;
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

/// The task's `n` lines reached the master as progress points and log
/// lines (they may arrive just after the report: waited for briefly), so
/// the watched run measured what it claims.
async fn check_watched(client: &ApiClient, id: u64, n: u32) -> anyhow::Result<()> {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let points = client.progress(id, None, None).await?.points.len();
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
