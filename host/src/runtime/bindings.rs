//! The one place the adapter contract (`wit/adapter.wit`, world
//! `task-adapter`) is turned into Rust. Everything else in the host imports
//! the generated types from here.
//!
//! Exports are async so calls into an adapter run on a fiber that yields to
//! tokio at every epoch tick (see [`super::limits`]); the `host.log` import
//! is synchronous because it never waits for anything.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "task-adapter",
    exports: { default: async },
});

pub use exports::trainyard::adapter::adapter::Guest as AdapterExports;
pub use trainyard::adapter::host::LogLevel;
pub use trainyard::adapter::types as wit;
