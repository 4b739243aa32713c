"""The launch plan of one attempt of a cartpole task.

The plan writes the CartPole trainer (`trainer.py`, the file of the Rust
`cartpole` adapter, bundled into this component when it is built) and the
normalised `params.json` into the workspace, and runs
`python3 -u trainer.py --config params.json`, adding `--resume PATH` when an
earlier attempt left a checkpoint file, which the host has already placed in
this workspace. Every refusal here is final: the task itself is at fault.
"""

import importlib.util
import json
from pathlib import Path

from wit_world.imports import types

import params

KIND = "cartpole"
TRAINER_FILE = "trainer.py"
CONFIG_FILE = "params.json"
#: The interpreter; it must be on the host's allowlist for this adapter.
PROGRAM = "python3"
ENV = (("PYTHONUNBUFFERED", "1"), ("PYTHONDONTWRITEBYTECODE", "1"))


def _bundled_trainer():
    """The trainer's source, found on the module path (the build puts the
    trainer's directory there) and read without importing it. Read when this
    module is imported, which happens while the component is built, so the
    component carries the bytes."""
    spec = importlib.util.find_spec("trainer")
    if spec is None or spec.origin is None:
        raise ImportError("trainer.py is not on the module path: build with -p ../cartpole/trainer")
    return Path(spec.origin).read_bytes()


TRAINER_SOURCE = _bundled_trainer()


class PlanError(Exception):
    """Why an attempt cannot be planned; never worth a retry."""


class Prepared:
    """What `prepare` decided: the plan, and what the log line tells."""

    def __init__(self, plan, config, resume_from):
        self.plan = plan
        self.config = config
        self.resume_from = resume_from

    def run_summary(self):
        c = self.config
        return (f"{c['episodes']} episodes, seed {c['seed']}, learning rate "
                f"{_number(c['learning_rate'])}, gamma {_number(c['gamma'])}, "
                f"{c['hidden']} hidden units")


def prepare(task):
    """Checks the task's kind, then its params, and plans the attempt."""
    if task.kind != KIND:
        raise PlanError(f'this adapter runs tasks of kind "{KIND}" only, not "{task.kind}"')
    try:
        config = params.parse(task.params)
    except params.ParamsError as e:
        raise PlanError(str(e)) from None
    resume_from = _resume_from(task.checkpoint)
    args = ["-u", TRAINER_FILE, "--config", CONFIG_FILE]
    if resume_from is not None:
        args += ["--resume", resume_from]
    plan = types.LaunchPlan(
        files=[
            types.WorkspaceFile(path=TRAINER_FILE, contents=TRAINER_SOURCE),
            types.WorkspaceFile(path=CONFIG_FILE, contents=json.dumps(config, indent=2).encode()),
        ],
        command=types.Command(
            program=PROGRAM,
            args=args,
            env=[types.EnvVar(name=n, value=v) for n, v in ENV],
        ),
    )
    return Prepared(plan, config, resume_from)


def _resume_from(checkpoint):
    if checkpoint is None:
        return None
    if isinstance(checkpoint, types.Checkpoint_WorkspaceFile):
        return checkpoint.value
    raise PlanError(
        "the reference trainer resumes only from a checkpoint file in the workspace; "
        f"an external checkpoint ({checkpoint.value[:200]}) is not supported"
    )


def _number(x):
    """A float as Rust prints it: 1.0 as "1", 0.01 as "0.01"."""
    return str(int(x)) if float(x).is_integer() else repr(x)
