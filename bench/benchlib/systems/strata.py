"""Strata itself, through its CLI: `strata ingest` then `strata optimize` to load,
`strata query --format ndjson --timing` with the statement repeated N times in one process to query
(times from the `Time: N ms` lines).

The ingest cuts a part per 96 MiB of buffered values (8 parts per 1M Bluesky events); `optimize`
merges them into large sorted parts, as ClickHouse's merges do in the background. Its time and
memory are recorded apart from the ingest's, and storage is that of the live parts afterwards (the
merge's inputs stay on disk 10 minutes for older readers, like ClickHouse's inactive parts)."""
import json
import re
import shutil
from pathlib import Path

from ..procs import dir_bytes, run_measured
from .base import NotRunnable, System

TIME_RE = re.compile(r"Time:\s*([0-9.]+)\s*ms")
LOADED_RE = re.compile(r"loaded\s+([0-9,]+)")


class Strata(System):
    name = "strata"
    label = "Strata"

    @property
    def binary(self):
        return self.ctx.strata_bin

    def check_runnable(self):
        if not Path(self.binary).is_file():
            raise NotRunnable(f"Strata binary not found at {self.binary} "
                              "(cargo build --release --bin strata, or pass --strata-bin)")

    def _version(self):
        proc = run_measured([self.binary, "--version"])
        return proc.stdout.decode(errors="replace").strip() or "strata (version unknown)"

    def load(self, workload, dataset):
        self.dir = self.ctx.work / self.name
        shutil.rmtree(self.dir, ignore_errors=True)
        proc = run_measured([self.binary, "--data-dir", self.dir, "ingest", workload.table,
                             "--sort-key", ",".join(workload.sort_key), dataset.path]).check("strata ingest")
        summary = proc.stderr.decode(errors="replace")
        m = LOADED_RE.search(summary)
        docs = int(m.group(1).replace(",", "")) if m else None
        reported = self._tables(workload.table)
        if docs is None:
            docs = reported.get("documents")
        if docs is None:
            raise RuntimeError(f"could not read the number of loaded documents from strata's output: {summary[-500:]}")
        optimize = run_measured([self.binary, "--data-dir", self.dir, "optimize",
                                 workload.table]).check("strata optimize")
        merged = self._tables(workload.table)
        table_dir = self.dir / workload.table
        live = merged.get("bytes")
        manifest = table_dir / "manifest.json"
        return {"load_seconds": proc.seconds, "documents": docs, "version": self._version(),
                "total_size": live + manifest.stat().st_size if live is not None else dir_bytes(table_dir),
                "total_size_method": "live part files (strata tables) + manifest.json",
                "system_reported_size": live, "parts": merged.get("parts"),
                "parts_after_ingest": reported.get("parts"),
                "optimize_seconds": optimize.seconds, "optimize_peak_rss": optimize.peak_rss,
                "data_dir_bytes": dir_bytes(self.dir), "load_peak_rss": proc.peak_rss,
                "load_log": (summary.strip()[-800:] + "\n"
                             + optimize.stderr.decode(errors="replace").strip()[-200:])}

    def _tables(self, table):
        """Lenient parse of `strata tables`: the row of `table` -> documents, parts, bytes."""
        proc = run_measured([self.binary, "--data-dir", self.dir, "tables"])
        for line in proc.stdout.decode(errors="replace").splitlines():
            fields = line.split()
            if fields and fields[0] == table:
                numbers = [int(f.replace(",", "")) for f in fields[1:4] if f.replace(",", "").isdigit()]
                if len(numbers) == 3:
                    return dict(zip(("documents", "parts", "bytes"), numbers))
        return {}

    def query(self, workload, sql, runs):
        script = "; ".join([sql.rstrip().rstrip(";")] * runs)
        proc = run_measured([self.binary, "--data-dir", self.dir, "query", "--format", "ndjson",
                             "--timing", script]).check("strata query")
        times = [float(t) / 1000 for t in TIME_RE.findall(proc.stderr.decode(errors="replace"))]
        if len(times) != runs:
            raise RuntimeError(f"expected {runs} 'Time: N ms' lines from strata query, got {len(times)}")
        rows = [json.loads(line) for line in proc.stdout.decode().splitlines() if line.strip()]
        if len(rows) % runs:
            raise RuntimeError(f"strata query printed {len(rows)} rows for {runs} runs of one statement")
        per_run = len(rows) // runs
        last = rows[len(rows) - per_run:]
        columns = list(last[0].keys()) if last else []
        return {"times": times, "columns": columns, "rows": last, "peak_rss": proc.peak_rss}

    def cleanup(self):
        if getattr(self, "dir", None):
            shutil.rmtree(self.dir, ignore_errors=True)


class StrataBaseline(Strata):
    """Another build of Strata (`--strata-baseline`), measured beside the current one in the same
    run so that a change's cost or gain is a ratio of two side-by-side measurements."""
    name = "strata-baseline"
    label = "Strata (baseline)"

    @property
    def binary(self):  # Strata.check_runnable reads it first, so a missing baseline is "not run"
        if self.ctx.strata_baseline_bin is None:
            raise NotRunnable("no baseline build given (--strata-baseline PATH)")
        return self.ctx.strata_baseline_bin

    def queries(self, workload):
        return workload.queries_for(Strata.name)  # the same SQL as the current build
