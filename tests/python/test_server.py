"""`strata serve` end to end (issue 13): the real binary on loopback, driven over HTTP (urllib)
and the PostgreSQL protocol (psycopg 3 and psql), as applications and tools use it."""
import gzip
import io
import json
import os
import re
import shutil
import select
import signal
import socket
import struct
import subprocess
import time

import psycopg
import pytest
import zstandard

from conftest import maven_jar, strata_bin
from server import Server, ndjson


EVENTS = [{"id": i, "kind": "commit" if i % 3 else "identity", "author": {"name": f"u{i % 7}"},
           "score": i * 1.5} for i in range(1, 301)]


@pytest.fixture
def server(tmp_path):
    with Server(tmp_path / "db") as s:
        yield s


def test_ingest_then_query_in_every_format(server):
    body = ndjson(EVENTS[:200]) + b"{not json\n" + ndjson(EVENTS[200:])
    status, answer = server.ingest("events", body)
    assert status == 200, answer
    assert answer["accepted"] == 300 and answer["rejected"] == 1
    assert answer["rejects"][0]["line"] == 201 and answer["rejects"][0]["reason"]
    assert answer["created"] is True

    rows = server.rows("SELECT data.kind AS kind, count(*) AS n FROM events GROUP BY kind ORDER BY kind")
    assert rows == [{"kind": "commit", "n": 200}, {"kind": "identity", "n": 100}]

    status, headers, body = server.query("SELECT data FROM events WHERE data.id = 7", "json")
    assert status == 200 and headers["content-type"] == "application/json"
    assert json.loads(body) == [{"data": EVENTS[6]}]

    status, headers, body = server.query("SELECT data.id AS id FROM events ORDER BY id LIMIT 2", "csv")
    assert status == 200 and body.decode().splitlines() == ["id", "1", "2"]

    status, headers, body = server.query("SELECT data.id AS id FROM events ORDER BY id", "parquet")
    assert status == 200 and headers["content-type"] == "application/vnd.apache.parquet"
    duckdb = pytest.importorskip("duckdb")
    path = server.data_dir.parent / "out.parquet"
    path.write_bytes(body)
    assert duckdb.connect().execute(f"SELECT count(*), sum(id) FROM '{path}'").fetchone() == (300, 45150)

    status, headers, body = server.query("SELECT data.id AS id FROM events ORDER BY id", "arrow")
    assert status == 200 and body[:4] == b"\xff\xff\xff\xff"  # an Arrow IPC stream's continuation marker

    status, _, body = server.request("GET", "/v1/query?format=ndjson&sql=SELECT%20count(*)%20AS%20n%20FROM%20events")
    assert status == 200 and json.loads(body) == {"n": 300}


def test_compressed_bodies_and_a_truncated_gzip(server):
    status, answer = server.ingest("t", gzip.compress(ndjson(EVENTS[:100])), {"Content-Encoding": "gzip"})
    assert status == 200 and answer["accepted"] == 100, answer
    status, answer = server.ingest("t", zstandard.ZstdCompressor().compress(ndjson(EVENTS[100:200])),
                                   {"Content-Encoding": "zstd"})
    assert status == 200 and answer["accepted"] == 100, answer
    # Cut off: what decodes is loaded, the rest is one reject naming the damage (as `strata ingest`).
    whole = gzip.compress(ndjson(EVENTS[200:]) * 20)
    status, answer = server.ingest("t", whole[: len(whole) // 2], {"Content-Encoding": "gzip"})
    assert status == 200, answer
    assert answer["accepted"] > 0 and answer["rejected"] == 1
    assert "damaged or ends early" in answer["rejects"][0]["reason"]
    status, answer = server.ingest("t", b"x", {"Content-Encoding": "br"})
    assert status == 415 and answer["code"] == "0A000"


def test_errors_are_json_with_sqlstate_and_the_server_stays_up(server):
    server.ingest("t", ndjson(EVENTS[:10]))
    status, _, body = server.query("SELEC 1")
    assert status == 400 and json.loads(body)["code"] == "42601"
    status, _, body = server.query("SELECT * FROM no_such_table")
    answer = json.loads(body)
    assert status == 404 and answer["code"] == "42P01", answer
    status, _, body = server.query("SELECT 1; SELECT 2")
    assert status == 400 and "one statement" in json.loads(body)["error"]
    status, _, body = server.query("SELECT 1", "xml")
    assert status == 400 and "unknown format" in json.loads(body)["error"]
    status, answer = server.ingest("bad%20name", b"{}\n")
    assert status == 400 and answer["code"] == "42602", answer
    status, answer = server.ingest("t", b"not json\nalso not\n")
    assert status == 400 and answer["accepted"] == 0 and answer["rejected"] == 2
    assert [r["line"] for r in answer["rejects"]] == [1, 2]

    # Garbage on both ports: the connection fails, the server does not.
    for port in (server.http_port, server.pg_port):
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(os.urandom(4096) + b"\r\n\r\n")
            sock.settimeout(5)
            try:
                sock.recv(1024)
            except (socket.timeout, ConnectionResetError):
                pass
    status, _, body = server.request("GET", "/health")
    assert status == 200 and json.loads(body) == {"status": "ok"}
    assert server.rows("SELECT count(*) AS n FROM t") == [{"n": 10}]


def test_tables_and_metrics(server):
    server.ingest("a", ndjson(EVENTS[:5]), query="?sort_key=kind,id")
    server.ingest("b", ndjson(EVENTS[:7]))
    server.rows("SELECT count(*) FROM a")
    status, _, body = server.request("GET", "/v1/tables")
    tables = {t["name"]: t for t in json.loads(body)["tables"]}
    assert status == 200 and tables["a"]["documents"] == 5 and tables["b"]["documents"] == 7
    assert tables["a"]["sort_key"] == ["kind", "id"]
    status, headers, body = server.request("GET", "/metrics")
    text = body.decode()
    assert status == 200 and headers["content-type"].startswith("text/plain")
    assert "strata_ingested_documents_total 12" in text
    assert 'strata_table_documents{table="a"} 5' in text
    assert "strata_query_duration_seconds_count 1" in text


def test_a_prepared_statement_sees_what_was_committed_before_each_execution(server):
    """A prepared statement is planned once and executed many times (pgbench -M prepared,
    psycopg after a few executions): each execution reads the table as committed then."""
    server.ingest("growing", ndjson([{"i": i} for i in range(10)]))
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        cur = conn.cursor()
        for round_number in range(3):
            cur.execute("SELECT count(*) FROM growing WHERE data.i >= %s", (0,), prepare=True)
            assert cur.fetchone()[0] == 10 * (round_number + 1)
            status, _ = server.ingest("growing", ndjson([{"i": 10 * (round_number + 1) + j} for j in range(10)]))
            assert status == 200


class RawProtocol:
    """The PostgreSQL v3 protocol at the level of messages, over one socket (what a driver does
    below its API), to see which answers arrive when."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        params = b"user\0strata\0database\0strata\0\0"
        self.sock.sendall(struct.pack("!ii", 8 + len(params), 196608) + params)
        self.buffer = b""
        while self.read_message()[0] != b"Z":
            pass

    @staticmethod
    def message(kind, body=b""):
        return kind + struct.pack("!i", 4 + len(body)) + body

    def extended(self, sql):
        """Parse, Bind, Describe (portal) and Execute of one unnamed statement, without Sync."""
        return (self.message(b"P", b"\0" + sql.encode() + b"\0" + struct.pack("!h", 0))
                + self.message(b"B", b"\0\0" + struct.pack("!hhh", 0, 0, 0))
                + self.message(b"D", b"P\0")
                + self.message(b"E", b"\0" + struct.pack("!i", 0)))

    def pending(self, wait):
        """Whether any byte arrives within `wait` seconds."""
        if self.buffer:
            return True
        readable, _, _ = select.select([self.sock], [], [], wait)
        return bool(readable)

    def read_message(self):
        while len(self.buffer) < 5 or len(self.buffer) < 1 + struct.unpack("!i", self.buffer[1:5])[0]:
            chunk = self.sock.recv(65536)
            assert chunk, "the server closed the connection"
            self.buffer += chunk
        length = struct.unpack("!i", self.buffer[1:5])[0]
        kind, body, self.buffer = self.buffer[:1], self.buffer[5:1 + length], self.buffer[1 + length:]
        return kind, body

    def read_until(self, last):
        kinds = []
        while not kinds or kinds[-1] != last:
            kinds.append(self.read_message()[0].decode())
        return kinds


def test_extended_protocol_answers_wait_for_sync_or_flush(server):
    """As the protocol allows, the answers to Parse/Bind/Describe/Execute are held until the
    client sends Sync or Flush, and then leave together (one write instead of one per message; a
    driver sends those messages together and reads nothing before ReadyForQuery); Flush hands
    them over without ending the statement."""
    server.ingest("held", ndjson([{"i": 1}, {"i": 2}]))
    client = RawProtocol(server.pg_port)
    client.sock.sendall(client.extended("SELECT data.i FROM held ORDER BY 1"))
    assert not client.pending(0.5), "an answer left before Sync or Flush"
    client.sock.sendall(client.message(b"H"))
    assert client.read_until("C") == ["1", "2", "T", "D", "D", "C"]
    assert not client.pending(0.2), "ReadyForQuery before Sync"
    client.sock.sendall(client.message(b"S"))
    assert client.read_until("Z") == ["Z"]
    # A change, then Sync at once: every answer, then ReadyForQuery.
    client.sock.sendall(client.extended("INSERT INTO held VALUES ('{\"i\": 3}')") + client.message(b"S"))
    assert client.read_until("Z") == ["1", "2", "n", "C", "Z"]
    # An error ends the statement's messages up to Sync, which answers.
    client.sock.sendall(client.extended("SELECT * FROM no_such_table") + client.message(b"S"))
    assert client.read_until("Z") == ["E", "Z"]
    client.sock.close()
    assert server.rows("SELECT count(*) AS n FROM held") == [{"n": 3}]


def test_psycopg_with_parameters(server):
    server.ingest("events", ndjson(EVENTS))
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT data.id AS id, data.author.name AS name FROM events WHERE data.kind = %s AND data.id < %s ORDER BY id",
            ("identity", 10)).fetchall()
        assert rows == [(3, "u3"), (6, "u6"), (9, "u2")]
        assert conn.execute("SELECT count(*) FROM events").fetchone() == (300,)
        # Whole documents come back typed json, so psycopg hands them over as Python objects.
        cur = conn.execute("SELECT data FROM events WHERE data.id = %s", (42,))
        assert cur.description[0].type_code == 114  # json
        assert cur.fetchone() == (EVENTS[41],)
        with pytest.raises(psycopg.errors.UndefinedTable):
            conn.execute("SELECT * FROM no_such_table")
        with pytest.raises(psycopg.errors.SyntaxError):
            conn.execute("SELEC 1")
        # The session survives an error.
        assert conn.execute("SELECT 1 + 1").fetchone() == (2,)
    # psycopg's default is a transaction: BEGIN ... COMMIT around the statement.
    with psycopg.connect(server.dsn()) as conn:
        assert conn.execute("SELECT count(*) FROM events WHERE data.score > %s", (300.0,)).fetchone() == (100,)


def psql(server, *commands, password=None, user="strata", options=()):
    env = dict(os.environ, PGPASSWORD=password or "", PGCONNECT_TIMEOUT="10")
    args = ["psql", "-X", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", str(server.pg_port),
            "-U", user, "-d", "strata", *options]
    for c in commands:
        args += ["-c", c]
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=60)


@pytest.mark.skipif(shutil.which("psql") is None, reason="psql is not installed (apt-get install postgresql-client)")
def test_psql_meta_commands(server):
    server.ingest("events", ndjson(EVENTS[:10]))
    out = psql(server, r"\dt", r"\d events", r"\l", "SELECT data.author.name AS name FROM events WHERE data.id = 4")
    assert out.returncode == 0, out.stderr
    lines = [" ".join(line.split()) for line in out.stdout.splitlines()]
    assert "public | events | table | postgres" in lines, out.stdout  # \dt
    assert 'Table "public.events"' in lines and "data | text | | |" in lines, out.stdout  # \d events
    assert any(line.startswith("strata | postgres | UTF-8") for line in lines), out.stdout  # \l
    assert "u4" in lines, out.stdout


@pytest.mark.skipif(shutil.which("psql") is None, reason="psql is not installed (apt-get install postgresql-client)")
def test_psql_prepared_statements_and_several_statements_in_one_string(server):
    """SQL-level PREPARE / EXECUTE / DEALLOCATE belong to their connection, as in PostgreSQL,
    and a query string of several statements answers each of them with its own rows."""
    server.ingest("events", ndjson(EVENTS[:10]))
    out = psql(server,
               "PREPARE by_id(bigint) AS SELECT data.author.name FROM events WHERE data.id = $1",
               "EXECUTE by_id(4)",
               "SELECT count(*) FROM events; SELECT 'second'; EXECUTE by_id(5)",
               "PREPARE add AS INSERT INTO events VALUES ($1::json); EXECUTE add('{\"id\": 11}'); "
               "EXECUTE add('{\"id\": 12}'); SELECT count(*) FROM events",
               "DEALLOCATE by_id",
               options=["-A", "-t"])
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["PREPARE", "u4", "10", "second", "u5", "PREPARE", "INSERT", "0", "1",
                                  "INSERT", "0", "1", "12", "DEALLOCATE"], out.stdout
    # Another connection has none of them; a name is prepared once.
    out = psql(server, "EXECUTE add('{}')")
    assert out.returncode != 0 and 'prepared statement "add" does not exist' in out.stderr, out.stderr
    out = psql(server, "PREPARE p AS SELECT 1", "PREPARE p AS SELECT 2")
    assert out.returncode != 0 and 'prepared statement "p" already exists' in out.stderr, out.stderr
    out = psql(server, "PREPARE p(text) AS SELECT $1", "EXECUTE p('a', 'b')")
    assert out.returncode != 0 and "wrong number of parameters" in out.stderr, out.stderr


def test_drop_and_alter_table_over_both_postgresql_protocols(server):
    for table in ("a", "b", "c"):
        server.ingest(table, ndjson(EVENTS[:3]))
    # psql sends the simple protocol.
    out = psql(server, "ALTER TABLE a SET (max_columns = 8)", "DROP TABLE a", "DROP TABLE IF EXISTS nope")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["ALTER", "TABLE", "DROP", "TABLE", "DROP", "TABLE"], out.stdout
    # psycopg sends the extended protocol.
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        assert conn.execute("ALTER TABLE b SET (max_columns = 8)").statusmessage == "ALTER TABLE"
        assert conn.execute("DROP TABLE b").statusmessage == "DROP TABLE"
        with pytest.raises(psycopg.errors.UndefinedTable):
            conn.execute("DROP TABLE b")
        with pytest.raises(psycopg.Error) as error:
            conn.execute("ALTER TABLE c SET (sort_key = 'x')")
        assert "sort_key" in str(error.value)
    names = [t["name"] for t in json.loads(server.request("GET", "/v1/tables")[2])["tables"]]
    assert names == ["c"], names


def test_authentication(tmp_path):
    config = 'tokens = ["t0ken"]\n[[users]]\nname = "alice"\npassword = "wonder land"\n'
    with Server(tmp_path / "db", config=config) as server:
        status, answer = server.ingest("t", ndjson(EVENTS[:3]))
        assert status == 401 and answer["code"] == "28000"
        status, answer = server.ingest("t", ndjson(EVENTS[:3]), {"Authorization": "Bearer t0ken"})
        assert status == 200, answer
        status, _, _ = server.query("SELECT 1", headers={"Authorization": "Bearer wrong"})
        assert status == 401
        assert server.request("GET", "/health")[0] == 200
        with psycopg.connect(server.dsn("alice", "wonder land")) as conn:
            assert conn.execute("SELECT count(*) FROM t").fetchone() == (3,)
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(server.dsn("alice", "wrong"))
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(server.dsn("mallory", "wonder land"))


def test_refuses_non_loopback_without_authentication(tmp_path):
    proc = subprocess.run([strata_bin(), "--data-dir", str(tmp_path / "db"), "serve", "--http", "0.0.0.0:0"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "refusing to listen for HTTP on 0.0.0.0:0 without authentication" in proc.stderr


def test_body_and_line_limits(tmp_path):
    with Server(tmp_path / "db", config="[limits]\nmax_body_bytes = 10000\nmax_line_bytes = 200\n") as server:
        status, answer = server.ingest("t", ndjson(EVENTS) * 3)
        assert status == 413 and "nothing was committed" in answer["error"], answer
        long_line = ndjson([{"id": 0, "text": "x" * 5000}])
        status, answer = server.ingest("t", ndjson(EVENTS[:5]) + long_line + ndjson(EVENTS[5:10]))
        assert status == 200 and answer["accepted"] == 10 and answer["rejected"] == 1, answer
        assert answer["rejects"][0]["line"] == 6
        assert "longer than the limit of 200 bytes" in answer["rejects"][0]["reason"]
        assert server.rows("SELECT count(*) AS n FROM t") == [{"n": 10}]


def test_query_memory_and_connection_limits(tmp_path):
    config = "[limits]\nquery_memory_bytes = 8000000\nmax_connections = 2\n"
    with Server(tmp_path / "db", config=config) as server:
        # A million groups in 8 MB: the aggregation spills to disk and answers.
        rows = server.rows("SELECT v % 1000000 AS k, count(*) AS n FROM generate_series(1, 3000000) t(v) "
                           "GROUP BY k ORDER BY n DESC, k LIMIT 1")
        assert rows == [{"k": 0, "n": 3}]
        # One string of 3 million numbers cannot spill: a clean error, and the server goes on.
        status, _, body = server.query("SELECT string_agg(CAST(v AS VARCHAR), ',') AS s "
                                       "FROM generate_series(1, 3000000) t(v)")
        assert status >= 400 and json.loads(body)["code"] == "53200", body
        with psycopg.connect(server.dsn()) as conn:
            with pytest.raises(psycopg.Error) as error:
                conn.execute("SELECT string_agg(CAST(v AS VARCHAR), ',') FROM generate_series(1, 3000000) t(v)")
            assert error.value.sqlstate == "53200"
        # Two PostgreSQL sessions are the limit: a third is refused with SQLSTATE 53300.
        first, second = psycopg.connect(server.dsn()), psycopg.connect(server.dsn())
        with pytest.raises(psycopg.OperationalError) as error:
            psycopg.connect(server.dsn())
        assert "53300" in str(error.value) or "too many" in str(error.value), error.value
        first.close()
        second.close()
        # Two HTTP requests in flight (bodies not yet sent) are the limit: a third gets 503.
        held = []
        for _ in range(2):
            sock = socket.create_connection(("127.0.0.1", server.http_port))
            sock.sendall(b"POST /v1/ingest/t HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{}")
            held.append(sock)
        time.sleep(0.5)
        status, _, body = server.request("GET", "/v1/tables")
        assert status == 503, body
        for sock in held:
            sock.close()
        time.sleep(0.5)
        assert server.request("GET", "/v1/tables")[0] == 200


def test_sigterm_finishes_and_exits_zero(server):
    server.ingest("t", ndjson(EVENTS))
    assert server.stop(signal.SIGTERM) == 0
    assert any("stopped" in line for line in server.log)


def test_background_merges_while_queries_run(tmp_path):
    config = "[merge]\ninterval_secs = 0.2\nidle_secs = 1\n"
    with Server(tmp_path / "db", config=config) as server:
        for i in range(12):
            status, _ = server.ingest("t", ndjson(EVENTS[i * 25:(i + 1) * 25]))
            assert status == 200
            # Every query sees whole requests: a multiple of 25 documents.
            n = server.rows("SELECT count(*) AS n FROM t")[0]["n"]
            assert n % 25 == 0 and n >= (i + 1) * 25
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            tables = json.loads(server.request("GET", "/v1/tables")[2])["tables"]
            if tables[0]["parts"] == 1:
                break
            time.sleep(0.2)
        assert tables[0]["parts"] == 1, server.log
        assert tables[0]["documents"] == 300
        assert sorted(r["id"] for r in server.rows("SELECT data.id AS id FROM t")) == list(range(1, 301))
        metrics = server.request("GET", "/metrics")[2].decode()
        assert "strata_merges_total 0" not in metrics


def test_acknowledged_ingests_survive_kill_9(tmp_path):
    """Several clients ingest while the server is killed with SIGKILL, three times: every
    acknowledged batch is there exactly once after a restart; a batch that was not acknowledged
    is there whole or not at all."""
    import threading

    data_dir = tmp_path / "db"
    acknowledged, sent = set(), set()
    lock = threading.Lock()

    def client(server, client_id, stop):
        batch = 0
        while not stop.is_set():
            key = (server.round, client_id, batch)
            docs = [{"round": key[0], "client": client_id, "batch": batch, "k": k,
                     "pad": "x" * 200} for k in range(500)]
            with lock:
                sent.add(key)
            # Odd clients are answered once the WAL has the batch, even ones once it is in parts.
            query = "?wait=durable" if client_id % 2 else ""
            try:
                status, _ = server.ingest("t", ndjson(docs), query=query)
            except Exception:
                return  # the server is gone: this batch is not acknowledged
            if status == 200:
                with lock:
                    acknowledged.add(key)
            batch += 1

    for round_ in range(3):
        server = Server(data_dir).start()
        server.round = round_
        stop = threading.Event()
        threads = [threading.Thread(target=client, args=(server, c, stop)) for c in range(4)]
        for t in threads:
            t.start()
        time.sleep(1.5 + round_ * 0.37)
        server.kill()
        stop.set()
        for t in threads:
            t.join(timeout=60)

    with Server(data_dir) as server:
        rows = server.rows('SELECT data."round" AS r, data.client AS c, data.batch AS b, count(*) AS n '
                           "FROM t GROUP BY 1, 2, 3")
    present = {(r["r"], r["c"], r["b"]): r["n"] for r in rows}
    assert acknowledged, "no ingest was acknowledged: the test did not test anything"
    missing = acknowledged - present.keys()
    assert not missing, f"acknowledged batches lost: {sorted(missing)[:5]}"
    assert all(n == 500 for n in present.values()), "a batch is half there or there twice"
    assert present.keys() <= sent


def test_write_ahead_log_replay_direct_path_and_back_pressure(tmp_path):
    """A request acknowledged with wait=durable is in the WAL, not yet in parts; after kill -9
    the restart writes it into parts (and says so) exactly once. A body over
    wal.max_request_bytes goes straight into parts; beyond wal.max_pending_bytes (the parsed
    documents' memory) requests get 503 with Retry-After."""
    data_dir = tmp_path / "db"
    # Pending bytes are the parsed documents' memory: about 8 KB for each body of 40 documents.
    config = ("[wal]\nflush_interval_ms = 600000\nflush_quiet_ms = 600000\nmax_request_bytes = 4096\n"
              "max_pending_bytes = 20000\n")
    docs = [{"i": i, "pad": "y" * 20} for i in range(40)]  # ~1.6 KB
    with Server(data_dir, config=config) as server:
        status, answer = server.ingest("t", ndjson(docs) + b"{broken\n", query="?wait=durable")
        assert status == 200, answer
        assert (answer["accepted"], answer["rejected"], answer["visible"]) == (40, 1, False), answer
        assert answer["rejects"][0]["line"] == 41, answer
        seq = answer["wal_seq"]
        # Durable, not yet visible: the flush interval is ten minutes and the flush creates t.
        status, _, body = server.query("SELECT count(*) AS n FROM t")
        assert status == 404 and json.loads(body)["code"] == "42P01", body
        _, _, text = server.request("GET", "/metrics")
        assert b"strata_wal_pending_bytes " in text and b"strata_wal_pending_bytes 0\n" not in text, text
        # A second and third request fill wal.max_pending_bytes: the third is refused.
        status, answer = server.ingest("t", ndjson(docs), query="?wait=durable")
        assert status == 200, answer
        assert answer["wal_seq"] == seq + 1
        status, headers, body = server.request("POST", "/v1/ingest/t?wait=durable", ndjson(docs * 4))
        assert status == 200, body  # 6.5 KB > max_request_bytes: written into parts directly
        assert "wal_seq" not in json.loads(body)
        status, headers, body = server.request("POST", "/v1/ingest/t?wait=durable", ndjson(docs) * 2)
        assert status == 503 and headers.get("retry-after") == "1", (status, headers, body)
        assert json.loads(body)["code"] == "53000"
        server.kill()
    assert not any("replayed" in line for line in server.log)

    with Server(data_dir, config=config) as server:
        replayed = [line for line in server.log if "replayed" in line]
        wal_bytes = 2 * len(ndjson(docs)) + len(b"{broken\n")
        assert replayed == [f"strata: replayed 2 acknowledged requests ({wal_bytes} bytes, 80 documents) "
                            "from the write-ahead log into table t"], server.log
        assert server.rows("SELECT count(*) AS n FROM t") == [{"n": 240}]
        # The default answers once the documents are visible, with the counts and rejects that
        # writing them into parts found.
        status, answer = server.ingest("t", ndjson(docs[:39]) + b"[1]\n" + ndjson(docs[39:]))
        assert status == 200 and answer["visible"] is True and "wal_seq" in answer, answer
        assert (answer["accepted"], answer["rejected"], answer["rejects"][0]["line"]) == (40, 1, 40), answer
        assert server.rows("SELECT count(*) AS n FROM t") == [{"n": 280}]
        assert server.stop() == 0
    # Replayed once: a second restart finds nothing above the table's mark.
    with Server(data_dir, config=config) as server:
        assert not any("replayed" in line for line in server.log), server.log
        assert server.rows("SELECT count(*) AS n FROM t") == [{"n": 280}]
        status, answer = server.ingest("t", b"{}\n", query="?wait=soon")
        assert status == 400 and "wait=" in answer["error"], answer


def test_a_request_over_the_pending_bound_waits_for_a_flush_to_make_room(tmp_path):
    """Two requests fill wal.max_pending_bytes; a third, sent at once, is not refused: it waits
    (wal.admission_wait_ms) until the flush that follows the quiet time makes room."""
    config = ("[wal]\nflush_interval_ms = 600000\nflush_quiet_ms = 300\nmax_request_bytes = 4096\n"
              "max_pending_bytes = 20000\nadmission_wait_ms = 5000\n")
    docs = [{"i": i, "pad": "y" * 20} for i in range(40)]
    with Server(tmp_path / "db", config=config) as server:
        for _ in range(2):
            status, answer = server.ingest("t", ndjson(docs), query="?wait=durable")
            assert status == 200, answer
        started = time.monotonic()
        status, answer = server.ingest("t", ndjson(docs), query="?wait=durable")
        assert status == 200, answer
        # It waited for the flush, which comes 300 ms after the second request.
        assert time.monotonic() - started > 0.1
        deadline = time.monotonic() + 30
        while server.rows("SELECT count(*) AS n FROM t") != [{"n": 120}]:
            assert time.monotonic() < deadline
            time.sleep(0.1)


def test_durable_requests_are_flushed_once_they_stop_coming(tmp_path):
    """With a flush interval of ten minutes, a durable request still becomes visible soon after
    requests stop coming (wal.flush_quiet_ms), and the two flusher threads commit two tables'
    queues independently."""
    config = "[wal]\nflush_interval_ms = 600000\nflush_quiet_ms = 200\nflush_threads = 2\n"
    with Server(tmp_path / "db", config=config) as server:
        for table in ("a", "b"):
            status, answer = server.ingest(table, ndjson(EVENTS[:30]), query="?wait=durable")
            assert status == 200 and answer["visible"] is False, answer
        deadline = time.monotonic() + 30
        counts = {}
        while time.monotonic() < deadline:
            counts = {}
            for table in ("a", "b"):
                status, _, body = server.query(f"SELECT count(*) AS n FROM {table}")
                counts[table] = json.loads(body)["n"] if status == 200 else None
            if counts == {"a": 30, "b": 30}:
                break
            time.sleep(0.05)
        assert counts == {"a": 30, "b": 30}, (counts, server.log)


def test_a_failed_flush_loses_nothing_and_commits_nothing_twice(tmp_path):
    """While the table's parts cannot be written (its parts directory is a file), acknowledged
    requests stay queued, a request waiting to be visible is told that writing failed, and the
    flushers keep retrying; once the disk is fixed every acknowledged document is there once."""
    data_dir = tmp_path / "db"
    (data_dir / "t").mkdir(parents=True)
    blocker = data_dir / "t" / "parts"
    blocker.write_text("not a directory")
    with Server(data_dir, config="[wal]\nflush_quiet_ms = 20\nflush_threads = 2\n") as server:
        for batch in range(6):
            docs = [{"i": batch * 10 + j} for j in range(10)]
            status, answer = server.ingest("t", ndjson(docs), query="?wait=durable")
            assert status == 200 and answer["accepted"] == 10, answer
        status, answer = server.ingest("t", ndjson([{"i": 60 + j} for j in range(10)]))
        assert status == 500 and "durable" in answer["error"], answer
        _, _, text = server.request("GET", "/metrics")
        failures = re.search(rb"^strata_wal_flush_failures_total (\d+)$", text, re.M)
        assert failures and int(failures.group(1)) >= 1, text
        blocker.unlink()
        deadline = time.monotonic() + 30
        rows = []
        while time.monotonic() < deadline:
            status, _, body = server.query("SELECT count(*) AS n, count(DISTINCT data.i) AS d FROM t")
            rows = [json.loads(line) for line in body.splitlines()] if status == 200 else []
            if rows and rows[0]["n"] >= 70:
                break
            time.sleep(0.1)
        assert rows == [{"n": 70, "d": 70}], (rows, server.log)
        assert server.stop() == 0
    with Server(data_dir) as server:
        assert not any("replayed" in line for line in server.log), server.log
        assert server.rows("SELECT count(*) AS n FROM t") == [{"n": 70}]


def test_a_dropped_table_does_not_come_back_from_the_write_ahead_log(tmp_path):
    with Server(tmp_path / "db") as server:
        for table in ("gone", "kept"):
            status, answer = server.ingest(table, ndjson(EVENTS[:20]))
            assert status == 200 and "wal_seq" in answer, answer
        assert server.query("DROP TABLE gone")[0] == 200
        server.kill()
    with Server(tmp_path / "db") as server:
        names = [t["name"] for t in json.loads(server.request("GET", "/v1/tables")[2])["tables"]]
        assert names == ["kept"], (names, server.log)
        assert server.rows("SELECT count(*) AS n FROM kept") == [{"n": 20}]


@pytest.mark.skipif(shutil.which("pgbench") is None, reason="pgbench is not installed (apt-get install postgresql-contrib)")
def test_pgbench_prepared_read_only_script(server, tmp_path):
    server.ingest("events", ndjson(EVENTS))
    script = tmp_path / "q.sql"
    script.write_text("\\set id random(1, 300)\n"
                      "SELECT data.kind AS kind, count(*) AS n FROM events WHERE data.id <= :id GROUP BY kind;\n")
    out = subprocess.run(["pgbench", "-n", "-M", "prepared", "-f", str(script), "-c", "2", "-t", "20",
                          "-h", "127.0.0.1", "-p", str(server.pg_port), "-U", "strata", "strata"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "number of transactions actually processed: 40/40" in out.stdout, out.stdout
    assert "number of failed transactions: 0" in out.stdout, out.stdout


LONG_QUERY = "SELECT count(*) FROM generate_series(1, 1000000000000)"


def test_cancel_stops_a_running_statement(server):
    import threading

    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        threading.Timer(1.0, conn.cancel).start()
        started = time.monotonic()
        with pytest.raises(psycopg.errors.QueryCanceled):
            conn.execute(LONG_QUERY)
        assert time.monotonic() - started < 30
        # The connection is usable afterwards.
        assert conn.execute("SELECT 1 + 1").fetchone() == (2,)
    metrics = server.request("GET", "/metrics")[2].decode()
    assert "strata_query_failures_total 1\n" in metrics, metrics


def test_cancel_stops_a_statement_when_every_connection_slot_is_taken(tmp_path):
    import threading

    # The timeout only keeps a broken cancel from running the query for hours.
    config = "[limits]\nmax_connections = 1\nquery_timeout_secs = 60\n"
    with Server(tmp_path / "db", config=config) as server:
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            # libpq sends the cancel request on a connection of its own.
            threading.Timer(1.0, conn.cancel).start()
            started = time.monotonic()
            with pytest.raises(psycopg.errors.QueryCanceled, match="user request"):
                conn.execute(LONG_QUERY)
            assert time.monotonic() - started < 30
            # The one slot is still this session's: another is refused.
            with pytest.raises(psycopg.OperationalError, match="too many clients"):
                psycopg.connect(server.dsn(), connect_timeout=10)
            assert conn.execute("SELECT 3").fetchone() == (3,)


def test_a_long_query_does_not_hold_up_the_other_connections_of_its_thread(tmp_path):
    import threading

    # One connection thread serves both connections (ADR 0028): the long query's rows are
    # produced on the shared runtime, so the other connection is answered meanwhile.
    config = "[limits]\nconnection_threads = 1\nquery_timeout_secs = 120\n"
    with Server(tmp_path / "db", config=config) as server:
        with psycopg.connect(server.dsn(), autocommit=True) as busy, \
                psycopg.connect(server.dsn(), autocommit=True) as other:
            ended = threading.Event()

            def run_long_query():
                try:
                    busy.execute(LONG_QUERY)
                except psycopg.errors.QueryCanceled:
                    pass
                finally:
                    ended.set()

            thread = threading.Thread(target=run_long_query)
            thread.start()
            time.sleep(1.0)
            started = time.monotonic()
            assert other.execute("SELECT 1 + 1").fetchone() == (2,)
            answered_in = time.monotonic() - started
            still_running = not ended.is_set()
            busy.cancel()
            thread.join(60)
            assert still_running, "the long query ended before the other connection's statement"
            assert answered_in < 5.0, f"the other connection waited {answered_in:.1f} s"


def test_statement_timeout_on_both_protocols(tmp_path):
    with Server(tmp_path / "db", config="[limits]\nquery_timeout_secs = 1\n") as server:
        started = time.monotonic()
        status, _, body = server.query(LONG_QUERY)
        assert status == 503 and json.loads(body)["code"] == "57014", body
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            with pytest.raises(psycopg.errors.QueryCanceled, match="statement timeout"):
                conn.execute(LONG_QUERY)
            assert conn.execute("SELECT 2").fetchone() == (2,)
        assert time.monotonic() - started < 30


PGJDBC_VERSION = "42.7.4"


def pgjdbc_jar():
    return maven_jar("org.postgresql", "postgresql", PGJDBC_VERSION)


@pytest.mark.skipif(shutil.which("java") is None, reason="Java is not installed (apt-get install openjdk-17-jdk-headless)")
def test_pgjdbc(tmp_path):
    from pathlib import Path

    config = '[[users]]\nname = "app"\npassword = "s3cret"\n'
    with Server(tmp_path / "db", config=config) as server:
        server.ingest("events", ndjson(EVENTS))
        client = Path(__file__).resolve().parents[1] / "java" / "JdbcClient.java"
        out = subprocess.run(["java", "-cp", str(pgjdbc_jar()), str(client),
                              f"jdbc:postgresql://127.0.0.1:{server.pg_port}/strata", "app", "s3cret"],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr
        lines = out.stdout.splitlines()
        assert lines[0] == "count 300"
        assert lines[1:8] == [f"prepared {run} 3:u3 6:u6 9:u2" for run in range(1, 8)], lines
        assert "table events" in lines
        assert "savepoint 1" in lines, lines
        # SERIALIZABLE as set, and READ COMMITTED read back as what runs: snapshot isolation,
        # PostgreSQL's REPEATABLE READ (java.sql.Connection's 8 and 4).
        assert [line for line in lines if line.startswith("isolation")] == ["isolation 8", "isolation 4"], lines
        assert lines[-1] == "error 42P01", lines


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed")
def test_tls_on_both_protocols(tmp_path):
    cert, key = tmp_path / "server.crt", tmp_path / "server.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    config = f'tls = {{ cert = "{cert}", key = "{key}" }}\n'
    with Server(tmp_path / "db", config=config, tls_ca=cert) as server:
        status, answer = server.ingest("t", ndjson(EVENTS[:4]))
        assert status == 200, answer
        assert server.rows("SELECT count(*) AS n FROM t") == [{"n": 4}]
        # Plain HTTP to the TLS port gets no answer.
        with pytest.raises(Exception):
            urllib_plain = __import__("urllib.request").request
            urllib_plain.urlopen(f"http://127.0.0.1:{server.http_port}/health", timeout=10).read()
        dsn = server.dsn() + f" sslmode=verify-full sslrootcert={cert}"
        with psycopg.connect(dsn) as conn:
            assert conn.pgconn.ssl_in_use
            assert conn.execute("SELECT count(*) FROM t").fetchone() == (4,)
        assert server.request("GET", "/health")[0] == 200
    bad = tmp_path / "bad.toml"
    bad.write_text(f'tls = {{ cert = "{tmp_path / "missing.crt"}", key = "{key}" }}\n')
    proc = subprocess.run([strata_bin(), "--data-dir", str(tmp_path / "db2"), "serve", "--config", str(bad)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "missing.crt" in proc.stderr and "TLS certificate" in proc.stderr
