//! The adapter runtime: loads task adapters (WebAssembly components built
//! against `wit/adapter.wit`) with wasmtime and calls them in a sandbox.
//!
//! The engine, the linker and each adapter's pre-instantiated component are
//! built once; every attempt gets a fresh [`AdapterInstance`] with a store of
//! its own, so nothing an adapter does in one attempt survives into the next.
//! Each instance runs under the operator's limits: a deadline per call
//! (epoch interruption), a memory limit, a log budget, and a WASI view that
//! holds nothing but the attempt's workspace at `/workspace`.
//!
//! # Layout
//! - [`bindings`]: the generated bindings (the only `bindgen!`).
//! - `engine`: the wasmtime engine (pooling allocator, epoch ticker) and linker.
//! - `cache`: compiled components cached on disk.
//! - `contract`: refusing files that are not components of our contract.
//! - `adapter`: [`LoadedAdapter`] and [`AdapterInstance`], the calls.
//! - `sandbox`: the per-attempt store (WASI context, limits) and the guard
//!   every call goes through.
//! - `limits`: the call deadline and the memory limiter.
//! - `guest_log`: the `host.log` import and the guest's stdout/stderr.
//! - `types`: the host-side values and the bounds checked on the guest's.
//! - `error`: [`AdapterFault`], [`LoadError`], [`RuntimeError`].

mod adapter;
pub mod bindings;
mod cache;
mod contract;
mod engine;
mod error;
mod guest_log;
mod limits;
mod sandbox;
mod types;

pub use adapter::{AdapterInstance, AttemptContext, LoadedAdapter};
pub use bindings::wit::{Command as PlanCommand, EnvVar, LaunchPlan, WorkspaceFile as PlanFile};
pub use contract::check_adapter_name;
pub use error::{AdapterFault, Call, LoadError, RuntimeError};
pub use types::{
    CheckpointRef, ExitReport, ExitStatus, OutputEvent, TaskFailure, TaskInput, TaskSuccess,
};

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The operator's limits for every adapter on this host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeConfig {
    /// Linear memory an instance may hold, in bytes (all its memories
    /// together). Default 64 MiB.
    pub memory_limit: u64,
    /// How long one call into an adapter (`describe`, `prepare`, one
    /// `on-output`, `finish`, or instantiation) may run. Default 5 s.
    pub call_timeout: Duration,
    /// Where compiled components are kept between runs; `None` compiles
    /// every adapter at each start.
    pub cache_dir: Option<PathBuf>,
    /// Instances that may exist at once (the pooling allocator's size):
    /// one per running attempt, plus one while an adapter is loading.
    /// Default 64.
    pub max_instances: u32,
    /// Log records an attempt's adapter may write; later ones are dropped.
    /// Default 1000.
    pub log_records: u32,
    /// Bytes of log (records and stdout/stderr together) an attempt's
    /// adapter may write. Default 1 MiB.
    pub log_bytes: usize,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            memory_limit: 64 << 20,
            call_timeout: Duration::from_secs(5),
            cache_dir: None,
            max_instances: 64,
            log_records: 1000,
            log_bytes: 1 << 20,
        }
    }
}

/// Loads adapters and owns what all their instances share: the engine, the
/// linker and the epoch ticker. Cheap to clone; the ticker stops when the
/// last clone, and the last adapter loaded through it, are dropped.
#[derive(Clone)]
pub struct AdapterRuntime {
    shared: Arc<engine::Shared>,
}

impl AdapterRuntime {
    /// Builds the engine (with the pooling allocator if the system lets it
    /// reserve the pool) and starts the epoch ticker.
    pub fn new(config: RuntimeConfig) -> Result<Self, RuntimeError> {
        Ok(Self {
            shared: Arc::new(engine::Shared::new(config)?),
        })
    }

    /// Reads, checks, compiles (or takes from the cache) and describes the
    /// adapter at `path`.
    pub async fn load(&self, path: &Path) -> Result<LoadedAdapter, LoadError> {
        adapter::load(self.shared.clone(), path).await
    }

    pub fn config(&self) -> &RuntimeConfig {
        &self.shared.config
    }
}
