"""Tables published as Iceberg (issue 16, ADR 0021), read by real Iceberg readers over the very
parts Strata wrote: PyIceberg, DuckDB's iceberg_scan and Spark (local mode, the Iceberg Spark
runtime from Maven Central). Each must get Strata's answers, deletions and replacements included,
and keep getting them as commits and merges change the table."""
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from conftest import REPO, Strata, maven_jar

ICEBERG_SPARK_RUNTIME = ("org.apache.iceberg", "iceberg-spark-runtime-3.5_2.12", "1.12.0")
STRATA_QUERIES = (REPO / "bench" / "queries" / "jsonbench" / "strata.sql").read_text()
SPARK_QUERIES = (REPO / "bench" / "queries" / "jsonbench" / "spark_iceberg.sql").read_text()


def statements(text):
    return [s.strip() for s in text.split(";") if s.strip()]


def accounts(ids, value, label):
    return "".join(json.dumps({"id": i, "v": value(i), "s": label(i)}) + "\n" for i in ids)


@pytest.fixture(scope="module")
def published(tmp_path_factory, bluesky_100k):
    """A data directory with three published tables: `bluesky` (100k generated events, two parts
    sorted as JSONBench's), `accounts` (keyed, with deleted and replaced documents) and `mixed`
    (a path typed differently in two parts)."""
    root = tmp_path_factory.mktemp("iceberg")
    strata = Strata(root / "db")
    lines = bluesky_100k.read_text().splitlines(keepends=True)
    halves = [root / "first.ndjson", root / "second.ndjson"]
    halves[0].write_text("".join(lines[: len(lines) // 2]))
    halves[1].write_text("".join(lines[len(lines) // 2:]))
    for half in halves:
        strata.ingest("bluesky", half, sort_key="kind,commit.operation,commit.collection,did,time_us",
                      extra=["--no-merge"])
    (root / "a1.ndjson").write_text(accounts(range(1000), lambda i: i * 2, lambda i: f"x{i % 7}"))
    strata.ingest("accounts", root / "a1.ndjson", extra=["--key", "id:integer"])
    (root / "mixed1.ndjson").write_text('{"id": 1, "a": 1}\n{"id": 2, "a": 2}\n')
    (root / "mixed2.ndjson").write_text('{"id": 3, "a": "three", "b": true}\n')
    strata.ingest("mixed", root / "mixed1.ndjson", extra=["--no-merge", "--iceberg"])
    strata.ingest("mixed", root / "mixed2.ndjson", extra=["--no-merge"])
    for table in ("bluesky", "accounts"):
        strata.run("query", f"ALTER TABLE {table} SET (iceberg = true)")
    # Changes after publication: a deletion and upserts that replace ten documents.
    strata.run("query", "DELETE FROM accounts WHERE data.id < 10")
    (root / "a2.ndjson").write_text(accounts(range(990, 1010), lambda i: -1, lambda i: "new"))
    strata.ingest("accounts", root / "a2.ndjson")
    return strata


def table_dir(strata, table):
    return strata.data_dir / table


def current_metadata(strata, table):
    hint = (table_dir(strata, table) / "metadata" / "version-hint.text").read_text().strip()
    return str(table_dir(strata, table) / "metadata" / f"v{hint}.metadata.json")


def strata_accounts(strata):
    rows = strata.query_rows("SELECT data.id AS id, data.v AS v, data.s AS s FROM accounts ORDER BY id")
    return [(r["id"], r["v"], r["s"]) for r in rows]


def q1(strata):
    return [(r["event"], r["count"]) for r in strata.query_rows(statements(STRATA_QUERIES)[0])]


def pyiceberg_table(strata, table):
    from pyiceberg.table import StaticTable

    return StaticTable.from_metadata(current_metadata(strata, table))


def test_pyiceberg_reads_strata_answers(published):
    bluesky = pyiceberg_table(published, "bluesky").scan().to_arrow()
    assert bluesky.num_rows == 100_000
    counts = bluesky.group_by("commit.collection").aggregate([([], "count_all")])
    got = sorted(zip(counts.column(0).to_pylist(), counts.column(1).to_pylist()),
                 key=lambda r: (-r[1], r[0] or ""))
    assert got == sorted(q1(published), key=lambda r: (-r[1], r[0] or ""))

    rows = pyiceberg_table(published, "accounts").scan(selected_fields=("id", "v", "s")).to_arrow()
    got = sorted(zip(rows.column("id").to_pylist(), rows.column("v").to_pylist(),
                     rows.column("s").to_pylist()))
    expected = strata_accounts(published)
    assert len(expected) == 1000 and expected[0][0] == 10 and expected[-1] == (1009, -1, "new")
    assert got == expected

    # `a` is an int in one part and a string in the other: not an Iceberg column (readers would
    # meet two physical types), but named by the mapping so the parts stay readable.
    mixed = pyiceberg_table(published, "mixed")
    assert "a" not in [f.name for f in mixed.schema().fields]
    assert json.loads(mixed.properties["strata.excluded-paths"]) == ["a"]
    rows = mixed.scan().to_arrow()
    assert sorted(rows.column("id").to_pylist()) == [1, 2, 3]
    assert rows.column("b").to_pylist().count(True) == 1


# DuckDB's iceberg and avro extensions are on PyPI for DuckDB 1.5.5 (extensions.duckdb.org may be
# unreachable); the suite's own DuckDB is newer, so this one is installed beside it.
DUCKDB_WITH_ICEBERG = ["duckdb==1.5.5", "duckdb-extension-iceberg==1.5.5", "duckdb-extension-avro==1.5.5",
                       "duckdb-extension-httpfs==1.5.5"]

DUCKDB_SCRIPT = """
import glob, json, os, sys
import duckdb
con = duckdb.connect()
for extension in glob.glob(os.path.join(sys.argv[1], "duckdb_extension_*", "extensions", "*", "*.duckdb_extension")):
    con.execute(f"INSTALL '{extension}'")
con.execute("LOAD iceberg")
setup, queries = json.loads(sys.argv[2])
for sql in setup:
    con.execute(sql)
answers = [con.execute(sql).fetchall() for sql in queries]
with open(sys.argv[3], "w") as out:
    json.dump(answers, out)
"""


def duckdb_over_iceberg(*queries, setup=()):
    """Each query's rows from DuckDB 1.5.5 with its iceberg extension (and httpfs, for tables on
    S3), after the `setup` statements."""
    import subprocess
    import sys

    target = REPO / "tests" / ".cache" / "duckdb-1.5.5"
    if not (target / "duckdb_extension_httpfs").exists():
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--target", str(target),
                        *DUCKDB_WITH_ICEBERG], check=True)
    # The answers come back in a file: DuckDB prints its progress bar to stdout when a query runs
    # longer than two seconds (a loaded machine), and no setting of 1.5.5 stops it there.
    with tempfile.TemporaryDirectory() as scratch:
        answers = Path(scratch) / "answers.json"
        out = subprocess.run([sys.executable, "-c", DUCKDB_SCRIPT, str(target),
                              json.dumps([list(setup), list(queries)]), str(answers)],
                             env={**os.environ, "PYTHONPATH": str(target)},
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return [[tuple(row) for row in rows] for rows in json.loads(answers.read_text())]


def test_duckdb_iceberg_scan_reads_strata_answers(published):
    bluesky = table_dir(published, "bluesky")
    accounts_dir = table_dir(published, "accounts")
    events, rows = duckdb_over_iceberg(
        f"""SELECT "commit.collection" AS event, count(*) AS count FROM iceberg_scan('{bluesky}')
            GROUP BY event ORDER BY count DESC, event""",
        f"SELECT id, v, s FROM iceberg_scan('{accounts_dir}') ORDER BY id",
    )
    assert events == q1(published)
    assert rows == strata_accounts(published)


@pytest.fixture(scope="module")
def spark():
    if shutil.which("java") is None:
        pytest.skip("Java is not installed (apt-get install openjdk-17-jdk-headless)")
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]")
               .config("spark.jars", str(maven_jar(*ICEBERG_SPARK_RUNTIME)))
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.ui.enabled", "false")
               .config("spark.driver.memory", "1g")
               .getOrCreate())
    yield session
    session.stop()


def test_spark_runs_jsonbench_over_the_published_table(published, spark):
    spark.read.format("iceberg").load(str(table_dir(published, "bluesky"))).createOrReplaceTempView("bluesky")
    for number, (strata_sql, spark_sql) in enumerate(zip(statements(STRATA_QUERIES),
                                                         statements(SPARK_QUERIES)), start=1):
        expected = [tuple(row.values()) for row in published.query_rows(strata_sql)]
        got = [tuple(row) for row in spark.sql(spark_sql).collect()]
        assert got == expected, f"Q{number}"

    accounts_df = spark.read.format("iceberg").load(str(table_dir(published, "accounts")))
    got = sorted(tuple(r) for r in accounts_df.select("id", "v", "s").collect())
    assert got == strata_accounts(published)


def test_the_publication_follows_commits_and_merges(published, tmp_path):
    before = pyiceberg_table(published, "bluesky").scan().to_arrow().num_rows
    extra = tmp_path / "more.ndjson"
    extra.write_text('{"kind": "commit", "did": "did:plc:new", "time_us": 1, '
                     '"commit": {"operation": "create", "collection": "strata.test"}}\n')
    published.ingest("bluesky", extra, extra=["--no-merge"])
    assert pyiceberg_table(published, "bluesky").scan().to_arrow().num_rows == before + 1
    published.run("optimize", "bluesky")
    table = pyiceberg_table(published, "bluesky")
    assert len(list(table.scan().plan_files())) == 1, "one part after the merge"
    from pyiceberg.expressions import EqualTo

    # PyIceberg 0.12 turns a filter on a dotted name into a nested field reference, which a
    # flat column named `commit.collection` is not; a filter on a plain name works.
    rows = table.scan(row_filter=EqualTo("did", "did:plc:new"),
                      selected_fields=("commit.collection",)).to_arrow()
    assert rows.column("commit.collection").to_pylist() == ["strata.test"]

    # Parts carry their sort-key bounds: a filter on the sort key plans only the parts it needs,
    # and every reader still gets every matching row.
    ranges = tmp_path / "ranges"
    ranges.mkdir()
    for start in (0, 100, 200):
        part = ranges / f"{start}.ndjson"
        part.write_text("".join(json.dumps({"n": n, "half": n % 2 == 0}) + "\n" for n in range(start, start + 100)))
        published.ingest("ranges", part, sort_key="n", extra=["--no-merge"])
    published.run("query", "ALTER TABLE ranges SET (iceberg = true)")
    from pyiceberg.expressions import GreaterThanOrEqual

    scan = pyiceberg_table(published, "ranges").scan(row_filter=GreaterThanOrEqual("n", 150))
    assert len(list(scan.plan_files())) == 2
    assert sorted(scan.to_arrow().column("n").to_pylist()) == list(range(150, 300))

    published.run("query", "ALTER TABLE mixed SET (iceberg = false)")
    assert not (table_dir(published, "mixed") / "metadata").exists()


def test_the_server_keeps_the_publication_in_step(tmp_path):
    """Documents the server acknowledges reach Iceberg readers once its flusher commits them, and
    its background merges republish the table (no lost or doubled document on the way)."""
    import time

    from server import Server, ndjson

    with Server(tmp_path / "db") as server:
        status, _ = server.ingest("events", ndjson([{"n": n, "k": "a"} for n in range(100)]))
        assert status == 200
        status, _, answer = server.query("ALTER TABLE events SET (iceberg = true)")
        assert status == 200, answer
        for start in range(100, 1000, 100):
            status, _ = server.ingest("events", ndjson([{"n": n, "k": "b"} for n in range(start, start + 100)]))
            assert status == 200
        expected = server.rows("SELECT count(*) AS c, sum(data.n::bigint) AS s FROM events")[0]
        assert expected == {"c": 1000, "s": sum(range(1000))}
        strata = Strata(tmp_path / "db")
        deadline = time.monotonic() + 60
        while True:
            rows = pyiceberg_table(strata, "events").scan(selected_fields=("n",)).to_arrow()
            got = sorted(rows.column("n").to_pylist())
            if got == list(range(1000)) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert got == list(range(1000))
