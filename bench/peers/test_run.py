"""The peers script's reading of trainyard-bench's table and its rows."""
import unittest

from run import DEFAULT_LOAD, dispatch_load, dispatch_rates, rows

TABLE = """| benchmark | measure | figure | target | met |
|---|---|---|---|---|
| dispatch | setup (sqlite) | 10000 no-work tasks, 16 light hosts × 32 slots = 512 slots |  |  |
| dispatch | throughput (sqlite) | 5112 tasks/s | >= 5000 tasks/s | yes |
| dispatch | setup (postgres) | 10000 no-work tasks, 16 light hosts × 32 slots = 512 slots |  |  |
| dispatch | throughput (postgres) | 2080 tasks/s | >= 5000 tasks/s | NO |
| spawn | throughput (sqlite) | 336 tasks/s |  |  |
"""


class ReadingTheTable(unittest.TestCase):
    def test_the_load_and_each_backends_dispatch_rate_come_from_the_table(self):
        self.assertEqual(dispatch_load(TABLE), (10000, 512))
        self.assertEqual(dispatch_rates(TABLE), {"sqlite": 5112.0, "postgres": 2080.0})

    def test_without_a_table_the_load_is_the_benchmarks_default_and_there_is_no_ratio(self):
        self.assertEqual(dispatch_load(""), DEFAULT_LOAD)
        self.assertEqual(dispatch_rates(""), {})


class Rows(unittest.TestCase):
    PEER = {"jobs": 10000, "jobs_per_second": 4000.0, "submitting_seconds": 0.25,
            "setup": "one worker process × 512 concurrent jobs"}

    def test_each_backend_gets_its_ratio_to_the_peer(self):
        out = rows(self.PEER, {"sqlite": 5112.0, "postgres": 2080.0})
        ratios = {r[1]: (r[2], r[4]) for r in out if "/ BullMQ" in r[1]}
        self.assertEqual(ratios["trainyard (sqlite) / BullMQ"],
                         ("1.28 (5112 against 4000 per second)", "yes"))
        self.assertEqual(ratios["trainyard (postgres) / BullMQ"],
                         ("0.52 (2080 against 4000 per second)", "NO"))

    def test_a_peer_that_could_not_run_is_said_not_measured_with_the_reason(self):
        out = rows("npm not found (install the Debian package npm)", {"sqlite": 5112.0})
        self.assertEqual(len(out), 1)
        self.assertIn("not measured: npm not found", out[0][2])


if __name__ == "__main__":
    unittest.main()
