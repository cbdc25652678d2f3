"""ClickHouse through chdb (the real engine, in-process), configured as JSONBench configures it:
a JSON column with typed paths for the sort key, ORDER BY over those paths, ZSTD compression.

Usage: clickhouse.py load NDJSON DIR | clickhouse.py query DIR SQL RUNS   (prints one JSON object)
"""
import json
import sys
import time

from chdb import session

DDL = """CREATE TABLE bench.bluesky (
  data JSON(kind LowCardinality(String), "commit.operation" LowCardinality(String),
            "commit.collection" LowCardinality(String), did String, time_us UInt64) CODEC(ZSTD(1))
) ENGINE = MergeTree
ORDER BY (data.kind, data."commit.operation", data."commit.collection", data.did, fromUnixTimestamp64Micro(data.time_us))"""


def load(ndjson, directory):
    s = session.Session(directory)
    s.query("CREATE DATABASE IF NOT EXISTS bench")
    s.query(DDL)
    started = time.perf_counter()
    s.query(f"INSERT INTO bench.bluesky SELECT json FROM file('{ndjson}', 'JSONAsObject') "
            "SETTINGS input_format_allow_errors_ratio = 1, input_format_allow_errors_num = 1000000000")
    seconds = time.perf_counter() - started
    out = s.query("SELECT sum(rows), sum(bytes_on_disk) FROM system.parts WHERE database = 'bench' AND table = 'bluesky' AND active", "JSONCompact")
    rows, size = json.loads(str(out))["data"][0]
    return {"load_seconds": seconds, "documents": int(rows), "bytes": int(size)}


def query(directory, sql, runs):
    s = session.Session(directory)
    s.query("USE bench")
    times, result = [], None
    for _ in range(runs):
        started = time.perf_counter()
        out = s.query(sql, "JSONCompact")
        times.append(time.perf_counter() - started)
        result = json.loads(str(out))["data"]
    return {"times": times, "rows": result}


if __name__ == "__main__":
    if sys.argv[1] == "load":
        print(json.dumps(load(sys.argv[2], sys.argv[3])))
    else:
        print(json.dumps(query(sys.argv[2], sys.argv[3], int(sys.argv[4])), default=str))
