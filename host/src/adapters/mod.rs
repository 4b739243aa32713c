//! The adapters this host carries and what they may do: which are loaded,
//! by name and version ([`carried`]); reloading them while the host runs
//! ([`reload`]); whether the trainer's user can run the programs an adapter
//! may launch ([`runnable`]); and an adapter's launch plan checked against
//! the operator's policy before the host acts on it ([`plan`]). The
//! WebAssembly embedding that loads and calls them is [`crate::runtime`].

pub mod carried;
pub mod plan;
pub mod reload;
pub mod runnable;
