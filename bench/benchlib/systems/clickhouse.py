"""ClickHouse via PyPI `chdb` (the real engine, in-process), in a child process with its own data
folder; JSON column with typed sort-key paths, as JSONBench's DDL."""
import importlib.util
import shutil

from ..procs import dir_bytes
from .base import NotRunnable, WorkerSystem, read_ddl


class ClickHouse(WorkerSystem):
    name = "clickhouse"
    label = "ClickHouse (chdb)"
    worker = "clickhouse_worker"

    def check_runnable(self):
        if importlib.util.find_spec("chdb") is None:
            raise NotRunnable("the Python package chdb is not installed (pip install -r bench/requirements.txt)")

    def load(self, workload, dataset):
        self.dir = self.ctx.work / "clickhouse"
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        r = self.call("load", dir=str(self.dir), file=str(dataset.path), table=workload.table,
                      ddl=read_ddl(workload, self.name))
        return {"load_seconds": r["load_seconds"], "documents": r["documents"], "version": r["version"],
                "total_size": r["table_bytes"],
                "total_size_method": "sum(bytes_on_disk) of the table's active parts (system.parts), as JSONBench",
                "data_size": r["data_size"], "index_size": r["index_size"], "parts": r["parts"],
                "data_dir_bytes": dir_bytes(self.dir), "load_peak_rss": r["peak_rss"]}

    def query(self, workload, sql, runs):
        return self.call("query", dir=str(self.dir), sql=sql, runs=runs)

    def cleanup(self):
        if getattr(self, "dir", None):
            shutil.rmtree(self.dir, ignore_errors=True)
