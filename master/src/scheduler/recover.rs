//! The recovery sweep and start-up reconciliation, scheduler side: read one
//! Redis snapshot, record the reports waiting there (a connected host's only
//! once it has waited there a resend interval, see
//! [`recovery::take_redis_report`]),
//! decide each live task
//! with [`crate::recovery::sweep`], and give up attempts only after fencing
//! them off in Redis — so an attempt the master gave up can never take or
//! renew a lease afterwards.
//!
//! Each sweep and the reconciliation also measure what they cost (time,
//! time waiting on Redis, round trips): [`RecoveryCosts`], shown by
//! `/v1/health`, so an operator sees a sweep slowing down as tasks grow.

use super::cycle::Cycle;
use super::tally::{Histogram, WORK_SECONDS};
use super::{Epoch, Scheduler};
use crate::recovery::{self, leases, SweepDecision};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::future::Future;
use std::time::{Duration, Instant};
use trainyard_proto::{now_ms, AttemptRef, TaskId};

/// What one recovery sweep cost.
///
/// Measured from the sweep's first Redis request to its last: reading the
/// snapshot, recording the reports found there, deciding every live task and
/// fencing what it gave up. The turn's database commit that follows, and the
/// removal of recorded reports from Redis after it, are not included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SweepStats {
    /// Live tasks whose leases the sweep read.
    pub tasks: usize,
    /// Attempts it gave up (fenced, then requeued, failed or cancelled).
    pub given_up: usize,
    /// The whole sweep, in microseconds.
    pub duration_us: u64,
    /// The part of `duration_us` spent in the Redis calls: the requests on
    /// the wire, and building them and parsing their replies (a key name
    /// and a lease value per task).
    pub redis_us: u64,
    /// Requests the sweep waited on Redis for; at most
    /// [`leases::MAX_ROUND_TRIPS`] whatever `tasks` is.
    pub round_trips: u32,
}

/// What the start-up reconciliation found and cost: the Redis scan and the
/// comparison with the database, not the commit of what it confirmed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReconcileStats {
    /// Worker leases found in Redis.
    pub leases: usize,
    /// Leases of a live task's current attempt.
    pub confirmed: usize,
    /// Leases of attempts the master has given away.
    pub stale: usize,
    /// Live tasks no lease was found for (left to the sweeps).
    pub unleased: usize,
    pub duration_us: u64,
    /// The part of `duration_us` spent in the Redis scan (requests, and
    /// parsing their replies).
    pub redis_us: u64,
    /// Requests made: grows with the keyspace (one per `SCAN` step), not
    /// with one request per lease.
    pub round_trips: u32,
}

/// The recovery costs seen since start, for the health endpoint and
/// `/metrics`.
#[derive(Debug, Clone)]
pub struct RecoveryCosts {
    /// Sweeps that read Redis; a poller tells a new `last` by this.
    pub sweeps: u64,
    pub last: Option<SweepStats>,
    /// The longest sweep so far: one slow sweep delays every recovery
    /// behind it, however fast the typical one is.
    pub slowest: Option<SweepStats>,
    pub reconcile: Option<ReconcileStats>,
    /// Every sweep's duration, in seconds.
    pub durations: Histogram,
    /// Redis requests of every sweep, added up.
    pub round_trips: u64,
}

impl Default for RecoveryCosts {
    fn default() -> Self {
        Self {
            sweeps: 0,
            last: None,
            slowest: None,
            reconcile: None,
            durations: Histogram::new(WORK_SECONDS),
            round_trips: 0,
        }
    }
}

impl RecoveryCosts {
    fn record(&mut self, sweep: SweepStats) {
        self.sweeps += 1;
        self.last = Some(sweep);
        self.durations.observe(sweep.duration_us as f64 / 1e6);
        self.round_trips += u64::from(sweep.round_trips);
        if self
            .slowest
            .is_none_or(|s| sweep.duration_us > s.duration_us)
        {
            self.slowest = Some(sweep);
        }
    }
}

/// Time waited on Redis and requests made, added up over one operation.
#[derive(Debug, Default)]
struct RedisMeter {
    waited: Duration,
    round_trips: u32,
}

impl RedisMeter {
    /// Awaits one Redis operation, counting the time it took.
    async fn time<T>(&mut self, operation: impl Future<Output = T>) -> T {
        let started = Instant::now();
        let out = operation.await;
        self.waited += started.elapsed();
        out
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl Scheduler {
    /// One recovery sweep; records what it cost when it could read Redis.
    pub(super) async fn sweep(&mut self, cycle: &mut Cycle) {
        let started = Instant::now();
        let mut meter = RedisMeter::default();
        let Some((tasks, given_up)) = self.sweep_once(cycle, &mut meter).await else {
            return;
        };
        let stats = SweepStats {
            tasks,
            given_up,
            duration_us: micros(started.elapsed()),
            redis_us: micros(meter.waited),
            round_trips: meter.round_trips,
        };
        tracing::debug!(
            tasks = stats.tasks,
            given_up = stats.given_up,
            duration_us = stats.duration_us,
            redis_us = stats.redis_us,
            round_trips = stats.round_trips,
            "recovery sweep done"
        );
        self.costs.record(stats);
    }

    /// Returns the live tasks swept and the attempts given up, or `None` if
    /// Redis could not be read.
    async fn sweep_once(
        &mut self,
        cycle: &mut Cycle,
        meter: &mut RedisMeter,
    ) -> Option<(usize, usize)> {
        let mut con = match self.redis.connection().await {
            Ok(con) => con,
            Err(e) => {
                self.redis_down(&e);
                return None;
            }
        };
        let live: Vec<TaskId> = self.state.live.keys().copied().collect();
        let snapshot = match meter
            .time(leases::observe(&mut con, &self.keys, &live))
            .await
        {
            Ok(s) => s,
            Err(e) => {
                meter.round_trips += 1;
                self.redis_down(&e);
                return None;
            }
        };
        meter.round_trips += snapshot.round_trips;
        if !self.redis_ok {
            tracing::info!("Redis reachable; recovery sweeps running");
            self.redis_ok = true;
        }
        meter.round_trips += meter
            .time(self.observe_epoch(snapshot.epoch.clone(), &mut con))
            .await;

        let now = Instant::now();
        let grace = self.config.timers.report_resend_interval;
        let mut left = HashMap::new();
        let mut taken = vec![];
        for report in snapshot.reports {
            let connected = self.state.hosts.contains_key(&report.host);
            let seen = self.reports_left.get(&report.attempt).copied();
            let waited = seen.map(|at| now.duration_since(at));
            if recovery::take_redis_report(connected, waited, grace) {
                taken.push(report);
            } else {
                left.insert(report.attempt, seen.unwrap_or(now));
            }
        }
        if !taken.is_empty() {
            // The lines its host shipped before its connection ended are
            // stored before a report ends its task.
            self.logs.sync().await;
        }
        for report in taken {
            self.report(report, None, cycle);
        }
        self.reports_left = left;
        if !snapshot.dangling.is_empty() || !snapshot.garbage.is_empty() {
            meter.round_trips += meter
                .time(self.forget_reports(&snapshot.dangling, &snapshot.garbage))
                .await;
        }

        let trustworthy = self.epoch.trustworthy(Instant::now());
        let now = now_ms();
        let mut given_up = vec![];
        for (task, lease) in &snapshot.leases {
            // A report handled just above may have ended the task.
            let Some(live) = self.state.live.get(task) else {
                continue;
            };
            // Its report is on its way over the connection.
            if self.reports_left.contains_key(&live.attempt_ref(*task)) {
                continue;
            }
            let connected = self.state.hosts.contains_key(&live.host);
            match recovery::sweep(&live.view(), lease, now, trustworthy, connected) {
                SweepDecision::Keep => {}
                SweepDecision::MarkRunning { slot } => {
                    let attempt = live.attempt_ref(*task);
                    self.mark_running(attempt, slot, None, cycle);
                }
                SweepDecision::GiveUp {
                    outcome,
                    reason,
                    then,
                } => {
                    given_up.push((live.attempt_ref(*task), outcome, reason, then));
                }
            }
        }
        let swept = snapshot.leases.len();
        if given_up.is_empty() {
            return Some((swept, 0));
        }
        let attempts: Vec<AttemptRef> = given_up.iter().map(|g| g.0).collect();
        let fence_ttl = self.config.timers.fence_ttl;
        let fenced = match meter
            .time(leases::fence(
                &mut con,
                &self.keys,
                &attempts,
                fence_ttl,
                self.config.term,
            ))
            .await
        {
            Ok(f) => f,
            Err(e) => {
                meter.round_trips += 1;
                tracing::warn!(error = %e, count = attempts.len(), "could not fence lapsed attempts; retrying next sweep");
                return Some((swept, 0));
            }
        };
        meter.round_trips += fenced.round_trips;
        let mut settled = 0;
        for ((attempt, outcome, reason, then), fenced) in given_up.into_iter().zip(fenced.verdicts)
        {
            if !fenced {
                tracing::debug!(%attempt, "a lease or report appeared since the snapshot; keeping the attempt");
                continue;
            }
            tracing::warn!(%attempt, outcome = outcome.as_str(), next = ?then, "{reason}");
            self.settle(attempt, outcome, Some(reason), None, then.into(), cycle);
            settled += 1;
        }
        Some((swept, settled))
    }

    fn redis_down(&mut self, error: &redis::RedisError) {
        if self.redis_ok || self.last_sweep.is_none() {
            tracing::warn!(error = %error, "Redis unavailable; recovery sweeps paused (no task is requeued while leases cannot be read)");
        }
        self.redis_ok = false;
    }

    /// Notices when Redis lost its data, and distrusts missing leases for a
    /// lease TTL plus a heartbeat, the time live hosts need to rebuild them:
    /// the window starts in Redis with the new epoch
    /// ([`leases::ensure_epoch`]), so a master that starts inside it (a
    /// restart, a standby taking over) waits it out too
    /// ([`recovery::leases_distrusted_until`]). Returns the round trips
    /// made: 1 if the epoch had to be written, else 0.
    async fn observe_epoch(
        &mut self,
        seen: leases::EpochSeen,
        con: &mut redis::aio::ConnectionManager,
    ) -> u32 {
        let t = &self.config.timers;
        let wait = t.lease_ttl + t.heartbeat_interval;
        // With no live task no lease can have been lost: a first use of
        // Redis (or a loss while idle) needs no wait, and every lease taken
        // from now on belongs to the new epoch.
        let live = !self.state.live.is_empty();
        let change = recovery::epoch_change(self.epoch.known.as_deref(), seen.epoch.as_deref());
        let (seen, round_trips) = match change {
            recovery::EpochChange::Lost => {
                match leases::ensure_epoch(con, &self.keys, live.then_some(wait)).await {
                    Ok(written) => (written, 1),
                    Err(e) => {
                        tracing::warn!(error = %e, "could not write the Redis epoch");
                        (seen, 1)
                    }
                }
            }
            _ => (seen, 0),
        };
        let now = Instant::now();
        let was_trusted = self.epoch.trustworthy(now);
        let until = recovery::leases_distrusted_until(
            now,
            self.epoch.distrust_until,
            change,
            seen.grace_left,
            live,
            wait,
        );
        if change != recovery::EpochChange::Kept && live {
            tracing::warn!(
                live = self.state.live.len(),
                wait_ms = wait.as_millis() as u64,
                "Redis holds no epoch, or another than this master knew: it lost its data (or this is its first use); missing leases are not trusted until hosts have rebuilt them"
            );
        } else if was_trusted && until.is_some() {
            tracing::warn!(
                live = self.state.live.len(),
                left_ms = seen.grace_left.map_or(0, |l| l.as_millis() as u64),
                "Redis lost its data a short while ago (its epoch's grace is still running); missing leases are not trusted until hosts have rebuilt them"
            );
        }
        self.epoch = Epoch {
            known: seen.epoch.or(self.epoch.known.take()),
            distrust_until: until,
        };
        round_trips
    }

    /// Start-up: compares every worker lease in Redis with the database. A
    /// lease of a DISPATCHED task's attempt means its host took it; a lease of
    /// any attempt that is not current marks a host to be told to stop it.
    pub(super) async fn reconcile(&mut self) {
        let started = Instant::now();
        let mut meter = RedisMeter::default();
        let found = match self.redis.connection().await {
            Ok(mut con) => {
                // The epoch first, before any dispatch: with no live task a
                // Redis without one (first use, or data lost while nothing
                // ran) is trusted at once, and the first dispatches take
                // their leases in the epoch written here.
                if let Ok(seen) = leases::read_epoch(&mut con, &self.keys).await {
                    self.observe_epoch(seen, &mut con).await;
                }
                meter
                    .time(crate::recovery::reconcile::worker_leases(
                        &mut con, &self.keys,
                    ))
                    .await
            }
            Err(e) => Err(e),
        };
        let found = match found {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "start-up reconciliation skipped: Redis unavailable; the sweep will reconcile when it returns");
                return;
            }
        };
        let leases = found.leases;
        let mut cycle = Cycle::default();
        let (mut confirmed, mut stale) = (0, 0);
        for (worker, attempt) in &leases {
            let status = self.state.current(*attempt, &worker.host).map(|l| l.status);
            match status {
                Some(crate::model::TaskStatus::Dispatched) => {
                    self.mark_running(*attempt, worker.slot, None, &mut cycle);
                    confirmed += 1;
                }
                Some(_) => confirmed += 1,
                None => {
                    stale += 1;
                    self.state
                        .stale_on_connect
                        .entry(worker.host.clone())
                        .or_default()
                        .insert(*attempt);
                }
            }
        }
        let unleased = self.state.live.len().saturating_sub(confirmed);
        let stats = ReconcileStats {
            leases: leases.len(),
            confirmed,
            stale,
            unleased,
            duration_us: micros(started.elapsed()),
            redis_us: micros(meter.waited),
            round_trips: found.round_trips,
        };
        tracing::info!(
            leases = stats.leases,
            confirmed,
            stale,
            unleased,
            duration_ms = stats.duration_us as f64 / 1e3,
            redis_ms = stats.redis_us as f64 / 1e3,
            round_trips = stats.round_trips,
            "start-up reconciliation with Redis done"
        );
        self.costs.reconcile = Some(stats);
        self.commit(cycle).await;
        // Start-up ends with the reconciliation committed and acted on.
        self.land().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sweep_of(duration_us: u64) -> SweepStats {
        SweepStats {
            tasks: 10,
            given_up: 0,
            duration_us,
            redis_us: duration_us / 2,
            round_trips: 1,
        }
    }

    #[test]
    fn the_slowest_sweep_is_kept_while_later_ones_replace_the_last() {
        let mut costs = RecoveryCosts::default();
        for d in [300, 900, 200] {
            costs.record(sweep_of(d));
        }
        assert_eq!(costs.sweeps, 3);
        assert_eq!(costs.last.map(|s| s.duration_us), Some(200));
        assert_eq!(costs.slowest.map(|s| s.duration_us), Some(900));
    }
}
