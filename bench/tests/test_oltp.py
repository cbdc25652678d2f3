"""bench/oltp.py end to end for a few seconds with the binary under test, the local PostgreSQL and
sysbench: every mix runs on both systems without errors (lookups by a secondary path with and
without an index included), and the updates leave every document once."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from test_peers import strata_bin

BENCH = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BENCH))


def test_oltp_benchmark_runs_every_mix_on_both_systems(tmp_path):
    binary = strata_bin()
    if not binary.is_file():
        pytest.skip(f"no Strata binary at {binary}")
    if not shutil.which("sysbench"):
        pytest.skip("no sysbench (tests/install-clients.sh installs it)")
    from benchlib.systems.postgres import find_bindir

    if find_bindir() is None:
        pytest.skip("no PostgreSQL server (tests/install-clients.sh installs it)")
    proc = subprocess.run([sys.executable, str(BENCH / "oltp.py"), "--strata-bin", str(binary),
                           "--docs", "500", "--clients", "2", "--seconds", "2",
                           "--work", str(tmp_path / "work"), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    # Three mixes and the indexed lookup by name on both systems, the unindexed one on Strata.
    assert len(results["runs"]) == 4 * 2 + 1
    assert {r["mix"] for r in results["runs"]} >= {"by name, no index", "by name, indexed"}
    for run in results["runs"]:
        assert run["events_per_s"] > 0 and run["errors"] == 0, run
        assert run["p50_ms"] is not None and run["p50_ms"] <= run["p99_ms"], run
    assert "vs PG" in proc.stdout
