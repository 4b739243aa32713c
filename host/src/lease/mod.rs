//! The lease layer: the only code that writes or clears lease keys. Adapters
//! never reach it.
//!
//! - [`LeaseLayer::acquire`] writes `task:{task}:workerId` and
//!   `worker:{worker}:task` in one atomic step before the adapter runs, so a
//!   crash after this point leaves a lease the master can see. Attempts
//!   starting together share one call ([`batch`]).
//! - [`LeaseLayer::renew`] renews every lease of the host in one round trip
//!   (and rebuilds leases Redis lost), each heartbeat.
//! - [`LeaseLayer::release`] deletes both keys only if they still name this
//!   attempt, and stores the attempt's report in the same atomic step.
//!   Attempts ending together share one call too.
//!
//! - [`renewer`] makes that renewal call each heartbeat and tells every
//!   attempt its new deadline, or that its lease is lost.
//!
//! Each call returns the deadline until which the lease is certainly held:
//! measured from *before* the request was sent, minus a safety margin, so
//! the host's view of its lease always ends before Redis's does.

mod acquire;
mod batch;
mod release;
pub mod renewer;

use crate::process::Deadline;
use acquire::{Acquisitions, Verdict};
use batch::Batched;
use release::{Ended, Releases};
use std::sync::Arc;
use std::time::Duration;
use trainyard_proto::keys::{self, Keys};
use trainyard_proto::messages::AttemptReport;
use trainyard_proto::redis_link::RedisLink;
use trainyard_proto::{AttemptRef, HostId, Timers, WorkerId};

static ACQUIRE: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(include_str!("../lua/acquire.lua")));
static RENEW: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(include_str!("../lua/renew.lua")));
static RELEASE: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(include_str!("../lua/release.lua")));
static ABANDON: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(include_str!("../lua/abandon.lua")));

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("Redis unavailable: {0}")]
    Redis(#[from] redis::RedisError),
    /// The call that carried this acquisition with others failed.
    #[error("{0}")]
    Batch(String),
    #[error("unexpected answer from a lease script: {0}")]
    Protocol(String),
    #[error("report could not be encoded: {0}")]
    Encode(#[from] trainyard_proto::frame::FrameError),
}

/// The answer to a lease request.
#[derive(Debug, Clone, PartialEq)]
pub enum Acquired {
    /// Held until `deadline` unless renewed.
    Granted { deadline: Deadline },
    /// The master gave this attempt up; attempts below `fence` may not run.
    Fenced { fence: u32 },
    /// An attempt at least as recent holds the task.
    Held { by: String },
}

/// What renewing one lease found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    Renewed,
    /// Redis had lost the lease; it is written again.
    Rebuilt,
    /// The attempt has already reported; nothing to renew.
    Finished,
    /// A newer attempt holds the task: stop this one.
    Superseded,
    /// The master gave this attempt up: stop it.
    Fenced,
}

impl Renewal {
    /// Whether the attempt may keep running.
    pub fn held(self) -> bool {
        matches!(self, Renewal::Renewed | Renewal::Rebuilt)
    }
}

#[derive(Clone)]
pub struct LeaseLayer {
    redis: Arc<RedisLink>,
    keys: Keys,
    host: HostId,
    ttl: Duration,
    margin: Duration,
    heartbeat_ttl: Duration,
    /// Where acquisitions and releases wait for their batch.
    acquisitions: Arc<Batched<Acquisitions>>,
    releases: Arc<Batched<Releases>>,
}

impl LeaseLayer {
    pub fn new(redis: Arc<RedisLink>, keys: Keys, host: HostId, timers: &Timers) -> Self {
        let acquisitions = Acquisitions {
            redis: redis.clone(),
            keys: keys.clone(),
            ttl: timers.lease_ttl,
        };
        let releases = Releases {
            redis: redis.clone(),
            keys: keys.clone(),
            retention: timers.report_retention,
        };
        Self {
            redis,
            keys,
            host,
            ttl: timers.lease_ttl,
            margin: timers.effective_margin(),
            heartbeat_ttl: timers.heartbeat_ttl,
            acquisitions: Arc::new(Batched::new(acquisitions)),
            releases: Arc::new(Batched::new(releases)),
        }
    }

    /// The deadline a lease written now would give: TTL minus the margin,
    /// counted from before the request is sent.
    fn deadline_from(&self, sent: Deadline) -> Deadline {
        sent.checked_add(self.ttl).saturating_sub(self.margin)
    }

    pub async fn acquire(
        &self,
        worker: &WorkerId,
        attempt: AttemptRef,
    ) -> Result<Acquired, LeaseError> {
        let (verdict, sent) = self.acquisitions.ask((worker.clone(), attempt)).await?;
        Ok(match verdict {
            Verdict::Granted => Acquired::Granted {
                deadline: self.deadline_from(sent),
            },
            Verdict::Fenced(fence) => Acquired::Fenced { fence },
            Verdict::Held(by) => Acquired::Held { by },
        })
    }

    /// Takes back the lease of an attempt that will not run, in case its
    /// [`LeaseLayer::acquire`] failed after Redis applied it (a timeout, a
    /// lost reply). Returns whether there was one to take back.
    pub async fn abandon(
        &self,
        worker: &WorkerId,
        attempt: AttemptRef,
    ) -> Result<bool, LeaseError> {
        let mut con = self.redis.connection().await?;
        let dropped: i64 = ABANDON
            .key(self.keys.task_owner(attempt.task))
            .key(self.keys.worker_task(worker))
            .arg(keys::owner_value(worker, attempt.attempt))
            .arg(keys::attempt_value(attempt))
            .invoke_async(&mut con)
            .await?;
        Ok(dropped == 1)
    }

    /// Renews the host's heartbeat key and these leases. Returns the new
    /// deadline of every lease that is still held, and each verdict.
    pub async fn renew(
        &self,
        leases: &[(WorkerId, AttemptRef)],
    ) -> Result<(Deadline, Vec<Renewal>), LeaseError> {
        let mut con = self.redis.connection().await?;
        let mut invocation = RENEW.prepare_invoke();
        invocation
            .key(self.keys.host_heartbeat(self.host.as_str()))
            .arg(millis(self.ttl))
            .arg(millis(self.heartbeat_ttl))
            .arg(self.host.as_str());
        for (worker, attempt) in leases {
            invocation
                .key(self.keys.task_owner(attempt.task))
                .key(self.keys.worker_task(worker))
                .key(self.keys.task_fence(attempt.task))
                .key(self.keys.task_report(*attempt))
                .arg(keys::owner_value(worker, attempt.attempt))
                .arg(keys::attempt_value(*attempt))
                .arg(attempt.attempt);
        }
        let sent = Deadline::now();
        let verdicts: Vec<String> = invocation.invoke_async(&mut con).await?;
        if verdicts.len() != leases.len() {
            return Err(LeaseError::Protocol(format!(
                "{} verdicts for {} leases",
                verdicts.len(),
                leases.len()
            )));
        }
        let verdicts = verdicts
            .iter()
            .map(|v| match v.as_str() {
                "renewed" => Ok(Renewal::Renewed),
                "rebuilt" => Ok(Renewal::Rebuilt),
                "finished" => Ok(Renewal::Finished),
                "superseded" => Ok(Renewal::Superseded),
                "fenced" => Ok(Renewal::Fenced),
                other => Err(LeaseError::Protocol(other.to_string())),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok((self.deadline_from(sent), verdicts))
    }

    /// Clears the lease of the report's attempt (if it is still this
    /// attempt's) and stores the report until the master acknowledges it.
    pub async fn release(
        &self,
        worker: &WorkerId,
        report: &AttemptReport,
    ) -> Result<(), LeaseError> {
        let ended = Ended {
            worker: worker.clone(),
            attempt: report.attempt,
            report: trainyard_proto::frame::encode(report)?,
        };
        self.releases.ask(ended).await
    }
}

fn millis(d: Duration) -> u64 {
    d.as_millis().max(1) as u64
}
