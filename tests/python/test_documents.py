"""Documents that change (issue 14, ADR 0016), end to end through the real binary: keyed tables
over HTTP, INSERT/UPDATE/DELETE over the PostgreSQL protocol (psycopg, psql) with PostgreSQL's
command tags and SQLSTATEs, and — statement by statement — the same answers and the same
documents as a real PostgreSQL 15 holding the same documents in a jsonb table with a unique
index on the key."""
import json
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import psycopg
import pytest

from server import Server, ndjson


@pytest.fixture
def server(tmp_path):
    with Server(tmp_path / "db") as s:
        yield s


def test_keyed_ingest_over_http(server):
    docs = [{"id": i, "v": 1} for i in range(10)]
    status, answer = server.ingest("t", ndjson(docs), query="?key=id:integer")
    assert status == 200 and answer["accepted"] == 10, answer
    tables = json.loads(server.request("GET", "/v1/tables")[2])["tables"]
    assert tables[0]["key"] == "id (integer)", tables
    # Newer versions replace older ones; documents without a key are rejected by line.
    body = ndjson([{"id": 3, "v": 2}, {"v": 2}, {"id": 4, "v": 2}])
    status, answer = server.ingest("t", body)
    assert status == 200, answer
    assert (answer["accepted"], answer["rejected"], answer["replaced"]) == (2, 1, 2), answer
    assert "the key path id is missing" in answer["rejects"][0]["reason"]
    rows = server.rows("SELECT data.id AS id, data.v AS v FROM t WHERE data.v = 2 ORDER BY id")
    assert rows == [{"id": 3, "v": 2}, {"id": 4, "v": 2}]
    assert server.rows("SELECT count(*) AS n FROM t") == [{"n": 10}]
    # on_conflict=error: a conflict is 409 with PostgreSQL's unique_violation, nothing loaded.
    status, answer = server.ingest("t", ndjson([{"id": 11}, {"id": 5}]), query="?on_conflict=error")
    assert status == 409 and answer["code"] == "23505", answer
    status, answer = server.ingest("t", ndjson([{"id": 5, "v": 0}]), query="?on_conflict=ignore")
    assert status == 200 and (answer["accepted"], answer["ignored"]) == (0, 1), answer
    assert server.rows("SELECT count(*) AS n FROM t") == [{"n": 10}]
    # A table's key is fixed when it is created.
    status, answer = server.ingest("t", ndjson([{"id": "x"}]), query="?key=id")
    assert status == 400 and "fixed" in answer["error"], answer
    # SQL that changes documents works over HTTP too; its answer is the count.
    assert server.rows("DELETE FROM t WHERE data.id IN (8, 9)") == [{"count": 2}]
    assert server.rows("""INSERT INTO t VALUES ('{"id": 8, "v": 3}')""") == [{"count": 1}]
    status, _, body = server.query("""INSERT INTO t VALUES ('{"id": 8}')""")
    assert status == 409 and json.loads(body)["code"] == "23505", body
    assert server.rows("SELECT count(*) AS n FROM t") == [{"n": 9}]


# --- the same statements on Strata and on PostgreSQL ---------------------------------------

def postgres_bindir():
    dirs = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: p.parent.name, reverse=True)
    return next((d for d in dirs if (d / "initdb").exists()), None)


@pytest.fixture
def postgres(tmp_path):
    """A private PostgreSQL cluster on a loopback port (as the benchmark suite starts one)."""
    bindir = postgres_bindir()
    if bindir is None:
        pytest.skip("no PostgreSQL server (tests/install-clients.sh installs Debian's postgresql)")
    as_root = os.geteuid() == 0
    base = Path(tempfile.mkdtemp(prefix="strata-test-postgres-", dir="/var/tmp"))
    if as_root:
        user = pwd.getpwnam("postgres")
        os.chown(base, user.pw_uid, user.pw_gid)

    def run(*cmd):
        cmd = [str(c) for c in cmd]
        if as_root:
            cmd = ["runuser", "-u", "postgres", "--"] + cmd
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run(bindir / "initdb", "-D", base / "data", "-E", "UTF8", "--locale=C", "-A", "trust", "-U", "postgres")
    run(bindir / "pg_ctl", "-D", base / "data", "-l", base / "log", "-w", "-t", "60", "-o",
        f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={base}", "start")
    try:
        yield f"host=127.0.0.1 port={port} user=postgres dbname=postgres"
    finally:
        run(bindir / "pg_ctl", "-D", base / "data", "-m", "immediate", "-w", "stop")
        shutil.rmtree(base, ignore_errors=True)


START = [{"id": "a", "n": 1, "tags": ["x"]}, {"id": "b", "n": 2}, {"id": "c", "n": 3, "o": {"p": True}}]

# Each written once, run on both systems: the tag, the error's SQLSTATE and the documents
# afterwards must be the same.
STATEMENTS = [
    """INSERT INTO t VALUES ('{"id": "d", "n": 4}')""",
    """INSERT INTO t VALUES ('{"id": "a", "n": 9}')""",
    """INSERT INTO t VALUES ('{"id": "a", "n": 9}'), ('{"id": "e", "n": 5}') ON CONFLICT DO NOTHING""",
    """INSERT INTO t VALUES ('{"id": "b", "n": 20, "new": "yes"}'), ('{"id": "f", "n": 6}')
       ON CONFLICT ((data->>'id')) DO UPDATE SET data = EXCLUDED.data""",
    # A counter kept by the upsert (the booking benchmark's audit row), with the target by its
    # name and by an alias, a condition that holds for some rows only, a key given twice.
    """INSERT INTO t VALUES ('{"id": "a", "n": 10}'), ('{"id": "g", "n": 1}')
       ON CONFLICT ((data->>'id')) DO UPDATE
       SET data = jsonb_set(t.data, '{n}', to_jsonb((t.data->>'n')::int + (EXCLUDED.data->>'n')::int))""",
    """INSERT INTO t AS old VALUES ('{"id": "g", "n": 1}'), ('{"id": "c", "n": 1}')
       ON CONFLICT ((data->>'id')) DO UPDATE SET data = old.data || '{"bumped": true}'
       WHERE (old.data->>'n')::int < 3""",
    """INSERT INTO t VALUES ('{"id": "g", "n": 1}'), ('{"id": "g", "n": 2}')
       ON CONFLICT ((data->>'id')) DO UPDATE SET data = EXCLUDED.data || '{"twice": true}'""",
    """INSERT INTO t VALUES ('{"n": 7}')""",
    """INSERT INTO t VALUES ('not json')""",
    """UPDATE t SET data = data || '{"seen": true, "n": 0}' WHERE (data->>'n')::int >= 5""",
    """UPDATE t SET data = jsonb_set(data, '{o,p}', '"changed"') WHERE data->>'id' = 'c'""",
    """UPDATE t SET data = jsonb_set(data, '{tags,-1}', '"y"') WHERE data->>'id' = 'a'""",
    """UPDATE t SET data = jsonb_set(data, '{missing,deeper}', '1') WHERE data->>'id' = 'd'""",
    """UPDATE t SET data = data || '{"list": [1, {"k": "v"}]}' WHERE data->>'id' IN ('a', 'zz')""",
    """DELETE FROM t WHERE data->>'id' IN ('b', 'zz')""",
    """DELETE FROM t WHERE (data->>'n')::int = 0""",
    """UPDATE t SET data = data WHERE data->>'id' = 'nobody'""",
    # RETURNING: the new documents of an INSERT or UPDATE, the deleted ones of a DELETE.
    """INSERT INTO t VALUES ('{"id": "h", "n": 8}'), ('{"id": "i", "n": 9}') RETURNING data->>'id' AS id, data->>'n'""",
    """INSERT INTO t VALUES ('{"id": "h", "n": 0}'), ('{"id": "j", "n": 10}') ON CONFLICT DO NOTHING RETURNING data->>'id'""",
    """UPDATE t SET data = data || '{"r": 1}' WHERE data->>'id' IN ('h', 'i') RETURNING data->>'id', data->>'r'""",
    """UPDATE t AS x SET data = jsonb_set(x.data, '{n}', '0') WHERE x.data->>'id' = 'j' RETURNING x.data->>'n'""",
    """DELETE FROM t WHERE data->>'id' IN ('h', 'zz') RETURNING data->>'id', data->>'n'""",
    """DELETE FROM t WHERE data->>'id' = 'nobody' RETURNING data->>'id'""",
    # An UPDATE that changes keys moves documents; keys stay unique (23505 otherwise).
    """INSERT INTO t VALUES ('{"id": "m1", "n": 1}'), ('{"id": "m2", "n": 2}')""",
    """UPDATE t SET data = jsonb_set(data, '{id}', '"m3"') WHERE data->>'id' = 'm1'""",
    """UPDATE t SET data = jsonb_set(data, '{id}', '"m2"') WHERE data->>'id' = 'm3'""",
    """UPDATE t SET data = jsonb_set(data, '{id}', to_jsonb((data->>'id') || 'x'))
       WHERE data->>'id' IN ('m2', 'm3') RETURNING data->>'id'""",
    """UPDATE t SET data = jsonb_set(data, '{id}', '"same"') WHERE data->>'id' IN ('m2x', 'm3x')""",
]


def outcome(conn, sql):
    try:
        cur = conn.execute(sql)
        rows = sorted(cur.fetchall()) if cur.description else None
        return ("ok", cur.statusmessage, cur.rowcount, rows)
    except psycopg.Error as e:
        return ("error", e.sqlstate)


def documents(conn):
    rows = conn.execute("SELECT data FROM t").fetchall()
    docs = [r[0] if not isinstance(r[0], str) else json.loads(r[0]) for r in rows]
    return sorted(docs, key=lambda d: json.dumps(d, sort_keys=True))


def test_statements_answer_as_postgresql_does(tmp_path, postgres):
    with Server(tmp_path / "db") as server:
        status, answer = server.ingest("t", ndjson(START), query="?key=id")
        assert status == 200, answer
        with psycopg.connect(postgres, autocommit=True) as pg, \
                psycopg.connect(server.dsn(), autocommit=True) as strata:
            # The key must be present: a generated NOT NULL column says so as Strata does (23502).
            pg.execute("CREATE TABLE t (data jsonb NOT NULL, "
                       "id text GENERATED ALWAYS AS (data->>'id') STORED NOT NULL)")
            pg.execute("CREATE UNIQUE INDEX ON t ((data->>'id'))")
            with pg.cursor().copy("COPY t (data) FROM STDIN") as copy:
                for doc in START:
                    copy.write_row([json.dumps(doc)])
            assert documents(strata) == documents(pg)
            for sql in STATEMENTS:
                expected = outcome(pg, sql)
                assert outcome(strata, sql) == expected, sql
                assert documents(strata) == documents(pg), sql


def test_command_tags_over_the_simple_protocol(server):
    if shutil.which("psql") is None:
        pytest.skip("psql is not installed")
    server.ingest("t", ndjson(START), query="?key=id")
    env = dict(os.environ, PGCONNECT_TIMEOUT="10")
    args = ["psql", "-X", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", str(server.pg_port),
            "-U", "strata", "-d", "strata"]
    statements = ["""INSERT INTO t VALUES ('{"id": "z"}'), ('{"id": "y"}')""",
                  """UPDATE t SET data = data || '{"u": 1}' WHERE data->>'id' IN ('y', 'z')""",
                  "DELETE FROM t WHERE data->>'id' = 'y'"]
    out = subprocess.run(args + [a for s in statements for a in ("-c", s)], capture_output=True, text=True,
                         env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["INSERT 0 2", "UPDATE 2", "DELETE 1"], out.stdout
    out = subprocess.run(args + ["-c", """INSERT INTO t VALUES ('{"id": "a"}')"""], capture_output=True,
                         text=True, env=env, timeout=60)
    assert out.returncode != 0 and "already in the table" in out.stderr, out.stderr


def test_changing_statements_with_parameters_over_psycopg(server):
    server.ingest("t", ndjson([{"id": 1, "n": 1}]), query="?key=id:integer")
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        cur = conn.execute("INSERT INTO t VALUES (%s), (%s)",
                           (json.dumps({"id": 2, "n": "it's"}), json.dumps({"id": 3, "n": 3})))
        assert (cur.statusmessage, cur.rowcount) == ("INSERT 0 2", 2)
        cur = conn.execute("INSERT INTO t VALUES (%s) ON CONFLICT ((data->>'id')) DO UPDATE SET data = EXCLUDED.data",
                           (psycopg.types.json.Jsonb({"id": 1, "n": 10}),))
        assert cur.statusmessage == "INSERT 0 1"
        cur = conn.execute("UPDATE t SET data = data || %s WHERE data.id = %s", ('{"seen": true}', 3))
        assert (cur.statusmessage, cur.rowcount) == ("UPDATE 1", 1)
        cur = conn.execute("DELETE FROM t WHERE data.id IN (%s, %s)", (2, 99))
        assert (cur.statusmessage, cur.rowcount) == ("DELETE 1", 1)
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute("INSERT INTO t VALUES (%s)", (json.dumps({"id": 1}),))
        with pytest.raises(psycopg.errors.InvalidTextRepresentation):
            conn.execute("INSERT INTO t VALUES (%s)", ("{not json",))
        # A value is bound as a literal, never as SQL.
        cur = conn.execute("DELETE FROM t WHERE data->>'id' = %s", ("1' OR '1'='1",))
        assert cur.rowcount == 0
        rows = conn.execute("SELECT data FROM t WHERE data.id = %s", (1,)).fetchall()
        assert rows == [({"id": 1, "n": 10},)]
        assert [d["id"] for d in documents(conn)] == [1, 3]


def test_point_reads_by_key_over_prepared_statements(server):
    """`SELECT data FROM t WHERE data->>'id' = $1` is answered without planning (ADR 0017): the
    same documents as the planned statement, typed `json`, through text and binary parameters,
    after replacements and deletions, and never by a value spliced into SQL."""
    server.ingest("s", ndjson([{"id": f"u{i}", "n": i} for i in range(100)]), query="?key=id")
    server.ingest("i", ndjson([{"id": i, "n": i} for i in range(100)]), query="?key=id:integer")
    by_text = "SELECT data FROM s WHERE data->>'id' = %s"
    by_int = "SELECT data FROM i WHERE data.id = %s"
    int_as_text = "SELECT * FROM i WHERE (data->>'id') = %s"
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        for binary in (False, True):
            for _ in range(3):
                assert conn.execute(by_text, ("u7",), prepare=True, binary=binary).fetchall() == [({"id": "u7", "n": 7},)]
                assert conn.execute(by_int, (42,), prepare=True, binary=binary).fetchall() == [({"id": 42, "n": 42},)]
                assert conn.execute(int_as_text, ("42",), prepare=True, binary=binary).fetchall() == [({"id": 42, "n": 42},)]
                assert conn.execute(int_as_text, ("042",), prepare=True, binary=binary).fetchall() == []
                assert conn.execute(by_text, ("nope",), prepare=True, binary=binary).fetchall() == []
                assert conn.execute(by_text, (None,), prepare=True, binary=binary).fetchall() == []
                assert conn.execute(by_text, ("u1' OR '1'='1",), prepare=True, binary=binary).fetchall() == []
        conn.execute("UPDATE s SET data = data || %s WHERE data.id = %s", ('{"seen": true}', "u7"))
        assert conn.execute(by_text, ("u7",), prepare=True).fetchall() == [({"id": "u7", "n": 7, "seen": True},)]
        conn.execute("DELETE FROM i WHERE data.id = %s", (42,))
        assert conn.execute(by_int, (42,), prepare=True).fetchall() == []
        # The planned statement agrees (a second condition keeps it from the direct path).
        planned = "SELECT data FROM s WHERE data->>'id' = %s AND true"
        assert conn.execute(planned, ("u7",)).fetchall() == conn.execute(by_text, ("u7",), prepare=True).fetchall()
    # In a transaction block: the block's snapshot and its own changes.
    with psycopg.connect(server.dsn()) as conn:
        assert conn.execute(by_text, ("u8",), prepare=True).fetchall() == [({"id": "u8", "n": 8},)]
        conn.execute("UPDATE s SET data = data || %s WHERE data.id = %s", ('{"in_block": 1}', "u8"))
        conn.execute("INSERT INTO s VALUES (%s)", (json.dumps({"id": "new", "n": -1}),))
        assert conn.execute(by_text, ("u8",), prepare=True).fetchall() == [({"id": "u8", "n": 8, "in_block": 1},)]
        assert conn.execute(by_text, ("new",), prepare=True).fetchall() == [({"id": "new", "n": -1},)]
        with psycopg.connect(server.dsn(), autocommit=True) as other:
            assert other.execute(by_text, ("new",), prepare=True).fetchall() == []
        conn.rollback()
        assert conn.execute(by_text, ("u8",), prepare=True).fetchall() == [({"id": "u8", "n": 8},)]


def test_secondary_indexes_over_psycopg(tmp_path):
    """CREATE INDEX / DROP INDEX over the PostgreSQL protocol (ADR 0024): PostgreSQL's command
    tags, lookups by the indexed path that answer as a scan does — for parts written before the
    index, for documents inserted after it through the server's log, after a crash and replay —
    and an EXPLAIN that shows the parts and rows the index skipped."""
    docs = [{"id": i, "email": f"user{i % 500}@example.com", "n": i} for i in range(3000)]
    by_email = "SELECT data.id FROM t WHERE data->>'email' = %s ORDER BY 1"
    scanned = "SELECT data.id FROM t WHERE data->>'email' || '' = %s ORDER BY 1"
    with Server(tmp_path / "db") as server:
        status, answer = server.ingest("t", ndjson(docs), query="?key=id:integer")
        assert status == 200, answer
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            def insert(ids):
                for i in ids:
                    conn.execute("INSERT INTO t VALUES (%s)", (json.dumps({"id": i, "email": "user7@example.com"}),))

            # Documents logged before the index (parts held in memory until a checkpoint) and after.
            insert(range(3000, 3020))
            cur = conn.execute("CREATE INDEX t_email ON t ((data->>'email'))")
            assert cur.statusmessage == "CREATE INDEX"
            insert(range(3020, 3040))
            conn.execute("UPDATE t SET data = data || %s WHERE data.id = %s", ('{"email": "moved@example.com"}', 7))
            for email in ("user7@example.com", "moved@example.com", "nobody@example.com"):
                assert conn.execute(by_email, (email,)).fetchall() == conn.execute(scanned, (email,)).fetchall()
            ids = [r[0] for r in conn.execute(by_email, ("user7@example.com",)).fetchall()]
            assert ids == [i for i in range(3040) if i != 7 and (i >= 3000 or i % 500 == 7)]
            plan = "\n".join(r[1] for r in conn.execute(
                "EXPLAIN ANALYZE SELECT data FROM t WHERE data->>'email' = 'user8@example.com'").fetchall())
            assert "secondary index: parts pruned=" in plan, plan
            with pytest.raises(psycopg.errors.ActiveSqlTransaction):
                with conn.transaction():
                    conn.execute("CREATE INDEX t_n ON t (data.n)")
            with pytest.raises(psycopg.Error, match="exists on table t"):
                conn.execute("CREATE INDEX t_email ON t (data.n)")
        server.kill()
    with Server(tmp_path / "db") as server:
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            ids = [r[0] for r in conn.execute(by_email, ("user7@example.com",)).fetchall()]
            assert len(ids) == 5 + 40, ids
            assert conn.execute("DROP INDEX t_email").statusmessage == "DROP INDEX"
            assert [r[0] for r in conn.execute(by_email, ("user7@example.com",)).fetchall()] == ids
