#!/usr/bin/env python3
"""trainyard's reference trainer: tabular Q-learning on a small grid world.

The python-trainer adapter writes this file and a `params.json` into the
attempt's workspace and runs `python3 -u trainer.py --config params.json`
(plus `--resume CHECKPOINT` when an earlier attempt left one). Only the
standard library is used, so any Python 3.11 can run it.

The world is a 6x6 grid. The agent starts in the top-left corner; the goal in
the bottom-right corner pays +1 and ends the episode; a few pits pay -1 and end
it too; every other step costs a little, and an episode is cut after a fixed
number of steps. The agent acts epsilon-greedily with a per-episode decay.

Protocol on stdout, one JSON object per line, flushed at once:

    {"type":"resumed","from_episode":N}                      (only with --resume)
    {"type":"episode","episode":N,"episodes":TOTAL,"return":R,"steps":S,"epsilon":E}
    {"type":"checkpoint","path":"checkpoint.json","episode":N}
    {"type":"result","mean_return":R,"success_rate":S,...}   (last line)

Files left in the working directory: `checkpoint.json` (every
`checkpoint_every` episodes, replaced atomically), and at the end
`result.json` (the metrics) and `policy.json` (the final Q-table), a copy of
which goes to `outputs/policy.json`: the host keeps what a trainer leaves
under `outputs/` in the artifact store, for the user to download.

Determinism: every random draw comes from one `random.Random(seed)`, and a
checkpoint holds that generator's state together with the Q-table, epsilon and
the returns the final metrics need. Resuming from the checkpoint of episode K
therefore replays episodes K+1.. exactly as the uninterrupted run did them.

Exit codes: 0 done, 2 invalid configuration or unreadable checkpoint (a
retry cannot help), 1 anything unexpected (an unwritable workspace, a crash).

A wrapper script may import this module and pass `main` an `Observer` that
hears of the run's start, of each episode and of its end (trainyard's test
adapter records a trace file and simulates failures that way); run as a
script, the trainer has none.
"""

import argparse
import json
import os
import random
import sys
import time

EXIT_INVALID_CONFIG = 2

CHECKPOINT_FILE = "checkpoint.json"
RESULT_FILE = "result.json"
POLICY_FILE = "policy.json"
OUTPUTS_DIR = "outputs"
CHECKPOINT_FORMAT = 1

# --- the grid world ----------------------------------------------------------

ROWS = 6
COLS = 6
START = (0, 0)
GOAL = (ROWS - 1, COLS - 1)
PITS = frozenset({(1, 3), (2, 1), (3, 4), (4, 2)})
GOAL_REWARD = 1.0
PIT_REWARD = -1.0
STEP_REWARD = -0.01
MAX_STEPS = 100
# up, down, left, right
ACTIONS = ((-1, 0), (1, 0), (0, -1), (0, 1))
ACTION_NAMES = ("up", "down", "left", "right")
STATES = ROWS * COLS


def state_index(cell):
    return cell[0] * COLS + cell[1]


def step(cell, action):
    """Moves one step; walls keep the agent in place. Returns (cell, reward, done)."""
    dr, dc = ACTIONS[action]
    row = min(max(cell[0] + dr, 0), ROWS - 1)
    col = min(max(cell[1] + dc, 0), COLS - 1)
    nxt = (row, col)
    if nxt == GOAL:
        return nxt, GOAL_REWARD, True
    if nxt in PITS:
        return nxt, PIT_REWARD, True
    return nxt, STEP_REWARD, False


# --- configuration -----------------------------------------------------------


class ConfigError(Exception):
    pass


def _int(lo, hi=None):
    def check(name, value):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f'"{name}" must be an integer, got {json.dumps(value)}')
        if value < lo or (hi is not None and value > hi):
            bound = f"from {lo} to {hi}" if hi is not None else f"of at least {lo}"
            raise ConfigError(f'"{name}" must be an integer {bound}, got {value}')
        return value

    return check


def _unit(lo_open):
    def check(name, value):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f'"{name}" must be a number, got {json.dumps(value)}')
        low_ok = value > 0 if lo_open else value >= 0
        if not (low_ok and value <= 1):
            interval = "(0, 1]" if lo_open else "[0, 1]"
            raise ConfigError(f'"{name}" must be a number in {interval}, got {value}')
        return float(value)

    return check


# Mirrors the adapter's validation (python-trainer/src/params.rs), which is
# the one operators see; this copy only guards against a hand-written config.
SCHEMA = {
    "episodes": (_int(1, 100_000), 300),
    "learning_rate": (_unit(True), 0.5),
    "discount": (_unit(False), 0.95),
    "epsilon": (_unit(False), 1.0),
    "epsilon_decay": (_unit(True), 0.98),
    "min_epsilon": (_unit(False), None),
    "seed": (_int(0), 0),
    "checkpoint_every": (_int(1), 50),
    "eval_window": (_int(1), 50),
    "step_delay_ms": (_int(0, 60_000), 0),
}
DEFAULT_MIN_EPSILON = 0.05


def load_config(path):
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read config {path}: {e}") from e
    if not isinstance(raw, dict):
        raise ConfigError(f"config {path} must hold a JSON object")
    unknown = sorted(set(raw) - set(SCHEMA))
    if unknown:
        raise ConfigError(f"unknown config keys: {', '.join(unknown)}")
    config = {}
    for name, (check, default) in SCHEMA.items():
        value = raw.get(name)
        config[name] = default if value is None else check(name, value)
    if config["min_epsilon"] is None:
        config["min_epsilon"] = min(DEFAULT_MIN_EPSILON, config["epsilon"])
    elif config["min_epsilon"] > config["epsilon"]:
        raise ConfigError('"min_epsilon" must not exceed "epsilon"')
    return config


# --- the trainer's state and its checkpoint ---------------------------------


def rng_state_to_json(state):
    version, internal, gauss_next = state
    return [version, list(internal), gauss_next]


def rng_state_from_json(value):
    version, internal, gauss_next = value
    return (version, tuple(internal), gauss_next)


class Run:
    """Everything that evolves from one episode to the next."""

    def __init__(self, config):
        self.config = config
        self.rng = random.Random(config["seed"])
        self.q = [[0.0] * len(ACTIONS) for _ in range(STATES)]
        self.epsilon = config["epsilon"]
        self.episode = 0  # the last episode finished
        # (return, reached the goal) of the last `eval_window` episodes
        self.recent = []

    def checkpoint_json(self):
        return {
            "format": CHECKPOINT_FORMAT,
            "episode": self.episode,
            "episodes": self.config["episodes"],
            "seed": self.config["seed"],
            "epsilon": self.epsilon,
            "q": self.q,
            "rng_state": rng_state_to_json(self.rng.getstate()),
            "recent": [[r, s] for r, s in self.recent],
        }

    def restore(self, checkpoint):
        if checkpoint.get("format") != CHECKPOINT_FORMAT:
            raise ConfigError(f"unsupported checkpoint format {checkpoint.get('format')!r}")
        if checkpoint["seed"] != self.config["seed"]:
            raise ConfigError(
                f"checkpoint was made with seed {checkpoint['seed']}, "
                f"config says {self.config['seed']}"
            )
        episode = checkpoint["episode"]
        if not isinstance(episode, int) or not 0 <= episode <= self.config["episodes"]:
            raise ConfigError(f"checkpoint episode {episode!r} is outside this run")
        q = checkpoint["q"]
        if len(q) != STATES or any(len(row) != len(ACTIONS) for row in q):
            raise ConfigError("checkpoint Q-table does not fit this grid")
        self.q = [[float(v) for v in row] for row in q]
        self.epsilon = float(checkpoint["epsilon"])
        self.episode = episode
        self.rng.setstate(rng_state_from_json(checkpoint["rng_state"]))
        self.recent = [(float(r), bool(s)) for r, s in checkpoint["recent"]]

    def choose(self, s):
        if self.rng.random() < self.epsilon:
            return self.rng.randrange(len(ACTIONS))
        row = self.q[s]
        best = max(row)
        # Ties are broken at random (through the seeded generator) so an
        # untrained agent does not walk into a wall forever.
        ties = [a for a, v in enumerate(row) if v == best]
        return ties[0] if len(ties) == 1 else self.rng.choice(ties)

    def play_episode(self):
        """Plays and learns from one episode. Returns (return, steps, reached goal)."""
        lr = self.config["learning_rate"]
        gamma = self.config["discount"]
        cell = START
        total = 0.0
        reached = False
        steps = 0
        while steps < MAX_STEPS:
            s = state_index(cell)
            a = self.choose(s)
            nxt, reward, done = step(cell, a)
            target = reward if done else reward + gamma * max(self.q[state_index(nxt)])
            self.q[s][a] += lr * (target - self.q[s][a])
            total += reward
            steps += 1
            cell = nxt
            if done:
                reached = nxt == GOAL
                break
        self.episode += 1
        self.recent.append((total, reached))
        del self.recent[: -self.config["eval_window"]]
        self.epsilon = max(self.config["min_epsilon"], self.epsilon * self.config["epsilon_decay"])
        return total, steps, reached

    def metrics(self, resumed_from):
        returns = [r for r, _ in self.recent]
        count = len(returns)
        return {
            "mean_return": round(sum(returns) / count, 6) if count else 0.0,
            "success_rate": round(sum(1 for _, s in self.recent if s) / count, 6) if count else 0.0,
            "eval_episodes": count,
            "episodes": self.episode,
            "final_epsilon": round(self.epsilon, 6),
            "resumed_from": resumed_from,
        }

    def policy_json(self):
        greedy = [ACTION_NAMES[row.index(max(row))] for row in self.q]
        return {
            "rows": ROWS,
            "cols": COLS,
            "start": list(START),
            "goal": list(GOAL),
            "pits": sorted(list(p) for p in PITS),
            "actions": list(ACTION_NAMES),
            "q": self.q,
            "greedy": greedy,
        }


# --- output ------------------------------------------------------------------


def emit(obj):
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def write_json_atomically(path, obj):
    """Writes `path` so that a reader (or the next attempt) never sees half a file."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, separators=(",", ":"))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class Observer:
    """Hears of a run's progress; every method does nothing here. An exception
    raised by one ends the run and leaves `main` (an `Observer` may stop a
    run that way)."""

    def started(self, config, resumed_from):
        """Before the first episode; `resumed_from` is the last episode done."""

    def episode_starting(self, episode):
        """Before episode `episode` (counted from 1) is played."""

    def episode_done(self, episode):
        """After the episode's line was printed."""

    def finished(self, episode):
        """After the result was written and printed."""


# --- main --------------------------------------------------------------------


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="JSON file with the run's parameters")
    parser.add_argument("--resume", help="checkpoint file to continue from")
    return parser.parse_args(argv)


def load_run(args):
    config = load_config(args.config)
    run = Run(config)
    if args.resume:
        try:
            with open(args.resume, encoding="utf-8") as f:
                checkpoint = json.load(f)
            run.restore(checkpoint)
        except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
            raise ConfigError(f"cannot resume from {args.resume}: {e}") from e
    return run


def main(argv, observer=None):
    observer = observer or Observer()
    args = parse_args(argv)
    try:
        run = load_run(args)
    except ConfigError as e:
        print(f"trainer: invalid configuration: {e}", file=sys.stderr)
        return EXIT_INVALID_CONFIG
    config = run.config
    resumed_from = run.episode
    if args.resume:
        emit({"type": "resumed", "from_episode": resumed_from})
    observer.started(config, resumed_from)
    delay = config["step_delay_ms"] / 1000.0
    total_episodes = config["episodes"]

    while run.episode < total_episodes:
        episode = run.episode + 1
        observer.episode_starting(episode)
        ret, steps, _ = run.play_episode()
        if delay:
            time.sleep(delay)
        emit({"type": "episode", "episode": episode, "episodes": total_episodes,
              "return": round(ret, 6), "steps": steps, "epsilon": round(run.epsilon, 6)})
        observer.episode_done(episode)
        if episode % config["checkpoint_every"] == 0:
            write_json_atomically(CHECKPOINT_FILE, run.checkpoint_json())
            emit({"type": "checkpoint", "path": CHECKPOINT_FILE, "episode": episode})

    metrics = run.metrics(resumed_from)
    write_json_atomically(POLICY_FILE, run.policy_json())
    os.makedirs(OUTPUTS_DIR, exist_ok=True)
    write_json_atomically(os.path.join(OUTPUTS_DIR, POLICY_FILE), run.policy_json())
    write_json_atomically(RESULT_FILE, metrics)
    emit({"type": "result", **metrics})
    observer.finished(run.episode)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
