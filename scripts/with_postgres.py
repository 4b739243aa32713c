#!/usr/bin/env python3
"""Runs a command with a PostgreSQL server the test suite may create databases on.

    python3 scripts/with_postgres.py [--durable] -- COMMAND [ARG...]

With TRAINYARD_TEST_DATABASE_URL set, that server is used: it is checked to
answer, then COMMAND runs with the variable unchanged.

Without it, a private server is started for COMMAND alone, the way the tests
start their own redis-server: `initdb` and `pg_ctl` of the installed
PostgreSQL (found in PATH or under /usr/lib/postgresql/*/bin, Debian package
`postgresql`), trust authentication for the superuser `postgres`, listening
on 127.0.0.1 only, on a free port, with no Unix socket, its data in
target/postgres/run-<pid>. COMMAND gets TRAINYARD_TEST_DATABASE_URL pointing
at it. The server is stopped and its data removed when COMMAND ends, fails,
or is interrupted (Ctrl-C, SIGTERM); a server left behind by a run that was
killed outright is stopped and removed by the next run.

PostgreSQL refuses to run as root. When this script runs as root, the server
runs as an unprivileged account: `postgres` (created by the Debian package)
if it exists, else `nobody`; its data directory is given to that account.

The test server trades durability for speed (fsync off) unless --durable is
given, as `make bench` does so that its figures are those of a real server.

Exit status: COMMAND's, or 1 (with a message) if no server could be had.
"""

import fcntl
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "target" / "postgres"
START_ATTEMPTS = 3
START_TIMEOUT_S = 60


def fail(message):
    sys.exit(f"error: {message}")


def check_server(url):
    """Fails with a clear message unless the server of `url` accepts TCP."""
    parsed = urlparse(url)
    if parsed.scheme not in ("postgres", "postgresql"):
        fail(f"TRAINYARD_TEST_DATABASE_URL must be a postgres:// URL, got {url!r}")
    host, port = parsed.hostname or "127.0.0.1", parsed.port or 5432
    try:
        socket.create_connection((host, port), timeout=2).close()
    except OSError as e:
        fail(
            f"PostgreSQL is not reachable at {host}:{port} ({e}), the server of "
            "TRAINYARD_TEST_DATABASE_URL. Start it, or unset the variable to let "
            "the tests start a private one (Debian package postgresql)."
        )


def find_binaries():
    """The directory holding initdb and pg_ctl: PATH first, then the newest
    version under /usr/lib/postgresql."""
    initdb = shutil.which("initdb")
    if initdb and shutil.which("pg_ctl"):
        return Path(initdb).resolve().parent
    versions = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0,
    )
    for candidate in reversed(versions):
        bindir = Path(candidate).parent
        if (bindir / "pg_ctl").exists():
            return bindir
    fail(
        "initdb and pg_ctl not found (searched PATH and /usr/lib/postgresql/*/bin): "
        "the tests start a private PostgreSQL server with them. Install the Debian "
        "package postgresql, or set TRAINYARD_TEST_DATABASE_URL to a server where "
        "the tests may create databases."
    )


def server_account():
    """The account the server runs as: ourselves, unless we are root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    fail("running as root, and neither a `postgres` nor a `nobody` account exists to run PostgreSQL as")


def as_account(account):
    """subprocess arguments that run a child as `account` (or as ourselves)."""
    if account is None:
        return {}
    return {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clear_stale_runs(bindir, account):
    """Stops and removes the servers of earlier runs whose script is gone: a
    running script holds the lock of its run directory until it exits."""
    if not RUNS.is_dir():
        return
    for run in RUNS.glob("run-*"):
        try:
            with open(run / "lock", "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue  # a live run
        except OSError:
            pass  # no lock file: a run that never got going
        data = run / "data"
        if (data / "postmaster.pid").exists():
            print(f"stopping the private PostgreSQL left behind in {run.relative_to(ROOT)}", flush=True)
            subprocess.run(
                [bindir / "pg_ctl", "stop", "-D", data, "-m", "immediate", "-s"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                check=False,
                cwd=RUNS,
                **as_account(account),
            )
        shutil.rmtree(run, ignore_errors=True)


def prepare_run(account):
    """A fresh run directory for this script, owned by the server's account,
    and the open lock file that marks it as in use while this script lives."""
    run = RUNS / f"run-{os.getpid()}"
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    lock = open(run / "lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    # The server's account must reach its data directory through target/.
    for parent in (run, RUNS, RUNS.parent):
        parent.chmod(parent.stat().st_mode | 0o011)
    if account is not None:
        os.chown(run, account.pw_uid, account.pw_gid)
    return run, lock


def initdb(bindir, run, account):
    result = subprocess.run(
        [bindir / "initdb", "-D", run / "data", "-U", "postgres", "-A", "trust",
         "-E", "UTF8", "--locale=C", "--no-sync"],
        capture_output=True,
        text=True,
        check=False,
        cwd=run,
        **as_account(account),
    )
    if result.returncode != 0:
        hint = ""
        if account is not None:
            hint = f" (it runs as `{account.pw_name}`, who must be able to reach {run})"
        fail(f"initdb failed in {run / 'data'}{hint}:\n{result.stdout}{result.stderr}")


def start_server(bindir, run, account, durable):
    """Starts the server on a free port; returns the port."""
    settings = ["-c listen_addresses=127.0.0.1", "-c unix_socket_directories=", "-c max_connections=300"]
    if not durable:
        settings += ["-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off"]
    log = run / "server.log"
    for _ in range(START_ATTEMPTS):
        port = free_port()
        result = subprocess.run(
            [bindir / "pg_ctl", "start", "-D", run / "data", "-l", log, "-w",
             "-t", str(START_TIMEOUT_S), "-s", "-o", " ".join(settings + [f"-p {port}"])],
            capture_output=True,
            text=True,
            check=False,
            cwd=run,
            **as_account(account),
        )
        if result.returncode == 0:
            return port
    tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
    fail(f"PostgreSQL did not start ({result.stderr.strip()}); its log, {log}:\n{tail}")


def stop_server(bindir, run, account):
    subprocess.run(
        [bindir / "pg_ctl", "stop", "-D", run / "data", "-m", "fast", "-s", "-t", "30"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
        cwd=run,
        **as_account(account),
    )
    shutil.rmtree(run, ignore_errors=True)


def run_command(command, env):
    """Runs COMMAND; SIGINT and SIGTERM reach it (the terminal sends Ctrl-C to
    both of us) and we wait for it to end before cleaning up."""
    child = subprocess.Popen(command, env=env)

    def forward(signum, _frame):
        child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    status = child.wait()
    return 128 - status if status < 0 else status  # killed by a signal: as a shell reports it


def main(argv):
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        fail("usage: with_postgres.py [--durable] -- COMMAND [ARG...]")
    options, command = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
    if any(o != "--durable" for o in options):
        fail(f"unknown option in {options}; usage: with_postgres.py [--durable] -- COMMAND [ARG...]")
    durable = "--durable" in options

    url = os.environ.get("TRAINYARD_TEST_DATABASE_URL", "")
    if url:
        check_server(url)
        return subprocess.call(command)

    bindir = find_binaries()
    account = server_account()
    clear_stale_runs(bindir, account)
    run, _lock = prepare_run(account)
    try:
        who = f" as the unprivileged user `{account.pw_name}` (PostgreSQL refuses root)" if account else ""
        initdb(bindir, run, account)
        started = time.monotonic()
        port = start_server(bindir, run, account, durable)
        url = f"postgres://postgres@127.0.0.1:{port}/postgres"
        print(
            f"private PostgreSQL ({bindir}) on 127.0.0.1:{port}{who}, data in "
            f"{run.relative_to(ROOT)}, up in {time.monotonic() - started:.1f} s; "
            "set TRAINYARD_TEST_DATABASE_URL to use another server",
            flush=True,
        )
        return run_command(command, dict(os.environ, TRAINYARD_TEST_DATABASE_URL=url))
    finally:
        stop_server(bindir, run, account)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
