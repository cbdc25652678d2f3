"""The reference answers: the workload's DuckDB queries run by DuckDB directly over the raw NDJSON
file (a view on read_ndjson_objects, nothing loaded), in a child process. Every system's answers,
DuckDB's own stored copy included, are compared with these."""
from .compare import normalise_rows
from .procs import log
from .systems.base import Context, WorkerSystem


class _ReferenceWorker(WorkerSystem):
    name = "reference"
    label = "Reference (DuckDB over raw NDJSON)"
    worker = "duckdb_worker"


def compute(ctx: Context, workload, dataset):
    """{query id: normalised rows} plus the DuckDB version, or raises with the reason."""
    queries = workload.queries_for("duckdb")
    log(f"{workload.name} {dataset.scale}: reference answers (DuckDB over the raw NDJSON)")
    r = _ReferenceWorker(ctx).call("reference", file=str(dataset.path), table=workload.table, queries=queries)
    return {"engine": f"DuckDB {r['version']} over read_ndjson_objects('{dataset.path.name}')",
            "queries": {qid: normalise_rows(q["rows"]) for qid, q in r["queries"].items()},
            "seconds": {qid: q["times"][0] for qid, q in r["queries"].items()}}
