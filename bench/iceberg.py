"""JSONBench Q1–Q5 on one table read two ways (issue 16's reference figures): by Strata, and by
Spark (local mode, the Iceberg Spark runtime) over the Iceberg table Strata publishes from the
same parts (ADR 0021) — no export, no copy.

Generates `--docs` Bluesky events, ingests and optimizes them as JSONBench's table, turns
publication on, then runs each query `--runs` times per system: Strata in one `strata query`
process, Spark in one session (after a warm-up `count(*)` that loads the table's metadata).
Cold is run 1, hot the fastest of the others. Spark's answers must equal Strata's (the script
fails otherwise). Prints the times and Spark ÷ Strata, writes OUT/results.json. Spark needs Java;
without it the Spark columns say so. Usage:
  bench/.venv/bin/python bench/iceberg.py --strata-bin BIN [--docs 1000000] [--runs 3] [--work DIR] [--out DIR]
"""
import argparse
import json
import shutil
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from benchlib.maven import maven_jar  # noqa: E402
from benchlib.strata_cli import query_runs, run  # noqa: E402

SORT_KEY = "kind,commit.operation,commit.collection,did,time_us"
ICEBERG_SPARK_RUNTIME = ("org.apache.iceberg", "iceberg-spark-runtime-3.5_2.12", "1.12.0")


def statements(name):
    text = (BENCH / "queries" / "jsonbench" / name).read_text()
    return [s.strip() for s in text.split(";") if s.strip()]


def strata_runs(binary, data_dir, queries, runs):
    """Milliseconds of every run of each query (one process), and each query's answer rows."""
    times = query_runs(binary, data_dir, queries, runs, output_format="ndjson")
    answers = []
    for q in queries:
        out = run([binary, "--data-dir", data_dir, "query", "--format", "ndjson", q]).stdout
        answers.append([tuple(json.loads(line).values()) for line in out.splitlines() if line.strip()])
    return times, answers


def spark_runs(table_dir, queries, runs, jar_cache):
    """Milliseconds of every run of each query in one Spark session, and the answers."""
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]")
             .config("spark.jars", str(maven_jar(jar_cache, *ICEBERG_SPARK_RUNTIME)))
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "4g")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        spark.read.format("iceberg").load(str(table_dir)).createOrReplaceTempView("bluesky")
        spark.sql("SELECT count(*) FROM bluesky").collect()
        times, answers = [], []
        for q in queries:
            runs_ms = []
            for _ in range(runs):
                started = time.perf_counter()
                rows = spark.sql(q).collect()
                runs_ms.append((time.perf_counter() - started) * 1000)
            times.append(runs_ms)
            answers.append([tuple(r) for r in rows])
        return times, answers
    finally:
        spark.stop()


def cold_hot(runs_ms):
    return runs_ms[0], min(runs_ms[1:]) if len(runs_ms) > 1 else runs_ms[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--strata-bin", required=True)
    parser.add_argument("--docs", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--work", default="bench/work/iceberg")
    parser.add_argument("--out", default="bench/results/iceberg")
    a = parser.parse_args()
    binary, work, out = a.strata_bin, Path(a.work), Path(a.out)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    out.mkdir(parents=True, exist_ok=True)
    raw, data_dir = work / "bluesky.ndjson", work / "db"
    run([binary, "generate", "bluesky", "--docs", a.docs, "--seed", 1, "-o", raw])
    run([binary, "--data-dir", data_dir, "ingest", "bluesky", "--sort-key", SORT_KEY, raw])
    run([binary, "--data-dir", data_dir, "optimize", "bluesky"])
    started = time.perf_counter()
    run([binary, "--data-dir", data_dir, "query", "ALTER TABLE bluesky SET (iceberg = true)"])
    publish_ms = (time.perf_counter() - started) * 1000
    table_dir = data_dir / "bluesky"
    metadata_bytes = sum(f.stat().st_size for f in (table_dir / "metadata").iterdir())

    strata_times, strata_answers = strata_runs(binary, data_dir, statements("strata.sql"), a.runs)
    spark_times, spark_note = None, None
    if shutil.which("java") is None:
        spark_note = "not run: Java is not installed"
    else:
        spark_times, spark_answers = spark_runs(table_dir, statements("spark_iceberg.sql"), a.runs,
                                                BENCH / "work" / "jars")
        for i, (mine, theirs) in enumerate(zip(strata_answers, spark_answers), start=1):
            if mine != theirs:
                raise RuntimeError(f"Q{i}: Spark over Iceberg answered {theirs[:5]}, Strata {mine[:5]}")

    rows = []
    print(f"{'query':<6} {'Strata cold ms':>15} {'hot ms':>8} {'Spark cold ms':>14} {'hot ms':>8} {'Spark÷Strata hot':>17}")
    for i, strata in enumerate(strata_times):
        s_cold, s_hot = cold_hot(strata)
        row = {"query": f"Q{i + 1}", "strata_cold_ms": s_cold, "strata_hot_ms": s_hot}
        line = f"Q{i + 1:<5} {s_cold:>15.1f} {s_hot:>8.1f}"
        if spark_times:
            k_cold, k_hot = cold_hot(spark_times[i])
            row.update(spark_cold_ms=k_cold, spark_hot_ms=k_hot, spark_over_strata_hot=k_hot / s_hot)
            line += f" {k_cold:>14.1f} {k_hot:>8.1f} {k_hot / s_hot:>17.2f}"
        else:
            line += f" {spark_note:>41}"
        rows.append(row)
        print(line)
    results = {"docs": a.docs, "runs": a.runs, "publish_ms": publish_ms, "metadata_bytes": metadata_bytes,
               "iceberg_spark_runtime": ":".join(ICEBERG_SPARK_RUNTIME), "spark": spark_note or "local[2]",
               "answers_equal": spark_times is not None, "queries": rows}
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"\npublication: {publish_ms:.0f} ms (ALTER TABLE, one process), metadata {metadata_bytes:,} bytes; "
          f"wrote {out / 'results.json'}")


if __name__ == "__main__":
    sys.exit(main())
