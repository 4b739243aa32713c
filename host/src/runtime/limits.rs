//! The two limits every instance runs under: a deadline per call and a
//! memory limit, each remembering that it struck so a fault can say which
//! limit the adapter hit instead of reporting an anonymous trap.
//!
//! Deadlines use epoch interruption: the engine's epoch advances every
//! [`EPOCH_TICK`](super::engine::EPOCH_TICK), and at each tick a running
//! guest calls back into [`CallClock::on_tick`], which either yields to the
//! async executor (so a busy guest never holds a tokio worker for more than
//! a tick) or ends the call once its deadline has passed.

use std::time::{Duration, Instant};

/// The deadline of the call in progress, if any.
#[derive(Debug, Default)]
pub struct CallClock {
    deadline: Option<Instant>,
    /// Set when a tick found the deadline passed and ended the call.
    expired: bool,
}

/// What to do when the epoch ticks while the guest runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tick {
    /// Time remains: yield to the executor, check again next tick.
    Yield,
    /// The deadline has passed (or no call is armed): end the call.
    Expire,
}

impl CallClock {
    /// Starts the clock for a call that may run for `timeout` from `now`.
    pub fn arm(&mut self, now: Instant, timeout: Duration) {
        self.deadline = Some(now + timeout);
        self.expired = false;
    }

    pub fn disarm(&mut self) {
        self.deadline = None;
    }

    /// Decides, at a tick, whether the guest may go on. Guest code never
    /// runs outside an armed call, so an unarmed clock expires at once.
    pub fn on_tick(&mut self, now: Instant) -> Tick {
        match self.deadline {
            Some(deadline) if now < deadline => Tick::Yield,
            _ => {
                self.expired = true;
                Tick::Expire
            }
        }
    }

    pub fn expired(&self) -> bool {
        self.expired
    }
}

/// A `ResourceLimiter` holding all of an instance's linear memories to one
/// budget, and remembering whether it refused a growth.
///
/// A refused growth makes `memory.grow` return -1, as the WebAssembly spec
/// requires; a guest that handles that goes on, and one that aborts (as Rust
/// does on allocation failure) traps, which the runtime then reports as the
/// memory limit.
#[derive(Debug)]
pub struct MemoryGuard {
    limit: usize,
    /// Bytes granted to all memories together.
    granted: usize,
    /// The last growth granted, taken back if the memory then failed to grow.
    last_growth: usize,
    refused: bool,
}

/// Elements a table may hold; matches the pooling allocator's default slot.
const TABLE_ELEMENTS: usize = 20_000;

impl MemoryGuard {
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            granted: 0,
            last_growth: 0,
            refused: false,
        }
    }

    /// Whether a growth was refused since the last [`MemoryGuard::clear`].
    pub fn refused(&self) -> bool {
        self.refused
    }

    /// Forgets refusals before a new call; a guest that survived one is
    /// not blamed for it in a later call that fails for another reason.
    pub fn clear(&mut self) {
        self.refused = false;
    }

    /// The decision for one memory growing from `current` to `desired`
    /// bytes, as a plain function of the budget.
    fn grant(&mut self, current: usize, desired: usize) -> bool {
        let growth = desired.saturating_sub(current);
        match self.granted.checked_add(growth) {
            Some(total) if total <= self.limit => {
                self.granted = total;
                self.last_growth = growth;
                true
            }
            _ => {
                self.refused = true;
                false
            }
        }
    }
}

impl wasmtime::ResourceLimiter for MemoryGuard {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(self.grant(current, desired))
    }

    fn memory_grow_failed(&mut self, _error: wasmtime::Error) -> wasmtime::Result<()> {
        self.granted = self.granted.saturating_sub(self.last_growth);
        self.last_growth = 0;
        Ok(())
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= TABLE_ELEMENTS)
    }

    fn instances(&self) -> usize {
        64
    }

    fn tables(&self) -> usize {
        64
    }

    fn memories(&self) -> usize {
        16
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtime::ResourceLimiter;

    #[test]
    fn the_clock_yields_until_the_deadline_then_expires() {
        let start = Instant::now();
        let mut clock = CallClock::default();
        clock.arm(start, Duration::from_millis(500));
        assert_eq!(
            clock.on_tick(start + Duration::from_millis(499)),
            Tick::Yield
        );
        assert!(!clock.expired());
        assert_eq!(
            clock.on_tick(start + Duration::from_millis(500)),
            Tick::Expire
        );
        assert!(clock.expired());
        clock.arm(start, Duration::from_secs(1));
        assert!(!clock.expired(), "arming a new call forgets the old expiry");
        clock.disarm();
        assert_eq!(clock.on_tick(start), Tick::Expire);
    }

    #[test]
    fn all_memories_share_one_budget_and_refusals_are_remembered() {
        let mut guard = MemoryGuard::new(1 << 20);
        assert!(guard.memory_growing(0, 512 << 10, None).unwrap());
        assert!(
            guard.memory_growing(0, 512 << 10, None).unwrap(),
            "a second memory fits the rest"
        );
        assert!(!guard.refused());
        assert!(!guard.memory_growing(512 << 10, 576 << 10, None).unwrap());
        assert!(guard.refused());
        guard.clear();
        assert!(!guard.refused());
    }

    #[test]
    fn a_failed_growth_gives_its_bytes_back() {
        let mut guard = MemoryGuard::new(1 << 20);
        assert!(guard.memory_growing(0, 1 << 20, None).unwrap());
        guard
            .memory_grow_failed(wasmtime::Error::msg("no"))
            .unwrap();
        assert!(guard.memory_growing(0, 1 << 20, None).unwrap());
    }
}
