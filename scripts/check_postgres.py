"""Checks that the PostgreSQL server the tests use answers, before the tests
start, so a missing server is one clear message rather than many failures."""

import socket
import sys
from urllib.parse import urlparse

url = sys.argv[1] if len(sys.argv) > 1 else ""
parsed = urlparse(url)
if parsed.scheme not in ("postgres", "postgresql"):
    sys.exit(f"TRAINYARD_TEST_DATABASE_URL must be a postgres:// URL, got {url!r}")
host, port = parsed.hostname or "127.0.0.1", parsed.port or 5432
try:
    socket.create_connection((host, port), timeout=2).close()
except OSError as e:
    sys.exit(
        f"PostgreSQL is not reachable at {host}:{port} ({e}): the tests need it. "
        "Install and start the Debian package postgresql, or point "
        "TRAINYARD_TEST_DATABASE_URL at a server where the tests may create databases."
    )
