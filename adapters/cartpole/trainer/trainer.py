#!/usr/bin/env python3
"""trainyard's CartPole trainer: REINFORCE with a baseline on gymnasium's
CartPole-v1, with a small two-layer policy network written in numpy.

The cartpole adapter writes this file and a `params.json` into the attempt's
workspace and runs `python3 -u trainer.py --config params.json` (plus
`--resume CHECKPOINT` when an earlier attempt left one). It needs `numpy` and
`gymnasium` (the adapter's requirements.txt pins them); the host's `python3`
must be an interpreter that has them.

The policy maps the four observations through a tanh hidden layer to a
softmax over the two actions. After every episode it takes one Adam step
along the policy gradient, each action weighted by its discounted return
minus a baseline (the mean of that episode's discounted returns, scaled by
their spread): plain REINFORCE with return normalisation, which learns
CartPole quickly and reliably.

Protocol on stdout, one JSON object per line, flushed at once:

    {"type":"resumed","from_episode":N}                      (only with --resume)
    {"type":"episode","episode":N,"episodes":TOTAL,"return":R,"steps":S,"loss":L,"mean_return":M}
    {"type":"checkpoint","path":"checkpoint.json","episode":N}
    {"type":"result","mean_return":R,"best_return":B,...}    (last line)

`mean_return` on an episode line is the mean over the last `eval_window`
episodes, the same window the final metrics average over.

Files left in the working directory: `checkpoint.json` (every
`checkpoint_every` episodes, replaced atomically), and at the end
`result.json` (the metrics) and `policy.json` (the final weights).

Determinism: every random draw (initial weights, each episode's environment
seed, each sampled action) comes from one `numpy.random.Generator(PCG64(seed))`,
and a checkpoint holds that generator's state with the weights, the
optimiser's moments and the returns the metrics need. Resuming from the
checkpoint of episode K therefore replays episodes K+1.. exactly as the
uninterrupted run did them.

Exit codes: 0 done, 2 invalid configuration or unreadable checkpoint (a
retry cannot help), 1 anything unexpected (a missing library, a crash).
"""

import argparse
import json
import os
import sys

EXIT_INVALID_CONFIG = 2
EXIT_MISSING_LIBRARY = 1

try:
    import gymnasium as gym
    import numpy as np
except ImportError as e:
    # Another host's python3 may have them: exit 1, which is worth a retry.
    print(f"trainer: {e}; this trainer needs numpy and gymnasium (the cartpole "
          f"adapter's requirements.txt) in the python3 that runs it ({sys.executable})",
          file=sys.stderr)
    sys.exit(EXIT_MISSING_LIBRARY)

ENV_ID = "CartPole-v1"
CHECKPOINT_FILE = "checkpoint.json"
RESULT_FILE = "result.json"
POLICY_FILE = "policy.json"
CHECKPOINT_FORMAT = 1
OBSERVATIONS = 4
ACTIONS = 2
ADAM_BETAS = (0.9, 0.999)
ADAM_EPSILON = 1e-8


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


def _number(lo, hi, lo_open):
    def check(name, value):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f'"{name}" must be a number, got {json.dumps(value)}')
        low_ok = value > lo if lo_open else value >= lo
        if not (low_ok and value <= hi):
            interval = f"({lo}, {hi}]" if lo_open else f"[{lo}, {hi}]"
            raise ConfigError(f'"{name}" must be a number in {interval}, got {value}')
        return float(value)

    return check


# Mirrors the adapter's validation (cartpole/src/params.rs), which is the one
# operators see; this copy only guards against a hand-written config.
SCHEMA = {
    "episodes": (_int(1, 20_000), 300),
    "learning_rate": (_number(0, 1, True), 0.01),
    "gamma": (_number(0, 1, False), 0.99),
    "hidden": (_int(1, 256), 32),
    "seed": (_int(0), 0),
    "checkpoint_every": (_int(1), 50),
    "eval_window": (_int(1), 20),
}


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
    return config


# --- the policy --------------------------------------------------------------


def init_weights(rng, hidden):
    """Small random weights (scaled by fan-in), zero biases."""
    return {
        "w1": rng.standard_normal((OBSERVATIONS, hidden)) / np.sqrt(OBSERVATIONS),
        "b1": np.zeros(hidden),
        "w2": rng.standard_normal((hidden, ACTIONS)) / np.sqrt(hidden) * 0.1,
        "b2": np.zeros(ACTIONS),
    }


def forward(weights, obs):
    """Hidden activations and action probabilities for a batch of observations."""
    h = np.tanh(obs @ weights["w1"] + weights["b1"])
    logits = h @ weights["w2"] + weights["b2"]
    logits = logits - logits.max(axis=-1, keepdims=True)
    e = np.exp(logits)
    return h, e / e.sum(axis=-1, keepdims=True)


def discounted(rewards, gamma):
    out = np.empty(len(rewards))
    running = 0.0
    for i in range(len(rewards) - 1, -1, -1):
        running = rewards[i] + gamma * running
        out[i] = running
    return out


def policy_gradient(weights, obs, actions, advantages):
    """The loss -mean(advantage * log pi(action | obs)) and its gradient."""
    h, probs = forward(weights, obs)
    n = len(actions)
    chosen = probs[np.arange(n), actions]
    loss = -float(np.mean(advantages * np.log(chosen + 1e-12)))
    dlogits = probs.copy()
    dlogits[np.arange(n), actions] -= 1.0
    dlogits *= advantages[:, None] / n
    dh = (dlogits @ weights["w2"].T) * (1.0 - h**2)
    grads = {
        "w2": h.T @ dlogits,
        "b2": dlogits.sum(axis=0),
        "w1": obs.T @ dh,
        "b1": dh.sum(axis=0),
    }
    return loss, grads


# --- the trainer's state and its checkpoint ---------------------------------


class Run:
    """Everything that evolves from one episode to the next."""

    def __init__(self, config):
        self.config = config
        self.rng = np.random.Generator(np.random.PCG64(config["seed"]))
        self.weights = init_weights(self.rng, config["hidden"])
        self.adam_m = {k: np.zeros_like(v) for k, v in self.weights.items()}
        self.adam_v = {k: np.zeros_like(v) for k, v in self.weights.items()}
        self.updates = 0
        self.episode = 0  # the last episode finished
        self.best = 0.0
        # returns of the last `eval_window` episodes
        self.recent = []
        self.env = gym.make(ENV_ID)

    def checkpoint_json(self):
        return {
            "format": CHECKPOINT_FORMAT,
            "env": ENV_ID,
            "episode": self.episode,
            "episodes": self.config["episodes"],
            "seed": self.config["seed"],
            "hidden": self.config["hidden"],
            "weights": {k: v.tolist() for k, v in self.weights.items()},
            "adam_m": {k: v.tolist() for k, v in self.adam_m.items()},
            "adam_v": {k: v.tolist() for k, v in self.adam_v.items()},
            "updates": self.updates,
            "best_return": self.best,
            "recent": self.recent,
            "rng_state": self.rng.bit_generator.state,
        }

    def restore(self, checkpoint):
        if checkpoint.get("format") != CHECKPOINT_FORMAT:
            raise ConfigError(f"unsupported checkpoint format {checkpoint.get('format')!r}")
        for key in ("seed", "hidden"):
            if checkpoint[key] != self.config[key]:
                raise ConfigError(
                    f'checkpoint was made with {key} {checkpoint[key]}, config says {self.config[key]}'
                )
        episode = checkpoint["episode"]
        if not isinstance(episode, int) or not 0 <= episode <= self.config["episodes"]:
            raise ConfigError(f"checkpoint episode {episode!r} is outside this run")

        def arrays(name):
            loaded = {k: np.asarray(checkpoint[name][k], dtype=float) for k in self.weights}
            for k, v in loaded.items():
                if v.shape != self.weights[k].shape:
                    raise ConfigError(f"checkpoint {name}.{k} has shape {v.shape}")
            return loaded

        self.weights = arrays("weights")
        self.adam_m = arrays("adam_m")
        self.adam_v = arrays("adam_v")
        self.updates = int(checkpoint["updates"])
        self.best = float(checkpoint["best_return"])
        self.recent = [float(r) for r in checkpoint["recent"]]
        self.episode = episode
        self.rng.bit_generator.state = checkpoint["rng_state"]

    def play_episode(self):
        """Plays one episode with the current policy and learns from it.
        Returns (return, steps, loss)."""
        obs, _ = self.env.reset(seed=int(self.rng.integers(2**31)))
        observations, actions, rewards = [], [], []
        done = False
        while not done:
            _, probs = forward(self.weights, obs)
            action = int(self.rng.random() >= probs[0])
            observations.append(obs)
            actions.append(action)
            obs, reward, terminated, truncated, _ = self.env.step(action)
            rewards.append(float(reward))
            done = terminated or truncated
        loss = self.learn(np.array(observations), np.array(actions), rewards)
        total = float(sum(rewards))
        self.episode += 1
        self.best = max(self.best, total)
        self.recent.append(total)
        del self.recent[: -self.config["eval_window"]]
        return total, len(rewards), loss

    def learn(self, obs, actions, rewards):
        returns = discounted(rewards, self.config["gamma"])
        advantages = (returns - returns.mean()) / (returns.std() + 1e-8)
        loss, grads = policy_gradient(self.weights, obs, actions, advantages)
        self.updates += 1
        b1, b2 = ADAM_BETAS
        lr = self.config["learning_rate"]
        for k, g in grads.items():
            self.adam_m[k] = b1 * self.adam_m[k] + (1 - b1) * g
            self.adam_v[k] = b2 * self.adam_v[k] + (1 - b2) * g * g
            m_hat = self.adam_m[k] / (1 - b1**self.updates)
            v_hat = self.adam_v[k] / (1 - b2**self.updates)
            self.weights[k] -= lr * m_hat / (np.sqrt(v_hat) + ADAM_EPSILON)
        return loss

    def mean_return(self):
        return sum(self.recent) / len(self.recent) if self.recent else 0.0

    def metrics(self, resumed_from):
        return {
            "mean_return": round(self.mean_return(), 6),
            "best_return": round(self.best, 6),
            "eval_episodes": len(self.recent),
            "episodes": self.episode,
            "resumed_from": resumed_from,
        }

    def policy_json(self):
        return {
            "env": ENV_ID,
            "algorithm": "reinforce",
            "hidden": self.config["hidden"],
            "weights": {k: v.tolist() for k, v in self.weights.items()},
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


def main(argv):
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
    total_episodes = config["episodes"]

    while run.episode < total_episodes:
        ret, steps, loss = run.play_episode()
        episode = run.episode
        emit({"type": "episode", "episode": episode, "episodes": total_episodes,
              "return": ret, "steps": steps, "loss": round(loss, 6),
              "mean_return": round(run.mean_return(), 6)})
        if episode % config["checkpoint_every"] == 0:
            write_json_atomically(CHECKPOINT_FILE, run.checkpoint_json())
            emit({"type": "checkpoint", "path": CHECKPOINT_FILE, "episode": episode})

    metrics = run.metrics(resumed_from)
    write_json_atomically(POLICY_FILE, run.policy_json())
    write_json_atomically(RESULT_FILE, metrics)
    emit({"type": "result", **metrics})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
