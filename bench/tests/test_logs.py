"""bench/logs.py end to end on a small generated log with the binary under test: both modes load
on Strata (and ClickHouse through chdb and Elasticsearch when they can run here), every one of
the six queries is timed cold and hot, the systems' answers agree (the script fails otherwise),
and a short throttled HTTP ingest reports the servers' CPU and memory."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchlib.systems.base import Context, NotRunnable
from benchlib.systems.elasticsearch import Elasticsearch
from test_peers import strata_bin

BENCH = Path(__file__).resolve().parent.parent


def test_log_benchmark_times_six_queries_in_both_modes(tmp_path):
    binary = strata_bin()
    if not binary.is_file():
        pytest.skip(f"no Strata binary at {binary}")
    systems = ["strata"] + (["clickhouse"] if importlib.util.find_spec("chdb") else [])
    try:
        Elasticsearch(Context(work=tmp_path, strata_bin=binary)).check_runnable()
        systems.append("elasticsearch")
    except NotRunnable:
        pass
    systems = ",".join(systems)
    proc = subprocess.run([sys.executable, str(BENCH / "logs.py"), "--strata-bin", str(binary),
                           "--lines", "20000", "--runs", "1", "--systems", systems,
                           "--throttle-rate", "2000", "--throttle-seconds", "2",
                           "--work", str(tmp_path / "work"), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["disagreements"] == []
    assert set(results["systems"]) == set(systems.split(","))
    for name, system in results["systems"].items():
        for mode in ("structured", "full-text"):
            queries = system[mode]["queries"]
            assert len(queries) == 6, (name, mode)
            assert queries[0]["answer"] == 20000, (name, mode, queries[0])
            assert all(q["hot"] > 0 and q["cold"] > 0 for q in queries)
            assert 0 < system[mode]["bytes"] < results["raw_bytes"]
            if name != "clickhouse":  # embedded here: no server to send to
                throttled = system[mode]["throttled"]
                assert throttled["lines"] == 4000, (name, mode, throttled)
                assert throttled["cpu_percent"] > 0 and throttled["peak_rss"] > 0, (name, mode, throttled)


def test_log_benchmark_with_text_postings_gives_the_same_answers(tmp_path):
    """`--text-postings`: the full-text table keeps postings (its keyword counts are taken from
    them); `--structured-sort-key`: the structured table is sorted by ClickHouse's key;
    `--structured-keyword-index`: it keeps keyword postings of the keyword query's paths; every
    answer still agrees with ClickHouse's when chdb is installed."""
    binary = strata_bin()
    if not binary.is_file():
        pytest.skip(f"no Strata binary at {binary}")
    systems = ",".join(["strata"] + (["clickhouse"] if importlib.util.find_spec("chdb") else []))
    work = tmp_path / "work"
    proc = subprocess.run([sys.executable, str(BENCH / "logs.py"), "--strata-bin", str(binary),
                           "--lines", "20000", "--runs", "1", "--systems", systems, "--text-postings",
                           "--structured-sort-key", "user,path,status,timestamp",
                           "--structured-keyword-index", "user,method,path,protocol,status", "--throttle-seconds", "0", "--work", str(work), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["strata_text_postings"] and results["disagreements"] == []
    manifest = json.loads((work / "strata" / "lines" / "manifest.json").read_text())
    assert manifest["settings"]["text_postings"] is True
    assert all(part["text_index"]["postings"] for part in manifest["parts"])
    assert all(part["text_index"]["postings"]["token_blocks"] for part in manifest["parts"])
    assert all(part["text_index"]["postings"]["filters_omitted"] for part in manifest["parts"])
    structured = json.loads((work / "strata" / "access" / "manifest.json").read_text())
    assert structured["settings"]["sort_key"] == ["user", "path", "status", "timestamp"]
    assert structured["settings"]["keyword_index"] == ["user", "method", "path", "protocol", "status"]
    assert all(part["text_index"]["keyword_columns"] for part in structured["parts"])
    assert results["systems"]["strata"]["structured"]["queries"][1]["answer"] > 0
    keywords = results["systems"]["strata"]["full-text"]["queries"][1]
    assert keywords["answer"] > 0, keywords
