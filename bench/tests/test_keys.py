"""bench/keys.py end to end on a small generated dataset with the binary under test: every step
runs and the table it prints holds each measure; the keyed table holds each document once."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from test_peers import strata_bin

BENCH = Path(__file__).resolve().parent.parent


def test_keys_benchmark_prints_every_measure(tmp_path):
    binary = strata_bin()
    if not binary.is_file():
        pytest.skip(f"no Strata binary at {binary}")
    proc = subprocess.run([sys.executable, str(BENCH / "keys.py"), "--strata-bin", str(binary), "--docs", "3000",
                           "--reads", "5", "--work", str(tmp_path / "work"), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["documents_after"] == 3000
    assert results["key_file_bytes"] > 0 and results["part_bytes"] > 0
    assert results["point_read_indexed_ms"] > 0 and results["point_read_scan_ms"] > 0
    for measure in ("ingest (s)", "replacing all", "key file bytes", "point read"):
        assert measure in proc.stdout, proc.stdout
