"""Tests of the test adapter's wrapper, run as the host runs it: a subprocess
in a fresh working directory holding trainer.py, hooks.py and their JSON
files, with the trace directory in the environment as an operator sets it."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
HOOKS = os.path.join(HERE, "hooks.py")
TRAINER = os.path.join(HERE, "..", "..", "q-learning", "trainer", "trainer.py")


class Workdir:
    """A working directory with the trainer, the wrapper and a trace directory."""

    def __init__(self, testcase):
        self._dir = tempfile.TemporaryDirectory(prefix="hooks-test-")
        testcase.addCleanup(self._dir.cleanup)
        self.path = os.path.join(self._dir.name, "workspace")
        self.traces = os.path.join(self._dir.name, "traces")
        os.mkdir(self.path)
        os.mkdir(self.traces)
        shutil.copy(TRAINER, self.path)
        shutil.copy(HOOKS, self.path)

    def write(self, name, obj):
        with open(os.path.join(self.path, name), "w", encoding="utf-8") as f:
            json.dump(obj, f)

    def file(self, name):
        return os.path.join(self.path, name)

    def run(self, params, hooks, *extra_args, trace_dir=True):
        self.write("params.json", params)
        self.write("hooks.json", hooks)
        env = {"PATH": os.environ.get("PATH", ""), "PYTHONDONTWRITEBYTECODE": "1"}
        if trace_dir:
            env["TRAINYARD_TRACE_DIR"] = self.traces
        proc = subprocess.run(
            [sys.executable, "-u", "hooks.py", "--hooks", "hooks.json",
             "--config", "params.json", *extra_args],
            cwd=self.path, capture_output=True, text=True, timeout=120, env=env,
        )
        lines = [json.loads(line) for line in proc.stdout.splitlines()]
        return proc, lines

    def trace(self, name):
        with open(os.path.join(self.traces, name), encoding="utf-8") as f:
            return [json.loads(line) for line in f]


def returns_by_episode(lines):
    return {l["episode"]: l["return"] for l in lines if l["type"] == "episode"}


class HooksTest(unittest.TestCase):
    def test_trace_records_start_alive_end_for_each_attempt(self):
        work = Workdir(self)
        params = dict(episodes=30, checkpoint_every=10)
        fail = dict(task=42, trace_file="t.jsonl", fail_at_episode=25, fail_until_attempt=1)
        proc, _ = work.run(params, dict(fail, attempt=1))
        self.assertEqual(proc.returncode, 3, proc.stderr)
        proc, _ = work.run(params, dict(fail, attempt=2), "--resume", "checkpoint.json")
        self.assertEqual(proc.returncode, 0, proc.stderr)

        events = work.trace("t.jsonl")
        self.assertTrue(all(e["task"] == 42 for e in events))
        summary = [(e["attempt"], e["event"], e["episode"]) for e in events]
        first = [(1, "start", 0)] + [(1, "alive", n) for n in range(1, 25)]
        second = [(2, "start", 20)] + [(2, "alive", n) for n in range(21, 31)] + [(2, "end", 30)]
        self.assertEqual(summary, first + second)
        times = [e["t"] for e in events]
        self.assertEqual(times, sorted(times))
        pids = {e["attempt"]: e["pid"] for e in events}
        self.assertEqual(len(set(pids.values())), 2, "each attempt is its own process")

    def test_a_simulated_failure_exits_3_with_a_clear_message(self):
        work = Workdir(self)
        proc, lines = work.run(dict(episodes=50), dict(fail_at_episode=7))
        self.assertEqual(proc.returncode, 3)
        self.assertIn("simulated failure at episode 7", proc.stderr)
        self.assertEqual(max(returns_by_episode(lines)), 6)
        self.assertFalse(os.path.exists(work.file("result.json")))

    def test_fail_until_attempt_spares_later_attempts(self):
        work = Workdir(self)
        hooks = dict(attempt=2, fail_at_episode=5, fail_until_attempt=1)
        proc, _ = work.run(dict(episodes=20), hooks)
        self.assertEqual(proc.returncode, 0, proc.stderr)

    def test_a_crashed_attempt_resumed_from_its_checkpoint_ends_as_the_uninterrupted_run(self):
        params = dict(episodes=200, seed=5, checkpoint_every=40, eval_window=60)
        whole = Workdir(self)
        proc, whole_lines = whole.run(params, {})
        self.assertEqual(proc.returncode, 0, proc.stderr)

        cut = Workdir(self)
        proc, first = cut.run(params, dict(attempt=1, fail_at_episode=101, fail_until_attempt=1))
        self.assertEqual(proc.returncode, 3, proc.stderr)
        self.assertEqual(max(returns_by_episode(first)), 100)
        proc, resumed = cut.run(params, dict(attempt=2, fail_at_episode=101, fail_until_attempt=1),
                                "--resume", "checkpoint.json")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        expected = {n: r for n, r in returns_by_episode(whole_lines).items() if n > 80}
        self.assertEqual(returns_by_episode(resumed), expected)

    def test_unusable_hooks_exit_2_and_write_nothing(self):
        cases = [
            ({"trace_file": "/tmp/hooks-test-outside.jsonl"}, True, "plain file name"),
            ({"trace_file": "../outside.jsonl"}, True, "plain file name"),
            ({"trace_file": "t.jsonl"}, False, "TRAINYARD_TRACE_DIR"),
            ({"trace": "t.jsonl"}, True, "unknown hook keys: trace"),
        ]
        for hooks, trace_dir, says in cases:
            with self.subTest(hooks=hooks, trace_dir=trace_dir):
                work = Workdir(self)
                proc, lines = work.run(dict(episodes=5), hooks, trace_dir=trace_dir)
                self.assertEqual(proc.returncode, 2, proc.stderr)
                self.assertIn(says, proc.stderr)
                self.assertEqual(lines, [])
                self.assertEqual(os.listdir(work.traces), [])
        self.assertFalse(os.path.exists("/tmp/hooks-test-outside.jsonl"))


if __name__ == "__main__":
    unittest.main()
