//! The multi-process tests, in one test binary: each file beside this one is
//! a module (`cargo nextest run --test integration recovery::` runs one of
//! them). One binary compiles and links the shared harness, and what it
//! instantiates of the crates below, once instead of once per file.

#[macro_use]
mod common;

mod adapter_check;
mod adapter_new;
mod adapter_run;
mod artifacts;
mod cartpole;
mod chaos;
mod cli;
mod configuration;
mod containment;
mod dashboard;
mod demo;
mod deploy_guide;
mod docs;
mod end_to_end;
mod fleet;
mod ha;
mod hostile;
mod hot_reload;
mod identity;
mod logs;
mod metrics;
mod operability;
mod output_stored;
mod placement;
mod progress_history;
mod python_adapter;
mod python_envs;
mod reconnect;
mod recovery;
mod stalled;
mod sweeps;
mod teams;
mod tls;
