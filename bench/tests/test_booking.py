"""bench/booking.py end to end for a few seconds with the binary under test and the local
PostgreSQL: both systems run the same pgbench script, every run reports a rate and latencies, and
each system holds one payment per seat afterwards (every committed booking whole)."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from test_peers import strata_bin

BENCH = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BENCH))


def test_booking_benchmark_runs_both_systems(tmp_path):
    binary = strata_bin()
    if not binary.is_file():
        pytest.skip(f"no Strata binary at {binary}")
    if not shutil.which("pgbench"):
        pytest.skip("no pgbench (tests/install-clients.sh installs it)")
    from benchlib.systems.postgres import find_bindir

    if find_bindir() is None:
        pytest.skip("no PostgreSQL server (tests/install-clients.sh installs it)")
    proc = subprocess.run([sys.executable, str(BENCH / "booking.py"), "--strata-bin", str(binary),
                           "--clients", "1,2", "--seconds", "3", "--work", str(tmp_path / "work"),
                           "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    systems = {(r["system"], r["clients"]) for r in results["runs"]}
    names = ("strata", "strata-serializable", "postgres-rc", "postgres-serializable")
    assert systems == {(s, n) for s in names for n in (1, 2)}
    for run in results["runs"]:
        assert run["tps"] > 0 and run["transactions"] > 0, run
        assert 0 < run["p50_ms"] <= run["p95_ms"] <= run["p99_ms"], run
    for system, counts in results["checks"].items():
        # The seed row plus one per committed booking, the same in both tables.
        assert counts["seats"] == counts["payments"] > 1, (system, counts)
    assert "vs PG RC" in proc.stdout
