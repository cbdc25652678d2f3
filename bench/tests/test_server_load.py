"""bench/server_load.py end to end on a small generated dataset with the binary under test: every
step runs (embedded ingest, HTTP ingest through the WAL, pgbench idle and under ingest, and
PostgreSQL where it runs here), and the table it prints holds each measure."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from test_peers import strata_bin

BENCH = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(shutil.which("pgbench") is None, reason="pgbench is not installed (apt-get install postgresql-contrib)")
def test_server_load_prints_every_measure(tmp_path):
    binary = strata_bin()
    if not binary.is_file():
        pytest.skip(f"no Strata binary at {binary}")
    out_dir = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(BENCH / "server_load.py"), "--strata-bin", str(binary),
                           "--scale", "3000", "--batch", "500", "--seconds", "3", "--idle-seconds", "2", "--ingest-rounds", "2",
                           "--work", str(tmp_path / "work"), "--out", str(out_dir)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    results = json.loads((out_dir / "results.json").read_text())
    assert results["embedded"]["documents"] == 3000
    assert results["http_ingest"]["documents"] == 3000
    # Two rounds of embedded and HTTP ingest taking turns; the ratio is the median of theirs.
    ratios = sorted(r["ratio"] for r in results["ingest_rounds"])
    assert len(ratios) == 2 and results["http_ingest"]["ratio"] == sum(ratios) / 2
    # Six requests: the first creates the table (straight into parts), the other five use the WAL.
    assert (results["http_ingest"]["requests"]["count"], results["http_ingest"]["through_wal"]) == (6, 5)
    assert results["q1_idle"]["tps"] > 0 and results["q1_mixed"]["count"] > 0
    # Idle also at the mixed run's client count, and again on the grown table.
    assert results["q1_idle_clients"]["clients"] == results["q1_mixed"]["clients"]
    assert results["q1_idle_after"]["tps"] > 0
    assert results["ingest_mixed"]["documents"] > 0
    assert results["server_exit"] == 0
    assert results["server"]["tables"][0]["documents"] >= 3000 + results["ingest_mixed"]["documents"]
    summary = (out_dir / "summary.md").read_text()
    for measure in ("embedded `strata ingest`", "HTTP ingest alone, until visible", "Q1 idle (1 client)",
                    "Q1 idle (4 clients)", "Q1 under ingest", "Q1 idle after the mixed run",
                    "HTTP ingest under queries", "server peak RSS", "background merges"):
        assert f"| {measure}" in summary, summary
    assert "PostgreSQL" in summary, summary
