//! The recovery sweep's Redis side: one consistent snapshot of every live
//! task's lease, the dataset's epoch and the reports waiting to be recorded,
//! in a bounded number of round trips whatever the number of tasks; and the
//! fence that makes giving up an attempt final.
//!
//! Round trips per sweep: one `MULTI` block (epoch, pending reports, `MGET`
//! of every owner key), one `MGET` of the pending reports if there are any,
//! and one script call fencing every attempt given up in that sweep.

use crate::recovery::Lease;
use redis::aio::ConnectionManager;
use redis::AsyncCommands;
use std::collections::HashMap;
use std::time::Duration;
use trainyard_proto::keys::{self, Keys};
use trainyard_proto::messages::AttemptReport;
use trainyard_proto::{AttemptRef, TaskId};

/// What Redis held at one instant.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// `trainyard:epoch`; `None` if Redis has lost (or never had) it.
    pub epoch: Option<String>,
    pub leases: HashMap<TaskId, Lease>,
    /// Reports of finished attempts waiting for the master.
    pub reports: Vec<AttemptReport>,
    /// Entries of `reports:pending` whose report is gone or unreadable;
    /// removed from the set after the sweep.
    pub dangling: Vec<AttemptRef>,
    /// Entries of `reports:pending` that are not attempt references at all.
    pub garbage: Vec<String>,
}

/// Reads the snapshot for these live tasks.
pub async fn observe(
    con: &mut ConnectionManager,
    keys: &Keys,
    live: &[TaskId],
) -> redis::RedisResult<Snapshot> {
    let mut pipe = redis::pipe();
    pipe.atomic()
        .get(keys.epoch())
        .smembers(keys.pending_reports());
    if !live.is_empty() {
        let owners: Vec<String> = live.iter().map(|id| keys.task_owner(*id)).collect();
        pipe.mget(owners);
    }
    let (epoch, pending, owners): (Option<String>, Vec<String>, Vec<Option<String>>) =
        if live.is_empty() {
            let (epoch, pending): (Option<String>, Vec<String>) = pipe.query_async(con).await?;
            (epoch, pending, vec![])
        } else {
            pipe.query_async(con).await?
        };

    let leases = live
        .iter()
        .zip(owners)
        .map(|(id, value)| {
            let lease = match value {
                None => Lease::Absent,
                Some(v) => match keys::parse_owner_value(&v) {
                    Some((worker, attempt)) => Lease::Held { worker, attempt },
                    None => Lease::Unreadable(v),
                },
            };
            (*id, lease)
        })
        .collect();

    let mut snapshot = Snapshot {
        epoch,
        leases,
        ..Snapshot::default()
    };
    let mut attempts = vec![];
    for member in pending {
        match keys::parse_attempt_value(&member) {
            Some(a) => attempts.push(a),
            None => snapshot.garbage.push(member),
        }
    }
    if !attempts.is_empty() {
        let report_keys: Vec<String> = attempts.iter().map(|a| keys.task_report(*a)).collect();
        let bodies: Vec<Option<Vec<u8>>> = con.mget(report_keys).await?;
        for (attempt, body) in attempts.into_iter().zip(bodies) {
            match body.map(|b| trainyard_proto::frame::decode::<AttemptReport>(&b)) {
                Some(Ok(report)) if report.attempt == attempt => snapshot.reports.push(report),
                Some(Ok(_)) | Some(Err(_)) => {
                    tracing::warn!(%attempt, "unreadable report in Redis; dropping it");
                    snapshot.dangling.push(attempt);
                }
                None => snapshot.dangling.push(attempt),
            }
        }
    }
    Ok(snapshot)
}

/// Fences the given attempts (task, attempt given up). Returns, aligned with
/// the input, whether each was fenced; one that was not has a lease or a
/// report again and must be left alone.
pub async fn fence(
    con: &mut ConnectionManager,
    keys: &Keys,
    given_up: &[AttemptRef],
    ttl: Duration,
) -> redis::RedisResult<Vec<bool>> {
    if given_up.is_empty() {
        return Ok(vec![]);
    }
    static SCRIPT: std::sync::LazyLock<redis::Script> =
        std::sync::LazyLock::new(|| redis::Script::new(include_str!("lua/fence.lua")));
    let mut invocation = SCRIPT.prepare_invoke();
    invocation.arg(ttl.as_millis().max(1) as u64);
    for a in given_up {
        invocation
            .key(keys.task_owner(a.task))
            .key(keys.task_fence(a.task))
            .key(keys.task_report(*a))
            .arg(a.attempt + 1);
    }
    let fenced: Vec<i64> = invocation.invoke_async(con).await?;
    Ok(fenced.into_iter().map(|f| f == 1).collect())
}

/// Removes recorded (or dangling) reports from Redis.
pub async fn forget_reports(
    con: &mut ConnectionManager,
    keys: &Keys,
    done: &[AttemptRef],
    garbage: &[String],
) -> redis::RedisResult<()> {
    if done.is_empty() && garbage.is_empty() {
        return Ok(());
    }
    let mut pipe = redis::pipe();
    let report_keys: Vec<String> = done.iter().map(|a| keys.task_report(*a)).collect();
    if !report_keys.is_empty() {
        pipe.del(report_keys).ignore();
    }
    let members: Vec<String> = done
        .iter()
        .map(|a| keys::attempt_value(*a))
        .chain(garbage.iter().cloned())
        .collect();
    pipe.srem(keys.pending_reports(), members).ignore();
    pipe.query_async::<()>(con).await
}

/// Reads the dataset's epoch, creating it if Redis has none. Returns the
/// epoch now in Redis.
pub async fn ensure_epoch(con: &mut ConnectionManager, keys: &Keys) -> redis::RedisResult<String> {
    let fresh = trainyard_proto::auth::ClusterSecret::generate_hex();
    let _: Option<String> = redis::cmd("SET")
        .arg(keys.epoch())
        .arg(&fresh)
        .arg("NX")
        .query_async(con)
        .await?;
    con.get(keys.epoch()).await
}
