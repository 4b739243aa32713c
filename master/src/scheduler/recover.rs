//! The recovery sweep and start-up reconciliation, scheduler side: read one
//! Redis snapshot, record the reports waiting there, decide each live task
//! with [`crate::recovery::sweep`], and give up attempts only after fencing
//! them off in Redis — so an attempt the master gave up can never take or
//! renew a lease afterwards.

use super::cycle::Cycle;
use super::{Epoch, Scheduler};
use crate::recovery::{self, SweepDecision};
use crate::sweep;
use std::time::Instant;
use trainyard_proto::{now_ms, AttemptRef, TaskId};

impl Scheduler {
    pub(super) async fn sweep(&mut self, cycle: &mut Cycle) {
        let mut con = match self.redis.connection().await {
            Ok(con) => con,
            Err(e) => return self.redis_down(&e),
        };
        let live: Vec<TaskId> = self.state.live.keys().copied().collect();
        let snapshot = match sweep::observe(&mut con, &self.keys, &live).await {
            Ok(s) => s,
            Err(e) => return self.redis_down(&e),
        };
        if !self.redis_ok {
            tracing::info!("Redis reachable; recovery sweeps running");
            self.redis_ok = true;
        }
        self.observe_epoch(snapshot.epoch.clone(), &mut con).await;

        for report in snapshot.reports {
            self.report(report, None, cycle);
        }
        if !snapshot.dangling.is_empty() || !snapshot.garbage.is_empty() {
            self.forget_reports(&snapshot.dangling, &snapshot.garbage)
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
            match recovery::sweep(&live.view(), lease, now, trustworthy) {
                SweepDecision::Keep => {}
                SweepDecision::MarkRunning { slot } => {
                    let attempt = live.attempt_ref(*task);
                    self.mark_running(attempt, slot, cycle);
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
        if given_up.is_empty() {
            return;
        }
        let attempts: Vec<AttemptRef> = given_up.iter().map(|g| g.0).collect();
        let fenced = match sweep::fence(
            &mut con,
            &self.keys,
            &attempts,
            self.config.timers.fence_ttl,
        )
        .await
        {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(error = %e, count = attempts.len(), "could not fence lapsed attempts; retrying next sweep");
                return;
            }
        };
        for ((attempt, outcome, reason, then), fenced) in given_up.into_iter().zip(fenced) {
            if !fenced {
                tracing::debug!(%attempt, "a lease or report appeared since the snapshot; keeping the attempt");
                continue;
            }
            tracing::warn!(%attempt, outcome = outcome.as_str(), next = ?then, "{reason}");
            self.settle(attempt, outcome, Some(reason), None, then.into(), cycle);
        }
    }

    fn redis_down(&mut self, error: &redis::RedisError) {
        if self.redis_ok || self.last_sweep.is_none() {
            tracing::warn!(error = %error, "Redis unavailable; recovery sweeps paused (no task is requeued while leases cannot be read)");
        }
        self.redis_ok = false;
    }

    /// Notices when Redis lost its data, and then distrusts missing leases for
    /// a lease TTL plus a heartbeat, the time live hosts need to rebuild them.
    async fn observe_epoch(
        &mut self,
        seen: Option<String>,
        con: &mut redis::aio::ConnectionManager,
    ) {
        let lost = match (&self.epoch.known, &seen) {
            (_, None) => true,
            (Some(known), Some(seen)) => known != seen,
            (None, Some(_)) => false,
        };
        let current = match seen {
            Some(s) if !lost => s,
            _ => match sweep::ensure_epoch(con, &self.keys).await {
                Ok(e) => e,
                Err(e) => {
                    tracing::warn!(error = %e, "could not write the Redis epoch");
                    return;
                }
            },
        };
        if lost {
            let t = &self.config.timers;
            let wait = t.lease_ttl + t.heartbeat_interval;
            self.epoch = Epoch {
                known: Some(current),
                distrust_until: Some(Instant::now() + wait),
            };
            if !self.state.live.is_empty() {
                tracing::warn!(
                    live = self.state.live.len(),
                    wait_ms = wait.as_millis() as u64,
                    "Redis holds no epoch: it lost its data (or this is its first use); missing leases are not trusted until hosts have rebuilt them"
                );
            }
        } else {
            self.epoch.known = Some(current);
        }
    }

    /// Start-up: compares every worker lease in Redis with the database. A
    /// lease of a DISPATCHED task's attempt means its host took it; a lease of
    /// any attempt that is not current marks a host to be told to stop it.
    pub(super) async fn reconcile(&mut self) {
        let leases = match self.redis.connection().await {
            Ok(mut con) => crate::reconcile::worker_leases(&mut con, &self.keys).await,
            Err(e) => Err(e),
        };
        let leases = match leases {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "start-up reconciliation skipped: Redis unavailable; the sweep will reconcile when it returns");
                return;
            }
        };
        let mut cycle = Cycle::default();
        let (mut confirmed, mut stale) = (0, 0);
        for (worker, attempt) in &leases {
            let status = self.state.current(*attempt, &worker.host).map(|l| l.status);
            match status {
                Some(crate::model::TaskStatus::Dispatched) => {
                    self.mark_running(*attempt, worker.slot, &mut cycle);
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
        tracing::info!(
            leases = leases.len(),
            confirmed,
            stale,
            unleased,
            "start-up reconciliation with Redis done"
        );
        self.commit(cycle).await;
    }
}
