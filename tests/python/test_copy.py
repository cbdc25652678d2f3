"""`COPY (query) TO 'file'` through `strata query` and `strata sql`: the result lands in the file,
in the format of its extension or of `STORED AS`, documents as JSON text."""
import csv
import json

import duckdb

from conftest import DATA

SQL = "SELECT data.kind AS kind, count(*) AS n FROM bluesky GROUP BY kind ORDER BY kind"
EXPECTED = [("account", 1), ("commit", 150), ("identity", 1)]


def test_copy_query_to_files(strata, tmp_path):
    strata.ingest("bluesky", DATA / "jetstream_sample.ndjson")
    out = tmp_path / "out dir; with 'quote'"
    out.mkdir()
    quoted = str(out).replace("'", "''")

    # Two statements in one call, a semicolon and a quote inside the file name.
    proc = strata.run("query", "--format", "ndjson",
                      f"COPY ({SQL}) TO '{quoted}/kinds.parquet'; "
                      f"COPY ({SQL}) TO '{quoted}/kinds.txt' STORED AS CSV")
    assert [json.loads(line) for line in proc.stdout.decode().splitlines()] == [{"count": 3}, {"count": 3}]
    rows = duckdb.connect().execute(f"SELECT kind, n FROM read_parquet('{quoted}/kinds.parquet')").fetchall()
    assert rows == EXPECTED
    with (out / "kinds.txt").open(newline="") as f:
        assert [tuple(r) for r in csv.reader(f)] == [("kind", "n")] + [(k, str(n)) for k, n in EXPECTED]

    # Whole documents go out as JSON text, one object per line.
    strata.run("query", f"COPY (SELECT data FROM bluesky WHERE data.kind = 'identity') TO '{quoted}/docs.json'")
    lines = (out / "docs.json").read_text().splitlines()
    assert len(lines) == 1 and json.loads(json.loads(lines[0])["data"])["kind"] == "identity"

    # A file of no known format is an error that says so, and writes nothing.
    proc = strata.run("query", f"COPY ({SQL}) TO '{quoted}/x.bin' STORED AS NOPE", check=False)
    assert proc.returncode != 0 and "file format" in proc.stderr.decode()
    assert not (out / "x.bin").exists()


def test_copy_with_postgres_format_option_and_from_the_shell(strata, tmp_path):
    import os

    import pexpect

    from conftest import strata_bin

    strata.ingest("bluesky", DATA / "jetstream_sample.ndjson")
    target = tmp_path / "kinds.out"
    strata.run("query", f"COPY ({SQL}) TO '{target}' WITH (FORMAT csv)")
    assert target.read_text().splitlines() == ["kind,n", "account,1", "commit,150", "identity,1"]
    proc = strata.run("query", f"COPY ({SQL}) TO '{target}' WITH (HEADER false)", check=False)
    assert proc.returncode != 0 and "takes only FORMAT" in proc.stderr.decode()

    shell_target = tmp_path / "from shell.parquet"
    child = pexpect.spawn(strata_bin(), ["--data-dir", str(strata.data_dir), "sql"], encoding="utf-8", timeout=60,
                          env=dict(os.environ, HOME=str(tmp_path), TERM="dumb"))
    child.expect_exact("strata> ")
    child.sendline(f"COPY ({SQL}) TO '{shell_target}';")
    child.expect(r"\|\s*3\s*\|")
    child.expect_exact("strata> ")
    child.sendline("\\q")
    child.expect(pexpect.EOF)
    rows = duckdb.connect().execute(f"SELECT kind, n FROM read_parquet('{shell_target}')").fetchall()
    assert rows == EXPECTED
