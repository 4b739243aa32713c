"""Tests of the CartPole trainer, run as the host runs it: a subprocess in a
fresh working directory, configured through a params.json file. They need
numpy and gymnasium: `make -C adapters test` runs them in the virtual
environment it builds from cartpole/requirements.txt."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

TRAINER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "trainer.py")

# A random policy averages about 22 on CartPole-v1. With the default params
# (300 episodes) the last 20 episodes average 270-500 over seeds 0-11,
# mostly above 450; the bound leaves room for another numpy or CPU.
LEARNED_MEAN_RETURN = 150.0


class Workdir:
    """A temporary working directory holding one run's params.json."""

    def __init__(self, testcase, **params):
        self._dir = tempfile.TemporaryDirectory(prefix="cartpole-test-")
        testcase.addCleanup(self._dir.cleanup)
        self.path = self._dir.name
        self.write_params(**params)

    def write_params(self, **params):
        with open(self.file("params.json"), "w", encoding="utf-8") as f:
            json.dump(params, f)

    def file(self, name):
        return os.path.join(self.path, name)

    def read_json(self, name):
        with open(self.file(name), encoding="utf-8") as f:
            return json.load(f)

    def run(self, *extra_args, python=(sys.executable,)):
        proc = subprocess.run(
            [*python, "-u", TRAINER, "--config", "params.json", *extra_args],
            cwd=self.path,
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        )
        lines = [json.loads(line) for line in proc.stdout.splitlines()]
        return proc, lines


def episode_lines(lines):
    return {l["episode"]: l for l in lines if l["type"] == "episode"}


def result_line(lines):
    results = [l for l in lines if l["type"] == "result"]
    assert len(results) == 1, f"expected one result line, got {results}"
    return results[0]


class TrainerTest(unittest.TestCase):
    def test_default_task_learns_far_beyond_a_random_policy(self):
        for seed in (0, 6):  # 6 is the slowest learner of seeds 0-11
            with self.subTest(seed=seed):
                work = Workdir(self, seed=seed)
                proc, lines = work.run()
                self.assertEqual(proc.returncode, 0, proc.stderr)
                returns = [l["return"] for l in lines if l["type"] == "episode"]
                self.assertEqual(len(returns), 300)
                first, last = sum(returns[:20]) / 20, sum(returns[-20:]) / 20
                self.assertLess(first, 100, "an untrained policy balances briefly")
                self.assertGreater(last, LEARNED_MEAN_RETURN, f"first 20: {first}, last 20: {last}")
                result = work.read_json("result.json")
                self.assertAlmostEqual(result["mean_return"], last, places=5)
                self.assertEqual(result["best_return"], max(returns))
                self.assertEqual((result["episodes"], result["eval_episodes"]), (300, 20))
                self.assertEqual(result_line(lines), {"type": "result", **result})
                policy = work.read_json("policy.json")
                self.assertEqual(len(policy["weights"]["w1"]), 4)
                self.assertEqual(len(policy["weights"]["w1"][0]), 32)

    def test_every_line_follows_the_protocol(self):
        work = Workdir(self, episodes=30, checkpoint_every=12, eval_window=5)
        proc, lines = work.run()
        self.assertEqual(proc.returncode, 0, proc.stderr)
        episodes = [l for l in lines if l["type"] == "episode"]
        self.assertEqual([l["episode"] for l in episodes], list(range(1, 31)))
        for n, l in enumerate(episodes, start=1):
            self.assertEqual(set(l), {"type", "episode", "episodes", "return", "steps",
                                      "loss", "mean_return"})
            self.assertEqual(l["episodes"], 30)
            # CartPole pays 1 per step the pole stays up.
            self.assertEqual(l["return"], l["steps"])
            window = [e["return"] for e in episodes[max(0, n - 5):n]]
            self.assertAlmostEqual(l["mean_return"], sum(window) / len(window), places=5)
        checkpoints = [l for l in lines if l["type"] == "checkpoint"]
        self.assertEqual(checkpoints, [
            {"type": "checkpoint", "path": "checkpoint.json", "episode": 12},
            {"type": "checkpoint", "path": "checkpoint.json", "episode": 24},
        ])
        self.assertEqual(lines[-1]["type"], "result")
        self.assertFalse(os.path.exists(work.file("checkpoint.json.tmp")))

    def test_resume_from_checkpoint_equals_uninterrupted_run(self):
        params = dict(episodes=90, seed=5, checkpoint_every=30, eval_window=40)
        whole = Workdir(self, **params)
        proc, whole_lines = whole.run()
        self.assertEqual(proc.returncode, 0, proc.stderr)

        # A first run that stops at episode 50 leaves the checkpoint of 30,
        # as one that died there would. Only the episode count bounds the
        # loop, so its first 50 episodes are those of the whole run.
        cut = Workdir(self, **{**params, "episodes": 50})
        proc, first_lines = cut.run()
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(max(episode_lines(first_lines)), 50)
        self.assertEqual(cut.read_json("checkpoint.json")["episode"], 30)

        cut.write_params(**params)
        proc, resumed_lines = cut.run("--resume", "checkpoint.json")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(resumed_lines[0], {"type": "resumed", "from_episode": 30})
        resumed = episode_lines(resumed_lines)
        self.assertEqual(sorted(resumed), list(range(31, 91)))
        expected = {n: l for n, l in episode_lines(whole_lines).items() if n > 30}
        # Returns, losses and the running mean all continue the same curve.
        self.assertEqual(resumed, expected)

        whole_result = result_line(whole_lines)
        resumed_result = result_line(resumed_lines)
        self.assertEqual((whole_result["resumed_from"], resumed_result["resumed_from"]), (0, 30))
        # The eval window (40) and the best return reach back before the
        # checkpoint: the checkpoint must carry them for the metrics to agree.
        strip = lambda r: {k: v for k, v in r.items() if k != "resumed_from"}
        self.assertEqual(strip(resumed_result), strip(whole_result))
        self.assertEqual(cut.read_json("policy.json"), whole.read_json("policy.json"))

    def test_invalid_config_exits_2(self):
        for params in ({"learning_rate": 7}, {"episodes": "many"}, {"gamma": -1},
                       {"hidden": 0}, {"epsilon": 0.1}):
            with self.subTest(params=params):
                work = Workdir(self, **params)
                proc, lines = work.run()
                self.assertEqual(proc.returncode, 2)
                self.assertIn("invalid configuration", proc.stderr)
                self.assertEqual(lines, [])

    def test_unreadable_or_foreign_checkpoint_exits_2(self):
        work = Workdir(self, episodes=4, checkpoint_every=2, seed=1)
        proc, _ = work.run()
        self.assertEqual(proc.returncode, 0, proc.stderr)
        for params, says in (({"episodes": 4, "seed": 2}, "made with seed 1"),
                             ({"episodes": 4, "seed": 1, "hidden": 8}, "made with hidden 32")):
            with self.subTest(params=params):
                work.write_params(**params)
                proc, _ = work.run("--resume", "checkpoint.json")
                self.assertEqual(proc.returncode, 2)
                self.assertIn(says, proc.stderr)
        with open(work.file("checkpoint.json"), "w", encoding="utf-8") as f:
            f.write('{"format": 1, "episode": 3')
        work.write_params(episodes=4, seed=1)
        proc, _ = work.run("--resume", "checkpoint.json")
        self.assertEqual(proc.returncode, 2)
        self.assertIn("cannot resume from checkpoint.json", proc.stderr)

    def test_an_interpreter_without_the_libraries_exits_1_naming_them(self):
        work = Workdir(self)
        # -S leaves site-packages out, as a python3 without the packages would.
        proc, lines = work.run(python=(sys.executable, "-S"))
        self.assertEqual(proc.returncode, 1)
        self.assertIn("this trainer needs numpy and gymnasium", proc.stderr)
        self.assertEqual(lines, [])


if __name__ == "__main__":
    unittest.main()
