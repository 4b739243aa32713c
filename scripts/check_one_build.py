#!/usr/bin/env python3
"""`make demo` then `make test` must compile the dependencies once.

`cargo build` leaves dev-dependencies out; `cargo test` unifies their
features with the product's. A dev-dependency that turns on a feature of a
crate the product also uses (the `fail` crate turning on `rand`'s defaults,
say) gives that crate, and every crate above it, a second build. This check
compares, crate by crate, the features `cargo tree` resolves with and
without dev-dependencies, and names every crate outside the workspace whose
features differ. Crates only the tests use are compiled once anyway and are
not compared; the workspace's own crates are cheap to compile and may differ
(the master's `failpoints` feature).

It also checks the other side of the dev profile: the crates it builds
unoptimised (`[profile.dev.package]` entries with `opt-level = 0`: procedural
macros and code generators, which only run inside the compiler) must be none
that the binaries link, or the tests would run them slowly.
"""
import os
import subprocess
import sys
import tomllib
from collections import defaultdict

CARGO = os.environ.get("CARGO", "cargo")


def features(edges):
    """Package -> the set of feature lists it is built with (several when it
    is built both for the build machine and the target)."""
    out = subprocess.run(
        [CARGO, "tree", "--workspace", "-e", edges, "-f", "{p}|{f}", "--prefix", "none"],
        check=True, capture_output=True, text=True,
    ).stdout
    found = defaultdict(set)
    for line in out.splitlines():
        line = line.removesuffix(" (*)").strip()
        if not line or "|" not in line:
            continue
        package, feats = line.split("|", 1)
        if " (/" in package:  # a path dependency: the workspace's own crates
            continue
        found[package].add(feats)
    return found


def unoptimised_but_linked():
    """Crates the dev profile builds at opt-level 0 that a binary links:
    `no-proc-macro` leaves out what only procedural macros use."""
    with open(os.path.join(os.path.dirname(__file__), "..", "Cargo.toml"), "rb") as f:
        packages = tomllib.load(f)["profile"]["dev"].get("package", {})
    unoptimised = {name for name, p in packages.items() if name != "*" and p.get("opt-level") == 0}
    out = subprocess.run(
        [CARGO, "tree", "--workspace", "-e", "normal,no-proc-macro", "-f", "{p}", "--prefix", "none"],
        check=True, capture_output=True, text=True,
    ).stdout
    linked = {line.split()[0] for line in out.splitlines() if line.strip()}
    return sorted(unoptimised & linked)


def main():
    slow = unoptimised_but_linked()
    if slow:
        print("error: the dev profile builds these crates unoptimised, but the binaries link "
              f"them: {', '.join(slow)}; take them out of [profile.dev.package] in Cargo.toml",
              file=sys.stderr)
        return 1
    build = features("normal,build")
    test = features("normal,build,dev")
    differ = {p: (build[p], test[p]) for p in build if build[p] != test.get(p, set())}
    if not differ:
        print(f"one build: the tests compile the {len(build)} dependencies of the binaries "
              "with the same features, and link none of the crates the dev profile leaves "
              "unoptimised")
        return 0
    print("error: `cargo test` would compile these dependencies again, with other features "
          "than `cargo build` (a dev-dependency turns them on):", file=sys.stderr)
    for package, (b, t) in sorted(differ.items()):
        print(f"  {package}: build {sorted(b)}, test {sorted(t)}", file=sys.stderr)
    print(f"see which dev-dependency does it: {CARGO} tree -e normal,build,dev,features -i <crate>",
          file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
