//! What can go wrong with adapters, in words an operator understands.
//!
//! [`AdapterFault`]: an adapter misbehaved in a call (ran past its deadline,
//! hit its memory limit, trapped, returned something out of bounds); it
//! fails the attempt, never the host. [`LoadError`]: a file could not become
//! an adapter. [`RuntimeError`]: the runtime itself could not start.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// One of the calls the host makes into an adapter, named as in the WIT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    Instantiate,
    Describe,
    Prepare,
    OnOutput,
    Finish,
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Call::Instantiate => "instantiation",
            Call::Describe => "describe",
            Call::Prepare => "prepare",
            Call::OnOutput => "on-output",
            Call::Finish => "finish",
        })
    }
}

/// An adapter misbehaved. Every message names the adapter and the call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdapterFault {
    #[error("adapter {adapter:?} exceeded its {} deadline in {call}", Millis(*timeout))]
    Deadline {
        adapter: String,
        call: Call,
        timeout: Duration,
    },
    #[error("adapter {adapter:?} exceeded its memory limit of {} in {call}", Bytes(*limit))]
    MemoryLimit {
        adapter: String,
        call: Call,
        limit: u64,
    },
    #[error("adapter {adapter:?} trapped in {call}: {message}")]
    Trap {
        adapter: String,
        call: Call,
        message: String,
    },
    /// A value over one of the bounds written in `wit/adapter.wit`.
    #[error("adapter {adapter:?} returned an oversized result: {what} in {call}")]
    Oversized {
        adapter: String,
        call: Call,
        what: String,
    },
    /// A value the contract forbids, such as a checkpoint path leaving the
    /// workspace.
    #[error("adapter {adapter:?} returned an invalid result from {call}: {what}")]
    Invalid {
        adapter: String,
        call: Call,
        what: String,
    },
    #[error("adapter {adapter:?} could not be instantiated: {message}")]
    Instantiation { adapter: String, message: String },
    /// Every instance the host allows stayed in use while this attempt
    /// waited: the host is busy, the task is not at fault.
    #[error(
        "adapter {adapter:?} could not be instantiated: all {capacity} adapter instances this \
         host allows (host.adapter_instances) stayed in use for {}; the task will be retried",
        Millis(*waited)
    )]
    NoInstance {
        adapter: String,
        capacity: u32,
        waited: Duration,
    },
}

impl AdapterFault {
    /// The call the fault happened in.
    pub fn call(&self) -> Call {
        match self {
            AdapterFault::Deadline { call, .. }
            | AdapterFault::MemoryLimit { call, .. }
            | AdapterFault::Trap { call, .. }
            | AdapterFault::Oversized { call, .. }
            | AdapterFault::Invalid { call, .. } => *call,
            AdapterFault::Instantiation { .. } | AdapterFault::NoInstance { .. } => {
                Call::Instantiate
            }
        }
    }

    /// Whether another attempt may succeed: only when the host, not the
    /// adapter, was short of something.
    pub fn retryable(&self) -> bool {
        matches!(self, AdapterFault::NoInstance { .. })
    }
}

/// A file that could not be loaded as an adapter.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read adapter {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("adapter {} is not a WebAssembly file", path.display())]
    NotWasm { path: PathBuf },
    #[error(
        "adapter {} is a core WebAssembly module, not a component: build it for \
         wasm32-wasip2 (or wrap it with `wasm-tools component new`)",
        path.display()
    )]
    NotComponent { path: PathBuf },
    #[error("adapter {} is not a valid WebAssembly component: {message}", path.display())]
    Corrupt { path: PathBuf, message: String },
    #[error(
        "adapter {} targets {found}; this host supports {}",
        path.display(),
        super::contract::SUPPORTED
    )]
    WrongVersion { path: PathBuf, found: String },
    #[error(
        "adapter {} does not export trainyard:adapter/adapter, so it is not a \
         trainyard task adapter (it exports: {exports})",
        path.display()
    )]
    NotAnAdapter { path: PathBuf, exports: String },
    #[error("adapter {} needs something this host does not provide: {message}", path.display())]
    Unsupported { path: PathBuf, message: String },
    /// It exports the adapter interface, but not with the contract's types.
    #[error(
        "adapter {} does not implement {} as this host expects: {message}",
        path.display(),
        super::contract::SUPPORTED
    )]
    Mismatch { path: PathBuf, message: String },
    #[error("cannot load adapter {}: {fault}", path.display())]
    Describe {
        path: PathBuf,
        #[source]
        fault: AdapterFault,
    },
    #[error("adapter {} describes itself wrongly: {problem}", path.display())]
    InvalidInfo { path: PathBuf, problem: String },
}

/// The runtime could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("invalid adapter runtime settings: {0}")]
    Config(String),
    #[error("cannot set up the WebAssembly engine: {0}")]
    Engine(String),
    #[error("cannot register the host's functions for adapters: {0}")]
    Linker(String),
    #[error("cannot start the adapter epoch ticker thread: {0}")]
    Ticker(#[source] std::io::Error),
}

/// A duration as an operator writes it: `500 ms`, `5 s`.
pub struct Millis(pub Duration);

impl fmt::Display for Millis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.as_secs() > 0 && self.0.subsec_nanos() == 0 {
            write!(f, "{} s", self.0.as_secs())
        } else {
            write!(f, "{} ms", self.0.as_millis())
        }
    }
}

/// A size as an operator writes it: `64 MiB`, `512 KiB`, `100 bytes`.
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const KIB: u64 = 1 << 10;
        const MIB: u64 = 1 << 20;
        const GIB: u64 = 1 << 30;
        match self.0 {
            n if n >= GIB && n % GIB == 0 => write!(f, "{} GiB", n / GIB),
            n if n >= MIB && n % MIB == 0 => write!(f, "{} MiB", n / MIB),
            n if n >= KIB && n % KIB == 0 => write!(f, "{} KiB", n / KIB),
            n if n >= MIB => write!(f, "{:.1} MiB", n as f64 / MIB as f64),
            n => write!(f, "{n} bytes"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_messages_name_the_adapter_the_call_and_the_limit() {
        let deadline = AdapterFault::Deadline {
            adapter: "hostile".into(),
            call: Call::Prepare,
            timeout: Duration::from_millis(500),
        };
        assert_eq!(
            deadline.to_string(),
            r#"adapter "hostile" exceeded its 500 ms deadline in prepare"#
        );
        let memory = AdapterFault::MemoryLimit {
            adapter: "hostile".into(),
            call: Call::OnOutput,
            limit: 64 << 20,
        };
        assert_eq!(
            memory.to_string(),
            r#"adapter "hostile" exceeded its memory limit of 64 MiB in on-output"#
        );
    }

    #[test]
    fn sizes_and_durations_read_naturally() {
        assert_eq!(Millis(Duration::from_secs(5)).to_string(), "5 s");
        assert_eq!(Millis(Duration::from_millis(1500)).to_string(), "1500 ms");
        assert_eq!(Bytes(16 << 20).to_string(), "16 MiB");
        assert_eq!(Bytes(4096).to_string(), "4 KiB");
        assert_eq!(Bytes(20 * (1 << 20) + 5).to_string(), "20.0 MiB");
        assert_eq!(Bytes(100).to_string(), "100 bytes");
    }
}
