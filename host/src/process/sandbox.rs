//! The host's handle on a sandbox prepared ahead of its attempt: a
//! `trainyard-supervise --prepare` that has made a cgroup, namespaces, a
//! filesystem view and a waiting trainer for one attempt of a given
//! [`SandboxPlan`], and waits for its launch ([`super::Trainer::launch`]).
//!
//! Dropping it unused closes its control socket: the supervisor then kills
//! what it made and removes its cgroup, and nothing of it is left.

use super::link::{LinkShutdown, ReportReader};
use super::trainer::{attach, supervisor_failure};
use super::wire::Report;
use super::{supervisor, SpawnError};
use crate::containment::sandbox::SandboxPlan;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Stdio;
use tokio::net::unix::OwnedWriteHalf;
use tokio::process::{Child, Command};

/// A prepared sandbox, ready for one attempt.
pub struct PreparedSandbox {
    plan: SandboxPlan,
    supervisor: Child,
    // Dropped first: the supervisor learns at once that it is not wanted.
    link: LinkShutdown,
    reports: ReportReader,
    writer: OwnedWriteHalf,
}

impl std::fmt::Debug for PreparedSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedSandbox")
            .field("supervisor", &self.supervisor.id())
            .finish_non_exhaustive()
    }
}

impl PreparedSandbox {
    /// Starts a supervisor (the `trainyard-supervise` at `supervisor`) that
    /// prepares a sandbox of `plan`, and waits until it is ready.
    pub async fn prepare(
        supervisor: &Path,
        plan: SandboxPlan,
    ) -> Result<PreparedSandbox, SpawnError> {
        let (host_end, supervisor_end) = UnixStream::pair().map_err(SpawnError::ControlSocket)?;
        let as_json = serde_json::to_string(&plan).map_err(|e| SpawnError::Supervisor {
            path: supervisor.to_path_buf(),
            source: std::io::Error::other(e),
        })?;
        let mut command = Command::new(supervisor);
        command
            .arg(supervisor::PREPARE_FLAG)
            .arg(as_json)
            .env_clear()
            .stdin(Stdio::from(OwnedFd::from(supervisor_end)))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let child = command.spawn().map_err(|source| SpawnError::Supervisor {
            path: supervisor.to_path_buf(),
            source,
        });
        // The supervisor's end lives only in the supervisor from here on.
        drop(command);
        let mut child = child?;
        let (link, mut reports, writer) = attach(host_end)?;
        match reports.next().await {
            Ok(Some(Report::Prepared)) => Ok(PreparedSandbox {
                plan,
                supervisor: child,
                link,
                reports,
                writer,
            }),
            Ok(Some(Report::SpawnFailed(reason))) => {
                let _ = child.wait().await;
                Err(SpawnError::Trainer(reason))
            }
            Ok(Some(other)) => {
                let what = format!("it reported {other:?} instead of a prepared sandbox");
                Err(supervisor_failure(link, &mut child, what).await)
            }
            Ok(None) => {
                let what = "it closed the control socket without a word".to_string();
                Err(supervisor_failure(link, &mut child, what).await)
            }
            Err(error) => Err(supervisor_failure(link, &mut child, error.to_string()).await),
        }
    }

    /// What it was prepared for.
    pub fn plan(&self) -> &SandboxPlan {
        &self.plan
    }

    /// Its supervisor's pid, which is also the pid of its process tree's
    /// root.
    pub fn pid(&self) -> Option<u32> {
        self.supervisor.id()
    }

    /// Whether it can still serve: its supervisor has not ended (it ends
    /// if anything of the sandbox does).
    pub fn alive(&mut self) -> bool {
        matches!(self.supervisor.try_wait(), Ok(None))
    }

    pub(crate) fn into_parts(self) -> (Child, LinkShutdown, ReportReader, OwnedWriteHalf) {
        (self.supervisor, self.link, self.reports, self.writer)
    }
}
