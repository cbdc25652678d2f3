"""ClickHouse through chdb (the real ClickHouse engine, in-process), one Session with its own data
folder per process, set up as JSONBench sets it up: a JSON column with typed paths for the sort key
and ORDER BY over those paths (DDL in bench/queries/<workload>/ddl/clickhouse.sql).

Actions: load (DDL + INSERT from the NDJSON file as JSONAsObject), query (N runs in this process)."""
import json
import time

import chdb
from chdb import session

from .protocol import serve

SESSION_SETTINGS = ["SET output_format_json_quote_64bit_integers = 0",
                    "SET output_format_json_quote_decimals = 0",
                    "SET use_query_cache = 0"]


def _session(path):
    s = session.Session(path)
    for stmt in SESSION_SETTINGS:
        s.query(stmt)
    return s


def _rows(result):
    parsed = json.loads(result.bytes() or b'{"data": [], "meta": []}')
    return [m["name"] for m in parsed.get("meta", [])], parsed.get("data", [])


def load(args):
    s = _session(args["dir"])
    for stmt in args["ddl"]:
        s.query(stmt)
    file = args["file"].replace("'", "\\'")
    started = time.perf_counter()
    s.query(f"INSERT INTO {args['table']} SELECT * FROM file('{file}', 'JSONAsObject') "
            "SETTINGS min_insert_block_size_rows = 1000000, min_insert_block_size_bytes = 0, "
            "input_format_allow_errors_num = 1000000000, input_format_allow_errors_ratio = 1")
    seconds = time.perf_counter() - started
    _, data = _rows(s.query(f"SELECT count() FROM {args['table']}", "JSONCompact"))
    docs = int(data[0][0])
    _, data = _rows(s.query(
        "SELECT sum(bytes_on_disk), sum(data_compressed_bytes), sum(primary_key_bytes_in_memory), count() "
        f"FROM system.parts WHERE database = currentDatabase() AND table = '{args['table']}' AND active",
        "JSONCompact"))
    total, data_bytes, index_bytes, parts = (int(x) for x in data[0])
    _, data = _rows(s.query("SELECT version()", "JSONCompact"))
    s.close()
    return {"load_seconds": seconds, "documents": docs, "table_bytes": total, "data_size": data_bytes,
            "index_size": index_bytes, "parts": parts, "version": f"chdb {chdb.__version__} (ClickHouse {data[0][0]})"}


def query(args):
    s = _session(args["dir"])
    times, columns, rows = [], [], []
    for _ in range(args["runs"]):
        started = time.perf_counter()
        result = s.query(args["sql"], "JSONCompact")
        times.append(time.perf_counter() - started)
        columns, rows = _rows(result)
    s.close()
    return {"times": times, "columns": columns, "rows": rows}


if __name__ == "__main__":
    serve({"load": load, "query": query})
