//! Chaos: many short training tasks on three hosts while a seeded random
//! schedule kills and restarts the master and the hosts, freezes hosts
//! (sometimes past what a lease survives, sometimes not), and restarts Redis
//! empty. Tasks keep the default `max_attempts`, and every attempt is
//! accounted for:
//!
//! - every task ends exactly once: COMPLETED by its last attempt, carrying
//!   that attempt's metrics, or FAILED only after using up its attempts;
//! - every attempt that did not complete is explained by a disruption that
//!   could have ended it (its host killed, or frozen for long enough, the
//!   master down, Redis emptied), while the attempt was out, and no
//!   disruption explains two attempts of one task;
//! - no two attempts of a task ever ran at the same time.
//!
//! On PostgreSQL a standby master runs beside the cluster's own, and the
//! schedule kills or freezes whichever master leads, rather than restarting
//! the one master: a standby takes over, and the same rules hold.
//!
//! `TRAINYARD_CHAOS_SEED` replays a schedule (the seed is printed);
//! `TRAINYARD_CHAOS_SECS` makes the chaos last longer (default 45 s per
//! database).

// `serial()` holds a std mutex across each whole test on purpose: the
// multi-process tests take the machine's ports and CPU one at a time.
#![allow(clippy::await_holding_lock)]

use crate::common;

use common::{
    assert_attempts_never_overlapped, now_ms, read_trace, serial, test_timers, traced, Setup,
    Standbys, TestCluster,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use trainyard_master::model::{Attempt, AttemptOutcome, TaskDetail, TaskStatus};

const HOSTS: usize = 3;
const TASKS_PER_WAVE: usize = 8;
/// The default of `master.default_max_attempts`, which the tasks keep.
const MAX_ATTEMPTS: u32 = 3;
/// How long after a disruption its effects may still end an attempt (a
/// reconnect, a lease rebuilt, a dispatch retried).
const LINGER_MS: i64 = 1000;

fn seed() -> u64 {
    std::env::var("TRAINYARD_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().random())
}

fn chaos_duration() -> Duration {
    let secs = std::env::var("TRAINYARD_CHAOS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(45);
    Duration::from_secs(secs)
}

/// The longest stall of a host (or of the master) that its leases survive:
/// a renewal every heartbeat, each good for `lease_ttl - margin`.
fn stall_budget() -> Duration {
    let t = test_timers();
    t.lease_ttl - t.effective_margin() - t.heartbeat_interval
}

/// A stall this long or longer may cost an attempt; a shorter one must not.
/// Half the budget, so that a loaded machine's own hiccups never make a
/// short freeze look costly.
fn costly_stall() -> Duration {
    stall_budget() / 2
}

/// Something the schedule did to the cluster, and when it was in effect
/// (milliseconds since the epoch, the clock the master records attempts on).
#[derive(Clone, Debug)]
struct Disruption {
    kind: Kind,
    from_ms: i64,
    to_ms: i64,
}

#[derive(Clone, Debug, PartialEq)]
enum Kind {
    MasterDown,
    /// The leading master killed (a standby takes over; it comes back as
    /// a standby).
    LeaderDown,
    /// The leading master frozen, sometimes past its leader lease.
    LeaderFrozen,
    HostDown(String),
    HostFrozen(String),
    RedisEmptied,
}

impl Disruption {
    fn lasted(&self) -> Duration {
        Duration::from_millis((self.to_ms - self.from_ms).max(0) as u64)
    }

    /// Whether this disruption could have ended `attempt` without success.
    fn explains(&self, attempt: &Attempt) -> bool {
        let ended = attempt.finished_at_ms.unwrap_or(i64::MAX);
        let overlaps = self.from_ms <= ended && self.to_ms + LINGER_MS >= attempt.dispatched_at_ms;
        if !overlaps {
            return false;
        }
        let undelivered = matches!(
            attempt.outcome,
            Some(AttemptOutcome::Undelivered | AttemptOutcome::Rejected)
        );
        match &self.kind {
            Kind::HostDown(host) => *host == attempt.host,
            Kind::HostFrozen(host) => *host == attempt.host && self.lasted() >= costly_stall(),
            // A master that is back within the budget costs running attempts
            // nothing, but a dispatch it had committed and not sent is lost.
            Kind::MasterDown | Kind::LeaderDown | Kind::LeaderFrozen => {
                undelivered || self.lasted() >= costly_stall()
            }
            // Hosts rebuild their leases; only a dispatch taken while Redis
            // was away is lost.
            Kind::RedisEmptied => undelivered,
        }
    }
}

async fn sleep_ms(rng: &mut StdRng, lo: u64, hi: u64) {
    tokio::time::sleep(Duration::from_millis(rng.random_range(lo..hi))).await;
}

/// Submits, retrying while the master is down.
async fn submit_wave(c: &TestCluster, wave: usize, seed: u64) -> Vec<(u64, String)> {
    let mut out = vec![];
    for i in 0..TASKS_PER_WAVE {
        let trace = format!("trace-{wave}-{i}.jsonl");
        let task = json!({
            "adapter": "test-trainer",
            "params": {
                "episodes": 80,
                "checkpoint_every": 10,
                "step_delay_ms": 10,
                "seed": seed % 1000 + (wave * TASKS_PER_WAVE + i) as u64,
                "trace_file": trace,
            },
        });
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            // A submission whose answer was lost may have been stored; the
            // checks below go through the tasks submitted, so a duplicate
            // would only add a task, never hide one.
            match c.client().submit(&task).await {
                Ok(id) => {
                    out.push((id, trace));
                    break;
                }
                Err(e) if Instant::now() < until => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("cannot submit during chaos: {e}"),
            }
        }
    }
    out
}

/// The leader lease of the masters on PostgreSQL.
const LEADER_TTL: Duration = Duration::from_secs(3);

/// The process of master `i` (0: the cluster's own).
fn master_process<'a>(
    c: &'a mut TestCluster,
    standbys: &'a mut Standbys,
    i: usize,
) -> &'a mut trainyard::cluster::Process {
    match i {
        0 => c.master(),
        i => &mut standbys.processes[i - 1],
    }
}

/// Kills or freezes whichever master leads; `None` if none was found
/// leading.
async fn disrupt_leader(
    c: &mut TestCluster,
    standbys: &mut Standbys,
    rng: &mut StdRng,
    kill: bool,
) -> Option<Kind> {
    let leader = standbys.leader(Duration::from_secs(10)).await?;
    let process = master_process(c, standbys, leader);
    if kill {
        process.kill();
        sleep_ms(rng, 100, 1500).await;
        process.restart().unwrap();
        Some(Kind::LeaderDown)
    } else {
        // Sometimes past the leader lease, sometimes not.
        let frozen = rng.random_range(300..(LEADER_TTL.as_millis() as u64) * 4 / 3);
        process.pause();
        tokio::time::sleep(Duration::from_millis(frozen)).await;
        process.resume();
        Some(Kind::LeaderFrozen)
    }
}

/// Runs the seeded schedule for the chaos duration; returns what it did.
async fn run_schedule(
    c: &mut TestCluster,
    standbys: &mut Option<Standbys>,
    rng: &mut StdRng,
    seed: u64,
    tasks: &mut Vec<(u64, String)>,
) -> Vec<Disruption> {
    let started = Instant::now();
    let mut wave = 1;
    let mut done = vec![];
    // Freezes from short to well past what a lease survives.
    let longest_freeze = (test_timers().lease_ttl.as_millis() as u64) * 7 / 4;
    while started.elapsed() < chaos_duration() {
        sleep_ms(rng, 300, 2000).await;
        let host = format!("host-{}", rng.random_range(1..=HOSTS));
        let from_ms = now_ms();
        let kind = match (rng.random_range(0..10), standbys.as_mut()) {
            (n @ (0 | 1), Some(standbys)) => match disrupt_leader(c, standbys, rng, n == 0).await {
                Some(kind) => kind,
                None => continue,
            },
            (0 | 1, None) => {
                c.master().kill();
                sleep_ms(rng, 100, 1500).await;
                c.start_master().await;
                Kind::MasterDown
            }
            (2..=4, _) => {
                c.host(&host).kill();
                sleep_ms(rng, 100, 2000).await;
                c.host(&host).restart().unwrap();
                Kind::HostDown(host)
            }
            (5 | 6, _) => {
                let frozen = rng.random_range(300..longest_freeze);
                c.host(&host).pause();
                tokio::time::sleep(Duration::from_millis(frozen)).await;
                c.host(&host).resume();
                Kind::HostFrozen(host)
            }
            (7, _) => {
                c.redis.restart_empty();
                Kind::RedisEmptied
            }
            _ => {
                tasks.extend(submit_wave(c, wave, seed).await);
                wave += 1;
                continue;
            }
        };
        done.push(Disruption {
            kind,
            from_ms,
            to_ms: now_ms(),
        });
    }
    done
}

/// Checks one finished task against the rules above; returns how many of
/// its attempts did not complete.
fn account(
    seed: u64,
    done: &TaskDetail,
    events: &[common::TraceEvent],
    chaos: &[Disruption],
) -> usize {
    let t = &done.task;
    let id = t.id;
    let completed = done
        .attempts
        .iter()
        .filter(|a| a.outcome == Some(AttemptOutcome::Completed))
        .count();
    match t.status {
        TaskStatus::Completed => {
            assert_eq!(
                completed, 1,
                "seed {seed}: task {id} completed {completed} times"
            );
            let last = done.attempts.last().unwrap();
            assert_eq!(last.attempt, t.attempt, "seed {seed}: task {id}");
            assert_eq!(
                last.outcome,
                Some(AttemptOutcome::Completed),
                "seed {seed}: task {id}: the completion is its last attempt"
            );
            assert_eq!(
                last.metrics.as_ref(),
                Some(&t.result.as_ref().unwrap().metrics),
                "seed {seed}: task {id} carries the metrics of its last attempt"
            );
            assert!(
                traced(events, t.attempt, "end"),
                "seed {seed}: task {id}: attempt {} ran to its end",
                t.attempt
            );
        }
        TaskStatus::Failed => {
            assert_eq!(
                completed, 0,
                "seed {seed}: task {id} completed, then failed"
            );
            assert_eq!(
                t.runs, MAX_ATTEMPTS,
                "seed {seed}: task {id} failed before using up its attempts: {:?}",
                t.error
            );
        }
        other => panic!("seed {seed}: task {id} ended {other}"),
    }
    assert!(
        t.runs <= MAX_ATTEMPTS,
        "seed {seed}: task {id} ran {} attempts",
        t.runs
    );

    let lost: Vec<&Attempt> = done
        .attempts
        .iter()
        .filter(|a| a.outcome != Some(AttemptOutcome::Completed))
        .collect();
    let mut used = BTreeSet::new();
    for a in &lost {
        let explaining: Vec<usize> = (0..chaos.len()).filter(|&i| chaos[i].explains(a)).collect();
        assert!(
            !explaining.is_empty(),
            "seed {seed}: task {id}: nothing in the schedule explains attempt {} on {} ({:?}: {:?}), dispatched at {} ms, ended at {:?} ms\nschedule: {chaos:#?}",
            a.attempt,
            a.host,
            a.outcome,
            a.error,
            a.dispatched_at_ms,
            a.finished_at_ms
        );
        used.extend(explaining);
    }
    assert!(
        used.len() >= lost.len(),
        "seed {seed}: task {id} lost {} attempts, more than the {} disruptions that hit it explain: {:#?}",
        lost.len(),
        used.len(),
        done.attempts
    );
    assert_attempts_never_overlapped(events);
    lost.len()
}

async fn chaos(backend: &'static str) {
    let _serial = serial();
    let seed = seed();
    println!("chaos on {backend}: TRAINYARD_CHAOS_SEED={seed}");
    eprintln!("chaos on {backend}: TRAINYARD_CHAOS_SEED={seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut setup = Setup::new(backend);
    setup.slots = 2;
    setup.adapters = vec![("test-trainer", vec!["python3"])];
    let mut c = TestCluster::prepare(setup).await;
    let mut standbys = (backend == "postgres").then(|| c.plan_standbys(1, LEADER_TTL));
    c.start_master().await;
    if let Some(standbys) = &mut standbys {
        let url = c.cluster.settings.database_url.clone();
        c.start_standbys(standbys, &url).await;
    }
    for i in 1..=HOSTS {
        c.start_host(&format!("host-{i}"));
    }
    c.wait_for_hosts(HOSTS).await;

    let mut tasks = submit_wave(&c, 0, seed).await;
    let chaos = run_schedule(&mut c, &mut standbys, &mut rng, seed, &mut tasks).await;
    let actions: Vec<String> = chaos
        .iter()
        .map(|d| format!("{:?} {} ms", d.kind, d.lasted().as_millis()))
        .collect();
    println!("chaos actions ({}): {}", actions.len(), actions.join(", "));

    // Calm: everything up again, then every task must end.
    for i in 1..=HOSTS {
        let h = c.host(&format!("host-{i}"));
        h.resume();
        if !h.running() {
            h.restart().unwrap();
        }
    }
    c.master().resume();
    if !c.master().running() {
        c.start_master().await;
    }
    for standby in standbys.iter_mut().flat_map(|s| s.processes.iter_mut()) {
        standby.resume();
        if !standby.running() {
            standby.restart().unwrap();
        }
    }
    let (mut lost, mut failed) = (0, 0);
    for (id, trace) in &tasks {
        let done = c
            .wait_for(*id, Duration::from_secs(240), "a final status", |d| {
                d.task.status.is_terminal()
            })
            .await;
        lost += account(seed, &done, &read_trace(&c.trace(trace)), &chaos);
        failed += usize::from(done.task.status == TaskStatus::Failed);
    }
    let apis = match &standbys {
        Some(standbys) => standbys.apis.clone(),
        None => vec![c.cluster.settings.api.url.clone()],
    };
    leaders_counts_agree(&apis, tasks.len(), failed).await;
    println!(
        "chaos on {backend}: {} tasks ended once each ({failed} failed after {MAX_ATTEMPTS} attempts); \
         {lost} attempts lost, each explained by the schedule; no overlapping attempts",
        tasks.len()
    );
}

/// Waits until the leading master's counts by status, which its scheduler
/// keeps through the kills, freezes and failovers rather than reading them
/// from the database, show what the database does: `ended` tasks, all
/// final, `failed` of them FAILED.
async fn leaders_counts_agree(apis: &[String], ended: usize, failed: usize) {
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let mut seen = vec![];
        for api in apis {
            let Some(body) = common::health(api).await else {
                continue;
            };
            let counts = &body["tasks"];
            let n = |status: &str| counts[status].as_u64().unwrap_or(0) as usize;
            if counts.is_object()
                && n("COMPLETED") == ended - failed
                && n("FAILED") == failed
                && ["PENDING", "DISPATCHED", "RUNNING", "CANCELLED"]
                    .iter()
                    .all(|s| n(s) == 0)
            {
                return;
            }
            seen.push(counts.clone());
        }
        assert!(
            Instant::now() < until,
            "no master counts the {ended} tasks ended ({failed} failed) by status: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn chaos_never_loses_duplicates_or_overlaps_a_task_on_sqlite() {
    chaos("sqlite").await;
}

#[tokio::test]
async fn chaos_never_loses_duplicates_or_overlaps_a_task_on_postgres() {
    chaos("postgres").await;
}

/// The accounting rules themselves, on made-up attempts: a lost attempt is
/// explained only by a disruption that could have ended it.
#[test]
fn only_a_disruption_that_could_end_an_attempt_explains_it() {
    let lost = |host: &str, outcome, from: i64, to: i64| Attempt {
        attempt: 1,
        host: host.to_owned(),
        adapter_version: None,
        slot: Some(0),
        dispatched_at_ms: from,
        started_at_ms: Some(from),
        finished_at_ms: Some(to),
        outcome: Some(outcome),
        error: None,
        metrics: None,
        assignment: None,
    };
    let at = |kind, from_ms, to_ms| Disruption {
        kind,
        from_ms,
        to_ms,
    };
    let long = costly_stall().as_millis() as i64;
    let a = lost("host-1", AttemptOutcome::LeaseLost, 10_000, 20_000);

    assert!(at(Kind::HostDown("host-1".into()), 12_000, 13_000).explains(&a));
    assert!(!at(Kind::HostDown("host-2".into()), 12_000, 13_000).explains(&a));
    // Before the dispatch, or after the attempt had ended: not its cause.
    assert!(!at(Kind::HostDown("host-1".into()), 1_000, 2_000).explains(&a));
    assert!(!at(Kind::HostDown("host-1".into()), 21_000, 22_000).explains(&a));
    // A freeze shorter than a lease survives costs nothing.
    assert!(at(Kind::HostFrozen("host-1".into()), 12_000, 12_000 + long).explains(&a));
    assert!(!at(Kind::HostFrozen("host-1".into()), 12_000, 12_000 + long - 1).explains(&a));
    // A short master outage or an emptied Redis loses dispatches only.
    assert!(!at(Kind::MasterDown, 12_000, 13_000).explains(&a));
    assert!(!at(Kind::RedisEmptied, 12_000, 12_050).explains(&a));
    let undelivered = lost("host-1", AttemptOutcome::Undelivered, 10_000, 16_000);
    assert!(at(Kind::MasterDown, 9_500, 10_500).explains(&undelivered));
    assert!(at(Kind::RedisEmptied, 10_100, 10_150).explains(&undelivered));
}
