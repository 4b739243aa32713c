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
`params.json`, and reads the JSON lines it prints.
"""

import json
from pathlib import Path

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import host, types

NAME = "__NAME__"
VERSION = "0.1.0"
KIND = "__NAME__"
PROGRAM = "python3"
RESULT_FILE = "result.json"

#: Read while the component is built, so the component carries the file.
TRAINER_SOURCE = Path(__file__).with_name("trainer.py").read_bytes()

#: The params a task may give, with their defaults and bounds.
DEFAULTS = {"episodes": 20, "seed": 0}
MAX_EPISODES = 10_000

#: The attempt's workspace, set by `prepare` (one instance per attempt).
_workspace = None


def task_error(message, retryable):
    host.log(host.LogLevel.WARN, message)
    return Err(types.TaskError(message=message, retryable=retryable))


def parse_params(text):
    """The task's params with defaults filled in; raises ValueError."""
    try:
        given = json.loads(text)
    except ValueError as e:
        raise ValueError(f"invalid params: not valid JSON ({e})") from None
    if not isinstance(given, dict):
        raise ValueError("invalid params: expected a JSON object")
    unknown = sorted(set(given) - set(DEFAULTS))
    if unknown:
        raise ValueError(f'invalid params: unknown key "{unknown[0]}"; accepted keys are '
                         + ", ".join(DEFAULTS))
    params = {**DEFAULTS, **given}
    for key, hi in (("episodes", MAX_EPISODES), ("seed", 2**32 - 1)):
        value = params[key]
        lo = 1 if key == "episodes" else 0
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise ValueError(f'invalid params: "{key}" must be an integer from {lo} to {hi}, '
                             f"got {json.dumps(value)}")
    return params


def progress_of(record):
    """Progress from one JSON line of the trainer, or None."""
    if record.get("type") != "episode":
        return None
    episode, total, ret = record.get("episode"), record.get("episodes"), record.get("return")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (episode, total)):
        return None
    if isinstance(ret, bool) or not isinstance(ret, (int, float)):
        return None
    return types.Progress(episode=episode, total_episodes=total, episode_return=float(ret),
                          metrics=[], checkpoint=None, message=None)


class Adapter(exports.Adapter):
    def describe(self):
        return types.AdapterInfo(name=NAME, version=VERSION, kinds=[KIND],
                                 description="__NAME__: runs trainer.py with python3")

    def prepare(self, task):
        global _workspace
        try:
            params = parse_params(task.params)
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
        # Output is untrusted: anything but a protocol line is no progress.
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            return None
        return progress_of(record) if isinstance(record, dict) else None

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
            fields = json.loads((Path(_workspace) / RESULT_FILE).read_text())
        except (OSError, ValueError, TypeError) as e:
            raise task_error(f"trainer left no valid {RESULT_FILE}: {e}", retryable=True) from None
        metrics = [types.Metric(name=k, value=float(v)) for k, v in sorted(fields.items())
                   if isinstance(v, (int, float)) and not isinstance(v, bool)]
        return types.TaskResult(metrics=metrics, checkpoint=None,
                                summary=f"best return {fields.get('best_return')}")


class Metadata:
    def params_schema(self, kind):
        # A JSON Schema (as text) here lets the master refuse bad params at
        # submission; None leaves them to `prepare`.
        return None

    def result_metrics(self):
        # The metrics `finish` reports, for sweeps to rank on.
        return ["best_return", "episodes"]
