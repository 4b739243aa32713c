//! The calls of the `task-adapter` world for an adapter that runs a
//! reference trainer (the grid world's or CartPole's). The host makes one instance per attempt and calls
//! `prepare`, then `on-output` for each line the trainer prints, then
//! `finish`. These functions are the glue between those calls and the plain
//! modules that decide; they keep the one piece of per-attempt state, the
//! workspace `finish` reads the result from, and write the few log records
//! an operator wants.

use crate::bindings::trainyard::adapter::host::{log, LogLevel};
use crate::bindings::trainyard::adapter::types::{
    AdapterInfo, ExitReport, LaunchPlan, Progress, Task, TaskError, TaskResult,
};
use crate::outcome::{self, ResultShape};
use crate::output::{self, LineReport};
use crate::params::TrainerParams;
use crate::plan::{PreparedAttempt, Trainer};
use std::path::PathBuf;
use std::sync::Mutex;

/// The attempt this instance serves, set by `prepare`. The host never calls
/// an instance concurrently, so the lock is never contended; it only makes
/// the static safe to share.
static ATTEMPT: Mutex<Option<Attempt>> = Mutex::new(None);

struct Attempt {
    /// Where `finish` finds `result.json`, as the adapter sees it via WASI.
    workspace: PathBuf,
}

fn remember(attempt: Attempt) {
    *ATTEMPT
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(attempt);
}

fn workspace() -> Option<PathBuf> {
    ATTEMPT
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .as_ref()
        .map(|a| a.workspace.clone())
}

/// The few params an operator wants in the log line that starts an attempt.
pub trait RunSummary {
    /// E.g. "300 episodes, seed 0, learning rate 0.5".
    fn run_summary(&self) -> String;
}

impl RunSummary for TrainerParams {
    fn run_summary(&self) -> String {
        format!(
            "{} episodes, seed {}, learning rate {}",
            self.episodes, self.seed, self.learning_rate
        )
    }
}

/// `describe`: an adapter of `trainer`'s kind.
pub fn describe(name: &str, version: &str, description: &str, trainer: &Trainer) -> AdapterInfo {
    AdapterInfo {
        name: name.to_owned(),
        version: version.to_owned(),
        description: description.to_owned(),
        kinds: vec![trainer.kind.to_owned()],
    }
}

/// `prepare`: hands the host the plan the adapter decided on, or the reason
/// the task cannot run (never worth a retry: the task itself is at fault).
pub fn prepare<P: RunSummary>(
    task: &Task,
    decided: Result<PreparedAttempt<P>, impl std::fmt::Display>,
) -> Result<LaunchPlan, TaskError> {
    match decided {
        Ok(prepared) => {
            let start = match &prepared.resume_from {
                Some(path) => format!("resuming from {path}"),
                None => "from scratch".to_owned(),
            };
            log(
                LogLevel::Info,
                &format!(
                    "attempt {} of task {}: {}, {start}",
                    task.attempt,
                    task.id,
                    prepared.params.run_summary()
                ),
            );
            remember(Attempt {
                workspace: PathBuf::from(&task.workspace),
            });
            Ok(prepared.plan)
        }
        Err(e) => {
            let message = e.to_string();
            log(LogLevel::Warn, &message);
            Err(TaskError {
                message,
                retryable: false,
            })
        }
    }
}

/// `on-output`: one line of the trainer's stdout into progress, if it is any.
pub fn on_output(line: &str) -> Option<Progress> {
    match output::read_line(line) {
        LineReport::Progress(progress) => Some(progress),
        LineReport::UnsafeCheckpoint { path } => {
            log(
                LogLevel::Warn,
                &format!("ignored a checkpoint outside the workspace: {path:?}"),
            );
            None
        }
        LineReport::Ignored => None,
    }
}

/// `finish`: the trainer's exit and the files it left into the attempt's
/// result (of the trainer's `shape`) or a classified failure.
pub fn finish(exit: &ExitReport, shape: &ResultShape) -> Result<TaskResult, TaskError> {
    let decision = match workspace() {
        Some(workspace) => outcome::decide(exit, shape, || outcome::read_outputs(&workspace)),
        None => Err(outcome::FinishError::NotPrepared),
    };
    match decision {
        Ok(result) => {
            if let Some(summary) = &result.summary {
                log(
                    LogLevel::Info,
                    &format!("finished in {} ms: {summary}", exit.duration_ms),
                );
            }
            Ok(result)
        }
        Err(e) => {
            let error = TaskError {
                message: e.to_string(),
                retryable: e.retryable(),
            };
            log(
                LogLevel::Warn,
                &format!(
                    "attempt failed after {} ms ({}): {}",
                    exit.duration_ms,
                    if error.retryable {
                        "retryable"
                    } else {
                        "final"
                    },
                    error.message
                ),
            );
            Err(error)
        }
    }
}
