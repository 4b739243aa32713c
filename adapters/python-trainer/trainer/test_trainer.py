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

        # The first attempt dies at episode 101, after the checkpoint of 80.
        cut = Workdir(self, **params, fail_at_episode=101)
        proc, first_lines = cut.run()
        self.assertEqual(proc.returncode, 3, proc.stderr)
        self.assertEqual(max(returns_by_episode(first_lines)), 100)
        self.assertEqual(cut.read_json("checkpoint.json")["episode"], 80)

        cut.write_params(**params, attempt=2)
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

    def test_fail_at_episode_exits_3_with_a_clear_message(self):
        work = Workdir(self, episodes=50, fail_at_episode=7)
        proc, lines = work.run()
        self.assertEqual(proc.returncode, 3)
        self.assertIn("simulated failure at episode 7", proc.stderr)
        self.assertEqual(max(returns_by_episode(lines)), 6)
        self.assertFalse(os.path.exists(work.file("result.json")))

    def test_fail_until_attempt_spares_later_attempts(self):
        work = Workdir(self, episodes=20, fail_at_episode=5, fail_until_attempt=1, attempt=2)
        proc, _ = work.run()
        self.assertEqual(proc.returncode, 0, proc.stderr)

    def test_invalid_config_exits_2(self):
        for params in ({"learning_rate": 7}, {"episodes": "many"}, {"bogus": 1},
                       {"trace_file": "relative.log"}):
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

    def test_trace_file_records_start_alive_end_for_each_attempt(self):
        work = Workdir(self)
        trace = work.file("trace.jsonl")
        work.write_params(task=42, attempt=1, episodes=30, checkpoint_every=10,
                          fail_at_episode=25, fail_until_attempt=1, trace_file=trace)
        proc, _ = work.run()
        self.assertEqual(proc.returncode, 3, proc.stderr)
        work.write_params(task=42, attempt=2, episodes=30, checkpoint_every=10,
                          fail_at_episode=25, fail_until_attempt=1, trace_file=trace)
        proc, _ = work.run("--resume", "checkpoint.json")
        self.assertEqual(proc.returncode, 0, proc.stderr)

        with open(trace, encoding="utf-8") as f:
            events = [json.loads(line) for line in f]
        self.assertTrue(all(e["task"] == 42 for e in events))
        summary = [(e["attempt"], e["event"], e["episode"]) for e in events]
        first = [(1, "start", 0)] + [(1, "alive", n) for n in range(1, 25)]
        second = [(2, "start", 20)] + [(2, "alive", n) for n in range(21, 31)] + [(2, "end", 30)]
        self.assertEqual(summary, first + second)
        times = [e["t"] for e in events]
        self.assertEqual(times, sorted(times))


if __name__ == "__main__":
    unittest.main()
