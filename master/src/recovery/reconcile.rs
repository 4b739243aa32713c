//! Start-up reconciliation, Redis side: every worker lease Redis holds, found
//! with `SCAN` (never `KEYS`, which blocks Redis for the whole keyspace) and
//! read in batches. The scheduler compares them with the database: a lease of
//! the task's current attempt confirms it; any other belongs to an attempt
//! the master has given away, and its host is told to stop it when it
//! reconnects.
//!
//! Round trips: each `SCAN` step goes out in one pipeline with the `MGET` of
//! the keys the step before found, so the scan takes one round trip per step
//! plus one for the last batch — about `keys in Redis / SCAN_COUNT + 1`, set
//! by the size of the keyspace rather than by one request per lease.

use redis::aio::ConnectionManager;
use trainyard_proto::keys::{self, Keys};
use trainyard_proto::{AttemptRef, WorkerId};

/// How many keys one `SCAN` step asks for: enough to keep the round trips
/// few, small enough that no step holds Redis up for long.
const SCAN_COUNT: usize = 1000;

/// The worker leases Redis held, and what finding them took.
#[derive(Debug, Default)]
pub struct WorkerLeases {
    /// Which worker holds which attempt.
    pub leases: Vec<(WorkerId, AttemptRef)>,
    /// Requests made: one per `SCAN` step, plus the last batch's `MGET`.
    pub round_trips: u32,
}

/// Every `worker:{worker}:task` lease.
pub async fn worker_leases(
    con: &mut ConnectionManager,
    keys: &Keys,
) -> redis::RedisResult<WorkerLeases> {
    let pattern = keys.worker_task_pattern();
    let mut found = WorkerLeases::default();
    let mut cursor: u64 = 0;
    // Keys the previous step found, read together with the next step.
    let mut unread: Vec<String> = vec![];
    loop {
        let mut pipe = redis::pipe();
        pipe.cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(SCAN_COUNT);
        let (next, batch) = if unread.is_empty() {
            let (step,): ((u64, Vec<String>),) = pipe.query_async(con).await?;
            step
        } else {
            pipe.cmd("MGET").arg(&unread);
            let (step, values): ((u64, Vec<String>), Vec<Option<String>>) =
                pipe.query_async(con).await?;
            record(keys, &unread, values, &mut found.leases);
            step
        };
        found.round_trips += 1;
        unread = batch;
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    if !unread.is_empty() {
        let values: Vec<Option<String>> = redis::cmd("MGET").arg(&unread).query_async(con).await?;
        found.round_trips += 1;
        record(keys, &unread, values, &mut found.leases);
    }
    Ok(found)
}

/// Adds the leases among `values` (read for `batch`); a key that expired
/// between `SCAN` and `MGET` reads as nothing and is skipped.
fn record(
    keys: &Keys,
    batch: &[String],
    values: Vec<Option<String>>,
    found: &mut Vec<(WorkerId, AttemptRef)>,
) {
    for (key, value) in batch.iter().zip(values) {
        let (Some(worker), Some(value)) = (keys.parse_worker_task(key), value) else {
            continue;
        };
        match keys::parse_attempt_value(&value) {
            Some(attempt) => found.push((worker, attempt)),
            None => tracing::warn!(key, value, "ignoring unreadable worker lease"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trainyard_proto::HostId;
    use trainyard_testkit::RedisServer;

    #[tokio::test]
    async fn reconciliation_reads_5000_leases_in_a_few_pipelined_scan_steps() {
        let redis = RedisServer::start();
        let mut con = redis::Client::open(redis.url())
            .unwrap()
            .get_connection_manager()
            .await
            .unwrap();
        let keys = Keys::new("rc:");
        let mut pipe = redis::pipe();
        for task in 1..=5000u64 {
            let worker = HostId::new(format!("h{}", task % 50))
                .unwrap()
                .worker((task / 50) as u32);
            let attempt = AttemptRef::new(task, 1);
            pipe.set(keys.worker_task(&worker), keys::attempt_value(attempt))
                .ignore()
                .set(keys.task_owner(task), keys::owner_value(&worker, 1))
                .ignore();
        }
        pipe.query_async::<()>(&mut con).await.unwrap();

        let found = worker_leases(&mut con, &keys).await.unwrap();
        let mut tasks: Vec<u64> = found.leases.iter().map(|(_, a)| a.task).collect();
        tasks.sort();
        assert_eq!(tasks, (1..=5000).collect::<Vec<_>>());
        // 10,000 keys at SCAN_COUNT 1000 per step: about ten steps plus the
        // last batch's read, nowhere near a request per lease.
        let keyspace = 10_000 / SCAN_COUNT as u32;
        assert!(
            found.round_trips <= 2 * keyspace + 2,
            "{} round trips",
            found.round_trips
        );
    }
}
