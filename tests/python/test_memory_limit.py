"""Exact count(DISTINCT) over many distinct values stays within STRATA_MEMORY_LIMIT by spilling to
disk instead of failing or running out of memory, and still gives the exact answer. (Unlimited,
these queries peak at about 200 MB; the limit here is 64 MB.)"""
import json
import os
import re
import subprocess

from conftest import strata_bin

DOCS = 1_000_000


def test_count_distinct_spills_under_a_small_memory_limit(strata, tmp_path):
    src = tmp_path / "distinct.ndjson"
    with src.open("w") as f:
        for i in range(DOCS):
            # 1M distinct users, 4 groups; every user appears once.
            f.write(json.dumps({"g": f"group-{i % 4}", "user": f"did:plc:user-{i:09d}-padding-to-make-it-wider"}) + "\n")
    strata.ingest("t", src)

    env = dict(os.environ, STRATA_MEMORY_LIMIT=str(64 * 1024 * 1024))
    run = lambda sql: subprocess.run([strata_bin(), "--data-dir", str(strata.data_dir), "query", "--format", "ndjson", sql],
                                     capture_output=True, text=True, env=env, timeout=600)

    proc = run("SELECT count(DISTINCT data.user) AS users, count(*) AS n FROM t")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"users": DOCS, "n": DOCS}

    # JSONBench Q2's shape (a plain count beside the distinct one) and the distinct count alone.
    for sql in ["SELECT data.g AS g, count(*) AS n, count(DISTINCT data.user) AS users FROM t GROUP BY g ORDER BY g",
                "SELECT data.g AS g, count(DISTINCT data.user) AS users FROM t GROUP BY g ORDER BY g"]:
        proc = run(sql)
        assert proc.returncode == 0, proc.stderr
        rows = [json.loads(line) for line in proc.stdout.splitlines()]
        assert [r["users"] for r in rows] == [DOCS // 4] * 4
        assert [r["g"] for r in rows] == [f"group-{k}" for k in range(4)]
        assert all(r.get("n", DOCS // 4) == DOCS // 4 for r in rows)

    # Empty input and absent paths through the same (rewritten) plan: counts are 0, not NULL.
    proc = run("SELECT count(*) AS n, count(DISTINCT data.user) AS users, count(data.g) AS g, min(data.g) AS m, "
               "count(DISTINCT data.no_such_path) AS none FROM t WHERE data.g = 'no such group'")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"n": 0, "users": 0, "g": 0, "m": None, "none": 0}

    # The limit was binding: the aggregation spilled.
    proc = run("EXPLAIN ANALYZE " + sql)
    assert proc.returncode == 0, proc.stderr
    spills = [int(n) for n in re.findall(r"spill_count=(\d+)", proc.stdout)]
    assert spills and max(spills) > 0, proc.stdout
