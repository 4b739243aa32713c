//! What an adapter writes for operators: records through the contract's
//! `host.log` import, and anything it prints to stdout or stderr.
//!
//! Both go to the host's `tracing` log, tagged with the adapter, the task and
//! the attempt, and to the attempt's captured lines (stream `adapter`) that
//! the master keeps; both draw on one per-attempt budget (records and bytes)
//! so an adapter cannot flood the host's log or its disk. Each record is
//! cut at 4 KiB; once the budget is spent, later output is dropped and the
//! host says so once. The end of stderr is also kept per call, because a
//! panicking Rust guest explains itself there just before it traps.

use super::bindings::LogLevel;
use crate::logs::LogWriter;
use bytes::Bytes;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use trainyard_proto::messages::LogStream;
use trainyard_proto::AttemptRef;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// Longest record (or console line) written to the host's log.
pub const MAX_RECORD: usize = 4 << 10;
/// How much of the end of stderr a call keeps for its fault message.
const STDERR_TAIL: usize = 1 << 10;
/// The `tracing` target of everything adapters write.
const TARGET: &str = "trainyard::adapter";

/// Who is writing: every event carries these.
#[derive(Clone, Debug)]
pub struct Tags {
    pub adapter: Arc<str>,
    /// `None` while the adapter is being loaded (`describe`).
    pub attempt: Option<AttemptRef>,
    /// The attempt's captured lines (stream `adapter`), for the master.
    pub capture: Option<LogWriter>,
}

/// What is left of an attempt's log budget.
#[derive(Debug)]
pub struct LogBudget {
    records_left: u32,
    bytes_left: usize,
    /// Whether the "budget exhausted" notice was already written.
    announced: bool,
}

/// The budget's answer for one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    Write,
    /// Dropped, and the first to be: say once that the budget is spent.
    DropAndAnnounce,
    Drop,
}

impl LogBudget {
    pub fn new(records: u32, bytes: usize) -> Self {
        Self {
            records_left: records,
            bytes_left: bytes,
            announced: false,
        }
    }

    /// Takes one record of `bytes` from the budget, if it fits. Once one
    /// record was dropped every later one is too, so the log never shows an
    /// attempt's output with holes in it.
    pub fn admit(&mut self, bytes: usize) -> Admission {
        if !self.announced && self.records_left > 0 && bytes <= self.bytes_left {
            self.records_left -= 1;
            self.bytes_left -= bytes;
            Admission::Write
        } else if self.announced {
            Admission::Drop
        } else {
            self.announced = true;
            Admission::DropAndAnnounce
        }
    }
}

/// The longest prefix of `text` within `max` bytes that ends on a character
/// boundary.
pub fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Which console stream a line came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// Everything an instance writes, shared by its `host.log` import and its
/// WASI stdout and stderr.
#[derive(Debug)]
pub struct GuestOutput {
    tags: Tags,
    budget: LogBudget,
    /// Unfinished console lines, each at most [`MAX_RECORD`] bytes.
    stdout_line: Vec<u8>,
    stderr_line: Vec<u8>,
    /// The last bytes of stderr written in the current call.
    stderr_tail: Vec<u8>,
}

/// Emits one event at a level chosen at run time (`tracing`'s macros want
/// a constant one).
macro_rules! guest_event {
    ($level:expr, $($rest:tt)*) => {
        match $level {
            LogLevel::Trace => tracing::trace!(target: TARGET, $($rest)*),
            LogLevel::Debug => tracing::debug!(target: TARGET, $($rest)*),
            LogLevel::Info => tracing::info!(target: TARGET, $($rest)*),
            LogLevel::Warn => tracing::warn!(target: TARGET, $($rest)*),
            LogLevel::Error => tracing::error!(target: TARGET, $($rest)*),
        }
    };
}

impl GuestOutput {
    pub fn new(tags: Tags, budget: LogBudget) -> Self {
        Self {
            tags,
            budget,
            stdout_line: Vec::new(),
            stderr_line: Vec::new(),
            stderr_tail: Vec::new(),
        }
    }

    /// A record from the `host.log` import.
    pub fn log(&mut self, level: LogLevel, message: &str) {
        let message = cut(message, MAX_RECORD);
        if self.admit(message.len()) {
            let Tags {
                adapter,
                attempt,
                capture,
            } = &self.tags;
            if let Some(capture) = capture {
                capture.push(
                    LogStream::Adapter,
                    format!("{}: {message}", level_name(level)),
                );
            }
            let (task, attempt) = (attempt.map(|a| a.task), attempt.map(|a| a.attempt));
            guest_event!(level, adapter = %adapter, task, attempt, "{message}");
        }
    }

    /// Bytes the guest wrote to stdout or stderr; complete lines are logged
    /// at debug level.
    pub fn console(&mut self, stream: Stream, mut bytes: &[u8]) {
        if stream == Stream::Stderr {
            self.stderr_tail.extend_from_slice(bytes);
            let excess = self.stderr_tail.len().saturating_sub(STDERR_TAIL);
            self.stderr_tail.drain(..excess);
        }
        while !bytes.is_empty() {
            let line = match stream {
                Stream::Stdout => &mut self.stdout_line,
                Stream::Stderr => &mut self.stderr_line,
            };
            let room = MAX_RECORD - line.len();
            let (take, ends_line) = match bytes.iter().position(|&b| b == b'\n') {
                Some(at) if at <= room => (at + 1, true),
                _ if bytes.len() >= room => (room, true),
                _ => (bytes.len(), false),
            };
            line.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if ends_line {
                let text = String::from_utf8_lossy(line)
                    .trim_end_matches('\n')
                    .to_owned();
                line.clear();
                self.console_line(stream, &text);
            }
        }
    }

    fn console_line(&mut self, stream: Stream, text: &str) {
        if self.admit(text.len()) {
            let Tags {
                adapter,
                attempt,
                capture,
            } = &self.tags;
            if let Some(capture) = capture {
                capture.push(LogStream::Adapter, text.to_owned());
            }
            let (task, attempt) = (attempt.map(|a| a.task), attempt.map(|a| a.attempt));
            let stream = match stream {
                Stream::Stdout => "stdout",
                Stream::Stderr => "stderr",
            };
            tracing::debug!(target: TARGET, adapter = %adapter, task, attempt, stream, "{text}");
        }
    }

    fn admit(&mut self, bytes: usize) -> bool {
        match self.budget.admit(bytes) {
            Admission::Write => true,
            Admission::Drop => false,
            Admission::DropAndAnnounce => {
                let Tags {
                    adapter, attempt, ..
                } = &self.tags;
                let (task, attempt) = (attempt.map(|a| a.task), attempt.map(|a| a.attempt));
                tracing::warn!(
                    target: TARGET,
                    adapter = %adapter, task, attempt,
                    "the adapter's log budget for this attempt is spent; dropping its further log records and output"
                );
                false
            }
        }
    }

    /// Starts a new call: its fault message shows only its own stderr.
    pub fn begin_call(&mut self) {
        self.stderr_tail.clear();
    }

    /// What the current call wrote to stderr, at most the last 1 KiB, on
    /// one line (lines joined with `; `) so it fits in a fault message.
    pub fn stderr_tail(&self) -> String {
        let text = String::from_utf8_lossy(&self.stderr_tail);
        let lines: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        lines.join("; ")
    }
}

/// How a record's level reads in the captured lines.
fn level_name(level: LogLevel) -> &'static str {
    match level {
        LogLevel::Trace => "trace",
        LogLevel::Debug => "debug",
        LogLevel::Info => "info",
        LogLevel::Warn => "warn",
        LogLevel::Error => "error",
    }
}

/// Locks the shared output. A panic while holding the lock cannot leave it
/// half-updated in a way that matters, so poisoning is ignored.
pub fn lock(output: &Mutex<GuestOutput>) -> std::sync::MutexGuard<'_, GuestOutput> {
    output.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The guest's stdout or stderr: a WASI output stream that is always ready
/// and writes into [`GuestOutput`].
#[derive(Clone)]
pub struct Console {
    pub output: Arc<Mutex<GuestOutput>>,
    pub stream: Stream,
}

impl Console {
    fn write_bytes(&self, bytes: &[u8]) {
        lock(&self.output).console(self.stream, bytes);
    }
}

impl IsTerminal for Console {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for Console {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl OutputStream for Console {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.write_bytes(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 << 10)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for Console {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for Console {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.write_bytes(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_admits_records_until_either_bound_then_announces_once() {
        let mut budget = LogBudget::new(2, 1000);
        assert_eq!(budget.admit(10), Admission::Write);
        assert_eq!(budget.admit(10), Admission::Write);
        assert_eq!(budget.admit(10), Admission::DropAndAnnounce);
        assert_eq!(budget.admit(10), Admission::Drop);

        let mut budget = LogBudget::new(100, 15);
        assert_eq!(budget.admit(10), Admission::Write);
        assert_eq!(budget.admit(10), Admission::DropAndAnnounce);
        assert_eq!(
            budget.admit(5),
            Admission::Drop,
            "nothing is written after a drop"
        );
    }

    #[test]
    fn records_are_cut_on_a_character_boundary() {
        assert_eq!(cut("short", 10), "short");
        assert_eq!(cut("ééé", 5), "éé");
        assert_eq!(cut(&"x".repeat(5000), MAX_RECORD).len(), MAX_RECORD);
    }

    #[test]
    fn stderr_keeps_only_its_tail_per_call() {
        let tags = Tags {
            adapter: "t".into(),
            attempt: None,
            capture: None,
        };
        let mut out = GuestOutput::new(tags, LogBudget::new(10, 100));
        out.console(Stream::Stderr, b"old\n");
        out.begin_call();
        out.console(Stream::Stderr, &vec![b'a'; 5000]);
        out.console(Stream::Stderr, b"\npanicked at src/lib.rs:1:\nboom\n");
        let tail = out.stderr_tail();
        assert!(
            tail.ends_with("; panicked at src/lib.rs:1:; boom"),
            "{tail}"
        );
        // Joining lines adds a byte per line break at most.
        assert!(tail.len() <= STDERR_TAIL + 4, "{} bytes", tail.len());
        assert!(!tail.contains("old"));
    }
}
