//! CPU accounting for the benchmarks: the time the master (and SQLite's own
//! threads in it), Redis, PostgreSQL and the light hosts spent, per task.

use std::collections::BTreeMap;
use std::time::Duration;

/// The processes whose CPU time the benchmark accounts for.
pub(crate) struct Pids {
    pub(crate) master: u32,
    pub(crate) redis: u32,
    /// This process: the light hosts, and the users' thread.
    pub(crate) hosts: u32,
    /// Whether a PostgreSQL server runs beside (SQLite runs in the master).
    pub(crate) postgres: bool,
}

/// The names of the threads sqlx runs SQLite connections on (truncated
/// to 15 bytes by the kernel).
const SQLITE_THREADS: &str = "sqlx-sqlite";

/// CPU time used by each of [`Pids`].
#[derive(Clone, Default)]
pub(crate) struct CpuUse {
    pub(crate) master: Duration,
    /// The part of `master` on SQLite's threads: sqlx runs each SQLite
    /// connection, the engine and its own marshalling, on a thread of its
    /// own ([`SQLITE_THREADS`]). Zero on PostgreSQL.
    pub(crate) sqlite: Duration,
    pub(crate) redis: Duration,
    pub(crate) hosts: Duration,
    /// Submitting and polling, on the users' thread of this process.
    pub(crate) users: Duration,
    /// Each PostgreSQL server process's, by pid; `None` for SQLite. Read
    /// afresh each time: the server starts a process per connection, and
    /// the master may open one during the run.
    pub(crate) database: Option<BTreeMap<u32, Duration>>,
}

impl Pids {
    pub(crate) fn cpu(&self) -> CpuUse {
        let t = |pid| crate::probe::cpu_time(pid).unwrap_or_default();
        CpuUse {
            master: t(self.master),
            sqlite: crate::probe::threads_cpu_time(self.master, SQLITE_THREADS),
            redis: t(self.redis),
            hosts: t(self.hosts),
            users: Duration::ZERO,
            database: self.postgres.then(|| {
                crate::probe::named("postgres")
                    .into_iter()
                    .map(|pid| (pid, t(pid)))
                    .collect()
            }),
        }
    }
}

impl CpuUse {
    pub(crate) fn since(&self, before: &CpuUse) -> CpuUse {
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
    pub(crate) fn less_users(self, users: Duration) -> CpuUse {
        CpuUse {
            hosts: self.hosts.saturating_sub(users),
            users,
            ..self
        }
    }

    /// The figure of the CPU row, over `tasks` tasks.
    pub(crate) fn per_task(&self, tasks: usize) -> String {
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
