//! `trainyard-bench`: how many tasks and hosts one master carries, how fast
//! it notices a dead host, and what it adds on top of the trainer's own cost.
//!
//! Every benchmark runs against real Redis (a private `redis-server`), the
//! real database (SQLite, and PostgreSQL from `TRAINYARD_TEST_DATABASE_URL`)
//! and a real master process over real TCP. Hosts are either real host
//! processes or light hosts: the host library run many times in this
//! process, each with its own TCP connection, lease layer and adapter
//! runtime slot ([`fleet`]).
//!
//! Benchmarks are measurements, not tests: they print what they measured
//! next to the target and never fail on a figure. `--smoke` runs each at a
//! tiny size so `make test` keeps them working.
//!
//! # Layout
//! - [`env`]: Redis, databases, binaries and the run directory.
//! - [`fleet`]: light hosts in this process.
//! - [`report`]: rows, the table, figures.
//! - [`probe`]: CPU and memory of a process, from `/proc`.
//! - [`users`]: the users' side of a benchmark on a thread of its own.
//! - one module per benchmark: [`dispatch`], [`adapter`], [`recovery`],
//!   [`failover`], [`storm`], [`sweep`], [`memory`], [`containment`], [`dashboard`],
//!   [`python_env`].

pub mod adapter;
pub mod api;
pub mod containment;
pub mod cpu;
pub mod dashboard;
pub mod dispatch;
pub mod env;
pub mod failover;
pub mod fleet;
pub mod memory;
pub mod probe;
pub mod python_env;
pub mod recovery;
pub mod report;
pub mod scale;
pub mod storm;
pub mod sweep;
pub mod users;

use clap::{Parser, ValueEnum};
use report::Row;

/// The benchmarks, in the order `all` runs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Bench {
    /// Every benchmark below, one table.
    All,
    /// No-work tasks through the full path: tasks/s and latency.
    Dispatch,
    /// The same with a process per task (`true`), then with 20 lines of
    /// progress and logs per task: what watching trainers costs.
    Spawn,
    /// Adapter instantiation and calls per task, next to `python3 -c pass`.
    Adapter,
    /// SIGKILL a host mid-task: time until the task runs again, and completes.
    Recovery,
    /// Three masters on PostgreSQL, the leader killed with SIGKILL: time
    /// until a standby dispatches and every host is back; what two
    /// standbys cost the dispatch rate.
    Failover,
    /// 1,000 light hosts, master restarted: time until all are back.
    Storm,
    /// The recovery sweep and start-up reconciliation with 10,000 live tasks.
    Sweep,
    /// Host RSS idle and per task; master RSS with 1,000 hosts, 100,000 tasks.
    Memory,
    /// Dispatch throughput over plain TCP, TLS and mutual TLS (SQLite).
    Tls,
    /// What containment adds to one attempt, next to `python3 -c pass`.
    Containment,
    /// The dashboard's first visit with 10,000 tasks, in headless Chromium.
    Dashboard,
    /// 5,000 light hosts × 8 slots and 1,000,000 queued tasks on one master:
    /// RSS, time to admit them after a restart, dispatch latency.
    Scale,
    /// Python environments: a cold build, a warm reuse, a reuse after restart.
    PythonEnv,
}

/// Which databases the database-bound benchmarks use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Backends {
    Both,
    Sqlite,
    Postgres,
}

impl Backends {
    pub fn list(self) -> Vec<&'static str> {
        match self {
            Backends::Both => vec!["sqlite", "postgres"],
            Backends::Sqlite => vec!["sqlite"],
            Backends::Postgres => vec!["postgres"],
        }
    }
}

/// The benchmarks of trainyard, printed as one table.
#[derive(Debug, Parser)]
#[command(name = "trainyard-bench", version)]
pub struct Args {
    /// Which benchmark to run.
    #[arg(value_enum, default_value = "all")]
    pub bench: Bench,
    /// Run each benchmark at a tiny size: checks they work, measures nothing.
    #[arg(long)]
    pub smoke: bool,
    /// The databases for dispatch, spawn and sweep (failover runs on
    /// PostgreSQL only, and not with `sqlite`). PostgreSQL is reached
    /// through `TRAINYARD_TEST_DATABASE_URL` (a database is created per run).
    #[arg(long, value_enum, default_value = "both")]
    pub backends: Backends,
    /// Also write the table as Markdown to this file.
    #[arg(long)]
    pub markdown: Option<std::path::PathBuf>,
}

/// Runs the chosen benchmarks and prints their table.
pub async fn run(args: Args) -> anyhow::Result<()> {
    // A thousand light hosts need two sockets each; the master inherits it.
    trainyard::roles::raise_open_file_limit();
    let env = env::BenchEnv::new(args.smoke)?;
    let all = args.bench == Bench::All;
    let wants = |b: Bench| all || args.bench == b;
    let mut rows: Vec<Row> = vec![];

    let steps: [(Bench, &str); 13] = [
        (Bench::Dispatch, "dispatch"),
        (Bench::Spawn, "spawn"),
        (Bench::Adapter, "adapter"),
        (Bench::Recovery, "recovery"),
        (Bench::Failover, "failover"),
        (Bench::Storm, "storm"),
        (Bench::Sweep, "sweep"),
        (Bench::Memory, "memory"),
        (Bench::Tls, "tls"),
        (Bench::Containment, "containment"),
        (Bench::Dashboard, "dashboard"),
        (Bench::PythonEnv, "python env"),
        (Bench::Scale, "scale"),
    ];
    for (bench, name) in steps {
        if !wants(bench) {
            continue;
        }
        eprintln!("== {name}");
        let result = match bench {
            Bench::Dispatch => dispatch::run(&env, args.backends, dispatch::Work::Nothing).await,
            Bench::Spawn => dispatch::run(&env, args.backends, dispatch::Work::Spawn).await,
            Bench::Adapter => adapter::run(&env).await,
            Bench::Recovery => recovery::run(&env).await,
            Bench::Failover => failover::run(&env, args.backends).await,
            Bench::Storm => storm::run(&env).await,
            Bench::Sweep => sweep::run(&env, args.backends).await,
            Bench::Memory => memory::run(&env).await,
            Bench::Tls => dispatch::tls::run(&env).await,
            Bench::Containment => containment::run(&env).await,
            Bench::Dashboard => dashboard::run(&env).await,
            Bench::PythonEnv => python_env::run(&env).await,
            Bench::Scale => scale::run(&env).await,
            Bench::All => unreachable!("`all` is not a step"),
        };
        match result {
            Ok(mut r) => {
                for row in &r {
                    eprintln!("   {row}");
                }
                rows.append(&mut r);
            }
            Err(e) => {
                eprintln!("   {name} failed: {e:#}");
                rows.push(Row::failed(name, "run", &e));
            }
        }
    }
    let failures: Vec<&Row> = rows
        .iter()
        .filter(|r| r.verdict == report::Verdict::Failed)
        .collect();
    let table = report::render(&rows, args.smoke);
    println!("{table}");
    if let Some(path) = &args.markdown {
        std::fs::write(path, report::markdown(&rows))?;
    }
    if !failures.is_empty() {
        let what: Vec<String> = failures
            .iter()
            .map(|r| format!("{} ({}): {}", r.bench, r.measure, r.figure))
            .collect();
        anyhow::bail!(
            "{} benchmark run(s) failed: {}",
            what.len(),
            what.join("; ")
        );
    }
    Ok(())
}
