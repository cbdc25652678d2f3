"""bench/server_memory.py end to end with the binary under test: one idle server per page-cache
state, each split into anonymous and file pages that add up to no more than its RSS; a missing
binary is refused by name."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from test_peers import strata_bin

BENCH = Path(__file__).resolve().parent.parent


def test_idle_server_memory_is_split_per_page_cache_state(tmp_path):
    binary = strata_bin()
    if not binary.is_file():
        pytest.skip(f"no Strata binary at {binary}")
    out = tmp_path / "runs.json"
    proc = subprocess.run([sys.executable, str(BENCH / "server_memory.py"), "--binaries", str(binary),
                           "--rounds", "1", "--settle", "1", "--page-cache", "both", "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    measured = json.loads(out.read_text())
    assert sorted(m["page_cache"] for m in measured) == ["from-disk", "written"]
    for m in measured:
        (run,) = m["runs"]
        assert run["RssAnon"] > 0 and run["RssFile"] > 0, m
        assert run["RssAnon"] + run["RssFile"] <= run["VmRSS"], m
    assert "RssFile" in proc.stdout and "from-disk" in proc.stdout, proc.stdout


def test_a_missing_binary_is_named(tmp_path):
    missing = tmp_path / "no-such-strata"
    proc = subprocess.run([sys.executable, str(BENCH / "server_memory.py"), "--binaries", str(missing)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert f"no binary at {missing}" in proc.stderr
