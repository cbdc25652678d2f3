#!/usr/bin/env bash
# Creates bench/.venv (chdb, duckdb), builds the release binary, runs the suite: bench/run.sh --help
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/.."
if [ ! -x bench/.venv/bin/python ]; then
  python3 -m venv bench/.venv
  bench/.venv/bin/pip install --quiet --upgrade pip
fi
bench/.venv/bin/pip install --quiet -r bench/requirements.txt
command -v zstd >/dev/null || (apt-get update -qq && apt-get install -y -qq zstd >/dev/null)
cargo build --release --bin strata
exec bench/.venv/bin/python bench/run.py "$@"
