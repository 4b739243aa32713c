//! The artifact store of a trainyard cluster: where the checkpoints and
//! outputs that attempts leave are kept, so a later attempt on any host can
//! resume from them and a user can download them.
//!
//! One [`ArtifactStore`] interface over the backends, built on the
//! `object_store` crate (a local directory, or an S3-compatible bucket):
//! an object is written under a temporary name and
//! becomes visible at its key only once complete, with its size and
//! SHA-256 computed on the way, so whoever records it in the task database
//! afterwards records bytes that can be read back whole.
//!
//! # Layout
//! - [`spec`]: `artifacts.store` as configured (`embedded`, `file:///…`,
//!   `s3://bucket/prefix`).
//! - [`s3`]: where an S3 bucket is, and the credentials that sign requests
//!   to it (read by each host and the master, never sent anywhere).
//! - [`name`]: artifact kinds, the names trainers give their files, and the
//!   keys objects are stored under.
//! - [`store`]: the store itself: streaming writes with a size limit,
//!   ranged reads, deletion.

pub mod name;
pub mod s3;
pub mod spec;
pub mod store;

pub use name::{check_name, object_key, ArtifactKind, NameError};
pub use s3::{S3Credentials, S3Location};
pub use spec::{SpecError, StoreSpec};
pub use store::{unreachable, ArtifactStore, Digest, PutError, Written};

/// The default of `artifacts.max_object_bytes`: the largest object the
/// store takes, 16 GiB.
pub const DEFAULT_MAX_OBJECT_BYTES: u64 = 16 << 30;

/// The directory under which a file is an output of its attempt.
pub const OUTPUTS_DIR: &str = "outputs";
