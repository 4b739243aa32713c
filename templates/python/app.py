"""The __NAME__ task adapter, written in Python.

A trainyard task adapter decides; the host acts. For each attempt of a task
the host calls, on a fresh instance of this component:

- `prepare(task)`: check the task's params and say what to launch (files to
  write into the workspace, the program and its arguments);
- `on_output(line)`: once per line the program prints, say whether it
  reported progress;
- `finish(exit)`: turn the program's exit and the files it left into the
  task's result.

`describe()` is called once, when the host loads the adapter; so are the
methods of `Metadata`, when the contract has the optional `metadata` export
(0.1.1 on; built against 0.1.0 the class is unused). The contract
is `wit/adapter.wit` (world `task-adapter`); componentize-py generates its
bindings (`wit_world`) when it builds the component.

Errors: raise `Err(TaskError(message, retryable))` for a failure the task
should record. `retryable=False` ends the task FAILED at once (bad params
never get better); `True` lets the scheduler try again (a crash). Any other
exception traps the instance, which the host reports as a fault of the
adapter, not of the task.

This adapter launches `trainer.py` (beside this file, bundled into the
component when it is built) with `python3`, hands it its params as
`params.json`, and reads the JSON lines it prints. What it decides is in
`logic.py`, plain Python that `make test` checks without the bindings.
"""

import json
from pathlib import Path

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import host, types

import logic

NAME = "__NAME__"
VERSION = "0.1.0"
KIND = "__NAME__"
PROGRAM = "python3"
RESULT_FILE = "result.json"

#: Read while the component is built, so the component carries the file.
TRAINER_SOURCE = Path(__file__).with_name("trainer.py").read_bytes()

#: The attempt's workspace, set by `prepare` (one instance per attempt).
_workspace = None


def task_error(message, retryable):
    host.log(host.LogLevel.WARN, message)
    return Err(types.TaskError(message=message, retryable=retryable))


class Adapter(exports.Adapter):
    def describe(self):
        return types.AdapterInfo(name=NAME, version=VERSION, kinds=[KIND],
                                 description="__NAME__: runs trainer.py with python3")

    def prepare(self, task):
        global _workspace
        try:
            params = logic.parse_params(task.params)
        except ValueError as e:
            raise task_error(str(e), retryable=False) from None
        _workspace = task.workspace
        host.log(host.LogLevel.INFO, f"task {task.id} attempt {task.attempt}: {params}")
        return types.LaunchPlan(
            files=[
                types.WorkspaceFile(path="trainer.py", contents=TRAINER_SOURCE),
                types.WorkspaceFile(path="params.json", contents=json.dumps(params).encode()),
            ],
            command=types.Command(program=PROGRAM, env=[],
                                  args=["-u", "trainer.py", "--config", "params.json"]),
        )

    def on_output(self, line):
        fields = logic.progress_fields(line)
        if fields is None:
            return None
        episode, total, ret = fields
        return types.Progress(episode=episode, total_episodes=total, episode_return=ret,
                              metrics=[], checkpoint=None, message=None)

    def finish(self, exit):
        status = exit.status
        if isinstance(status, types.ExitStatus_Exited) and status.value != 0:
            raise task_error(f"trainer exited with code {status.value}: "
                             f"{exit.stderr_tail[-2000:]}", retryable=True)
        if isinstance(status, types.ExitStatus_Signaled):
            raise task_error(f"trainer killed by signal {status.value}", retryable=True)
        if isinstance(status, types.ExitStatus_NotLaunched):
            raise task_error("trainer was never launched", retryable=True)
        try:
            text = (Path(_workspace) / RESULT_FILE).read_text()
            metrics = logic.result_metrics(text)
        except (OSError, ValueError, TypeError) as e:
            raise task_error(f"trainer left no valid {RESULT_FILE}: {e}", retryable=True) from None
        best = dict(metrics).get("best_return")
        return types.TaskResult(metrics=[types.Metric(name=k, value=v) for k, v in metrics],
                                checkpoint=None, summary=f"best return {best}")


class Metadata:
    def params_schema(self, kind):
        # The master checks submissions against it and refuses bad params
        # (naming the field) before any host sees them.
        return json.dumps(logic.params_schema())

    def result_metrics(self):
        # The metrics `finish` reports, for sweeps to rank on.
        return list(logic.RESULT_METRICS)
