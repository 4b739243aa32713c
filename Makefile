# trainyard — the two commands of the quickstart are `make demo` and `make test`.
# Each installs or checks what it needs, or stops naming the package to install.

SHELL := /bin/bash
CARGO ?= cargo

# Tests create (and drop) databases of their own on a PostgreSQL server: the
# one of TRAINYARD_TEST_DATABASE_URL when it is set, else a private server
# that scripts/with_postgres.py starts for the run and stops afterwards.
WITH_POSTGRES := python3 scripts/with_postgres.py

.PHONY: demo test bench build release install adapters adapter-fixtures prerequisites browser python-tools nextest s3-server fmt clippy clean

prerequisites:
	@command -v cargo >/dev/null || { echo "cargo not found: install Rust with rustup"; exit 1; }
	@command -v python3 >/dev/null || { echo "python3 not found: install the Debian package python3"; exit 1; }
	@rustup target list --installed | grep -qx wasm32-wasip2 || rustup target add wasm32-wasip2

# The dashboard's browser test drives headless Chromium through WebDriver.
# Installed when missing if we are root (as CI is), else named.
BROWSER_PACKAGES := chromium chromium-driver
browser:
	@if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing $(BROWSER_PACKAGES) for the dashboard's browser test"; \
	    apt-get install -y $(BROWSER_PACKAGES) || { apt-get update && apt-get install -y $(BROWSER_PACKAGES); }; \
	  else \
	    echo "chromium or chromedriver not found: install the Debian packages $(BROWSER_PACKAGES) (the dashboard's browser test drives them)"; exit 1; \
	  fi; \
	fi

# Python tools the build and the tests use (uv builds trainers' Python
# environments; componentize-py builds the adapters written in Python), in a
# virtual environment of their own under target/ so that nothing is
# installed into the machine's Python.
PYTHON_TOOLS := target/python-tools
UV_VERSION := 0.13.9
UV := $(PYTHON_TOOLS)/bin/uv
COMPONENTIZE_PY_VERSION := 0.25.1
# Installing it leaves a stamp naming the version, so changing the pin
# reinstalls it.
COMPONENTIZE_PY_STAMP := $(PYTHON_TOOLS)/componentize-py-$(COMPONENTIZE_PY_VERSION)
python-tools: $(UV) $(COMPONENTIZE_PY_STAMP)
$(PYTHON_TOOLS)/bin/pip:
	@python3 -m venv --help >/dev/null 2>&1 || { echo "python3 -m venv not available: install the Debian package python3-venv"; exit 1; }
	@python3 -m venv $(PYTHON_TOOLS) || { rm -rf $(PYTHON_TOOLS); echo "python3 -m venv failed: install the Debian package python3-venv"; exit 1; }
$(UV): | $(PYTHON_TOOLS)/bin/pip
	$(PYTHON_TOOLS)/bin/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)
# After uv: two pip runs must not write into one environment at once (make -j).
$(COMPONENTIZE_PY_STAMP): | $(UV)
	$(PYTHON_TOOLS)/bin/pip install --quiet --disable-pip-version-check componentize-py==$(COMPONENTIZE_PY_VERSION)
	@rm -f $(PYTHON_TOOLS)/componentize-py-* && touch $@

adapters: prerequisites python-tools
	@$(MAKE) --no-print-directory -C adapters build

# The adapters only the tests use (adapters/fixtures/).
adapter-fixtures: adapters
	@$(MAKE) --no-print-directory -C adapters fixtures

build: adapters
	$(CARGO) build --workspace --bins

# `make demo DEMO_ARGS=--stay` keeps the cluster and its dashboard up after
# the tasks end, until Ctrl-C.
demo: build
	@[ -n "$$TRAINYARD_REDIS_URL" ] || command -v redis-server >/dev/null || { \
	  echo "redis-server not found: install the Debian package redis-server (or set TRAINYARD_REDIS_URL)"; exit 1; }
	./target/debug/trainyard demo $(DEMO_ARGS)

# The suite runs under cargo-nextest (.config/nextest.toml: one process per
# test, several at once); installed with cargo when it is missing.
NEXTEST_VERSION := 0.9.143
nextest:
	@$(CARGO) nextest --version >/dev/null 2>&1 || { \
	  echo "installing cargo-nextest $(NEXTEST_VERSION), which runs the test suite"; \
	  $(CARGO) install --locked cargo-nextest --version $(NEXTEST_VERSION); }

# The S3-protocol server the artifact store's `s3://` tests upload to:
# s3s-fs, a server on the s3s crate that implements multipart uploads
# (an object exists only once its upload completes), checks every
# request's SigV4 signature, and keeps objects as files. Built once with
# cargo (about two minutes on two cores) into target/s3-server; the
# stamp names the version, so changing the pin reinstalls it.
S3_SERVER_VERSION := 0.14.1
S3_SERVER_ROOT := target/s3-server
S3_SERVER_STAMP := $(S3_SERVER_ROOT)/s3s-fs-$(S3_SERVER_VERSION)
s3-server: $(S3_SERVER_STAMP)
$(S3_SERVER_STAMP):
	@echo "installing s3s-fs $(S3_SERVER_VERSION), the S3 server the artifact store's tests use"
	$(CARGO) install --locked --quiet s3s-fs --version $(S3_SERVER_VERSION) --features binary --root $(S3_SERVER_ROOT)
	@rm -f $(S3_SERVER_ROOT)/s3s-fs-* && touch $@

# The tests' build turns the master's fail points on; after `make demo`'s
# `cargo build` it recompiles only the workspace's own crates. The checks
# before it prove that builds without the tests have no test machinery, and
# that the tests turn on no feature of a dependency the binaries share
# (which would compile that dependency, and all above it, twice).
test: adapters adapter-fixtures browser python-tools nextest s3-server
	@[ -n "$$TRAINYARD_TEST_REDIS_URL" ] || command -v redis-server >/dev/null || { \
	  echo "redis-server not found: install the Debian package redis-server (or set TRAINYARD_TEST_REDIS_URL)"; exit 1; }
	@command -v systemd-analyze >/dev/null || { echo "systemd-analyze not found: install the Debian package systemd (the shipped units are verified with it)"; exit 1; }
	@command -v redis-cli >/dev/null || { echo "redis-cli not found: install the Debian package redis-tools (the deployment guide's commands use it)"; exit 1; }
	@command -v pg_dump >/dev/null || { echo "pg_dump not found: install the Debian package postgresql-client (the deployment guide's commands use it)"; exit 1; }
	@command -v systemd-sysusers >/dev/null || { echo "systemd-sysusers not found: install the Debian package systemd (the deployment guide's make install uses it)"; exit 1; }
	@CARGO=$(CARGO) scripts/check_no_test_machinery.sh
	@CARGO=$(CARGO) python3 scripts/check_one_build.py
	$(WITH_POSTGRES) -- $(CARGO) nextest run --workspace
	@$(MAKE) --no-print-directory -C adapters test
	cd bench/peers && PYTHONDONTWRITEBYTECODE=1 python3 -m unittest discover -s . -p 'test_*.py'

# Every benchmark at full size, in release mode, then the same no-work load
# through a peer (BullMQ, installed with npm into bench/peers/bullmq); the
# table also goes to target/bench.md. Not a test: figures are reported,
# never asserted.
bench: release browser
	@command -v redis-server >/dev/null || { echo "redis-server not found: install the Debian package redis-server"; exit 1; }
	$(WITH_POSTGRES) --durable -- ./target/release/trainyard-bench all --markdown target/bench.md
	python3 bench/peers/run.py --against target/bench.md --markdown target/bench.md

# What a deployment installs (docs/deploy.md): the adapters and every binary
# of the workspace, in release mode.
release: adapters
	$(CARGO) build --release --workspace --bins

# Puts trainyard on a machine, or under DESTDIR when it is set (a staging
# root; tests/deploy_guide.rs installs into a scratch one and checks the
# tree): the binaries and adapters of `make release` (or those in
# BIN_DIR), both systemd units, the accounts (systemd-sysusers) and
# /etc/trainyard (systemd-tmpfiles), as deploy/ describes them. It enables no
# service: a machine is a master or a host, and the guide enables the one it
# runs.
BIN_DIR ?= target/release
ADAPTERS_DIST := adapters/dist
INSTALL_ROOT := $(if $(DESTDIR),$(abspath $(DESTDIR)))
ROOT_FLAG := $(if $(DESTDIR),--root=$(INSTALL_ROOT))
install:
	@for f in $(BIN_DIR)/trainyard $(BIN_DIR)/trainyard-supervise \
	          $(ADAPTERS_DIST)/python-trainer.wasm $(ADAPTERS_DIST)/noop.wasm; do \
	  [ -f "$$f" ] || { echo "$$f not found: run make release first"; exit 1; }; done
	@command -v systemd-sysusers >/dev/null && command -v systemd-tmpfiles >/dev/null || { \
	  echo "systemd-sysusers or systemd-tmpfiles not found: install the Debian package systemd"; exit 1; }
	install -d $(INSTALL_ROOT)/usr/local/bin $(INSTALL_ROOT)/usr/local/share/trainyard/adapters \
	  $(INSTALL_ROOT)/etc/systemd/system $(INSTALL_ROOT)/etc/sysusers.d $(INSTALL_ROOT)/etc/tmpfiles.d
	install -m 0755 $(BIN_DIR)/trainyard $(BIN_DIR)/trainyard-supervise $(INSTALL_ROOT)/usr/local/bin/
	install -m 0644 $(ADAPTERS_DIST)/python-trainer.wasm $(ADAPTERS_DIST)/noop.wasm $(INSTALL_ROOT)/usr/local/share/trainyard/adapters/
	install -m 0644 deploy/systemd/trainyard-master.service deploy/systemd/trainyard-host.service $(INSTALL_ROOT)/etc/systemd/system/
	install -m 0644 deploy/sysusers.d/trainyard.conf $(INSTALL_ROOT)/etc/sysusers.d/
	install -m 0644 deploy/tmpfiles.d/trainyard.conf $(INSTALL_ROOT)/etc/tmpfiles.d/
	systemd-sysusers $(ROOT_FLAG) trainyard.conf
	systemd-tmpfiles $(ROOT_FLAG) --create trainyard.conf

fmt:
	$(CARGO) fmt --all

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

clean:
	$(CARGO) clean
	$(MAKE) -C adapters clean
