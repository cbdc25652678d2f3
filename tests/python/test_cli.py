"""The `strata` binary as users and scripts use it: ingest summary and rejects, export, tables,
query output formats, timing, errors, and DuckDB reading our parts."""
import csv
import io
import json
import subprocess

import duckdb

from conftest import DATA, strata_bin


def test_ingest_summary_rejects_and_export(strata, tmp_path):
    proc = strata.ingest("edge", DATA / "edge_cases.ndjson")
    err = proc.stderr.decode()
    assert "read 25 documents, loaded 17, rejected 8" in err
    assert "rejects.ndjson" in err
    assert "edge_cases.ndjson:17: top-level value is an array, expected an object" in err
    rejects = (strata.data_dir / "edge" / "rejects.ndjson").read_text().splitlines()
    assert [json.loads(r)["line"] for r in rejects] == list(range(17, 25))

    exported = strata.run("export", "edge").stdout.decode().splitlines()
    assert len(exported) == 17
    text = "\n".join(exported)
    for needle in ['"007"', "1.10", "18446744073709551616", '"empty_obj":{}', "\\u0000nul"]:
        assert needle in text


def test_stdin_gzip_and_zstd_inputs(strata, tmp_path):
    import gzip
    sample = (DATA / "jetstream_sample.ndjson").read_bytes()
    gz = tmp_path / "s.ndjson.gz"
    gz.write_bytes(gzip.compress(sample))
    strata.ingest("t", gz)
    strata.run("ingest", "t", "-", input=sample)
    tables = strata.run("tables").stdout.decode()
    assert "t" in tables and "304" in tables


def test_query_formats_and_timing(strata):
    strata.ingest("bluesky", DATA / "jetstream_sample.ndjson", sort_key="kind,did")
    sql = "SELECT data.kind AS kind, count(*) AS n FROM bluesky GROUP BY kind ORDER BY kind"
    ndjson = strata.query_rows(sql)
    assert ndjson == [{"kind": "account", "n": 1}, {"kind": "commit", "n": 150}, {"kind": "identity", "n": 1}]
    as_json = json.loads(strata.run("query", "--format", "json", sql).stdout)
    assert as_json == ndjson
    rows = list(csv.reader(io.StringIO(strata.run("query", "--format", "csv", sql).stdout.decode())))
    assert rows[0] == ["kind", "n"] and rows[2] == ["commit", "150"]
    table = strata.run("query", sql).stdout.decode()
    assert "| commit   | 150 |" in table
    parquet = strata.run("query", "--format", "parquet", sql).stdout
    assert parquet[:4] == b"PAR1"
    proc = strata.run("query", "--timing", "SELECT 1; SELECT count(*) FROM bluesky")
    assert proc.stderr.decode().count("Time: ") == 2
    # Whole documents come back as documents.
    docs = strata.query_rows("SELECT data FROM bluesky WHERE data.kind = 'identity'")
    assert docs[0]["data"]["kind"] == "identity"


def test_errors_are_clear(strata):
    strata.ingest("bluesky", DATA / "jetstream_sample.ndjson")
    proc = strata.run("query", "SELECT * FROM nope", check=False)
    assert proc.returncode != 0 and "nope" in proc.stderr.decode()
    proc = strata.run("query", "SELEC 1", check=False)
    assert proc.returncode != 0 and "SELEC" in proc.stderr.decode()
    proc = strata.run("query", "SELECT no_such_function(1)", check=False)
    assert proc.returncode != 0 and "no_such_function" in proc.stderr.decode()
    proc = strata.run("export", "missing", check=False)
    assert proc.returncode != 0 and "does not exist" in proc.stderr.decode()


def test_duckdb_reads_our_parts(strata):
    strata.ingest("bluesky", DATA / "jetstream_sample.ndjson", sort_key="kind,commit.collection")
    parts = str(strata.data_dir / "bluesky" / "parts" / "*.parquet")
    con = duckdb.connect()
    assert con.execute(f"SELECT count(*) FROM read_parquet('{parts}')").fetchone()[0] == 152
    rows = con.execute(
        f'SELECT "commit.collection", count(*) FROM read_parquet(\'{parts}\') GROUP BY 1 ORDER BY 2 DESC LIMIT 1'
    ).fetchall()
    assert rows == [("app.bsky.feed.like", 105)]
    # The remainder is a plain MAP column.
    kinds = con.execute(f"SELECT typeof(__strata_rest) FROM read_parquet('{parts}') LIMIT 1").fetchone()[0]
    assert kinds.startswith("MAP(VARCHAR, VARCHAR)")
