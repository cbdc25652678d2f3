"""bench/iceberg.py end to end on a small generated table with the binary under test: Strata and
Spark over the published Iceberg table time every JSONBench query, and Spark's answers equal
Strata's (the script fails otherwise)."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from test_peers import strata_bin

BENCH = Path(__file__).resolve().parent.parent


def test_iceberg_benchmark_times_strata_and_spark_on_one_table(tmp_path):
    binary = strata_bin()
    if not binary.is_file():
        pytest.skip(f"no Strata binary at {binary}")
    proc = subprocess.run([sys.executable, str(BENCH / "iceberg.py"), "--strata-bin", str(binary),
                           "--docs", "5000", "--runs", "2", "--work", str(tmp_path / "work"),
                           "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert [q["query"] for q in results["queries"]] == ["Q1", "Q2", "Q3", "Q4", "Q5"]
    assert results["metadata_bytes"] > 0
    for q in results["queries"]:
        assert q["strata_hot_ms"] > 0, q
        if shutil.which("java"):
            assert q["spark_hot_ms"] > 0, q
    assert results["answers_equal"] == (shutil.which("java") is not None)
