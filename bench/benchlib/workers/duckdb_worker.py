"""DuckDB, in-process, as JSONBench runs it: one JSON column `j`, queried with ->> paths.

Actions: load (DDL + insert from the NDJSON file + CHECKPOINT), query (one SQL statement, N runs in
this process), reference (the workload's DuckDB queries over a view on the raw NDJSON file)."""
import time

import duckdb

from .protocol import serve

MAX_OBJECT = 1 << 30


def _connect(path, read_only=False):
    con = duckdb.connect(path, read_only=read_only)
    con.execute("SET TimeZone = 'UTC'")
    return con


def _source(file):
    quoted = file.replace("'", "''")
    return f"read_ndjson_objects('{quoted}', ignore_errors = true, maximum_object_size = {MAX_OBJECT})"


def load(args):
    con = _connect(args["db"])
    for stmt in args["ddl"]:
        con.execute(stmt)
    started = time.perf_counter()
    con.execute(f"INSERT INTO {args['table']} SELECT json FROM {_source(args['file'])}")
    con.execute("CHECKPOINT")
    seconds = time.perf_counter() - started
    docs = con.execute(f"SELECT count(*) FROM {args['table']}").fetchone()[0]
    blocks = con.execute(
        f"SELECT count(DISTINCT block_id) * (SELECT block_size FROM pragma_database_size()) "
        f"FROM pragma_storage_info('{args['table']}')").fetchone()[0]
    con.close()
    return {"load_seconds": seconds, "documents": docs, "table_bytes": blocks, "version": duckdb.__version__}


def _timed_runs(con, sql, runs):
    times, rows, columns = [], [], []
    for _ in range(runs):
        started = time.perf_counter()
        cur = con.execute(sql)
        rows = cur.fetchall()
        times.append(time.perf_counter() - started)
        columns = [d[0] for d in cur.description]
    return {"times": times, "columns": columns, "rows": [list(r) for r in rows]}


def query(args):
    con = _connect(args["db"], read_only=True)
    return _timed_runs(con, args["sql"], args["runs"])


def reference(args):
    con = _connect(":memory:")
    con.execute(f"CREATE VIEW {args['table']} AS SELECT json AS j FROM {_source(args['file'])}")
    out = {"version": duckdb.__version__, "queries": {}}
    for qid, sql in args["queries"].items():
        out["queries"][qid] = _timed_runs(con, sql, 1)
    return out


if __name__ == "__main__":
    serve({"load": load, "query": query, "reference": reference})
