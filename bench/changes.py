"""JSONBench Q1–Q5 on a table whose documents changed (issue 14's target): the same queries on the
same keyed table of generated Bluesky events, three times —

1. as loaded and merged (no deletions);
2. after 10 % of its documents were replaced by new versions (an ingest with the same keys, each
   new version carrying one more field) and 1 % deleted (`DELETE … WHERE data.id IN (…)`): old
   rows stay in their parts behind deletion vectors until a merge;
3. after `strata optimize`, which drops them for good.

Each query runs `--runs` times in one `strata query` process per state (warm); the fastest run
counts. The whole sequence (table, changes, merge) is repeated `--rounds` times, and each time
and ratio reported is the median over the rounds (a few milliseconds vary by ±30 % between
rounds on a shared machine). Prints each query's times and the ratios changed/unchanged (target
≤ 1.3) and merged/unchanged (target 1.0), checks that states 2 and 3 answer alike, and writes
OUT/results.json (the medians as `queries`, each round under `each_round`). The documents get an
integer `id` (their line number) as the table's key; the queries do not read it. Usage:
  bench/.venv/bin/python bench/changes.py --strata-bin BIN [--docs 1000000] [--runs 3] [--rounds 3]
      [--work DIR] [--out DIR]
"""
import argparse
import json
import random
import shutil
import statistics
import sys
from pathlib import Path

from benchlib.strata_cli import query_runs, run

BENCH = Path(__file__).resolve().parent
SORT_KEY = "kind,commit.operation,commit.collection,did,time_us"


def queries():
    return [q.strip().rstrip(";") for q in (BENCH / "queries" / "jsonbench" / "strata.sql").read_text().splitlines()
            if q.strip()]


def timings(binary, data_dir, statements, runs):
    """Fastest milliseconds of each statement over `runs` runs in one process, and its answer."""
    best = [min(r) for r in query_runs(binary, data_dir, statements, runs, output_format="ndjson")]
    answers = [run([binary, "--data-dir", data_dir, "query", "--format", "ndjson", s]).stdout for s in statements]
    return best, answers


def one_round(binary, docs, runs, work):
    """Times every query unchanged, changed and merged on a fresh table; one row per query."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    raw, keyed_file = work / "bluesky.ndjson", work / "bluesky-keyed.ndjson"
    run([binary, "generate", "bluesky", "--docs", docs, "--seed", 1, "-o", raw])
    with raw.open() as src, keyed_file.open("w") as dst:
        for i, line in enumerate(src):
            dst.write(json.dumps({"id": i, **json.loads(line)}) + "\n")
    data_dir = work / "db"
    run([binary, "--data-dir", data_dir, "ingest", "bluesky", "--key", "id:integer", "--sort-key", SORT_KEY,
         keyed_file])
    run([binary, "--data-dir", data_dir, "optimize", "bluesky"])
    statements = queries()
    base, _ = timings(binary, data_dir, statements, runs)

    rng = random.Random(1)
    ids = list(range(docs))
    rng.shuffle(ids)
    replaced, deleted = sorted(ids[: docs // 10]), ids[docs // 10: docs // 10 + docs // 100]
    chosen = set(replaced)
    changes = work / "changes.ndjson"
    with keyed_file.open() as src, changes.open("w") as dst:
        for i, line in enumerate(src):
            if i in chosen:
                doc = json.loads(line)
                doc["revision"] = 2
                dst.write(json.dumps(doc) + "\n")
    run([binary, "--data-dir", data_dir, "ingest", "bluesky", "--no-merge", changes])
    for start in range(0, len(deleted), 2000):
        chunk = ", ".join(str(i) for i in deleted[start:start + 2000])
        run([binary, "--data-dir", data_dir, "query", f"DELETE FROM bluesky WHERE data.id IN ({chunk})"])
    count = json.loads(run([binary, "--data-dir", data_dir, "query", "--format", "ndjson",
                            "SELECT count(*) AS n FROM bluesky"]).stdout)["n"]
    if count != docs - len(deleted):
        raise RuntimeError(f"{count} documents after the changes, expected {docs - len(deleted)}")
    changed, changed_answers = timings(binary, data_dir, statements, runs)
    run([binary, "--data-dir", data_dir, "optimize", "bluesky"])
    merged, merged_answers = timings(binary, data_dir, statements, runs)
    if changed_answers != merged_answers:
        raise RuntimeError("a merge changed an answer")
    rows = [{"query": f"Q{i + 1}", "unchanged_ms": b, "changed_ms": c, "merged_ms": m,
             "changed_ratio": c / b, "merged_ratio": m / b}
            for i, (b, c, m) in enumerate(zip(base, changed, merged))]
    return {"replaced": len(replaced), "deleted": len(deleted), "queries": rows}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--strata-bin", required=True)
    parser.add_argument("--docs", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--work", default="bench/work/changes")
    parser.add_argument("--out", default="bench/results/changes")
    a = parser.parse_args()
    binary, work, out = a.strata_bin, Path(a.work), Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rounds = []
    for number in range(a.rounds):
        rounds.append(one_round(binary, a.docs, a.runs, work))
        print(f"round {number + 1} of {a.rounds} done", file=sys.stderr, flush=True)
    shutil.rmtree(work, ignore_errors=True)

    print(f"{'query':<6} {'unchanged ms':>13} {'changed ms':>11} {'merged ms':>10} {'changed/unch.':>14} "
          f"{'merged/unch.':>13}")
    medians = []
    for i, first in enumerate(rounds[0]["queries"]):
        cells = {key: statistics.median(r["queries"][i][key] for r in rounds)
                 for key in ("unchanged_ms", "changed_ms", "merged_ms")}
        row = {"query": first["query"], **cells,
               "changed_ratio": cells["changed_ms"] / cells["unchanged_ms"],
               "merged_ratio": cells["merged_ms"] / cells["unchanged_ms"]}
        medians.append(row)
        print(f"{row['query']:<6} {row['unchanged_ms']:>13.1f} {row['changed_ms']:>11.1f} {row['merged_ms']:>10.1f} "
              f"{row['changed_ratio']:>14.2f} {row['merged_ratio']:>13.2f}")
    replaced, deleted = rounds[0]["replaced"], rounds[0]["deleted"]
    results = {"docs": a.docs, "replaced": replaced, "deleted": deleted, "runs": a.runs, "rounds": a.rounds,
               "queries": medians, "each_round": [r["queries"] for r in rounds]}
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"\n{replaced:,} documents replaced, {deleted:,} deleted; medians of {a.rounds} round(s); "
          f"wrote {out / 'results.json'}")


if __name__ == "__main__":
    sys.exit(main())
