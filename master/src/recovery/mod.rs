//! Recovery: what the master does when anything dies — a host, its
//! connection, Redis, or the master itself. Three parts here, and the
//! scheduler's step that runs them:
//! - [`decide`] (re-exported here): what to do with a live task, from plain
//!   data — the sweep's cases, an attempt's final report, whether an
//!   outcome uses an attempt. No I/O.
//! - [`leases`]: the recovery sweep's Redis side — one snapshot of every
//!   live task's lease, the dataset's epoch and the reports waiting there,
//!   and the fence that makes giving up an attempt final.
//! - [`reconcile`]: start-up reconciliation, Redis side — every worker
//!   lease Redis holds, compared with the database.
//! - The sweep itself runs as a step of the scheduler's turn
//!   (`scheduler/recover.rs`): it reads the scheduler's own state, and the
//!   scheduler is its only writer.

mod decide;
pub mod leases;
pub mod reconcile;

pub use decide::*;
