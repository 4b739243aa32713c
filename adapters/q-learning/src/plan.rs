//! The launch plan for one attempt of a reference trainer's task.
//!
//! The plan writes two files into the workspace, the [`Trainer`] script
//! (embedded in the component, so a host needs nothing but `python3` and
//! whatever libraries the script imports) and its normalised `params.json`,
//! and runs `python3 -u trainer.py --config params.json`, adding `--resume
//! PATH` when an earlier attempt left a checkpoint file, which the host has
//! already placed in this workspace. [`plan`] does this for the q-learning
//! kind, [`plan_trainer`] for any trainer and its params.
//!
//! An adapter may run a [`Wrapper`] in the trainer's place: a script that
//! imports `trainer.py` and watches the run, with files and arguments of its
//! own (the test adapter's hooks are one).

use crate::bindings::trainyard::adapter::types::{
    Checkpoint, Command, EnvVar, LaunchPlan, Task, WorkspaceFile,
};
use crate::params::{self, ParamsError, TrainerParams};
use serde::Serialize;

/// The task kind of the grid-world trainer.
pub const KIND: &str = "q-learning";
/// The grid-world trainer, shipped inside the component.
pub const TRAINER_SOURCE: &str = include_str!("../trainer/trainer.py");
/// The grid-world trainer and its kind.
pub const Q_LEARNING: Trainer = Trainer {
    kind: KIND,
    source: TRAINER_SOURCE,
};
pub const TRAINER_FILE: &str = "trainer.py";
pub const CONFIG_FILE: &str = "params.json";
/// The interpreter; it must be on the host's allowlist for this adapter.
pub const PROGRAM: &str = "python3";

/// A trainer script shipped inside an adapter, and the task kind it serves.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Trainer {
    pub kind: &'static str,
    /// The script, written into the workspace as [`TRAINER_FILE`].
    pub source: &'static str,
}

/// Why an attempt could not be planned. None is worth a retry: the task
/// itself is at fault, not the host.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    #[error(transparent)]
    Params(#[from] ParamsError),
    #[error("this adapter runs tasks of kind \"{expected}\" only, not \"{kind}\"")]
    WrongKind {
        expected: &'static str,
        kind: String,
    },
    #[error(
        "the reference trainer resumes only from a checkpoint file in the workspace; \
         an external checkpoint ({reference}) is not supported"
    )]
    ExternalCheckpoint { reference: String },
}

/// What `prepare` decided: the plan for the host, and what the adapter keeps
/// for logging.
#[derive(Debug, Clone, PartialEq)]
pub struct PreparedAttempt<P = TrainerParams> {
    pub plan: LaunchPlan,
    pub params: P,
    /// The workspace checkpoint the trainer resumes from, if any.
    pub resume_from: Option<String>,
}

/// A script run by `python3` in the trainer's place.
#[derive(Debug, Clone, PartialEq)]
pub struct Wrapper {
    /// The script, written into the workspace next to `trainer.py`.
    pub script: WorkspaceFile,
    /// Files the script reads.
    pub files: Vec<WorkspaceFile>,
    /// The script's own arguments, before the trainer's.
    pub args: Vec<String>,
}

/// Validates the task (its kind, then its params) and builds its launch plan.
pub fn prepare(task: &Task) -> Result<PreparedAttempt, PlanError> {
    check_kind(task)?;
    let params = params::parse(&task.params)?;
    plan(task, params, None)
}

/// Refuses a task of another kind than q-learning.
pub fn check_kind(task: &Task) -> Result<(), PlanError> {
    check_kind_of(task, &Q_LEARNING)
}

/// Refuses a task of another kind than `trainer`'s.
pub fn check_kind_of(task: &Task, trainer: &Trainer) -> Result<(), PlanError> {
    if task.kind != trainer.kind {
        return Err(PlanError::WrongKind {
            expected: trainer.kind,
            kind: task.kind.clone(),
        });
    }
    Ok(())
}

/// The launch plan for validated q-learning params: the grid-world trainer,
/// or `wrapper` in its place, resuming from the task's checkpoint if it has
/// one.
pub fn plan(
    task: &Task,
    params: TrainerParams,
    wrapper: Option<Wrapper>,
) -> Result<PreparedAttempt, PlanError> {
    plan_trainer(task, &Q_LEARNING, params, wrapper)
}

/// The launch plan for `trainer` with validated `params` (written as
/// `params.json`), or `wrapper` in its place, resuming from the task's
/// checkpoint if it has one.
pub fn plan_trainer<P: Serialize>(
    task: &Task,
    trainer: &Trainer,
    params: P,
    wrapper: Option<Wrapper>,
) -> Result<PreparedAttempt<P>, PlanError> {
    let resume_from = match &task.checkpoint {
        None => None,
        Some(Checkpoint::WorkspaceFile(path)) => Some(path.clone()),
        Some(Checkpoint::External(reference)) => {
            return Err(PlanError::ExternalCheckpoint {
                reference: reference.chars().take(200).collect(),
            })
        }
    };
    // Serialising plain numbers cannot fail.
    let config_json = serde_json::to_vec_pretty(&params).unwrap_or_default();

    let mut files = vec![
        WorkspaceFile {
            path: TRAINER_FILE.to_owned(),
            contents: trainer.source.as_bytes().to_vec(),
        },
        WorkspaceFile {
            path: CONFIG_FILE.to_owned(),
            contents: config_json,
        },
    ];
    let mut args = vec!["-u".to_owned()];
    match wrapper {
        None => args.push(TRAINER_FILE.to_owned()),
        Some(wrapper) => {
            args.push(wrapper.script.path.clone());
            args.extend(wrapper.args);
            files.push(wrapper.script);
            files.extend(wrapper.files);
        }
    }
    args.extend(["--config".to_owned(), CONFIG_FILE.to_owned()]);
    if let Some(path) = &resume_from {
        args.extend(["--resume".to_owned(), path.clone()]);
    }
    let plan = LaunchPlan {
        files,
        command: Some(Command {
            program: PROGRAM.to_owned(),
            args,
            env: [("PYTHONUNBUFFERED", "1"), ("PYTHONDONTWRITEBYTECODE", "1")]
                .map(|(name, value)| EnvVar {
                    name: name.to_owned(),
                    value: value.to_owned(),
                })
                .into(),
        }),
    };
    Ok(PreparedAttempt {
        plan,
        params,
        resume_from,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(params: &str, checkpoint: Option<Checkpoint>) -> Task {
        Task {
            id: 17,
            attempt: 3,
            kind: KIND.to_owned(),
            params: params.to_owned(),
            checkpoint,
            workspace: "/workspace".to_owned(),
        }
    }

    fn file<'a>(plan: &'a LaunchPlan, path: &str) -> &'a [u8] {
        plan.files
            .iter()
            .find(|f| f.path == path)
            .map(|f| f.contents.as_slice())
            .unwrap_or_else(|| panic!("no {path} in the plan"))
    }

    #[test]
    fn fresh_attempt_runs_the_embedded_trainer_with_normalised_params() {
        let prepared = prepare(&task(r#"{"episodes": 40, "seed": 9}"#, None)).expect("plan");
        let plan = &prepared.plan;
        assert_eq!(file(plan, "trainer.py"), TRAINER_SOURCE.as_bytes());
        let config: serde_json::Value =
            serde_json::from_slice(file(plan, "params.json")).expect("params.json is JSON");
        assert_eq!(config["episodes"], 40);
        assert_eq!(config["seed"], 9);
        assert_eq!(config["learning_rate"], 0.5);
        assert_eq!(config["checkpoint_every"], 50);
        let keys: Vec<&str> = config
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.as_str())
            .collect();
        assert_eq!(keys.len(), params::ACCEPTED_KEYS.len(), "{keys:?}");

        let command = plan.command.as_ref().expect("a command");
        assert_eq!(command.program, "python3");
        assert_eq!(
            command.args,
            ["-u", "trainer.py", "--config", "params.json"]
        );
        let env: Vec<(&str, &str)> = command
            .env
            .iter()
            .map(|v| (v.name.as_str(), v.value.as_str()))
            .collect();
        assert_eq!(
            env,
            [("PYTHONUNBUFFERED", "1"), ("PYTHONDONTWRITEBYTECODE", "1")]
        );
        assert_eq!(prepared.resume_from, None);
    }

    #[test]
    fn workspace_checkpoint_is_passed_to_resume() {
        let prepared = prepare(&task(
            "{}",
            Some(Checkpoint::WorkspaceFile("checkpoint.json".to_owned())),
        ))
        .expect("plan");
        let command = prepared.plan.command.expect("a command");
        assert_eq!(
            command.args,
            [
                "-u",
                "trainer.py",
                "--config",
                "params.json",
                "--resume",
                "checkpoint.json"
            ]
        );
        assert_eq!(prepared.resume_from.as_deref(), Some("checkpoint.json"));
    }

    #[test]
    fn external_checkpoint_is_refused() {
        let err = prepare(&task(
            "{}",
            Some(Checkpoint::External("s3://bucket/ckpt".to_owned())),
        ))
        .expect_err("external checkpoints are unsupported");
        assert_eq!(
            err.to_string(),
            "the reference trainer resumes only from a checkpoint file in the workspace; \
             an external checkpoint (s3://bucket/ckpt) is not supported"
        );
    }

    #[test]
    fn invalid_params_and_wrong_kind_are_refused() {
        let err = prepare(&task(r#"{"learning_rate": 7}"#, None)).expect_err("invalid");
        assert_eq!(
            err.to_string(),
            r#"invalid params: "learning_rate" must be a number in (0, 1], got 7"#
        );
        let mut other = task("{}", None);
        other.kind = "ppo".to_owned();
        assert_eq!(
            prepare(&other).expect_err("wrong kind").to_string(),
            r#"this adapter runs tasks of kind "q-learning" only, not "ppo""#
        );
    }

    #[test]
    fn a_wrapper_runs_in_the_trainers_place_with_its_files_and_arguments() {
        let wrapper = Wrapper {
            script: WorkspaceFile {
                path: "watch.py".to_owned(),
                contents: b"import trainer".to_vec(),
            },
            files: vec![WorkspaceFile {
                path: "watch.json".to_owned(),
                contents: b"{}".to_vec(),
            }],
            args: vec!["--watch".to_owned(), "watch.json".to_owned()],
        };
        let checkpoint = Some(Checkpoint::WorkspaceFile("checkpoint.json".to_owned()));
        let t = task("{}", checkpoint);
        let prepared = plan(&t, params::parse("{}").unwrap(), Some(wrapper)).expect("plan");
        let paths: Vec<&str> = prepared
            .plan
            .files
            .iter()
            .map(|f| f.path.as_str())
            .collect();
        assert_eq!(
            paths,
            ["trainer.py", "params.json", "watch.py", "watch.json"]
        );
        assert_eq!(
            prepared.plan.command.expect("a command").args,
            [
                "-u",
                "watch.py",
                "--watch",
                "watch.json",
                "--config",
                "params.json",
                "--resume",
                "checkpoint.json"
            ]
        );
    }
}
