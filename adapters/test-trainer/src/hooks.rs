//! The test hooks: keys a test adds to a task's params, on top of the
//! trainer's own.
//!
//! - `trace_file`: a file name (no directory) the trainer appends
//!   start/alive/end events to, in the directory the operator names in the
//!   trainer's environment as `TRAINYARD_TRACE_DIR` (`host.trainer_env`).
//!   Tests read it to prove that two attempts never overlapped and that a
//!   trainer stopped. A submitter chooses the name only, never the place.
//! - `fail_at_episode`: the trainer exits with code 3 (a retryable crash)
//!   as this episode begins;
//! - `fail_until_attempt`: only attempts up to this one fail, so a test can
//!   watch a later one resume and succeed.
//!
//! They are carried out by `trainer/hooks.py`, a wrapper that runs the
//! reference trainer in-process with an observer; it reads them from
//! `hooks.json`, so the trainer's own `params.json` is the one
//! `python-trainer` would write.

use q_learning::bindings::trainyard::adapter::types::{Task, WorkspaceFile};
use q_learning::params::{self, Fields, ParamsError, TrainerParams};
use q_learning::plan::{self, PlanError, PreparedAttempt, Wrapper};
use serde::Serialize;
use serde_json::{Map, Value};

/// The keys the hooks add to a task's params.
pub const KEYS: &[&str] = &["trace_file", "fail_at_episode", "fail_until_attempt"];
/// The wrapper, shipped inside the component next to the trainer.
pub const SCRIPT_SOURCE: &str = include_str!("../trainer/hooks.py");
pub const SCRIPT_FILE: &str = "hooks.py";
pub const HOOKS_FILE: &str = "hooks.json";
/// The longest trace file name.
const MAX_TRACE_NAME: usize = 128;

/// `hooks.json` as the wrapper reads it: the hooks, and who the attempt is
/// (each trace line names its task and attempt).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hooks {
    pub task: u64,
    pub attempt: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fail_at_episode: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fail_until_attempt: Option<u64>,
}

/// Why a test task could not be planned.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PrepareError {
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("invalid params: \"fail_until_attempt\" needs \"fail_at_episode\"")]
    FailUntilWithoutFailAt,
}

impl From<ParamsError> for PrepareError {
    fn from(e: ParamsError) -> Self {
        PrepareError::Plan(PlanError::Params(e))
    }
}

/// Validates the task, the trainer's params and the hooks, and plans the
/// wrapper in the trainer's place.
pub fn prepare(task: &Task) -> Result<PreparedAttempt, PrepareError> {
    plan::check_kind(task)?;
    let (trainer, extras) = params::parse_with(&task.params, KEYS)?;
    let hooks = read(&extras, &trainer, task)?;
    Ok(plan::plan(task, trainer, Some(wrapper(&hooks)))?)
}

/// The hooks among a task's params.
pub fn read(
    extras: &Map<String, Value>,
    trainer: &TrainerParams,
    task: &Task,
) -> Result<Hooks, PrepareError> {
    let fields = Fields(extras);
    let episodes = trainer.episodes;
    let fail_at_episode = match fields.integer("fail_at_episode", 1, None)? {
        Some(n) if n > episodes => {
            return Err(ParamsError::Invalid {
                key: "fail_at_episode",
                expected: format!("an integer from 1 to {episodes} (the value of \"episodes\")"),
                got: n.to_string(),
            }
            .into())
        }
        other => other,
    };
    let fail_until_attempt = fields.integer("fail_until_attempt", 1, None)?;
    if fail_until_attempt.is_some() && fail_at_episode.is_none() {
        return Err(PrepareError::FailUntilWithoutFailAt);
    }
    Ok(Hooks {
        task: task.id,
        attempt: task.attempt,
        trace_file: trace_file(extras)?,
        fail_at_episode,
        fail_until_attempt,
    })
}

/// A plain file name: letters, digits, `.`, `_` and `-`, not starting with
/// a dot, so that it can only name a file inside the trace directory.
fn trace_file(extras: &Map<String, Value>) -> Result<Option<String>, ParamsError> {
    let Some(value) = extras.get("trace_file") else {
        return Ok(None);
    };
    let plain = |name: &str| {
        !name.is_empty()
            && name.len() <= MAX_TRACE_NAME
            && !name.starts_with('.')
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    };
    match value.as_str() {
        Some(name) if plain(name) => Ok(Some(name.to_owned())),
        _ => Err(ParamsError::Invalid {
            key: "trace_file",
            expected: format!(
                "a file name of at most {MAX_TRACE_NAME} letters, digits, '.', '_' or '-' \
                 (no directory: traces go to the operator's TRAINYARD_TRACE_DIR)"
            ),
            got: params::show(value),
        }),
    }
}

/// The wrapper that carries the hooks out.
fn wrapper(hooks: &Hooks) -> Wrapper {
    Wrapper {
        script: WorkspaceFile {
            path: SCRIPT_FILE.to_owned(),
            contents: SCRIPT_SOURCE.as_bytes().to_vec(),
        },
        files: vec![WorkspaceFile {
            path: HOOKS_FILE.to_owned(),
            // Serialising numbers and a checked name cannot fail.
            contents: serde_json::to_vec_pretty(hooks).unwrap_or_default(),
        }],
        args: vec!["--hooks".to_owned(), HOOKS_FILE.to_owned()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(params: &str) -> Task {
        Task {
            id: 17,
            attempt: 2,
            kind: plan::KIND.to_owned(),
            params: params.to_owned(),
            checkpoint: None,
            workspace: "/workspace".to_owned(),
        }
    }

    fn error(params: &str) -> String {
        match prepare(&task(params)) {
            Ok(p) => panic!("params {params} were accepted: {p:?}"),
            Err(e) => e.to_string(),
        }
    }

    fn file<'a>(prepared: &'a PreparedAttempt, path: &str) -> &'a [u8] {
        prepared
            .plan
            .files
            .iter()
            .find(|f| f.path == path)
            .map(|f| f.contents.as_slice())
            .unwrap_or_else(|| panic!("no {path} in the plan"))
    }

    #[test]
    fn hooks_go_to_the_wrapper_and_the_trainer_gets_its_own_params() {
        let prepared = prepare(&task(
            r#"{"episodes": 40, "trace_file": "trace-3.jsonl", "fail_at_episode": 30,
                "fail_until_attempt": 1}"#,
        ))
        .expect("valid");
        let hooks: Value = serde_json::from_slice(file(&prepared, HOOKS_FILE)).unwrap();
        assert_eq!(
            hooks,
            serde_json::json!({"task": 17, "attempt": 2, "trace_file": "trace-3.jsonl",
                               "fail_at_episode": 30, "fail_until_attempt": 1})
        );
        let config: Value = serde_json::from_slice(file(&prepared, "params.json")).unwrap();
        assert_eq!(config["episodes"], 40);
        assert!(config.get("trace_file").is_none() && config.get("fail_at_episode").is_none());
        assert_eq!(file(&prepared, SCRIPT_FILE), SCRIPT_SOURCE.as_bytes());
        let command = prepared.plan.command.expect("a command");
        assert_eq!(command.program, "python3");
        assert_eq!(
            command.args,
            [
                "-u",
                "hooks.py",
                "--hooks",
                "hooks.json",
                "--config",
                "params.json"
            ]
        );
    }

    #[test]
    fn a_trace_file_is_a_plain_name_never_a_path() {
        for name in ["/tmp/x", "../x", "a/b", ".hidden", "", "é", "x\u{0}"] {
            let message = error(&serde_json::json!({ "trace_file": name }).to_string());
            assert!(
                message.starts_with(r#"invalid params: "trace_file" must be a file name"#),
                "{name:?}: {message}"
            );
        }
        assert!(error(r#"{"trace_file": 7}"#).contains("got 7"));
        assert!(prepare(&task(r#"{"trace_file": "ok_name-1.jsonl"}"#)).is_ok());
    }

    #[test]
    fn failures_must_fall_inside_the_run() {
        assert_eq!(
            error(r#"{"episodes": 10, "fail_at_episode": 11}"#),
            r#"invalid params: "fail_at_episode" must be an integer from 1 to 10 (the value of "episodes"), got 11"#
        );
        assert_eq!(
            error(r#"{"fail_until_attempt": 1}"#),
            r#"invalid params: "fail_until_attempt" needs "fail_at_episode""#
        );
    }

    #[test]
    fn the_trainers_keys_are_checked_and_others_refused() {
        assert!(error(r#"{"learning_rate": 7}"#).contains("learning_rate"));
        let message = error(r#"{"trace": "x"}"#);
        assert!(
            message.contains(r#"unknown key "trace""#)
                && message.ends_with("trace_file, fail_at_episode, fail_until_attempt"),
            "{message}"
        );
    }
}
