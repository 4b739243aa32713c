"""Unit tests of the cartpole-py adapter's modules, run natively (`make -C
adapters test`) against the stub bindings `componentize-py bindings`
generates: their types are plain dataclasses, as in the component."""

import json
import unittest

from wit_world.imports import types

import outcome
import params
import plan
import protocol


def task(params_text, checkpoint=None, kind="cartpole"):
    return types.Task(id=4, attempt=2, kind=kind, params=params_text,
                      checkpoint=checkpoint, workspace="/workspace")


def exit_report(status, stderr=""):
    return types.ExitReport(status=status, stderr_tail=stderr, duration_ms=5000)


def unread():
    raise AssertionError("the workspace must not be read after a failed exit")


class ParamsTest(unittest.TestCase):
    def error(self, text):
        with self.assertRaises(params.ParamsError) as caught:
            params.parse(text)
        return str(caught.exception)

    def test_empty_object_gets_every_default(self):
        self.assertEqual(params.parse("{}"), {
            "episodes": 300, "learning_rate": 0.01, "gamma": 0.99, "hidden": 32,
            "seed": 0, "checkpoint_every": 50, "eval_window": 20})

    def test_every_key_is_read_and_rates_are_floats(self):
        p = params.parse('{"episodes": 20000, "learning_rate": 1, "gamma": 0, "hidden": 256,'
                         ' "seed": 7, "checkpoint_every": 10, "eval_window": 1000}')
        self.assertEqual(p["episodes"], 20000)
        self.assertEqual(json.dumps(p["learning_rate"]), "1.0")
        self.assertEqual(json.dumps(p["gamma"]), "0.0")
        self.assertEqual(p["eval_window"], 1000)

    def test_out_of_range_or_mistyped_values_name_the_key_and_its_range(self):
        for text, message in [
            ('{"episodes": 0}', '"episodes" must be an integer from 1 to 20000, got 0'),
            ('{"episodes": 20001}', '"episodes" must be an integer from 1 to 20000, got 20001'),
            ('{"episodes": 5.0}', '"episodes" must be an integer from 1 to 20000, got 5.0'),
            ('{"episodes": true}', '"episodes" must be an integer from 1 to 20000, got true'),
            ('{"learning_rate": 0}', '"learning_rate" must be a number in (0, 1], got 0'),
            ('{"gamma": 1.5}', '"gamma" must be a number in [0, 1], got 1.5'),
            ('{"hidden": 0}', '"hidden" must be an integer from 1 to 256, got 0'),
            ('{"seed": -3}', '"seed" must be an integer of at least 0, got -3'),
            ('{"eval_window": "20"}', '"eval_window" must be an integer from 1 to 1000, got "20"'),
        ]:
            self.assertEqual(self.error(text), f"invalid params: {message}")

    def test_unknown_keys_non_objects_and_bad_json_are_refused(self):
        self.assertEqual(
            self.error('{"epsilon": 1}'),
            'invalid params: unknown key "epsilon"; accepted keys are episodes, learning_rate,'
            ' gamma, hidden, seed, checkpoint_every, eval_window')
        self.assertTrue(self.error("[1]").startswith("invalid params: expected a JSON object"))
        self.assertTrue(self.error("{").startswith("invalid params: not valid JSON"))
        self.assertTrue(self.error('{"gamma": NaN}').startswith("invalid params: not valid JSON"))
        self.assertTrue(self.error("[" * 100_000).startswith("invalid params: not valid JSON"))
        self.assertLess(len(self.error('{"seed": "%s"}' % ("x" * 10_000))), 300)

    def test_no_key_accepts_a_path(self):
        for key in params.ACCEPTED_KEYS:
            self.error(json.dumps({key: "/etc/passwd"}))


class PlanTest(unittest.TestCase):
    def test_plan_runs_the_bundled_trainer_and_resumes_from_a_workspace_checkpoint(self):
        checkpoint = types.Checkpoint_WorkspaceFile("checkpoint.json")
        prepared = plan.prepare(task('{"episodes": 150, "seed": 3}', checkpoint))
        files = {f.path: f.contents for f in prepared.plan.files}
        self.assertEqual(files["trainer.py"], plan.TRAINER_SOURCE)
        self.assertIn(b"CartPole-v1", plan.TRAINER_SOURCE)
        config = json.loads(files["params.json"])
        self.assertEqual((config["episodes"], config["seed"], config["gamma"]), (150, 3, 0.99))
        self.assertEqual(list(config), list(params.ACCEPTED_KEYS))
        command = prepared.plan.command
        self.assertEqual(command.program, "python3")
        self.assertEqual(command.args, ["-u", "trainer.py", "--config", "params.json",
                                        "--resume", "checkpoint.json"])
        self.assertEqual(prepared.run_summary(),
                         "150 episodes, seed 3, learning rate 0.01, gamma 0.99, 32 hidden units")

    def test_another_kind_bad_params_or_an_external_checkpoint_are_refused(self):
        for t, message in [
            (task("{}", kind="q-learning"),
             'this adapter runs tasks of kind "cartpole" only, not "q-learning"'),
            (task('{"gamma": 2}'), 'invalid params: "gamma" must be a number in [0, 1], got 2'),
            (task("{}", types.Checkpoint_External("s3://bucket/ckpt")),
             "the reference trainer resumes only from a checkpoint file in the workspace; "
             "an external checkpoint (s3://bucket/ckpt) is not supported"),
        ]:
            with self.assertRaises(plan.PlanError) as caught:
                plan.prepare(t)
            self.assertEqual(str(caught.exception), message)


class ProtocolTest(unittest.TestCase):
    def test_episode_line_reports_the_return_and_its_other_numbers_as_metrics(self):
        p = protocol.read_line('{"type":"episode","episode":3,"episodes":300,"return":41.0,'
                               '"steps":41,"loss":-0.012,"mean_return":23.5,"note":"x","flag":true}')
        self.assertEqual((p.episode, p.total_episodes, p.episode_return), (3, 300, 41.0))
        self.assertEqual([(m.name, m.value) for m in p.metrics],
                         [("loss", -0.012), ("mean_return", 23.5), ("steps", 41.0)])
        many = "".join(f',"m{i:03}":{i}' for i in range(100))
        line = '{"type":"episode","episode":1,"episodes":2,"return":9%s}' % many
        self.assertEqual(len(protocol.read_line(line).metrics), protocol.MAX_PROGRESS_METRICS)

    def test_checkpoint_and_resumed_lines(self):
        p = protocol.read_line('{"type":"checkpoint","path":"checkpoint.json","episode":50}')
        self.assertEqual(p.episode, 50)
        self.assertEqual(p.checkpoint, types.Checkpoint_WorkspaceFile("checkpoint.json"))
        r = protocol.read_line('{"type":"resumed","from_episode":150}')
        self.assertEqual((r.episode, r.message), (150, "resumed from episode 150"))

    def test_a_checkpoint_outside_the_workspace_is_not_handed_on(self):
        for path in ["/etc/passwd", "../other/checkpoint.json", "a/../../b", ""]:
            line = json.dumps({"type": "checkpoint", "path": path, "episode": 5})
            with self.assertRaises(protocol.UnsafeCheckpoint):
                protocol.read_line(line)

    def test_anything_else_is_no_progress(self):
        for line in ["", "hello", "{", "{}", "[1,2,3]", '{"type":"result","mean_return":0.6}',
                     '{"type":"episode","episode":-1,"episodes":3,"return":0}',
                     '{"type":"episode","episode":1,"episodes":3,"return":NaN}',
                     '{"type":"episode","episode":1,"episodes":3,"return":1e999}',
                     '{"type":"episode","episode":"1","episodes":3,"return":0}',
                     '{"type":"episode","episode":true,"episodes":3,"return":0}',
                     '{"type":"checkpoint","episode":5}', '{"type":7}',
                     "{" + "[" * 100_000, "\0\uffffgarbage\U0001F980"]:
            self.assertIsNone(protocol.read_line(line), line[:80])


class OutcomeTest(unittest.TestCase):
    RESULT = ('{"mean_return":476.25,"best_return":500.0,"eval_episodes":20,'
              '"episodes":300,"resumed_from":150,"note":"text"}')

    def test_a_clean_exit_gives_every_metric_the_policy_and_a_summary(self):
        result = outcome.decide(exit_report(types.ExitStatus_Exited(0)),
                                lambda: outcome.Outputs(self.RESULT, True))
        self.assertEqual([m.name for m in result.metrics],
                         ["best_return", "episodes", "eval_episodes", "mean_return", "resumed_from"])
        self.assertEqual(result.checkpoint, types.Checkpoint_WorkspaceFile("policy.json"))
        self.assertEqual(result.summary,
                         "mean return 476.2 over the last 20 episodes (best 500) after 300 episodes")

    def test_a_clean_exit_without_a_valid_result_is_retryable(self):
        for outputs, reason in [
            (outcome.Outputs(FileNotFoundError(), True),
             "left no readable result.json: the file does not exist"),
            (outcome.Outputs("{", True), "is not valid: not JSON"),
            (outcome.Outputs("[1]", True), "is not valid: not a JSON object"),
            (outcome.Outputs('{"mean_return":0.6,"success_rate":0.9,"eval_episodes":50}', False),
             '"best_return" is missing or not a number'),
        ]:
            with self.assertRaises(outcome.FinishError) as caught:
                outcome.decide(exit_report(types.ExitStatus_Exited(0)), lambda: outputs)
            self.assertTrue(caught.exception.retryable)
            self.assertIn(reason, str(caught.exception))

    def test_exit_code_2_is_final_and_crashes_are_retryable_with_the_stderr_tail(self):
        with self.assertRaises(outcome.FinishError) as refused:
            outcome.decide(exit_report(types.ExitStatus_Exited(2), "trainer: invalid configuration: bad\n"), unread)
        self.assertFalse(refused.exception.retryable)
        self.assertEqual(str(refused.exception), "trainer refused its configuration (exit code 2): "
                                                 "trainer: invalid configuration: bad")
        stderr = "".join(f"line {n}\n" for n in range(1, 31))
        with self.assertRaises(outcome.FinishError) as crashed:
            outcome.decide(exit_report(types.ExitStatus_Exited(3), stderr), unread)
        self.assertTrue(crashed.exception.retryable)
        self.assertEqual(str(crashed.exception), "trainer exited with code 3: "
                         + "\n".join(f"line {n}" for n in range(19, 31)))
        for status in [types.ExitStatus_Signaled(9), types.ExitStatus_NotLaunched()]:
            with self.assertRaises(outcome.FinishError) as other:
                outcome.decide(exit_report(status), unread)
            self.assertTrue(other.exception.retryable)
        huge = outcome.stderr_tail("é" * 100_000)
        self.assertTrue(huge.startswith("…é") and len(huge.encode()) < 4096)


if __name__ == "__main__":
    unittest.main()
