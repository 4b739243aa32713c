//! The `script-trainer` task adapter: runs the Python script in a task's
//! params, as an adapter written by another team might run anything at all.
//! trainyard's containment tests use it to launch trainers that probe their
//! surroundings (read the host's secrets, write outside the workspace,
//! connect to Redis, leave processes behind, exhaust memory, processes, CPU
//! or disk) and to check each attempt ends the way the host promises. It is
//! never part of a shipped configuration.
//!
//! Params: `{"script": "<python source>"}`, and optionally `"log": "<text>"`,
//! a record `prepare` writes to the attempt's log. The script runs as
//! `python3 trainer.py` in the workspace; whatever it writes to
//! `verdict.txt` becomes the result's summary, and a non-zero exit fails the
//! attempt with the end of its stderr.
//!
//! Checkpoints, for the artifact tests: a line `checkpoint <path>` on the
//! script's stdout announces the workspace file `<path>` as a checkpoint,
//! and a line `episode <n>` reports progress; an attempt that resumes
//! finds the checkpoint's path in `RESUME_FROM`.
//!
//! It is built against the contract's first version, `0.1.0`, kept in
//! `wit/archive/0.1.0`: the witness that hosts keep loading and running
//! components built for an older version of the contract unchanged, its
//! `host@0.1.0` import (the log) included.

mod bindings {
    wit_bindgen::generate!({
        path: "../../wit/archive/0.1.0",
        world: "task-adapter",
    });
}

use bindings::exports::trainyard::adapter::adapter::Guest;
use bindings::trainyard::adapter::host::{log, LogLevel};
use bindings::trainyard::adapter::types::{
    AdapterInfo, Checkpoint, Command, EnvVar, ExitReport, ExitStatus, LaunchPlan, Progress, Task,
    TaskError, TaskResult, WorkspaceFile,
};

/// Where the adapter sees the attempt's workspace.
const WORKSPACE: &str = "/workspace";

struct ScriptTrainer;

fn refuse(message: String) -> TaskError {
    TaskError {
        message,
        retryable: false,
    }
}

impl Guest for ScriptTrainer {
    fn describe() -> AdapterInfo {
        AdapterInfo {
            name: "script-trainer".to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            description: "Runs the Python script a task carries; for containment tests only"
                .to_owned(),
            kinds: vec!["script".to_owned()],
        }
    }

    fn prepare(task: Task) -> Result<LaunchPlan, TaskError> {
        let params: serde_json::Value = serde_json::from_str(&task.params)
            .map_err(|e| refuse(format!("params are not JSON: {e}")))?;
        let script = params
            .get("script")
            .and_then(|s| s.as_str())
            .ok_or_else(|| refuse("params need a \"script\" string".to_owned()))?;
        // Through 0.1.0's `host` import, which hosts of later versions
        // (whose `host` has more functions) still link.
        if let Some(record) = params.get("log").and_then(|l| l.as_str()) {
            log(LogLevel::Info, record);
        }
        Ok(LaunchPlan {
            files: vec![WorkspaceFile {
                path: "trainer.py".to_owned(),
                contents: script.as_bytes().to_vec(),
            }],
            command: Some(Command {
                program: "python3".to_owned(),
                args: vec!["trainer.py".to_owned()],
                env: match task.checkpoint {
                    Some(Checkpoint::WorkspaceFile(path)) => vec![EnvVar {
                        name: "RESUME_FROM".to_owned(),
                        value: path,
                    }],
                    _ => vec![],
                },
            }),
        })
    }

    fn on_output(line: String) -> Option<Progress> {
        let checkpoint = line
            .strip_prefix("checkpoint ")
            .map(|path| Checkpoint::WorkspaceFile(path.trim().to_owned()));
        let episode = line
            .strip_prefix("episode ")
            .and_then(|n| n.trim().parse::<u64>().ok());
        if checkpoint.is_none() && episode.is_none() {
            return None;
        }
        Some(Progress {
            episode,
            total_episodes: None,
            episode_return: None,
            metrics: vec![],
            checkpoint,
            message: None,
        })
    }

    fn finish(exit: ExitReport) -> Result<TaskResult, TaskError> {
        match exit.status {
            ExitStatus::Exited(0) => {
                let verdict = std::fs::read_to_string(format!("{WORKSPACE}/verdict.txt")).ok();
                Ok(TaskResult {
                    metrics: vec![],
                    checkpoint: None,
                    summary: verdict.map(|v| v.chars().take(4000).collect()),
                })
            }
            ExitStatus::Exited(code) => Err(refuse(format!(
                "the script exited with {code}: {}",
                exit.stderr_tail.trim()
            ))),
            ExitStatus::Signaled(signal) => Err(refuse(format!(
                "the script was killed by signal {signal}: {}",
                exit.stderr_tail.trim()
            ))),
            ExitStatus::NotLaunched => Err(refuse("the script was not launched".to_owned())),
        }
    }
}

bindings::export!(ScriptTrainer with_types_in bindings);
