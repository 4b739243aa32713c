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
//! The machinery around the trainer — the launch plan of an embedded
//! script, the stdout line protocol, checkpoints, the exit and `result.json`
//! turned into a result — is not the grid world's own: the `cartpole`
//! adapter runs its gymnasium trainer through the same modules, with a
//! [`plan::Trainer`] and an [`outcome::ResultShape`] of its own.
//!
//! The bindings are generated here, once, so that every adapter built on it
//! shares the types and the code that uses them.
//!
//! Layout:
//! - [`params`]: validation of a task's params, defaults filled in (and the
//!   typed field access other kinds validate with);
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
