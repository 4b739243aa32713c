//! Stalled-trainer detection: a trainer that is alive but reports no
//! progress for its attempt's progress timeout is stopped, and its attempt
//! ends [`Outcome::Stalled`] with its last output lines in the message.
//!
//! # Where the deadline is enforced, and why here
//! The host enforces it, as it enforces the wall-clock `timeout_secs` and
//! the containment limits:
//! - it sees every progress event first-hand, as the adapter reads it from
//!   the trainer's output — before the throttle that batches progress to
//!   the master (`host.progress_interval`), and whether or not the master
//!   can be reached. The master hears progress late and only while
//!   connected: judging there would call a trainer stalled because its
//!   host's connection was down, and a master outage would let real hangs
//!   hold their GPUs;
//! - it can stop the trainer gracefully (the same stop as for a timeout)
//!   and read what the trainer printed last, which goes into the reason;
//! - the report, kept in Redis until recorded, carries the verdict to the
//!   master even if the master is down when the trainer hangs.
//!
//! The master's recovery sweep is the backstop when the host is gone: the
//! host then stops renewing the lease, the trainer's supervisor kills it
//! when the lease deadline passes, and the sweep requeues the task once the
//! lease has lapsed (LEASE_LOST, a dead attempt: without its host nobody
//! can tell a hang from a crash). The master shows each running attempt's
//! "quiet for" (`trainyard task`, the dashboard's task page, `/metrics`),
//! so an operator sees a hang coming either way.
//!
//! The adapter's default lives in its entry in the host's configuration,
//! not in the WIT contract: adapters declare nothing like it in `describe`,
//! and a contract change would mean a new contract version for every
//! adapter; the operator who installs an adapter knows how quiet its
//! trainers may be.
//!
//! # Which timeout
//! The task's own `progress_timeout_secs` (or its sweep's, copied to each
//! trial) wins; else the default of the adapter's entry in the host's
//! configuration (`progress_timeout` under `[[host.adapters]]`); else none.
//! The clock starts when the trainer is launched (not while the workspace
//! or its Python environment is prepared) and restarts with every event the
//! adapter reads from the trainer's output.

use std::collections::VecDeque;
use std::time::Duration;
use tokio::time::Instant;
use trainyard_proto::messages::Outcome;

/// How many of the trainer's last stdout lines a stalled attempt's reason
/// keeps, and how many of its stderr's last lines.
pub const KEPT_LINES: usize = 10;

/// Longest line kept in a reason; the rest is cut.
const KEPT_LINE_BYTES: usize = 512;

/// The progress timeout an attempt runs with: the task's own (`dispatch`),
/// else its adapter entry's default.
pub fn effective(dispatch: Option<u64>, adapter_default: Option<Duration>) -> Option<Duration> {
    dispatch.map(Duration::from_secs).or(adapter_default)
}

/// Watches one attempt's trainer for progress.
#[derive(Debug)]
pub struct StallWatch {
    limit: Option<Duration>,
    /// When the trainer last made progress (or was launched).
    last: Instant,
    /// Its last stdout lines, oldest first.
    lines: VecDeque<String>,
}

impl StallWatch {
    /// A watch with no limit, until [`StallWatch::start`].
    pub fn off() -> Self {
        Self {
            limit: None,
            last: Instant::now(),
            lines: VecDeque::new(),
        }
    }

    /// Starts the clock, at the trainer's launch.
    pub fn start(&mut self, limit: Option<Duration>) {
        self.limit = limit;
        self.last = Instant::now();
    }

    /// The trainer made progress: the clock starts again.
    pub fn progressed(&mut self) {
        self.last = Instant::now();
    }

    /// Keeps a stdout line among the last ones.
    pub fn saw_line(&mut self, line: &str) {
        if self.lines.len() == KEPT_LINES {
            self.lines.pop_front();
        }
        self.lines.push_back(cut(line).to_string());
    }

    /// When the trainer is stalled unless it makes progress first.
    pub fn deadline(&self) -> Option<Instant> {
        self.limit.map(|limit| self.last + limit)
    }

    /// How long the trainer has been quiet.
    pub fn quiet(&self) -> Duration {
        self.last.elapsed()
    }

    /// The outcome of an attempt stopped after being quiet for `quiet`,
    /// with what the trainer printed last (`stderr_tail`: the end of its
    /// stderr, as the supervisor kept it).
    pub fn outcome(&self, quiet: Duration, stderr_tail: &str) -> Outcome {
        let limit = self.limit.unwrap_or(quiet);
        let stdout: Vec<&str> = self.lines.iter().map(String::as_str).collect();
        Outcome::Stalled {
            message: message(quiet, limit, &stdout, stderr_tail),
        }
    }
}

/// The reason of a stalled attempt: how long it was quiet, then its last
/// stdout and stderr lines.
pub fn message(quiet: Duration, limit: Duration, stdout: &[&str], stderr_tail: &str) -> String {
    let mut text = format!(
        "stalled: no progress for {} s (progress timeout {} s); the trainer was stopped",
        quiet.as_secs(),
        limit.as_secs()
    );
    let stderr: Vec<&str> = stderr_tail
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect();
    let stderr = &stderr[stderr.len().saturating_sub(KEPT_LINES)..];
    for (name, lines) in [("stdout", stdout), ("stderr", stderr)] {
        if !lines.is_empty() {
            text.push_str(&format!("\nlast {name} lines:"));
            for line in lines {
                text.push_str("\n  ");
                text.push_str(cut(line));
            }
        }
    }
    text
}

/// `line` cut to [`KEPT_LINE_BYTES`] at a character boundary.
fn cut(line: &str) -> &str {
    if line.len() <= KEPT_LINE_BYTES {
        return line;
    }
    let mut end = KEPT_LINE_BYTES;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    &line[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tasks_own_timeout_wins_over_its_adapters_default() {
        let default = Some(Duration::from_secs(600));
        assert_eq!(effective(Some(30), default), Some(Duration::from_secs(30)));
        assert_eq!(effective(None, default), default);
        assert_eq!(effective(None, None), None);
    }

    #[test]
    fn progress_pushes_the_deadline_back_and_no_limit_means_no_deadline() {
        let mut watch = StallWatch::off();
        assert_eq!(watch.deadline(), None);
        watch.start(Some(Duration::from_secs(60)));
        let first = watch.deadline().unwrap();
        std::thread::sleep(Duration::from_millis(5));
        watch.progressed();
        assert!(watch.deadline().unwrap() > first);
    }

    #[test]
    fn a_stalled_reason_says_how_long_and_keeps_the_last_lines() {
        let mut watch = StallWatch::off();
        watch.start(Some(Duration::from_secs(20)));
        for i in 0..(KEPT_LINES + 5) {
            watch.saw_line(&format!("episode {i}"));
        }
        let Outcome::Stalled { message } = watch.outcome(
            Duration::from_secs(21),
            "Traceback\nwaiting for the data loader\n",
        ) else {
            panic!()
        };
        assert!(message.starts_with("stalled: no progress for 21 s (progress timeout 20 s)"));
        assert!(message.contains("episode 14"), "{message}");
        assert!(
            !message.contains("episode 4\n"),
            "only the last lines: {message}"
        );
        assert!(message.contains("waiting for the data loader"), "{message}");
    }

    #[test]
    fn a_long_line_is_cut_at_a_character_boundary() {
        let line = "é".repeat(KEPT_LINE_BYTES);
        let kept = cut(&line);
        assert!(kept.len() <= KEPT_LINE_BYTES);
        assert!(kept.chars().all(|c| c == 'é'));
    }
}
