#!/usr/bin/env python3
"""The test adapter's wrapper around trainyard's reference trainer.

The test-trainer adapter writes this file next to `trainer.py`, with the
trainer's `params.json` and this wrapper's `hooks.json`, and runs

    python3 -u hooks.py --hooks hooks.json --config params.json [--resume CHECKPOINT]

It runs the trainer in-process (`trainer.main`) with an observer that

- appends a line per event to `trace_file`, a file name inside the directory
  the operator names in the trainer's environment as TRAINYARD_TRACE_DIR:
  {"event":"start"|"alive"|"end","task":T,"attempt":A,"episode":N,"t":UNIX_TIME,"pid":PID}
  ("start" before the first episode, with the episode resumed from; "alive"
  after each episode; "end" after the result), so that tests can prove two
  attempts never overlapped and find the trainer's process;
- ends the run with exit code 3, a retryable crash, as episode
  `fail_at_episode` begins, in attempts up to `fail_until_attempt` (all of
  them if it is absent).

Exit codes are the trainer's, plus 3 for the simulated failure; a hooks file
that cannot be used exits 2 like an invalid configuration.
"""

import json
import os
import sys
import time

import trainer

EXIT_SIMULATED_FAILURE = 3
TRACE_DIR_VAR = "TRAINYARD_TRACE_DIR"
HOOK_KEYS = {"task", "attempt", "trace_file", "fail_at_episode", "fail_until_attempt"}


class SimulatedFailure(Exception):
    def __init__(self, episode):
        super().__init__(f"simulated failure at episode {episode}")
        self.episode = episode


def load_hooks(path):
    """Reads hooks.json; raises trainer.ConfigError if it cannot be used."""
    try:
        with open(path, encoding="utf-8") as f:
            hooks = json.load(f)
    except (OSError, ValueError) as e:
        raise trainer.ConfigError(f"cannot read hooks {path}: {e}") from e
    if not isinstance(hooks, dict):
        raise trainer.ConfigError(f"hooks {path} must hold a JSON object")
    unknown = sorted(set(hooks) - HOOK_KEYS)
    if unknown:
        raise trainer.ConfigError(f"unknown hook keys: {', '.join(unknown)}")
    name = hooks.get("trace_file")
    if name is not None and (not isinstance(name, str) or os.path.basename(name) != name
                             or name.startswith(".") or not name):
        raise trainer.ConfigError(f'"trace_file" must be a plain file name, got {json.dumps(name)}')
    return hooks


def trace_path(hooks):
    """Where the trace goes, or None; raises trainer.ConfigError without a directory."""
    name = hooks.get("trace_file")
    if name is None:
        return None
    directory = os.environ.get(TRACE_DIR_VAR)
    if not directory:
        raise trainer.ConfigError(
            f'"trace_file" needs {TRACE_DIR_VAR} in the trainer\'s environment (host.trainer_env)')
    return os.path.join(directory, name)


class Hooks(trainer.Observer):
    def __init__(self, hooks, trace_file):
        self.task = hooks.get("task", 0)
        self.attempt = hooks.get("attempt", 1)
        self.fail_at = hooks.get("fail_at_episode")
        self.fail_until = hooks.get("fail_until_attempt")
        self.trace = trace_file

    def record(self, event, episode):
        if self.trace is None:
            return
        line = {"event": event, "task": self.task, "attempt": self.attempt,
                "episode": episode, "t": time.time(), "pid": os.getpid()}
        self.trace.write(json.dumps(line, separators=(",", ":")) + "\n")
        self.trace.flush()

    def started(self, config, resumed_from):
        self.record("start", resumed_from)

    def episode_starting(self, episode):
        if episode != self.fail_at:
            return
        if self.fail_until is None or self.attempt <= self.fail_until:
            raise SimulatedFailure(episode)

    def episode_done(self, episode):
        self.record("alive", episode)

    def finished(self, episode):
        self.record("end", episode)


def main(argv):
    if len(argv) < 2 or argv[0] != "--hooks":
        print("usage: hooks.py --hooks HOOKS.json TRAINER-ARGS...", file=sys.stderr)
        return trainer.EXIT_INVALID_CONFIG
    try:
        hooks = load_hooks(argv[1])
        path = trace_path(hooks)
    except trainer.ConfigError as e:
        print(f"hooks: invalid configuration: {e}", file=sys.stderr)
        return trainer.EXIT_INVALID_CONFIG
    try:
        trace = open(path, "a", encoding="utf-8") if path else None
    except OSError as e:
        print(f"hooks: cannot open trace file {path}: {e}", file=sys.stderr)
        return 1
    try:
        return trainer.main(argv[2:], Hooks(hooks, trace))
    except SimulatedFailure as e:
        print(str(e), file=sys.stderr, flush=True)
        return EXIT_SIMULATED_FAILURE
    finally:
        if trace is not None:
            trace.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
