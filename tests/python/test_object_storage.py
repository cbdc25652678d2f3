"""Tables on S3-compatible object storage (issue 16, ADR 0022), against a real S3 protocol
server on loopback: moto in server mode (PyPI), which answers `If-None-Match: *` with 412 as S3
does. Every command of the real binary runs with `--data-dir s3://bucket/prefix`; answers must
equal those of the same documents in a local data directory."""
import json
import os
import signal
import socket
import subprocess
import time

import boto3
import pytest
from moto.server import ThreadedMotoServer

from conftest import REPO, Strata, strata_bin

BUCKET = "strata-test"
QUERIES = [s.strip() for s in (REPO / "bench" / "queries" / "jsonbench" / "strata.sql").read_text().split(";")
           if s.strip()]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3_server():
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id="test", aws_secret_access_key="test")
    client.create_bucket(Bucket=BUCKET)
    yield endpoint, client
    server.stop()


@pytest.fixture
def s3(s3_server, tmp_path, monkeypatch, request):
    """A fresh prefix of the bucket as the data directory, and the S3 client to inspect it."""
    endpoint, client = s3_server
    for key, value in {
        "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint, "AWS_ALLOW_HTTP": "true",
        "STRATA_CACHE_DIR": str(tmp_path / "cache"),
    }.items():
        monkeypatch.setenv(key, value)
    prefix = request.node.name
    return Strata(f"s3://{BUCKET}/{prefix}"), client, prefix


def keys(client, prefix):
    out = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix + "/"):
        out += [o["Key"][len(prefix) + 1:] for o in page.get("Contents", [])]
    return sorted(out)


def log_versions(client, prefix, table):
    return [k for k in keys(client, prefix) if k.startswith(f"{table}/_log/")]


def rows(strata, sql):
    return strata.query_rows(sql)


def test_every_command_on_s3_gives_the_local_answers(s3, tmp_path, bluesky_100k):
    remote, client, prefix = s3
    local = Strata(tmp_path / "local")
    head = tmp_path / "head.ndjson"
    tail = tmp_path / "tail.ndjson"
    lines = bluesky_100k.read_text().splitlines(keepends=True)
    head.write_text("".join(lines[:60_000]))
    tail.write_text("".join(lines[60_000:]))
    for strata in (remote, local):
        strata.ingest("bluesky", head, sort_key="kind,did")
        strata.ingest("bluesky", tail)
    # Parts, checksum files and the log are on S3; nothing else.
    stored = keys(client, prefix)
    assert log_versions(client, prefix, "bluesky") == ["bluesky/_log/00000000000000000001.json",
                                                       "bluesky/_log/00000000000000000002.json"]
    assert all(k.startswith(("bluesky/_log/", "bluesky/parts/")) for k in stored), stored
    for sql in QUERIES:
        assert rows(remote, sql) == rows(local, sql), sql
    # A cold cache gives the same answers.
    cold = Strata(remote.data_dir)
    env_cache = os.environ["STRATA_CACHE_DIR"]
    os.environ["STRATA_CACHE_DIR"] = str(tmp_path / "cold-cache")
    try:
        assert rows(cold, QUERIES[1]) == rows(local, QUERIES[1])
    finally:
        os.environ["STRATA_CACHE_DIR"] = env_cache
    assert sorted(remote.run("export", "bluesky").stdout.splitlines()) == \
        sorted(local.run("export", "bluesky").stdout.splitlines())
    listing = remote.run("tables").stdout.decode()
    assert "bluesky" in listing and "100000" in listing
    assert "ok (2 parts)" in remote.run("check", "bluesky").stdout.decode()
    # optimize merges on S3; the replaced parts stay for the readers' grace period.
    remote.run("optimize", "bluesky")
    assert len(log_versions(client, prefix, "bluesky")) == 3
    for sql in QUERIES:
        assert rows(remote, sql) == rows(local, sql), sql
    parts = [k for k in keys(client, prefix) if k.endswith(".parquet")]
    assert len(parts) == 3
    # With no grace, the next optimize deletes them and the replaced log versions.
    os.environ["STRATA_GRACE_SECONDS"] = "0"
    try:
        remote.run("optimize", "bluesky")
    finally:
        del os.environ["STRATA_GRACE_SECONDS"]
    assert len([k for k in keys(client, prefix) if k.endswith(".parquet")]) == 1
    assert len(log_versions(client, prefix, "bluesky")) == 1
    assert rows(remote, QUERIES[0]) == rows(local, QUERIES[0])
    remote.run("drop", "bluesky")
    assert keys(client, prefix) == []
    assert remote.run("query", "SELECT 1 FROM bluesky", check=False).returncode == 1


def test_keyed_changes_on_s3(s3, tmp_path):
    remote, client, prefix = s3
    docs = tmp_path / "accounts.ndjson"
    docs.write_text("".join(json.dumps({"id": i, "v": i * 3}) + "\n" for i in range(1, 101)))
    remote.ingest("accounts", docs, extra=["--key", "id:integer"])
    remote.run("query", "DELETE FROM accounts WHERE data.id <= 10")
    remote.run("query", "UPDATE accounts SET data = data || '{\"v\": 0}' WHERE data.id = 50")
    remote.run("query", "INSERT INTO accounts VALUES ('{\"id\": 1000, \"v\": 7}')")
    expected = [{"n": 91, "total": sum(i * 3 for i in range(11, 101)) - 150 + 7}]
    assert rows(remote, "SELECT count(*) AS n, sum(data.v) AS total FROM accounts") == expected
    assert rows(remote, "SELECT data.v AS v FROM accounts WHERE data.id = 50") == [{"v": 0}]
    # Deletion vectors are on S3 beside their parts, each name unique to its writer.
    assert [k for k in keys(client, prefix) if k.endswith(".dv")]
    remote.run("optimize", "accounts")
    assert rows(remote, "SELECT count(*) AS n, sum(data.v) AS total FROM accounts") == expected
    # A secondary index: its files go to S3 beside their parts, and lookups read through them.
    remote.run("query", "CREATE INDEX accounts_v ON accounts (data.v)")
    assert [k for k in keys(client, prefix) if k.endswith(".accounts_v.index")]
    assert rows(remote, "SELECT data.id AS id FROM accounts WHERE data.v = 0") == [{"id": 50}]
    remote.run("query", "INSERT INTO accounts VALUES ('{\"id\": 1001, \"v\": 0}')")
    assert rows(remote, "SELECT data.id AS id FROM accounts WHERE data.v = 0 ORDER BY 1") == [{"id": 50}, {"id": 1001}]


def test_racing_writers_lose_nothing(s3, tmp_path):
    """Four ingests at once into one table: each commits (re-applied onto the versions the
    others created first), so every document is there exactly once."""
    remote, client, prefix = s3
    files = []
    for w in range(4):
        path = tmp_path / f"w{w}.ndjson"
        path.write_text("".join(json.dumps({"w": w, "i": i}) + "\n" for i in range(2000)))
        files.append(path)
    procs = [subprocess.Popen([strata_bin(), "--data-dir", remote.data_dir, "ingest", "t", str(f),
                               "--sort-key", "w"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for f in files]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err.decode()
    assert rows(remote, "SELECT data.w AS w, count(*) AS n, count(DISTINCT data.i) AS d FROM t GROUP BY w ORDER BY w") \
        == [{"w": w, "n": 2000, "d": 2000} for w in range(4)]
    versions = log_versions(client, prefix, "t")
    assert len(versions) == 4
    last = json.loads(client.get_object(Bucket=BUCKET, Key=f"{prefix}/{versions[-1]}")["Body"].read())
    assert last["version"] == 4 and len(last["parts"]) == 4


def test_kill_during_upload_leaves_the_table_as_before(s3, tmp_path, bluesky_100k):
    remote, client, prefix = s3
    remote.ingest("bluesky", bluesky_100k, sort_key="kind,did")
    before = rows(remote, QUERIES[0])
    big = tmp_path / "big.ndjson"
    with open(big, "w") as out:
        for _ in range(5):
            out.write(bluesky_100k.read_text())
    killed = False
    for attempt in range(3):
        committed = set(keys(client, prefix))
        versions = len(log_versions(client, prefix, "bluesky"))
        proc = subprocess.Popen([strata_bin(), "--data-dir", remote.data_dir, "ingest", "bluesky", str(big)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 300
        while proc.poll() is None and time.time() < deadline:
            uploads = client.list_multipart_uploads(Bucket=BUCKET, Prefix=prefix + "/").get("Uploads", [])
            new = set(keys(client, prefix)) - committed
            if uploads or new:
                proc.send_signal(signal.SIGKILL)
                break
            time.sleep(0.005)
        proc.wait()
        if proc.returncode == -signal.SIGKILL and len(log_versions(client, prefix, "bluesky")) == versions:
            killed = True
            break
        # The ingest finished before the kill: start over from its state.
        before = rows(remote, QUERIES[0])
    assert killed, "could not kill an ingest during its upload"
    # The table is as before: the log has no new version, queries and check agree.
    assert rows(remote, QUERIES[0]) == before
    assert "ok" in remote.run("check", "bluesky").stdout.decode()
    # Orphans (parts uploaded, never committed) go at the next collection past the grace period;
    # committed files stay.
    os.environ["STRATA_GRACE_SECONDS"] = "0"
    try:
        remote.run("optimize", "bluesky")
    finally:
        del os.environ["STRATA_GRACE_SECONDS"]
    last = log_versions(client, prefix, "bluesky")[-1]
    manifest = json.loads(client.get_object(Bucket=BUCKET, Key=f"{prefix}/{last}")["Body"].read())
    listed = set()
    for part in manifest["parts"]:
        listed |= {part["file"], part["file"] + ".crc"}
    assert {k.split("/", 2)[2] for k in keys(client, prefix) if k.startswith("bluesky/parts/")} == listed
    assert rows(remote, QUERIES[0]) == before


def test_iceberg_publication_on_s3(s3, s3_server, tmp_path):
    """A table on S3 published as Iceberg: PyIceberg reads it from S3 (data files at their
    s3:// locations, deletions as position deletes) and gets Strata's answers; the publication
    follows commits and merges, `check` verifies it, collection keeps what the hint names."""
    from pyiceberg.table import StaticTable

    remote, client, prefix = s3
    endpoint, _ = s3_server
    docs = tmp_path / "acc.ndjson"
    docs.write_text("".join(json.dumps({"id": i, "v": i * 2}) + "\n" for i in range(1, 101)))
    remote.ingest("acc", docs, extra=["--key", "id:integer", "--iceberg"])
    remote.run("query", "DELETE FROM acc WHERE data.id <= 10")

    def iceberg_ids():
        hint = client.get_object(Bucket=BUCKET, Key=f"{prefix}/acc/metadata/version-hint.text")["Body"].read()
        location = f"s3://{BUCKET}/{prefix}/acc/metadata/v{int(hint)}.metadata.json"
        table = StaticTable.from_metadata(location, properties={
            "s3.endpoint": endpoint, "s3.access-key-id": "test", "s3.secret-access-key": "test",
            "s3.region": "us-east-1"})
        assert table.metadata.location == f"s3://{BUCKET}/{prefix}/acc"
        return sorted(table.scan().to_arrow().column("id").to_pylist())

    assert iceberg_ids() == list(range(11, 101))
    assert "Iceberg" not in remote.run("check", "acc").stdout.decode()
    more = tmp_path / "more.ndjson"
    more.write_text("".join(json.dumps({"id": i, "v": 0}) + "\n" for i in range(95, 111)))
    remote.ingest("acc", more)
    os.environ["STRATA_GRACE_SECONDS"] = "0"
    try:
        remote.run("optimize", "acc")
    finally:
        del os.environ["STRATA_GRACE_SECONDS"]
    assert iceberg_ids() == list(range(11, 111))
    assert rows(remote, "SELECT count(*) AS n FROM acc") == [{"n": 100}]
    proc = remote.run("check", "acc", check=False)
    assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()
    # Only the current publication is left after collection with no grace.
    metadata = [k for k in keys(client, prefix) if k.startswith("acc/metadata/")]
    assert len([k for k in metadata if k.endswith(".metadata.json")]) == 1, metadata
    remote.run("query", "ALTER TABLE acc SET (iceberg = false)")
    assert not [k for k in keys(client, prefix) if k.startswith("acc/metadata/")]


def test_shell_on_s3_commits_each_statement_and_sees_other_writers(s3, tmp_path):
    """`strata sql` on S3: a statement's change is committed when it ends (another process sees
    it), and the next statement sees what another process committed meanwhile."""
    import pexpect

    remote, client, prefix = s3
    docs = tmp_path / "acc.ndjson"
    docs.write_text("".join(json.dumps({"id": i, "v": 1}) + "\n" for i in range(1, 11)))
    remote.ingest("acc", docs, extra=["--key", "id:integer"])
    env = dict(os.environ, HOME=str(tmp_path), TERM="dumb")
    child = pexpect.spawn(strata_bin(), ["--data-dir", remote.data_dir, "sql"], env=env,
                          encoding="utf-8", timeout=60, dimensions=(40, 200))
    child.expect_exact("strata> ")
    child.sendline("DELETE FROM acc WHERE data.id <= 3;")
    child.expect("committed version 2")
    child.expect_exact("strata> ")
    assert rows(remote, "SELECT count(*) AS n FROM acc") == [{"n": 7}]
    remote.run("query", "INSERT INTO acc VALUES ('{\"id\": 100, \"v\": 5}')")
    child.sendline("SELECT count(*) AS n, sum(data.v) AS s FROM acc;")
    child.expect(r"\|\s*8\s*\|\s*12\s*\|")
    child.expect_exact("strata> ")
    child.sendline("DROP TABLE acc;")
    child.expect("dropped table acc")
    child.expect_exact("strata> ")
    child.sendline("\\q")
    child.expect(pexpect.EOF)
    assert keys(client, prefix) == []


def test_ingests_on_s3_merge_their_small_parts(s3, tmp_path):
    """The follow-up merge of an ingest works on S3 (its small inputs are fetched whole)."""
    remote, client, prefix = s3
    for n in range(9):
        path = tmp_path / f"b{n}.ndjson"
        path.write_text("".join(json.dumps({"n": n, "i": i}) + "\n" for i in range(100)))
        remote.ingest("small", path, sort_key="n")
    last = log_versions(client, prefix, "small")[-1]
    manifest = json.loads(client.get_object(Bucket=BUCKET, Key=f"{prefix}/{last}")["Body"].read())
    assert len(manifest["parts"]) < 9, manifest["parts"]
    assert rows(remote, "SELECT count(*) AS c, count(DISTINCT data.n) AS d FROM small") == [{"c": 900, "d": 9}]


def test_s3_settings_from_the_config_file(s3, s3_server, tmp_path, monkeypatch):
    """Endpoint, region and credentials from the config file's [storage] section (the AWS_*
    variables, when set, win); an unknown option is an error naming it."""
    remote, client, prefix = s3
    endpoint, _ = s3_server
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_ENDPOINT_URL", "AWS_ALLOW_HTTP"):
        monkeypatch.delenv(key)
    config = tmp_path / "strata.toml"
    config.write_text(f'[storage]\nendpoint = "{endpoint}"\nregion = "us-east-1"\n'
                      'access_key_id = "test"\nsecret_access_key = "test"\nallow_http = "true"\n')
    docs = tmp_path / "d.ndjson"
    docs.write_text('{"a": 1}\n{"a": 2}\n')
    remote.run("--config", config, "ingest", "t", docs)
    out = remote.run("query", "--config", config, "--format", "ndjson", "SELECT sum(data.a) AS s FROM t").stdout
    assert json.loads(out) == {"s": 3}
    assert log_versions(client, prefix, "t") == ["t/_log/00000000000000000001.json"]
    config.write_text('[storage]\nendpoint_typo = "x"\n')
    proc = remote.run("--config", config, "tables", check=False)
    assert proc.returncode == 1 and b"endpoint_typo" in proc.stderr, proc.stderr


def test_server_on_s3_keeps_acknowledged_requests_across_machines(s3, tmp_path, monkeypatch):
    """`strata serve --data-dir s3://…`: HTTP ingests are acknowledged once their WAL group is on
    S3, so a server started after `kill -9` on another machine (a fresh cache) has them all;
    SQL changes, merges and the server's own commits reach the table's log; other writers'
    commits become visible to the server; one server per data directory."""
    import psycopg
    from server import Server, ndjson

    remote, client, prefix = s3
    monkeypatch.setenv("STRATA_REFRESH_SECONDS", "1")
    monkeypatch.setenv("STRATA_LEASE_SECONDS", "4")
    # Requests stay in the WAL (no flush into parts) until the kill.
    held = "[wal]\nflush_interval_ms = 600000\nflush_quiet_ms = 600000\n"
    server = Server(remote.data_dir, config=held, config_dir=tmp_path).start()
    try:
        for i in range(20):
            status, answer = server.ingest("events", ndjson({"id": i * 10 + j, "kind": f"k{j % 3}"}
                                                            for j in range(10)), query="?wait=durable")
            assert status == 200, answer
        # Acknowledged, and only in the WAL's groups on S3: nothing is in parts yet.
        groups = [k for k in keys(client, prefix) if k.startswith(".wal/") and k.endswith(".frames")]
        assert len(groups) >= 1 and log_versions(client, prefix, "events") == []
        first_segments = {k.split("/")[1] for k in groups}
        assert ".wal/lease" in keys(client, prefix)
        # A second server on the same data directory is refused while this one holds the lease.
        monkeypatch.setenv("STRATA_CACHE_DIR", str(tmp_path / "second"))
        with pytest.raises(AssertionError, match="another strata serve runs on it"):
            Server(remote.data_dir).start(timeout=30)
    finally:
        server.kill()
    # Another machine: an empty cache. Everything acknowledged is there.
    monkeypatch.setenv("STRATA_CACHE_DIR", str(tmp_path / "machine-2"))
    time.sleep(5)  # the killed server's lease expires
    config = "[merge]\ninterval_secs = 0.5\nidle_secs = 0.5\n"
    server = Server(remote.data_dir, config=config, config_dir=tmp_path).start()
    try:
        assert server.rows("SELECT count(*) AS n, count(DISTINCT data.id) AS ids FROM events") == \
            [{"n": 200, "ids": 200}]
        # Replayed into parts and committed to the log; the WAL's groups go once applied.
        assert log_versions(client, prefix, "events")
        # SQL changes over the PostgreSQL protocol are committed to the log.
        before = len(log_versions(client, prefix, "events"))
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            conn.execute("""INSERT INTO events VALUES ('{"id": 1000, "kind": "sql"}')""")
            assert conn.execute("SELECT count(*) FROM events").fetchone() == (201,)
        assert len(log_versions(client, prefix, "events")) > before
        # Another writer (the CLI) commits while the server runs: the server sees it.
        extra = tmp_path / "extra.ndjson"
        extra.write_text("".join(json.dumps({"id": 2000 + i, "kind": "cli"}) + "\n" for i in range(5)))
        remote.ingest("events", extra)
        deadline = time.monotonic() + 30
        while server.rows("SELECT count(*) AS n FROM events") != [{"n": 206}]:
            assert time.monotonic() < deadline, server.log
            time.sleep(0.5)
        # More small parts: the server merges them, reading the parts it did not write whole.
        for i in range(6):
            status, answer = server.ingest("events", ndjson([{"id": 3000 + i, "kind": "late"}]))
            assert status == 200, answer
        deadline = time.monotonic() + 90
        while not any("merged" in line and "events" in line for line in server.log):
            assert time.monotonic() < deadline, server.log
            time.sleep(1)
        by_kind = "SELECT data.kind AS kind, count(*) AS n FROM events GROUP BY kind ORDER BY kind"
        deadline = time.monotonic() + 30
        while server.rows("SELECT count(*) AS n FROM events") != [{"n": 212}]:
            assert time.monotonic() < deadline, server.log
            time.sleep(0.5)
        assert server.stop() == 0, server.log
        # What the server committed is what a CLI on S3 reads.
        assert remote.query_rows(by_kind) == [
            {"kind": "cli", "n": 5}, {"kind": "k0", "n": 80}, {"kind": "k1", "n": 60},
            {"kind": "k2", "n": 60}, {"kind": "late", "n": 6}, {"kind": "sql", "n": 1}]
        # The first server's segment was deleted once replayed; only this one's stays (as
        # the segment being written does on a local disk).
        segments = {k.split("/")[1] for k in keys(client, prefix) if k.endswith(".frames")}
        assert segments and first_segments.isdisjoint(segments), (first_segments, segments)
    finally:
        if server.proc.poll() is None:
            server.kill()
    # A graceful stop gave the lease back: a new server starts at once.
    assert ".wal/lease" not in keys(client, prefix)
    server = Server(remote.data_dir).start()
    try:
        assert server.rows("SELECT count(*) AS n FROM events") == [{"n": 212}]
    finally:
        server.stop()


def test_server_on_s3_changes_keyed_documents_and_keeps_iceberg_in_step(s3, tmp_path):
    """Keyed upserts, updates and deletes through the server on S3 reach the table's log and its
    Iceberg publication; a transaction over two tables is refused there (each table's log
    commits alone), one over one table commits."""
    import psycopg
    from server import Server, ndjson

    remote, client, prefix = s3
    with Server(remote.data_dir) as server:
        status, answer = server.ingest("users", ndjson([{"id": "1", "name": "a"}, {"id": "2", "name": "b"}]),
                                       query="?key=id")
        assert status == 200, answer
        status, answer = server.ingest("other", ndjson([{"x": 1}]))
        assert status == 200, answer
        for sql in ["ALTER TABLE users SET (iceberg = true)",
                    """UPDATE users SET data = data || '{"name": "z"}' WHERE data.id = '1'""",
                    "DELETE FROM users WHERE data.id = '2'",
                    """INSERT INTO users VALUES ('{"id": "5", "name": "e"}')
                       ON CONFLICT (id) DO UPDATE SET data = EXCLUDED.data"""]:
            status, _, answer = server.query(sql)
            assert status == 200, (sql, answer)
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            with pytest.raises(psycopg.Error, match="several tables cannot commit on object storage"):
                with conn.transaction():
                    conn.execute("""INSERT INTO users VALUES ('{"id": "3"}')""")
                    conn.execute("""INSERT INTO other VALUES ('{"x": 2}')""")
        # A new connection: after a failed COMMIT, pgwire reports the old one as still in a
        # failed block (PostgreSQL reports it idle).
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            with conn.transaction():
                conn.execute("""INSERT INTO users VALUES ('{"id": "4"}')""")
        expected = [{"id": "1", "name": "z"}, {"id": "4"}, {"id": "5", "name": "e"}]
        assert [r["data"] for r in server.rows("SELECT data FROM users ORDER BY data.id")] == expected
        assert server.rows("SELECT count(*) AS n FROM other") == [{"n": 1}]
        newest = int(log_versions(client, prefix, "users")[-1].split("/")[-1].split(".")[0])
    # The log holds the server's changes; the publication describes the newest version.
    assert sorted(json.loads(line)["id"] for line in remote.run("export", "users").stdout.splitlines()) == \
        ["1", "4", "5"]
    hint = client.get_object(Bucket=BUCKET, Key=f"{prefix}/users/metadata/version-hint.text")
    assert int(hint["Body"].read()) == newest
    assert "ok (" in remote.run("check", "users").stdout.decode()


SPARK_OVER_S3 = """
import json, sys
from pyspark.sql import SparkSession
args = json.loads(sys.argv[1])
catalog = "spark.sql.catalog.s3"
spark = (SparkSession.builder.master("local[2]")
         .config("spark.jars", ",".join(args["jars"]))
         .config("spark.sql.session.timeZone", "UTC")
         .config("spark.ui.enabled", "false")
         .config("spark.driver.memory", "1g")
         .config("spark.sql.extensions",
                 "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
         .config(catalog, "org.apache.iceberg.spark.SparkCatalog")
         .config(catalog + ".catalog-impl", "org.apache.iceberg.jdbc.JdbcCatalog")
         .config(catalog + ".uri", "jdbc:h2:mem:iceberg;DB_CLOSE_DELAY=-1")
         .config(catalog + ".jdbc.user", "sa")
         .config(catalog + ".jdbc.password", "")
         .config(catalog + ".warehouse", args["warehouse"])
         .config(catalog + ".io-impl", "org.apache.iceberg.aws.s3.S3FileIO")
         .config(catalog + ".s3.endpoint", args["endpoint"])
         .config(catalog + ".s3.path-style-access", "true")
         .config(catalog + ".s3.access-key-id", "test")
         .config(catalog + ".s3.secret-access-key", "test")
         .config(catalog + ".client.region", "us-east-1")
         .getOrCreate())
spark.sql("CREATE NAMESPACE IF NOT EXISTS s3.strata")
spark.sql(f"CALL s3.system.register_table(table => 'strata.bluesky', metadata_file => '{args['metadata']}')")
spark.table("s3.strata.bluesky").createOrReplaceTempView("bluesky")
print(json.dumps([[list(row) for row in spark.sql(sql).collect()] for sql in args["queries"]]))
spark.stop()
"""


def test_spark_and_duckdb_read_the_iceberg_table_on_s3(s3, s3_server, tmp_path, bluesky_100k):
    """Spark in local mode (Iceberg's Spark runtime and AWS bundle from Maven Central, Iceberg's
    S3FileIO against the S3 server) registers the table Strata published on S3 in a JDBC catalog
    and gets Strata's answers to JSONBench Q1 and Q2; DuckDB's iceberg_scan (with httpfs) reads
    it from S3 with Strata's answer to Q1."""
    import shutil
    import sys

    from conftest import maven_jar

    if shutil.which("java") is None:
        pytest.skip("Java is not installed (apt-get install openjdk-17-jdk-headless)")
    remote, client, prefix = s3
    endpoint, _ = s3_server
    remote.ingest("bluesky", bluesky_100k, sort_key="kind,did", extra=["--iceberg"])
    hint = int(client.get_object(Bucket=BUCKET, Key=f"{prefix}/bluesky/metadata/version-hint.text")["Body"].read())
    spark_queries = [s.strip() for s in (REPO / "bench" / "queries" / "jsonbench" / "spark_iceberg.sql")
                     .read_text().split(";") if s.strip()][:2]
    args = {
        "jars": [str(maven_jar("org.apache.iceberg", "iceberg-spark-runtime-3.5_2.12", "1.12.0")),
                 str(maven_jar("org.apache.iceberg", "iceberg-aws-bundle", "1.12.0")),
                 # The catalog Spark registers the table in: H2 in memory, for this process only.
                 str(maven_jar("com.h2database", "h2", "2.5.252"))],
        "warehouse": f"s3://{BUCKET}/{prefix}",
        "endpoint": endpoint,
        "metadata": f"s3://{BUCKET}/{prefix}/bluesky/metadata/v{hint}.metadata.json",
        "queries": spark_queries,
    }
    out = subprocess.run([sys.executable, "-c", SPARK_OVER_S3, json.dumps(args)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, "\n".join(l for l in out.stderr.splitlines() if not l.startswith("\tat "))[-6000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    for number, (sql, spark_rows) in enumerate(zip(QUERIES[:2], got), start=1):
        expected = [list(row.values()) for row in rows(remote, sql)]
        assert spark_rows == expected, f"Q{number}"
    # DuckDB: iceberg_scan follows the version hint on S3.
    from test_iceberg import duckdb_over_iceberg

    host = endpoint.removeprefix("http://")
    [events] = duckdb_over_iceberg(
        f"""SELECT "commit.collection" AS event, count(*) AS count
            FROM iceberg_scan('s3://{BUCKET}/{prefix}/bluesky') GROUP BY event ORDER BY count DESC, event""",
        setup=[f"""CREATE SECRET (TYPE s3, KEY_ID 'test', SECRET 'test', REGION 'us-east-1',
                                  ENDPOINT '{host}', URL_STYLE 'path', USE_SSL false)"""])
    assert [list(row) for row in events] == [list(row.values()) for row in rows(remote, QUERIES[0])]
