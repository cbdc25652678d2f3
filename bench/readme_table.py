"""Prints the README's Strata-vs-ClickHouse JSONBench table from a results directory.

Usage: python bench/readme_table.py bench/results/jsonbench-strata-clickhouse

Reads <dir>/jsonbench/<scale>/{strata,clickhouse}.json as written by bench/run.py (the
`strata_bench` object of each) for the scales present (1m, 10m) and prints one Markdown table:
load, storage, memory and per-query hot and cold times, with Strata ÷ ClickHouse ratios.
"""

import json
import math
import sys
from pathlib import Path

QUERIES = ["Q1", "Q2", "Q3", "Q4", "Q5"]


def load(results: Path, scale: str, system: str) -> dict:
    return json.loads((results / "jsonbench" / scale / f"{system}.json").read_text())["strata_bench"]


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def number(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "—"
    if digits == 0 or abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:,.{digits}f}"


def rows_for(s: dict, c: dict) -> list[tuple[str, float | None, float | None, int, bool]]:
    """(label, Strata value, ClickHouse value, digits, whether to show a ratio)."""
    docs = s["num_loaded_documents"]
    optimize = s.get("optimize_seconds")
    both = s["load_time"] + (optimize or 0)
    rows = [
        ("load, s (Strata: ingest)", s["load_time"], c["load_time"], 2, True),
        ("documents/s (Strata: ingest)", s["load_docs_per_second"], c["load_docs_per_second"], 0, True),
        ("Strata `optimize`, s", optimize, None, 2, False),
        ("documents/s, ingest + optimize", docs / both, c["load_docs_per_second"], 0, True),
        ("storage, MB", s["total_size"] / 1e6, c["total_size"] / 1e6, 1, True),
        ("storage ÷ zstd -1", s["ratio_to_zstd_1"], c["ratio_to_zstd_1"], 2, False),
        ("load peak RSS, MB", s["load_peak_rss"] / 1e6, c["load_peak_rss"] / 1e6, 0, True),
        ("Strata `optimize` peak RSS, MB", (s.get("optimize_peak_rss") or 0) / 1e6 or None, None, 0, False),
    ]
    for run in ["hot", "cold"]:
        for q in QUERIES:
            rows.append((f"{q} {run}, ms", s["queries"][q][run] * 1e3, c["queries"][q][run] * 1e3, 1, True))
        rows.append((
            f"geomean {run}, ms",
            geomean([s["queries"][q][run] * 1e3 for q in QUERIES]),
            geomean([c["queries"][q][run] * 1e3 for q in QUERIES]),
            1,
            True,
        ))
    peak = lambda r: max(r["queries"][q]["peak_rss"] for q in QUERIES) / 1e6  # noqa: E731
    rows.append(("query peak RSS, MB", peak(s), peak(c), 0, True))
    return rows


def main() -> None:
    results = Path(sys.argv[1])
    scales = [scale for scale in ["1m", "10m"] if (results / "jsonbench" / scale / "strata.json").exists()]
    tables = {scale: rows_for(load(results, scale, "strata"), load(results, scale, "clickhouse")) for scale in scales}
    names = {"1m": "1M", "10m": "10M"}
    header = "| |" + "".join(f" Strata {names[s]} | ClickHouse {names[s]} | Strata ÷ CH {names[s]} |" for s in scales)
    print(header)
    print("|---|" + "---:|---:|---:|" * len(scales))
    for i, (label, *_rest) in enumerate(tables[scales[0]]):
        line = f"| {label} |"
        for scale in scales:
            _, strata, clickhouse, digits, ratio = tables[scale][i]
            shown = f"{strata / clickhouse:.2f}" if ratio and strata and clickhouse else ""
            line += f" {number(strata, digits)} | {number(clickhouse, digits)} | {shown} |"
        print(line)


if __name__ == "__main__":
    main()
