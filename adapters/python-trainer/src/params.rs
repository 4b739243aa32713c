//! Validation of a q-learning task's parameters.
//!
//! `task.params` is whatever the submitter sent. This module turns it into a
//! [`TrainerParams`] with every default filled in, or into a [`ParamsError`]
//! that names the offending key and the values it accepts. The trainer checks
//! its config again, but the adapter is where an operator reads the reason, so
//! the messages here are the ones that matter. Unknown keys are refused rather
//! than ignored: a misspelt `learning_rat` would otherwise train silently with
//! the default.

use serde::Serialize;
use serde_json::{Map, Value};
use std::fmt;

/// The most episodes a task may ask for.
pub const MAX_EPISODES: u64 = 100_000;
/// The longest per-episode delay a task may ask for, in milliseconds.
pub const MAX_STEP_DELAY_MS: u64 = 60_000;

const DEFAULT_EPISODES: u64 = 300;
const DEFAULT_LEARNING_RATE: f64 = 0.5;
const DEFAULT_DISCOUNT: f64 = 0.95;
const DEFAULT_EPSILON: f64 = 1.0;
const DEFAULT_EPSILON_DECAY: f64 = 0.98;
const DEFAULT_MIN_EPSILON: f64 = 0.05;
const DEFAULT_CHECKPOINT_EVERY: u64 = 50;
const DEFAULT_EVAL_WINDOW: u64 = 50;

/// Every key a task's params may hold, in the order operators read them.
pub const ACCEPTED_KEYS: &[&str] = &[
    "episodes",
    "learning_rate",
    "discount",
    "epsilon",
    "epsilon_decay",
    "min_epsilon",
    "seed",
    "checkpoint_every",
    "eval_window",
    "step_delay_ms",
    "fail_at_episode",
    "fail_until_attempt",
    "trace_file",
];

/// A task's parameters with every default filled in, as the trainer reads them
/// from `params.json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrainerParams {
    pub episodes: u64,
    pub learning_rate: f64,
    pub discount: f64,
    pub epsilon: f64,
    pub epsilon_decay: f64,
    pub min_epsilon: f64,
    pub seed: u64,
    pub checkpoint_every: u64,
    /// How many of the last episodes the final metrics average over.
    pub eval_window: u64,
    /// Slows every episode down so tests can kill a trainer mid-run.
    pub step_delay_ms: u64,
    /// Makes the trainer exit with code 3 when this episode begins: a failing
    /// task for tests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fail_at_episode: Option<u64>,
    /// Limits `fail_at_episode` to attempts up to this one, so a test can
    /// watch a later attempt resume and succeed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fail_until_attempt: Option<u64>,
    /// An absolute path the trainer appends start/alive/end events to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_file: Option<String>,
}

/// Why a task's params were refused. Never worth a retry: the same params
/// fail the same way on every host.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParamsError {
    #[error("invalid params: not valid JSON ({reason})")]
    NotJson { reason: String },
    #[error("invalid params: expected a JSON object, got {got}")]
    NotAnObject { got: String },
    #[error("invalid params: unknown key \"{key}\"; accepted keys are {}", ACCEPTED_KEYS.join(", "))]
    UnknownKey { key: String },
    #[error("invalid params: \"{key}\" must be {expected}, got {got}")]
    Invalid {
        key: &'static str,
        expected: String,
        got: String,
    },
    #[error("invalid params: \"fail_until_attempt\" needs \"fail_at_episode\"")]
    FailUntilWithoutFailAt,
}

/// Parses and validates a task's params (a JSON object as text).
pub fn parse(params: &str) -> Result<TrainerParams, ParamsError> {
    let value: Value = serde_json::from_str(params).map_err(|e| ParamsError::NotJson {
        reason: e.to_string(),
    })?;
    let Value::Object(map) = value else {
        return Err(ParamsError::NotAnObject { got: show(&value) });
    };
    if let Some(key) = map.keys().find(|k| !ACCEPTED_KEYS.contains(&k.as_str())) {
        return Err(ParamsError::UnknownKey {
            key: truncate(key, 64),
        });
    }
    let fields = Fields(&map);

    let episodes = fields
        .integer("episodes", 1, Some(MAX_EPISODES))?
        .unwrap_or(DEFAULT_EPISODES);
    let epsilon = fields
        .fraction("epsilon", Interval::Closed)?
        .unwrap_or(DEFAULT_EPSILON);
    // The default floor follows a smaller starting epsilon down, so that
    // `"epsilon": 0` (a greedy agent) needs no `min_epsilon` of its own.
    let min_epsilon = match fields.fraction("min_epsilon", Interval::Closed)? {
        Some(min) if min > epsilon => {
            return Err(ParamsError::Invalid {
                key: "min_epsilon",
                expected: format!("a number in [0, {epsilon}] (at most \"epsilon\")"),
                got: min.to_string(),
            })
        }
        Some(min) => min,
        None => DEFAULT_MIN_EPSILON.min(epsilon),
    };
    let fail_at_episode = match fields.integer("fail_at_episode", 1, None)? {
        Some(n) if n > episodes => {
            return Err(ParamsError::Invalid {
                key: "fail_at_episode",
                expected: format!("an integer from 1 to {episodes} (the value of \"episodes\")"),
                got: n.to_string(),
            })
        }
        other => other,
    };
    let fail_until_attempt = fields.integer("fail_until_attempt", 1, None)?;
    if fail_until_attempt.is_some() && fail_at_episode.is_none() {
        return Err(ParamsError::FailUntilWithoutFailAt);
    }

    Ok(TrainerParams {
        episodes,
        learning_rate: fields
            .fraction("learning_rate", Interval::OpenClosed)?
            .unwrap_or(DEFAULT_LEARNING_RATE),
        discount: fields
            .fraction("discount", Interval::Closed)?
            .unwrap_or(DEFAULT_DISCOUNT),
        epsilon,
        epsilon_decay: fields
            .fraction("epsilon_decay", Interval::OpenClosed)?
            .unwrap_or(DEFAULT_EPSILON_DECAY),
        min_epsilon,
        seed: fields.integer("seed", 0, None)?.unwrap_or(0),
        checkpoint_every: fields
            .integer("checkpoint_every", 1, None)?
            .unwrap_or(DEFAULT_CHECKPOINT_EVERY),
        eval_window: fields
            .integer("eval_window", 1, None)?
            .unwrap_or(DEFAULT_EVAL_WINDOW),
        step_delay_ms: fields
            .integer("step_delay_ms", 0, Some(MAX_STEP_DELAY_MS))?
            .unwrap_or(0),
        fail_at_episode,
        fail_until_attempt,
        trace_file: fields.absolute_path("trace_file")?,
    })
}

/// The accepted values of a fraction-like parameter.
#[derive(Debug, Clone, Copy)]
enum Interval {
    /// (0, 1]: a rate that must not be zero.
    OpenClosed,
    /// [0, 1].
    Closed,
}

impl Interval {
    fn contains(self, x: f64) -> bool {
        let above_floor = match self {
            Interval::OpenClosed => x > 0.0,
            Interval::Closed => x >= 0.0,
        };
        above_floor && x <= 1.0
    }
}

impl fmt::Display for Interval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Interval::OpenClosed => "(0, 1]",
            Interval::Closed => "[0, 1]",
        })
    }
}

/// Typed, range-checked access to the params object. Each getter returns
/// `None` for an absent key, so the caller supplies the default.
struct Fields<'a>(&'a Map<String, Value>);

impl Fields<'_> {
    fn integer(
        &self,
        key: &'static str,
        min: u64,
        max: Option<u64>,
    ) -> Result<Option<u64>, ParamsError> {
        let Some(value) = self.0.get(key) else {
            return Ok(None);
        };
        match value.as_u64() {
            Some(n) if n >= min && max.is_none_or(|max| n <= max) => Ok(Some(n)),
            _ => Err(ParamsError::Invalid {
                key,
                expected: match max {
                    Some(max) => format!("an integer from {min} to {max}"),
                    None => format!("an integer of at least {min}"),
                },
                got: show(value),
            }),
        }
    }

    fn fraction(&self, key: &'static str, interval: Interval) -> Result<Option<f64>, ParamsError> {
        let Some(value) = self.0.get(key) else {
            return Ok(None);
        };
        match value.as_f64() {
            Some(x) if interval.contains(x) => Ok(Some(x)),
            _ => Err(ParamsError::Invalid {
                key,
                expected: format!("a number in {interval}"),
                got: show(value),
            }),
        }
    }

    fn absolute_path(&self, key: &'static str) -> Result<Option<String>, ParamsError> {
        let Some(value) = self.0.get(key) else {
            return Ok(None);
        };
        match value.as_str() {
            Some(path) if path.starts_with('/') && !path.contains('\0') => {
                Ok(Some(path.to_owned()))
            }
            _ => Err(ParamsError::Invalid {
                key,
                expected: "an absolute path (a string starting with /)".to_owned(),
                got: show(value),
            }),
        }
    }
}

/// A submitted value as it appears in an error message: compact JSON, cut so
/// that a huge value cannot blow the message's size limit.
fn show(value: &Value) -> String {
    truncate(&value.to_string(), 80)
}

fn truncate(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_owned();
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(params: &str) -> String {
        match parse(params) {
            Ok(p) => panic!("params {params} were accepted as {p:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn empty_object_gets_every_default() {
        let p = parse("{}").expect("defaults");
        assert_eq!(
            p,
            TrainerParams {
                episodes: 300,
                learning_rate: 0.5,
                discount: 0.95,
                epsilon: 1.0,
                epsilon_decay: 0.98,
                min_epsilon: 0.05,
                seed: 0,
                checkpoint_every: 50,
                eval_window: 50,
                step_delay_ms: 0,
                fail_at_episode: None,
                fail_until_attempt: None,
                trace_file: None,
            }
        );
    }

    #[test]
    fn every_key_is_read() {
        let p = parse(
            r#"{"episodes": 1000, "learning_rate": 0.1, "discount": 0, "epsilon": 0.5,
                "epsilon_decay": 1, "min_epsilon": 0.2, "seed": 42, "checkpoint_every": 7,
                "eval_window": 20, "step_delay_ms": 60000, "fail_at_episode": 1000,
                "fail_until_attempt": 2, "trace_file": "/tmp/trace.jsonl"}"#,
        )
        .expect("valid params");
        assert_eq!(p.episodes, 1000);
        assert_eq!(p.learning_rate, 0.1);
        assert_eq!(p.discount, 0.0);
        assert_eq!(p.epsilon, 0.5);
        assert_eq!(p.epsilon_decay, 1.0);
        assert_eq!(p.min_epsilon, 0.2);
        assert_eq!(p.seed, 42);
        assert_eq!(p.checkpoint_every, 7);
        assert_eq!(p.eval_window, 20);
        assert_eq!(p.step_delay_ms, 60_000);
        assert_eq!(p.fail_at_episode, Some(1000));
        assert_eq!(p.fail_until_attempt, Some(2));
        assert_eq!(p.trace_file.as_deref(), Some("/tmp/trace.jsonl"));
    }

    #[test]
    fn out_of_range_number_names_key_and_range() {
        assert_eq!(
            error(r#"{"learning_rate": 7}"#),
            r#"invalid params: "learning_rate" must be a number in (0, 1], got 7"#
        );
        assert_eq!(
            error(r#"{"learning_rate": 0}"#),
            r#"invalid params: "learning_rate" must be a number in (0, 1], got 0"#
        );
        assert_eq!(
            error(r#"{"discount": -0.1}"#),
            r#"invalid params: "discount" must be a number in [0, 1], got -0.1"#
        );
        assert_eq!(
            error(r#"{"episodes": 100001}"#),
            r#"invalid params: "episodes" must be an integer from 1 to 100000, got 100001"#
        );
        assert_eq!(
            error(r#"{"episodes": 0}"#),
            r#"invalid params: "episodes" must be an integer from 1 to 100000, got 0"#
        );
        assert_eq!(
            error(r#"{"seed": -1}"#),
            r#"invalid params: "seed" must be an integer of at least 0, got -1"#
        );
        assert_eq!(
            error(r#"{"step_delay_ms": 60001}"#),
            r#"invalid params: "step_delay_ms" must be an integer from 0 to 60000, got 60001"#
        );
    }

    #[test]
    fn wrong_type_names_key_and_shows_value() {
        assert_eq!(
            error(r#"{"episodes": "300"}"#),
            r#"invalid params: "episodes" must be an integer from 1 to 100000, got "300""#
        );
        assert_eq!(
            error(r#"{"episodes": 2.5}"#),
            r#"invalid params: "episodes" must be an integer from 1 to 100000, got 2.5"#
        );
        assert_eq!(
            error(r#"{"epsilon": true}"#),
            r#"invalid params: "epsilon" must be a number in [0, 1], got true"#
        );
        assert_eq!(
            error(r#"{"checkpoint_every": null}"#),
            r#"invalid params: "checkpoint_every" must be an integer of at least 1, got null"#
        );
        assert_eq!(
            error(r#"{"trace_file": "trace.jsonl"}"#),
            r#"invalid params: "trace_file" must be an absolute path (a string starting with /), got "trace.jsonl""#
        );
    }

    #[test]
    fn unknown_key_is_refused_with_the_accepted_list() {
        let message = error(r#"{"episodes": 10, "learning_rat": 0.1}"#);
        assert!(
            message.starts_with(r#"invalid params: unknown key "learning_rat"; accepted keys are episodes, learning_rate,"#),
            "{message}"
        );
    }

    #[test]
    fn params_that_are_not_an_object_are_refused() {
        assert_eq!(
            error("[1, 2]"),
            "invalid params: expected a JSON object, got [1,2]"
        );
        assert_eq!(
            error("null"),
            "invalid params: expected a JSON object, got null"
        );
        assert!(error("{\"episodes\": ").starts_with("invalid params: not valid JSON"));
        assert!(error("").starts_with("invalid params: not valid JSON"));
    }

    #[test]
    fn a_huge_value_is_cut_in_the_message() {
        let big = "é".repeat(10_000);
        let message = error(&format!(r#"{{"seed": "{big}"}}"#));
        assert!(message.len() < 200, "{} bytes", message.len());
        assert!(message.ends_with('…'));
    }

    #[test]
    fn min_epsilon_follows_a_small_epsilon_and_may_not_exceed_it() {
        assert_eq!(parse(r#"{"epsilon": 0}"#).map(|p| p.min_epsilon), Ok(0.0));
        assert_eq!(
            parse(r#"{"epsilon": 0.02}"#).map(|p| p.min_epsilon),
            Ok(0.02)
        );
        assert_eq!(
            error(r#"{"epsilon": 0.1, "min_epsilon": 0.2}"#),
            r#"invalid params: "min_epsilon" must be a number in [0, 0.1] (at most "epsilon"), got 0.2"#
        );
    }

    #[test]
    fn fail_at_episode_must_fall_inside_the_run() {
        assert_eq!(
            error(r#"{"episodes": 10, "fail_at_episode": 11}"#),
            r#"invalid params: "fail_at_episode" must be an integer from 1 to 10 (the value of "episodes"), got 11"#
        );
        assert_eq!(
            error(r#"{"fail_until_attempt": 1}"#),
            r#"invalid params: "fail_until_attempt" needs "fail_at_episode""#
        );
    }
}
