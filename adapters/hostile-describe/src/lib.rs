//! The `hostile-describe` task adapter: its `describe` never returns.
//!
//! The host calls `describe` when it loads an adapter, before any task runs.
//! This adapter spins there forever, so tests can prove that loading runs
//! under the per-call deadline and fails with a clear error instead of
//! hanging the host's start-up. Its other functions are never reached; they
//! answer like a well-behaved adapter that runs nothing.

mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "adapter-core",
    });
}

use bindings::exports::trainyard::adapter::adapter::Guest;
use bindings::trainyard::adapter::types::{
    AdapterInfo, ExitReport, LaunchPlan, Progress, Task, TaskError, TaskResult,
};

struct HostileDescribe;

impl Guest for HostileDescribe {
    fn describe() -> AdapterInfo {
        let mut spins: u64 = 0;
        loop {
            // `black_box` keeps the optimiser from proving the loop useless.
            spins = std::hint::black_box(spins.wrapping_add(1));
        }
    }

    fn prepare(_task: Task) -> Result<LaunchPlan, TaskError> {
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

bindings::export!(HostileDescribe with_types_in bindings);
