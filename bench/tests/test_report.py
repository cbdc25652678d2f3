"""The reports render from a small result set: summary.md has the expected rows, and report.html,
opened from disk in headless Chromium, lays out every chart with the expected number of bars, each
of nonzero size. The result set below is test input made up for rendering, not a measurement.

Chromium comes from Debian's `chromium` package; the test installs it when it is missing and it can
(root with apt-get), and skips only when it cannot be installed."""
import copy
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from benchlib import results as results_mod
from benchlib.report import html, markdown

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _query(cold, hot, ok=True, mismatch=None):
    q = {"sql": "SELECT 1", "times": [cold, hot * 1.1, hot], "cold": cold, "hot": hot, "peak_rss": 50_000_000,
         "rows_returned": 3, "rows": [], "matches_reference": ok, "cold_method": "page cache dropped, fresh process"}
    if mismatch:
        q["mismatch"] = mismatch
    return q


def _run(system, label, workload, scale, size, load, queries):
    return {"system": system, "label": label, "workload": workload, "scale": scale, "status": "ok",
            "version": f"{label} test", "dataset_size": 1000, "num_loaded_documents": 1000, "data_quality": 1.0,
            "load_time": load, "load_docs_per_second": 1000 / load, "total_size": size,
            "ratio_to_zstd_1": size / 100_000, "load_peak_rss": 200_000_000, "queries": queries,
            "result": [q["times"] for q in queries.values()], "cold_method": "page cache dropped, fresh process"}


def fixture_results():
    jb = ("Q1", "Q2", "Q3", "Q4", "Q5")
    gh = ("A", "B", "C", "D")
    runs = [
        _run("strata", "Strata", "jsonbench", "1k", 90_000, 0.5, {q: _query(0.02, 0.005 * (i + 1)) for i, q in enumerate(jb)}),
        _run("clickhouse", "ClickHouse (chdb)", "jsonbench", "1k", 95_000, 0.7,
             {q: _query(0.03, 0.004 * (i + 1)) for i, q in enumerate(jb)}),
        _run("duckdb", "DuckDB", "jsonbench", "1k", 230_000, 0.4,
             {q: _query(0.3, 0.1 * (i + 1), ok=(q != "Q3"), mismatch="row 1 column 2: 3 != reference 4" if q == "Q3" else None)
              for i, q in enumerate(jb)}),
        {"system": "mongodb", "label": "MongoDB", "workload": "jsonbench", "scale": "1k", "status": "not run",
         "error": "cannot run here: no server"},
        {"system": "postgres", "label": "PostgreSQL", "workload": "jsonbench", "scale": "1k", "status": "failed",
         "error": "RuntimeError: initdb failed"},
        _run("strata", "Strata", "gharchive", "1k", 120_000, 0.6, {q: _query(0.05, 0.01) for q in gh}),
        _run("postgres", "PostgreSQL", "gharchive", "1k", 800_000, 1.5, {q: _query(0.5, 0.2) for q in gh}),
    ]
    datasets = [{"workload": w, "scale": "1k", "dataset_size": 1000, "generator": f"strata generate {g} --docs 1000 --seed 1",
                 "bytes_raw": 480_000, "bytes_zstd_1": 100_000, "bytes_zstd_3": 95_000}
                for w, g in (("jsonbench", "bluesky"), ("gharchive", "gharchive"))]
    return {"schema": results_mod.SCHEMA, "started": "2026-01-01T00:00:00Z", "finished": "2026-01-01T00:01:00Z",
            "machine": {"cpus": 2, "cpu_model": "test", "memory_bytes": 24 * 2**30, "os": "Linux"},
            "settings": {"runs": 3}, "datasets": datasets,
            "references": [{"workload": "jsonbench", "scale": "1k", "engine": "DuckDB test"}], "runs": runs}


def test_markdown_summary():
    md = markdown.render(fixture_results())
    assert "## JSONBench (Bluesky events) — 1k (1,000 documents)" in md
    assert "## GH Archive OLAP" in md
    assert re.search(r"\| Strata \| 5\.0 \| 10\.0 \|", md)  # hot Q1, Q2 in ms
    assert "(0.80×)" in md  # ClickHouse Q1 hot 4 ms / Strata 5 ms
    assert "✗" in md and "row 1 column 2" in md  # the mismatch is flagged
    assert "MongoDB: not run: cannot run here" in md and "PostgreSQL: failed: RuntimeError" in md
    assert "| DuckDB | DuckDB test | 1,000 / 1,000 (100.00%) |" in md
    assert "2.56×" in md  # DuckDB storage 230 KB / Strata 90 KB


def test_results_files_are_written(tmp_path):
    summary = results_mod.write(fixture_results(), tmp_path)
    assert summary.startswith("# Strata benchmark results")
    combined = json.loads((tmp_path / "results.json").read_text())
    assert combined["schema"] == results_mod.SCHEMA
    jb = json.loads((tmp_path / "jsonbench" / "1k" / "clickhouse.json").read_text())
    assert jb["system"] == "ClickHouse (chdb)" and jb["total_size"] == 95_000 and len(jb["result"]) == 5
    assert jb["num_loaded_documents"] == 1000 and jb["dataset_size"] == 1000
    assert (tmp_path / "report.html").read_text().startswith("<!doctype html>")


def test_html_is_static():
    page = html.render(fixture_results())
    assert "<script" not in page and "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in page


def find_chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    if os.geteuid() == 0 and shutil.which("apt-get"):
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True, env=env)
        subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], capture_output=True, env=env)
        return shutil.which("chromium")
    return None


MEASURE = """<script>
window.addEventListener('load', () => {
  const out = [];
  document.querySelectorAll('svg.chart').forEach(svg => {
    const box = svg.getBoundingClientRect();
    const bars = [...svg.querySelectorAll('rect.bar')].map(r => {
      const b = r.getBoundingClientRect(); return [b.width, b.height]; });
    out.push({id: svg.id, w: box.width, h: box.height, bars: bars});
  });
  const pre = document.createElement('pre'); pre.id = 'measured';
  pre.textContent = JSON.stringify(out); document.body.appendChild(pre);
});
</script>"""


def test_report_charts_draw_in_chromium(tmp_path):
    chromium = find_chromium()
    if not chromium:
        pytest.skip("chromium is not installed and cannot be installed here (needs root and Debian's apt)")
    page = html.render(fixture_results())
    (tmp_path / "report.html").write_text(page)
    # A copy with a measuring script: the report itself has no scripts.
    (tmp_path / "measure.html").write_text(page.replace("</body>", MEASURE + "</body>"))
    base = [chromium] + FLAGS + [f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run(base + ["--dump-dom", (tmp_path / "measure.html").as_uri()], capture_output=True,
                         text=True, timeout=120).stdout
    m = re.search(r'<pre id="measured">(.*?)</pre>', dom, re.S)
    assert m, f"chromium printed no measurements: {dom[:500]}"
    charts = {c["id"]: c for c in json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))}
    # JSONBench section (0): 3 systems with results, 5 queries; GH Archive (1): 2 systems, 4 queries.
    expected = {"storage-0": 3 + 2, "hot-0": 3 * 5, "cold-0": 3 * 5, "ratio-0": 2 * 5,
                "storage-1": 2 + 2, "hot-1": 2 * 4, "cold-1": 2 * 4, "ratio-1": 1 * 4}
    assert set(charts) == set(expected)
    for cid, n in expected.items():
        c = charts[cid]
        assert c["w"] > 100 and c["h"] > 100, cid
        assert len(c["bars"]) == n, (cid, len(c["bars"]))
        assert all(w > 0 and h > 0 for w, h in c["bars"]), (cid, c["bars"])
    # Storage bars are proportional: DuckDB 230 KB vs Strata 90 KB.
    s = charts["storage-0"]["bars"]
    assert abs(s[2][0] / s[0][0] - 230 / 90) < 0.05
    shot = tmp_path / "report.png"
    subprocess.run(base + ["--window-size=1100,2400", f"--screenshot={shot}", (tmp_path / "report.html").as_uri()],
                   capture_output=True, timeout=120)
    assert shot.exists() and shot.stat().st_size > 20_000
    keep = os.environ.get("BENCH_REPORT_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)


def test_report_without_strata_has_no_ratio_chart():
    res = fixture_results()
    res["runs"] = [copy.deepcopy(r) for r in res["runs"] if r["system"] != "strata"]
    page = html.render(res)
    assert 'id="ratio-0"' not in page and 'id="hot-0"' in page
