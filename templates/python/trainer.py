#!/usr/bin/env python3
"""A sample trainer for the __NAME__ adapter: a random search for the
number closest to a hidden target, standing in for real training.

Run as `python3 -u trainer.py --config params.json`. It prints one JSON
object per line, which the adapter's `on_output` reads:

    {"type":"episode","episode":N,"episodes":TOTAL,"return":R}

and writes `result.json` (the final metrics) before exiting 0.
"""

import argparse
import json
import random
import sys


def main(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    args = parser.parse_args(argv)
    with open(args.config) as f:
        params = json.load(f)
    rng = random.Random(params["seed"])
    target = rng.uniform(-10, 10)
    best = None
    for episode in range(1, params["episodes"] + 1):
        guess = rng.uniform(-10, 10)
        ret = -abs(guess - target)
        best = ret if best is None else max(best, ret)
        print(json.dumps({"type": "episode", "episode": episode,
                          "episodes": params["episodes"], "return": ret}), flush=True)
    with open("result.json", "w") as f:
        json.dump({"best_return": best, "episodes": params["episodes"]}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
