//! One instance of an adapter in its sandbox: a fresh store holding a
//! deny-by-default WASI context, the memory limit, the call clock and the
//! log budget, plus the guard every call into the guest goes through.
//!
//! WASI grants exactly this: the attempt's workspace, read-write, at
//! `/workspace` (none at all while loading); stdout and stderr into the
//! host's log; the clocks and random numbers. No arguments, no environment
//! variables, no stdin, no sockets of any kind, no name lookup. Beyond
//! WASI, the contract's `host` imports: the log, and the attempt's
//! resources as the host assigned them ([`Grant`]).
//!
//! A call is armed with its deadline, run under a backstop timer, and its
//! failure classified: the clock expired → deadline; the limiter refused a
//! growth → memory limit; otherwise a trap. The backstop catches a guest
//! blocked inside a host call (a WASI sleep, say), where epoch interruption
//! cannot reach it: the call's future is dropped and the instance is dead.

use super::bindings::{self, metadata, wit, AdapterCore, AdapterPre, LogLevel, WitAssignment};
use super::engine::{Shared, Slot};
use super::error::{AdapterFault, Call};
use super::guest_log::{self, Console, GuestOutput, LogBudget, Stream, Tags};
use super::limits::{CallClock, MemoryGuard, Tick};
use super::RuntimeConfig;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::time::timeout;
use wasmtime::component::{Instance, ResourceTable};
use wasmtime::{Engine, Store, Trap, UpdateDeadline};
use wasmtime_wasi::{FsPerms, I32Exit, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

/// How much longer than its deadline a call may take before the backstop
/// drops it: a few epoch ticks, so the epoch normally wins.
const BACKSTOP_GRACE: Duration = Duration::from_millis(100);

/// The data of one instance's store.
pub struct AttemptState {
    wasi: WasiCtx,
    table: ResourceTable,
    memory: MemoryGuard,
    clock: CallClock,
    output: Arc<Mutex<GuestOutput>>,
    /// What `host.assigned-resources` answers: fixed when the attempt's
    /// instance is made, empty for the instance that describes an adapter.
    assignment: WitAssignment,
}

impl WasiView for AttemptState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl bindings::trainyard::adapter::host::Host for AttemptState {
    fn log(&mut self, level: LogLevel, message: String) {
        guest_log::lock(&self.output).log(level, &message);
    }

    fn assigned_resources(&mut self) -> WitAssignment {
        self.assignment.clone()
    }
}

impl bindings::trainyard::adapter::types::Host for AttemptState {}

/// What an instance is given beyond WASI's clocks and its log: the
/// attempt's workspace (none while describing) and its resources.
pub struct Grant<'a> {
    pub workspace: Option<&'a Path>,
    pub assignment: WitAssignment,
}

impl Grant<'_> {
    /// Nothing at all: the instance that describes an adapter.
    pub fn none() -> Self {
        Grant {
            workspace: None,
            assignment: super::types::wit_assignment(&Default::default()),
        }
    }
}

/// The limits and names a fault message needs.
#[derive(Clone, Debug)]
pub struct Scope {
    pub adapter: Arc<str>,
    pub timeout: Duration,
    pub memory_limit: u64,
}

/// A live instance and its store. After a fault it refuses every call with
/// that fault: its store may be half-way through anything.
pub struct Sandbox {
    store: Store<AttemptState>,
    instance: Instance,
    exports: AdapterCore,
    scope: Scope,
    fault: Option<AdapterFault>,
    /// Held for as long as the instance lives.
    _slot: Slot,
}

/// What an adapter declares through its `metadata` export.
#[derive(Debug, Default)]
pub struct Declared {
    /// Params schemas by task kind, for the kinds that have one.
    pub schemas: std::collections::BTreeMap<String, String>,
    pub metrics: Vec<String>,
}

/// How a guarded future ended: its own result, or `None` when the backstop
/// dropped it.
type Outcome<T> = Option<wasmtime::Result<T>>;

impl Sandbox {
    /// A fresh store, then instantiation (which may run guest start code, so
    /// it is guarded like a call).
    pub async fn instantiate(
        shared: &Shared,
        pre: &AdapterPre<AttemptState>,
        tags: Tags,
        grant: Grant<'_>,
    ) -> Result<Sandbox, AdapterFault> {
        let config = &shared.config;
        let scope = Scope {
            adapter: tags.adapter.clone(),
            timeout: config.call_timeout,
            memory_limit: config.memory_limit,
        };
        let instantiation = |message| AdapterFault::Instantiation {
            adapter: scope.adapter.to_string(),
            message,
        };
        // Waiting for an instance is not the adapter's time: it gets its
        // full deadline once it has one.
        let slot = shared
            .slots
            .take(config.call_timeout)
            .await
            .ok_or_else(|| AdapterFault::NoInstance {
                adapter: scope.adapter.to_string(),
                capacity: shared.slots.capacity(),
                waited: config.call_timeout,
            })?;
        let mut store = new_store(&shared.engine, config, tags, grant).map_err(instantiation)?;
        arm(&mut store, &scope);
        let instantiation = async {
            let instance = pre.instance_pre.instantiate_async(&mut store).await?;
            let exports = pre.core.load(&mut store, &instance)?;
            Ok((instance, exports))
        };
        let outcome = timeout(backstop(&scope), instantiation).await.ok();
        let (instance, exports) = settle(&mut store, &scope, Call::Instantiate, outcome)?;
        Ok(Sandbox {
            store,
            instance,
            exports,
            scope,
            fault: None,
            _slot: slot,
        })
    }

    pub async fn describe(&mut self) -> Result<wit::AdapterInfo, AdapterFault> {
        self.ready()?;
        arm(&mut self.store, &self.scope);
        let exports = self.exports.trainyard_adapter_adapter();
        let outcome = timeout(
            backstop(&self.scope),
            exports.call_describe(&mut self.store),
        )
        .await
        .ok();
        self.settle(Call::Describe, outcome)
    }

    /// The `metadata` export's answers: the params schema of each of
    /// `kinds` that has one, and the result metrics. Each call runs under
    /// its own deadline, like `describe`.
    pub async fn declared(
        &mut self,
        indices: &metadata::AdapterMetadataIndices,
        kinds: &[String],
    ) -> Result<Declared, AdapterFault> {
        self.ready()?;
        let loaded = indices.load(&mut self.store, &self.instance);
        let meta = match loaded {
            Ok(meta) => meta,
            Err(e) => {
                return Err(self.poison(AdapterFault::Instantiation {
                    adapter: self.scope.adapter.to_string(),
                    message: format!("its metadata export: {e:#}"),
                }))
            }
        };
        let exports = meta.trainyard_adapter_metadata();
        let mut schemas = std::collections::BTreeMap::new();
        for kind in kinds {
            arm(&mut self.store, &self.scope);
            let outcome = timeout(
                backstop(&self.scope),
                exports.call_params_schema(&mut self.store, kind),
            )
            .await
            .ok();
            if let Some(schema) = self.settle(Call::Describe, outcome)? {
                schemas.insert(kind.clone(), schema);
            }
        }
        arm(&mut self.store, &self.scope);
        let outcome = timeout(
            backstop(&self.scope),
            exports.call_result_metrics(&mut self.store),
        )
        .await
        .ok();
        let metrics = self.settle(Call::Describe, outcome)?;
        Ok(Declared { schemas, metrics })
    }

    pub async fn prepare(
        &mut self,
        task: &wit::Task,
    ) -> Result<Result<wit::LaunchPlan, wit::TaskError>, AdapterFault> {
        self.ready()?;
        arm(&mut self.store, &self.scope);
        let exports = self.exports.trainyard_adapter_adapter();
        let outcome = timeout(
            backstop(&self.scope),
            exports.call_prepare(&mut self.store, task),
        )
        .await
        .ok();
        self.settle(Call::Prepare, outcome)
    }

    pub async fn on_output(&mut self, line: &str) -> Result<Option<wit::Progress>, AdapterFault> {
        self.ready()?;
        arm(&mut self.store, &self.scope);
        let exports = self.exports.trainyard_adapter_adapter();
        let outcome = timeout(
            backstop(&self.scope),
            exports.call_on_output(&mut self.store, line),
        )
        .await
        .ok();
        self.settle(Call::OnOutput, outcome)
    }

    pub async fn finish(
        &mut self,
        exit: &wit::ExitReport,
    ) -> Result<Result<wit::TaskResult, wit::TaskError>, AdapterFault> {
        self.ready()?;
        arm(&mut self.store, &self.scope);
        let exports = self.exports.trainyard_adapter_adapter();
        let outcome = timeout(
            backstop(&self.scope),
            exports.call_finish(&mut self.store, exit),
        )
        .await
        .ok();
        self.settle(Call::Finish, outcome)
    }

    /// Marks the instance dead after the host refused what a call returned.
    pub fn poison(&mut self, fault: AdapterFault) -> AdapterFault {
        self.fault = Some(fault.clone());
        fault
    }

    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    fn ready(&self) -> Result<(), AdapterFault> {
        match &self.fault {
            Some(fault) => Err(fault.clone()),
            None => Ok(()),
        }
    }

    fn settle<T>(&mut self, call: Call, outcome: Outcome<T>) -> Result<T, AdapterFault> {
        settle(&mut self.store, &self.scope, call, outcome).map_err(|fault| self.poison(fault))
    }
}

fn new_store(
    engine: &Engine,
    config: &RuntimeConfig,
    tags: Tags,
    grant: Grant<'_>,
) -> Result<Store<AttemptState>, String> {
    let output = Arc::new(Mutex::new(GuestOutput::new(
        tags,
        LogBudget::new(config.log_records, config.log_bytes),
    )));
    let mut wasi = WasiCtxBuilder::new();
    wasi.stdout(Console {
        output: output.clone(),
        stream: Stream::Stdout,
    })
    .stderr(Console {
        output: output.clone(),
        stream: Stream::Stderr,
    })
    .allow_tcp(false)
    .allow_udp(false)
    .allow_ip_name_lookup(false);
    if let Some(dir) = grant.workspace {
        wasi.preopened_dir(dir, super::types::GUEST_WORKSPACE, FsPerms::ReadWrite)
            .map_err(|e| format!("cannot open the workspace {}: {e:#}", dir.display()))?;
    }
    // `check_config` made sure the limit fits a usize.
    let limit = usize::try_from(config.memory_limit).unwrap_or(usize::MAX);
    let state = AttemptState {
        wasi: wasi.build(),
        table: ResourceTable::new(),
        memory: MemoryGuard::new(limit),
        clock: CallClock::default(),
        output,
        assignment: grant.assignment,
    };
    let mut store = Store::new(engine, state);
    store.limiter(|state| &mut state.memory);
    store.epoch_deadline_callback(|mut context| {
        match context.data_mut().clock.on_tick(Instant::now()) {
            Tick::Yield => Ok(UpdateDeadline::Yield(1)),
            Tick::Expire => Ok(UpdateDeadline::Interrupt),
        }
    });
    Ok(store)
}

/// Starts a call: its deadline, a clean slate for the memory limiter's
/// record and for the stderr tail, and an epoch deadline one tick away so
/// the callback sees the call at the next tick.
fn arm(store: &mut Store<AttemptState>, scope: &Scope) {
    let state = store.data_mut();
    state.clock.arm(Instant::now(), scope.timeout);
    state.memory.clear();
    guest_log::lock(&state.output).begin_call();
    store.set_epoch_deadline(1);
}

fn backstop(scope: &Scope) -> Duration {
    scope.timeout + BACKSTOP_GRACE
}

/// Ends a call: disarms the clock and turns a failure into the fault it
/// stands for.
fn settle<T>(
    store: &mut Store<AttemptState>,
    scope: &Scope,
    call: Call,
    outcome: Outcome<T>,
) -> Result<T, AdapterFault> {
    let state = store.data_mut();
    state.clock.disarm();
    let error = match outcome {
        Some(Ok(value)) => return Ok(value),
        Some(Err(error)) => Some(error),
        None => None,
    };
    let observed = Observed {
        deadline_passed: error.is_none() || state.clock.expired(),
        memory_refused: state.memory.refused(),
        stderr_tail: guest_log::lock(&state.output).stderr_tail(),
    };
    if let Some(error) = &error {
        tracing::debug!(adapter = %scope.adapter, %call, error = format!("{error:?}"), "adapter call failed");
    }
    Err(classify(scope, call, error.as_ref(), &observed))
}

/// What the store saw of a failed call.
#[derive(Debug, Default)]
struct Observed {
    deadline_passed: bool,
    memory_refused: bool,
    stderr_tail: String,
}

/// The fault a failed call stands for. A passed deadline wins over a
/// refused growth (a guest may loop after surviving one), and both win over
/// the trap they caused.
fn classify(
    scope: &Scope,
    call: Call,
    error: Option<&wasmtime::Error>,
    observed: &Observed,
) -> AdapterFault {
    let adapter = scope.adapter.to_string();
    if observed.deadline_passed {
        return AdapterFault::Deadline {
            adapter,
            call,
            timeout: scope.timeout,
        };
    }
    if observed.memory_refused {
        return AdapterFault::MemoryLimit {
            adapter,
            call,
            limit: scope.memory_limit,
        };
    }
    let Some(error) = error else {
        return AdapterFault::Deadline {
            adapter,
            call,
            timeout: scope.timeout,
        };
    };
    let trap = error.downcast_ref::<Trap>();
    let message = if let Some(exit) = error.downcast_ref::<I32Exit>() {
        format!("it called exit({})", exit.0)
    } else if let Some(trap) = trap {
        trap.to_string()
    } else {
        error.root_cause().to_string()
    };
    if call == Call::Instantiate && trap.is_none() {
        return AdapterFault::Instantiation { adapter, message };
    }
    let message = if observed.stderr_tail.is_empty() {
        message
    } else {
        format!("{message}; its stderr ended with: {}", observed.stderr_tail)
    };
    AdapterFault::Trap {
        adapter,
        call,
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope() -> Scope {
        Scope {
            adapter: "hostile".into(),
            timeout: Duration::from_millis(500),
            memory_limit: 16 << 20,
        }
    }

    fn trap() -> wasmtime::Error {
        wasmtime::Error::new(Trap::UnreachableCodeReached)
    }

    #[test]
    fn a_passed_deadline_wins_over_the_trap_it_caused() {
        let observed = Observed {
            deadline_passed: true,
            memory_refused: true,
            ..Observed::default()
        };
        let fault = classify(&scope(), Call::Prepare, Some(&trap()), &observed);
        assert!(matches!(fault, AdapterFault::Deadline { .. }), "{fault:?}");
    }

    #[test]
    fn a_refused_growth_turns_the_following_trap_into_the_memory_limit() {
        let observed = Observed {
            memory_refused: true,
            ..Observed::default()
        };
        let fault = classify(&scope(), Call::Finish, Some(&trap()), &observed);
        assert_eq!(
            fault.to_string(),
            r#"adapter "hostile" exceeded its memory limit of 16 MiB in finish"#
        );
    }

    #[test]
    fn a_plain_trap_carries_the_guests_last_words() {
        let observed = Observed {
            stderr_tail: "panicked at src/lib.rs:1: boom".into(),
            ..Observed::default()
        };
        let fault = classify(&scope(), Call::OnOutput, Some(&trap()), &observed);
        let message = fault.to_string();
        assert!(
            message.starts_with(r#"adapter "hostile" trapped in on-output: "#),
            "{message}"
        );
        assert!(
            message.ends_with("its stderr ended with: panicked at src/lib.rs:1: boom"),
            "{message}"
        );
    }

    #[test]
    fn a_failed_instantiation_that_is_not_a_trap_says_so() {
        let error = wasmtime::Error::msg("no slot left");
        let fault = classify(
            &scope(),
            Call::Instantiate,
            Some(&error),
            &Observed::default(),
        );
        assert_eq!(
            fault,
            AdapterFault::Instantiation {
                adapter: "hostile".into(),
                message: "no slot left".into()
            }
        );
    }
}
