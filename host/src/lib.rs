//! The trainyard worker host: it connects to the master, runs each task it
//! is given through a sandboxed WebAssembly task adapter, supervises the
//! trainer process the adapter asks for, and owns the task's lease in Redis.
//!
//! # Layout
//! - [`runtime`]: the wasmtime embedding that loads and calls adapters.
//! - [`plan`]: checks an adapter's launch plan against the operator's policy.
//! - [`process`]: launching and supervising trainer processes.

pub mod plan;
pub mod process;
pub mod runtime;
