"""The `cartpole-py` task adapter: the CartPole adapter written in Python.

It runs trainyard's CartPole trainer (the Rust `cartpole` adapter's
`trainer.py`, bundled in at build time) with the same params, progress,
result and checkpoints: REINFORCE with a numpy policy network on
gymnasium's CartPole-v1, so the host's `python3` for it must have numpy and
gymnasium (`../cartpole/requirements.txt`).

This module is the glue between the `task-adapter` world and the plain
modules that decide: `plan` (with `params`), `protocol` and `outcome`. An
error the host should see is raised as `Err(TaskError(...))`; any other
exception would trap the instance, which the host reports as an adapter
fault rather than the task's own failure.

The host makes one instance per attempt, so the workspace `finish` reads is
kept in a module variable set by `prepare`.

`Metadata` answers the contract's optional `metadata` export (0.1.1 on), as
the Rust adapter does: no params schema (`prepare` validates, so bad params
end the task FAILED with its message) and the metrics of `result.json`.
Built against a contract without that export, the class is simply unused.
"""

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import host, types

import outcome
import plan
import protocol

NAME = "cartpole-py"
VERSION = "0.1.0"
DESCRIPTION = ("REINFORCE on gymnasium's CartPole-v1 with a numpy policy network, "
               "adapter written in Python (python3 with numpy and gymnasium)")

#: The workspace of the attempt this instance serves, set by `prepare`.
_workspace = None


class Adapter(exports.Adapter):
    def describe(self):
        return types.AdapterInfo(name=NAME, version=VERSION, description=DESCRIPTION,
                                 kinds=[plan.KIND])

    def prepare(self, task):
        global _workspace
        try:
            prepared = plan.prepare(task)
        except plan.PlanError as e:
            host.log(host.LogLevel.WARN, str(e))
            raise Err(types.TaskError(message=str(e), retryable=False)) from None
        start = f"resuming from {prepared.resume_from}" if prepared.resume_from else "from scratch"
        host.log(host.LogLevel.INFO,
                 f"attempt {task.attempt} of task {task.id}: {prepared.run_summary()}, {start}")
        _workspace = task.workspace
        return prepared.plan

    def on_output(self, line):
        try:
            return protocol.read_line(line)
        except protocol.UnsafeCheckpoint as e:
            host.log(host.LogLevel.WARN, str(e))
            return None

    def finish(self, exit):
        try:
            if _workspace is None:
                raise outcome.FinishError(
                    "the host called finish before prepare on this adapter instance")
            result = outcome.decide(exit, lambda: outcome.read_outputs(_workspace))
        except outcome.FinishError as e:
            verdict = "retryable" if e.retryable else "final"
            host.log(host.LogLevel.WARN,
                     f"attempt failed after {exit.duration_ms} ms ({verdict}): {e}")
            raise Err(types.TaskError(message=str(e), retryable=e.retryable)) from None
        host.log(host.LogLevel.INFO, f"finished in {exit.duration_ms} ms: {result.summary}")
        return result


class Metadata:
    def params_schema(self, kind):
        return None

    def result_metrics(self):
        return list(outcome.REQUIRED + outcome.ALSO)
