"""summary.md: per workload and scale, load/storage/memory, hot and cold times per query with the
ratio to Strata, geometric means, answer checks, and the systems that failed or could not run."""
from .model import mb, ms, optimize_note, ratio, sections


def header(results):
    m = results.get("machine", {})
    s = results.get("settings", {})
    return (f"Machine: {m.get('cpus')} vCPU ({m.get('cpu_model', '?')}), {m.get('memory_bytes', 0) / 2**30:.1f} GiB, "
            f"{m.get('os', '?')}. Run {results.get('started')} → {results.get('finished') or 'unfinished'}; "
            f"{s.get('runs', 3)} runs per query." + (f" Strata binary: {s['strata_bin']}." if s.get("strata_bin") else ""))


def load_table(sec):
    rows = ["| system | version | loaded / dataset | load s | docs/s | storage MB | × zstd -1 | × Strata storage "
            "| load peak RSS MB | query peak RSS MB | answers = reference |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in sec.runs:
        checked = sec.correct(r)
        answers = "not checked" if checked is None else f"{checked[0]}/{checked[1]}"
        rows.append(
            f"| {r.get('label', r['system'])} | {r.get('version') or '?'} | {r['num_loaded_documents']:,} / "
            f"{r['dataset_size']:,} ({r['data_quality']:.2%}) | {r['load_time']:.2f} | "
            f"{r['load_docs_per_second']:,.0f} | {mb(r.get('total_size'))} | {_x(r.get('ratio_to_zstd_1'))} | "
            f"{ratio(sec.storage_ratio(r))} | {mb(r.get('load_peak_rss'), 0)} | {mb(sec.max_query_rss(r), 0)} | "
            f"{answers} |")
    for note in filter(None, map(optimize_note, sec.runs)):
        rows += ["", note]
    return rows


def times_table(sec, kind):
    rows = ["| system | " + " | ".join(sec.queries) + " | geomean | geomean ÷ Strata |",
            "|---|" + "---:|" * (len(sec.queries) + 2)]
    for r in sec.runs:
        cells = []
        for q in sec.queries:
            qr = r["queries"].get(q, {})
            t = qr.get(kind)
            if t is None:
                cells.append("unsupported" if "unsupported" in qr else "failed" if "error" in qr else "—")
                continue
            cell = ms(t)
            rt = sec.ratio(r, q, kind)
            if r["system"] != "strata" and rt is not None:
                cell += f" ({rt:.2f}×)"
            if qr.get("matches_reference") is False:
                cell += " ✗"
            cells.append(cell)
        n = len(sec.answered(r, kind))
        note = "" if n == len(sec.queries) else f" ({n} of {len(sec.queries)})"
        rows.append(f"| {r.get('label', r['system'])} | " + " | ".join(cells) +
                    f" | {ms(sec.geomean_time(r, kind))}{note} | {ratio(sec.geomean_ratio(r, kind))} |")
    return rows


def _x(v):
    return "—" if v is None else f"{v:.2f}"


def render(results):
    out = ["# Strata benchmark results", "", header(results), ""]
    cold_methods = sorted({r.get("cold_method") for r in results.get("runs", []) if r.get("cold_method")})
    for sec in sections(results):
        d = sec.dataset
        out += [f"## {sec.title} — {sec.scale} ({d.get('dataset_size', 0):,} documents)", ""]
        if "bytes_raw" in d:
            out += [f"Data: raw {mb(d['bytes_raw'])} MB · zstd -1 {mb(d['bytes_zstd_1'])} MB · zstd -3 "
                    f"{mb(d['bytes_zstd_3'])} MB — `{d.get('generator')}`.", ""]
        elif d.get("error"):
            out += [f"No dataset: {d['error']}", ""]
        if sec.reference.get("engine"):
            out += [f"Reference answers: {sec.reference['engine']}.", ""]
        elif sec.reference.get("error"):
            out += [f"Reference answers failed: {sec.reference['error']}", ""]
        if sec.runs:
            out += ["Load, storage, memory:", ""] + load_table(sec) + [""]
            out += ["Hot (ms, min of runs 2 and 3; in brackets: system ÷ Strata, > 1 means Strata is faster; geomean over "
                    "the queries the system answered, its ratio over the queries both answered):", ""]
            out += times_table(sec, "hot") + [""]
            out += ["Cold (ms, run 1 in a fresh process after a cold start):", ""] + times_table(sec, "cold") + [""]
            qd = "; ".join(f"{q}: {sec.descriptions[q]}" for q in sec.queries if q in sec.descriptions)
            if qd:
                out += [f"Queries — {qd}.", ""]
        notes = []
        for r in sec.runs:
            for q, qr in r["queries"].items():
                if qr.get("matches_reference") is False:
                    notes.append(f"- ✗ {r.get('label', r['system'])} {q}: answer differs from the reference: {qr.get('mismatch')}")
                if "error" in qr:
                    notes.append(f"- {r.get('label', r['system'])} {q} failed: {qr['error'][:300]}")
                if "unsupported" in qr:
                    notes.append(f"- {r.get('label', r['system'])} {q} unsupported: {qr['unsupported'][:300]}")
            if r.get("rejected"):
                notes.append(f"- {r.get('label', r['system'])} rejected {r['rejected']:,} documents at load; first: "
                             f"{str(r.get('first_rejection') or '')[:300]}")
        for r in sec.others:
            what = "not run" if r.get("status") == "not run" else "failed"
            notes.append(f"- {r.get('label', r['system'])}: {what}: {str(r.get('error', ''))[:400]}")
        if notes:
            out += notes + [""]
    if cold_methods:
        out += [f"Cold runs: {'; '.join(cold_methods)}.", ""]
    return "\n".join(out)
