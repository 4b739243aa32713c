//! What the benchmarks ask of the master's API: submitting batches of
//! no-work tasks, waiting until a number of them are terminal, and reading
//! back when each finished.

use anyhow::{bail, Context};
use futures::StreamExt;
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};
use trainyard::client::ApiClient;
use trainyard_master::model::{Task, TaskStatus};

/// Tasks per submission in the saturation phase.
const SUBMIT_BATCH: usize = 500;
/// Submissions in flight at once in the saturation phase.
const SUBMITTERS: usize = 4;

/// Submitted tasks: id -> when the submission was sent (ms since the epoch).
pub type Sent = HashMap<u64, i64>;

/// Submits `n` tasks of the noop adapter with these params, one request.
pub async fn submit(
    client: &ApiClient,
    params: &serde_json::Value,
    n: usize,
    sent: &mut Sent,
) -> anyhow::Result<()> {
    if n == 0 {
        return Ok(());
    }
    let batch: Vec<serde_json::Value> = (0..n)
        .map(|_| json!({ "adapter": "noop", "params": params }))
        .collect();
    let at = trainyard_proto::now_ms();
    let ids = client.submit_batch(&batch).await?;
    for id in ids {
        sent.insert(id, at);
    }
    Ok(())
}

/// Submits `tasks` tasks of the noop adapter at once: batches of
/// [`SUBMIT_BATCH`], [`SUBMITTERS`] requests in flight, as several of a
/// fleet's users would (the saturation phase).
pub async fn submit_all(
    client: &ApiClient,
    params: &serde_json::Value,
    tasks: usize,
) -> anyhow::Result<Sent> {
    let sizes: Vec<usize> = (0..tasks)
        .step_by(SUBMIT_BATCH)
        .map(|start| SUBMIT_BATCH.min(tasks - start))
        .collect();
    let batches: Vec<anyhow::Result<Sent>> = futures::stream::iter(sizes)
        .map(|n| async move {
            let mut part = Sent::new();
            submit(client, params, n, &mut part).await?;
            Ok(part)
        })
        .buffer_unordered(SUBMITTERS)
        .collect()
        .await;
    let mut sent = Sent::new();
    for part in batches {
        sent.extend(part?);
    }
    Ok(sent)
}

/// Waits until `n` tasks are terminal, by the master's status counts.
pub async fn wait_terminal(client: &ApiClient, n: usize, timeout: Duration) -> anyhow::Result<()> {
    let until = Instant::now() + timeout;
    loop {
        let health = client.health().await?;
        let done: u64 = ["COMPLETED", "FAILED", "CANCELLED"]
            .iter()
            .filter_map(|s| health["tasks"][s].as_u64())
            .sum();
        if done as usize >= n {
            return Ok(());
        }
        if Instant::now() > until {
            bail!("only {done} of {n} tasks ended within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One task's outcome.
pub struct Done {
    pub id: u64,
    pub status: TaskStatus,
    pub runs: u32,
    pub finished: i64,
    pub latency_ms: f64,
}

/// Reads the tasks of `sent` back and measures each one's latency.
pub async fn collect(client: &ApiClient, sent: &Sent) -> anyhow::Result<Vec<Done>> {
    let ids: Vec<u64> = sent.keys().copied().collect();
    Ok(read_tasks(client, &ids)
        .await?
        .into_iter()
        .map(|t| {
            let finished = t.finished_at_ms.unwrap_or(i64::MAX);
            Done {
                id: t.id,
                status: t.status,
                runs: t.runs,
                finished,
                latency_ms: (finished - sent[&t.id]) as f64,
            }
        })
        .collect())
}

/// Reads these tasks through the API, newest first, a page of 1000 at a
/// time; fails if any is missing.
pub async fn read_tasks(client: &ApiClient, ids: &[u64]) -> anyhow::Result<Vec<Task>> {
    let wanted: HashSet<u64> = ids.iter().copied().collect();
    let lowest = *ids.iter().min().context("no task to read")?;
    let mut before = ids.iter().max().map(|m| m + 1);
    let mut out = Vec::with_capacity(ids.len());
    while out.len() < wanted.len() {
        let page = client.tasks(None, None, Some(1000), before).await?;
        let Some(last) = page.last() else { break };
        before = Some(last.id);
        let past = last.id <= lowest;
        out.extend(page.into_iter().filter(|t| wanted.contains(&t.id)));
        if past {
            break;
        }
    }
    if out.len() != wanted.len() {
        bail!(
            "{} of {} tasks are missing from the task list",
            wanted.len() - out.len(),
            wanted.len()
        );
    }
    Ok(out)
}
