#!/usr/bin/env python3
"""A sample trainer: an epsilon-greedy agent learning which arm of a
multi-armed bandit pays best. Replace it with your own.

The adapter writes this file and `params.json` into the attempt's workspace
and runs `python3 -u train.py params.json`. It speaks to the adapter on
stdout, one JSON object per line:

    {"episode": N, "episodes": TOTAL, "return": R, "epsilon": E}

and leaves `result.json` (the final metrics) in the workspace. Exit codes:
0 done, 2 unusable params (a retry cannot help), anything else a crash.
"""

import json
import random
import sys

PULLS_PER_EPISODE = 20


def main(path):
    try:
        with open(path) as f:
            params = json.load(f)
        episodes = int(params["episodes"])
        arms = int(params["arms"])
        epsilon = float(params["epsilon"])
        rng = random.Random(int(params["seed"]))
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"train.py: unusable params in {path}: {e}", file=sys.stderr)
        return 2

    payout = [rng.random() for _ in range(arms)]
    pulls = [0] * arms
    value = [0.0] * arms
    returns = []
    for episode in range(1, episodes + 1):
        total = 0.0
        for _ in range(PULLS_PER_EPISODE):
            if rng.random() < epsilon:
                arm = rng.randrange(arms)
            else:
                arm = max(range(arms), key=value.__getitem__)
            reward = 1.0 if rng.random() < payout[arm] else 0.0
            pulls[arm] += 1
            value[arm] += (reward - value[arm]) / pulls[arm]
            total += reward
        returns.append(total)
        print(json.dumps({"episode": episode, "episodes": episodes,
                          "return": total, "epsilon": epsilon}), flush=True)

    last = returns[-min(len(returns), 20):]
    result = {
        "mean_return": sum(last) / len(last),
        "best_possible": PULLS_PER_EPISODE * max(payout),
        "episodes": episodes,
    }
    with open("result.json", "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: train.py PARAMS.json", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
