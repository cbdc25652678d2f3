"""bench/object_storage.py end to end on a small generated table with the binary under test: the
table on moto's S3 server answers every JSONBench query as the local one does (the script fails
otherwise), and cold runs fetch from S3 while hot ones are served by the cache."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from test_peers import strata_bin

BENCH = Path(__file__).resolve().parent.parent


def test_object_storage_benchmark_reports_cold_and_hot_reads(tmp_path):
    binary = strata_bin()
    if not binary.is_file():
        pytest.skip(f"no Strata binary at {binary}")
    proc = subprocess.run([sys.executable, str(BENCH / "object_storage.py"), "--strata-bin", str(binary),
                           "--docs", "5000", "--runs", "3", "--work", str(tmp_path / "work"),
                           "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert [q["query"] for q in results["queries"]] == ["Q1", "Q2", "Q3", "Q4", "Q5"]
    for q in results["queries"]:
        assert q["cold_gets"] > 0 and q["cold_bytes"] > 0, q
        assert q["hot_gets"] == 0, q
        assert q["warm_stage_gets"] == 1, q
        assert 0 < q["cold_bytes"] <= results["table_bytes"] + results["footer_bytes"], q
