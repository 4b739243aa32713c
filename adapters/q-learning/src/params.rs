//! Validation of a q-learning task's parameters.
//!
//! `task.params` is whatever the submitter sent. This module turns it into a
//! [`TrainerParams`] with every default filled in, or into a [`ParamsError`]
//! that names the offending key and the values it accepts. The trainer checks
//! its config again, but the adapter is where an operator reads the reason, so
//! the messages here are the ones that matter. Unknown keys are refused rather
//! than ignored: a misspelt `learning_rat` would otherwise train silently with
//! the default.
//!
//! Every key is a number: no parameter names a file, so a submitter cannot
//! point the trainer anywhere outside its workspace. An adapter that accepts
//! more keys (the test adapter's hooks) gets them from [`parse_with`] and
//! checks them itself.

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

/// The trainer's keys, in the order operators read them.
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
    /// A pause after every episode, so that a run can be watched live (the
    /// demo does) or stand in for a trainer with heavier episodes. It only
    /// stretches the attempt's own run time, which the task's time limit
    /// bounds.
    pub step_delay_ms: u64,
}

/// Why a task's params were refused. Never worth a retry: the same params
/// fail the same way on every host.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParamsError {
    #[error("invalid params: not valid JSON ({reason})")]
    NotJson { reason: String },
    #[error("invalid params: expected a JSON object, got {got}")]
    NotAnObject { got: String },
    #[error("invalid params: unknown key \"{key}\"; accepted keys are {accepted}")]
    UnknownKey { key: String, accepted: String },
    #[error("invalid params: \"{key}\" must be {expected}, got {got}")]
    Invalid {
        key: &'static str,
        expected: String,
        got: String,
    },
}

/// Parses and validates a task's params (a JSON object as text): the
/// trainer's keys and no other.
pub fn parse(params: &str) -> Result<TrainerParams, ParamsError> {
    parse_with(params, &[]).map(|(trainer, _)| trainer)
}

/// Parses the trainer's keys and hands back, unchecked, those of `extra`
/// that are present, for the adapter that accepts them to check; any other
/// key is refused.
pub fn parse_with(
    params: &str,
    extra: &[&str],
) -> Result<(TrainerParams, Map<String, Value>), ParamsError> {
    let accepted: Vec<&str> = ACCEPTED_KEYS.iter().chain(extra).copied().collect();
    let mut map = object_with_keys(params, &accepted)?;
    let extras: Map<String, Value> = extra
        .iter()
        .filter_map(|k| map.remove(*k).map(|v| ((*k).to_owned(), v)))
        .collect();
    let trainer = trainer_params(&Fields(&map))?;
    Ok((trainer, extras))
}

/// Parses a task's params (a JSON object as text) and refuses any key not in
/// `accepted`: the first step of every trainer kind's validation.
pub fn object_with_keys(
    params: &str,
    accepted: &[&str],
) -> Result<Map<String, Value>, ParamsError> {
    let value: Value = serde_json::from_str(params).map_err(|e| ParamsError::NotJson {
        reason: e.to_string(),
    })?;
    let Value::Object(map) = value else {
        return Err(ParamsError::NotAnObject { got: show(&value) });
    };
    if let Some(key) = map.keys().find(|k| !accepted.contains(&k.as_str())) {
        return Err(ParamsError::UnknownKey {
            key: truncate(key, 64),
            accepted: accepted.join(", "),
        });
    }
    Ok(map)
}

fn trainer_params(fields: &Fields) -> Result<TrainerParams, ParamsError> {
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
    })
}

/// The accepted values of a fraction-like parameter.
#[derive(Debug, Clone, Copy)]
pub enum Interval {
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
pub struct Fields<'a>(pub &'a Map<String, Value>);

impl Fields<'_> {
    pub fn integer(
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

    pub fn fraction(
        &self,
        key: &'static str,
        interval: Interval,
    ) -> Result<Option<f64>, ParamsError> {
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
}

/// A submitted value as it appears in an error message: compact JSON, cut so
/// that a huge value cannot blow the message's size limit.
pub fn show(value: &Value) -> String {
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
            }
        );
    }

    #[test]
    fn every_key_is_read() {
        let p = parse(
            r#"{"episodes": 1000, "learning_rate": 0.1, "discount": 0, "epsilon": 0.5,
                "epsilon_decay": 1, "min_epsilon": 0.2, "seed": 42, "checkpoint_every": 7,
                "eval_window": 20, "step_delay_ms": 60000}"#,
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
    fn the_test_hooks_are_unknown_keys() {
        for key in ["trace_file", "fail_at_episode", "fail_until_attempt"] {
            let message = error(&format!(r#"{{"{key}": "/tmp/written-by-a-submitter"}}"#));
            assert!(
                message.starts_with(&format!(r#"invalid params: unknown key "{key}""#)),
                "{message}"
            );
            let message = error(&format!(r#"{{"{key}": 3}}"#));
            assert!(message.contains("unknown key"), "{message}");
        }
    }

    #[test]
    fn no_key_accepts_a_path() {
        for key in ACCEPTED_KEYS {
            for path in ["/etc/passwd", "../outside", "relative/file"] {
                let params = serde_json::json!({ *key: path }).to_string();
                assert!(parse(&params).is_err(), "{key} accepted {path:?}");
            }
        }
    }

    #[test]
    fn extra_keys_are_handed_back_and_listed_as_accepted() {
        let (trainer, extras) =
            parse_with(r#"{"episodes": 10, "hook": "x"}"#, &["hook", "other"]).expect("valid");
        assert_eq!(trainer.episodes, 10);
        assert_eq!(extras.len(), 1);
        assert_eq!(extras["hook"], "x");
        let message = match parse_with(r#"{"nope": 1}"#, &["hook"]) {
            Ok(p) => panic!("accepted {p:?}"),
            Err(e) => e.to_string(),
        };
        assert!(message.ends_with(", step_delay_ms, hook"), "{message}");
    }
}
