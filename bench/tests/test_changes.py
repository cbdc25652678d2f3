"""bench/changes.py end to end on a small generated table with the binary under test: every
JSONBench query is timed unchanged, changed and merged, the changes leave the expected number of
documents, and a merge changes no answer (the script fails otherwise)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from test_peers import strata_bin

BENCH = Path(__file__).resolve().parent.parent


def test_changes_benchmark_times_every_query_in_every_state(tmp_path):
    binary = strata_bin()
    if not binary.is_file():
        pytest.skip(f"no Strata binary at {binary}")
    proc = subprocess.run([sys.executable, str(BENCH / "changes.py"), "--strata-bin", str(binary),
                           "--docs", "3000", "--runs", "1", "--rounds", "2", "--work", str(tmp_path / "work"),
                           "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert (results["replaced"], results["deleted"]) == (300, 30)
    assert [q["query"] for q in results["queries"]] == ["Q1", "Q2", "Q3", "Q4", "Q5"]
    # Each cell is the median over the rounds (of two: their mean).
    assert len(results["each_round"]) == 2
    for i, q in enumerate(results["queries"]):
        times = [r[i]["changed_ms"] for r in results["each_round"]]
        assert q["changed_ms"] == sum(times) / 2, (q, times)
    for q in results["queries"]:
        assert q["unchanged_ms"] > 0 and q["changed_ms"] > 0 and q["merged_ms"] > 0, q
