//! The body of an attempt, everything between taking its lease and
//! releasing it; it never touches the lease layer, so the local runner
//! ([`crate::local`]) runs the very same steps with a lease it keeps held.
//!
//! 1. Build a fresh workspace; place the checkpoint of an earlier attempt.
//! 2. Instantiate the adapter, ask it for a launch plan, check the plan
//!    against the operator's policy, write its files.
//! 3. Launch the trainer under its supervisor (in the Python environment
//!    its adapter's entry asks for); feed each stdout line to the adapter;
//!    capture stdout, stderr and the adapter's records ([`crate::logs`]);
//!    forward progress (throttled) and checkpoints (at once); pass each
//!    renewed lease deadline to the supervisor; stop the trainer on cancel,
//!    on a stop order, on a lost lease or past its time limit.
//! 4. Ask the adapter for the result, unless the host itself ended the run.
//!
//! With an artifact store ([`crate::artifacts`]) the checkpoint of step 1 is
//! fetched from it and checked, the checkpoints of step 3 are stored while
//! the trainer runs, and the final checkpoint and outputs after step 4
//! ([`super::keep`]); without one (a local run) checkpoints travel inline.

use super::blame::{self, Failure};
use super::keep::{self, CheckpointUploads};
use super::stall::{self, StallWatch};
use super::throttle::Throttle;
use super::{Adapter, Control, HostEnv};
use crate::adapters::plan;
use crate::agent::AttemptEvent;
use crate::lease::renewer::LeaseState;
use crate::logs::LogWriter;
use crate::process::wire::LimitBreach;
use crate::process::{ExitKind, LaunchSpec, Trainer, TrainerExit};
use crate::python_env::{EnvInUse, INTERPRETER_PROGRAMS};
use crate::runtime::{
    AdapterInstance, AttemptContext, CheckpointRef, ExitReport, ExitStatus, OutputEvent, TaskInput,
};
use crate::workspace::Workspace;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use trainyard_proto::messages::{
    Checkpoint, Dispatch, LogStream, Outcome, Progress, ProgressUpdate,
};
use trainyard_proto::resources::memory_text;
use trainyard_proto::resources::Assignment;
use trainyard_proto::AttemptRef;

/// What one attempt's body runs with.
pub struct Body<'a> {
    pub env: &'a HostEnv,
    pub adapter: &'a Adapter,
    pub dispatch: &'a Dispatch,
    /// Its devices and share, handed to the trainer.
    pub assignment: &'a Assignment,
    /// Where the attempt's trainer and adapter lines are captured.
    pub logs: &'a LogWriter,
    /// Progress goes out here as [`AttemptEvent::Progress`].
    pub events: &'a mpsc::Sender<AttemptEvent>,
}

/// How a body ended.
pub struct Ending {
    pub outcome: Outcome,
    /// The attempt's workspace, for the caller to remove or keep.
    pub workspace: Option<Workspace>,
    /// How the trainer ended, if one was launched (its stderr tail, for a
    /// local run's report).
    pub trainer: Option<TrainerExit>,
    /// The last progress event the adapter read, for the report.
    pub progress: Option<Progress>,
}

impl Body<'_> {
    /// Runs the attempt to its end. `lease` says until when the attempt may
    /// run; `control` carries cancel, stop and shutdown orders.
    pub async fn run(
        self,
        control: &mut mpsc::Receiver<Control>,
        lease: &mut watch::Receiver<LeaseState>,
    ) -> Ending {
        let mut run = Run {
            env: self.env,
            attempt: self.dispatch.attempt,
            adapter: &self.dispatch.adapter,
            assignment: self.assignment,
            events: self.events,
            progress: Throttle::new(self.env.config.progress_interval),
            logs: self.logs,
            trainer: None,
            last_progress: None,
            uploads: None,
            stall: StallWatch::off(),
        };
        let (outcome, workspace) = run
            .execute(self.adapter, self.dispatch, control, lease)
            .await;
        Ending {
            outcome,
            workspace,
            trainer: run.trainer,
            progress: run.last_progress,
        }
    }
}

/// `HOME` and `TMPDIR` for a trainer: its workspace, so libraries that cache
/// or write temporary files stay inside it.
fn trainer_home(workspace: &std::path::Path, tmp: &std::path::Path) -> [(String, String); 2] {
    [
        ("HOME".into(), workspace.display().to_string()),
        ("TMPDIR".into(), tmp.display().to_string()),
    ]
}

/// The failure message of an attempt that went over a limit.
fn describe_breach(breach: LimitBreach) -> String {
    match breach {
        LimitBreach::Memory { limit_bytes } => format!(
            "memory limit {} exceeded: the kernel killed the trainer",
            memory_text(limit_bytes)
        ),
        LimitBreach::Disk { limit_bytes } => format!(
            "disk quota {} exceeded: the workspace is full, a write past it was refused",
            memory_text(limit_bytes)
        ),
    }
}

pub fn outcome_name(o: &Outcome) -> &'static str {
    match o {
        Outcome::Completed { .. } => "completed",
        Outcome::Failed {
            retryable: true, ..
        } => "failed (retryable)",
        Outcome::Failed {
            retryable: false, ..
        } => "failed",
        Outcome::HostFault { .. } => "failed (the host's fault)",
        Outcome::Cancelled => "cancelled",
        Outcome::LeaseLost { .. } => "lease lost",
        Outcome::Stalled { .. } => "stalled",
    }
}

fn failed(message: impl Into<String>, retryable: bool) -> Outcome {
    Outcome::Failed {
        message: message.into(),
        retryable,
    }
}

/// Why a trainer ended, as the host's `trainer_exits` metric names it.
fn exit_reason(ended: Option<&Ended>, exit: &TrainerExit) -> &'static str {
    match ended {
        Some(Ended::Cancelled) => return "cancelled",
        Some(Ended::Stopped(_)) => return "stopped",
        Some(Ended::LeaseLost(_)) => return "lease_lost",
        Some(Ended::TimedOut(_)) => return "timed_out",
        Some(Ended::Stalled(_)) => return "stalled",
        Some(Ended::Shutdown) => return "shutdown",
        Some(Ended::AdapterFault(_)) => return "adapter_fault",
        None => {}
    }
    if exit.breach.is_some() {
        return "limit_exceeded";
    }
    match exit.status {
        ExitKind::Exited(0) => "exited_zero",
        ExitKind::Exited(_) => "exited_nonzero",
        ExitKind::Signaled(_) => "signaled",
        ExitKind::LeaseExpired => "lease_expired",
        ExitKind::SupervisorLost(_) => "supervisor_lost",
    }
}

/// Why the host itself ended a trainer.
enum Ended {
    Cancelled,
    Stopped(String),
    LeaseLost(String),
    TimedOut(u64),
    /// No progress for the attempt's progress timeout; quiet this long.
    Stalled(Duration),
    Shutdown,
    AdapterFault(String),
}

struct Run<'a> {
    env: &'a HostEnv,
    attempt: AttemptRef,
    /// The adapter's name, for the metrics of its calls.
    adapter: &'a str,
    /// Its devices and share, handed to the trainer.
    assignment: &'a Assignment,
    events: &'a mpsc::Sender<AttemptEvent>,
    progress: Throttle,
    /// The attempt's captured lines.
    logs: &'a LogWriter,
    /// How the trainer ended, once it has.
    trainer: Option<TrainerExit>,
    /// The newest progress event, which the report carries.
    last_progress: Option<Progress>,
    /// The checkpoints being stored, when there is an artifact store.
    uploads: Option<CheckpointUploads>,
    /// Whether the trainer still makes progress ([`stall`]).
    stall: StallWatch,
}

impl Run<'_> {
    async fn execute(
        &mut self,
        adapter: &Adapter,
        dispatch: &Dispatch,
        control: &mut mpsc::Receiver<Control>,
        lease: &mut watch::Receiver<LeaseState>,
    ) -> (Outcome, Option<Workspace>) {
        let config = &self.env.config;
        let quota = self.env.enforcement.workspace_quota(&adapter.containment);
        let spare = self.env.spares.take();
        let workspace =
            match Workspace::create_with_quota(&config.work_dir, self.attempt, spare, quota) {
                Ok(w) => w,
                Err(e) => {
                    return (
                        blame::outcome(
                            Failure::Workspace,
                            format!("cannot create the workspace: {e}"),
                        ),
                        None,
                    )
                }
            };
        let checkpoint = match &dispatch.checkpoint {
            None => None,
            Some(Checkpoint::External(reference)) => {
                Some(CheckpointRef::External(reference.clone()))
            }
            Some(Checkpoint::Stored { name, object }) => {
                match self.place_stored(&workspace, name, object).await {
                    Ok(placed) => placed,
                    Err(outcome) => return (outcome, Some(workspace)),
                }
            }
            Some(Checkpoint::File { name, data }) => {
                let placed = plan::check_relative_path(name)
                    .map_err(|e| e.to_string())
                    .and_then(|name| workspace.write_file(name, data).map_err(|e| e.to_string()));
                match placed {
                    Ok(()) => Some(CheckpointRef::WorkspaceFile(name.clone())),
                    Err(e) => {
                        tracing::warn!(attempt = %self.attempt, error = %e, "cannot place the previous checkpoint; starting without it");
                        None
                    }
                }
            }
        };
        if let Some(shipper) = self.env.artifacts.as_ref().filter(|s| s.has_store()) {
            self.uploads = Some(CheckpointUploads::start(shipper.clone(), self.attempt));
        }
        let outcome = self
            .prepare_and_run(adapter, dispatch, checkpoint, &workspace, control, lease)
            .await;
        (outcome, Some(workspace))
    }

    /// Places the stored checkpoint of an earlier attempt, fetched and
    /// checked. A copy that does not match its checksum is not handed on:
    /// the attempt starts without it. One that cannot be fetched fails the
    /// attempt (retryable): starting over would lose the work it holds.
    async fn place_stored(
        &self,
        workspace: &Workspace,
        name: &str,
        object: &trainyard_proto::messages::StoredObject,
    ) -> Result<Option<CheckpointRef>, Outcome> {
        let attempt = self.attempt;
        if let Err(e) = plan::check_relative_path(name) {
            tracing::warn!(%attempt, error = %e, "cannot place the previous checkpoint; starting without it");
            return Ok(None);
        }
        let Some(shipper) = &self.env.artifacts else {
            tracing::warn!(%attempt, "no artifact store to fetch the previous checkpoint from; starting without it");
            return Ok(None);
        };
        match shipper.fetch(attempt, workspace, name, object).await {
            Ok(()) => {
                tracing::info!(%attempt, checkpoint = %name, size = object.size, "checkpoint placed");
                Ok(Some(CheckpointRef::WorkspaceFile(name.to_string())))
            }
            Err(e @ crate::artifacts::ShipError::Corrupt { .. }) => {
                tracing::warn!(%attempt, error = %e, "the previous checkpoint is not handed on; starting without it");
                Ok(None)
            }
            Err(e) if e.host_caused() => Err(blame::outcome(
                Failure::StoreRefused,
                format!("cannot fetch the previous checkpoint {name}: {e}"),
            )),
            Err(e) => Err(failed(
                format!("cannot fetch the previous checkpoint {name}: {e}"),
                true,
            )),
        }
    }

    async fn prepare_and_run(
        &mut self,
        adapter: &Adapter,
        dispatch: &Dispatch,
        checkpoint: Option<CheckpointRef>,
        workspace: &Workspace,
        control: &mut mpsc::Receiver<Control>,
        lease: &mut watch::Receiver<LeaseState>,
    ) -> Outcome {
        let config = &self.env.config;
        let context = AttemptContext {
            attempt: self.attempt,
            workspace: workspace.path().to_path_buf(),
            logs: Some(self.logs.clone()),
            assignment: self.assignment.clone(),
        };
        let mut instance = match adapter.loaded.instantiate(context).await {
            Ok(i) => i,
            Err(fault) => return failed(fault.to_string(), fault.retryable()),
        };
        let input = TaskInput {
            attempt: self.attempt,
            kind: dispatch.kind.clone(),
            params: dispatch.params.clone(),
            checkpoint,
        };
        let plan = match self
            .env
            .metrics
            .time_call(self.adapter, "prepare", instance.prepare(&input))
            .await
        {
            Err(fault) => return failed(fault.to_string(), false),
            Ok(Err(failure)) => return failed(failure.message, failure.retryable),
            Ok(Ok(plan)) => plan,
        };
        let plan = match plan::validate(plan, &adapter.allowlist) {
            Ok(p) => p,
            Err(e) => return failed(format!("launch plan refused: {e}"), false),
        };
        for file in &plan.files {
            if let Err(e) = workspace.write_file(&file.path, &file.contents) {
                return failed(
                    format!("cannot write {} into the workspace: {e}", file.path),
                    true,
                );
            }
        }
        let Some(command) = plan.command else {
            let exit = ExitReport {
                status: ExitStatus::NotLaunched,
                stderr_tail: String::new(),
                duration_ms: 0,
            };
            return self.finish(&mut instance, workspace, &exit).await;
        };
        // Held until the trainer has ended, so it is not evicted under it.
        let python_env = match self.python_env(adapter, &command, control).await {
            Ok(env) => env,
            Err(outcome) => return outcome,
        };
        let (executable, containment) = match &python_env {
            None => (command.executable.clone(), adapter.containment.clone()),
            Some(env) => {
                let mut containment = adapter.containment.as_ref().clone();
                containment.read_only.push(env.dir().to_path_buf());
                (env.interpreter(), Arc::new(containment))
            }
        };

        let mut env: Vec<(String, String)> = self.env.base_env.as_ref().clone();
        for (name, value) in command.env {
            // The operator's variables win over the adapter's.
            if !config.trainer_env.iter().any(|(n, _)| *n == name) {
                env.retain(|(n, _)| *n != name);
                env.push((name, value));
            }
        }
        // The devices and share are the host's to say, whoever set them.
        env.retain(|(n, _)| !Assignment::reserved_variable(n));
        env.extend(self.assignment.env());
        let enforcement = &self.env.enforcement;
        let tmp = match workspace.hand_over(enforcement.credentials()) {
            Ok(tmp) => tmp,
            Err(e) => {
                return blame::outcome(
                    Failure::Workspace,
                    format!("cannot prepare the workspace: {e}"),
                )
            }
        };
        for (name, value) in trainer_home(workspace.path(), &tmp) {
            if !env.iter().any(|(n, _)| *n == name) {
                env.push((name, value));
            }
        }
        let confinement = enforcement.confine(
            &format!("{}-{}", self.attempt.task, self.attempt.attempt),
            workspace.path(),
            &executable,
            &containment,
            self.assignment,
        );
        let spec = LaunchSpec {
            executable,
            // Python finds its environment from where argv[0] says it is:
            // a bare `python3` would be looked up on PATH.
            program_name: match &python_env {
                Some(env) => env.interpreter().display().to_string(),
                None => command.program,
            },
            args: command.args,
            env,
            workspace: workspace.path().to_path_buf(),
            supervisor: config.supervisor.clone(),
            max_line_bytes: config.max_line_bytes,
            stderr_tail_bytes: config.stderr_tail_bytes,
            confinement: Some(confinement),
            logs: Some(self.logs.clone()),
        };
        let initial = match *lease.borrow() {
            LeaseState::Held(d) => d,
            LeaseState::Lost(v) => {
                return Outcome::LeaseLost {
                    message: format!("lease lost before launch ({v:?})"),
                }
            }
        };
        // Kept for a memory kill, to run the bare interpreter the same way.
        let launched = spec.clone();
        let started = match &self.env.sandboxes {
            Some(pool) => pool.launch(spec, initial).await,
            None => Trainer::spawn(spec, initial).await,
        };
        let (trainer, mut lines) = match started {
            Ok(t) => t,
            Err(e) => {
                return blame::outcome(Failure::Launch, format!("cannot launch the trainer: {e}"))
            }
        };
        tracing::debug!(attempt = %self.attempt, pid = trainer.pid(), "trainer launched");

        let time_limit = dispatch
            .timeout_secs
            .map(|s| tokio::time::Instant::now() + Duration::from_secs(s));
        let grace = config.timers.stop_grace;
        let limit = stall::effective(dispatch.progress_timeout_secs, adapter.progress_timeout);
        self.stall.start(limit);
        // `wait` consumes the trainer; orders go through its control handle
        // while the wait runs alongside the output.
        let trainer_control = trainer.control();
        let wait = trainer.wait();
        tokio::pin!(wait);
        let mut ended: Option<Ended> = None;
        let mut lines_open = true;
        let exit = loop {
            let flush_at = self.progress.flush_at();
            let stall_at = self.stall.deadline();
            tokio::select! {
                exit = &mut wait => break exit,
                line = lines.recv(), if lines_open => {
                    let Some(line) = line else {
                        lines_open = false;
                        continue;
                    };
                    if ended.is_none() {
                        if let Some(fault) = self.output(&mut instance, &line, workspace).await {
                            trainer_control.kill();
                            ended = Some(Ended::AdapterFault(fault));
                        }
                    }
                    self.stall.saw_line(&line);
                    self.logs.push(LogStream::Stdout, line);
                }
                Some(order) = control.recv(), if ended.is_none() => {
                    trainer_control.stop(grace);
                    ended = Some(match order {
                        Control::Cancel => Ended::Cancelled,
                        Control::Stop { reason } => Ended::Stopped(reason),
                        Control::Shutdown => Ended::Shutdown,
                    });
                }
                changed = lease.changed(), if ended.is_none() => {
                    if changed.is_err() {
                        continue;
                    }
                    let state = *lease.borrow_and_update();
                    match state {
                        LeaseState::Held(deadline) => trainer_control.set_deadline(deadline),
                        LeaseState::Lost(verdict) => {
                            trainer_control.kill();
                            ended = Some(Ended::LeaseLost(format!("lease lost on renewal: {verdict:?}")));
                        }
                    }
                }
                _ = sleep_until_opt(time_limit), if ended.is_none() && time_limit.is_some() => {
                    trainer_control.stop(grace);
                    ended = Some(Ended::TimedOut(dispatch.timeout_secs.unwrap_or(0)));
                }
                _ = sleep_until_opt(stall_at), if ended.is_none() && stall_at.is_some() => {
                    trainer_control.stop(grace);
                    ended = Some(Ended::Stalled(self.stall.quiet()));
                }
                _ = sleep_until_opt(flush_at), if flush_at.is_some() => {
                    self.flush_progress().await;
                }
                uploaded = next_upload(&mut self.uploads) => {
                    let stored = self.uploads.as_mut().and_then(|u| u.settle(self.attempt, uploaded));
                    if let Some(checkpoint) = stored {
                        self.report_stored(checkpoint).await;
                    }
                }
            }
        };
        // Lines still buffered when the trainer ended.
        while let Some(line) = lines.recv().await {
            if ended.is_none() {
                if let Some(fault) = self.output(&mut instance, &line, workspace).await {
                    ended = Some(Ended::AdapterFault(fault));
                }
            }
            self.logs.push(LogStream::Stdout, line);
        }
        if ended.is_none() {
            if let Some(mut uploads) = self.uploads.take() {
                for checkpoint in uploads.finish(self.attempt).await {
                    self.report_stored(checkpoint).await;
                }
                self.uploads = Some(uploads);
            }
        } else {
            // Whatever the host ended stores nothing more.
            self.uploads = None;
        }
        self.flush_progress().await;
        self.trainer = Some(exit.clone());
        self.env
            .metrics
            .trainer_exited(exit_reason(ended.as_ref(), &exit));
        if exit.truncated_lines > 0 {
            tracing::warn!(attempt = %self.attempt, lines = exit.truncated_lines, "trainer output lines were cut at the line limit");
        }
        match ended {
            Some(Ended::Cancelled) => return Outcome::Cancelled,
            Some(Ended::Stopped(reason)) => {
                return Outcome::LeaseLost {
                    message: format!("stopped by the master: {reason}"),
                }
            }
            Some(Ended::LeaseLost(message)) => return Outcome::LeaseLost { message },
            Some(Ended::TimedOut(secs)) => {
                return failed(
                    format!(
                        "the trainer exceeded the task's time limit of {secs} s and was stopped"
                    ),
                    false,
                )
            }
            Some(Ended::Stalled(quiet)) => return self.stall.outcome(quiet, &exit.stderr_tail),
            Some(Ended::Shutdown) => {
                return failed("the host shut down while the trainer ran", true)
            }
            Some(Ended::AdapterFault(message)) => return failed(message, false),
            None => {}
        }
        if let Some(breach) = exit.breach {
            return match breach {
                LimitBreach::Memory { .. } => {
                    let failure = self.memory_kill(&launched, lease).await;
                    blame::outcome(failure, describe_breach(breach))
                }
                LimitBreach::Disk { .. } => failed(describe_breach(breach), false),
            };
        }
        let status = match exit.status {
            ExitKind::Exited(code) => ExitStatus::Exited(code),
            ExitKind::Signaled(signal) => ExitStatus::Signaled(signal),
            ExitKind::LeaseExpired => return Outcome::LeaseLost {
                message:
                    "the lease could not be renewed in time; the trainer's supervisor stopped it"
                        .into(),
            },
            ExitKind::SupervisorLost(why) => {
                return blame::outcome(
                    Failure::SupervisorLost,
                    format!("lost the trainer's supervisor: {why}"),
                )
            }
        };
        let report = ExitReport {
            status,
            stderr_tail: exit.stderr_tail,
            duration_ms: exit.duration.as_millis() as u64,
        };
        self.finish(&mut instance, workspace, &report).await
    }

    /// How a trainer `launched` so and killed at its memory limit failed:
    /// under a limit the host set, before any progress, a bare interpreter
    /// is run under the same limit to tell whether the limit lets Python
    /// start at all.
    async fn memory_kill(
        &self,
        launched: &LaunchSpec,
        lease: &watch::Receiver<LeaseState>,
    ) -> Failure {
        let asked_by_task = self.assignment.memory_bytes.is_some();
        let progressed = self.last_progress.is_some();
        let deadline = match *lease.borrow() {
            LeaseState::Held(d) => Some(d),
            LeaseState::Lost(_) => None,
        };
        let bare_starts = match deadline {
            Some(d) if !asked_by_task && !progressed => {
                super::baseline::interpreter_starts(launched, d).await
            }
            _ => None,
        };
        tracing::info!(attempt = %self.attempt, asked_by_task, progressed, ?bare_starts, "trainer killed at its memory limit");
        Failure::MemoryLimit {
            asked_by_task,
            progressed,
            bare_starts,
        }
    }

    /// The Python environment the trainer runs in: for an adapter whose
    /// entry asks for one, when it launches the interpreter. Built (or
    /// waited for) here; a cancel or stop order ends the wait.
    async fn python_env(
        &self,
        adapter: &Adapter,
        command: &plan::ValidCommand,
        control: &mut mpsc::Receiver<Control>,
    ) -> Result<Option<EnvInUse>, Outcome> {
        let (Some(wanted), Some(envs)) = (&adapter.python, &self.env.python) else {
            return Ok(None);
        };
        let launches_python = std::path::Path::new(&command.program)
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| INTERPRETER_PROGRAMS.contains(&n));
        if !launches_python {
            return Ok(None);
        }
        tokio::select! {
            prepared = envs.prepare(&command.executable, &wanted.requirements) => {
                prepared.map(Some).map_err(|f| {
                    failed(
                        format!("cannot prepare the Python environment: {}", f.message),
                        f.retryable,
                    )
                })
            }
            Some(order) = control.recv() => Err(match order {
                Control::Cancel => Outcome::Cancelled,
                Control::Stop { reason } => Outcome::LeaseLost {
                    message: format!("stopped by the master: {reason}"),
                },
                Control::Shutdown => {
                    failed("the host shut down while the Python environment was built", true)
                }
            }),
        }
    }

    async fn finish(
        &mut self,
        instance: &mut AdapterInstance,
        workspace: &Workspace,
        exit: &ExitReport,
    ) -> Outcome {
        let finished = instance.finish(exit);
        match self
            .env
            .metrics
            .time_call(self.adapter, "finish", finished)
            .await
        {
            Err(fault) => failed(fault.to_string(), false),
            Ok(Err(failure)) => failed(failure.message, failure.retryable),
            Ok(Ok(success)) => match self.keep(success.checkpoint.clone(), workspace).await {
                Ok(checkpoint) => Outcome::Completed {
                    checkpoint,
                    metrics: success.metrics,
                    summary: success.summary,
                },
                // The trainer's result is not held hostage by a store that
                // cannot be reached (the master down): it is reported, with
                // a final checkpoint inline if small enough, and says what
                // was not kept.
                Err(e) if e.store_unreachable() => {
                    tracing::warn!(attempt = %self.attempt, error = %e, "artifacts not stored: the store cannot be reached");
                    let note = format!("artifacts not stored: {e}");
                    Outcome::Completed {
                        checkpoint: success.checkpoint.and_then(|c| self.capture(c, workspace)),
                        metrics: success.metrics,
                        summary: Some(match success.summary {
                            Some(summary) => format!("{summary} ({note})"),
                            None => note,
                        }),
                    }
                }
                Err(e) if e.host_caused() => blame::outcome(
                    Failure::StoreRefused,
                    format!("the trainer succeeded but its artifacts were not all stored: {e}"),
                ),
                Err(e) => failed(
                    format!("the trainer succeeded but its artifacts were not all stored: {e}"),
                    e.retryable(),
                ),
            },
        }
    }

    /// Stores a successful attempt's final checkpoint and outputs (with an
    /// artifact store; inline otherwise), or says why not. A checkpoint
    /// announced earlier that could not be stored fails it too.
    async fn keep(
        &mut self,
        checkpoint: Option<CheckpointRef>,
        workspace: &Workspace,
    ) -> Result<Option<Checkpoint>, crate::artifacts::ShipError> {
        let Some(shipper) = self.env.artifacts.as_ref().filter(|s| s.has_store()) else {
            return Ok(checkpoint.and_then(|c| self.capture(c, workspace)));
        };
        match self.uploads.as_mut().and_then(|u| u.failure.take()) {
            // Only what could not be reached; the final state goes next.
            Some(failure) if failure.store_unreachable() => {}
            Some(failure) => return Err(failure),
            None => {}
        }
        let checkpoint = match checkpoint {
            None => None,
            Some(CheckpointRef::External(reference)) => Some(Checkpoint::External(reference)),
            Some(CheckpointRef::WorkspaceFile(name)) => Some(
                keep::final_checkpoint(
                    shipper,
                    self.uploads.as_ref(),
                    self.attempt,
                    workspace,
                    &name,
                )
                .await?,
            ),
        };
        keep::outputs(shipper, self.attempt, workspace).await?;
        Ok(checkpoint)
    }

    /// Reports a checkpoint stored after the progress that announced it.
    async fn report_stored(&mut self, checkpoint: Checkpoint) {
        self.progress
            .attach(self.attempt, checkpoint, self.last_progress.clone());
        self.flush_progress().await;
    }

    /// Reads a checkpoint the adapter pointed at, within the size limit.
    fn capture(&self, checkpoint: CheckpointRef, workspace: &Workspace) -> Option<Checkpoint> {
        match checkpoint {
            CheckpointRef::External(reference) => Some(Checkpoint::External(reference)),
            CheckpointRef::WorkspaceFile(name) => {
                match workspace.read_file(&name, self.env.config.max_checkpoint_bytes) {
                    Ok(data) => Some(Checkpoint::File { name, data }),
                    Err(e) => {
                        tracing::warn!(attempt = %self.attempt, checkpoint = %name, error = %e, "checkpoint not captured");
                        None
                    }
                }
            }
        }
    }

    /// Feeds one output line to the adapter; returns the fault if it broke.
    async fn output(
        &mut self,
        instance: &mut AdapterInstance,
        line: &str,
        workspace: &Workspace,
    ) -> Option<String> {
        let answer = instance.on_output(line);
        match self
            .env
            .metrics
            .time_call(self.adapter, "on-output", answer)
            .await
        {
            Ok(Some(event)) => {
                self.on_progress(event, workspace).await;
                None
            }
            Ok(None) => None,
            Err(fault) => Some(fault.to_string()),
        }
    }

    async fn on_progress(&mut self, event: OutputEvent, workspace: &Workspace) {
        let checkpoint = match (event.checkpoint, &mut self.uploads) {
            // Stored in the background; reported once it is.
            (Some(CheckpointRef::WorkspaceFile(name)), Some(uploads)) => {
                uploads.offer(self.attempt, workspace, &name);
                None
            }
            (checkpoint, _) => checkpoint.and_then(|c| self.capture(c, workspace)),
        };
        let urgent = checkpoint.is_some();
        self.stall.progressed();
        self.last_progress = Some(event.progress.clone());
        self.progress.offer(ProgressUpdate {
            attempt: self.attempt,
            progress: event.progress,
            checkpoint,
            earlier: vec![],
            restated: false,
        });
        if urgent || self.progress.due() {
            self.flush_progress().await;
        }
    }

    async fn flush_progress(&mut self) {
        if let Some(update) = self.progress.take() {
            let _ = self.events.send(AttemptEvent::Progress(update)).await;
        }
    }
}

/// The next finished checkpoint upload; never, without uploads.
async fn next_upload(uploads: &mut Option<CheckpointUploads>) -> keep::Uploaded {
    match uploads {
        Some(uploads) => uploads.next().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
