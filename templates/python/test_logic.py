"""Unit tests of the __NAME__ adapter's logic and its sample trainer, with
plain python3 and no network: `make test` (python3 -m unittest)."""

import json
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import logic

HERE = Path(__file__).resolve().parent


class Params(unittest.TestCase):
    def test_defaults_fill_what_a_task_leaves_out(self):
        self.assertEqual(logic.parse_params("{}"), {"episodes": 20, "seed": 0})
        self.assertEqual(logic.parse_params('{"episodes": 7}')["episodes"], 7)

    def test_bad_params_are_refused_naming_the_field(self):
        for bad, field in [('{"episodes": 0}', "episodes"), ('{"seed": -1}', "seed"),
                           ('{"episodes": "many"}', "episodes"), ('{"episodes": true}', "episodes"),
                           ('{"episods": 3}', "episods"), ("[]", "object"), ("garbage", "JSON")]:
            with self.assertRaises(ValueError) as refused:
                logic.parse_params(bad)
            self.assertIn(field, str(refused.exception), bad)

    def test_the_schema_describes_every_param_with_its_bounds(self):
        schema = logic.params_schema()
        self.assertFalse(schema["additionalProperties"])
        self.assertEqual(set(schema["properties"]), set(logic.PARAMS))
        for key, p in logic.PARAMS.items():
            described = schema["properties"][key]
            self.assertEqual((described["minimum"], described["maximum"]),
                             (p["minimum"], p["maximum"]))
            # What the schema lets through, parse_params takes.
            logic.parse_params(json.dumps({key: described["minimum"]}))
            logic.parse_params(json.dumps({key: described["maximum"]}))
        json.dumps(schema)


class Output(unittest.TestCase):
    def test_episode_lines_are_progress_and_other_lines_are_not(self):
        line = '{"type": "episode", "episode": 3, "episodes": 10, "return": -1.5}'
        self.assertEqual(logic.progress_fields(line), (3, 10, -1.5))
        for other in ["Traceback (most recent call last):", "[]", '{"type": "episode"}',
                      '{"type": "episode", "episode": -1, "episodes": 3, "return": 1}',
                      '{"type": "episode", "episode": 1, "episodes": 3, "return": true}',
                      "[" * 100_000]:
            self.assertIsNone(logic.progress_fields(other), other[:40])

    def test_the_result_holds_the_numbers_of_result_json(self):
        metrics = logic.result_metrics('{"best_return": -0.5, "episodes": 20, "note": "x"}')
        self.assertEqual(metrics, [("best_return", -0.5), ("episodes", 20.0)])
        with self.assertRaises(ValueError):
            logic.result_metrics("[1, 2]")


class Trainer(unittest.TestCase):
    def test_the_sample_trainer_prints_progress_and_leaves_the_declared_metrics(self):
        with tempfile.TemporaryDirectory() as work:
            params = logic.parse_params('{"episodes": 5, "seed": 3}')
            Path(work, "params.json").write_text(json.dumps(params))
            run = subprocess.run([sys.executable, "-u", str(HERE / "trainer.py"),
                                  "--config", "params.json"],
                                 cwd=work, capture_output=True, text=True, timeout=60)
            self.assertEqual(run.returncode, 0, run.stderr)
            progress = [logic.progress_fields(line) for line in run.stdout.splitlines()]
            self.assertEqual([p[0] for p in progress], [1, 2, 3, 4, 5])
            metrics = dict(logic.result_metrics(Path(work, "result.json").read_text()))
            self.assertEqual(sorted(metrics), sorted(logic.RESULT_METRICS))


if __name__ == "__main__":
    unittest.main()
