"""bench/ab.sh on the real Bluesky sample: two builds (here the same binary twice) load it and take
turns; every query gets a time per build and a ratio to the first."""
import os
import re
import subprocess
from pathlib import Path

import pytest

from test_peers import SAMPLES, strata_bin

BENCH = Path(__file__).resolve().parent.parent


def test_ab_prints_each_query_per_build_with_its_ratio(tmp_path):
    binary = strata_bin()
    if not binary.is_file():
        pytest.skip(f"no Strata binary at {binary}")
    env = dict(os.environ, ROUNDS="1", REPS="2", AB_WORK=str(tmp_path))
    out = subprocess.run([str(BENCH / "ab.sh"), "jsonbench", str(SAMPLES["jsonbench"]), str(binary), str(binary)],
                         env=env, capture_output=True, text=True, check=True).stdout
    rows = [line for line in out.splitlines() if line.startswith("Q")]
    assert len(rows) == 5, out
    for row in rows:
        assert re.fullmatch(rf"Q\d  {re.escape(str(binary))} [0-9.]+  {re.escape(str(binary))} [0-9.]+ \([0-9.]+x\)", row), row
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jsonbench-0", "jsonbench-1"]


def test_ab_refuses_an_unknown_workload():
    proc = subprocess.run([str(BENCH / "ab.sh"), "nosuch", "x.ndjson", "/bin/true"], capture_output=True, text=True)
    assert proc.returncode == 2 and "unknown workload" in proc.stderr
