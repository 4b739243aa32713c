//! The `cartpole` task adapter: runs trainyard's CartPole trainer
//! (`trainer/trainer.py`, embedded in the component), REINFORCE with a small
//! numpy policy network on gymnasium's CartPole-v1.
//!
//! Everything but the trainer, its params and the shape of its result is the
//! q-learning crate's: the launch plan of an embedded script, the stdout line
//! protocol (episodes, checkpoints, resume), the exit and `result.json` into
//! a result. The trainer imports `numpy` and `gymnasium` (pinned in
//! `requirements.txt`), so the host's `python3` for this adapter must be an
//! interpreter that has them.
//!
//! Layout:
//! - [`params`]: validation of a task's params, defaults filled in;
//! - this file: the trainer, its result, `prepare` and the exported world.

pub mod params;

use params::CartpoleParams;
use q_learning::adapter::{self, RunSummary};
use q_learning::bindings::exports::trainyard::adapter::adapter::Guest;
use q_learning::bindings::exports::trainyard::adapter::metadata::Guest as MetadataGuest;
use q_learning::bindings::trainyard::adapter::types::{
    AdapterInfo, ExitReport, LaunchPlan, Progress, Task, TaskError, TaskResult,
};
use q_learning::outcome::{number, ResultShape};
use q_learning::plan::{self, PlanError, PreparedAttempt, Trainer};
use serde_json::{Map, Value};

/// The CartPole trainer and the task kind it serves.
pub const CARTPOLE: Trainer = Trainer {
    kind: "cartpole",
    source: include_str!("../trainer/trainer.py"),
};

/// The Python packages the trainer imports, with their version bounds; the
/// one place they are pinned (the adapter's tests and the host's
/// environment are built from it).
pub const REQUIREMENTS: &str = include_str!("../requirements.txt");

/// What the trainer's `result.json` holds.
pub const CARTPOLE_RESULT: ResultShape = ResultShape {
    required: &["mean_return", "best_return", "eval_episodes", "episodes"],
    also: &["resumed_from"],
    summary,
};

fn summary(fields: &Map<String, Value>) -> String {
    format!(
        "mean return {:.1} over the last {} episodes (best {}) after {} episodes",
        number(fields, "mean_return"),
        number(fields, "eval_episodes"),
        number(fields, "best_return"),
        number(fields, "episodes")
    )
}

impl RunSummary for CartpoleParams {
    fn run_summary(&self) -> String {
        format!(
            "{} episodes, seed {}, learning rate {}, gamma {}, {} hidden units",
            self.episodes, self.seed, self.learning_rate, self.gamma, self.hidden
        )
    }
}

/// Validates the task (its kind, then its params) and builds its launch plan.
pub fn prepare(task: &Task) -> Result<PreparedAttempt<CartpoleParams>, PlanError> {
    plan::check_kind_of(task, &CARTPOLE)?;
    let params = params::parse(&task.params)?;
    plan::plan_trainer(task, &CARTPOLE, params, None)
}

struct Cartpole;

impl Guest for Cartpole {
    fn describe() -> AdapterInfo {
        adapter::describe(
            "cartpole",
            env!("CARGO_PKG_VERSION"),
            "REINFORCE on gymnasium's CartPole-v1 with a numpy policy network \
             (python3 with numpy and gymnasium)",
            &CARTPOLE,
        )
    }

    fn prepare(task: Task) -> Result<LaunchPlan, TaskError> {
        adapter::prepare(&task, prepare(&task))
    }

    fn on_output(line: String) -> Option<Progress> {
        adapter::on_output(&line)
    }

    fn finish(exit: ExitReport) -> Result<TaskResult, TaskError> {
        adapter::finish(&exit, &CARTPOLE_RESULT)
    }
}

impl MetadataGuest for Cartpole {
    fn params_schema(_kind: String) -> Option<String> {
        None
    }

    fn result_metrics() -> Vec<String> {
        CARTPOLE_RESULT.metrics()
    }
}

q_learning::bindings::export!(Cartpole with_types_in q_learning::bindings);

#[cfg(test)]
mod tests {
    use super::*;
    use q_learning::bindings::trainyard::adapter::types::{Checkpoint, ExitStatus, WorkspaceFile};
    use q_learning::outcome::{self, Outputs};

    fn task(params: &str, checkpoint: Option<Checkpoint>) -> Task {
        Task {
            id: 4,
            attempt: 2,
            kind: "cartpole".to_owned(),
            params: params.to_owned(),
            checkpoint,
            workspace: "/workspace".to_owned(),
        }
    }

    fn file<'a>(files: &'a [WorkspaceFile], path: &str) -> &'a [u8] {
        files
            .iter()
            .find(|f| f.path == path)
            .map(|f| f.contents.as_slice())
            .unwrap_or_else(|| panic!("no {path} in the plan"))
    }

    #[test]
    fn plan_runs_the_cartpole_trainer_and_resumes_from_a_workspace_checkpoint() {
        let checkpoint = Some(Checkpoint::WorkspaceFile("checkpoint.json".to_owned()));
        let prepared = prepare(&task(r#"{"episodes": 150, "seed": 3}"#, checkpoint)).unwrap();
        let files = &prepared.plan.files;
        assert_eq!(file(files, "trainer.py"), CARTPOLE.source.as_bytes());
        let config: Value = serde_json::from_slice(file(files, "params.json")).unwrap();
        assert_eq!(config["episodes"], 150);
        assert_eq!(config["seed"], 3);
        assert_eq!(config["gamma"], 0.99);
        assert_eq!(
            config.as_object().unwrap().len(),
            params::ACCEPTED_KEYS.len()
        );
        let command = prepared.plan.command.expect("a command");
        assert_eq!(command.program, "python3");
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
        assert_eq!(
            prepared.params.run_summary(),
            "150 episodes, seed 3, learning rate 0.01, gamma 0.99, 32 hidden units"
        );
    }

    #[test]
    fn a_task_of_another_kind_or_with_bad_params_is_refused() {
        let mut other = task("{}", None);
        other.kind = "q-learning".to_owned();
        assert_eq!(
            prepare(&other).unwrap_err().to_string(),
            r#"this adapter runs tasks of kind "cartpole" only, not "q-learning""#
        );
        assert_eq!(
            prepare(&task(r#"{"gamma": 2}"#, None))
                .unwrap_err()
                .to_string(),
            r#"invalid params: "gamma" must be a number in [0, 1], got 2"#
        );
    }

    #[test]
    fn the_trainers_result_becomes_metrics_and_a_summary() {
        let exit = ExitReport {
            status: ExitStatus::Exited(0),
            stderr_tail: String::new(),
            duration_ms: 5000,
        };
        let result = outcome::decide(&exit, &CARTPOLE_RESULT, || Outputs {
            result_json: Ok(
                r#"{"mean_return":476.25,"best_return":500.0,"eval_episodes":20,
                "episodes":300,"resumed_from":150}"#
                    .to_owned(),
            ),
            policy_exists: true,
        })
        .expect("a result");
        assert_eq!(
            result.summary.as_deref(),
            Some("mean return 476.2 over the last 20 episodes (best 500) after 300 episodes")
        );
        assert_eq!(result.metrics.len(), 5);

        let grid_world_result = outcome::decide(&exit, &CARTPOLE_RESULT, || Outputs {
            result_json: Ok(
                r#"{"mean_return":0.6,"success_rate":0.9,"eval_episodes":50}"#.to_owned(),
            ),
            policy_exists: false,
        })
        .expect_err("no best_return");
        assert!(grid_world_result
            .to_string()
            .contains("\"best_return\" is missing or not a number"));
    }

    #[test]
    fn the_requirements_pin_numpy_and_gymnasium_with_bounds() {
        let names: Vec<&str> = REQUIREMENTS
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        for (line, name) in names.iter().zip(["gymnasium", "numpy"]) {
            assert!(
                line.starts_with(name) && line.contains(">=") && line.contains('<'),
                "{line}"
            );
        }
    }
}
