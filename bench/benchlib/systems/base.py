"""The interface every system implements, and the shared context (work dir, binaries, Python)."""
import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..procs import drop_page_cache, run_measured

BENCH_DIR = Path(__file__).resolve().parents[2]


class NotRunnable(Exception):
    """This system cannot run on this machine; the message says why."""


class Unsupported(Exception):
    """This query cannot be expressed for this system; the message says why."""


@dataclass
class Context:
    work: Path  # scratch space for databases (bench/work by default)
    strata_bin: Path
    strata_baseline_bin: Path | None = None  # another build, run as system `strata-baseline`
    python: str = sys.executable
    query_timeout: float = 600.0  # seconds per query run, for systems that can be this slow (FerretDB)


class System:
    name = "?"
    label = "?"
    retains_structure = "yes"
    tags = ()

    def __init__(self, ctx):
        self.ctx = ctx

    def check_runnable(self):
        """Raise NotRunnable(reason) when this system cannot run here."""

    def queries(self, workload):
        """{query id: query text} in this system's dialect (bench/queries/<workload>/<system>.sql)."""
        return workload.queries_for(self.name)

    def load(self, workload, dataset):
        """Load `dataset` into a fresh database. Returns a dict with at least load_seconds,
        documents, total_size (bytes of the table: data + indexes), total_size_method,
        data_dir_bytes, load_peak_rss, version."""
        raise NotImplementedError

    def cold_start(self):
        """Prepare a cold run: drop the OS page cache. Returns the method used, for the results."""
        return drop_page_cache()

    def query(self, workload, sql, runs):
        """Run `sql` `runs` times in one fresh process. Returns times (seconds per run), rows
        (of the last run), columns and peak_rss (bytes)."""
        raise NotImplementedError

    def cleanup(self):
        """Free the disk used by the loaded database (and stop servers)."""


class WorkerSystem(System):
    """A system whose engine runs inside a Python child process (benchlib/workers/<module>.py)."""

    worker = "?"

    def call(self, action, **args):
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
            out = Path(f.name)
        try:
            args["out"] = str(out)
            proc = run_measured([self.ctx.python, "-m", f"benchlib.workers.{self.worker}", action,
                                 json.dumps(args)], cwd=BENCH_DIR)
            try:
                result = json.loads(out.read_text() or "{}")
            except json.JSONDecodeError:
                result = {}
            if proc.code != 0 or "error" in result:
                detail = result.get("error") or proc.stderr.decode(errors="replace").strip()[-2000:]
                raise RuntimeError(f"{self.label} {action} failed (exit {proc.code}): {detail}")
            result["peak_rss"] = proc.peak_rss
            result["wall_seconds"] = proc.seconds
            return result
        finally:
            out.unlink(missing_ok=True)


def read_ddl(workload, system):
    """The DDL statements of `system` for `workload` (bench/queries/<workload>/ddl/<system>.sql)."""
    from ..workloads import QUERY_DIR, split_sql

    path = QUERY_DIR / workload.name / "ddl" / f"{system}.sql"
    if not path.exists():
        raise FileNotFoundError(f"no {workload.name} DDL for {system}: {path} is missing")
    return split_sql(path.read_text())
