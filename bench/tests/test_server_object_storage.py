"""bench/server_object_storage.py end to end on a small generated dataset with the binary under
test: a server on moto's S3 server and one on local disk take the same HTTP ingest and answer every
JSONBench query the same (the script fails otherwise), and the report has both sides."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from test_peers import strata_bin

BENCH = Path(__file__).resolve().parent.parent


def test_server_object_storage_benchmark_compares_both_sides(tmp_path):
    binary = strata_bin()
    if not binary.is_file():
        pytest.skip(f"no Strata binary at {binary}")
    proc = subprocess.run([sys.executable, str(BENCH / "server_object_storage.py"), "--strata-bin", str(binary),
                           "--docs", "3000", "--batch", "250", "--clients", "2", "--runs", "2",
                           "--settle", "1", "--work", str(tmp_path / "work"), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["answers_equal"]
    for side in ("local", "s3"):
        assert results[side]["docs_per_s"] > 0
        assert results[side]["ack_p50_ms"] <= results[side]["ack_p99_ms"]
    assert [q["query"] for q in results["queries"]] == ["Q1", "Q2", "Q3", "Q4", "Q5"]
    assert "| ingest documents/s |" in proc.stdout
