//! Redis key names and lease values, shared by the master (which reads
//! leases and picks up reports) and the host (which alone writes leases).
//!
//! The names follow the original scheduler, with the attempt added as the
//! fencing token:
//!
//! | key | value | written by | TTL |
//! | --- | --- | --- | --- |
//! | `worker:{host}:hb` | host id | host, each heartbeat | heartbeat TTL |
//! | `worker:{host}/{slot}:task` | `{task}@{attempt}` | host (lease) | lease TTL |
//! | `task:{task}:workerId` | `{host}/{slot}@{attempt}` | host (lease) | lease TTL |
//! | `task:{task}:fence` | lowest attempt that may still take a lease | master, when it gives an attempt up | fence TTL |
//! | `task:{task}:report:{attempt}` | MessagePack `AttemptReport` | host, atomically with clearing the lease | report retention |
//! | `reports:pending` | set of `{task}@{attempt}` with a stored report | host adds, master removes | none |
//! | `trainyard:epoch` | random id of this Redis dataset | master | none |
//! | `trainyard:epoch_grace` | the epoch it was written with | master, with a new epoch, while tasks were live | `lease_ttl + heartbeat_interval` |
//!
//! Every key may carry an operator-chosen prefix so that several clusters can
//! share one Redis.

use crate::ids::{AttemptRef, TaskId, WorkerId};

/// Builds key names under an optional prefix.
#[derive(Clone, Debug, Default)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
        }
    }

    /// The prefix every key starts with.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Liveness of a host, refreshed by each heartbeat.
    pub fn host_heartbeat(&self, host: &str) -> String {
        format!("{}worker:{host}:hb", self.prefix)
    }

    /// The task a worker (host slot) holds a lease for.
    pub fn worker_task(&self, worker: &WorkerId) -> String {
        format!("{}worker:{worker}:task", self.prefix)
    }

    /// Pattern matching every worker's task lease, for `SCAN`.
    pub fn worker_task_pattern(&self) -> String {
        format!("{}worker:*:task", self.prefix)
    }

    /// Parses a key produced by [`Keys::worker_task`].
    pub fn parse_worker_task(&self, key: &str) -> Option<WorkerId> {
        key.strip_prefix(&self.prefix)?
            .strip_prefix("worker:")?
            .strip_suffix(":task")?
            .parse()
            .ok()
    }

    /// The owner of a task: the lease the master checks.
    pub fn task_owner(&self, task: TaskId) -> String {
        format!("{}task:{task}:workerId", self.prefix)
    }

    /// The lowest attempt of a task that may still take a lease.
    pub fn task_fence(&self, task: TaskId) -> String {
        format!("{}task:{task}:fence", self.prefix)
    }

    /// A finished attempt's report, kept until the master has recorded it.
    pub fn task_report(&self, attempt: AttemptRef) -> String {
        format!(
            "{}task:{}:report:{}",
            self.prefix, attempt.task, attempt.attempt
        )
    }

    /// The set of attempts whose reports wait in Redis for the master.
    pub fn pending_reports(&self) -> String {
        format!("{}reports:pending", self.prefix)
    }

    /// The highest leader term any master has announced (PostgreSQL with
    /// standby masters); a master's fences are refused under a newer one.
    pub fn leader_term(&self) -> String {
        format!("{}trainyard:leader_term", self.prefix)
    }

    /// The id of the Redis dataset; when it changes, Redis lost its data.
    pub fn epoch(&self) -> String {
        format!("{}trainyard:epoch", self.prefix)
    }

    /// Present while live hosts may still be rebuilding the leases Redis
    /// lost: written with a new epoch, it expires once they have had a full
    /// lease TTL and a heartbeat to do so. Any master reads it, so the
    /// window outlives the master that noticed the loss.
    pub fn epoch_grace(&self) -> String {
        format!("{}trainyard:epoch_grace", self.prefix)
    }
}

/// The value of `task:{task}:workerId`: which worker holds which attempt.
pub fn owner_value(worker: &WorkerId, attempt: u32) -> String {
    format!("{worker}@{attempt}")
}

/// The value of `worker:{worker}:task`, and a member of `reports:pending`.
pub fn attempt_value(attempt: AttemptRef) -> String {
    format!("{}@{}", attempt.task, attempt.attempt)
}

/// Parses `{worker}@{attempt}`.
pub fn parse_owner_value(value: &str) -> Option<(WorkerId, u32)> {
    let (worker, attempt) = value.rsplit_once('@')?;
    Some((worker.parse().ok()?, attempt.parse().ok()?))
}

/// Parses `{task}@{attempt}`.
pub fn parse_attempt_value(value: &str) -> Option<AttemptRef> {
    let (task, attempt) = value.rsplit_once('@')?;
    Some(AttemptRef::new(task.parse().ok()?, attempt.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::HostId;

    #[test]
    fn key_names_follow_the_original_scheme() {
        let keys = Keys::default();
        let worker = HostId::new("worker-1").unwrap().worker(0);
        assert_eq!(keys.task_owner(123), "task:123:workerId");
        assert_eq!(keys.worker_task(&worker), "worker:worker-1/0:task");
        assert_eq!(keys.host_heartbeat("worker-1"), "worker:worker-1:hb");
        assert_eq!(
            keys.parse_worker_task("worker:worker-1/0:task"),
            Some(worker.clone())
        );
        assert_eq!(Keys::new("ty:").task_owner(5), "ty:task:5:workerId");
        assert_eq!(
            Keys::new("ty:").parse_worker_task("worker:worker-1/0:task"),
            None
        );
    }

    #[test]
    fn lease_values_round_trip() {
        let worker = HostId::new("gpu-2").unwrap().worker(1);
        assert_eq!(
            parse_owner_value(&owner_value(&worker, 4)),
            Some((worker, 4))
        );
        let a = AttemptRef::new(99, 3);
        assert_eq!(parse_attempt_value(&attempt_value(a)), Some(a));
        assert_eq!(parse_owner_value("nonsense"), None);
    }
}
