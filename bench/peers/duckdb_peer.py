"""DuckDB as JSONBench runs it: documents stored in one JSON column, queried with ->> paths.
DuckDB on the raw NDJSON is also the reference for every system's answers.

Usage: duckdb_peer.py load NDJSON DBFILE | duckdb_peer.py query DBFILE SQL RUNS   (prints JSON)
"""
import json
import os
import sys
import time

import duckdb


def load(ndjson, dbfile):
    con = duckdb.connect(dbfile)
    started = time.perf_counter()
    con.execute(f"CREATE TABLE bluesky AS SELECT json AS j FROM read_ndjson_objects('{ndjson}', ignore_errors = true)")
    con.execute("CHECKPOINT")
    seconds = time.perf_counter() - started
    rows = con.execute("SELECT count(*) FROM bluesky").fetchone()[0]
    con.close()
    return {"load_seconds": seconds, "documents": rows, "bytes": os.path.getsize(dbfile)}


def query(dbfile, sql, runs):
    con = duckdb.connect(dbfile, read_only=True)
    times, result = [], None
    for _ in range(runs):
        started = time.perf_counter()
        result = con.execute(sql).fetchall()
        times.append(time.perf_counter() - started)
    return {"times": times, "rows": [list(r) for r in result]}


if __name__ == "__main__":
    if sys.argv[1] == "load":
        print(json.dumps(load(sys.argv[2], sys.argv[3])))
    else:
        print(json.dumps(query(sys.argv[2], sys.argv[3], int(sys.argv[4])), default=str))
