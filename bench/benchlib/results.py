"""The result files (schema documented in bench/README.md): one combined results.json per suite
run, one JSONBench-style file per system/workload/scale, plus summary.md and report.html rendered
from the combined file. Written after every system so an interrupted run keeps what it measured."""
import json
import time
from pathlib import Path

from .report import html as report_html
from .report import markdown as report_md

SCHEMA = "strata-bench/1"
# Fields of a run that keep JSONBench's names and meaning (JSONBench's results/*.json).
JSONBENCH_FIELDS = ("system", "version", "os", "date", "machine", "retains_structure", "tags", "dataset_size",
                    "num_loaded_documents", "total_size", "data_size", "index_size", "result")


def new(machine, settings):
    return {"schema": SCHEMA, "started": _now(), "finished": None, "machine": machine, "settings": settings,
            "datasets": [], "references": [], "runs": []}


def _now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def jsonbench_view(run, machine):
    """The run as a JSONBench results file: its field names, times in seconds, per query [r1, r2, r3]."""
    out = {k: run.get(k) for k in JSONBENCH_FIELDS}
    out["system"] = run.get("label", run["system"])
    out["os"] = machine.get("os")
    out["machine"] = f"{machine.get('cpus')} vCPU, {machine.get('memory_bytes', 0) / 2**30:.0f} GiB"
    out["strata_bench"] = run  # everything else this suite measured
    return out


def write(results, out_dir, final=False):
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if final:
        results["finished"] = _now()
    (out_dir / "results.json").write_text(json.dumps(results, indent=1, default=str))
    for run in results["runs"]:
        path = out_dir / run["workload"] / run["scale"] / f"{run['system']}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(jsonbench_view(run, results["machine"]), indent=1, default=str))
    summary = report_md.render(results)
    (out_dir / "summary.md").write_text(summary)
    (out_dir / "report.html").write_text(report_html.render(results))
    return summary


def load(path):
    return json.loads(Path(path).read_text())
