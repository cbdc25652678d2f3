"""Keyed tables (issue 14, ADR 0016): what a key costs at ingest and on disk, and what it buys on
point reads. One run, the binary under test, generated GH Archive events keyed by their `id`:

- ingest into a table without a key, and into one with `--key id` (wall time, peak RSS);
- the same file again into the keyed table, every document replacing its older version;
- bytes of the parts and of the key files;
- after `optimize`: point reads `SELECT data.type … WHERE data.id = '…'` through the key files,
  and the same with the index defeated (`data.id || '' = '…'`, a scan of the `id` column), all
  statements of one kind in one `strata query` process so that the session is warm; medians.

Prints a table and writes OUT/results.json. Usage:
  bench/.venv/bin/python bench/keys.py --strata-bin BIN [--docs N] [--reads N] [--work DIR] [--out DIR]
"""
import argparse
import json
import random
import shutil
import statistics
import time
from pathlib import Path

from benchlib.strata_cli import query_runs, run


def timed(args):
    """Wall seconds and peak RSS (MB) of a command, through GNU time when it is there."""
    gnu_time = shutil.which("time") or "/usr/bin/time"
    if Path(gnu_time).exists():
        started = time.monotonic()
        proc = run([gnu_time, "-f", "%M", *args])
        elapsed = time.monotonic() - started
        rss_kb = int(proc.stderr.strip().splitlines()[-1])
        return elapsed, rss_kb / 1024
    started = time.monotonic()
    run(args)
    return time.monotonic() - started, None


def bytes_of(directory: Path, suffix: str) -> int:
    return sum(p.stat().st_size for p in directory.glob(f"*{suffix}"))


def query_times(binary, data_dir, statements):
    """Milliseconds of each statement, run in one process (`--timing`)."""
    times = [runs[0] for runs in query_runs(binary, data_dir, statements)]
    return times[1:]  # the first statement pays for opening the table


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--strata-bin", required=True)
    parser.add_argument("--docs", type=int, default=500_000)
    parser.add_argument("--reads", type=int, default=20)
    parser.add_argument("--work", default="bench/work/keys")
    parser.add_argument("--out", default="bench/results/keys")
    a = parser.parse_args()
    binary, work, out = a.strata_bin, Path(a.work), Path(a.out)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    out.mkdir(parents=True, exist_ok=True)
    data = work / "gh.ndjson"
    run([binary, "generate", "gharchive", "--docs", a.docs, "--seed", 1, "-o", data])
    ids = [json.loads(line)["id"] for line in data.open()]
    keyless, keyed = work / "keyless", work / "keyed"

    results = {"docs": a.docs}
    results["keyless_ingest_s"], results["keyless_rss_mb"] = timed(
        [binary, "--data-dir", keyless, "ingest", "gh", "--sort-key", "type", data])
    results["keyed_ingest_s"], results["keyed_rss_mb"] = timed(
        [binary, "--data-dir", keyed, "ingest", "gh", "--sort-key", "type", "--key", "id", data])
    results["keyed_replace_all_s"], results["keyed_replace_rss_mb"] = timed(
        [binary, "--data-dir", keyed, "ingest", "gh", data])
    run([binary, "--data-dir", keyed, "optimize", "gh"])
    run([binary, "--data-dir", keyless, "optimize", "gh"])
    parts = keyed / "gh" / "parts"
    results["part_bytes"] = bytes_of(parts, ".parquet")
    results["key_file_bytes"] = bytes_of(parts, ".keys")
    results["keyless_part_bytes"] = bytes_of(keyless / "gh" / "parts", ".parquet")

    chosen = random.Random(1).sample(ids, min(a.reads + 1, len(ids)))
    indexed = [f"SELECT data.type FROM gh WHERE data.id = '{i}'" for i in chosen]
    scanned = [f"SELECT data.type FROM gh WHERE data.id || '' = '{i}'" for i in chosen]
    results["point_read_indexed_ms"] = statistics.median(query_times(binary, keyed, indexed))
    results["point_read_scan_ms"] = statistics.median(query_times(binary, keyed, scanned))
    count = run([binary, "--data-dir", keyed, "query", "--format", "ndjson", "SELECT count(*) AS n FROM gh"])
    results["documents_after"] = json.loads(count.stdout)["n"]

    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    r = results
    rows = [
        ("documents", f"{r['docs']:,}", f"{r['documents_after']:,} (after replacing all)"),
        ("ingest (s)", f"{r['keyless_ingest_s']:.2f}", f"{r['keyed_ingest_s']:.2f} "
         f"({r['keyed_ingest_s'] / r['keyless_ingest_s']:.2f} x)"),
        ("same file again, replacing all (s)", "", f"{r['keyed_replace_all_s']:.2f}"),
        ("peak RSS of the ingest (MB)", f"{r['keyless_rss_mb'] or 0:.0f}", f"{r['keyed_rss_mb'] or 0:.0f}"),
        ("part bytes / key file bytes", f"{r['keyless_part_bytes']:,}", f"{r['part_bytes']:,} / "
         f"{r['key_file_bytes']:,} ({100 * r['key_file_bytes'] / r['part_bytes']:.1f} %)"),
        ("point read, median ms (index / column scan)", "",
         f"{r['point_read_indexed_ms']:.2f} / {r['point_read_scan_ms']:.2f} "
         f"({r['point_read_scan_ms'] / r['point_read_indexed_ms']:.1f} x)"),
    ]
    print(f"{'measure':<46} {'without key':>14}  with --key id")
    for name, plain, keyed_value in rows:
        print(f"{name:<46} {plain:>14}  {keyed_value}")


if __name__ == "__main__":
    main()
