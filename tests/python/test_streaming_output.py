"""`strata query` streams its result: every output format writes batches as they arrive, so
`SELECT data FROM t` over a table whose result is larger than the memory bound completes with all
of its documents while the process stays small (issue 11, item 7). Collected, the result of 200k
documents (95 MB) peaked at 436 MB as JSON and 2.1 GB as a table, and grew with the result;
streamed, 300k documents (143 MB) peak at 160-200 MB in every format, most of it the scan's
decoded row groups, which do not grow with the table."""
import csv
import hashlib
import io
import json
import os
import subprocess
import sys

import pytest

from conftest import strata_bin

DOCS = 300_000
# Below the result's own size (143 MB of JSON text plus table padding) and far below what
# collecting it took (~650 MB as JSON, ~3 GB as a table).
PEAK_RSS_BOUND_MB = 256


@pytest.fixture(scope="module")
def big_table(tmp_path_factory):
    root = tmp_path_factory.mktemp("stream")
    src = root / "bluesky.ndjson"
    subprocess.run([strata_bin(), "generate", "bluesky", "--docs", str(DOCS), "--seed", "11", "-o", str(src)],
                   check=True, capture_output=True)
    data_dir = root / "db"
    subprocess.run([strata_bin(), "--data-dir", str(data_dir), "ingest", "t", str(src)], check=True,
                   capture_output=True)
    exported = subprocess.run([strata_bin(), "--data-dir", str(data_dir), "export", "t"], check=True,
                              capture_output=True).stdout
    return data_dir, src.stat().st_size, digest(json.loads(line) for line in exported.splitlines())


def digest(documents):
    """An order-independent fingerprint of a multiset of documents."""
    hashes = sorted(hashlib.sha1(json.dumps(d, sort_keys=True).encode()).digest() for d in documents)
    return len(hashes), hashlib.sha1(b"".join(hashes)).hexdigest()


# Runs argv[1:] and reports its peak RSS (KiB) and exit code on stderr's last line. A fresh, small
# process spawns the query: a child forked from pytest, which holds the expected documents, would
# count pytest's memory in its own peak.
MEASURE = ("import os, sys; pid = os.posix_spawn(sys.argv[1], sys.argv[1:], os.environ); "
           "_, status, usage = os.wait4(pid, 0); "
           "print(usage.ru_maxrss, os.waitstatus_to_exitcode(status), file=sys.stderr)")


def run_measured(data_dir, out_path, *args):
    """Runs `strata query ARGS` with stdout to a file; returns its peak RSS in MB."""
    with open(out_path, "wb") as out:
        proc = subprocess.run([sys.executable, "-c", MEASURE, strata_bin(), "--data-dir", str(data_dir), "query",
                               *args], stdout=out, stderr=subprocess.PIPE, check=True)
    stderr = proc.stderr.decode().splitlines()
    peak_kib, code = map(int, stderr[-1].split())
    assert code == 0, "\n".join(stderr)
    return peak_kib / 1024


@pytest.mark.parametrize("fmt", ["json", "ndjson", "table", "csv", "parquet"])
def test_select_data_streams_in_bounded_memory(big_table, tmp_path, fmt):
    data_dir, input_bytes, expected = big_table
    out = tmp_path / f"out.{fmt}"
    peak = run_measured(data_dir, out, "--format", fmt, "SELECT data FROM t")
    assert out.stat().st_size > input_bytes * 0.9, "the output holds every document"
    assert peak < PEAK_RSS_BOUND_MB, f"{fmt}: peak RSS {peak:.0f} MB for a {input_bytes / 1e6:.0f} MB result"

    if fmt == "json":
        with out.open() as f:
            assert f.readline() == "[\n"
            docs = []
            for line in f:
                if line == "]\n":
                    break
                docs.append(json.loads(line.strip().rstrip(","))["data"])
            assert f.read() == ""
        assert digest(docs) == expected
    elif fmt == "ndjson":
        with out.open() as f:
            assert digest(json.loads(line)["data"] for line in f) == expected
    elif fmt == "csv":
        with out.open(newline="") as f:
            reader = csv.reader(f)
            assert next(reader) == ["data"]
            assert digest(json.loads(row[0]) for row in reader) == expected
    elif fmt == "parquet":
        duckdb = pytest.importorskip("duckdb")
        con = duckdb.connect()
        rows = con.execute(f"SELECT data FROM read_parquet('{out}')").fetchall()
        assert digest(json.loads(r[0]) for r in rows) == expected
    else:
        # Pages of at most 1000 rows, each a table with its own header, then the row count.
        with out.open() as f:
            headers = rows = 0
            last = ""
            for line in f:
                if line.startswith("| data"):
                    headers += 1
                elif line.startswith("| {"):
                    rows += 1
                last = line
        assert rows == DOCS
        assert headers == DOCS // 1000
        assert last == f"({DOCS} rows)\n"
