//! The `python-trainer` task adapter: runs trainyard's reference Python
//! Q-learning trainer (`trainer/trainer.py`, embedded in the component).
//!
//! The host makes one instance per attempt and calls `prepare`, then
//! `on-output` for each line the trainer prints, then `finish`. This file is
//! only the glue between those calls and the plain modules that decide; it
//! keeps the one piece of per-attempt state, the workspace `finish` reads the
//! result from, and writes the few log records an operator wants.
//!
//! Layout:
//! - [`params`]: validation of the task's params, defaults filled in;
//! - [`plan`]: the launch plan (files, `python3` command, resume argument);
//! - [`output`]: the trainer's stdout protocol, line by line, into progress;
//! - [`outcome`]: the trainer's exit and `result.json` into a result or error.

mod outcome;
mod output;
mod params;
mod plan;

mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "task-adapter",
        additional_derives: [PartialEq],
    });
}

use bindings::exports::trainyard::adapter::adapter::Guest;
use bindings::trainyard::adapter::host::{log, LogLevel};
use bindings::trainyard::adapter::types::{
    AdapterInfo, ExitReport, LaunchPlan, Progress, Task, TaskError, TaskResult,
};
use output::LineReport;
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

struct PythonTrainer;

impl Guest for PythonTrainer {
    fn describe() -> AdapterInfo {
        AdapterInfo {
            name: "python-trainer".to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            description:
                "Tabular Q-learning on a grid world with the reference Python trainer (python3)"
                    .to_owned(),
            kinds: vec![plan::KIND.to_owned()],
        }
    }

    fn prepare(task: Task) -> Result<LaunchPlan, TaskError> {
        match plan::prepare(&task) {
            Ok(prepared) => {
                let p = &prepared.params;
                let start = match &prepared.resume_from {
                    Some(path) => format!("resuming from {path}"),
                    None => "from scratch".to_owned(),
                };
                log(
                    LogLevel::Info,
                    &format!(
                        "attempt {} of task {}: {} episodes, seed {}, learning rate {}, {start}",
                        task.attempt, task.id, p.episodes, p.seed, p.learning_rate
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

    fn on_output(line: String) -> Option<Progress> {
        match output::read_line(&line) {
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

    fn finish(exit: ExitReport) -> Result<TaskResult, TaskError> {
        let decision = match workspace() {
            Some(workspace) => outcome::decide(&exit, || outcome::read_outputs(&workspace)),
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
}

bindings::export!(PythonTrainer with_types_in bindings);
