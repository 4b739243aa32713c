//! Standby masters on PostgreSQL: how fast a standby takes over when the
//! leader dies, and what standing by costs the leader.
//!
//! Three masters run against one database and one Redis (`master-1` leads
//! first); real host processes know all three (`host.master` is a list),
//! and long tasks keep running. Each round finds the leader through
//! `/v1/health`, kills it with SIGKILL and measures, from the kill:
//!
//! - until a standby leads and serves its full API;
//! - until the new leader dispatches a task: a no-work task is submitted
//!   right after the kill, through whichever surviving master accepts it,
//!   and its first attempt's `dispatched_at_ms` (the master's clock, on
//!   this machine) is compared with the time of the kill;
//! - until every host is connected to the new leader (`/v1/hosts`).
//!
//! The killed master is then started again and waits as a standby before
//! the next round, so every round has three masters. The rounds run with
//! the default timers (leader TTL 10 s) and with the fast timers of the
//! multi-process tests (leader TTL 2 s). A leader killed outright releases
//! its advisory lock with its database connection, so a standby should lead
//! within a polling interval; the target is the bound for a leader that
//! merely stops answering: the leader TTL plus a second.
//!
//! With the default timers the hosts' side is their reconnect backoff: a
//! host that lost its connection waits `reconnect_initial` (1 s ± 25 %)
//! before it dials the masters again, and the first dispatch waits for the
//! first host back.
//!
//! Last, the no-work dispatch load of [`super::dispatch`] (saturation
//! phase) runs with one master and with one master and two standbys,
//! alternately, and the best rate of each is compared: the standbys poll
//! the database, and the leader confirms its term and fences every write
//! with it; the target is under 10 % lower.

use super::api::{collect, submit, submit_all, wait_terminal, Sent};
use super::env::BenchEnv;
use super::fleet::{Fleet, FleetSpec};
use super::report::{median_p99, Row};
use super::Backends;
use anyhow::{bail, Context};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use trainyard::client::ApiClient;
use trainyard::cluster::{Cluster, Process};
use trainyard::settings::{AdapterEntry, Settings};
use trainyard_master::model::TaskStatus;
use trainyard_proto::{now_ms, Timers};
use trainyard_testkit::fast_timers;

/// Masters of the failover rounds.
const MASTERS: usize = 3;
/// Slots of each host process.
const SLOTS: u32 = 2;
/// How long any one step (a master starting, a task running) may take.
const WAIT: Duration = Duration::from_secs(60);
/// How often the benchmark polls the masters.
const POLL: Duration = Duration::from_millis(20);
/// The share of the dispatch rate two standbys may cost.
const STANDBY_BUDGET: f64 = 0.10;

pub async fn run(env: &BenchEnv, backends: Backends) -> anyhow::Result<Vec<Row>> {
    if !backends.list().contains(&"postgres") {
        return Ok(vec![Row::info(
            "failover",
            "not run",
            "standby masters need PostgreSQL; not with --backends sqlite",
        )]);
    }
    let fast_ttl = Duration::from_secs(2);
    let default_ttl = trainyard_master::leadership::DEFAULT_LEADER_TTL;
    let rounds = env.size(5, 1);
    let runs = [
        ("default", Timers::default(), default_ttl),
        ("fast", fast_timers(), fast_ttl),
    ];
    let mut rows = vec![];
    for (name, timers, ttl) in runs {
        match timers_run(env, name, timers, ttl, rounds).await {
            Ok(r) => rows.extend(r),
            Err(e) => rows.push(Row::failed("failover", format!("{name} timers"), &e)),
        }
    }
    match throughput(env).await {
        Ok(r) => rows.extend(r),
        Err(e) => rows.push(Row::failed("failover", "dispatch with standbys", &e)),
    }
    Ok(rows)
}

/// Masters on one database: their processes and an API client of each.
struct Masters {
    procs: Vec<Process>,
    clients: Vec<ApiClient>,
}

/// Writes the cluster's settings, changed by `configure`, to `file` in its
/// directory; the cluster's own settings and config file stay as they were.
fn write_variant(
    c: &mut Cluster,
    file: &str,
    configure: impl FnOnce(&mut Settings),
) -> anyhow::Result<PathBuf> {
    let (settings, path) = (c.settings.clone(), c.config_path.clone());
    configure(&mut c.settings);
    c.config_path = c.dir.join(file);
    let written = c.write_config();
    let variant = std::mem::replace(&mut c.config_path, path);
    c.settings = settings;
    written.map(|()| variant)
}

fn spawn_master(c: &Cluster, name: &str, config: &Path) -> anyhow::Result<Process> {
    let args = [
        "--config".to_string(),
        config.display().to_string(),
        "master".to_string(),
    ];
    let log = c.dir.join(format!("{name}.log"));
    Process::spawn(name, &c.bins.trainyard, &args, &c.env, &log)
}

impl Masters {
    /// Starts `count` masters with a leader TTL of `ttl`: `master-1` on
    /// the cluster's own ports, which leads, then the others, each waited
    /// for until it stands by. The cluster's config file (the hosts')
    /// names every master.
    async fn start(c: &mut Cluster, count: usize, ttl: Duration) -> anyhow::Result<Masters> {
        let own = &c.settings.master;
        let mut ports = vec![(own.hosts_listen.port(), own.api_listen.port())];
        for _ in 1..count {
            ports.push((
                trainyard_testkit::free_port(),
                trainyard_testkit::free_port(),
            ));
        }
        c.settings.master.leader_ttl = ttl;
        c.settings.host.master = ports
            .iter()
            .map(|(h, _)| format!("127.0.0.1:{h}"))
            .collect::<Vec<_>>()
            .join(",");
        c.write_config()?;
        let mut configs = vec![];
        for (i, (h, a)) in ports.iter().enumerate() {
            configs.push(write_variant(c, &format!("master-{}.toml", i + 1), |s| {
                s.master.hosts_listen = ([127, 0, 0, 1], *h).into();
                s.master.api_listen = ([127, 0, 0, 1], *a).into();
                s.api.url = format!("http://127.0.0.1:{a}");
            })?);
        }
        let first = spawn_master(c, "master-1", &configs[0])?;
        let client = c.wait_for_master(WAIT).await?;
        wait_role(&client, "leader", WAIT)
            .await
            .context("master-1 does not lead")?;
        let token = trainyard::secrets::api_token(&c.settings.api, false)?;
        let mut m = Masters {
            procs: vec![first],
            clients: vec![client],
        };
        for (i, (_, a)) in ports.iter().enumerate().skip(1) {
            let name = format!("master-{}", i + 1);
            m.procs.push(spawn_master(c, &name, &configs[i])?);
            let url = format!("http://127.0.0.1:{a}");
            m.clients.push(ApiClient::new(&url, Some(token.clone()))?);
        }
        for i in 1..count {
            m.wait_standby(i).await?;
        }
        Ok(m)
    }

    /// The master that leads now, and its term, once one says it leads.
    async fn leader(&self) -> anyhow::Result<(usize, u64)> {
        let until = Instant::now() + WAIT;
        loop {
            for (i, client) in self.clients.iter().enumerate() {
                if let Some(("leader", Some(term))) = role(client).await.as_ref().map(as_pair) {
                    return Ok((i, term));
                }
            }
            if Instant::now() > until {
                bail!("no master leads after {WAIT:?}");
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until master `i` stands by behind a leader.
    async fn wait_standby(&self, i: usize) -> anyhow::Result<()> {
        wait_role(&self.clients[i], "standby", WAIT)
            .await
            .with_context(|| format!("master-{} does not stand by", i + 1))
    }

    fn stop(&mut self) {
        for p in &mut self.procs {
            p.stop(Duration::from_secs(5));
        }
    }
}

/// A master's `leadership` from its `/v1/health`: role, term and whether
/// it names a leader; `None` while it does not answer.
async fn role(client: &ApiClient) -> Option<(String, Option<u64>, bool)> {
    let health = client.health().await.ok()?;
    let l = &health["leadership"];
    Some((
        l["role"].as_str()?.to_string(),
        l["term"].as_u64(),
        l["leader"].is_object(),
    ))
}

fn as_pair(r: &(String, Option<u64>, bool)) -> (&str, Option<u64>) {
    (r.0.as_str(), r.1)
}

/// Waits until the master says it has `want` as its role (a standby: and
/// knows a leader).
async fn wait_role(client: &ApiClient, want: &str, timeout: Duration) -> anyhow::Result<()> {
    let until = Instant::now() + timeout;
    loop {
        let seen = role(client).await;
        if let Some((r, _, leader)) = &seen {
            if r == want && (want != "standby" || *leader) {
                return Ok(());
            }
        }
        if Instant::now() > until {
            bail!("its role is {seen:?}, not {want}, after {timeout:?}");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// One kill and what followed, from the kill.
struct Sample {
    /// Until a standby led and served its full API.
    elected: Duration,
    /// Until the new leader dispatched the task submitted after the kill
    /// (master clock against the benchmark's, one machine).
    dispatched_ms: i64,
    /// Until every host was connected to the new leader.
    hosts: Duration,
}

/// Kills the leader, measures the takeover, starts the killed master again
/// and waits until it stands by.
async fn round(m: &mut Masters, hosts: usize, limit: Duration) -> anyhow::Result<Sample> {
    let (old, term) = m.leader().await?;
    m.procs[old].kill();
    let killed_ms = now_ms();
    let killed = Instant::now();
    let survivors: Vec<usize> = (0..m.procs.len()).filter(|i| *i != old).collect();
    let (dispatched, handed) = tokio::join!(
        first_dispatch(m, &survivors, limit),
        hosts_back(m, &survivors, term, hosts, killed, limit)
    );
    let dispatched_at = dispatched.context("no task was dispatched after the kill")?;
    let (elected, hosts) = handed?;
    m.procs[old].restart()?;
    m.wait_standby(old).await?;
    Ok(Sample {
        elected,
        dispatched_ms: dispatched_at - killed_ms,
        hosts,
    })
}

/// Submits a no-work task through the first surviving master that accepts
/// it (retrying while none leads); returns when its first attempt was
/// dispatched, in ms since the epoch.
async fn first_dispatch(m: &Masters, survivors: &[usize], limit: Duration) -> anyhow::Result<i64> {
    let until = Instant::now() + limit;
    let task = json!({ "adapter": "noop", "params": {} });
    let id = 'submitted: loop {
        for &i in survivors {
            if let Ok(id) = m.clients[i].submit(&task).await {
                break 'submitted id;
            }
        }
        if Instant::now() > until {
            bail!("no surviving master accepted a task within {limit:?}");
        }
        tokio::time::sleep(POLL).await;
    };
    loop {
        for &i in survivors {
            if let Ok(detail) = m.clients[i].task(id).await {
                if let Some(first) = detail.attempts.iter().min_by_key(|a| a.attempt) {
                    return Ok(first.dispatched_at_ms);
                }
            }
        }
        if Instant::now() > until {
            bail!("task {id} was not dispatched within {limit:?}");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Waits until a survivor leads with a term after `term`, then until
/// `hosts` hosts are connected to it; returns both times since `killed`.
async fn hosts_back(
    m: &Masters,
    survivors: &[usize],
    term: u64,
    hosts: usize,
    killed: Instant,
    limit: Duration,
) -> anyhow::Result<(Duration, Duration)> {
    let (leader, elected) = 'elected: loop {
        for &i in survivors {
            if let Some(("leader", Some(t))) = role(&m.clients[i]).await.as_ref().map(as_pair) {
                if t > term {
                    break 'elected (i, killed.elapsed());
                }
            }
        }
        if killed.elapsed() > limit {
            bail!("no surviving master led within {limit:?} of the kill");
        }
        tokio::time::sleep(POLL).await;
    };
    loop {
        if let Ok(seen) = m.clients[leader].hosts().await {
            if seen.iter().filter(|h| h.connected).count() >= hosts {
                return Ok((elected, killed.elapsed()));
            }
        }
        if killed.elapsed() > limit {
            bail!("fewer than {hosts} hosts reached the new leader within {limit:?} of the kill");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Submits `n` long tasks (the reference trainer, slowed down) and waits
/// until they run.
async fn start_long(m: &Masters, n: usize) -> anyhow::Result<Vec<u64>> {
    let (leader, _) = m.leader().await?;
    let task = json!({
        "adapter": "python-trainer",
        "params": {"episodes": 100_000, "step_delay_ms": 50},
    });
    let mut ids = vec![];
    for _ in 0..n {
        ids.push(m.clients[leader].submit(&task).await?);
    }
    wait_running(m, &ids).await?;
    Ok(ids)
}

/// Waits until every long task that has not ended runs.
async fn wait_running(m: &Masters, ids: &[u64]) -> anyhow::Result<()> {
    let until = Instant::now() + WAIT;
    let (leader, _) = m.leader().await?;
    for &id in ids {
        loop {
            let status = m.clients[leader].task(id).await?.task.status;
            if status == TaskStatus::Running || status.is_terminal() {
                break;
            }
            if Instant::now() > until {
                bail!("long task {id} is {} after {WAIT:?}", status.as_str());
            }
            tokio::time::sleep(POLL).await;
        }
    }
    Ok(())
}

/// What the failovers did to the long tasks: attempts beyond the first,
/// and tasks ended; then cancels them.
async fn end_long(m: &Masters, ids: &[u64]) -> anyhow::Result<(usize, usize)> {
    let (leader, _) = m.leader().await?;
    let (mut requeued, mut ended) = (0, 0);
    for &id in ids {
        let detail = m.clients[leader].task(id).await?;
        requeued += detail.attempts.len().saturating_sub(1);
        if detail.task.status.is_terminal() {
            ended += 1;
        } else {
            m.clients[leader].cancel(id).await?;
        }
    }
    Ok((requeued, ended))
}

/// `rounds` failovers with these timers and leader TTL; their rows.
async fn timers_run(
    env: &BenchEnv,
    name: &str,
    timers: Timers,
    ttl: Duration,
    rounds: usize,
) -> anyhow::Result<Vec<Row>> {
    let mut stage = env.stage(&format!("failover-{name}"), "postgres").await?;
    let c = &mut stage.cluster;
    c.settings.timers = timers;
    c.settings.host.slots = SLOTS;
    c.settings.host.adapters = vec![
        AdapterEntry::new(env.adapter("noop"), &[]),
        AdapterEntry::new(env.adapter("python-trainer"), &["python3"]),
    ];
    let mut m = Masters::start(c, MASTERS, ttl).await?;
    let hosts = env.size(4, 2);
    let mut procs = (1..=hosts)
        .map(|i| c.spawn_host(&format!("host-{i}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let (leader, _) = m.leader().await?;
    c.wait_for_hosts(&m.clients[leader], hosts, WAIT).await?;
    let long = start_long(&m, env.size(4, 1)).await?;
    // Room for a failover that takes the whole TTL, and for slow hosts.
    let limit = ttl + WAIT;
    let mut samples = vec![];
    for r in 0..rounds {
        wait_running(&m, &long).await?;
        let s = round(&mut m, hosts, limit)
            .await
            .with_context(|| format!("{name} round {r}"))?;
        eprintln!(
            "   {name} round {r}: led +{} ms, first dispatch +{} ms, all hosts +{} ms",
            s.elected.as_millis(),
            s.dispatched_ms,
            s.hosts.as_millis()
        );
        samples.push(s);
    }
    let (requeued, ended) = end_long(&m, &long).await?;
    for p in &mut procs {
        p.stop(Duration::from_secs(5));
    }
    m.stop();
    let setup = format!(
        "{MASTERS} masters, leader TTL {:.0} s; {hosts} hosts × {SLOTS} slots, {} long tasks running; {rounds} kill(s)",
        ttl.as_secs_f64(),
        long.len()
    );
    let mut rows = vec![Row::info("failover", format!("{name} timers"), setup)];
    rows.extend(sample_rows(name, ttl, hosts, &samples));
    rows.push(Row::info(
        "failover",
        format!("{name}: long tasks across the kills"),
        format!(
            "{requeued} attempt(s) requeued, {ended} of {} ended",
            long.len()
        ),
    ));
    Ok(rows)
}

/// Median and worst, in seconds.
fn median_worst(mut ms: Vec<f64>) -> (f64, f64) {
    let worst = ms.iter().cloned().fold(0.0, f64::max);
    let (median, _) = median_p99(&mut ms).unwrap_or_default();
    (median / 1e3, worst / 1e3)
}

fn sample_rows(name: &str, ttl: Duration, hosts: usize, samples: &[Sample]) -> Vec<Row> {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let (led, led_worst) = median_worst(samples.iter().map(|s| ms(s.elected)).collect());
    let (first, first_worst) =
        median_worst(samples.iter().map(|s| s.dispatched_ms as f64).collect());
    let (all, all_worst) = median_worst(samples.iter().map(|s| ms(s.hosts)).collect());
    let target = ttl + Duration::from_secs(1);
    vec![
        Row::info(
            "failover",
            format!("{name}: kill → a standby leads and serves (median; worst)"),
            format!("{led:.2} s; {led_worst:.2} s"),
        ),
        Row::checked(
            "failover",
            format!("{name}: kill → first dispatch by the new leader (median; worst)"),
            format!("{first:.2} s; {first_worst:.2} s"),
            format!("≤ leader TTL + 1 s = {:.0} s", target.as_secs_f64()),
            first_worst <= target.as_secs_f64(),
        ),
        Row::info(
            "failover",
            format!("{name}: kill → all {hosts} hosts on the new leader (median; worst)"),
            format!("{all:.2} s; {all_worst:.2} s"),
        ),
    ]
}

/// One saturated dispatch run: its rate, and the CPU time the standbys
/// used during it, as a share of one core.
struct Load {
    rate: f64,
    standbys_cpu: f64,
}

/// The no-work dispatch rate with one master and with two standbys beside
/// it, alternately, the best of each (a shared machine's noise only ever
/// lowers a rate); their rows.
async fn throughput(env: &BenchEnv) -> anyhow::Result<Vec<Row>> {
    let tasks: usize = env.size(5_000, 60);
    let (hosts, slots) = env.size((16, 32), (2, 4));
    let reps = env.size(3, 1);
    let (mut alone, mut beside, mut cpu) = (0.0f64, 0.0f64, 0.0f64);
    for rep in 0..reps {
        let one = dispatch_rate(env, 1, rep, (tasks, hosts, slots)).await?;
        alone = alone.max(one.rate);
        let three = dispatch_rate(env, MASTERS, rep, (tasks, hosts, slots)).await?;
        beside = beside.max(three.rate);
        cpu = cpu.max(three.standbys_cpu);
    }
    let ratio = beside / alone.max(1.0);
    let standbys = MASTERS - 1;
    Ok(vec![
        Row::info(
            "failover",
            "dispatch setup (postgres)",
            format!(
                "{tasks} no-work tasks at once, {hosts} light hosts × {slots} slots; best of {reps} run(s) each"
            ),
        ),
        Row::info(
            "failover",
            format!("dispatch throughput, 1 master / {MASTERS} masters (postgres)"),
            format!("{alone:.0} / {beside:.0} tasks/s"),
        ),
        Row::checked(
            "failover",
            format!("dispatch rate with {standbys} standbys / without"),
            format!("{ratio:.2} ({:+.0} %)", (ratio - 1.0) * 100.0),
            format!(">= {:.2}", 1.0 - STANDBY_BUDGET),
            ratio >= 1.0 - STANDBY_BUDGET,
        ),
        Row::info(
            "failover",
            format!("CPU of the {standbys} standbys during the load (worst run)"),
            format!("{:.1} % of a core", cpu * 100.0),
        ),
    ])
}

/// The saturation phase of the dispatch benchmark with `masters` masters
/// (the first leads): tasks over the time from the first submission to the
/// last completion. `size` is tasks, light hosts and slots per host.
async fn dispatch_rate(
    env: &BenchEnv,
    masters: usize,
    rep: usize,
    (tasks, hosts, slots): (usize, usize, u32),
) -> anyhow::Result<Load> {
    let name = format!("failover-dispatch-{masters}m-{rep}");
    let mut stage = env.stage(&name, "postgres").await?;
    let ttl = trainyard_master::leadership::DEFAULT_LEADER_TTL;
    let mut m = Masters::start(&mut stage.cluster, masters, ttl).await?;
    let fleet = Fleet::start(&stage.cluster, &FleetSpec::noop(env, hosts, slots)).await?;
    let client = &m.clients[0];
    stage.cluster.wait_for_hosts(client, hosts, WAIT).await?;
    let params = json!({ "spawn": false });
    let warm = env.size(1_000, 10);
    submit(client, &params, warm, &mut Sent::new()).await?;
    wait_terminal(client, warm, Duration::from_secs(120)).await?;
    let standbys: Vec<u32> = m.procs[1..].iter().filter_map(Process::pid).collect();
    let cpu = || -> Duration {
        let t = |pid| super::probe::cpu_time(pid).unwrap_or_default();
        standbys.iter().map(|p| t(*p)).sum()
    };
    let (cpu_before, started) = (cpu(), Instant::now());
    let sent = submit_all(client, &params, tasks).await?;
    wait_terminal(client, warm + tasks, Duration::from_secs(600)).await?;
    let standbys_cpu = (cpu() - cpu_before).as_secs_f64() / started.elapsed().as_secs_f64();
    let done = collect(client, &sent).await?;
    fleet.shutdown().await;
    m.stop();
    if let Some(t) = done
        .iter()
        .find(|t| t.status != TaskStatus::Completed || t.runs != 1)
    {
        bail!(
            "task {} ended {} after {} runs; every no-work task must complete in one",
            t.id,
            t.status.as_str(),
            t.runs
        );
    }
    let first_sent = *sent.values().min().context("nothing submitted")?;
    let last_done = done.iter().map(|t| t.finished).max().unwrap_or(first_sent);
    let rate = tasks as f64 / ((last_done - first_sent).max(1) as f64 / 1e3);
    Ok(Load { rate, standbys_cpu })
}
