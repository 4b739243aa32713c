#!/usr/bin/env bash
# Builds without the tests (`cargo build`, `cargo build --release --bins`)
# must carry no test machinery: no fail points anywhere, and no test kit in
# the product crates. `cargo tree` without dev-dependency edges resolves
# features as such a build does (dev-dependencies, which turn the fail
# points on for the tests, are left out).
set -euo pipefail
CARGO=${CARGO:-cargo}

workspace=$("$CARGO" tree --workspace -e normal,build -f '{p} [{f}]' --prefix none)
if grep -E '^trainyard-master .*\[.*failpoints.*\]' <<<"$workspace" | grep -q .; then
    echo "error: a build without the tests would turn on trainyard-master's failpoints feature:" >&2
    "$CARGO" tree --workspace -e normal,build,features -i trainyard-master >&2
    exit 1
fi

product=$("$CARGO" tree -p trainyard -p trainyard-master -p trainyard-host -p trainyard-proto \
    -e normal,build --prefix none)
if grep -q '^trainyard-testkit ' <<<"$product"; then
    echo "error: trainyard-testkit is a dependency of a product crate; make it a dev-dependency" >&2
    exit 1
fi
# The tests' timers and private Redis live in trainyard-testkit and
# trainyard-local-redis, not in a product crate's source.
if grep -rnE 'fn fast_timers|#\[path *= *"[^"]*redis_server' src master/src host/src proto/src artifacts/src >&2; then
    echo "error: test machinery (above) is back in a product crate; it belongs in testkit/" >&2
    exit 1
fi
echo "no test machinery in builds without the tests (fail points, trainyard-testkit, test timers)"
