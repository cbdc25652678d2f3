#!/usr/bin/env bash
# Runs Strata's benchmark suite: creates bench/.venv (python3 -m venv; pip install -r
# bench/requirements.txt) on first use, installs the zstd CLI and the PostgreSQL server from Debian
# when missing and possible, then runs bench/run.py with the given arguments (see --help).
# It does not build Strata: pass --strata-bin or build target/release/strata first.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="$here/.venv"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --upgrade pip
fi
stamp="$venv/.requirements.sha"
want="$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  "$venv/bin/pip" install --quiet -r "$here/requirements.txt"
  echo "$want" > "$stamp"
fi
apt_install() {  # best effort: only as root, and only when a package is missing
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null || return 0
  if [ ! -f /tmp/.strata-bench-apt-updated ]; then apt-get update -qq >/dev/null && touch /tmp/.strata-bench-apt-updated; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null || echo "run.sh: could not install $*" >&2
}
command -v zstd >/dev/null || apt_install zstd
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || apt_install postgresql
cd "$here/.."
exec "$venv/bin/python" "$here/run.py" "$@"
