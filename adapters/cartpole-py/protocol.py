"""Reading the trainer's stdout, one line at a time.

The trainer prints one JSON object per line, tagged by `type` (the protocol
in `trainer.py`): an episode line carries the episode, the total and the
return, and each other number on it becomes a metric; a checkpoint line
hands on a file of the workspace; a resumed line says where a run picked up.
Anything else is not progress: the trainer's output is untrusted, and no
line may make the adapter raise.
"""

import json
from pathlib import PurePosixPath

from wit_world.imports import types

from values import NotJson, is_integer, is_number, loads

MAX_PROGRESS_METRICS = 64
MAX_METRIC_NAME = 128


class UnsafeCheckpoint(Exception):
    """A checkpoint announced outside the workspace (absolute, or via `..`)."""

    def __init__(self, path):
        super().__init__(f"ignored a checkpoint outside the workspace: {json.dumps(path[:256])}")


def read_line(line):
    """The progress `line` reports, or None; raises `UnsafeCheckpoint`."""
    if not line.lstrip().startswith("{"):
        return None
    try:
        parsed = loads(line)
    except NotJson:
        return None
    if not isinstance(parsed, dict):
        return None
    kind = parsed.get("type")
    if kind == "episode":
        return _episode(parsed)
    if kind == "checkpoint":
        return _checkpoint(parsed)
    if kind == "resumed":
        return _resumed(parsed)
    return None


def _episode(fields):
    episode, total = fields.get("episode"), fields.get("episodes")
    episode_return = fields.get("return")
    if not (is_integer(episode) and is_integer(total) and is_number(episode_return)):
        return None
    others = sorted(
        (name, value)
        for name, value in fields.items()
        if name not in ("type", "episode", "episodes", "return")
        and len(name.encode()) <= MAX_METRIC_NAME
        and is_number(value)
    )
    return _progress(
        episode=episode,
        total_episodes=total,
        episode_return=float(episode_return),
        metrics=[types.Metric(name=n, value=float(v)) for n, v in others][:MAX_PROGRESS_METRICS],
    )


def _checkpoint(fields):
    path, episode = fields.get("path"), fields.get("episode")
    if not (isinstance(path, str) and is_integer(episode)):
        return None
    if not is_inside_workspace(path):
        raise UnsafeCheckpoint(path)
    return _progress(episode=episode, checkpoint=types.Checkpoint_WorkspaceFile(path))


def _resumed(fields):
    episode = fields.get("from_episode")
    if not is_integer(episode):
        return None
    return _progress(episode=episode, message=f"resumed from episode {episode}")


def is_inside_workspace(path):
    """True for a non-empty relative path that stays in the workspace."""
    if not path or "\0" in path or path.startswith("/"):
        return False
    return all(part not in ("..",) for part in PurePosixPath(path).parts)


def _progress(episode=None, total_episodes=None, episode_return=None, metrics=(),
              checkpoint=None, message=None):
    return types.Progress(
        episode=episode,
        total_episodes=total_episodes,
        episode_return=episode_return,
        metrics=list(metrics),
        checkpoint=checkpoint,
        message=message,
    )
