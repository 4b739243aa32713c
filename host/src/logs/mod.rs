//! Log capture: the trainer's stdout and stderr lines and the adapter's
//! log records, kept per attempt until the connection ships them to the
//! master (`HostMessage::Logs`).
//!
//! Attempts push into the shared [`LogBook`] through a [`LogWriter`] and
//! never wait: each attempt's backlog is bounded ([`pending`]), and what
//! does not fit is dropped, counted and marked. The connection's writer
//! takes at most one batch per attempt every [`SHIP_EVERY`], and only when
//! no other message waits, so logs never hold up heartbeats or reports;
//! before an attempt's report it ships that attempt's remaining lines, so
//! the master has them all when the task ends. A flooding attempt thus
//! ships at most [`MAX_LOG_BATCH`] lines per [`SHIP_EVERY`].
//!
//! Lines of ended attempts stay until shipped (the master may be away); at
//! most [`MAX_ENDED`] ended attempts are kept, the oldest forgotten first.

pub mod pending;

use pending::Pending;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use trainyard_proto::messages::{LogBatch, LogLine, LogStream, MAX_LOG_BATCH, MAX_LOG_LINE_BYTES};
use trainyard_proto::{now_ms, AttemptRef};

/// How often the connection ships a batch of each attempt's lines.
pub const SHIP_EVERY: Duration = Duration::from_millis(100);

/// Most ended attempts whose lines wait for the master.
pub const MAX_ENDED: usize = 64;

#[derive(Debug, Default)]
struct Attempt {
    pending: Pending,
    /// When the attempt ended (in order of ending); `None` while it runs.
    ended: Option<u64>,
}

#[derive(Debug, Default)]
struct Book {
    attempts: BTreeMap<AttemptRef, Attempt>,
    endings: u64,
}

/// Every attempt's lines waiting to be shipped. Shared by the attempts
/// (through their writers) and the connection.
#[derive(Debug, Default)]
pub struct LogBook {
    book: Mutex<Book>,
}

/// An attempt's handle for adding lines. Cheap to clone; never blocks.
#[derive(Clone, Debug)]
pub struct LogWriter {
    book: Arc<LogBook>,
    attempt: AttemptRef,
}

impl LogWriter {
    /// Adds one line, cut to [`MAX_LOG_LINE_BYTES`].
    pub fn push(&self, stream: LogStream, mut text: String) {
        if text.len() > MAX_LOG_LINE_BYTES {
            let end =
                crate::process::wire::truncate_at_char_boundary(&text, MAX_LOG_LINE_BYTES).len();
            text.truncate(end);
        }
        let line = LogLine {
            stream,
            at_ms: now_ms(),
            text,
        };
        let mut book = self.book.lock();
        if let Some(a) = book.attempts.get_mut(&self.attempt) {
            a.pending.push(line);
        }
    }

    /// The attempt has ended: no more lines come. Its waiting lines stay
    /// until they are shipped.
    pub fn close(&self) {
        let mut book = self.book.lock();
        book.endings += 1;
        let ending = book.endings;
        if let Some(a) = book.attempts.get_mut(&self.attempt) {
            a.ended = Some(ending);
        }
        book.forget_empty();
        let mut ended: Vec<(u64, AttemptRef)> = book
            .attempts
            .iter()
            .filter_map(|(r, a)| a.ended.map(|e| (e, *r)))
            .collect();
        if ended.len() > MAX_ENDED {
            ended.sort_unstable();
            for (_, attempt) in &ended[..ended.len() - MAX_ENDED] {
                book.attempts.remove(attempt);
                tracing::warn!(%attempt, "log lines of an ended attempt never reached the master; forgotten");
            }
        }
    }
}

impl LogBook {
    /// A writer for a new attempt.
    pub fn writer(self: &Arc<Self>, attempt: AttemptRef) -> LogWriter {
        self.lock().attempts.entry(attempt).or_default();
        LogWriter {
            book: self.clone(),
            attempt,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One batch from every attempt that has lines waiting.
    pub fn take_due(&self) -> Vec<LogBatch> {
        let now = now_ms();
        let mut book = self.lock();
        let batches = book
            .attempts
            .iter_mut()
            .filter_map(|(attempt, a)| batch(*attempt, &mut a.pending, now))
            .collect();
        book.forget_empty();
        batches
    }

    /// Everything `attempt` has waiting, in batches (sent before its report).
    pub fn take_all(&self, attempt: AttemptRef) -> Vec<LogBatch> {
        let now = now_ms();
        let mut book = self.lock();
        let mut batches = vec![];
        if let Some(a) = book.attempts.get_mut(&attempt) {
            while let Some(b) = batch(attempt, &mut a.pending, now) {
                batches.push(b);
            }
        }
        book.forget_empty();
        batches
    }
}

impl Book {
    /// Ended attempts with nothing left to ship.
    fn forget_empty(&mut self) {
        self.attempts
            .retain(|_, a| a.ended.is_none() || !a.pending.is_empty());
    }
}

fn batch(attempt: AttemptRef, pending: &mut Pending, now: i64) -> Option<LogBatch> {
    let taken = pending.take(now)?;
    debug_assert!(taken.lines.len() <= MAX_LOG_BATCH);
    Some(LogBatch {
        attempt,
        lines: taken.lines,
        dropped: taken.dropped,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ended_attempt_keeps_its_lines_until_they_are_taken_then_is_forgotten() {
        let book = Arc::new(LogBook::default());
        let a = AttemptRef::new(1, 1);
        let w = book.writer(a);
        w.push(LogStream::Stdout, "one".into());
        w.push(LogStream::Stderr, "two".into());
        w.close();
        w.push(LogStream::Stdout, "late".into());
        let batches = book.take_all(a);
        assert_eq!(batches.len(), 1);
        let texts: Vec<_> = batches[0].lines.iter().map(|l| l.text.as_str()).collect();
        assert_eq!(texts, ["one", "two", "late"]);
        assert!(book.lock().attempts.is_empty());
        w.push(LogStream::Stdout, "after it was forgotten".into());
        assert!(book.take_due().is_empty());
    }

    #[test]
    fn a_line_longer_than_the_wire_allows_is_cut() {
        let book = Arc::new(LogBook::default());
        let a = AttemptRef::new(1, 1);
        let w = book.writer(a);
        w.push(LogStream::Stdout, "é".repeat(MAX_LOG_LINE_BYTES));
        let text = &book.take_all(a)[0].lines[0].text;
        assert!(text.len() <= MAX_LOG_LINE_BYTES);
        assert!(text.chars().all(|c| c == 'é'));
    }

    #[test]
    fn at_most_so_many_ended_attempts_wait() {
        let book = Arc::new(LogBook::default());
        for task in 1..=(MAX_ENDED as u64 + 5) {
            let w = book.writer(AttemptRef::new(task, 1));
            w.push(LogStream::Stdout, "x".into());
            w.close();
        }
        let batches = book.take_due();
        assert_eq!(batches.len(), MAX_ENDED);
        assert_eq!(batches[0].attempt.task, 6, "the oldest went first");
    }
}
