//! The `python-trainer` task adapter: runs trainyard's reference Python
//! Q-learning trainer. Everything it does is the `q-learning` crate's; this
//! crate names the adapter, accepts the trainer's own parameters and nothing
//! else (no parameter names a path: the trainer reads and writes its
//! workspace only), and exports the component.

use q_learning::adapter;
use q_learning::bindings::exports::trainyard::adapter::adapter::Guest;
use q_learning::bindings::exports::trainyard::adapter::metadata::Guest as MetadataGuest;
use q_learning::bindings::trainyard::adapter::types::{
    AdapterInfo, ExitReport, LaunchPlan, Progress, Task, TaskError, TaskResult,
};
use q_learning::outcome::Q_LEARNING_RESULT;
use q_learning::plan;

struct PythonTrainer;

impl Guest for PythonTrainer {
    fn describe() -> AdapterInfo {
        adapter::describe(
            "python-trainer",
            env!("CARGO_PKG_VERSION"),
            "Tabular Q-learning on a grid world with the reference Python trainer (python3)",
            &plan::Q_LEARNING,
        )
    }

    fn prepare(task: Task) -> Result<LaunchPlan, TaskError> {
        adapter::prepare(&task, plan::prepare(&task))
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
impl MetadataGuest for PythonTrainer {
    fn params_schema(_kind: String) -> Option<String> {
        None
    }

    fn result_metrics() -> Vec<String> {
        Q_LEARNING_RESULT.metrics()
    }
}

q_learning::bindings::export!(PythonTrainer with_types_in q_learning::bindings);
