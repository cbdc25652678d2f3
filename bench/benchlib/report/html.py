"""report.html: a static page (no scripts, no network, opens from disk) with, per workload and scale,
the same tables as summary.md and four inline SVG charts: storage, hot times per query and cold
times per query (log scale), and each peer's hot time ÷ Strata's per query (log scale, 1× line)."""
from html import escape

from . import svg
from .markdown import header
from .model import color, mb, ms, optimize_note, ratio, sections
from .svg import REFERENCE_GREY

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1100px;margin:24px auto;padding:0 16px;color:#111827}
h1{font-size:24px}h2{font-size:19px;margin-top:36px;border-bottom:1px solid #e5e7eb;padding-bottom:4px}
table{border-collapse:collapse;margin:8px 0 16px;font-size:13px}th,td{border:1px solid #e5e7eb;padding:4px 8px}
th{background:#f9fafb;text-align:left}td.n{text-align:right;font-variant-numeric:tabular-nums}
.bad{color:#b91c1c;font-weight:600}.muted{color:#6b7280}.charts{display:flex;flex-wrap:wrap;gap:12px}
svg.chart{border:1px solid #f3f4f6;background:#fff;max-width:100%;height:auto}
"""


def _table(head, rows, numeric_from=1):
    out = ["<table><thead><tr>" + "".join(f"<th>{escape(h)}</th>" for h in head) + "</tr></thead><tbody>"]
    for row in rows:
        cells = []
        for i, c in enumerate(row):
            cls = ' class="n"' if i >= numeric_from else ""
            cells.append(f"<td{cls}>{c}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _load_rows(sec):
    rows = []
    for r in sec.runs:
        checked = sec.correct(r)
        if checked is None:
            answers = '<span class="muted">not checked</span>'
        else:
            good, total = checked
            answers = f"{good}/{total}" if good == total else f'<span class="bad">{good}/{total}</span>'
        rows.append([escape(r.get("label", r["system"])), escape(r.get("version") or "?"),
                     f"{r['num_loaded_documents']:,} ({r['data_quality']:.2%})", f"{r['load_time']:.2f}",
                     f"{r['load_docs_per_second']:,.0f}", mb(r.get("total_size")),
                     "—" if r.get("ratio_to_zstd_1") is None else f"{r['ratio_to_zstd_1']:.2f}",
                     ratio(sec.storage_ratio(r)), mb(r.get("load_peak_rss"), 0), mb(sec.max_query_rss(r), 0), answers])
    return rows


def _time_rows(sec, kind):
    rows = []
    for r in sec.runs:
        row = [escape(r.get("label", r["system"]))]
        for q in sec.queries:
            qr = r["queries"].get(q, {})
            t = qr.get(kind)
            if t is None:
                if "unsupported" in qr:
                    row.append(f'<span class="muted" title="{escape(qr["unsupported"])}">unsupported</span>')
                else:
                    row.append('<span class="bad">failed</span>' if "error" in qr else "—")
                continue
            cell = ms(t)
            rt = sec.ratio(r, q, kind)
            if r["system"] != "strata" and rt is not None:
                cell += f' <span class="muted">({rt:.2f}×)</span>'
            if qr.get("matches_reference") is False:
                cell += f' <span class="bad" title="{escape(qr.get("mismatch") or "")}">✗</span>'
            row.append(cell)
        n = len(sec.answered(r, kind))
        note = "" if n == len(sec.queries) else f' <span class="muted">({n} of {len(sec.queries)})</span>'
        row += [ms(sec.geomean_time(r, kind)) + note, ratio(sec.geomean_ratio(r, kind))]
        rows.append(row)
    return rows


def _charts(sec, idx):
    d = sec.dataset
    items = [(r.get("label", r["system"]) + ("" if (r.get("data_quality") or 0) >= 1 else f" ({r.get('data_quality', 0):.0%} loaded)"),
              (r.get("total_size") or 0) / 1e6, color(r["system"], i)) for i, r in enumerate(sec.runs)]
    flagged = frozenset((r.get("label", r["system"]), q) for r in sec.runs for q, qr in r["queries"].items()
                        if qr.get("matches_reference") is False)
    if "bytes_zstd_1" in d:
        items += [("NDJSON file, zstd -1", d["bytes_zstd_1"] / 1e6, REFERENCE_GREY),
                  ("NDJSON file, raw", d["bytes_raw"] / 1e6, "#d1d5db")]
    fmt = lambda v: f"{v:,.1f}" if v >= 10 else f"{v:.3g}"  # noqa: E731
    charts = [svg.hbars(f"Storage at {sec.scale} (MB on disk)", items, unit="MB", fmt=fmt, chart_id=f"storage-{idx}")]
    for kind in ("hot", "cold"):
        series = [(r.get("label", r["system"]), color(r["system"], i),
                   {q: (sec.time(r, q, kind) or 0) * 1000 or None for q in sec.queries}) for i, r in enumerate(sec.runs)]
        charts.append(svg.grouped_bars(f"{kind.capitalize()} time per query at {sec.scale}", sec.queries, series,
                                       unit="ms", log=True, fmt=lambda v: f"{v:,.2f}", chart_id=f"{kind}-{idx}",
                                       flagged=flagged))
    peers = [(i, r) for i, r in enumerate(sec.runs) if r["system"] != "strata"]
    if sec.strata and peers:
        series = [(r.get("label", r["system"]), color(r["system"], i), {q: sec.ratio(r, q, "hot") for q in sec.queries})
                  for i, r in peers]
        charts.append(svg.grouped_bars(f"Hot time ÷ Strata's at {sec.scale} (> 1: Strata faster)", sec.queries, series,
                                       unit="× Strata", log=True, ref_line=1.0, from_ref=True, fmt=lambda v: f"{v:.2f}",
                                       chart_id=f"ratio-{idx}", flagged=flagged))
    legend = ('<p class="muted">Pale bars with a red outline: the answer differs from the reference. '
              '"n/a": not answered (unsupported or failed).</p>') if flagged or any(
        not sec.time(r, q, "hot") for r in sec.runs for q in sec.queries) else ""
    return '<div class="charts">' + "".join(charts) + "</div>" + legend


def render(results):
    body = ["<h1>Strata benchmark report</h1>", f'<p class="muted">{escape(header(results))}</p>']
    for idx, sec in enumerate(sections(results)):
        d = sec.dataset
        body.append(f'<section class="workload" data-workload="{escape(sec.workload)}" data-scale="{escape(sec.scale)}">')
        body.append(f"<h2>{escape(sec.title)} — {escape(sec.scale)} ({d.get('dataset_size', 0):,} documents)</h2>")
        if "bytes_raw" in d:
            body.append(f"<p>Data: raw {mb(d['bytes_raw'])} MB · zstd -1 {mb(d['bytes_zstd_1'])} MB · zstd -3 "
                        f"{mb(d['bytes_zstd_3'])} MB — <code>{escape(d.get('generator', ''))}</code>.</p>")
        if sec.reference.get("engine"):
            body.append(f"<p>Reference answers: {escape(sec.reference['engine'])}.</p>")
        if sec.runs:
            body.append(_charts(sec, idx))
            body.append("<h3>Load, storage, memory</h3>")
            body.append(_table(["system", "version", "loaded (quality)", "load s", "docs/s", "storage MB", "× zstd -1",
                                "× Strata storage", "load peak RSS MB", "query peak RSS MB", "answers = reference"],
                               _load_rows(sec), numeric_from=2))
            for note in filter(None, map(optimize_note, sec.runs)):
                body.append(f"<p>{escape(note)}</p>")
            for kind, what in (("hot", "min of runs 2 and 3"), ("cold", "run 1, fresh process after a cold start")):
                body.append(f"<h3>{kind.capitalize()} times, ms ({what}; in brackets system ÷ Strata)</h3>")
                body.append(_table(["system"] + list(sec.queries) + ["geomean", "geomean ÷ Strata"], _time_rows(sec, kind)))
            qd = "".join(f"<li><b>{escape(q)}</b>: {escape(sec.descriptions[q])}</li>" for q in sec.queries
                         if q in sec.descriptions)
            if qd:
                body.append(f"<ul class='muted'>{qd}</ul>")
        notes = [f"<li>{escape(r.get('label', r['system']))}: {'not run' if r.get('status') == 'not run' else 'failed'}: "
                 f"{escape(str(r.get('error', ''))[:400])}</li>" for r in sec.others]
        for r in sec.runs:
            label = escape(r.get("label", r["system"]))
            if r.get("rejected"):
                notes.append(f"<li>{label} rejected {r['rejected']:,} documents at load; first: "
                             f"{escape(str(r.get('first_rejection') or '')[:300])}</li>")
            for q, qr in r["queries"].items():
                if qr.get("matches_reference") is False:
                    notes.append(f"<li class='bad'>{label} {escape(q)}: answer differs "
                                 f"from the reference: {escape(str(qr.get('mismatch')))}</li>")
                if "unsupported" in qr:
                    notes.append(f"<li>{label} {escape(q)} unsupported: {escape(qr['unsupported'][:300])}</li>")
                if "error" in qr:
                    notes.append(f"<li class='bad'>{label} {escape(q)} failed: {escape(qr['error'][:300])}</li>")
        if notes:
            body.append("<ul>" + "".join(notes) + "</ul>")
        body.append("</section>")
    cold = sorted({r.get("cold_method") for r in results.get("runs", []) if r.get("cold_method")})
    if cold:
        body.append(f"<p class='muted'>Cold runs: {escape('; '.join(cold))}.</p>")
    return ("<!doctype html><html lang='en'><head><meta charset='utf-8'><title>Strata benchmark report</title>"
            f"<style>{CSS}</style></head><body>{''.join(body)}</body></html>\n")
