#!/usr/bin/env bash
# A/B timings of Strata builds on the same data: each build ingests and optimizes the dataset into
# a data directory of its own, then the builds take turns (ROUNDS rounds, builds alternating within
# each) running every query of the workload REPS times in one process. Prints, per query and build,
# the fastest hot run (runs 2..REPS) over all rounds, and the ratio to the first build.
#
#   bench/ab.sh jsonbench bench/work/data/bluesky_1m_seed1.ndjson /tmp/strata-before target/release/strata
#
# Alternating the builds spreads the machine's noise over all of them, which bench/run.sh (one
# system after the other) does not; use this for small differences between builds, run.sh for
# comparisons with peer systems. Data directories go to $AB_WORK (default bench/work/ab).
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 WORKLOAD NDJSON STRATA_BIN [STRATA_BIN ...]" >&2
  exit 2
fi
here="$(cd "$(dirname "$0")" && pwd)"
workload=$1 data=$2
shift 2
case "$workload" in
  jsonbench) table=bluesky sort_key=kind,commit.operation,commit.collection,did,time_us ;;
  gharchive) table=gharchive sort_key=type,repo.name,created_at ;;
  *) echo "unknown workload $workload (jsonbench or gharchive)" >&2; exit 2 ;;
esac
rounds=${ROUNDS:-3} reps=${REPS:-5}
work=${AB_WORK:-$here/work/ab}
mapfile -t queries < <(grep -v '^\s*$' "$here/queries/$workload/strata.sql")
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for i in "$@"; do
  [ -x "$i" ] || { echo "not an executable: $i" >&2; exit 2; }
done
n=0
for bin in "$@"; do
  dir="$work/$workload-$n"
  rm -rf "$dir"
  "$bin" --data-dir "$dir" ingest "$table" --sort-key "$sort_key" "$data" 2>/dev/null
  "$bin" --data-dir "$dir" optimize "$table" >/dev/null 2>&1
  n=$((n + 1))
done
for round in $(seq "$rounds"); do
  n=0
  for bin in "$@"; do
    for q in "${!queries[@]}"; do
      sql=""
      for _ in $(seq "$reps"); do sql+="${queries[$q]} "; done
      best=$("$bin" --data-dir "$work/$workload-$n" query --format ndjson --timing "$sql" 2>&1 >/dev/null |
        sed -n 's/^Time: \([0-9.]*\) ms$/\1/p' | tail -n +2 | sort -n | head -1)
      echo "$q $n $best" >> "$results"
    done
    n=$((n + 1))
  done
done
echo "round-robin over $rounds rounds, fastest hot run of $reps per process, ms:"
awk -v builds="$*" -v nq="${#queries[@]}" '
  { k = $1 " " $2; if (!(k in best) || $3 < best[k]) best[k] = $3 }
  END {
    split(builds, b, " ")
    for (q = 0; q < nq; q++) {
      line = sprintf("Q%d", q + 1)
      for (i = 0; i < length(b); i++) {
        v = best[q " " i]
        line = line sprintf("  %s %.2f", b[i + 1], v)
        if (i > 0) line = line sprintf(" (%.2fx)", v / best[q " 0"])
      }
      print line
    }
  }' "$results"
