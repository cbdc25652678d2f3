"""JSONBench Q1–Q5 with the table on S3-compatible object storage next to the same table on local
disk (issue 16): cold (empty local cache) and hot times, requests and bytes fetched per query.

The S3 server is moto in server mode on loopback (PyPI; Python, so its throughput, not the
network's, bounds cold reads). Generates `--docs` Bluesky events, ingests and optimizes them as
JSONBench's table twice — into a local data directory and into `s3://bench/jsonbench` — checks
that every query answers the same on both, then per query:
- local: one `strata query` process running it `--runs` times; hot is the fastest run;
- S3 cold: one process on an empty cache directory — staging (the table's manifest, the
  footers and small files of its parts) and the query's first run, whose pages all come from S3;
- S3 hot: the fastest later run in that process (pages from the block cache);
- S3 warm process: a new process on the warm cache — staging then costs a LIST and one GET
  (the newest manifest), reported as its own column.
Bytes fetched are compared with the compressed size of the columns the query reads (from the
parts' footers) and with the table's size. Prints the table, writes OUT/results.json. Usage:
  bench/.venv/bin/python bench/object_storage.py --strata-bin BIN [--docs 10000000] [--runs 5]
"""
import argparse
import glob
import json
import os
import re
import shutil
import socket
import statistics
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from benchlib.strata_cli import run  # noqa: E402

SORT_KEY = "kind,commit.operation,commit.collection,did,time_us"
BUCKET = "bench"
# The JSON paths each JSONBench query reads (bench/queries/jsonbench/strata.sql).
QUERY_PATHS = [
    ["commit.collection"],
    ["commit.collection", "kind", "commit.operation", "did"],
    ["commit.collection", "kind", "commit.operation", "time_us"],
    ["did", "time_us", "kind", "commit.operation", "commit.collection"],
    ["did", "time_us", "kind", "commit.operation", "commit.collection"],
]


def statements():
    text = (BENCH / "queries" / "jsonbench" / "strata.sql").read_text()
    return [s.strip() for s in text.split(";") if s.strip()]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_s3():
    import logging

    from moto.server import ThreadedMotoServer
    import boto3

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="bench",
                 aws_secret_access_key="bench").create_bucket(Bucket=BUCKET)
    env = dict(os.environ, AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
               AWS_REGION="us-east-1", AWS_ENDPOINT_URL=endpoint, AWS_ALLOW_HTTP="true")
    return server, env


def timed_query(binary, data_dir, sql, runs, env):
    """One `strata query --timing` process running `sql` `runs` times: per run (ms, requests,
    bytes), and the staging line's (ms, requests, bytes) on object storage."""
    script = ";".join([sql] * runs)
    proc = run([binary, "--data-dir", data_dir, "query", "--timing", "--format", "ndjson", script], env=env)
    err = proc.stderr
    times = [float(t) for t in re.findall(r"Time: ([0-9.]+) ms", err)]
    fetched = [(int(g), int(b)) for g, b in re.findall(r"Fetched: (\d+) requests, (\d+) bytes", err)]
    staged = re.search(r"Staged: \d+ tables, (\d+) requests, (\d+) bytes, ([0-9.]+) ms", err)
    if len(times) != runs:
        raise RuntimeError(f"expected {runs} timings, got {len(times)}: {err[-2000:]}")
    answer = proc.stdout.splitlines()[: len(proc.stdout.splitlines()) // runs]
    runs_out = [(t, *(fetched[i] if fetched else (0, 0))) for i, t in enumerate(times)]
    stage = (float(staged.group(3)), int(staged.group(1)), int(staged.group(2))) if staged else None
    return runs_out, stage, answer


def column_bytes(table_dir):
    """Compressed bytes per column path over all parts, footers, and the parts' total size."""
    import pyarrow.parquet as pq

    per_column, footers, total = {}, 0, 0
    for path in glob.glob(str(table_dir / "parts" / "*.parquet")):
        meta = pq.ParquetFile(path).metadata
        footers += meta.serialized_size
        total += os.path.getsize(path)
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            for c in range(group.num_columns):
                chunk = group.column(c)
                per_column[chunk.path_in_schema] = per_column.get(chunk.path_in_schema, 0) + chunk.total_compressed_size
    return per_column, footers, total


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--strata-bin", required=True)
    parser.add_argument("--docs", type=int, default=10_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--work", default="bench/work/object-storage")
    parser.add_argument("--out", default="bench/results/object-storage")
    a = parser.parse_args()
    binary, work, out = a.strata_bin, Path(a.work), Path(a.out)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    out.mkdir(parents=True, exist_ok=True)
    server, env = start_s3()
    try:
        raw, local = work / "bluesky.ndjson", work / "db"
        remote = f"s3://{BUCKET}/jsonbench"
        run([binary, "generate", "bluesky", "--docs", a.docs, "--seed", 1, "-o", raw])
        run([binary, "--data-dir", local, "ingest", "bluesky", "--sort-key", SORT_KEY, raw])
        run([binary, "--data-dir", local, "optimize", "bluesky"])
        setup_env = dict(env, STRATA_CACHE_DIR=str(work / "setup-cache"))
        started = time.perf_counter()
        run([binary, "--data-dir", remote, "ingest", "bluesky", "--sort-key", SORT_KEY, raw], env=setup_env)
        run([binary, "--data-dir", remote, "optimize", "bluesky"], env=dict(setup_env, STRATA_GRACE_SECONDS="0"))
        # Collect the parts the merge replaced, so that the table holds what the local one does.
        run([binary, "--data-dir", remote, "optimize", "bluesky"], env=dict(setup_env, STRATA_GRACE_SECONDS="0"))
        load_s = time.perf_counter() - started
        raw.unlink()
        shutil.rmtree(work / "setup-cache")
        per_column, footer_bytes, table_bytes = column_bytes(local / "bluesky")

        rows = []
        header = (f"{'query':<6} {'local ms':>9} {'S3 cold ms':>11} {'S3 hot ms':>10} {'hot÷local':>10} "
                  f"{'cold GETs':>10} {'cold MB':>8} {'needed MB':>10} {'warm stage ms':>14}")
        print(header)
        for i, sql in enumerate(statements()):
            local_runs, _, local_answer = timed_query(binary, local, sql, a.runs, env)
            cache = work / f"cache-q{i + 1}"
            cold_runs, cold_stage, s3_answer = timed_query(binary, remote, sql, a.runs,
                                                           dict(env, STRATA_CACHE_DIR=str(cache)))
            _, warm_stage, _ = timed_query(binary, remote, sql, 1, dict(env, STRATA_CACHE_DIR=str(cache)))
            if local_answer != s3_answer:
                raise RuntimeError(f"Q{i + 1}: S3 answered {s3_answer[:3]}, local {local_answer[:3]}")
            shutil.rmtree(cache)
            local_hot = min(t for t, _, _ in local_runs)
            s3_hot = min(t for t, _, _ in cold_runs[1:])
            cold_ms = cold_stage[0] + cold_runs[0][0]
            cold_gets = cold_stage[1] + cold_runs[0][1]
            cold_bytes = cold_stage[2] + cold_runs[0][2]
            needed = sum(per_column.get(p, 0) for p in QUERY_PATHS[i])
            row = {"query": f"Q{i + 1}", "local_hot_ms": local_hot, "local_median_ms": statistics.median(t for t, _, _ in local_runs),
                   "s3_cold_ms": cold_ms, "s3_cold_stage_ms": cold_stage[0], "s3_hot_ms": s3_hot,
                   "s3_hot_median_ms": statistics.median(t for t, _, _ in cold_runs[1:]),
                   "hot_over_local": s3_hot / local_hot, "cold_gets": cold_gets, "cold_bytes": cold_bytes,
                   "cold_stage_bytes": cold_stage[2], "hot_gets": min(g for _, g, _ in cold_runs[1:]),
                   "needed_column_bytes": needed, "warm_stage_ms": warm_stage[0], "warm_stage_gets": warm_stage[1]}
            rows.append(row)
            print(f"Q{i + 1:<5} {local_hot:>9.1f} {cold_ms:>11.1f} {s3_hot:>10.1f} {s3_hot / local_hot:>10.2f} "
                  f"{cold_gets:>10} {cold_bytes / 1e6:>8.1f} {needed / 1e6:>10.1f} {warm_stage[0]:>14.1f}")
    finally:
        server.stop()
    reference = None
    spark = BENCH / "results" / "iceberg-10m" / "results.json"
    if spark.exists() and a.docs == json.loads(spark.read_text())["docs"]:
        reference = {q["query"]: q.get("spark_hot_ms") for q in json.loads(spark.read_text())["queries"]}
        print("Spark over Iceberg (local disk, bench/results/iceberg-10m), hot ms: "
              + ", ".join(f"{k} {v:.0f}" for k, v in reference.items() if v))
    results = {"docs": a.docs, "runs": a.runs, "s3_server": "moto (ThreadedMotoServer, loopback)",
               "table_bytes": table_bytes, "footer_bytes": footer_bytes, "s3_load_seconds": load_s,
               "spark_over_iceberg_hot_ms_reference": reference, "queries": rows}
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"\ntable {table_bytes / 1e6:.1f} MB ({footer_bytes / 1e6:.2f} MB footers); load into S3 "
          f"(ingest + optimize) {load_s:.0f} s; wrote {out / 'results.json'}")


if __name__ == "__main__":
    sys.exit(main())
