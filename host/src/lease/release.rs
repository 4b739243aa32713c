//! Releasing leases: one `release.lua` call for a batch of ended attempts,
//! each clearing its own lease and storing its report.

use super::batch::Call;
use super::{millis, LeaseError, RELEASE};
use std::sync::Arc;
use std::time::Duration;
use trainyard_proto::keys::{self, Keys};
use trainyard_proto::redis_link::RedisLink;
use trainyard_proto::{AttemptRef, WorkerId};

/// One ended attempt: its worker, and its report encoded.
pub(super) struct Ended {
    pub worker: WorkerId,
    pub attempt: AttemptRef,
    pub report: Vec<u8>,
}

/// The release call: what it needs of the lease layer.
pub(super) struct Releases {
    pub redis: Arc<RedisLink>,
    pub keys: Keys,
    /// How long Redis keeps a report the master has not acknowledged.
    pub retention: Duration,
}

impl Call for Releases {
    type Item = Ended;
    type Answer = ();

    async fn call(&self, items: Vec<Ended>) -> Result<Vec<()>, LeaseError> {
        let mut con = self.redis.connection().await?;
        let mut invocation = RELEASE.prepare_invoke();
        invocation
            .key(self.keys.pending_reports())
            .arg(millis(self.retention));
        for Ended {
            worker,
            attempt,
            report,
        } in &items
        {
            invocation
                .key(self.keys.task_owner(attempt.task))
                .key(self.keys.worker_task(worker))
                .key(self.keys.task_report(*attempt))
                .arg(keys::owner_value(worker, attempt.attempt))
                .arg(keys::attempt_value(*attempt))
                .arg(report.as_slice());
        }
        let released: i64 = invocation.invoke_async(&mut con).await?;
        if released != items.len() as i64 {
            return Err(LeaseError::Protocol(format!(
                "{released} releases for {} attempts",
                items.len()
            )));
        }
        Ok(vec![(); items.len()])
    }
}
