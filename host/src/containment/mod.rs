//! Containment of trainers: the program an adapter launches runs with no
//! more than its task needs, whatever the adapter's author wrote.
//!
//! Eight layers, each on by default and each turned off only by the
//! operator (`host.containment.<layer> = "off"`); a host that cannot enforce
//! a layer that is on refuses to start, naming what is missing and that key:
//! - **cgroup** ([`cgroup`]): a cgroup per attempt (v2, or v1's memory, cpu,
//!   pids and freezer hierarchies) with its memory, CPU and process limits;
//!   when the attempt ends every process in it is killed, whatever it did
//!   with sessions or process groups, before the result is read.
//! - **landlock** ([`filesystem`]): read-write in the workspace, read-only in
//!   the system's and the allowed paths, nothing else; `no_new_privs`.
//! - **network** ([`network`]): a network namespace with only loopback,
//!   unless the adapter's entry says `network = "host"`.
//! - **mount** ([`view`]): a mount namespace whose filesystem holds only
//!   what the trainer may use — no `/run`, no socket not granted by path.
//! - **pid**: a PID namespace with its own `/proc`; the trainer sees only
//!   its own processes (the supervisor's `init` is its first process).
//! - **disk** ([`quota`]): the workspace on a tmpfs whose size is the
//!   quota, so a write past it fails with `ENOSPC` at once.
//! - **seccomp** ([`seccomp`]): a system-call filter in the spirit of
//!   Docker's default profile, with per-adapter opt-outs.
//! - **user**: a host running as root starts trainers as an unprivileged
//!   user (`nobody` by default).
//!
//! Besides: open files and file size are capped with rlimits.
//!
//! [`plan`] decides, as plain data, what confines one attempt; [`probe`]
//! finds out at start-up what this machine can enforce; the supervisor
//! (`crate::process::supervisor`) carries it out. [`sandbox`] splits a
//! confinement into what a sandbox prepared ahead of its attempt holds and
//! what the attempt brings to it (`crate::process::pool`).

pub mod cgroup;
mod config;
pub mod filesystem;
pub mod network;
pub mod plan;
pub mod probe;
pub mod quota;
pub mod sandbox;
pub mod seccomp;
pub mod view;

pub use config::{AdapterContainment, ContainmentSettings, Limits, NetworkMode, Switch, USER_OFF};
pub use plan::{Confinement, Credentials, FsRules};
pub use probe::{ContainmentError, Enforcement};
