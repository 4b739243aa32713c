"""Tests of the reference trainer, run as the host runs it: a subprocess in a
fresh working directory, configured through a params.json file."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

TRAINER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "trainer.py")


class Workdir:
    """A temporary working directory holding one run's params.json."""

    def __init__(self, testcase, **params):
        self._dir = tempfile.TemporaryDirectory(prefix="trainer-test-")
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

    def run(self, *extra_args):
        proc = subprocess.run(
            [sys.executable, "-u", TRAINER, "--config", "params.json", *extra_args],
            cwd=self.path,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        )
        lines = [json.loads(line) for line in proc.stdout.splitlines()]
        return proc, lines


def returns_by_episode(lines):
    return {l["episode"]: l["return"] for l in lines if l["type"] == "episode"}


def result_line(lines):
    results = [l for l in lines if l["type"] == "result"]
    assert len(results) == 1, f"expected one result line, got {results}"
    return results[0]


class TrainerTest(unittest.TestCase):
    def test_same_seed_gives_same_returns_and_other_seed_differs(self):
        runs = []
        for seed in (11, 11, 12):
            work = Workdir(self, episodes=120, seed=seed)
            proc, lines = work.run()
            self.assertEqual(proc.returncode, 0, proc.stderr)
            runs.append((returns_by_episode(lines), work.read_json("policy.json")))
        self.assertEqual(len(runs[0][0]), 120)
        self.assertEqual(runs[0], runs[1])
        self.assertNotEqual(runs[0][0], runs[2][0])

    def test_every_line_follows_the_protocol(self):
        work = Workdir(self, episodes=60, checkpoint_every=25)
        proc, lines = work.run()
        self.assertEqual(proc.returncode, 0, proc.stderr)
        episodes = [l for l in lines if l["type"] == "episode"]
        self.assertEqual([l["episode"] for l in episodes], list(range(1, 61)))
        for l in episodes:
            self.assertEqual(set(l), {"type", "episode", "episodes", "return", "steps", "epsilon"})
            self.assertEqual(l["episodes"], 60)
            self.assertGreaterEqual(l["steps"], 1)
        checkpoints = [l for l in lines if l["type"] == "checkpoint"]
        self.assertEqual(checkpoints, [
            {"type": "checkpoint", "path": "checkpoint.json", "episode": 25},
            {"type": "checkpoint", "path": "checkpoint.json", "episode": 50},
        ])
        self.assertEqual(lines[-1]["type"], "result")
        self.assertFalse(os.path.exists(work.file("checkpoint.json.tmp")))

    def test_resume_from_checkpoint_equals_uninterrupted_run(self):
        params = dict(episodes=200, seed=5, checkpoint_every=40, eval_window=60)
        whole = Workdir(self, **params)
        proc, whole_lines = whole.run()
        self.assertEqual(proc.returncode, 0, proc.stderr)

        # A first run that stops at episode 100 leaves the checkpoint of 80,
        # as one that died there would. Only the episode count bounds the
        # loop, so its first 100 episodes are those of the whole run.
        cut = Workdir(self, **{**params, "episodes": 100})
        proc, first_lines = cut.run()
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(max(returns_by_episode(first_lines)), 100)
        self.assertEqual(cut.read_json("checkpoint.json")["episode"], 80)

        cut.write_params(**params)
        proc, resumed_lines = cut.run("--resume", "checkpoint.json")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(resumed_lines[0], {"type": "resumed", "from_episode": 80})
        resumed = returns_by_episode(resumed_lines)
        self.assertEqual(sorted(resumed), list(range(81, 201)))
        expected = {n: r for n, r in returns_by_episode(whole_lines).items() if n > 80}
        self.assertEqual(resumed, expected)

        whole_result = result_line(whole_lines)
        resumed_result = result_line(resumed_lines)
        self.assertEqual(whole_result["resumed_from"], 0)
        self.assertEqual(resumed_result["resumed_from"], 80)
        # The eval window (60) reaches back before the checkpoint: the
        # checkpoint must carry those returns for the metrics to agree.
        strip = lambda r: {k: v for k, v in r.items() if k != "resumed_from"}
        self.assertEqual(strip(resumed_result), strip(whole_result))
        self.assertEqual(cut.read_json("policy.json"), whole.read_json("policy.json"))
        self.assertEqual({"type": "result", **cut.read_json("result.json")}, resumed_result)

    def test_default_task_learns(self):
        work = Workdir(self)
        proc, lines = work.run()
        self.assertEqual(proc.returncode, 0, proc.stderr)
        returns = [l["return"] for l in lines if l["type"] == "episode"]
        self.assertEqual(len(returns), 300)
        first = sum(returns[:50]) / 50
        last = sum(returns[-50:]) / 50
        self.assertGreater(last, first + 0.5, f"first 50 mean {first}, last 50 mean {last}")
        result = work.read_json("result.json")
        self.assertAlmostEqual(result["mean_return"], last, places=5)
        self.assertGreater(result["success_rate"], 0.5)
        self.assertEqual(result["episodes"], 300)
        self.assertEqual(result["resumed_from"], 0)
        self.assertEqual(result_line(lines), {"type": "result", **result})
        policy = work.read_json("policy.json")
        self.assertEqual(len(policy["q"]), policy["rows"] * policy["cols"])
        self.assertEqual(work.read_json("outputs/policy.json"), policy, "the output the user keeps")

    def test_invalid_config_exits_2(self):
        for params in ({"learning_rate": 7}, {"episodes": "many"}, {"bogus": 1},
                       {"trace_file": "/tmp/trainer-test.log"}, {"fail_at_episode": 3}):
            with self.subTest(params=params):
                work = Workdir(self, **params)
                proc, lines = work.run()
                self.assertEqual(proc.returncode, 2)
                self.assertIn("invalid configuration", proc.stderr)
                self.assertEqual(lines, [])

    def test_unreadable_checkpoint_exits_2(self):
        work = Workdir(self, episodes=10)
        with open(work.file("checkpoint.json"), "w", encoding="utf-8") as f:
            f.write('{"format": 1, "episode": 3')
        proc, _ = work.run("--resume", "checkpoint.json")
        self.assertEqual(proc.returncode, 2)
        self.assertIn("cannot resume from checkpoint.json", proc.stderr)


if __name__ == "__main__":
    unittest.main()
