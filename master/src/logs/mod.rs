//! Captured logs: the trainer and adapter lines hosts ship
//! (`HostMessage::Logs`), stored per attempt in the database within a
//! bound ([`bound`]), read and followed by `GET /v1/tasks/{id}/logs`.
//!
//! Sessions hand batches straight to the [`Recorder`] through a
//! [`LogFeed`], never through the scheduler, so a flooding trainer cannot
//! slow dispatch. The feed's queue is bounded ([`QUEUE`] batches); a batch
//! that does not fit is counted as dropped, not waited for. The recorder
//! writes what it heard in one transaction (at most every [`FLUSH_EVERY`],
//! or once [`BATCH`] lines or [`BATCH_BYTES`] wait), trims the attempts past the bound, then
//! tells followers which tasks have new lines.
//!
//! A host ships an attempt's last lines before its report, and a session
//! hands the report on only after a [`LogFeed::barrier`] says those lines
//! are stored: a task is never seen to end before its output is stored.
//! Barriers that arrive together share one write.

pub mod bound;

use crate::store::{NewLogLine, Store};
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::{broadcast, mpsc, oneshot};
use trainyard_proto::messages::{LogBatch, MAX_LOG_BATCH};
use trainyard_proto::TaskId;

/// Most lines held before they are written.
pub const BATCH: usize = 2048;

/// Most text bytes held before they are written.
pub const BATCH_BYTES: usize = 4 << 20;

/// Longest a heard line waits before it is written.
pub const FLUSH_EVERY: Duration = Duration::from_millis(200);

/// Most batches waiting for the recorder (each at most
/// [`MAX_LOG_BATCH`] lines of at most [`bound::MAX_LINE_BYTES`]).
pub const QUEUE: usize = 256;

/// Attempts whose size the recorder remembers; past this it forgets them
/// all and measures again from the database when they next log.
const REMEMBERED: usize = 10_000;

type AttemptKey = (TaskId, u32);

enum Intake {
    Batch(LogBatch),
    /// Reply once everything received before has been written.
    Sync(oneshot::Sender<()>),
}

/// The handle sessions and the API hold on the recorder. Cheap to clone.
#[derive(Clone)]
pub struct LogFeed {
    intake: mpsc::Sender<Intake>,
    /// Lines refused because the queue was full, per attempt, until the
    /// recorder counts them dropped.
    refused: Arc<Mutex<HashMap<AttemptKey, u64>>>,
    /// The tasks with newly stored lines or drops, after each write.
    stored: broadcast::Sender<TaskId>,
}

impl LogFeed {
    /// Queues a host's batch; never waits. A batch that does not fit is
    /// counted as dropped lines of its attempt.
    pub fn offer(&self, batch: LogBatch) {
        if let Err(refused) = self.intake.try_send(Intake::Batch(batch)) {
            if let Intake::Batch(batch) = refused.into_inner() {
                let key = (batch.attempt.task, batch.attempt.attempt);
                let lines = batch.lines.len() as u64 + batch.dropped;
                *lock(&self.refused).entry(key).or_default() += lines;
            }
        }
    }

    /// Asks the recorder to store every batch offered before this call
    /// (it writes them at once, with whatever else waits); the answer
    /// resolves once they are stored, or the recorder has stopped. Waits
    /// only for room in the recorder's queue.
    pub async fn barrier(&self) -> Stored {
        let (reply, done) = oneshot::channel();
        let _ = self.intake.send(Intake::Sync(reply)).await;
        Stored(done)
    }

    /// Waits until every batch offered before this call is stored (or the
    /// recorder has stopped).
    pub async fn sync(&self) {
        self.barrier().await.wait().await;
    }

    /// Tasks with newly stored lines, from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<TaskId> {
        self.stored.subscribe()
    }
}

/// The answer to [`LogFeed::barrier`].
pub struct Stored(oneshot::Receiver<()>);

impl Stored {
    /// Resolves once the lines offered before the barrier are stored.
    pub async fn wait(self) {
        let _ = self.0.await;
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The lines of `batch` to store: at most [`MAX_LOG_BATCH`], each cut to
/// [`bound::MAX_LINE_BYTES`]; and how many it drops (the host's count plus
/// any lines past the batch limit).
pub fn lines(batch: LogBatch) -> (Vec<NewLogLine>, u64) {
    let over = batch.lines.len().saturating_sub(MAX_LOG_BATCH) as u64;
    let (task, attempt) = (batch.attempt.task, batch.attempt.attempt);
    let lines = batch
        .lines
        .into_iter()
        .take(MAX_LOG_BATCH)
        .map(|l| NewLogLine {
            task,
            attempt,
            stream: l.stream,
            at_ms: l.at_ms,
            text: bound::cut_line(l.text),
        })
        .collect();
    (lines, batch.dropped + over)
}

/// Stores the lines hosts ship.
pub struct Recorder {
    store: Store,
    intake: mpsc::Receiver<Intake>,
    feed: LogFeed,
    /// Lines and bytes stored per attempt, to know when to trim.
    sizes: HashMap<AttemptKey, (usize, usize)>,
    buffer: Vec<NewLogLine>,
    buffered_bytes: usize,
    drops: HashMap<AttemptKey, u64>,
    waiting: Vec<oneshot::Sender<()>>,
}

impl Recorder {
    /// The recorder and the feed that reaches it.
    pub fn new(store: Store) -> (Self, LogFeed) {
        let (tx, intake) = mpsc::channel(QUEUE);
        let (stored, _) = broadcast::channel(1024);
        let feed = LogFeed {
            intake: tx,
            refused: Arc::default(),
            stored,
        };
        let recorder = Self {
            store,
            intake,
            feed: feed.clone(),
            sizes: HashMap::new(),
            buffer: Vec::with_capacity(BATCH),
            buffered_bytes: 0,
            drops: HashMap::new(),
            waiting: vec![],
        };
        (recorder, feed)
    }

    pub async fn run(mut self, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut tick = tokio::time::interval(FLUSH_EVERY);
        loop {
            tokio::select! {
                biased;
                _ = &mut shutdown => break,
                item = self.intake.recv() => match item {
                    Some(item) => {
                        self.take(item).await;
                        // What else waits joins this write: many barriers
                        // (a report each) cost one transaction, not one each.
                        for _ in 0..QUEUE {
                            match self.intake.try_recv() {
                                Ok(item) => self.take(item).await,
                                Err(_) => break,
                            }
                        }
                        if !self.waiting.is_empty() {
                            self.flush().await;
                        }
                    }
                    None => break,
                },
                _ = tick.tick() => self.flush().await,
            }
        }
        self.flush().await;
    }

    /// Buffers a batch (writing once the buffer is full), or notes a
    /// barrier's waiter.
    async fn take(&mut self, item: Intake) {
        match item {
            Intake::Batch(batch) => {
                let key = (batch.attempt.task, batch.attempt.attempt);
                let (lines, dropped) = lines(batch);
                if dropped > 0 {
                    *self.drops.entry(key).or_default() += dropped;
                }
                self.buffered_bytes += lines.iter().map(|l| l.text.len()).sum::<usize>();
                self.buffer.extend(lines);
                if self.buffer.len() >= BATCH || self.buffered_bytes >= BATCH_BYTES {
                    self.flush().await;
                }
            }
            Intake::Sync(reply) => self.waiting.push(reply),
        }
    }

    /// Writes the buffered lines and drops, trims the attempts past the
    /// bound, and tells followers.
    async fn flush(&mut self) {
        for (key, n) in lock(&self.feed.refused).drain() {
            *self.drops.entry(key).or_default() += n;
        }
        if !self.buffer.is_empty() || !self.drops.is_empty() {
            let lines = std::mem::take(&mut self.buffer);
            self.buffered_bytes = 0;
            let drops: Vec<(TaskId, u32, u64)> =
                self.drops.drain().map(|((t, a), n)| (t, a, n)).collect();
            match self.store.insert_log_lines(&lines, &drops).await {
                Ok(()) => {
                    self.bound(&lines).await;
                    let mut tasks: Vec<TaskId> = lines.iter().map(|l| l.task).collect();
                    tasks.extend(drops.iter().map(|d| d.0));
                    tasks.sort_unstable();
                    tasks.dedup();
                    for task in tasks {
                        let _ = self.feed.stored.send(task);
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, count = lines.len(), "log lines not stored")
                }
            }
        }
        for reply in self.waiting.drain(..) {
            let _ = reply.send(());
        }
    }

    async fn bound(&mut self, lines: &[NewLogLine]) {
        let mut added: HashMap<AttemptKey, (usize, usize)> = HashMap::new();
        for l in lines {
            let a = added.entry((l.task, l.attempt)).or_default();
            a.0 += 1;
            a.1 += l.text.len();
        }
        if self.sizes.len() > REMEMBERED {
            self.sizes.clear();
        }
        // Attempts seen for the first time are measured in one statement.
        let unknown: Vec<AttemptKey> = added
            .keys()
            .filter(|k| !self.sizes.contains_key(k))
            .copied()
            .collect();
        let stored = match self.store.log_sizes(&unknown).await {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(error = %e, "cannot measure log lines");
                return;
            }
        };
        for (key, (n, b)) in added {
            let size = match self.sizes.get(&key) {
                Some(&(ln, lb)) => (ln + n, lb + b),
                None => stored.get(&key).copied().unwrap_or((n, b)),
            };
            let size = if bound::over(size.0, size.1) {
                match self.store.trim_log(key.0, key.1).await {
                    Ok(kept) => kept,
                    Err(e) => {
                        tracing::warn!(task = key.0, error = %e, "cannot trim log lines");
                        size
                    }
                }
            } else {
                size
            };
            self.sizes.insert(key, size);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trainyard_proto::messages::{LogLine, LogStream};
    use trainyard_proto::AttemptRef;

    #[test]
    fn a_batch_past_the_wire_limit_is_cut_and_the_excess_counted_dropped() {
        let line = LogLine {
            stream: LogStream::Stderr,
            at_ms: 5,
            text: "x".repeat(bound::MAX_LINE_BYTES + 10),
        };
        let batch = LogBatch {
            attempt: AttemptRef::new(7, 2),
            lines: vec![line; MAX_LOG_BATCH + 3],
            dropped: 4,
        };
        let (lines, dropped) = lines(batch);
        assert_eq!(lines.len(), MAX_LOG_BATCH);
        assert_eq!(dropped, 7);
        assert!(lines.iter().all(|l| l.text.len() == bound::MAX_LINE_BYTES));
        assert_eq!((lines[0].task, lines[0].attempt), (7, 2));
    }
}
