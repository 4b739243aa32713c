//! Start-up reconciliation, Redis side: every worker lease Redis holds, found
//! with `SCAN` (never `KEYS`, which blocks Redis for the whole keyspace) and
//! read in batches. The scheduler compares them with the database: a lease of
//! the task's current attempt confirms it; any other belongs to an attempt
//! the master has given away, and its host is told to stop it when it
//! reconnects.

use redis::aio::ConnectionManager;
use trainyard_proto::keys::{self, Keys};
use trainyard_proto::{AttemptRef, WorkerId};

/// How many keys one `SCAN` step asks for.
const SCAN_COUNT: usize = 1000;

/// Every `worker:{worker}:task` lease: which worker holds which attempt.
pub async fn worker_leases(
    con: &mut ConnectionManager,
    keys: &Keys,
) -> redis::RedisResult<Vec<(WorkerId, AttemptRef)>> {
    let pattern = keys.worker_task_pattern();
    let mut cursor: u64 = 0;
    let mut found = vec![];
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(SCAN_COUNT)
            .query_async(con)
            .await?;
        if !batch.is_empty() {
            let values: Vec<Option<String>> =
                redis::cmd("MGET").arg(&batch).query_async(con).await?;
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
        cursor = next;
        if cursor == 0 {
            return Ok(found);
        }
    }
}
