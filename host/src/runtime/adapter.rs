//! Loading an adapter once, and running one instance of it per attempt.
//!
//! Loading reads the file, refuses anything that is not a component of this
//! contract, compiles it (or takes it from the cache), links it once into an
//! `InstancePre`, and asks it to `describe` itself in a sandbox of its own.
//! From then on an attempt costs a fresh store and an instantiation from the
//! pool, never a compilation.
//!
//! An [`AdapterInstance`] serves exactly one attempt, in the order the
//! contract gives: `prepare`, any number of `on_output`, at most one
//! `finish`. After a fault every later call returns that same fault.

use super::bindings::AdapterPre;
use super::cache::{self, Origin};
use super::contract::{self, ContractProblem, HeaderProblem};
use super::engine::Shared;
use super::error::{AdapterFault, Call, LoadError};
use super::guest_log::{cut, Tags};
use super::sandbox::{AttemptState, Grant, Sandbox};
use super::types::{
    self, ExitReport, OutputEvent, TaskFailure, TaskInput, TaskSuccess, Violation, MAX_OUTPUT_LINE,
};
use super::LaunchPlan;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;
use trainyard_proto::messages::AdapterInfo;
use trainyard_proto::resources::Assignment;
use trainyard_proto::AttemptRef;

/// Which attempt an instance serves, and the directory it may touch.
#[derive(Clone, Debug)]
pub struct AttemptContext {
    pub attempt: AttemptRef,
    /// The attempt's workspace on the host; the guest sees it as `/workspace`.
    pub workspace: PathBuf,
    /// Where the adapter's log records and console lines are captured for
    /// the master, besides the host's own log.
    pub logs: Option<crate::logs::LogWriter>,
    /// The devices and share the host gave the attempt, which the adapter
    /// reads through `host.assigned-resources`; empty when nothing was
    /// assigned (a local run, `adapter check`).
    pub assignment: Assignment,
}

/// An adapter ready to run attempts. Cheap to clone.
#[derive(Clone)]
pub struct LoadedAdapter {
    inner: Arc<Loaded>,
}

struct Loaded {
    shared: Arc<Shared>,
    pre: AdapterPre<AttemptState>,
    /// The name the adapter gave, shared by every log line and fault.
    name: Arc<str>,
    info: AdapterInfo,
    description: String,
    path: PathBuf,
}

impl LoadedAdapter {
    /// Name, version and kinds, as the master is told.
    pub fn info(&self) -> &AdapterInfo {
        &self.inner.info
    }

    pub fn description(&self) -> &str {
        &self.inner.description
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// A fresh instance for one attempt, with `ctx.workspace` preopened at
    /// `/workspace`.
    pub async fn instantiate(&self, ctx: AttemptContext) -> Result<AdapterInstance, AdapterFault> {
        let loaded = &self.inner;
        let tags = Tags {
            adapter: loaded.name.clone(),
            attempt: Some(ctx.attempt),
            capture: ctx.logs,
        };
        let grant = Grant {
            workspace: Some(&ctx.workspace),
            assignment: types::wit_assignment(&ctx.assignment),
        };
        let sandbox = Sandbox::instantiate(&loaded.shared, &loaded.pre, tags, grant).await?;
        Ok(AdapterInstance {
            adapter: self.clone(),
            sandbox,
        })
    }
}

impl std::fmt::Debug for LoadedAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedAdapter")
            .field("info", &self.inner.info)
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

/// One adapter instance serving one attempt.
pub struct AdapterInstance {
    adapter: LoadedAdapter,
    sandbox: Sandbox,
}

impl std::fmt::Debug for AdapterInstance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdapterInstance")
            .field("adapter", &self.adapter.inner.name)
            .finish_non_exhaustive()
    }
}

impl AdapterInstance {
    /// Asks the adapter what to launch. A task naming no kind gets the
    /// adapter's first; a kind the adapter does not serve fails the attempt
    /// (not retryable) without calling it.
    pub async fn prepare(
        &mut self,
        task: &TaskInput,
    ) -> Result<Result<LaunchPlan, TaskFailure>, AdapterFault> {
        let kinds = &self.adapter.inner.info.kinds;
        let kind = match task.kind.as_str() {
            "" => kinds.first().map_or("", String::as_str),
            kind => kind,
        };
        if !kinds.iter().any(|k| k == kind) {
            return Ok(Err(TaskFailure {
                message: format!(
                    "adapter {:?} does not run tasks of kind {:?} (it runs: {})",
                    self.adapter.inner.name,
                    cut(kind, 64),
                    kinds.join(", ")
                ),
                retryable: false,
            }));
        }
        let answer = self.sandbox.prepare(&types::wit_task(task, kind)).await?;
        Ok(answer.map_err(types::task_failure))
    }

    /// Hands the adapter one line of the trainer's stdout (cut at 64 KiB).
    pub async fn on_output(&mut self, line: &str) -> Result<Option<OutputEvent>, AdapterFault> {
        let answer = self.sandbox.on_output(cut(line, MAX_OUTPUT_LINE)).await?;
        match answer.map(types::output_event).transpose() {
            Ok(event) => Ok(event),
            Err(violation) => Err(self.refuse(Call::OnOutput, violation)),
        }
    }

    /// Asks the adapter for the attempt's result.
    pub async fn finish(
        &mut self,
        exit: &ExitReport,
    ) -> Result<Result<TaskSuccess, TaskFailure>, AdapterFault> {
        match self.sandbox.finish(&types::wit_exit(exit)).await? {
            Err(error) => Ok(Err(types::task_failure(error))),
            Ok(result) => match types::task_success(result) {
                Ok(success) => Ok(Ok(success)),
                Err(violation) => Err(self.refuse(Call::Finish, violation)),
            },
        }
    }

    fn refuse(&mut self, call: Call, violation: Violation) -> AdapterFault {
        let adapter = self.sandbox.scope().adapter.to_string();
        self.sandbox.poison(match violation {
            Violation::Oversized(what) => AdapterFault::Oversized {
                adapter,
                call,
                what,
            },
            Violation::Invalid(what) => AdapterFault::Invalid {
                adapter,
                call,
                what,
            },
        })
    }
}

/// See the module documentation.
pub async fn load(shared: Arc<Shared>, path: &Path) -> Result<LoadedAdapter, LoadError> {
    let started = Instant::now();
    let path = path.to_path_buf();
    let wasm = tokio::fs::read(&path)
        .await
        .map_err(|source| LoadError::Io {
            path: path.clone(),
            source,
        })?;
    contract::check_header(&wasm).map_err(|problem| match problem {
        HeaderProblem::NotWasm => LoadError::NotWasm { path: path.clone() },
        HeaderProblem::CoreModule => LoadError::NotComponent { path: path.clone() },
        HeaderProblem::UnknownEncoding(message) => LoadError::Corrupt {
            path: path.clone(),
            message,
        },
    })?;
    let (component, origin) =
        compile(&shared, wasm)
            .await
            .map_err(|message| LoadError::Corrupt {
                path: path.clone(),
                message,
            })?;

    let ty = component.component_type();
    let imports = ty.imports(&shared.engine).map(|(name, _)| name);
    let exports = ty.exports(&shared.engine).map(|(name, _)| name);
    contract::check_names(imports, exports).map_err(|problem| match problem {
        ContractProblem::WrongVersion(found) => LoadError::WrongVersion {
            path: path.clone(),
            found,
        },
        ContractProblem::NotAnAdapter(exports) => LoadError::NotAnAdapter {
            path: path.clone(),
            exports,
        },
    })?;
    let unsupported = |e: wasmtime::Error| LoadError::Unsupported {
        path: path.clone(),
        message: format!("{e:#}"),
    };
    let pre = shared
        .linker
        .instantiate_pre(&component)
        .map_err(unsupported)?;
    let pre = AdapterPre::new(pre).map_err(unsupported)?;
    let (info, description) = describe(&shared, &pre, &path).await?;
    tracing::info!(
        adapter = %info.name,
        version = %info.version,
        kinds = ?info.kinds,
        params_schemas = info.params_schemas.len(),
        result_metrics = info.result_metrics.len(),
        path = %path.display(),
        from_cache = origin == Origin::Cache,
        pooling = shared.pooling,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "adapter loaded"
    );
    Ok(LoadedAdapter {
        inner: Arc::new(Loaded {
            shared,
            pre,
            name: info.name.as_str().into(),
            info,
            description,
            path,
        }),
    })
}

/// The compiled component: from memory, the on-disk cache, or compiled
/// now (off the async workers: it takes a CPU for a while).
async fn compile(
    shared: &Shared,
    wasm: Vec<u8>,
) -> Result<(wasmtime::component::Component, Origin), String> {
    let digest: [u8; 32] = <sha2::Sha256 as sha2::Digest>::digest(&wasm).into();
    let known = shared
        .compiled
        .lock()
        .ok()
        .and_then(|c| c.get(&digest).cloned());
    if let Some(component) = known {
        return Ok((component, Origin::Memory));
    }
    let engine = shared.engine.clone();
    let cache_dir = shared.config.cache_dir.clone();
    let compiled =
        tokio::task::spawn_blocking(move || cache::compile(&engine, cache_dir.as_deref(), &wasm))
            .await
            .map_err(|join| format!("compilation did not finish: {join}"))?
            .map_err(|e| format!("{e:#}"))?;
    if let Ok(mut c) = shared.compiled.lock() {
        c.insert(digest, compiled.0.clone());
    }
    Ok(compiled)
}

/// What the adapter says about itself: `describe`, checked, and what its
/// `metadata` export declares (when it has one), checked too.
async fn describe(
    shared: &Shared,
    pre: &AdapterPre<AttemptState>,
    path: &Path,
) -> Result<(AdapterInfo, String), LoadError> {
    let fault = |fault| LoadError::Describe {
        path: path.to_path_buf(),
        fault,
    };
    let invalid = |problem| LoadError::InvalidInfo {
        path: path.to_path_buf(),
        problem,
    };
    // Until it has described itself the adapter goes by its file name.
    let label: Arc<str> = path
        .file_stem()
        .map_or_else(|| "adapter".into(), |s| s.to_string_lossy().into());
    let mut sandbox = describer(shared, pre, label).await.map_err(fault)?;
    let described = sandbox.describe().await.map_err(fault)?;
    let (mut info, description) = contract::check_info(described).map_err(invalid)?;
    if let Some(indices) = &pre.metadata {
        let declared = sandbox
            .declared(indices, &info.kinds)
            .await
            .map_err(fault)?;
        trainyard_proto::params_schema::check_declared(&declared.schemas, &declared.metrics)
            .map_err(invalid)?;
        info.params_schemas = declared.schemas;
        info.result_metrics = declared.metrics;
    }
    Ok((info, description))
}

/// The instance `describe` and the metadata calls run in: one of its own,
/// with no workspace and no resources at all.
async fn describer(
    shared: &Shared,
    pre: &AdapterPre<AttemptState>,
    label: Arc<str>,
) -> Result<Sandbox, AdapterFault> {
    let tags = Tags {
        adapter: label,
        attempt: None,
        capture: None,
    };
    Sandbox::instantiate(shared, pre, tags, Grant::none()).await
}
