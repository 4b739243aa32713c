//! The host's own view of what goes into and comes out of an adapter, and
//! the conversions from and to the generated WIT types, where the bounds
//! written in `wit/adapter.wit` are enforced.
//!
//! Bounds on *lists* and on values a machine reads (metric names, checkpoint
//! references) are hard: a value over them fails the attempt with
//! [`Violation::Oversized`]. Bounds on free text meant for operators (a
//! progress message, a result summary, an error message) are applied by
//! cutting the text and ending it with `…`: losing the end of a message is
//! better for an operator than losing the attempt's whole result over it.

use super::bindings::{wit, WitAssignment};
use super::guest_log::cut;
use crate::adapters::plan::check_relative_path;
use trainyard_proto::messages::{Metric, Progress};
use trainyard_proto::resources::Assignment;
use trainyard_proto::AttemptRef;

/// The workspace as every adapter sees it.
pub const GUEST_WORKSPACE: &str = "/workspace";

pub const MAX_PROGRESS_METRICS: usize = 64;
pub const MAX_RESULT_METRICS: usize = 256;
pub const MAX_METRIC_NAME: usize = 128;
pub const MAX_PROGRESS_MESSAGE: usize = 1 << 10;
pub const MAX_SUMMARY: usize = 4 << 10;
pub const MAX_ERROR_MESSAGE: usize = 4 << 10;
pub const MAX_EXTERNAL_CHECKPOINT: usize = 4 << 10;
/// Output lines handed to `on-output` are cut here (the contract's 64 KiB).
pub const MAX_OUTPUT_LINE: usize = 64 << 10;
/// The stderr tail handed to `finish` ("at most a few KiB").
pub const MAX_STDERR_TAIL: usize = 8 << 10;

/// One attempt, as `prepare` receives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskInput {
    pub attempt: AttemptRef,
    /// One of the adapter's kinds; empty means its first.
    pub kind: String,
    /// The task's params, a JSON object as submitted.
    pub params: String,
    pub checkpoint: Option<CheckpointRef>,
}

/// Where a checkpoint lives: a workspace-relative path, or a reference the
/// trainer manages itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CheckpointRef {
    WorkspaceFile(String),
    External(String),
}

/// What one line of trainer output reported.
#[derive(Clone, Debug, PartialEq)]
pub struct OutputEvent {
    pub progress: Progress,
    pub checkpoint: Option<CheckpointRef>,
}

/// A successful attempt's result.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskSuccess {
    pub metrics: Vec<Metric>,
    pub checkpoint: Option<CheckpointRef>,
    pub summary: Option<String>,
}

/// Why an attempt failed, as the adapter classified it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskFailure {
    pub message: String,
    pub retryable: bool,
}

/// How the trainer ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitStatus {
    Exited(i32),
    Signaled(i32),
    NotLaunched,
}

/// What `finish` is told about the trainer's run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExitReport {
    pub status: ExitStatus,
    pub stderr_tail: String,
    pub duration_ms: u64,
}

/// A returned value the contract does not allow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// Over a bound, e.g. `1000 metrics (limit 256)`.
    Oversized(String),
    /// Not allowed at all, e.g. a checkpoint path leaving the workspace.
    Invalid(String),
}

pub fn wit_task(input: &TaskInput, kind: &str) -> wit::Task {
    wit::Task {
        id: input.attempt.task,
        attempt: input.attempt.attempt,
        kind: kind.to_owned(),
        params: input.params.clone(),
        checkpoint: input.checkpoint.clone().map(|c| match c {
            CheckpointRef::WorkspaceFile(path) => wit::Checkpoint::WorkspaceFile(path),
            CheckpointRef::External(reference) => wit::Checkpoint::External(reference),
        }),
        workspace: GUEST_WORKSPACE.to_owned(),
    }
}

/// The attempt's devices and share, as `host.assigned-resources` answers.
pub fn wit_assignment(assignment: &Assignment) -> WitAssignment {
    WitAssignment {
        cpus: assignment.cpus,
        memory_bytes: assignment.memory_bytes,
        gpus: assignment.gpus.clone(),
    }
}

pub fn wit_exit(exit: &ExitReport) -> wit::ExitReport {
    wit::ExitReport {
        status: match exit.status {
            ExitStatus::Exited(code) => wit::ExitStatus::Exited(code),
            ExitStatus::Signaled(signal) => wit::ExitStatus::Signaled(signal),
            ExitStatus::NotLaunched => wit::ExitStatus::NotLaunched,
        },
        stderr_tail: tail(&exit.stderr_tail, MAX_STDERR_TAIL).to_owned(),
        duration_ms: exit.duration_ms,
    }
}

/// Checks `on-output`'s progress against the contract's bounds.
pub fn output_event(progress: wit::Progress) -> Result<OutputEvent, Violation> {
    let wit::Progress {
        episode,
        total_episodes,
        episode_return,
        metrics,
        checkpoint,
        message,
    } = progress;
    Ok(OutputEvent {
        progress: Progress {
            episode,
            total_episodes,
            episode_return,
            metrics: metrics_within(metrics, MAX_PROGRESS_METRICS)?,
            message: message.map(|m| shorten(m, MAX_PROGRESS_MESSAGE)),
        },
        checkpoint: checkpoint.map(checkpoint_ref).transpose()?,
    })
}

/// Checks `finish`'s result against the contract's bounds.
pub fn task_success(result: wit::TaskResult) -> Result<TaskSuccess, Violation> {
    Ok(TaskSuccess {
        metrics: metrics_within(result.metrics, MAX_RESULT_METRICS)?,
        checkpoint: result.checkpoint.map(checkpoint_ref).transpose()?,
        summary: result.summary.map(|s| shorten(s, MAX_SUMMARY)),
    })
}

/// An adapter's error, its message cut to the contract's 4 KiB.
pub fn task_failure(error: wit::TaskError) -> TaskFailure {
    TaskFailure {
        message: shorten(error.message, MAX_ERROR_MESSAGE),
        retryable: error.retryable,
    }
}

fn metrics_within(metrics: Vec<wit::Metric>, limit: usize) -> Result<Vec<Metric>, Violation> {
    if metrics.len() > limit {
        return Err(Violation::Oversized(format!(
            "{} metrics (limit {limit})",
            metrics.len()
        )));
    }
    metrics
        .into_iter()
        .map(|m| {
            if m.name.len() > MAX_METRIC_NAME {
                Err(Violation::Oversized(format!(
                    "a metric name of {} bytes (limit {MAX_METRIC_NAME})",
                    m.name.len()
                )))
            } else {
                Ok(Metric {
                    name: m.name,
                    value: m.value,
                })
            }
        })
        .collect()
}

fn checkpoint_ref(checkpoint: wit::Checkpoint) -> Result<CheckpointRef, Violation> {
    match checkpoint {
        wit::Checkpoint::WorkspaceFile(path) => match check_relative_path(&path) {
            Ok(_) => Ok(CheckpointRef::WorkspaceFile(path)),
            Err(problem) => Err(Violation::Invalid(format!(
                "checkpoint path {:?} is refused: {problem}",
                cut(&path, 200)
            ))),
        },
        wit::Checkpoint::External(reference) if reference.len() > MAX_EXTERNAL_CHECKPOINT => {
            Err(Violation::Oversized(format!(
                "an external checkpoint reference of {} bytes (limit {MAX_EXTERNAL_CHECKPOINT})",
                reference.len()
            )))
        }
        wit::Checkpoint::External(reference) => Ok(CheckpointRef::External(reference)),
    }
}

/// Text within `max` bytes: unchanged if it fits, otherwise cut on a
/// character boundary and ended with `…`.
pub fn shorten(text: String, max: usize) -> String {
    const ELLIPSIS: &str = "…";
    if text.len() <= max {
        return text;
    }
    let mut cut_text = cut(&text, max.saturating_sub(ELLIPSIS.len())).to_owned();
    cut_text.push_str(ELLIPSIS);
    cut_text
}

/// The longest suffix of `text` within `max` bytes, on a character boundary.
pub fn tail(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metric(name: &str) -> wit::Metric {
        wit::Metric {
            name: name.to_owned(),
            value: 1.0,
        }
    }

    fn progress(metrics: usize) -> wit::Progress {
        wit::Progress {
            episode: Some(1),
            total_episodes: None,
            episode_return: None,
            metrics: (0..metrics).map(|i| metric(&format!("m{i}"))).collect(),
            checkpoint: None,
            message: None,
        }
    }

    #[test]
    fn progress_at_the_bounds_passes_and_over_them_is_oversized() {
        assert_eq!(
            output_event(progress(64)).unwrap().progress.metrics.len(),
            64
        );
        assert_eq!(
            output_event(progress(65)),
            Err(Violation::Oversized("65 metrics (limit 64)".into()))
        );
        let mut long_name = progress(0);
        long_name.metrics.push(metric(&"n".repeat(129)));
        assert!(matches!(
            output_event(long_name),
            Err(Violation::Oversized(_))
        ));
    }

    #[test]
    fn operator_text_is_cut_not_refused() {
        let mut chatty = progress(0);
        chatty.message = Some("é".repeat(2000));
        let message = output_event(chatty).unwrap().progress.message.unwrap();
        assert!(message.len() <= MAX_PROGRESS_MESSAGE && message.ends_with('…'));

        let failure = task_failure(wit::TaskError {
            message: "x".repeat(1 << 20),
            retryable: true,
        });
        assert_eq!(failure.message.len(), MAX_ERROR_MESSAGE);
        assert!(failure.retryable);
    }

    #[test]
    fn results_over_the_bounds_are_oversized() {
        let result = wit::TaskResult {
            metrics: (0..300).map(|i| metric(&format!("m{i}"))).collect(),
            checkpoint: None,
            summary: None,
        };
        assert_eq!(
            task_success(result),
            Err(Violation::Oversized("300 metrics (limit 256)".into()))
        );
    }

    #[test]
    fn checkpoints_must_stay_in_the_workspace_and_within_their_bound() {
        let with = |c| wit::TaskResult {
            metrics: vec![],
            checkpoint: Some(c),
            summary: None,
        };
        let ok = task_success(with(wit::Checkpoint::WorkspaceFile("ckpt/q.json".into()))).unwrap();
        assert_eq!(
            ok.checkpoint,
            Some(CheckpointRef::WorkspaceFile("ckpt/q.json".into()))
        );
        for path in ["/etc/passwd", "../up", ""] {
            let refused = task_success(with(wit::Checkpoint::WorkspaceFile(path.into())));
            assert!(matches!(refused, Err(Violation::Invalid(_))), "{path:?}");
        }
        let huge = task_success(with(wit::Checkpoint::External("s".repeat(5000))));
        assert!(matches!(huge, Err(Violation::Oversized(_))));
    }

    #[test]
    fn the_stderr_tail_keeps_the_end() {
        assert_eq!(tail("abcdef", 3), "def");
        assert_eq!(tail("aé", 1), "");
        assert_eq!(tail("short", 10), "short");
    }
}
