//! Whether a bare interpreter starts under an attempt's memory limit: asked
//! after a Python trainer was killed at a limit the host set before it
//! reported any progress, to tell a limit too small for Python to start
//! (the host's fault: every trainer it runs dies so) from a trainer that
//! used too much memory (the task's).
//!
//! The bare run is the attempt's own launch — same interpreter, user,
//! workspace and containment, in a cgroup of its own with the same limits —
//! with `-c pass` for arguments.

use crate::process::{Deadline, ExitKind, LaunchSpec, Trainer};
use crate::python_env::INTERPRETER_PROGRAMS;
use std::time::Duration;

/// The longest a bare interpreter may take to start and exit.
const BARE_RUN_LIMIT: Duration = Duration::from_secs(30);

/// The launch of a bare interpreter in place of `spec`'s trainer, if the
/// trainer is a Python interpreter; `None` otherwise.
pub fn bare_interpreter(spec: &LaunchSpec) -> Option<LaunchSpec> {
    let name = std::path::Path::new(&spec.program_name)
        .file_name()?
        .to_str()?;
    if !INTERPRETER_PROGRAMS.contains(&name) {
        return None;
    }
    let mut bare = spec.clone();
    bare.args = vec!["-c".into(), "pass".into()];
    bare.logs = None;
    if let Some(confinement) = bare.confinement.as_mut() {
        confinement.cgroup = confinement.cgroup.take().map(|c| format!("{c}-bare"));
    }
    Some(bare)
}

/// Whether the bare interpreter of `spec` starts and exits cleanly under
/// its limits; `None` when that could not be told (it is no Python
/// trainer, or the bare run could not be made).
pub async fn interpreter_starts(spec: &LaunchSpec, deadline: Deadline) -> Option<bool> {
    let bare = bare_interpreter(spec)?;
    let (trainer, lines) = Trainer::spawn(bare, deadline).await.ok()?;
    drop(lines);
    let control = trainer.control();
    let exit = match tokio::time::timeout(BARE_RUN_LIMIT, trainer.wait()).await {
        Ok(exit) => exit,
        Err(_) => {
            control.kill();
            return None;
        }
    };
    Some(exit.breach.is_none() && exit.status == ExitKind::Exited(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(program: &str) -> LaunchSpec {
        LaunchSpec {
            executable: "/usr/bin/python3".into(),
            program_name: program.into(),
            args: vec!["train.py".into()],
            env: vec![],
            workspace: "/w".into(),
            supervisor: "/s".into(),
            max_line_bytes: 1,
            stderr_tail_bytes: 1,
            confinement: Some(crate::containment::Confinement {
                cgroup: Some("trainyard/7-1".into()),
                ..Default::default()
            }),
            logs: None,
        }
    }

    #[test]
    fn only_a_python_trainer_has_a_bare_run_in_a_cgroup_of_its_own() {
        let bare = bare_interpreter(&spec("/opt/env/bin/python3")).unwrap();
        assert_eq!(bare.args, ["-c", "pass"]);
        assert_eq!(
            bare.confinement.unwrap().cgroup.as_deref(),
            Some("trainyard/7-1-bare")
        );
        assert!(bare_interpreter(&spec("julia")).is_none());
    }
}
