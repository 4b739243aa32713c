//! The wasmtime engine and linker every adapter shares, and the epoch ticker
//! that gives calls their deadline.
//!
//! Instances come from the pooling allocator: slots for `max_instances`
//! instances are reserved once, and each attempt's memory is mapped
//! copy-on-write from the component's image, so instantiating costs
//! microseconds rather than a fresh `mmap` and data copy. If the system
//! refuses the reservation (a low `ulimit -v`, say), the host falls back to
//! allocating on demand and says so.

use super::bindings::AdapterCore;
use super::error::RuntimeError;
use super::sandbox::AttemptState;
use super::RuntimeConfig;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;
use wasmtime::component::{HasSelf, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

/// How often the engine's epoch advances: the granularity of deadlines and
/// how long a busy guest may hold a tokio worker before yielding.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// WebAssembly's page size; memory limits are whole pages.
const WASM_PAGE: u64 = 64 << 10;

/// Per-component shape the pool must fit. Components built by
/// `wasm32-wasip2` toolchains hold a handful of core instances (the program,
/// shims, fix-ups), one memory and a few tables. Adapters written in Python
/// (componentize-py) link CPython dynamically: 14 core instances for the
/// interpreter alone (libc, libpython, its runtime, WASI shims, fix-ups),
/// plus one per native extension module an adapter bundles; hence 32. A
/// slot of the pool's count costs no memory until an instance takes it.
const CORE_INSTANCES_PER_COMPONENT: u32 = 32;
const MEMORIES_PER_COMPONENT: u32 = 2;
const TABLES_PER_COMPONENT: u32 = 8;

/// What every instance of every adapter shares.
pub struct Shared {
    pub config: RuntimeConfig,
    pub engine: Engine,
    pub linker: Linker<AttemptState>,
    /// Whether instances come from the pool (false after a fallback).
    pub pooling: bool,
    /// Instances alive now, held to `max_instances` whichever allocator is
    /// in use; a new one waits for a free slot.
    pub slots: Arc<InstanceSlots>,
    /// Components this runtime has compiled or loaded, by the SHA-256 of
    /// their bytes: hosts sharing a runtime (light hosts in one process)
    /// load the same adapter once.
    pub compiled:
        std::sync::Mutex<std::collections::HashMap<[u8; 32], wasmtime::component::Component>>,
    _ticker: EpochTicker,
}

impl Shared {
    pub fn new(config: RuntimeConfig) -> Result<Self, RuntimeError> {
        check_config(&config)?;
        let (engine, pooling) = match Engine::new(&engine_config(&config, true)) {
            Ok(engine) => (engine, true),
            Err(e) => {
                tracing::warn!(
                    error = format!("{e:#}"),
                    max_instances = config.max_instances,
                    "cannot reserve the adapter instance pool; allocating instances on demand (slower)"
                );
                let engine = Engine::new(&engine_config(&config, false))
                    .map_err(|e| RuntimeError::Engine(format!("{e:#}")))?;
                (engine, false)
            }
        };
        let linker = linker(&engine)?;
        let ticker = EpochTicker::start(engine.clone())?;
        Ok(Self {
            slots: Arc::new(InstanceSlots::new(config.max_instances)),
            config,
            engine,
            linker,
            pooling,
            compiled: Default::default(),
            _ticker: ticker,
        })
    }
}

fn check_config(config: &RuntimeConfig) -> Result<(), RuntimeError> {
    if config.memory_limit < WASM_PAGE {
        return Err(RuntimeError::Config(format!(
            "memory_limit of {} bytes is below one WebAssembly page (64 KiB)",
            config.memory_limit
        )));
    }
    if usize::try_from(config.memory_limit).is_err() {
        return Err(RuntimeError::Config(format!(
            "memory_limit of {} bytes does not fit this machine's address space",
            config.memory_limit
        )));
    }
    if config.call_timeout.is_zero() {
        return Err(RuntimeError::Config(
            "call_timeout must be above zero".into(),
        ));
    }
    if config.max_instances == 0 {
        return Err(RuntimeError::Config(
            "max_instances must be at least 1".into(),
        ));
    }
    Ok(())
}

/// The memory limit rounded up to whole WebAssembly pages.
pub fn memory_limit_pages_bytes(limit: u64) -> u64 {
    limit.div_ceil(WASM_PAGE) * WASM_PAGE
}

/// Bytes of an instance's linear memory reset in place when its slot is
/// reused; beyond it, pages go back to the kernel.
const KEEP_RESIDENT: usize = 1 << 20;
/// Slots whose memory is decommitted together.
const DECOMMIT_BATCH: usize = 16;

fn engine_config(config: &RuntimeConfig, pooling: bool) -> Config {
    let mut c = Config::new();
    c.epoch_interruption(true);
    c.memory_init_cow(true);
    if pooling {
        let instances = config.max_instances;
        let mut pool = PoolingAllocationConfig::new();
        pool.total_component_instances(instances)
            .total_core_instances(instances.saturating_mul(CORE_INSTANCES_PER_COMPONENT))
            .max_core_instances_per_component(CORE_INSTANCES_PER_COMPONENT)
            .total_memories(instances.saturating_mul(MEMORIES_PER_COMPONENT))
            .max_memories_per_component(MEMORIES_PER_COMPONENT)
            .total_tables(instances.saturating_mul(TABLES_PER_COMPONENT))
            .max_tables_per_component(TABLES_PER_COMPONENT)
            .max_tables_per_module(2)
            .total_stacks(instances)
            // The limiter refuses growth past the limit first (and records
            // it); the pool's own bound only has to be no lower.
            .max_memory_size(memory_limit_pages_bytes(config.memory_limit) as usize)
            // Reusing a slot: reset the pages an instance dirtied with
            // `memset` (found with PAGEMAP_SCAN where the kernel has it) up
            // to this much, instead of `madvise`, whose TLB shootdowns cost
            // every thread of the host an interrupt per finished attempt.
            .pagemap_scan(wasmtime::Enabled::Auto)
            .linear_memory_keep_resident(KEEP_RESIDENT)
            .table_keep_resident(KEEP_RESIDENT / 8)
            // What still needs `madvise` is decommitted in batches.
            .decommit_batch_size(DECOMMIT_BATCH);
        c.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    }
    c
}

/// WASI (deny-by-default contexts are built per attempt, in `sandbox`) and
/// the `host` interface of the contract.
fn linker(engine: &Engine) -> Result<Linker<AttemptState>, RuntimeError> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)
        .map_err(|e| RuntimeError::Linker(format!("{e:#}")))?;
    AdapterCore::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state)
        .map_err(|e| RuntimeError::Linker(format!("{e:#}")))?;
    Ok(linker)
}

/// The instances that may be alive at once. An attempt that finds them all
/// taken waits for one (they come back as attempts end) rather than fail.
#[derive(Debug)]
pub struct InstanceSlots {
    capacity: u32,
    free: Arc<tokio::sync::Semaphore>,
}

/// One taken slot, given back when dropped.
#[derive(Debug)]
pub struct Slot(#[allow(dead_code)] tokio::sync::OwnedSemaphorePermit);

impl InstanceSlots {
    pub fn new(capacity: u32) -> Self {
        Self {
            capacity,
            free: Arc::new(tokio::sync::Semaphore::new(capacity as usize)),
        }
    }

    /// A slot, waiting up to `patience` for one; `None` if none came back.
    pub async fn take(&self, patience: Duration) -> Option<Slot> {
        let waiting = self.free.clone().acquire_owned();
        match tokio::time::timeout(patience, waiting).await {
            Ok(Ok(permit)) => Some(Slot(permit)),
            _ => None,
        }
    }

    pub fn capacity(&self) -> u32 {
        self.capacity
    }
}

/// A thread advancing the engine's epoch every [`EPOCH_TICK`]; it stops
/// (and is joined) when dropped.
struct EpochTicker {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl EpochTicker {
    fn start(engine: Engine) -> Result<Self, RuntimeError> {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("adapter-epoch".into())
            .spawn(move || {
                // Disconnected (the sender dropped) ends the loop.
                while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(EPOCH_TICK) {
                    engine.increment_epoch();
                }
            })
            .map_err(RuntimeError::Ticker)?;
        Ok(Self {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn slots_run_out_at_capacity_and_come_back_when_dropped() {
        let slots = Arc::new(InstanceSlots::new(2));
        let patience = Duration::from_millis(50);
        let first = slots.take(patience).await.expect("first");
        let _second = slots.take(patience).await.expect("second");
        assert!(slots.take(patience).await.is_none());
        let waiting = tokio::spawn({
            let slots = slots.clone();
            async move { slots.take(Duration::from_secs(60)).await.is_some() }
        });
        drop(first);
        assert!(waiting.await.unwrap(), "a waiter gets the slot given back");
    }
}
