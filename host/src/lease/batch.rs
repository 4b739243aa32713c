//! Lease acquisitions in batches. The attempts a host starts together (a
//! turn's dispatches arrive together) take their leases in one script call
//! instead of one each: one request to Redis and one script run for all.
//!
//! A batch is whatever waits when the previous call has returned, at most
//! [`MAX_BATCH`]: a lone acquisition goes out at once, never held back to
//! wait for company. Each attempt gets its own verdict; a call that fails
//! fails every acquisition it carried, and each attempt then handles its
//! failure as before (takes back a lease Redis may have written after all).

use super::{millis, LeaseError, ACQUIRE};
use crate::process::Deadline;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use trainyard_proto::keys::{self, Keys};
use trainyard_proto::redis_link::RedisLink;
use trainyard_proto::{AttemptRef, WorkerId};

/// Most acquisitions one script call carries.
const MAX_BATCH: usize = 64;

/// The script's verdict on one lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Verdict {
    Granted,
    Fenced(u32),
    Held(String),
}

/// What one acquisition learns: its verdict, and when the call that carried
/// it was sent (a granted lease's deadline counts from there).
pub(super) type Answer = Result<(Verdict, Deadline), String>;

/// One attempt asking for its lease.
pub(super) struct Wanted {
    pub worker: WorkerId,
    pub attempt: AttemptRef,
    pub reply: oneshot::Sender<Answer>,
}

/// Sends the batches: what the calls need of the lease layer, and nothing
/// that keeps the queue's sender alive (the task ends with the layer).
pub(super) struct Batches {
    pub redis: Arc<RedisLink>,
    pub keys: Keys,
    pub ttl: Duration,
}

impl Batches {
    /// Serves acquisitions until every sender is gone.
    pub(super) async fn run(self, mut queue: mpsc::UnboundedReceiver<Wanted>) {
        let mut batch = Vec::with_capacity(MAX_BATCH);
        while queue.recv_many(&mut batch, MAX_BATCH).await > 0 {
            match self.call(&batch).await {
                Ok((verdicts, sent)) => {
                    for (wanted, verdict) in batch.drain(..).zip(verdicts) {
                        let _ = wanted.reply.send(Ok((verdict, sent)));
                    }
                }
                Err(e) => {
                    let reason = e.to_string();
                    for wanted in batch.drain(..) {
                        let _ = wanted.reply.send(Err(reason.clone()));
                    }
                }
            }
        }
    }

    /// One script call for the whole batch.
    async fn call(&self, batch: &[Wanted]) -> Result<(Vec<Verdict>, Deadline), LeaseError> {
        let mut con = self.redis.connection().await?;
        let mut invocation = ACQUIRE.prepare_invoke();
        invocation.arg(millis(self.ttl));
        for Wanted {
            worker, attempt, ..
        } in batch
        {
            invocation
                .key(self.keys.task_owner(attempt.task))
                .key(self.keys.worker_task(worker))
                .key(self.keys.task_fence(attempt.task))
                .arg(keys::owner_value(worker, attempt.attempt))
                .arg(keys::attempt_value(*attempt))
                .arg(attempt.attempt);
        }
        let sent = Deadline::now();
        let answers: Vec<String> = invocation.invoke_async(&mut con).await?;
        Ok((verdicts(&answers, batch.len())?, sent))
    }
}

/// Reads the script's answer: a verdict and its detail per lease.
fn verdicts(answers: &[String], leases: usize) -> Result<Vec<Verdict>, LeaseError> {
    if answers.len() != 2 * leases {
        return Err(LeaseError::Protocol(format!(
            "{} answers for {leases} leases",
            answers.len()
        )));
    }
    answers
        .chunks(2)
        .map(|pair| match (pair[0].as_str(), &pair[1]) {
            ("ok", _) => Ok(Verdict::Granted),
            ("fenced", fence) => Ok(Verdict::Fenced(fence.parse().unwrap_or(0))),
            ("held", by) => Ok(Verdict::Held(by.clone())),
            (other, _) => Err(LeaseError::Protocol(other.to_string())),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_lease_of_a_batch_gets_its_own_verdict() {
        let answers: Vec<String> = ["ok", "", "fenced", "3", "held", "h/0@4"]
            .map(String::from)
            .into();
        assert_eq!(
            verdicts(&answers, 3).unwrap(),
            vec![
                Verdict::Granted,
                Verdict::Fenced(3),
                Verdict::Held("h/0@4".into())
            ]
        );
        assert!(
            verdicts(&answers, 2).is_err(),
            "a count that does not match"
        );
        assert!(verdicts(&["what".into(), "".into()], 1).is_err());
    }
}
