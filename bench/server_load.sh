#!/usr/bin/env bash
# The server workload (issue 13): `strata serve` under concurrent HTTP ingest and pgbench, against
# PostgreSQL on the same data. Uses the benchmark suite's virtualenv and installs what it drives
# (pgbench and the PostgreSQL server from Debian) when missing and possible. Arguments: see
#   bench/server_load.sh --help
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
"$here/run.sh" --help >/dev/null  # creates bench/.venv and installs PostgreSQL, zstd
if ! command -v pgbench >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-contrib postgresql-client >/dev/null ||
    echo "server_load.sh: could not install pgbench" >&2
fi
cd "$here/.."
exec "$here/.venv/bin/python" "$here/server_load.py" "$@"
