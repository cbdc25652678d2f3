"""Turns results.json into a Markdown summary and a static HTML report with inline SVG charts
(no scripts, no network: it opens from disk)."""
import html as _html
import math

QUERIES = ["Q1", "Q2", "Q3", "Q4", "Q5"]
COLORS = {"strata": "#2563eb", "clickhouse": "#f59e0b", "duckdb": "#10b981", "postgres": "#8b5cf6"}


def geomean(values):
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def ok_runs(results):
    return [r for r in results["runs"] if "queries" in r]


def scales(results):
    seen = []
    for r in results["runs"]:
        if r["scale"] not in seen:
            seen.append(r["scale"])
    return seen


def fmt_ms(seconds):
    return "—" if seconds is None else f"{seconds * 1000:.1f}"


def fmt_mb(n):
    return "—" if n is None else f"{n / 1e6:.1f}"


def markdown(results):
    lines = [f"Machine: {results['machine']['cpus']} CPUs, {results['machine']['memory_gib']} GiB; {results['machine']['platform']}.",
             f"Run {results['started']} → {results.get('finished', '?')}.", ""]
    for scale in scales(results):
        runs = [r for r in results["runs"] if r["scale"] == scale]
        strata = next((r for r in runs if r["system"] == "strata" and "queries" in r), None)
        sizes = runs[0]["data_sizes"]
        lines += [f"### JSONBench {scale} ({runs[0]['dataset_size']:,} documents; raw {fmt_mb(sizes['raw'])} MB, zstd -1 {fmt_mb(sizes['zstd_1'])} MB, zstd -3 {fmt_mb(sizes['zstd_3'])} MB)", "",
                  "| system | load s | docs/s | loaded | MB on disk | × zstd -1 | load peak RSS MB | " + " | ".join(f"{q} hot ms" for q in QUERIES) + " | geomean hot ms | geomean ratio to Strata |",
                  "|---" * (9 + len(QUERIES)) + "|"]
        for r in runs:
            if "error" in r and "queries" not in r:
                lines.append(f"| {r['system']} | failed: {r['error'][:80]} |" + " |" * (8 + len(QUERIES)))
                continue
            hots = [r["queries"][q]["hot"] for q in QUERIES]
            g = geomean(hots)
            ratio = g / geomean([strata["queries"][q]["hot"] for q in QUERIES]) if strata and g else None
            lines.append(
                f"| {r['system']} | {r['load_seconds']:.1f} | {r['documents'] / r['load_seconds']:,.0f} | {r['data_quality']:.4%} | {fmt_mb(r['bytes'])} | {r['bytes'] / sizes['zstd_1']:.2f} | {fmt_mb(r.get('load_peak_rss'))} | "
                + " | ".join(f"{fmt_ms(h)}{'' if r['queries'][q]['matches_reference'] is not False else ' ✗'}" for q, h in zip(QUERIES, hots))
                + f" | {fmt_ms(g)} | {'' if ratio is None else f'{ratio:.2f}'} |")
        lines += ["", "Cold runs (ms) and peak query RSS (MB):", "", "| system | " + " | ".join(f"{q} cold" for q in QUERIES) + " | max query RSS |", "|---" * (2 + len(QUERIES)) + "|"]
        for r in runs:
            if "queries" not in r:
                continue
            lines.append(f"| {r['system']} | " + " | ".join(fmt_ms(r["queries"][q]["cold"]) for q in QUERIES)
                         + f" | {fmt_mb(max((r['queries'][q].get('peak_rss') or 0) for q in QUERIES))} |")
        if strata:
            lines += ["", "Ratio Strata / peer per query (hot; < 1 means Strata is faster):", "",
                      "| peer | " + " | ".join(QUERIES) + " |", "|---" * (1 + len(QUERIES)) + "|"]
            for r in runs:
                if "queries" in r and r["system"] != "strata":
                    lines.append(f"| {r['system']} | " + " | ".join(f"{strata['queries'][q]['hot'] / r['queries'][q]['hot']:.2f}" for q in QUERIES) + " |")
        cold = next((r["queries"]["Q1"]["cold_method"] for r in runs if "queries" in r), "")
        lines += ["", f"Cold: {cold}. ✗ marks an answer that differs from DuckDB's (the reference).", ""]
    for peer, why in results.get("peers_not_run", {}).items():
        lines.append(f"- {peer}: {why}")
    return "\n".join(lines) + "\n"


def bar_chart(title, groups, series, value, log=False, unit=""):
    """groups: x labels; series: [(name, color, {group: value})]."""
    width, height, left, bottom = 720, 300, 70, 40
    values = [v for _, _, d in series for v in d.values() if v]
    if not values:
        return ""
    top = max(values)
    low = min(values)
    def y(v):
        if log:
            lo, hi = math.log10(low / 2), math.log10(top * 1.2)
            return height - bottom - (math.log10(v) - lo) / (hi - lo) * (height - bottom - 20)
        return height - bottom - v / (top * 1.1) * (height - bottom - 20)
    slot = (width - left) / max(1, len(groups))
    bar = slot * 0.8 / max(1, len(series))
    parts = [f'<svg class="chart" width="{width}" height="{height}" role="img" aria-label="{_html.escape(title)}" xmlns="http://www.w3.org/2000/svg">',
             f'<text x="{width / 2}" y="14" text-anchor="middle" font-weight="bold">{_html.escape(title)}</text>',
             f'<line x1="{left}" y1="{height - bottom}" x2="{width}" y2="{height - bottom}" stroke="#888"/>']
    for gi, g in enumerate(groups):
        parts.append(f'<text x="{left + gi * slot + slot / 2}" y="{height - bottom + 16}" text-anchor="middle">{_html.escape(g)}</text>')
        for si, (name, color, data) in enumerate(series):
            v = data.get(g)
            if not v:
                continue
            x = left + gi * slot + slot * 0.1 + si * bar
            yy = y(v)
            parts.append(f'<rect class="bar" x="{x:.1f}" y="{yy:.1f}" width="{bar:.1f}" height="{height - bottom - yy:.1f}" fill="{color}"><title>{_html.escape(name)} {g}: {value(v)}{unit}</title></rect>')
    for si, (name, color, _) in enumerate(series):
        parts.append(f'<rect x="{left + si * 110}" y="{height - 14}" width="10" height="10" fill="{color}"/><text x="{left + si * 110 + 14}" y="{height - 5}">{_html.escape(name)}</text>')
    parts.append(f'<text x="4" y="{height / 2}" transform="rotate(-90 12 {height / 2})">{"log scale" if log else ""} {unit}</text></svg>')
    return "".join(parts)


def html(results):
    body = [f"<h1>Strata benchmark report</h1><p>{_html.escape(markdown(results).splitlines()[0])}</p>"]
    for scale in scales(results):
        runs = [r for r in ok_runs(results) if r["scale"] == scale]
        if not runs:
            continue
        body.append(f"<h2>JSONBench {scale}</h2>")
        storage = [(r["system"], COLORS.get(r["system"], "#666"), {"bytes on disk": r["bytes"] / 1e6}) for r in runs]
        sizes = runs[0]["data_sizes"]
        storage.append(("zstd -1 file", "#999", {"bytes on disk": sizes["zstd_1"] / 1e6}))
        body.append(bar_chart(f"Storage at {scale} (MB)", ["bytes on disk"], storage, lambda v: f"{v:.1f}", unit=" MB"))
        for kind in ("hot", "cold"):
            series = [(r["system"], COLORS.get(r["system"], "#666"), {q: r["queries"][q][kind] * 1000 for q in QUERIES}) for r in runs]
            body.append(bar_chart(f"{kind} query time at {scale} (ms, log scale)", QUERIES, series, lambda v: f"{v:.1f}", log=True, unit=" ms"))
        strata = next((r for r in runs if r["system"] == "strata"), None)
        if strata:
            series = [(r["system"], COLORS.get(r["system"], "#666"), {q: r["queries"][q]["hot"] / strata["queries"][q]["hot"] for q in QUERIES})
                      for r in runs if r["system"] != "strata"]
            body.append(bar_chart(f"Peer hot time ÷ Strata hot time at {scale} (> 1: Strata faster; log scale)", QUERIES, series, lambda v: f"{v:.2f}", log=True, unit="×"))
    md = _html.escape(markdown(results))
    return ("<!doctype html><html><head><meta charset='utf-8'><title>Strata benchmarks</title>"
            "<style>body{font-family:sans-serif;max-width:1000px;margin:auto}svg{display:block;margin:1em 0}pre{white-space:pre-wrap;font-size:12px}</style>"
            f"</head><body>{''.join(body)}<h2>Summary</h2><pre>{md}</pre></body></html>")
