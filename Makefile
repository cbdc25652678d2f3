# Strata — the two commands of the README:
#   make demo   build, generate 1M Bluesky events, ingest them, run the JSONBench queries
#   make test   the whole test suite (Rust unit/property/golden/slt/e2e tests, Python client tests, lints)

SHELL := /bin/bash
CARGO ?= cargo
DEMO_DIR ?= demo-data
DEMO_DOCS ?= 1000000
STRATA := target/debug/strata
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: demo test build rust-test python-test lint venv bench clean

build:
	$(CARGO) build --bin strata

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
	$(STRATA) --data-dir $(DEMO_DIR)/db tables
	$(STRATA) --data-dir $(DEMO_DIR)/db query --timing "$$(cat bench/queries/jsonbench/strata.sql)"

rust-test:
	$(CARGO) test --workspace

python-test: build $(PY)
	STRATA_BIN=$(CURDIR)/$(STRATA) $(PY) -m pytest -q tests/python

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

test: rust-test python-test lint

bench:
	bench/run.sh

clean:
	rm -rf $(DEMO_DIR) $(VENV)
