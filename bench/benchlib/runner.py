"""Running one system on one dataset: load, then each query in a fresh process after a cold start
(run 1 = cold, hot = min of the later runs), answers checked against the reference. Produces one run
record (schema in bench/README.md); a failure is recorded in it and never stops the suite."""
import platform
import time
import traceback

from .compare import compare, normalise_rows
from .procs import log
from .systems import NotRunnable, Unsupported

SAMPLE_ROWS = 10


def machine_info():
    import os

    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "cpu_model": cpu, "memory_bytes": mem,
            "os": platform.platform(), "python": platform.python_version()}


def run_system(system, workload, dataset, reference, runs, keep=False):
    """Load `dataset` into `system` and run the workload's queries. Returns the run record."""
    rec = {"system": system.name, "label": system.label, "workload": workload.name, "scale": dataset.scale,
           "date": time.strftime("%Y-%m-%d"), "retains_structure": system.retains_structure,
           "tags": list(system.tags), "dataset_size": dataset.docs, "status": "ok"}
    tag = f"{workload.name} {dataset.scale} {system.name}"
    try:
        system.check_runnable()
    except NotRunnable as e:
        rec.update(status="not run", error=str(e))
        log(f"{tag}: not run: {e}")
        return rec
    try:
        queries = system.queries(workload)
        log(f"{tag}: loading {dataset.docs:,} documents")
        load = system.load(workload, dataset)
        rec.update(version=load.pop("version", None), load_time=load.pop("load_seconds"),
                   num_loaded_documents=load.pop("documents"))
        rec.update(load)
        rec["data_quality"] = rec["num_loaded_documents"] / dataset.docs if dataset.docs else None
        rec["load_docs_per_second"] = rec["num_loaded_documents"] / rec["load_time"] if rec["load_time"] else None
        rec["ratio_to_zstd_1"] = rec["total_size"] / dataset.sizes["zstd_1"] if rec.get("total_size") else None
        log(f"{tag}: loaded {rec['num_loaded_documents']:,} docs in {rec['load_time']:.2f} s, "
            f"{rec['total_size']:,} B ({rec['ratio_to_zstd_1']:.2f} x zstd -1), "
            f"peak RSS {_mb(rec.get('load_peak_rss'))} MB")
        rec["queries"] = {}
        rec["result"] = []
        for qid, sql in queries.items():
            q = _run_query(system, workload, qid, sql, runs, reference)
            rec["queries"][qid] = q
            rec["result"].append(q.get("times") or [None] * runs)
            rec.setdefault("cold_method", q.get("cold_method"))
            if "unsupported" in q:
                log(f"{tag} {qid}: unsupported: {q['unsupported'][:300]}")
            elif "error" in q:
                log(f"{tag} {qid}: FAILED: {q['error'][:300]}")
            else:
                log(f"{tag} {qid}: cold {q['cold'] * 1000:.1f} ms, hot {q['hot'] * 1000:.1f} ms, "
                    f"{q['rows_returned']} rows, matches reference: {q['matches_reference']}"
                    + (f" ({q['mismatch']})" if q.get("mismatch") else ""))
        if any("error" in q for q in rec["queries"].values()):
            rec["status"] = "partial"
    except Exception as e:  # a failed peer is reported and the rest continue
        rec.update(status="failed", error=f"{type(e).__name__}: {e}"[-3000:], traceback=traceback.format_exc()[-3000:])
        log(f"{tag}: FAILED: {rec['error'][:500]}")
    finally:
        if not keep:
            try:
                system.cleanup()
            except Exception as e:  # cleanup problems are reported, not fatal
                log(f"{tag}: cleanup failed: {e}")
    return rec


def _run_query(system, workload, qid, sql, runs, reference):
    q = {"sql": sql}
    try:
        q["cold_method"] = system.cold_start()
        r = system.query(workload, sql, runs)
        times = r["times"]
        rows = normalise_rows(r["rows"])
        q.update(times=times, cold=times[0], hot=min(times[1:]) if len(times) > 1 else None,
                 peak_rss=r.get("peak_rss"), columns=r.get("columns"), rows_returned=len(rows),
                 rows=rows[:SAMPLE_ROWS])
        ref = (reference or {}).get("queries", {}).get(qid)
        if ref is None:
            q["matches_reference"] = None
            q["mismatch"] = "no reference answer"
        else:
            approx = workload.approximate.get(system.name, {}).get(qid)
            ok, detail = compare(rows, ref, approx)
            q["matches_reference"] = ok
            if approx:
                q["approximate_columns"] = {str(k): v for k, v in approx.items()}
            if detail:
                q["mismatch"] = detail
    except Unsupported as e:
        q["unsupported"] = str(e)
    except Exception as e:
        q["error"] = f"{type(e).__name__}: {e}"[-2000:]
    return q


def _mb(n):
    return "?" if n is None else f"{n / 1e6:.0f}"
