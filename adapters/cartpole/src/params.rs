//! Validation of a cartpole task's parameters.
//!
//! `task.params` is whatever the submitter sent; this module turns it into
//! [`CartpoleParams`] with every default filled in, or into a
//! [`ParamsError`] naming the offending key and the values it accepts (the
//! q-learning crate's errors and field access, so every reference adapter
//! words them alike). Unknown keys are refused, and no key names a file.

use q_learning::params::{self, Fields, Interval, ParamsError};
use serde::Serialize;

/// The most episodes a task may ask for: at CartPole-v1's 500 steps an
/// episode, an hour or so of one CPU.
pub const MAX_EPISODES: u64 = 20_000;
/// The widest hidden layer.
pub const MAX_HIDDEN: u64 = 256;
/// The longest window the final metrics may average over.
pub const MAX_EVAL_WINDOW: u64 = 1_000;

const DEFAULT_EPISODES: u64 = 300;
const DEFAULT_LEARNING_RATE: f64 = 0.01;
const DEFAULT_GAMMA: f64 = 0.99;
const DEFAULT_HIDDEN: u64 = 32;
const DEFAULT_CHECKPOINT_EVERY: u64 = 50;
const DEFAULT_EVAL_WINDOW: u64 = 20;

/// The trainer's keys, in the order operators read them.
pub const ACCEPTED_KEYS: &[&str] = &[
    "episodes",
    "learning_rate",
    "gamma",
    "hidden",
    "seed",
    "checkpoint_every",
    "eval_window",
];

/// A task's parameters with every default filled in, as the trainer reads
/// them from `params.json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CartpoleParams {
    pub episodes: u64,
    /// The policy network's Adam step size.
    pub learning_rate: f64,
    /// The discount of future rewards in each action's return.
    pub gamma: f64,
    /// Units of the policy network's hidden layer.
    pub hidden: u64,
    pub seed: u64,
    pub checkpoint_every: u64,
    /// How many of the last episodes `mean_return` averages over.
    pub eval_window: u64,
}

/// Parses and validates a task's params (a JSON object as text).
pub fn parse(text: &str) -> Result<CartpoleParams, ParamsError> {
    let map = params::object_with_keys(text, ACCEPTED_KEYS)?;
    let fields = Fields(&map);
    Ok(CartpoleParams {
        episodes: fields
            .integer("episodes", 1, Some(MAX_EPISODES))?
            .unwrap_or(DEFAULT_EPISODES),
        learning_rate: fields
            .fraction("learning_rate", Interval::OpenClosed)?
            .unwrap_or(DEFAULT_LEARNING_RATE),
        gamma: fields
            .fraction("gamma", Interval::Closed)?
            .unwrap_or(DEFAULT_GAMMA),
        hidden: fields
            .integer("hidden", 1, Some(MAX_HIDDEN))?
            .unwrap_or(DEFAULT_HIDDEN),
        seed: fields.integer("seed", 0, None)?.unwrap_or(0),
        checkpoint_every: fields
            .integer("checkpoint_every", 1, None)?
            .unwrap_or(DEFAULT_CHECKPOINT_EVERY),
        eval_window: fields
            .integer("eval_window", 1, Some(MAX_EVAL_WINDOW))?
            .unwrap_or(DEFAULT_EVAL_WINDOW),
    })
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
        assert_eq!(
            parse("{}"),
            Ok(CartpoleParams {
                episodes: 300,
                learning_rate: 0.01,
                gamma: 0.99,
                hidden: 32,
                seed: 0,
                checkpoint_every: 50,
                eval_window: 20,
            })
        );
    }

    #[test]
    fn every_key_is_read() {
        let p = parse(
            r#"{"episodes": 20000, "learning_rate": 1, "gamma": 0, "hidden": 256,
                "seed": 7, "checkpoint_every": 10, "eval_window": 1000}"#,
        )
        .expect("valid params");
        assert_eq!(
            p,
            CartpoleParams {
                episodes: 20_000,
                learning_rate: 1.0,
                gamma: 0.0,
                hidden: 256,
                seed: 7,
                checkpoint_every: 10,
                eval_window: 1000,
            }
        );
    }

    #[test]
    fn out_of_range_or_mistyped_values_name_the_key_and_its_range() {
        for (params, message) in [
            (
                r#"{"episodes": 0}"#,
                r#""episodes" must be an integer from 1 to 20000, got 0"#,
            ),
            (
                r#"{"episodes": 20001}"#,
                r#""episodes" must be an integer from 1 to 20000, got 20001"#,
            ),
            (
                r#"{"learning_rate": 0}"#,
                r#""learning_rate" must be a number in (0, 1], got 0"#,
            ),
            (
                r#"{"gamma": 1.5}"#,
                r#""gamma" must be a number in [0, 1], got 1.5"#,
            ),
            (
                r#"{"hidden": 0}"#,
                r#""hidden" must be an integer from 1 to 256, got 0"#,
            ),
            (
                r#"{"seed": -3}"#,
                r#""seed" must be an integer of at least 0, got -3"#,
            ),
            (
                r#"{"eval_window": "20"}"#,
                r#""eval_window" must be an integer from 1 to 1000, got "20""#,
            ),
        ] {
            assert_eq!(error(params), format!("invalid params: {message}"));
        }
    }

    #[test]
    fn unknown_keys_and_the_grid_worlds_keys_are_refused() {
        for key in ["epsilon", "discount", "step_delay_ms", "trace_file", "lr"] {
            let message = error(&format!(r#"{{"{key}": 1}}"#));
            assert_eq!(
                message,
                format!(
                    "invalid params: unknown key \"{key}\"; accepted keys are \
                     episodes, learning_rate, gamma, hidden, seed, checkpoint_every, eval_window"
                )
            );
        }
        assert!(error("[1]").starts_with("invalid params: expected a JSON object"));
    }

    #[test]
    fn no_key_accepts_a_path() {
        for key in ACCEPTED_KEYS {
            let params = serde_json::json!({ *key: "/etc/passwd" }).to_string();
            assert!(parse(&params).is_err(), "{key} accepted a path");
        }
    }
}
