//! The host's handle on one trainer: starting it under `trainyard-supervise`,
//! moving its lease deadline, stopping it, and collecting how it ended.

use super::guard::TaskGuard;
use super::link::{
    read_final_report, write_requests, Ending, LinkShutdown, ReportReader, Requests,
};
use super::pump::{pump_stderr, pump_stdout, ORPHAN_IDLE};
use super::sandbox::PreparedSandbox;
use super::wire::{HostMessage, LaunchOrder, LimitBreach, Report};
use super::{supervisor, Deadline};
use crate::containment::cgroup::AttemptCgroup;
use crate::containment::Confinement;
use crate::logs::LogWriter;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::OwnedWriteHalf;
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, watch};

/// How many stdout lines may wait for the consumer before the reader stops.
const LINE_CHANNEL_CAPACITY: usize = 64;

/// How much of the supervisor's own stderr to quote when it fails early.
const SUPERVISOR_STDERR_BYTES: usize = 2048;

/// What to run and how.
#[derive(Clone, Debug)]
pub struct LaunchSpec {
    /// Already resolved by the allowlist.
    pub executable: PathBuf,
    /// argv[0], as the adapter requested it.
    pub program_name: String,
    pub args: Vec<String>,
    /// The complete environment; nothing else is inherited.
    pub env: Vec<(String, String)>,
    /// The trainer's working directory.
    pub workspace: PathBuf,
    /// Path of the `trainyard-supervise` binary.
    pub supervisor: PathBuf,
    /// Stdout lines longer than this are cut (the rest of the line dropped).
    pub max_line_bytes: usize,
    /// How much of the end of stderr to keep.
    pub stderr_tail_bytes: usize,
    /// How the supervisor confines the trainer; `None` runs it unconfined.
    pub confinement: Option<Confinement>,
    /// Where stderr lines (cut at `max_line_bytes`) are captured, besides
    /// the tail; stdout lines are the consumer's to capture.
    pub logs: Option<LogWriter>,
}

/// How a trainer ended, and what it left behind.
#[derive(Clone, Debug)]
pub struct TrainerExit {
    pub status: ExitKind,
    /// The end of its stderr, at most `stderr_tail_bytes` bytes.
    pub stderr_tail: String,
    /// From the trainer's start until the supervisor reported its end.
    pub duration: Duration,
    /// Stdout lines that were cut at `max_line_bytes`.
    pub truncated_lines: u64,
    /// The limit the attempt went over, if it did.
    pub breach: Option<LimitBreach>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExitKind {
    /// It exited by itself with this code.
    Exited(i32),
    /// It was ended by this signal (including a `stop` or `kill` by the host).
    Signaled(i32),
    /// Its lease deadline passed and the supervisor killed its group.
    LeaseExpired,
    /// The supervisor died or broke the protocol; the host killed the group
    /// itself. Says what happened.
    SupervisorLost(String),
}

#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("the lease deadline has already passed; the trainer was not started")]
    DeadlinePassed,
    #[error("the workspace {path} cannot be the trainer's working directory: {source}")]
    Workspace { path: PathBuf, source: io::Error },
    #[error("cannot set up the control socket of the trainer supervisor: {0}")]
    ControlSocket(#[source] io::Error),
    #[error("cannot start the trainer supervisor {path}: {source}")]
    Supervisor { path: PathBuf, source: io::Error },
    /// The supervisor could not start the trainer, e.g. "cannot execute
    /// /usr/bin/python3: No such file or directory".
    #[error("{0}")]
    Trainer(String),
    #[error("the trainer supervisor ended before starting the trainer: {0}")]
    SupervisorLost(String),
}

/// Moves the deadline of, stops or kills a running trainer; cheap to clone,
/// so a lease renewer can hold one while another task waits for the exit.
/// Does nothing once the trainer has ended or its [`Trainer`] was dropped.
#[derive(Clone, Debug)]
pub struct TrainerControl {
    requests: Arc<Requests>,
}

impl TrainerControl {
    /// Moves the lease deadline (later or earlier). Never blocks.
    pub fn set_deadline(&self, deadline: Deadline) {
        self.requests.set_deadline(deadline);
    }

    /// SIGTERM to the trainer's group now, SIGKILL when `grace` runs out.
    pub fn stop(&self, grace: Duration) {
        self.requests.stop(grace);
    }

    /// SIGKILL to the trainer's group now.
    pub fn kill(&self) {
        self.requests.kill();
    }
}

/// A running trainer. Dropping it without [`Trainer::wait`] kills the
/// trainer's group: the control socket closes, and the supervisor takes that
/// as the host being gone.
#[derive(Debug)]
pub struct Trainer {
    pid: u32,
    control: TrainerControl,
    // Field order is drop order: the socket is shut down before the tasks
    // are cancelled, so the supervisor learns first.
    link: LinkShutdown,
    writer: TaskGuard<()>,
    ending: TaskGuard<Ending>,
    stdout: TaskGuard<u64>,
    stderr: TaskGuard<String>,
    supervisor: Child,
    started: Instant,
    /// The attempt's cgroup, emptied here if the supervisor is lost.
    cgroup: Option<String>,
}

impl Trainer {
    /// Starts the supervisor and, through it, the trainer. Returns once the
    /// trainer runs (or failed to start: [`SpawnError`] says why).
    pub async fn spawn(
        spec: LaunchSpec,
        deadline: Deadline,
    ) -> Result<(Trainer, mpsc::Receiver<String>), SpawnError> {
        if deadline.has_passed(Deadline::now()) {
            return Err(SpawnError::DeadlinePassed);
        }
        check_workspace(&spec.workspace).await?;
        let (host_end, supervisor_end) = UnixStream::pair().map_err(SpawnError::ControlSocket)?;
        // Written before the supervisor exists, so it never runs without a
        // deadline; an empty socket buffer holds far more than one message.
        (&host_end)
            .write_all(&HostMessage::Deadline(deadline).encode())
            .map_err(SpawnError::ControlSocket)?;
        let supervisor = start_supervisor(&spec, supervisor_end)?;
        let (link, reports, write_half) = attach(host_end)?;
        Self::follow(supervisor, link, reports, write_half, spec).await
    }

    /// Starts the trainer in a sandbox prepared ahead of it, which must
    /// have been prepared for `spec`'s confinement (its
    /// [`crate::containment::sandbox::split`] plan). Returns once the
    /// trainer runs (or failed to start: [`SpawnError`] says why).
    pub async fn launch(
        sandbox: PreparedSandbox,
        spec: LaunchSpec,
        deadline: Deadline,
    ) -> Result<(Trainer, mpsc::Receiver<String>), SpawnError> {
        if deadline.has_passed(Deadline::now()) {
            return Err(SpawnError::DeadlinePassed);
        }
        check_workspace(&spec.workspace).await?;
        let admission = spec
            .confinement
            .as_ref()
            .map(|c| crate::containment::sandbox::split(c).1)
            .unwrap_or_default();
        let order = LaunchOrder {
            deadline_ns: 0,
            admission,
            executable: spec.executable.clone(),
            argv0: spec.program_name.clone(),
            args: spec.args.clone(),
            env: spec.env.clone(),
        }
        .with_deadline(deadline);
        let (mut supervisor, link, reports, mut write_half) = sandbox.into_parts();
        if let Err(error) = write_half.write_all(&order.encode()).await {
            let what = format!("cannot send the launch to the prepared sandbox: {error}");
            return Err(supervisor_failure(link, &mut supervisor, what).await);
        }
        Self::follow(supervisor, link, reports, write_half, spec).await
    }

    /// Once the supervisor has what it needs to start the trainer: waits
    /// for its word and sets the trainer's handle up.
    async fn follow(
        mut supervisor: Child,
        link: LinkShutdown,
        mut reports: ReportReader,
        write_half: OwnedWriteHalf,
        spec: LaunchSpec,
    ) -> Result<(Trainer, mpsc::Receiver<String>), SpawnError> {
        // If this future is dropped while waiting here, the socket closes and
        // the supervisor kills whatever it started.
        let pid = match reports.next().await {
            Ok(Some(Report::Started { pid })) => pid,
            Ok(Some(Report::SpawnFailed(reason))) => {
                let _ = supervisor.wait().await;
                return Err(SpawnError::Trainer(reason));
            }
            Ok(Some(Report::DeadlinePassed)) => {
                let _ = supervisor.wait().await;
                return Err(SpawnError::DeadlinePassed);
            }
            Ok(Some(other)) => {
                let what = format!("it reported {other:?} before starting the trainer");
                return Err(supervisor_failure(link, &mut supervisor, what).await);
            }
            Ok(None) => {
                let what = "it closed the control socket without a word".to_string();
                return Err(supervisor_failure(link, &mut supervisor, what).await);
            }
            Err(error) => {
                return Err(supervisor_failure(link, &mut supervisor, error.to_string()).await)
            }
        };
        let started = Instant::now();

        let (Some(stdout), Some(stderr)) = (supervisor.stdout.take(), supervisor.stderr.take())
        else {
            // start_supervisor pipes both, so this cannot happen; dropping
            // the link here would still kill what was started.
            return Err(SpawnError::SupervisorLost(
                "its output pipes are missing".into(),
            ));
        };
        let (gone_tx, gone_rx) = watch::channel(false);
        let (lines_tx, lines_rx) = mpsc::channel(LINE_CHANNEL_CAPACITY);
        let requests = Arc::new(Requests::default());
        let trainer = Trainer {
            pid,
            control: TrainerControl {
                requests: requests.clone(),
            },
            link,
            writer: TaskGuard::spawn(write_requests(write_half, requests)),
            ending: TaskGuard::spawn(async move {
                let ending = read_final_report(reports).await;
                let _ = gone_tx.send(true);
                ending
            }),
            stdout: TaskGuard::spawn(pump_stdout(
                stdout,
                spec.max_line_bytes,
                lines_tx,
                gone_rx.clone(),
            )),
            stderr: TaskGuard::spawn(pump_stderr(
                stderr,
                spec.stderr_tail_bytes,
                spec.logs.map(|logs| (logs, spec.max_line_bytes)),
                gone_rx,
            )),
            supervisor,
            started,
            cgroup: spec.confinement.and_then(|c| c.cgroup),
        };
        Ok((trainer, lines_rx))
    }

    /// The trainer's pid, which is also its process group id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// A handle for moving the deadline, stopping or killing the trainer
    /// while another task waits for it.
    pub fn control(&self) -> TrainerControl {
        self.control.clone()
    }

    /// Moves the lease deadline (later or earlier). Never blocks.
    pub fn set_deadline(&self, deadline: Deadline) {
        self.control.set_deadline(deadline);
    }

    /// SIGTERM to the trainer's group now, SIGKILL when `grace` runs out.
    pub fn stop(&self, grace: Duration) {
        self.control.stop(grace);
    }

    /// SIGKILL to the trainer's group now.
    pub fn kill(&self) {
        self.control.kill();
    }

    /// Waits until the trainer has exited and the supervisor has reported.
    /// Returns after the stdout channel is closed too, so the receiver must
    /// be read (or dropped) meanwhile.
    pub async fn wait(self) -> TrainerExit {
        let Trainer {
            pid,
            control: _,
            link,
            writer,
            ending,
            stdout,
            stderr,
            mut supervisor,
            started,
            cgroup,
        } = self;
        let ending = ending.join().await.unwrap_or_else(|error| Ending {
            outcome: Err(format!(
                "the task reading the supervisor's reports failed: {error}"
            )),
            breach: None,
            at: Instant::now(),
        });
        writer.cancel().await;
        drop(link);
        // After its final report the supervisor exits at once; without one,
        // the closed socket tells it to kill the group and exit.
        let supervisor_status = supervisor.wait().await;
        let status = match ending.outcome {
            Ok(Report::Exited(code)) => ExitKind::Exited(code),
            Ok(Report::Signaled(signal)) => ExitKind::Signaled(signal),
            Ok(Report::LeaseExpired) => ExitKind::LeaseExpired,
            Ok(other) => ExitKind::SupervisorLost(format!("unexpected report {other:?}")),
            Err(reason) => {
                // A supervisor killed outright took the trainer with it
                // (PDEATHSIG) but not the trainer's children. While any of
                // them lives, the pid still names their group.
                let _ = killpg(Pid::from_raw(pid as i32), Signal::SIGKILL);
                if let Some(relative) = cgroup {
                    empty_leftover_cgroup(&relative);
                }
                ExitKind::SupervisorLost(format!("{reason}; {}", describe_exit(&supervisor_status)))
            }
        };
        TrainerExit {
            status,
            breach: ending.breach,
            truncated_lines: stdout.join().await.unwrap_or(0),
            stderr_tail: stderr.join().await.unwrap_or_default(),
            duration: ending.at.saturating_duration_since(started),
        }
    }
}

/// The host's end of a supervisor's control socket, set up: the link that
/// closes it when dropped, the report reader and the write half.
pub(crate) fn attach(
    host_end: UnixStream,
) -> Result<(LinkShutdown, ReportReader, OwnedWriteHalf), SpawnError> {
    let link = LinkShutdown::new(OwnedFd::from(
        host_end.try_clone().map_err(SpawnError::ControlSocket)?,
    ));
    host_end
        .set_nonblocking(true)
        .map_err(SpawnError::ControlSocket)?;
    let socket = tokio::net::UnixStream::from_std(host_end).map_err(SpawnError::ControlSocket)?;
    let (read_half, write_half) = socket.into_split();
    Ok((link, ReportReader::new(read_half), write_half))
}

/// Kills whatever is left in the cgroup of a trainer whose supervisor died
/// (it empties and removes the cgroup itself otherwise).
fn empty_leftover_cgroup(relative: &str) {
    let cgroup = AttemptCgroup::load(relative);
    match cgroup.empty(|| {}) {
        Ok(()) => {
            if let Err(e) = cgroup.remove() {
                tracing::warn!(error = %e, "could not remove a lost supervisor's cgroup");
            }
        }
        Err(e) => tracing::error!(error = %e, "could not empty a lost supervisor's cgroup"),
    }
}

async fn check_workspace(path: &std::path::Path) -> Result<(), SpawnError> {
    let workspace_error = |source| SpawnError::Workspace {
        path: path.to_path_buf(),
        source,
    };
    let metadata = tokio::fs::metadata(path).await.map_err(workspace_error)?;
    if !metadata.is_dir() {
        return Err(workspace_error(io::Error::new(
            io::ErrorKind::NotADirectory,
            "not a directory",
        )));
    }
    Ok(())
}

/// Starts `trainyard-supervise` with the trainer's command line, working
/// directory, environment and stdio, and `control` as its standard input.
///
/// Nothing runs between `fork` and `exec` (no `pre_exec`), so the standard
/// library spawns with `posix_spawn`: the host's page tables are not copied
/// and its memory does not turn copy-on-write for every trainer started,
/// which would stall a busy host.
fn start_supervisor(spec: &LaunchSpec, control: UnixStream) -> Result<Child, SpawnError> {
    let mut command = Command::new(&spec.supervisor);
    if let Some(confinement) = &spec.confinement {
        let plan = serde_json::to_string(confinement).map_err(|e| SpawnError::Supervisor {
            path: spec.supervisor.clone(),
            source: io::Error::other(e),
        })?;
        command.arg(supervisor::CONFINE_FLAG).arg(plan);
    }
    command
        .arg(&spec.executable)
        .arg(&spec.program_name)
        .args(&spec.args)
        .env_clear()
        .envs(spec.env.iter().map(|(name, value)| (name, value)))
        .current_dir(&spec.workspace)
        .stdin(Stdio::from(OwnedFd::from(control)))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // No PDEATHSIG for the supervisor: it fires when the spawning *thread*
    // ends, and tokio's threads come and go. The supervisor notices the
    // host's death by its socket closing instead.
    let child = command.spawn().map_err(|source| SpawnError::Supervisor {
        path: spec.supervisor.clone(),
        source,
    });
    // The host's copy of the supervisor's end went with `command` (closed
    // when it is dropped, below), so that end lives only in the supervisor:
    // the host sees end-of-file if it dies.
    drop(command);
    child
}

/// Builds the error for a supervisor that ended (or broke down) before
/// starting the trainer, quoting its exit status and stderr.
pub(crate) async fn supervisor_failure(
    link: LinkShutdown,
    supervisor: &mut Child,
    what: String,
) -> SpawnError {
    drop(link);
    let mut said = Vec::new();
    if let Some(stderr) = supervisor.stderr.take() {
        let mut limited = stderr.take(SUPERVISOR_STDERR_BYTES as u64);
        let _ = tokio::time::timeout(ORPHAN_IDLE, limited.read_to_end(&mut said)).await;
    }
    let status = describe_exit(&supervisor.wait().await);
    let said = String::from_utf8_lossy(&said).trim().to_string();
    if said.is_empty() {
        SpawnError::SupervisorLost(format!("{what}; {status}"))
    } else {
        SpawnError::SupervisorLost(format!("{what}; {status}: {said}"))
    }
}

fn describe_exit(status: &io::Result<ExitStatus>) -> String {
    match status {
        Ok(status) => format!("the supervisor {status}"),
        Err(error) => format!("the supervisor's exit status is unknown: {error}"),
    }
}
