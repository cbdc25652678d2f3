# Strata — the two commands of the README:
#   make demo   build, generate 1M Bluesky events, ingest and optimize them, run the JSONBench queries
#   make test   the whole test suite (Rust unit/property/golden/slt/e2e tests, Python client tests,
#               the benchmark suite's tests, lints)

SHELL := /bin/bash
CARGO ?= cargo
DEMO_DIR ?= demo-data
DEMO_DOCS ?= 1000000
# Where cargo puts the binary (a CARGO_TARGET_DIR outside the clone is honoured).
STRATA := $(abspath $(or $(CARGO_TARGET_DIR),target))/debug/strata
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: demo test build rust-test python-test bench-test lint venv bench clean

# A CI run builds once from a cold clone: incremental compilation only adds its caches to a
# target directory on a shared disk (a CI run once failed with the disk full).
ifeq ($(CI),true)
export CARGO_INCREMENTAL := 0
# A CI run lints while it builds: every workspace crate (all targets, tests included) is compiled
# through clippy-driver with clippy's lints denied, as `cargo clippy -- -D warnings` would check
# them. A separate `cargo clippy` would first check every dependency again (its metadata-only
# builds share nothing with the test build): about ten minutes of a cold run. Dependencies are
# built by rustc as always (cargo applies the workspace wrapper to workspace members only).
export RUSTC_WORKSPACE_WRAPPER := clippy-driver
export CLIPPY_ARGS := -D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__
CLIPPY_IN_BUILD := true
endif

# The binary is built with every target of the workspace so that it shares one feature set,
# and so one build of DataFusion and arrow, with `cargo test --workspace` (building `--bin strata`
# alone unifies dependency features without the dev-dependencies and compiles them all again).
build:
	$(CARGO) build --workspace --all-targets

$(PY): tests/python/requirements.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r tests/python/requirements.txt
	touch $(PY)

venv: $(PY)

demo: build
	@mkdir -p $(DEMO_DIR)
	@test -f $(DEMO_DIR)/bluesky.ndjson || $(STRATA) generate bluesky --docs $(DEMO_DOCS) --seed 1 -o $(DEMO_DIR)/bluesky.ndjson
	rm -rf $(DEMO_DIR)/db
	$(STRATA) --data-dir $(DEMO_DIR)/db ingest bluesky --sort-key kind,commit.operation,commit.collection,did,time_us $(DEMO_DIR)/bluesky.ndjson
	$(STRATA) --data-dir $(DEMO_DIR)/db optimize bluesky
	$(STRATA) --data-dir $(DEMO_DIR)/db tables
	$(STRATA) --data-dir $(DEMO_DIR)/db query --timing "$$(cat bench/queries/jsonbench/strata.sql)"

rust-test:
	$(CARGO) test --workspace

python-test: build $(PY)
	tests/install-clients.sh
	STRATA_BIN=$(STRATA) $(PY) -m pytest -q --durations=10 tests/python

# The benchmark suite's own tests: answer checks, every runnable peer end to end on the real
# samples (with the debug binary), the HTML report drawn in headless Chromium.
bench-test: build
	bench/run.sh --help >/dev/null
	STRATA_BIN=$(STRATA) bench/.venv/bin/python -m pytest -q --durations=10 bench/tests

lint:
	$(CARGO) fmt --all -- --check
ifeq ($(CLIPPY_IN_BUILD),true)
	$(CARGO) build --workspace --all-targets
else
	$(CARGO) clippy --workspace --all-targets -- -D warnings
endif

test: rust-test python-test bench-test lint

bench:
	$(CARGO) build --release --bin strata
	bench/run.sh --systems strata,clickhouse,duckdb,postgres,elasticsearch,opensearch,mongodb,greptimedb --workloads jsonbench,gharchive --scales 1m,10m

clean:
	rm -rf $(DEMO_DIR) $(VENV)
