"""OLTP point operations on documents with the study's own tool, sysbench (../shared/benchmarks.md
§4), on Strata and PostgreSQL side by side (issue 14): bench/sysbench/documents.lua runs point
selects by key, and 95/5 and 50/50 mixes of point selects and single-document updates by key,
each statement in autocommit, against the same documents on both systems (PostgreSQL: a `jsonb`
table with a unique expression index on the key; Strata: a table keyed by `id`); then point
selects by `name`, a path that is not the key: on Strata without an index, then on both with one
(`CREATE INDEX … ((data->>'name'))`). Each mix runs at each client count for `--seconds`, the
systems taking turns.

Prints events/s, latency p50 (from sysbench's histogram) and p99, errors, and the
Strata/PostgreSQL ratio; writes OUT/results.json. Needs Debian's sysbench (its PostgreSQL
driver): `apt-get install -y sysbench` (tests/install-clients.sh). Usage:
  bench/.venv/bin/python bench/oltp.py --strata-bin BIN [--docs 10000] [--clients 1,4,16]
      [--seconds 10] [--work DIR] [--out DIR]
"""
import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib.pgservers import PostgresServer, StrataServer  # noqa: E402

SCRIPT = Path(__file__).resolve().parent / "sysbench" / "documents.lua"
MIXES = {"point select": 0, "95/5 select/update": 5, "50/50 select/update": 50}
# Point selects by `name` (not the key): first on Strata with no index on it (a scan of the path
# per select), then on both systems with an index on it (Strata: CREATE INDEX, ADR 0024;
# PostgreSQL: a B-tree expression index).
BY_NAME = "by name, no index"
BY_NAME_INDEXED = "by name, indexed"
INDEX_NAME = "CREATE INDEX docs_name ON docs ((data->>'name'))"


def documents(count):
    return [{"id": str(i), "n": 0, "name": f"user {i}", "tags": ["a", "b"][: i % 3]} for i in range(1, count + 1)]


def sysbench(server, clients, seconds, docs, write_pct, select_by="id"):
    """Runs one mix; returns events/s, p50/p99 latency (ms) and errors."""
    proc = subprocess.run(
        ["sysbench", str(SCRIPT), "--db-driver=pgsql", "--pgsql-host=127.0.0.1",
         f"--pgsql-port={server.port}", f"--pgsql-user={server.user}", f"--pgsql-db={server.database}",
         f"--threads={clients}", f"--time={seconds}", f"--table-size={docs}", f"--write-pct={write_pct}",
         f"--select-by={select_by}", "--percentile=99", "--histogram=on", "--db-ps-mode=auto", "run"],
        capture_output=True, text=True, timeout=seconds + 300)
    out = proc.stdout
    if proc.returncode != 0:
        raise RuntimeError(f"sysbench failed ({proc.returncode}): {out[-2000:]}\n{proc.stderr[-2000:]}")
    rate = float(re.search(r"transactions:\s+\d+\s+\(([0-9.]+) per sec", out).group(1))
    p99 = float(re.search(r"99th percentile:\s+([0-9.]+)", out).group(1))
    errors = int(re.search(r"ignored errors:\s+(\d+)", out).group(1))
    # The histogram: "value |*** count" rows, value the bucket's latency in ms.
    buckets = [(float(m.group(1)), int(m.group(2)))
               for m in re.finditer(r"^\s+([0-9.]+)\s+\|\*+\s+(\d+)$", out, re.M)]
    # Both percentiles from the histogram, so they compare: sysbench prints its own 99th
    # percentile with two decimals, which can round below the histogram's median bucket
    # (0.01 vs 0.012 ms on a fast server).
    total, seen, p50, p99_histogram = sum(c for _, c in buckets), 0, None, None
    for value, count in buckets:
        seen += count
        if p50 is None and seen * 2 >= total:
            p50 = value
        if p99_histogram is None and seen * 100 >= total * 99:
            p99_histogram = value
    if p99_histogram is not None:
        p99 = p99_histogram
    return {"events_per_s": rate, "p50_ms": p50, "p99_ms": p99, "errors": errors}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--strata-bin", required=True)
    parser.add_argument("--docs", type=int, default=10_000)
    parser.add_argument("--clients", default="1,4,16")
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--work", default="bench/work/oltp")
    parser.add_argument("--out", default="bench/results/oltp")
    args = parser.parse_args()
    if not shutil.which("sysbench"):
        sys.exit("sysbench is not installed (apt-get install -y sysbench; tests/install-clients.sh does)")
    work, out = Path(args.work).resolve(), Path(args.out)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    out.mkdir(parents=True, exist_ok=True)
    tables = {"docs": ("id", documents(args.docs))}
    clients = [int(c) for c in args.clients.split(",")]
    runs = {}
    postgres = PostgresServer(work, tables)
    strata = StrataServer(Path(args.strata_bin), work, tables)
    try:
        for mix, write_pct in MIXES.items():
            for n in clients:
                for name, server in (("strata", strata), ("postgres", postgres)):
                    runs[(mix, name, n)] = sysbench(server, n, args.seconds, args.docs, write_pct)
                print(f"{mix}, {n} clients: strata {runs[(mix, 'strata', n)]['events_per_s']:.0f}/s, "
                      f"postgres {runs[(mix, 'postgres', n)]['events_per_s']:.0f}/s", file=sys.stderr, flush=True)
        for n in clients:
            runs[(BY_NAME, "strata", n)] = sysbench(strata, n, args.seconds, args.docs, 0, "name")
            print(f"{BY_NAME}, {n} clients: strata {runs[(BY_NAME, 'strata', n)]['events_per_s']:.0f}/s",
                  file=sys.stderr, flush=True)
        strata.execute(INDEX_NAME)
        postgres.execute(INDEX_NAME)
        for n in clients:
            for name, server in (("strata", strata), ("postgres", postgres)):
                runs[(BY_NAME_INDEXED, name, n)] = sysbench(server, n, args.seconds, args.docs, 0, "name")
            print(f"{BY_NAME_INDEXED}, {n} clients: strata "
                  f"{runs[(BY_NAME_INDEXED, 'strata', n)]['events_per_s']:.0f}/s, postgres "
                  f"{runs[(BY_NAME_INDEXED, 'postgres', n)]['events_per_s']:.0f}/s", file=sys.stderr, flush=True)
        counts = {"strata": strata.count("docs"), "postgres": postgres.count("docs")}
        if counts["strata"] != args.docs or counts["postgres"] != args.docs:
            raise RuntimeError(f"updates changed the number of documents: {counts}")
    finally:
        strata.stop()
        postgres.stop()

    header = (f"{'mix':<22} {'clients':>7} {'system':<9} {'events/s':>9} {'p50 ms':>8} {'p99 ms':>8} "
              f"{'errors':>6} {'vs PG':>6}")
    print(header)
    print("-" * len(header))
    for mix in [*MIXES, BY_NAME, BY_NAME_INDEXED]:
        for n in clients:
            # Strata without the index is compared with PostgreSQL with its index.
            base = runs[(BY_NAME_INDEXED if mix == BY_NAME else mix, "postgres", n)]["events_per_s"]
            for name in ("strata", "postgres"):
                if (mix, name, n) not in runs:
                    continue
                r = runs[(mix, name, n)]
                print(f"{mix:<22} {n:>7} {name:<9} {r['events_per_s']:>9.0f} {r['p50_ms'] or 0:>8.2f} "
                      f"{r['p99_ms']:>8.2f} {r['errors']:>6} {r['events_per_s'] / base:>6.2f}")
    results = {"documents": args.docs, "seconds": args.seconds,
               "runs": [{"mix": m, "system": s, "clients": n, **r} for (m, s, n), r in runs.items()]}
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwrote {out / 'results.json'}")


if __name__ == "__main__":
    main()
