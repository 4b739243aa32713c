//! Reading a trainer's standard output and standard error.
//!
//! Output is read only as fast as it is consumed: stdout lines go into a
//! bounded channel, so a slow consumer makes the reader wait, the pipe fill
//! and the trainer block in `write` — memory stays bounded whatever the
//! trainer prints. A consumer that drops its receiver stops receiving, but the
//! pipe is still drained so the trainer never blocks on it.
//!
//! The pipes normally reach end-of-file as soon as the trainer's group is
//! gone. A process that left the group (`setsid`) may hold them open forever,
//! so once the supervisor has reported the trainer's end, a pipe that stays
//! silent for [`ORPHAN_IDLE`] counts as finished.

use super::lines::LineSplitter;
use super::tail::StderrTail;
use crate::logs::LogWriter;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::{mpsc, watch};
use trainyard_proto::messages::LogStream;

/// How long a pipe may stay silent after the trainer has ended before the
/// reader gives up on it.
pub(crate) const ORPHAN_IDLE: Duration = Duration::from_secs(2);

const CHUNK_BYTES: usize = 8192;

/// Forwards stdout lines to `lines` and returns how many were cut.
pub(crate) async fn pump_stdout<R: AsyncRead + Unpin>(
    mut pipe: R,
    max_line_bytes: usize,
    lines: mpsc::Sender<String>,
    mut trainer_gone: watch::Receiver<bool>,
) -> u64 {
    let mut splitter = LineSplitter::new(max_line_bytes);
    let mut consumer = Some(lines);
    let mut chunk = vec![0u8; CHUNK_BYTES];
    loop {
        let n = read_chunk(&mut pipe, &mut chunk, &mut trainer_gone).await;
        if n == 0 {
            break;
        }
        for line in splitter.feed(&chunk[..n]) {
            deliver(&mut consumer, line).await;
        }
    }
    if let Some(line) = splitter.finish() {
        deliver(&mut consumer, line).await;
    }
    splitter.truncated_lines()
}

async fn deliver(consumer: &mut Option<mpsc::Sender<String>>, line: String) {
    if let Some(sender) = consumer {
        if sender.send(line).await.is_err() {
            *consumer = None; // nobody listens any more; keep draining
        }
    }
}

/// Reads stderr to its end and returns its last `tail_bytes` bytes as text.
/// With `capture`, each line (cut at its length bound) also goes to the
/// attempt's log, which never blocks: lines it cannot keep are dropped
/// and counted there.
pub(crate) async fn pump_stderr<R: AsyncRead + Unpin>(
    mut pipe: R,
    tail_bytes: usize,
    capture: Option<(LogWriter, usize)>,
    mut trainer_gone: watch::Receiver<bool>,
) -> String {
    let mut tail = StderrTail::new(tail_bytes);
    let mut lines = capture.map(|(logs, max)| (logs, LineSplitter::new(max)));
    let mut chunk = vec![0u8; CHUNK_BYTES];
    loop {
        let n = read_chunk(&mut pipe, &mut chunk, &mut trainer_gone).await;
        if n == 0 {
            break;
        }
        tail.push(&chunk[..n]);
        if let Some((logs, splitter)) = &mut lines {
            for line in splitter.feed(&chunk[..n]) {
                logs.push(LogStream::Stderr, line);
            }
        }
    }
    if let Some((logs, mut splitter)) = lines {
        if let Some(line) = splitter.finish() {
            logs.push(LogStream::Stderr, line);
        }
    }
    tail.into_text()
}

/// The next chunk from `pipe`; 0 at its end, on a read error, or when it has
/// stayed silent for [`ORPHAN_IDLE`] after the trainer ended.
async fn read_chunk<R: AsyncRead + Unpin>(
    pipe: &mut R,
    chunk: &mut [u8],
    trainer_gone: &mut watch::Receiver<bool>,
) -> usize {
    loop {
        // A closed channel means the trainer handle was dropped: nothing will
        // ever say the trainer ended, so treat it as ended.
        let gone = *trainer_gone.borrow() || trainer_gone.has_changed().is_err();
        if gone {
            return match tokio::time::timeout(ORPHAN_IDLE, pipe.read(chunk)).await {
                Ok(Ok(n)) => n,
                Ok(Err(_)) | Err(_) => 0,
            };
        }
        tokio::select! {
            read = pipe.read(chunk) => return read.unwrap_or(0),
            _ = trainer_gone.changed() => {}
        }
    }
}
