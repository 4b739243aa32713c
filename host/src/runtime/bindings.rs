//! The one place the adapter contract (`wit/adapter.wit`) is turned into
//! Rust. Everything else in the host imports the generated types from here.
//!
//! Two worlds of the contract are bound: `adapter-core`, which every
//! adapter since 0.1.0 implements and a host requires, and
//! `adapter-metadata`, the export added in 0.1.1, which a host looks for on
//! its own and treats as optional ([`AdapterPre`]).
//!
//! The `host` import is bound at the contract's newest version and serves
//! components of every earlier one: wasmtime links an import of
//! `host@0.1.0` or `host@0.1.1` to it (semver-compatible), and an older
//! component simply does not import `assigned-resources` (added in 0.1.2).
//!
//! Exports are async so calls into an adapter run on a fiber that yields to
//! tokio at every epoch tick (see [`super::limits`]); the `host` imports are
//! synchronous because they never wait for anything.

wasmtime::component::bindgen!({
    path: "../wit/adapter.wit",
    world: "adapter-core",
    exports: { default: async },
});

/// The optional `metadata` export (0.1.1).
pub mod metadata {
    wasmtime::component::bindgen!({
        path: "../wit/adapter.wit",
        world: "adapter-metadata",
        exports: { default: async },
    });
}

pub use exports::trainyard::adapter::adapter::Guest as AdapterExports;
pub use trainyard::adapter::host::{Assignment as WitAssignment, LogLevel};
pub use trainyard::adapter::types as wit;

use wasmtime::component::InstancePre;

/// A component linked once, with where its exports are: what every
/// instance of one adapter is made from.
pub struct AdapterPre<T: 'static> {
    pub instance_pre: InstancePre<T>,
    pub core: AdapterCoreIndices,
    /// `None` for an adapter built against 0.1.0 (or one that chose the
    /// `adapter-core` world).
    pub metadata: Option<metadata::AdapterMetadataIndices>,
}

impl<T: 'static> AdapterPre<T> {
    /// Finds the exports: the core ones are required, the metadata optional.
    pub fn new(instance_pre: InstancePre<T>) -> wasmtime::Result<Self> {
        let core = AdapterCoreIndices::new(&instance_pre)?;
        let metadata = metadata::AdapterMetadataIndices::new(&instance_pre).ok();
        Ok(AdapterPre {
            instance_pre,
            core,
            metadata,
        })
    }
}
