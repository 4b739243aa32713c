//! One attempt on this machine with no master, Redis or database: what
//! `trainyard adapter run` does, an adapter author's inner loop.
//!
//! The attempt goes through the same [`attempt::Body`] as on a real host —
//! the same runtime and limits, plan allowlist, Python environment,
//! containment and supervisor — built from the same [`HostConfig`]. Only the
//! lease layer is missing: the body watches a lease this runner keeps held
//! until a far deadline, so nothing but the attempt's own end, its time
//! limit or a cancel stops the trainer.
//!
//! What the attempt produces is handed to the caller as it happens
//! ([`Happening`]): each progress update and each batch of captured lines
//! (trainer stdout and stderr, adapter records), in the order they came.

use crate::agent::AttemptEvent;
use crate::attempt::{Adapter, Body, Control, HostEnv};
use crate::config::{AdapterConfig, HostConfig};
use crate::containment::Enforcement;
use crate::lease::renewer::LeaseState;
use crate::logs::LogBook;
use crate::process::{Deadline, TrainerExit};
use crate::runtime::AdapterRuntime;
use crate::HostError;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};
use trainyard_proto::messages::{
    AdapterInfo, Checkpoint, Dispatch, LogBatch, Outcome, ProgressUpdate,
};
use trainyard_proto::resources::Assignment;
use trainyard_proto::AttemptRef;

/// How long the lease of a local attempt is held: for all practical
/// purposes, until the attempt ends.
const LOCAL_LEASE: Duration = Duration::from_secs(365 * 24 * 3600);

/// How often captured lines are handed on while the attempt runs.
const LINES_EVERY: Duration = Duration::from_millis(50);

/// The task a local attempt runs.
#[derive(Clone, Debug, Default)]
pub struct LocalTask {
    /// One of the adapter's kinds; empty means its first.
    pub kind: String,
    /// The params, a JSON object as a task would carry them.
    pub params: String,
    /// A checkpoint file placed in the workspace as an earlier attempt's:
    /// its name in the workspace and its content.
    pub resume: Option<(String, Vec<u8>)>,
    /// The trainer's wall-clock limit, as a task may set it.
    pub timeout_secs: Option<u64>,
}

impl LocalTask {
    /// The dispatch a master would send: task 1, attempt 1 — or attempt 2
    /// when resuming, as the attempt after a lost one would be.
    fn dispatch(&self, adapter: &AdapterInfo) -> Dispatch {
        Dispatch {
            attempt: AttemptRef::new(1, if self.resume.is_some() { 2 } else { 1 }),
            adapter: adapter.name.clone(),
            version: adapter.version.clone(),
            kind: self.kind.clone(),
            params: self.params.clone(),
            checkpoint: self
                .resume
                .clone()
                .map(|(name, data)| Checkpoint::File { name, data }),
            timeout_secs: self.timeout_secs,
            progress_timeout_secs: None,
            resources: Default::default(),
        }
    }
}

/// Something the attempt produced while it ran.
#[derive(Debug)]
pub enum Happening {
    Progress(ProgressUpdate),
    Lines(LogBatch),
}

/// How a local attempt ended.
#[derive(Debug)]
pub struct LocalReport {
    pub attempt: AttemptRef,
    pub outcome: Outcome,
    /// How the trainer ended, if one was launched.
    pub trainer: Option<TrainerExit>,
    /// The workspace, when it was kept.
    pub kept_workspace: Option<PathBuf>,
    pub duration: Duration,
}

/// A host that runs attempts on this machine only: the configured
/// containment probed, the supervisor found, the adapter loaded.
pub struct LocalHost {
    env: HostEnv,
    adapter: Adapter,
    enforcement: Enforcement,
}

impl LocalHost {
    /// Checks the host's settings as `trainyard host` does (supervisor,
    /// containment) and loads the adapter of `entry`.
    pub async fn start(
        config: HostConfig,
        runtime: &AdapterRuntime,
        entry: &AdapterConfig,
    ) -> Result<LocalHost, HostError> {
        crate::check_supervisor(&config)?;
        crate::workspace::prepare_base(&config.work_dir).map_err(|source| HostError::WorkDir {
            path: config.work_dir.display().to_string(),
            source,
        })?;
        let enforcement = Enforcement::probe(
            &config.containment,
            &format!("local-{}", std::process::id()),
            &config.supervisor,
            &config.work_dir,
        )?;
        let adapter = crate::load_adapter(runtime, entry, &entry.path, &enforcement.runner())
            .await
            .map_err(|reason| HostError::Adapter {
                path: entry.path.display().to_string(),
                reason,
            })?;
        let metrics = crate::metrics::HostMetrics::default();
        let python = crate::open_python_envs(&config, entry.python.is_some(), &metrics)?;
        let env = HostEnv {
            base_env: Arc::new(crate::base_env(&config)),
            config: Arc::new(config),
            enforcement: Arc::new(enforcement.clone()),
            metrics,
            logs: Arc::new(LogBook::default()),
            python,
            // A local run's workspace is the caller's to keep or remove.
            spares: Arc::new(crate::workspace::Spares::new(0)),
            // One attempt: nothing to prepare ahead of.
            sandboxes: None,
            artifacts: None,
        };
        Ok(LocalHost {
            env,
            adapter,
            enforcement,
        })
    }

    /// The containment layers enforced, as `trainyard host` names them.
    pub fn layers(&self) -> Vec<String> {
        self.enforcement.layers()
    }

    pub fn adapter(&self) -> &Adapter {
        &self.adapter
    }

    /// Runs `task` to its end, handing each happening to `on` as it
    /// comes. `cancel` resolving stops the trainer (as a cancelled task's
    /// is stopped). The workspace is removed unless `keep_workspace`.
    pub async fn run(
        &self,
        task: &LocalTask,
        keep_workspace: bool,
        cancel: impl Future<Output = ()>,
        mut on: impl FnMut(Happening),
    ) -> LocalReport {
        let started = Instant::now();
        let dispatch = task.dispatch(self.adapter.loaded.info());
        let logs = self.env.logs.writer(dispatch.attempt);
        let (events_tx, mut events) = mpsc::channel(64);
        let (orders, mut control) = mpsc::channel(1);
        let far = Deadline::now().checked_add(LOCAL_LEASE);
        let (_held, mut lease) = watch::channel(LeaseState::Held(far));
        let assignment = Assignment::default();
        let body = Body {
            env: &self.env,
            adapter: &self.adapter,
            dispatch: &dispatch,
            assignment: &assignment,
            logs: &logs,
            events: &events_tx,
        }
        .run(&mut control, &mut lease);
        tokio::pin!(body);
        tokio::pin!(cancel);
        let mut cancelled = false;
        let mut tick = tokio::time::interval(LINES_EVERY);
        let ending = loop {
            tokio::select! {
                ending = &mut body => break ending,
                Some(event) = events.recv() => {
                    // Lines captured before the progress come first.
                    self.hand_on_lines(&mut on);
                    if let AttemptEvent::Progress(update) = event {
                        on(Happening::Progress(update));
                    }
                }
                _ = tick.tick() => self.hand_on_lines(&mut on),
                _ = &mut cancel, if !cancelled => {
                    cancelled = true;
                    let _ = orders.try_send(Control::Cancel);
                }
            }
        };
        logs.close();
        while let Ok(event) = events.try_recv() {
            self.hand_on_lines(&mut on);
            if let AttemptEvent::Progress(update) = event {
                on(Happening::Progress(update));
            }
        }
        for batch in self.env.logs.take_all(dispatch.attempt) {
            on(Happening::Lines(batch));
        }
        let kept_workspace = ending.workspace.and_then(|ws| {
            if keep_workspace {
                return Some(ws.path().to_path_buf());
            }
            if let Err(e) = ws.remove() {
                tracing::warn!(error = %e, "could not remove the workspace");
            }
            None
        });
        LocalReport {
            attempt: dispatch.attempt,
            outcome: ending.outcome,
            trainer: ending.trainer,
            kept_workspace,
            duration: started.elapsed(),
        }
    }

    /// Hands on every line captured so far.
    fn hand_on_lines(&self, on: &mut impl FnMut(Happening)) {
        loop {
            let batches = self.env.logs.take_due();
            if batches.is_empty() {
                return;
            }
            for batch in batches {
                on(Happening::Lines(batch));
            }
        }
    }
}

impl Drop for LocalHost {
    fn drop(&mut self) {
        self.enforcement.release();
    }
}
