//! The `wrong-version` task adapter: a well-behaved adapter built against
//! `trainyard:adapter@0.2.0`.
//!
//! Its `wit/adapter.wit` is a copy of the host's contract with only the
//! package version changed, so the component imports and exports
//! `trainyard:adapter/*@0.2.0`. A host that speaks `0.1.x` must refuse it at
//! load, naming both versions, rather than fail later with a linker error.

mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "task-adapter",
    });
}

use bindings::exports::trainyard::adapter::adapter::Guest;
use bindings::trainyard::adapter::host::{log, LogLevel};
use bindings::trainyard::adapter::types::{
    AdapterInfo, ExitReport, LaunchPlan, Progress, Task, TaskError, TaskResult,
};

struct WrongVersion;

impl Guest for WrongVersion {
    fn describe() -> AdapterInfo {
        AdapterInfo {
            name: "wrong-version".to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            description: "Targets trainyard:adapter@0.2.0; hosts for 0.1.x refuse it".to_owned(),
            kinds: vec!["noop".to_owned()],
        }
    }

    fn prepare(_task: Task) -> Result<LaunchPlan, TaskError> {
        // Importing the host's log keeps the 0.2.0 import in the component,
        // so the host sees the version on both sides of the contract.
        log(LogLevel::Info, "wrong-version prepares nothing");
        Ok(LaunchPlan {
            files: Vec::new(),
            command: None,
        })
    }

    fn on_output(_line: String) -> Option<Progress> {
        None
    }

    fn finish(_exit: ExitReport) -> Result<TaskResult, TaskError> {
        Ok(TaskResult {
            metrics: Vec::new(),
            checkpoint: None,
            summary: None,
        })
    }
}

bindings::export!(WrongVersion with_types_in bindings);
