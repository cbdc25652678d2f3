"""DuckDB (PyPI `duckdb`), in a child process: documents in one JSON column, as in JSONBench."""
import importlib.util
import shutil

from ..procs import dir_bytes
from .base import NotRunnable, WorkerSystem, read_ddl


class DuckDB(WorkerSystem):
    name = "duckdb"
    label = "DuckDB"
    worker = "duckdb_worker"

    def check_runnable(self):
        if importlib.util.find_spec("duckdb") is None:
            raise NotRunnable("the Python package duckdb is not installed (pip install -r bench/requirements.txt)")

    def load(self, workload, dataset):
        self.dir = self.ctx.work / "duckdb"
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        self.db = self.dir / f"{workload.name}.duckdb"
        r = self.call("load", db=str(self.db), file=str(dataset.path), table=workload.table,
                      ddl=read_ddl(workload, self.name))
        size = dir_bytes(self.dir)
        return {"load_seconds": r["load_seconds"], "documents": r["documents"], "version": f"DuckDB {r['version']}",
                "total_size": size, "total_size_method": "database file(s) after CHECKPOINT (os.walk)",
                "data_dir_bytes": size, "system_reported_size": r["table_bytes"],
                "load_peak_rss": r["peak_rss"]}

    def query(self, workload, sql, runs):
        return self.call("query", db=str(self.db), sql=sql, runs=runs)

    def cleanup(self):
        if getattr(self, "dir", None):
            shutil.rmtree(self.dir, ignore_errors=True)
