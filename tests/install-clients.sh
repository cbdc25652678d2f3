#!/usr/bin/env bash
# The third-party clients the Python tests drive against `strata serve`: psql and pgbench
# (Debian's PostgreSQL client packages), Java 17 for PgJDBC, openssl for the TLS test; and
# Debian's PostgreSQL server, which test_documents.py runs the same statements on; sysbench
# (with its PostgreSQL driver) for the benchmark suite's OLTP test; rsyslog with its
# Elasticsearch output for the log shipping test. Best
# effort, like bench/run.sh: installed with apt-get only as root and only when missing; a test
# whose client is still missing says so when it is skipped.
set -euo pipefail
missing=()
command -v psql >/dev/null || missing+=(postgresql-client)
command -v pgbench >/dev/null || missing+=(postgresql-contrib)
command -v java >/dev/null || missing+=(openjdk-17-jdk-headless)
command -v openssl >/dev/null || missing+=(openssl)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
command -v sysbench >/dev/null || missing+=(sysbench)
# rsyslog's Elasticsearch output ships the real Apache log into the _bulk endpoint (issue 15).
[ -f /usr/lib/x86_64-linux-gnu/rsyslog/omelasticsearch.so ] || ls /usr/lib/*/rsyslog/omelasticsearch.so >/dev/null 2>&1 || missing+=(rsyslog rsyslog-elasticsearch)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "install-clients.sh: not root or no apt-get; tests needing ${missing[*]} will be skipped" >&2
  exit 0
fi
if [ ! -f /tmp/.strata-bench-apt-updated ]; then apt-get update -qq >/dev/null && touch /tmp/.strata-bench-apt-updated; fi
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null ||
  echo "install-clients.sh: could not install ${missing[*]}" >&2
