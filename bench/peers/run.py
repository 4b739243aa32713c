#!/usr/bin/env python3
"""The `peers` rows of `make bench`: the dispatch benchmark's no-work load
through BullMQ, a queue that keeps its jobs in Redis alone, measured in the
same run on the same machine, and trainyard's throughput as a ratio of it.

    python3 bench/peers/run.py --against target/bench.md --markdown target/bench.md

`--against` is the table trainyard-bench wrote in this run: the load (tasks
and slots) and trainyard's throughput come from its dispatch rows. The script
installs BullMQ with `npm ci` (bench/peers/bullmq, its versions pinned by the
lock file) and starts a private `redis-server` without persistence on a free
port. When Node.js, npm or the packages cannot be had, it says so in the
table rather than quote an old figure.
"""
import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BULLMQ = os.path.join(HERE, "bullmq")
# trainyard-bench dispatch's load, when no table says otherwise.
DEFAULT_LOAD = (10000, 512)


def dispatch_load(table):
    """(tasks, slots) of the dispatch benchmark's setup row."""
    m = re.search(r"\| dispatch \| setup \([a-z]+\) \| (\d+) no-work tasks, .*= (\d+) slots", table)
    return (int(m.group(1)), int(m.group(2))) if m else DEFAULT_LOAD


def dispatch_rates(table):
    """Backend -> trainyard's saturated dispatch throughput (tasks/s)."""
    return {
        backend: float(rate)
        for backend, rate in re.findall(
            r"\| dispatch \| throughput \(([a-z]+)\) \| ([0-9.]+) tasks/s", table
        )
    }


def rows(peer, rates):
    """The table's rows: the peer's setup and figure, and each ratio.
    `peer` is the benchmark's result, or a string saying why there is none."""
    if isinstance(peer, str):
        return [("peers", "BullMQ, the same no-work load", f"not measured: {peer}", "", "")]
    out = [
        ("peers", "setup (BullMQ)", f"{peer['jobs']} no-work jobs, {peer['setup']}", "", ""),
        ("peers", "throughput (BullMQ)",
         f"{peer['jobs_per_second']:.0f} jobs/s (submitting took {peer['submitting_seconds'] * 1000:.1f} ms)",
         "", ""),
    ]
    for backend, rate in sorted(rates.items()):
        ratio = rate / peer["jobs_per_second"]
        out.append(("peers", f"trainyard ({backend}) / BullMQ",
                    f"{ratio:.2f} ({rate:.0f} against {peer['jobs_per_second']:.0f} per second)",
                    "> 1", "yes" if ratio > 1 else "NO"))
    return out


def markdown(table_rows):
    return "".join(f"| {' | '.join(r)} |\n" for r in table_rows)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port, seconds=10):
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def install():
    """Installs BullMQ; returns why it cannot, or None."""
    for tool, package in (("node", "nodejs"), ("npm", "npm")):
        if shutil.which(tool) is None:
            return f"{tool} not found (install the Debian package {package})"
    done = subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--silent"], cwd=BULLMQ,
                          capture_output=True, text=True)
    if done.returncode != 0:
        return f"npm ci failed: {done.stderr.strip()[-300:]}"
    return None


def measure(jobs, slots):
    """Runs the load through BullMQ on a private Redis; the result or why not."""
    if shutil.which("redis-server") is None:
        return "redis-server not found (install the Debian package redis-server)"
    version = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
    port = free_port()
    with tempfile.TemporaryDirectory() as data:
        redis = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", data],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            if not wait_for_port(port):
                return "the private redis-server did not start"
            done = subprocess.run(
                ["node", "bench.mjs", "--port", str(port), "--jobs", str(jobs),
                 "--concurrency", str(slots)],
                cwd=BULLMQ, capture_output=True, text=True, timeout=600)
        finally:
            redis.terminate()
            redis.wait()
    if done.returncode != 0:
        return f"the BullMQ run failed: {done.stderr.strip()[-300:]}"
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["setup"] = (f"one worker process × {slots} concurrent jobs, BullMQ "
                       f"{bullmq_version()} on Node {version}, private Redis without persistence")
    return result


def bullmq_version():
    with open(os.path.join(BULLMQ, "package.json")) as f:
        return json.load(f)["dependencies"]["bullmq"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", help="the table trainyard-bench wrote in this run")
    parser.add_argument("--markdown", help="append the rows to this Markdown table")
    args = parser.parse_args()
    table = ""
    if args.against:
        with open(args.against) as f:
            table = f.read()
    jobs, slots = dispatch_load(table)
    peer = install() or measure(jobs, slots)
    out = rows(peer, dispatch_rates(table))
    for r in out:
        print(f"   {r[0]}: {r[1]} = {r[2]}" + (f" (target {r[3]}: {'met' if r[4] == 'yes' else 'MISSED'})" if r[3] else ""))
    if args.markdown:
        with open(args.markdown, "a") as f:
            f.write(markdown(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
