//! Chaos: many short training tasks on three hosts while a seeded random
//! schedule kills and restarts the master and the hosts, freezes hosts past
//! their leases, and restarts Redis empty. At the end every task must have
//! ended exactly once, COMPLETED by its last attempt and carrying that
//! attempt's metrics, and no two attempts of a task may ever have run at the
//! same time.
//!
//! `TRAINYARD_CHAOS_SEED` replays a schedule (the seed is printed);
//! `TRAINYARD_CHAOS_SECS` makes the chaos last longer (default 45 s per
//! database).

// `serial()` holds a std mutex across each whole test on purpose: the
// multi-process tests take the machine's ports and CPU one at a time.
#![allow(clippy::await_holding_lock)]

mod common;

use common::{assert_attempts_never_overlapped, read_trace, serial, Setup, TestCluster};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use std::time::{Duration, Instant};
use trainyard_master::model::{AttemptOutcome, TaskStatus};

const HOSTS: usize = 3;
const TASKS_PER_WAVE: usize = 8;

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

async fn sleep_ms(rng: &mut StdRng, lo: u64, hi: u64) {
    tokio::time::sleep(Duration::from_millis(rng.random_range(lo..hi))).await;
}

/// Submits, retrying while the master is down.
async fn submit_wave(c: &TestCluster, wave: usize, seed: u64) -> Vec<(u64, std::path::PathBuf)> {
    let mut out = vec![];
    for i in 0..TASKS_PER_WAVE {
        let trace = c.cluster.dir.join(format!("trace-{wave}-{i}.jsonl"));
        let task = json!({
            "adapter": "python-trainer",
            "max_attempts": 100,
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
            // check below counts tasks by their traces, so a duplicate would
            // only add a task, never hide one.
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

async fn chaos(backend: &'static str) {
    let _serial = serial();
    let seed = seed();
    println!("chaos on {backend}: TRAINYARD_CHAOS_SEED={seed}");
    eprintln!("chaos on {backend}: TRAINYARD_CHAOS_SEED={seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut setup = Setup::new(backend);
    setup.slots = 2;
    let mut c = TestCluster::start(setup, HOSTS).await;

    let mut tasks = submit_wave(&c, 0, seed).await;
    let started = Instant::now();
    let mut wave = 1;
    let mut actions = vec![];
    while started.elapsed() < chaos_duration() {
        sleep_ms(&mut rng, 300, 2000).await;
        let host = format!("host-{}", rng.random_range(1..=HOSTS));
        match rng.random_range(0..10) {
            0 | 1 => {
                actions.push("kill master".to_string());
                c.master().kill();
                sleep_ms(&mut rng, 100, 1500).await;
                c.start_master().await;
            }
            2..=4 => {
                actions.push(format!("kill {host}"));
                c.host(&host).kill();
                sleep_ms(&mut rng, 100, 2000).await;
                c.host(&host).restart().unwrap();
            }
            5 | 6 => {
                // Sometimes past the 2 s lease, sometimes not.
                let frozen = rng.random_range(300..3500);
                actions.push(format!("freeze {host} {frozen} ms"));
                c.host(&host).pause();
                tokio::time::sleep(Duration::from_millis(frozen)).await;
                c.host(&host).resume();
            }
            7 => {
                actions.push("restart redis empty".to_string());
                c.redis.restart_empty();
            }
            _ => {
                actions.push(format!("submit wave {wave}"));
                tasks.extend(submit_wave(&c, wave, seed).await);
                wave += 1;
            }
        }
    }
    println!("chaos actions ({}): {}", actions.len(), actions.join(", "));

    // Calm: everything up again, then every task must finish.
    for i in 1..=HOSTS {
        let h = c.host(&format!("host-{i}"));
        h.resume();
        if !h.running() {
            h.restart().unwrap();
        }
    }
    if !c.master().running() {
        c.start_master().await;
    }
    for (id, trace) in &tasks {
        let done = c
            .wait_for(*id, Duration::from_secs(240), "a final status", |d| {
                d.task.status.is_terminal()
            })
            .await;
        let t = &done.task;
        assert_eq!(
            t.status,
            TaskStatus::Completed,
            "seed {seed}: task {id} ended {}: {:?}\n{:#?}",
            t.status,
            t.error,
            done.attempts
        );
        let completed: Vec<_> = done
            .attempts
            .iter()
            .filter(|a| a.outcome == Some(AttemptOutcome::Completed))
            .collect();
        assert_eq!(
            completed.len(),
            1,
            "seed {seed}: task {id} completed {} times",
            completed.len()
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
        let events = read_trace(trace);
        assert!(
            events.iter().any(|(a, e, _)| *a == t.attempt && e == "end"),
            "seed {seed}: task {id}: attempt {} ran to its end",
            t.attempt
        );
        assert_attempts_never_overlapped(&events);
    }
    let retried = tasks.len();
    println!(
        "chaos on {backend}: {retried} tasks, all completed exactly once, no overlapping attempts"
    );
}

#[tokio::test]
async fn chaos_never_loses_duplicates_or_overlaps_a_task_on_sqlite() {
    chaos("sqlite").await;
}

#[tokio::test]
async fn chaos_never_loses_duplicates_or_overlaps_a_task_on_postgres() {
    chaos("postgres").await;
}
