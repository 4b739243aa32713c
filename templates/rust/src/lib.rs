//! The `__NAME__` task adapter: runs `trainer/train.py` (embedded in the
//! component) with a task's params, turns each line it prints into
//! progress, and its `result.json` into the task's result.
//!
//! The host calls, on a fresh instance per attempt: `prepare` once, then
//! `on_output` for every line the trainer prints, then `finish` once it has
//! exited. The adapter only decides; the host writes the files, launches the
//! program (it must be on the operator's allowlist for this adapter) and
//! talks to the cluster. See the contract in `wit/adapter.wit`.

mod bindings {
    wit_bindgen::generate!({ path: "wit", world: "task-adapter" });
}

use bindings::exports::trainyard::adapter::adapter::Guest;
use bindings::exports::trainyard::adapter::metadata::Guest as MetadataGuest;
use bindings::trainyard::adapter::host::{log, LogLevel};
use bindings::trainyard::adapter::types::{
    AdapterInfo, Command, ExitReport, ExitStatus, LaunchPlan, Metric, Progress, Task, TaskError,
    TaskResult, WorkspaceFile,
};
use serde::{Deserialize, Serialize};

/// The trainer, written into each attempt's workspace.
const TRAINER: &str = include_str!("../trainer/train.py");

/// The trainer's exit code for params it cannot use.
const EXIT_BAD_PARAMS: i32 = 2;

/// A task's params, with their defaults. Unknown keys are refused, so a
/// typo is an error rather than a silent default.
#[derive(Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
struct Params {
    episodes: u32,
    arms: u32,
    epsilon: f64,
    seed: u64,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            episodes: 200,
            arms: 5,
            epsilon: 0.1,
            seed: 0,
        }
    }
}

/// The bounds of the params: the one place they are written. `prepare`
/// checks them, and the schema the master checks submissions against
/// ([`params_schema`]) is made from them.
const EPISODES: (u32, u32) = (1, 100_000);
const ARMS: (u32, u32) = (2, 1000);
const EPSILON: (f64, f64) = (0.0, 1.0);

/// The metrics `finish` reports: every number the trainer's `result.json`
/// holds.
const RESULT_METRICS: &[&str] = &["mean_return", "best_possible", "episodes"];

/// The params as a JSON Schema, for the contract's `metadata` export: the
/// master refuses a submission that fails it before any host sees it.
fn params_schema() -> serde_json::Value {
    serde_json::json!({
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "episodes": {"type": "integer", "minimum": EPISODES.0, "maximum": EPISODES.1},
            "arms": {"type": "integer", "minimum": ARMS.0, "maximum": ARMS.1},
            "epsilon": {"type": "number", "minimum": EPSILON.0, "maximum": EPSILON.1},
            "seed": {"type": "integer", "minimum": 0},
        },
    })
}

/// Parses and checks a task's params (a JSON object).
fn parse_params(json: &str) -> Result<Params, String> {
    // An object first: serde would take a JSON array for the struct too.
    let object: serde_json::Map<String, serde_json::Value> = serde_json::from_str(json)
        .map_err(|e| format!("invalid params: expected a JSON object ({e})"))?;
    let params: Params =
        serde_json::from_value(object.into()).map_err(|e| format!("invalid params: {e}"))?;
    within("episodes", params.episodes, EPISODES)?;
    within("arms", params.arms, ARMS)?;
    within("epsilon", params.epsilon, EPSILON)?;
    Ok(params)
}

fn within<T: PartialOrd + std::fmt::Display>(
    key: &str,
    value: T,
    (min, max): (T, T),
) -> Result<(), String> {
    if value < min || value > max {
        return Err(format!(
            "invalid params: {key:?} must be {min} to {max}, got {value}"
        ));
    }
    Ok(())
}

/// One line of the trainer's protocol: `{"episode": N, "episodes": T,
/// "return": R, "epsilon": E}`. Anything else is not progress.
#[derive(Deserialize)]
struct EpisodeLine {
    episode: u64,
    episodes: Option<u64>,
    #[serde(rename = "return")]
    episode_return: Option<f64>,
    epsilon: Option<f64>,
}

fn progress(line: &str) -> Option<Progress> {
    let episode: EpisodeLine = serde_json::from_str(line).ok()?;
    Some(Progress {
        episode: Some(episode.episode),
        total_episodes: episode.episodes,
        episode_return: episode.episode_return,
        metrics: episode
            .epsilon
            .map(|value| Metric {
                name: "epsilon".into(),
                value,
            })
            .into_iter()
            .collect(),
        checkpoint: None,
        message: None,
    })
}

/// The task's result from what the trainer left: its exit and, after a
/// clean exit, `result.json` (numbers only).
fn result(
    exit: &ExitReport,
    result_json: impl FnOnce() -> std::io::Result<String>,
) -> Result<TaskResult, TaskError> {
    let fail = |message: String, retryable: bool| TaskError { message, retryable };
    match exit.status {
        ExitStatus::Exited(0) => {}
        ExitStatus::Exited(EXIT_BAD_PARAMS) => {
            return Err(fail(
                format!("the trainer refused its params: {}", exit.stderr_tail),
                false,
            ))
        }
        ExitStatus::Exited(code) => {
            return Err(fail(
                format!("the trainer exited with {code}: {}", exit.stderr_tail),
                true,
            ))
        }
        ExitStatus::Signaled(signal) => {
            return Err(fail(
                format!(
                    "the trainer was killed by signal {signal}: {}",
                    exit.stderr_tail
                ),
                true,
            ))
        }
        ExitStatus::NotLaunched => return Err(fail("no trainer was launched".into(), false)),
    }
    let text = result_json().map_err(|e| {
        fail(
            format!("the trainer exited 0 but left no readable result.json: {e}"),
            false,
        )
    })?;
    let fields: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&text)
        .map_err(|e| fail(format!("result.json is not a JSON object: {e}"), false))?;
    let metrics: Vec<Metric> = fields
        .iter()
        .filter_map(|(name, value)| {
            Some(Metric {
                name: name.clone(),
                value: value.as_f64()?,
            })
        })
        .collect();
    let summary = fields
        .get("mean_return")
        .and_then(|v| v.as_f64())
        .map(|mean| format!("mean return {mean:.2} over the last episodes"));
    Ok(TaskResult {
        metrics,
        checkpoint: None,
        summary,
    })
}

struct Adapter;

impl Guest for Adapter {
    fn describe() -> AdapterInfo {
        AdapterInfo {
            name: "__NAME__".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "An epsilon-greedy bandit learner (python3)".into(),
            kinds: vec!["bandit".into()],
        }
    }

    fn prepare(task: Task) -> Result<LaunchPlan, TaskError> {
        let params = parse_params(&task.params).map_err(|message| TaskError {
            message,
            retryable: false,
        })?;
        log(
            LogLevel::Info,
            &format!("{} episodes on {} arms", params.episodes, params.arms),
        );
        let params_json = serde_json::to_vec(&params).expect("params serialise");
        Ok(LaunchPlan {
            files: vec![
                WorkspaceFile {
                    path: "train.py".into(),
                    contents: TRAINER.as_bytes().to_vec(),
                },
                WorkspaceFile {
                    path: "params.json".into(),
                    contents: params_json,
                },
            ],
            command: Some(Command {
                program: "python3".into(),
                args: vec!["-u".into(), "train.py".into(), "params.json".into()],
                env: vec![],
            }),
        })
    }

    fn on_output(line: String) -> Option<Progress> {
        progress(&line)
    }

    fn finish(exit: ExitReport) -> Result<TaskResult, TaskError> {
        // The workspace is preopened at `/workspace` (`task.workspace`).
        result(&exit, || std::fs::read_to_string("/workspace/result.json"))
    }
}

impl MetadataGuest for Adapter {
    fn params_schema(_kind: String) -> Option<String> {
        Some(params_schema().to_string())
    }

    fn result_metrics() -> Vec<String> {
        RESULT_METRICS.iter().map(|m| (*m).into()).collect()
    }
}

bindings::export!(Adapter with_types_in bindings);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_get_defaults_and_bad_ones_are_refused() {
        assert_eq!(parse_params("{}").unwrap(), Params::default());
        assert_eq!(parse_params(r#"{"episodes": 7}"#).unwrap().episodes, 7);
        for bad in [
            r#"{"episodes": 0}"#,
            r#"{"epsilon": "a"}"#,
            r#"{"typo": 1}"#,
            "[]",
            "garbage",
        ] {
            assert!(parse_params(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_schema_covers_every_param() {
        let schema = params_schema();
        let mut described: Vec<&String> =
            schema["properties"].as_object().unwrap().keys().collect();
        let defaults = serde_json::to_value(Params::default()).unwrap();
        let mut params: Vec<&String> = defaults.as_object().unwrap().keys().collect();
        described.sort();
        params.sort();
        assert_eq!(described, params);
    }

    #[test]
    fn episode_lines_are_progress_and_other_lines_are_not() {
        let p =
            progress(r#"{"episode": 3, "episodes": 10, "return": 4.0, "epsilon": 0.1}"#).unwrap();
        assert_eq!(
            (p.episode, p.total_episodes, p.episode_return),
            (Some(3), Some(10), Some(4.0))
        );
        assert!(progress("Traceback (most recent call last):").is_none());
    }

    #[test]
    fn a_clean_exit_reads_the_result_and_a_crash_is_retryable() {
        let exit = |status| ExitReport {
            status,
            stderr_tail: String::new(),
            duration_ms: 1,
        };
        let done = result(&exit(ExitStatus::Exited(0)), || {
            Ok(r#"{"mean_return": 15.5}"#.into())
        })
        .unwrap();
        assert_eq!(done.metrics[0].value, 15.5);
        assert!(
            result(&exit(ExitStatus::Exited(1)), || unreachable!())
                .unwrap_err()
                .retryable
        );
        assert!(
            !result(&exit(ExitStatus::Exited(2)), || unreachable!())
                .unwrap_err()
                .retryable
        );
        let missing = || Err(std::io::ErrorKind::NotFound.into());
        assert!(
            !result(&exit(ExitStatus::Exited(0)), missing)
                .unwrap_err()
                .retryable
        );
    }
}
