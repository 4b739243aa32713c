# trainyard — the two commands of the quickstart are `make demo` and `make test`.
# Each installs or checks what it needs, or stops naming the package to install.

SHELL := /bin/bash
CARGO ?= cargo

# Tests create (and drop) databases of their own on a PostgreSQL server: the
# one of TRAINYARD_TEST_DATABASE_URL when it is set, else a private server
# that scripts/with_postgres.py starts for the run and stops afterwards.
WITH_POSTGRES := python3 scripts/with_postgres.py

.PHONY: demo test bench build adapters prerequisites fmt clippy clean

prerequisites:
	@command -v cargo >/dev/null || { echo "cargo not found: install Rust with rustup"; exit 1; }
	@command -v python3 >/dev/null || { echo "python3 not found: install the Debian package python3"; exit 1; }
	@rustup target list --installed | grep -qx wasm32-wasip2 || rustup target add wasm32-wasip2

adapters: prerequisites
	@$(MAKE) --no-print-directory -C adapters build

build: adapters
	$(CARGO) build --workspace --bins

demo: build
	@[ -n "$$TRAINYARD_REDIS_URL" ] || command -v redis-server >/dev/null || { \
	  echo "redis-server not found: install the Debian package redis-server (or set TRAINYARD_REDIS_URL)"; exit 1; }
	./target/debug/trainyard demo

# `cargo test` builds the binaries the integration tests start, with the
# features the tests unify (the master's fail points among them); building
# them first with `cargo build` would compile most dependencies twice. The
# check before it proves builds without the tests have no test machinery.
test: adapters
	@[ -n "$$TRAINYARD_TEST_REDIS_URL" ] || command -v redis-server >/dev/null || { \
	  echo "redis-server not found: install the Debian package redis-server (or set TRAINYARD_TEST_REDIS_URL)"; exit 1; }
	@command -v systemd-analyze >/dev/null || { echo "systemd-analyze not found: install the Debian package systemd (the shipped units are verified with it)"; exit 1; }
	@command -v redis-cli >/dev/null || { echo "redis-cli not found: install the Debian package redis-tools (the deployment guide's commands use it)"; exit 1; }
	@CARGO=$(CARGO) scripts/check_no_test_machinery.sh
	$(WITH_POSTGRES) -- $(CARGO) test --workspace --no-fail-fast
	@$(MAKE) --no-print-directory -C adapters test

# Every benchmark at full size, in release mode; the table also goes to
# target/bench.md. Not a test: figures are reported, never asserted.
bench: adapters
	@command -v redis-server >/dev/null || { echo "redis-server not found: install the Debian package redis-server"; exit 1; }
	$(CARGO) build --release --workspace --bins
	$(WITH_POSTGRES) --durable -- ./target/release/trainyard-bench all --markdown target/bench.md

fmt:
	$(CARGO) fmt --all

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

clean:
	$(CARGO) clean
	$(MAKE) -C adapters clean
