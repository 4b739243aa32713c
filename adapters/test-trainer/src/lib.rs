//! The `test-trainer` task adapter: trainyard's reference trainer with test
//! hooks, for trainyard's own multi-process tests. It is never part of a
//! shipped configuration: the hooks let a submitter make a trainer append to
//! a trace file and fail on purpose, which only a test should want.
//!
//! It is the `python-trainer` adapter (the `q-learning` crate) plus the
//! [`hooks`]: three more keys in a task's params, checked here and carried
//! out by a Python wrapper that runs the trainer in-process.

mod hooks;

use q_learning::adapter;
use q_learning::bindings::exports::trainyard::adapter::adapter::Guest;
use q_learning::bindings::exports::trainyard::adapter::metadata::Guest as MetadataGuest;
use q_learning::bindings::trainyard::adapter::types::{
    AdapterInfo, ExitReport, LaunchPlan, Progress, Task, TaskError, TaskResult,
};
use q_learning::outcome::Q_LEARNING_RESULT;

struct TestTrainer;

impl Guest for TestTrainer {
    fn describe() -> AdapterInfo {
        adapter::describe(
            "test-trainer",
            env!("CARGO_PKG_VERSION"),
            "The reference Q-learning trainer with test hooks (trace file, simulated failures); \
             for trainyard's tests only",
            &q_learning::plan::Q_LEARNING,
        )
    }

    fn prepare(task: Task) -> Result<LaunchPlan, TaskError> {
        adapter::prepare(&task, hooks::prepare(&task))
    }

    fn on_output(line: String) -> Option<Progress> {
        adapter::on_output(&line)
    }

    fn finish(exit: ExitReport) -> Result<TaskResult, TaskError> {
        adapter::finish(&exit, &Q_LEARNING_RESULT)
    }
}

/// No params schema: `prepare` validates the params, and the master
/// learns the result's metrics, for sweeps.
impl MetadataGuest for TestTrainer {
    fn params_schema(_kind: String) -> Option<String> {
        None
    }

    fn result_metrics() -> Vec<String> {
        Q_LEARNING_RESULT.metrics()
    }
}

q_learning::bindings::export!(TestTrainer with_types_in q_learning::bindings);
