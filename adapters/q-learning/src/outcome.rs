//! Turning the trainer's exit and the files it left into the attempt's result.
//!
//! Exit code 0 is a success only if `result.json` holds the metrics: a
//! trainer that exits 0 without them has not finished, and saying otherwise
//! would record a guess (DESIGN invariant 4), so that case is a retryable
//! failure. Exit code 2 means the trainer refused its configuration, which no
//! retry fixes; any other code or a signal is a crash worth retrying.
//!
//! Every reference trainer follows these rules; what differs between them is
//! the [`ResultShape`]: which metrics `result.json` must hold, and the
//! one-line summary an operator reads.
//!
//! The file reading ([`read_outputs`]) is kept apart from the decision
//! ([`decide`]) so the decision is tested without a workspace.

use crate::bindings::trainyard::adapter::types::{
    Checkpoint, ExitReport, ExitStatus, Metric, TaskResult,
};
use serde_json::{Map, Value};
use std::io;
use std::path::Path;

pub const RESULT_FILE: &str = "result.json";
pub const POLICY_FILE: &str = "policy.json";

/// The trainer's exit code for a configuration it refuses.
const EXIT_INVALID_CONFIG: i32 = 2;
/// How much of the trainer's stderr goes into an error message: its last
/// lines, at most this many of them and this many bytes.
const STDERR_LINES: usize = 12;
const STDERR_BYTES: usize = 2048;
/// Bounds the host sets on a task result.
const MAX_METRICS: usize = 256;
const MAX_METRIC_NAME: usize = 128;

/// What a trainer's `result.json` must hold, and how it reads to an operator.
#[derive(Debug, Clone, Copy)]
pub struct ResultShape {
    /// Metrics that must be present and numeric.
    pub required: &'static [&'static str],
    /// Other metrics the trainer writes (every number in `result.json` is
    /// a metric of the result).
    pub also: &'static [&'static str],
    /// The summary, given the result's fields (the required ones are there).
    pub summary: fn(&Map<String, Value>) -> String,
}

/// The grid-world trainer's result.
pub const Q_LEARNING_RESULT: ResultShape = ResultShape {
    required: &["mean_return", "success_rate", "eval_episodes"],
    also: &["episodes", "final_epsilon", "resumed_from"],
    summary: q_learning_summary,
};

fn q_learning_summary(fields: &Map<String, Value>) -> String {
    format!(
        "mean return {:.3} over the last {} episodes (success {}%)",
        number(fields, "mean_return"),
        number(fields, "eval_episodes"),
        percent(number(fields, "success_rate"))
    )
}

impl ResultShape {
    /// Every metric a result of this shape may hold, for the contract's
    /// `metadata.result-metrics`.
    pub fn metrics(&self) -> Vec<String> {
        self.required
            .iter()
            .chain(self.also)
            .map(|m| (*m).to_owned())
            .collect()
    }
}

/// A field of the result as a number (0 when it is not one).
pub fn number(fields: &Map<String, Value>, name: &str) -> f64 {
    fields.get(name).and_then(Value::as_f64).unwrap_or(0.0)
}

/// Why an attempt failed after the trainer ran.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FinishError {
    #[error("trainer refused its configuration (exit code 2): {stderr}")]
    InvalidConfig { stderr: String },
    #[error("trainer exited with code {code}: {stderr}")]
    Exited { code: i32, stderr: String },
    #[error("trainer killed by signal {signal}: {stderr}")]
    Signaled { signal: i32, stderr: String },
    #[error("trainer was never launched although the launch plan had a command")]
    NotLaunched,
    #[error("trainer exited with code 0 but left no readable {RESULT_FILE}: {reason}")]
    ResultMissing { reason: String },
    #[error("trainer exited with code 0 but its {RESULT_FILE} is not valid: {reason}")]
    ResultInvalid { reason: String },
    #[error("the host called finish before prepare on this adapter instance")]
    NotPrepared,
}

impl FinishError {
    /// Whether running the task again may succeed.
    pub fn retryable(&self) -> bool {
        !matches!(self, FinishError::InvalidConfig { .. })
    }
}

/// What the trainer left in the workspace that the result is made of.
#[derive(Debug)]
pub struct Outputs {
    pub result_json: io::Result<String>,
    pub policy_exists: bool,
}

/// Reads the trainer's outputs from the workspace (through WASI in the
/// component).
pub fn read_outputs(workspace: &Path) -> Outputs {
    Outputs {
        result_json: std::fs::read_to_string(workspace.join(RESULT_FILE)),
        policy_exists: workspace.join(POLICY_FILE).is_file(),
    }
}

/// Decides the attempt's result from how the trainer exited; reads the
/// workspace (through `outputs`) only after a clean exit.
pub fn decide(
    exit: &ExitReport,
    shape: &ResultShape,
    outputs: impl FnOnce() -> Outputs,
) -> Result<TaskResult, FinishError> {
    let stderr = || stderr_tail(&exit.stderr_tail);
    match exit.status {
        ExitStatus::Exited(0) => task_result(shape, outputs()),
        ExitStatus::Exited(EXIT_INVALID_CONFIG) => {
            Err(FinishError::InvalidConfig { stderr: stderr() })
        }
        ExitStatus::Exited(code) => Err(FinishError::Exited {
            code,
            stderr: stderr(),
        }),
        ExitStatus::Signaled(signal) => Err(FinishError::Signaled {
            signal,
            stderr: stderr(),
        }),
        ExitStatus::NotLaunched => Err(FinishError::NotLaunched),
    }
}

fn task_result(shape: &ResultShape, outputs: Outputs) -> Result<TaskResult, FinishError> {
    let text = outputs
        .result_json
        .map_err(|e| FinishError::ResultMissing {
            // WASI reports errno values of its own ("os error 44" for ENOENT);
            // the common case is worth saying in words.
            reason: match e.kind() {
                io::ErrorKind::NotFound => "the file does not exist".to_owned(),
                _ => e.to_string(),
            },
        })?;
    let invalid = |reason: String| FinishError::ResultInvalid { reason };
    let Value::Object(fields) =
        serde_json::from_str::<Value>(&text).map_err(|e| invalid(format!("not JSON ({e})")))?
    else {
        return Err(invalid("not a JSON object".to_owned()));
    };
    for name in shape.required {
        required_number(&fields, name).map_err(invalid)?;
    }

    let metrics = fields
        .iter()
        .filter(|(name, _)| name.len() <= MAX_METRIC_NAME)
        .filter_map(|(name, value)| {
            value.as_f64().map(|value| Metric {
                name: name.clone(),
                value,
            })
        })
        .take(MAX_METRICS)
        .collect();
    Ok(TaskResult {
        metrics,
        checkpoint: outputs
            .policy_exists
            .then(|| Checkpoint::WorkspaceFile(POLICY_FILE.to_owned())),
        summary: Some((shape.summary)(&fields)),
    })
}

fn required_number(fields: &Map<String, Value>, name: &str) -> Result<f64, String> {
    fields
        .get(name)
        .and_then(Value::as_f64)
        .ok_or_else(|| format!("\"{name}\" is missing or not a number"))
}

/// A rate as a percentage with at most one decimal: 0.86 → "86", 0.875 → "87.5".
fn percent(rate: f64) -> String {
    let text = format!("{:.1}", rate * 100.0);
    text.strip_suffix(".0").map(str::to_owned).unwrap_or(text)
}

/// The end of the trainer's stderr, small enough for an error message.
fn stderr_tail(stderr: &str) -> String {
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        return "(nothing on stderr)".to_owned();
    }
    let tail = lines[lines.len().saturating_sub(STDERR_LINES)..].join("\n");
    if tail.len() <= STDERR_BYTES {
        return tail;
    }
    let mut start = tail.len() - STDERR_BYTES;
    while !tail.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &tail[start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    const RESULT: &str = r#"{"mean_return":0.6304,"success_rate":0.86,"eval_episodes":50,
        "episodes":300,"final_epsilon":0.05,"resumed_from":0,"note":"not a number"}"#;

    fn exit(status: ExitStatus, stderr: &str) -> ExitReport {
        ExitReport {
            status,
            stderr_tail: stderr.to_owned(),
            duration_ms: 1200,
        }
    }

    fn outputs(result: Option<&str>, policy_exists: bool) -> Outputs {
        Outputs {
            result_json: result
                .map(str::to_owned)
                .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound)),
            policy_exists,
        }
    }

    fn decide_q(
        exit: &ExitReport,
        outputs: impl FnOnce() -> Outputs,
    ) -> Result<TaskResult, FinishError> {
        decide(exit, &Q_LEARNING_RESULT, outputs)
    }

    fn unread() -> Outputs {
        panic!("the workspace must not be read after a failed exit")
    }

    #[test]
    fn clean_exit_reports_every_numeric_metric_the_policy_and_a_summary() {
        let result = decide_q(&exit(ExitStatus::Exited(0), ""), || {
            outputs(Some(RESULT), true)
        })
        .expect("success");
        let metrics: Vec<(&str, f64)> = result
            .metrics
            .iter()
            .map(|m| (m.name.as_str(), m.value))
            .collect();
        assert_eq!(
            metrics,
            [
                ("episodes", 300.0),
                ("eval_episodes", 50.0),
                ("final_epsilon", 0.05),
                ("mean_return", 0.6304),
                ("resumed_from", 0.0),
                ("success_rate", 0.86),
            ]
        );
        assert_eq!(
            result.checkpoint,
            Some(Checkpoint::WorkspaceFile("policy.json".to_owned()))
        );
        assert_eq!(
            result.summary.as_deref(),
            Some("mean return 0.630 over the last 50 episodes (success 86%)")
        );
    }

    #[test]
    fn clean_exit_without_policy_has_no_checkpoint() {
        let result = decide_q(&exit(ExitStatus::Exited(0), ""), || {
            outputs(Some(RESULT), false)
        })
        .expect("success");
        assert_eq!(result.checkpoint, None);
    }

    #[test]
    fn clean_exit_without_a_valid_result_is_a_retryable_failure() {
        let missing = decide_q(&exit(ExitStatus::Exited(0), ""), || outputs(None, true))
            .expect_err("no result.json");
        assert!(missing.retryable());
        assert_eq!(
            missing.to_string(),
            "trainer exited with code 0 but left no readable result.json: the file does not exist"
        );
        for (text, reason) in [
            ("{\"mean_return\": 0.5", "not JSON"),
            ("[0.5]", "not a JSON object"),
            (
                r#"{"mean_return":0.5,"eval_episodes":50}"#,
                "\"success_rate\" is missing or not a number",
            ),
            (
                r#"{"mean_return":"high","success_rate":1,"eval_episodes":5}"#,
                "\"mean_return\" is missing",
            ),
        ] {
            let err = decide_q(&exit(ExitStatus::Exited(0), ""), || {
                outputs(Some(text), true)
            })
            .expect_err(text);
            assert!(err.retryable());
            let message = err.to_string();
            assert!(message
                .starts_with("trainer exited with code 0 but its result.json is not valid: "));
            assert!(message.contains(reason), "{message}");
        }
    }

    #[test]
    fn exit_code_2_is_not_retryable_and_quotes_stderr() {
        let err = decide_q(
            &exit(
                ExitStatus::Exited(2),
                "trainer: invalid configuration: bad\n",
            ),
            unread,
        )
        .expect_err("exit 2");
        assert!(!err.retryable());
        assert_eq!(
            err.to_string(),
            "trainer refused its configuration (exit code 2): trainer: invalid configuration: bad"
        );
    }

    #[test]
    fn crash_is_retryable_with_the_last_stderr_lines() {
        let stderr: String = (1..=30).map(|n| format!("line {n}\n")).collect();
        let err = decide_q(&exit(ExitStatus::Exited(3), &stderr), unread).expect_err("exit 3");
        assert!(err.retryable());
        let expected: Vec<String> = (19..=30).map(|n| format!("line {n}")).collect();
        assert_eq!(
            err.to_string(),
            format!("trainer exited with code 3: {}", expected.join("\n"))
        );

        let killed = decide_q(&exit(ExitStatus::Signaled(9), ""), unread).expect_err("signal");
        assert!(killed.retryable());
        assert_eq!(
            killed.to_string(),
            "trainer killed by signal 9: (nothing on stderr)"
        );

        let not_launched =
            decide_q(&exit(ExitStatus::NotLaunched, ""), unread).expect_err("not launched");
        assert!(not_launched.retryable());
    }

    #[test]
    fn a_huge_stderr_is_cut_to_fit_an_error_message() {
        let stderr = "é".repeat(100_000);
        let err = decide_q(&exit(ExitStatus::Exited(1), &stderr), unread).expect_err("exit 1");
        let message = err.to_string();
        assert!(message.len() < 4096, "{} bytes", message.len());
        assert!(message.starts_with("trainer exited with code 1: …é"));
    }

    #[test]
    fn percent_keeps_one_decimal_only_when_needed() {
        assert_eq!(percent(0.86), "86");
        assert_eq!(percent(0.875), "87.5");
        assert_eq!(percent(1.0), "100");
        assert_eq!(percent(0.0), "0");
    }
}
