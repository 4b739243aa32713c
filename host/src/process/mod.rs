//! Trainer processes: each trainer runs under its own `trainyard-supervise`
//! process, which kills the trainer's process group by itself when the lease
//! deadline the host last gave it passes — so two attempts of one task never
//! run at once, even while the host is frozen.
//!
//! # Layout
//! - [`Deadline`]: absolute instants on CLOCK_BOOTTIME, shared with the
//!   supervisors.
//! - [`Trainer`] (in `trainer`): the host's handle — spawn, move the
//!   deadline, stop, kill, wait — with the output readers (`pump`, `lines`,
//!   `tail`) and the control socket (`link`).
//! - [`wire`]: the messages on the control socket and their encoding.
//! - [`sandbox`]: a sandbox prepared ahead of its attempt, and [`pool`],
//!   the host's prepared sandboxes (the warm path of a launch).
//! - [`supervisor`]: the supervisor program itself (`trainyard-supervise`).

mod deadline;
mod guard;
mod lines;
mod link;
pub mod pool;
mod pump;
pub mod sandbox;
pub mod supervisor;
mod tail;
mod trainer;
pub mod wire;

pub use deadline::Deadline;
pub use pool::{LaunchPath, SandboxPool};
pub use sandbox::PreparedSandbox;
pub use trainer::{ExitKind, LaunchSpec, SpawnError, Trainer, TrainerControl, TrainerExit};
