//! The host's end of a supervisor's control socket.
//!
//! Requests ([`Requests`]) are recorded without blocking and written by a
//! background task; pending ones are coalesced (the latest deadline, the
//! shortest grace), so memory stays bounded even while a frozen supervisor
//! does not read. Reports are read by another task. [`LinkShutdown`] makes
//! dropping the trainer close the socket at once, which is what tells the
//! supervisor to kill the trainer's group.

use super::wire::{HostMessage, LimitBreach, Report, WireError};
use super::Deadline;
use nix::sys::socket::{shutdown, Shutdown};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::Notify;

/// Requests made but not yet written to the supervisor.
#[derive(Debug, Default)]
struct Pending {
    deadline: Option<Deadline>,
    stop: Option<Duration>,
    kill: bool,
}

/// The requests a trainer's owners make, shared with the writer task.
#[derive(Debug, Default)]
pub(crate) struct Requests {
    pending: Mutex<Pending>,
    wake: Notify,
}

impl Requests {
    fn update(&self, change: impl FnOnce(&mut Pending)) {
        change(&mut self.pending.lock().unwrap_or_else(PoisonError::into_inner));
        self.wake.notify_one();
    }

    pub(crate) fn set_deadline(&self, deadline: Deadline) {
        self.update(|p| p.deadline = Some(deadline));
    }

    pub(crate) fn stop(&self, grace: Duration) {
        self.update(|p| p.stop = Some(p.stop.map_or(grace, |g| g.min(grace))));
    }

    pub(crate) fn kill(&self) {
        self.update(|p| p.kill = true);
    }

    /// The pending requests, in the order they take effect.
    fn take(&self) -> Vec<HostMessage> {
        let pending =
            std::mem::take(&mut *self.pending.lock().unwrap_or_else(PoisonError::into_inner));
        let deadline = pending.deadline.map(HostMessage::Deadline);
        let stop = pending.stop.map(|grace| HostMessage::Stop { grace });
        let kill = pending.kill.then_some(HostMessage::Kill);
        [deadline, stop, kill].into_iter().flatten().collect()
    }
}

/// Writes requests as they are made, until the socket fails.
pub(crate) async fn write_requests(mut socket: OwnedWriteHalf, requests: std::sync::Arc<Requests>) {
    loop {
        requests.wake.notified().await;
        for message in requests.take() {
            if socket.write_all(&message.encode()).await.is_err() {
                return; // the supervisor is gone; its reader sees why
            }
        }
    }
}

/// A report that could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    #[error("reading the control socket failed: {0}")]
    Io(#[from] io::Error),
    #[error("{0}")]
    Malformed(#[from] WireError),
}

/// Reads the supervisor's reports.
pub(crate) struct ReportReader {
    socket: OwnedReadHalf,
    buffer: Vec<u8>,
}

impl ReportReader {
    pub(crate) fn new(socket: OwnedReadHalf) -> Self {
        Self {
            socket,
            buffer: Vec::new(),
        }
    }

    /// The next report, or `None` once the supervisor closed the socket.
    pub(crate) async fn next(&mut self) -> Result<Option<Report>, ReadError> {
        loop {
            if let Some((report, used)) = Report::decode(&self.buffer)? {
                self.buffer.drain(..used);
                return Ok(Some(report));
            }
            let mut chunk = [0u8; 512];
            let n = self.socket.read(&mut chunk).await?;
            if n == 0 {
                return Ok(None);
            }
            self.buffer.extend_from_slice(&chunk[..n]);
        }
    }
}

/// How the supervisor's side of a running trainer ended.
#[derive(Debug)]
pub(crate) struct Ending {
    /// The final report, or why none came.
    pub outcome: Result<Report, String>,
    /// The limit the attempt went over, if it did.
    pub breach: Option<LimitBreach>,
    /// When it was read: the end of the trainer's run time.
    pub at: Instant,
}

/// Reads until the final report (or its loss).
pub(crate) async fn read_final_report(mut reports: ReportReader) -> Ending {
    let mut breach = None;
    let mut next = reports.next().await;
    while let Ok(Some(Report::LimitExceeded(what))) = next {
        breach = Some(what);
        next = reports.next().await;
    }
    let outcome = match next {
        Ok(Some(report @ (Report::Exited(_) | Report::Signaled(_) | Report::LeaseExpired))) => {
            Ok(report)
        }
        Ok(Some(other)) => Err(format!(
            "the supervisor sent {other:?} instead of a final report"
        )),
        Ok(None) => Err("the supervisor ended without a final report".to_string()),
        Err(error) => Err(error.to_string()),
    };
    Ending {
        outcome,
        breach,
        at: Instant::now(),
    }
}

/// Shuts the control socket down when dropped, whatever the tasks using it
/// are doing: the supervisor reads end-of-file at once and kills the group.
#[derive(Debug)]
pub(crate) struct LinkShutdown(OwnedFd);

impl LinkShutdown {
    /// `socket` is a duplicate of the host's end of the control socket.
    pub(crate) fn new(socket: OwnedFd) -> Self {
        Self(socket)
    }
}

impl Drop for LinkShutdown {
    fn drop(&mut self) {
        // shutdown acts on the socket, not on this descriptor, so it ends the
        // connection even though the tasks still hold their own descriptor.
        let _ = shutdown(self.0.as_raw_fd(), Shutdown::Both);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_requests_coalesce_to_the_latest_deadline_and_shortest_grace() {
        let requests = Requests::default();
        let first = Deadline::from_boottime(Duration::from_secs(10));
        let latest = Deadline::from_boottime(Duration::from_secs(20));
        requests.set_deadline(first);
        requests.set_deadline(latest);
        requests.stop(Duration::from_secs(30));
        requests.stop(Duration::from_secs(3));
        requests.kill();
        assert_eq!(
            requests.take(),
            [
                HostMessage::Deadline(latest),
                HostMessage::Stop {
                    grace: Duration::from_secs(3)
                },
                HostMessage::Kill
            ]
        );
        assert_eq!(requests.take(), []);
    }
}
