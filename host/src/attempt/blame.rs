//! Whose failure an attempt's failure is: the task's (its adapter or
//! trainer failed; it uses one of the task's attempts) or the host's (the
//! host could not start or contain the trainer for reasons of its own; the
//! master requeues the task without using an attempt and prefers another
//! host). Decided here, from plain data, for every way an attempt's body can
//! fail before or around its trainer.
//!
//! Host-caused:
//! - the workspace cannot be created, filled or handed to the trainer's user;
//! - the trainer cannot be launched (its program is missing or the
//!   trainer's user cannot execute it, the supervisor cannot set up the
//!   cgroup, namespaces or filters);
//! - the trainer's supervisor is lost;
//! - the artifact store refused what the attempt left (wrong or missing
//!   credentials, no such bucket, a full disk): the trainer did its part;
//! - the kernel killed the trainer for memory under a limit the host set
//!   (the task asked for no memory of its own) before the trainer reported
//!   any progress, and a bare interpreter (`python3 -c pass`) is killed
//!   under that limit too ([`super::baseline`]): a limit too small for the
//!   interpreter to start, which kills every trainer the host runs,
//!   whatever the task.
//!
//! Everything else — the adapter refusing the params or faulting, the
//! trainer exiting non-zero, a limit the task asked for, a limit the trainer
//! outgrew after it had started working — is the task's.

use trainyard_proto::messages::Outcome;

/// Where an attempt's body failed, as far as blame goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// Creating, filling or handing over the workspace.
    Workspace,
    /// Starting the trainer under its supervisor.
    Launch,
    /// The supervisor vanished or broke its protocol.
    SupervisorLost,
    /// The artifact store refused to store or hand back an object.
    StoreRefused,
    /// The kernel killed the trainer at its memory limit.
    MemoryLimit {
        /// The limit was the task's own request.
        asked_by_task: bool,
        /// The trainer had reported progress before.
        progressed: bool,
        /// Whether a bare interpreter starts under the limit; `None`: not
        /// known (not asked, or no Python trainer).
        bare_starts: Option<bool>,
    },
}

/// Whose failure it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blame {
    /// The task's: it uses an attempt; `retryable` says whether another
    /// attempt may succeed.
    Task { retryable: bool },
    /// The host's: the task is requeued without using an attempt.
    Host,
}

/// Whose `failure` is.
pub fn blame(failure: Failure) -> Blame {
    match failure {
        Failure::Workspace | Failure::Launch | Failure::SupervisorLost | Failure::StoreRefused => {
            Blame::Host
        }
        Failure::MemoryLimit {
            asked_by_task: false,
            progressed: false,
            bare_starts: Some(false),
        } => Blame::Host,
        Failure::MemoryLimit { .. } => Blame::Task { retryable: false },
    }
}

/// The outcome of an attempt that failed with `message`.
pub fn outcome(failure: Failure, message: impl Into<String>) -> Outcome {
    let message = message.into();
    match blame(failure) {
        Blame::Host => Outcome::HostFault { message },
        Blame::Task { retryable } => Outcome::Failed { message, retryable },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launch_workspace_or_supervisor_failure_is_the_hosts() {
        for f in [
            Failure::Workspace,
            Failure::Launch,
            Failure::SupervisorLost,
            Failure::StoreRefused,
        ] {
            assert_eq!(blame(f), Blame::Host, "{f:?}");
        }
        assert_eq!(
            outcome(Failure::Launch, "cannot execute /root/.pyenv/shims/python3"),
            Outcome::HostFault {
                message: "cannot execute /root/.pyenv/shims/python3".into()
            }
        );
    }

    #[test]
    fn a_memory_kill_is_the_hosts_only_under_its_own_limit_too_small_for_a_bare_interpreter() {
        let kill = |asked_by_task, progressed| {
            blame(Failure::MemoryLimit {
                asked_by_task,
                progressed,
                bare_starts: Some(false),
            })
        };
        assert_eq!(kill(false, false), Blame::Host, "too small to start");
        for bare_starts in [Some(true), None] {
            assert_eq!(
                blame(Failure::MemoryLimit {
                    asked_by_task: false,
                    progressed: false,
                    bare_starts,
                }),
                Blame::Task { retryable: false },
                "a memory bomb at start, under a limit Python starts in ({bare_starts:?})"
            );
        }
        assert_eq!(
            kill(false, true),
            Blame::Task { retryable: false },
            "it started, then outgrew the limit"
        );
        assert_eq!(
            kill(true, false),
            Blame::Task { retryable: false },
            "the task asked for that limit"
        );
        assert!(matches!(
            outcome(
                Failure::MemoryLimit {
                    asked_by_task: true,
                    progressed: true,
                    bare_starts: Some(false),
                },
                "memory"
            ),
            Outcome::Failed {
                retryable: false,
                ..
            }
        ));
    }
}
