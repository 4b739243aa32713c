//! Taking leases: one `acquire.lua` call for a batch of attempts, each
//! with its own verdict.

use super::batch::Call;
use super::{millis, LeaseError, ACQUIRE};
use crate::process::Deadline;
use std::sync::Arc;
use std::time::Duration;
use trainyard_proto::keys::{self, Keys};
use trainyard_proto::redis_link::RedisLink;
use trainyard_proto::{AttemptRef, WorkerId};

/// The script's verdict on one lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Verdict {
    Granted,
    Fenced(u32),
    Held(String),
}

/// The acquisition call: what it needs of the lease layer.
pub(super) struct Acquisitions {
    pub redis: Arc<RedisLink>,
    pub keys: Keys,
    pub ttl: Duration,
}

impl Call for Acquisitions {
    type Item = (WorkerId, AttemptRef);
    /// The verdict, and when the call that carried it was sent (a granted
    /// lease's deadline counts from there).
    type Answer = (Verdict, Deadline);

    async fn call(&self, items: Vec<Self::Item>) -> Result<Vec<Self::Answer>, LeaseError> {
        let mut con = self.redis.connection().await?;
        let mut invocation = ACQUIRE.prepare_invoke();
        invocation.arg(millis(self.ttl));
        for (worker, attempt) in &items {
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
        let verdicts = verdicts(&answers, items.len())?;
        Ok(verdicts.into_iter().map(|v| (v, sent)).collect())
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
