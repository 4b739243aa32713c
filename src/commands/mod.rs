//! The operator commands that talk to the master's HTTP API: one module per
//! command, each with its clap `Args` and an async `run(&ApiClient, args)`;
//! and the adapter author's commands ([`adapter`]), which work locally.
//! Output is plain text that reads the same in a terminal and in a log;
//! `--json` where offered prints the master's data as JSON instead.
//!
//! `adapter` holds an adapter author's commands, which need no master.
//!
//! `table` and `format` shape the output, `follow` follows tasks on the
//! live event stream (for `watch` and `submit --wait`).

pub mod access;
pub mod adapter;
pub mod artifacts;
pub mod cancel;
pub mod config;
pub mod follow;
pub mod format;
pub mod health;
pub mod hosts;
pub mod logs;
pub mod progress;
pub mod submit;
pub mod sweep;
pub mod sweeps;
pub mod table;
pub mod task;
pub mod task_flags;
pub mod tasks;
pub mod watch;
