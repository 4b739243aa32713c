//! The artifact store of a trainyard cluster: where the checkpoints and
//! outputs that attempts leave are kept, so a later attempt on any host can
//! resume from them and a user can download them.
//!
//! One [`ArtifactStore`] interface over the backends, built on the
//! `object_store` crate (local files now; S3 and other object stores speak
//! the same interface): an object is written under a temporary name and
//! becomes visible at its key only once complete, with its size and
//! SHA-256 computed on the way, so whoever records it in the task database
//! afterwards records bytes that can be read back whole.
//!
//! # Layout
//! - [`spec`]: `artifacts.store` as configured (`embedded`, `file:///…`).
//! - [`name`]: artifact kinds, the names trainers give their files, and the
//!   keys objects are stored under.
//! - [`store`]: the store itself: streaming writes with a size limit,
//!   ranged reads, deletion.

pub mod name;
pub mod spec;
pub mod store;

pub use name::{check_name, object_key, ArtifactKind, NameError};
pub use spec::{SpecError, StoreSpec};
pub use store::{ArtifactStore, Digest, PutError, Written};

/// The default of `artifacts.max_object_bytes`: the largest object the
/// store takes, 16 GiB.
pub const DEFAULT_MAX_OBJECT_BYTES: u64 = 16 << 30;

/// The directory under which a file is an output of its attempt.
pub const OUTPUTS_DIR: &str = "outputs";
