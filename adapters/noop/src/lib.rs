//! The `noop` task adapter: runs nothing, or `true`, or `seq N`, and always
//! succeeds.
//!
//! It exists to measure the scheduler's own cost per task (dispatch, leases,
//! result recording) without a trainer in the way, so every call does as
//! little as it can: no JSON library, no logging, no state between calls.
//! With `seq N` each output line is a progress event (and the host captures
//! it as a log line), which measures what watching a trainer costs.
//! Params are checked in [`params`].
//!
//! It is built against the contract's `0.1.1`, kept in `wit/archive/0.1.1`
//! (it needs nothing newer): the witness that hosts keep loading and running
//! components of that version, as `script-trainer` is for `0.1.0`.

mod params;

mod bindings {
    wit_bindgen::generate!({
        path: "../../wit/archive/0.1.1",
        world: "adapter-core",
    });
}

use bindings::exports::trainyard::adapter::adapter::Guest;
use bindings::trainyard::adapter::types::{
    AdapterInfo, Command, ExitReport, ExitStatus, LaunchPlan, Metric, Progress, Task, TaskError,
    TaskResult,
};

struct Noop;

/// The kinds this build serves. The `noop-next` crate builds this source
/// with the `next` feature: the same adapter at a newer version that added
/// a kind, so routing tests can run hosts carrying different versions.
const KINDS: &[&str] = if cfg!(feature = "next") {
    &["noop", "next"]
} else {
    &["noop"]
};
const VERSION: &str = if cfg!(feature = "next") {
    "0.2.0-next"
} else {
    env!("CARGO_PKG_VERSION")
};

impl Guest for Noop {
    fn describe() -> AdapterInfo {
        AdapterInfo {
            name: "noop".to_owned(),
            version: VERSION.to_owned(),
            description: "Does nothing (or runs `true`), for benchmarking the scheduler".to_owned(),
            kinds: KINDS.iter().map(|k| (*k).to_owned()).collect(),
        }
    }

    fn prepare(task: Task) -> Result<LaunchPlan, TaskError> {
        let params = params::parse(&task.params).map_err(|e| TaskError {
            message: e.to_string(),
            retryable: false,
        })?;
        Ok(launch_plan(params))
    }

    fn on_output(line: String) -> Option<Progress> {
        progress(&line)
    }

    fn finish(exit: ExitReport) -> Result<TaskResult, TaskError> {
        outcome(&exit.status)
    }
}

fn launch_plan(params: params::NoopParams) -> LaunchPlan {
    let command = |program: &str, args: Vec<String>| Command {
        program: program.to_owned(),
        args,
        env: Vec::new(),
    };
    LaunchPlan {
        files: Vec::new(),
        command: match params {
            params::NoopParams::Idle => None,
            params::NoopParams::Spawn => Some(command("true", Vec::new())),
            params::NoopParams::Lines(n) => Some(command("seq", vec![n.to_string()])),
        },
    }
}

/// A line of `seq`'s output, `N`: episode N, with return N.
fn progress(line: &str) -> Option<Progress> {
    let episode: u64 = line.trim().parse().ok()?;
    Some(Progress {
        episode: Some(episode),
        total_episodes: None,
        episode_return: Some(episode as f64),
        metrics: Vec::new(),
        checkpoint: None,
        message: None,
    })
}

fn outcome(status: &ExitStatus) -> Result<TaskResult, TaskError> {
    let failure = |message: String| {
        Err(TaskError {
            message,
            retryable: true,
        })
    };
    match status {
        ExitStatus::NotLaunched | ExitStatus::Exited(0) => Ok(TaskResult {
            metrics: vec![Metric {
                name: "ok".to_owned(),
                value: 1.0,
            }],
            checkpoint: None,
            summary: None,
        }),
        ExitStatus::Exited(code) => failure(format!("the command exited with code {code}")),
        ExitStatus::Signaled(signal) => {
            failure(format!("the command was killed by signal {signal}"))
        }
    }
}

bindings::export!(Noop with_types_in bindings);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_runs_nothing_spawn_runs_true_and_lines_runs_seq() {
        let idle = launch_plan(params::NoopParams::Idle);
        assert!(idle.files.is_empty());
        assert!(idle.command.is_none());

        let spawned = launch_plan(params::NoopParams::Spawn);
        let command = spawned.command.expect("a command");
        assert_eq!(command.program, "true");
        assert!(command.args.is_empty() && command.env.is_empty());

        let lines = launch_plan(params::NoopParams::Lines(20));
        let command = lines.command.expect("a command");
        assert_eq!(
            (command.program.as_str(), command.args),
            ("seq", vec!["20".to_owned()])
        );
    }

    #[test]
    fn each_number_seq_prints_is_an_episode_and_anything_else_is_not() {
        let p = progress("17").expect("progress");
        assert_eq!((p.episode, p.episode_return), (Some(17), Some(17.0)));
        for line in ["", "x", "-1", "1.5", "18446744073709551616"] {
            assert!(progress(line).is_none(), "{line:?}");
        }
    }

    #[test]
    fn not_launched_or_exit_0_succeeds_with_ok_1() {
        for status in [ExitStatus::NotLaunched, ExitStatus::Exited(0)] {
            let result = outcome(&status).map_err(|e| e.message).expect("success");
            let metrics: Vec<(&str, f64)> = result
                .metrics
                .iter()
                .map(|m| (m.name.as_str(), m.value))
                .collect();
            assert_eq!(metrics, [("ok", 1.0)]);
        }
    }

    #[test]
    fn any_other_exit_is_a_retryable_failure() {
        for (status, message) in [
            (ExitStatus::Exited(1), "the command exited with code 1"),
            (
                ExitStatus::Signaled(9),
                "the command was killed by signal 9",
            ),
        ] {
            let err = outcome(&status).map(|_| ()).expect_err(message);
            assert!(err.retryable);
            assert_eq!(err.message, message);
        }
    }
}
