"""bench/bulk.py end to end with the binary under test, briefly: every cell runs, the index holds
every acknowledged document (bulk.py checks it), and the table and results hold each measure."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from test_peers import strata_bin

BENCH = Path(__file__).resolve().parent.parent


def test_bulk_benchmark_counts_what_it_sent(tmp_path):
    binary = strata_bin()
    if not binary.is_file():
        pytest.skip(f"no Strata binary at {binary}")
    proc = subprocess.run([sys.executable, str(BENCH / "bulk.py"), "--strata-bin", str(binary),
                           "--baseline-bin", str(binary), "--clients", "2", "--batch", "50",
                           "--seconds", "1", "--lines", "2000", "--work", str(tmp_path / "work"),
                           "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    runs = json.loads((tmp_path / "out" / "results.json").read_text())["runs"]
    assert [(r["build"], r["clients"], r["batch"]) for r in runs] == [("strata", 2, 50), ("baseline", 2, 50)]
    for r in runs:
        assert r["documents"] > 0 and r["documents_per_s"] > 0 and r["cpu_ms_per_1000"] > 0, r
        assert r["parts"] >= 1, r
    assert "documents/s" in proc.stdout and "CPU ms/1000" in proc.stdout, proc.stdout
