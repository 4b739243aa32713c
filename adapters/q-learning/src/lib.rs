//! The q-learning task kind: everything an adapter needs to run trainyard's
//! reference Python Q-learning trainer (`trainer/trainer.py`, embedded in
//! the component). Two adapters are built on it, each a thin `cdylib` crate
//! that implements the world's `Guest` trait with [`adapter`] and exports it
//! with [`bindings::export!`]:
//!
//! - `python-trainer`, the adapter operators ship: the trainer's own
//!   parameters, nothing else;
//! - `test-trainer`, for trainyard's own tests only and never in a shipped
//!   configuration: the same trainer behind a wrapper with test hooks (a
//!   trace file, simulated failures).
//!
//! The bindings are generated here, once, so that both adapters share the
//! types and the code that uses them.
//!
//! Layout:
//! - [`params`]: validation of a task's params, defaults filled in;
//! - [`plan`]: the launch plan (files, `python3` command, resume argument);
//! - [`output`]: the trainer's stdout protocol, line by line, into progress;
//! - [`outcome`]: the trainer's exit and `result.json` into a result or error;
//! - [`adapter`]: the world's calls, the per-attempt state and the log
//!   records an operator reads.

pub mod adapter;
pub mod outcome;
pub mod output;
pub mod params;
pub mod plan;

pub mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "task-adapter",
        additional_derives: [PartialEq],
        pub_export_macro: true,
        default_bindings_module: "q_learning::bindings",
    });
}
