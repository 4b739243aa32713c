"""Turning the trainer's exit and the files it left into the attempt's result.

Exit code 0 is a success only if `result.json` holds the metrics; a trainer
that exits 0 without them has not finished, a retryable failure. Exit code 2
means the trainer refused its configuration, which no retry fixes; any other
code or a signal is a crash worth retrying. `decide` reads the workspace
only through the `outputs` function it is given, so it is tested without one.
"""

from pathlib import Path

from wit_world.imports import types

from values import NotJson, is_number, loads

RESULT_FILE = "result.json"
POLICY_FILE = "policy.json"
EXIT_INVALID_CONFIG = 2
STDERR_LINES = 12
STDERR_BYTES = 2048
MAX_METRICS = 256
MAX_METRIC_NAME = 128
#: The metrics `result.json` must hold, and the others it may.
REQUIRED = ("mean_return", "best_return", "eval_episodes", "episodes")
ALSO = ("resumed_from",)


class FinishError(Exception):
    """Why an attempt failed after the trainer ran, and whether to retry."""

    def __init__(self, message, retryable=True):
        super().__init__(message)
        self.retryable = retryable


class Outputs:
    """What the trainer left: `result.json`'s text (or the OSError reading
    it raised) and whether `policy.json` exists."""

    def __init__(self, result_json, policy_exists):
        self.result_json = result_json
        self.policy_exists = policy_exists


def read_outputs(workspace):
    """Reads the trainer's outputs from the workspace (through WASI)."""
    root = Path(workspace)
    try:
        result = (root / RESULT_FILE).read_text()
    except OSError as e:
        result = e
    return Outputs(result, (root / POLICY_FILE).is_file())


def decide(exit, outputs):
    """The attempt's result from the exit; raises `FinishError`."""
    status = exit.status
    if isinstance(status, types.ExitStatus_Exited):
        if status.value == 0:
            return task_result(outputs())
        if status.value == EXIT_INVALID_CONFIG:
            raise FinishError(
                f"trainer refused its configuration (exit code 2): {stderr_tail(exit.stderr_tail)}",
                retryable=False,
            )
        raise FinishError(f"trainer exited with code {status.value}: {stderr_tail(exit.stderr_tail)}")
    if isinstance(status, types.ExitStatus_Signaled):
        raise FinishError(f"trainer killed by signal {status.value}: {stderr_tail(exit.stderr_tail)}")
    raise FinishError("trainer was never launched although the launch plan had a command")


def task_result(outputs):
    text = outputs.result_json
    if isinstance(text, OSError):
        reason = "the file does not exist" if isinstance(text, FileNotFoundError) else str(text)
        raise FinishError(f"trainer exited with code 0 but left no readable {RESULT_FILE}: {reason}")
    try:
        fields = loads(text)
    except NotJson as e:
        raise _invalid(f"not JSON ({e})") from None
    if not isinstance(fields, dict):
        raise _invalid("not a JSON object")
    for name in REQUIRED:
        if not is_number(fields.get(name)):
            raise _invalid(f'"{name}" is missing or not a number')
    metrics = [
        types.Metric(name=name, value=float(value))
        for name, value in sorted(fields.items())
        if len(name.encode()) <= MAX_METRIC_NAME and is_number(value)
    ][:MAX_METRICS]
    checkpoint = types.Checkpoint_WorkspaceFile(POLICY_FILE) if outputs.policy_exists else None
    return types.TaskResult(metrics=metrics, checkpoint=checkpoint, summary=summary(fields))


def summary(fields):
    """The operator's line, e.g. "mean return 476.2 over the last 20
    episodes (best 500) after 300 episodes"."""
    return (f"mean return {fields['mean_return']:.1f} over the last "
            f"{_number(fields['eval_episodes'])} episodes (best "
            f"{_number(fields['best_return'])}) after {_number(fields['episodes'])} episodes")


def stderr_tail(stderr):
    """The end of the trainer's stderr, small enough for an error message."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    if not lines:
        return "(nothing on stderr)"
    tail = "\n".join(lines[-STDERR_LINES:]).encode()
    if len(tail) <= STDERR_BYTES:
        return tail.decode()
    return "…" + tail[-STDERR_BYTES:].decode(errors="ignore")


def _invalid(reason):
    return FinishError(f"trainer exited with code 0 but its {RESULT_FILE} is not valid: {reason}")


def _number(x):
    """A number as Rust's `{}` prints an f64: 500.0 as "500"."""
    x = float(x)
    return str(int(x)) if x.is_integer() else repr(x)
