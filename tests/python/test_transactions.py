"""Transactions over the PostgreSQL protocol (issue 14, ADR 0017), through the real binary and
real clients: psycopg's transaction handling (BEGIN/COMMIT/ROLLBACK, 40001 and 25P02), psql's
multi-statement strings, a lost-update test (concurrent increments of one counter in
transactions retried on 40001, and in single statements, end at the exact count), write skew
(committed under REPEATABLE READ, refused under SERIALIZABLE) and a Jepsen-style bank test (concurrent transfers between accounts, each with its row in a second
table, while readers check the total in their snapshots) with `kill -9` of the server mid-run.
"""
import json
import random
import subprocess
import threading
import time

import psycopg
import psycopg.errors
import pytest

from conftest import strata_bin
from server import Server, ndjson


@pytest.fixture
def server(tmp_path):
    with Server(tmp_path / "db") as s:
        yield s


def value(conn, sql, *params):
    return conn.execute(sql, params).fetchone()[0]


def test_a_block_reads_its_snapshot_and_its_own_changes(server):
    status, answer = server.ingest("c", ndjson([{"id": i, "n": 0} for i in range(3)]), query="?key=id:integer")
    assert status == 200, answer
    a = psycopg.connect(server.dsn())
    b = psycopg.connect(server.dsn())
    assert value(a, "SELECT count(*) FROM c") == 3
    # A commit after a's first statement is not in a's snapshot.
    with psycopg.connect(server.dsn(), autocommit=True) as other:
        other.execute("INSERT INTO c VALUES (%s)", (json.dumps({"id": 9, "n": 9}),))
    assert value(a, "SELECT count(*) FROM c") == 3
    a.execute("UPDATE c SET data = jsonb_set(data, '{n}', '1') WHERE data.id = 1")
    a.execute("DELETE FROM c WHERE data.id = 2")
    assert value(a, "SELECT data->>'n' FROM c WHERE data.id = 1") == "1"
    assert value(a, "SELECT count(*) FROM c") == 2
    # b sees none of a's changes before a commits, and all of them after.
    assert value(b, "SELECT count(*) FROM c") == 4
    b.rollback()
    a.commit()
    assert value(b, "SELECT data->>'n' FROM c WHERE data.id = 1") == "1"
    assert value(b, "SELECT count(*) FROM c") == 3
    b.rollback()

    # ROLLBACK leaves nothing.
    a.execute("DELETE FROM c")
    assert value(a, "SELECT count(*) FROM c") == 0
    a.rollback()
    assert value(a, "SELECT count(*) FROM c") == 3
    a.rollback()

    # A statement that fails ends the block's usefulness: 25P02 until ROLLBACK.
    with pytest.raises(psycopg.errors.UniqueViolation):
        a.execute("INSERT INTO c VALUES (%s)", (json.dumps({"id": 1}),))
    with pytest.raises(psycopg.errors.InFailedSqlTransaction):
        a.execute("SELECT 1")
    a.rollback()
    # Read-only blocks refuse changes.
    with psycopg.connect(server.dsn(), autocommit=True) as c:
        c.execute("BEGIN READ ONLY")
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            c.execute("DELETE FROM c")
        c.execute("ROLLBACK")
        # Changing tables' definitions is refused inside a block.
        c.execute("BEGIN")
        with pytest.raises(psycopg.errors.ActiveSqlTransaction):
            c.execute("DROP TABLE c")
        c.execute("ROLLBACK")
    a.close()
    b.close()


def test_prepared_changes_in_a_block_bind_their_values_as_literals_would(server):
    """A change prepared once and executed in blocks is parsed once and gets each execution's
    values bound into it: quotes, a `$1` inside a value, negative and fractional numbers and NULL
    give the documents the same statements with the values written as literals give."""
    status, answer = server.ingest("p", ndjson([{"id": 0, "s": "", "n": 0}]), query="?key=id:integer")
    assert status == 200, answer
    rows = [(1, "it's $1 -- not a comment", -5, 2.5), (2, None, 7, -3),
            (3, "naïve \\ \"quoted\" '; DROP TABLE p; --", -0.125, 1e-3)]
    with psycopg.connect(server.dsn()) as conn:
        for id_, text, n, m in rows:
            with conn.transaction():
                conn.execute("INSERT INTO p VALUES (('{\"id\": ' || %s || ', \"n\": ' || %s || '}')::jsonb)",
                             (id_, n), prepare=True)
                conn.execute("UPDATE p SET data = jsonb_set(jsonb_set(data, '{s}', to_jsonb(COALESCE(%s::text, 'none'))), "
                             "'{m}', to_jsonb(%s::float)) WHERE data.id = %s", (text, m, id_), prepare=True)
        with conn.transaction():
            conn.execute("DELETE FROM p WHERE data.id = %s", (0,), prepare=True)
    got = {d["id"]: d for d in (row["data"] for row in server.rows("SELECT data FROM p"))}
    assert got == {id_: {"id": id_, "n": n, "s": text or "none", "m": m} for id_, text, n, m in rows}


def test_prepared_reads_by_key_in_a_block_answer_with_each_executions_value(server):
    """A key join and a point read prepared once and executed in blocks are recognised once
    from their text and get each execution's value: the answers are those the statements give
    with the value written as a literal, the block's own changes included."""
    server.ingest("fleet", ndjson([{"code": "A1", "seats": 180}, {"code": "O'K", "seats": 7}]),
                  query="?key=code")
    server.ingest("flights", ndjson([{"id": "1", "aircraft": "A1"}, {"id": "2", "aircraft": "O'K"},
                                     {"id": "3", "aircraft": "none"}]), query="?key=id")
    join = ("SELECT a.data->>'seats' FROM flights f JOIN fleet a ON a.data->>'code' = f.data->>'aircraft' "
            "WHERE f.data->>'id' = %s")
    point = "SELECT data->>'seats' FROM fleet WHERE data->>'code' = %s"
    with psycopg.connect(server.dsn()) as conn:
        # Three blocks: the first statement of the join's shape is planned, the rest not.
        for seats in (190, 191, 192):
            with conn.transaction():
                conn.execute("UPDATE fleet SET data = jsonb_set(data, '{seats}', to_jsonb(%s::int)) "
                             "WHERE data->>'code' = 'A1'", (seats,))
                joined = [conn.execute(join, (id_,), prepare=True).fetchall() for id_ in ("1", "2", "3", "4", "1")]
                assert joined == [[(str(seats),)], [("7",)], [], [], [(str(seats),)]]
                read = [conn.execute(point, (code,), prepare=True).fetchall() for code in ("O'K", "A1", "x")]
                assert read == [[("7",)], [(str(seats),)], []]
        # Literals answer alike.
        assert conn.execute(join.replace("%s", "'1'")).fetchall() == [("192",)]
        assert conn.execute(point.replace("%s", "'O''K'")).fetchall() == [("7",)]


def test_the_first_committer_wins(server):
    server.ingest("c", ndjson([{"id": 1, "n": 0}]), query="?key=id:integer")
    a = psycopg.connect(server.dsn())
    b = psycopg.connect(server.dsn())
    a.execute("UPDATE c SET data = jsonb_set(data, '{n}', '1') WHERE data.id = 1")
    b.execute("UPDATE c SET data = jsonb_set(data, '{n}', '2') WHERE data.id = 1")
    a.commit()
    with pytest.raises(psycopg.errors.SerializationFailure) as failure:
        b.commit()
    assert failure.value.sqlstate == "40001"
    b.rollback()
    assert value(b, "SELECT data->>'n' FROM c") == "1"
    b.rollback()


def on_call_doctors(server, table):
    server.ingest(table, ndjson([{"id": 1, "on_call": True}, {"id": 2, "on_call": True}]),
                  query="?key=id:integer")


def take_off_call(conn, table, doctor):
    """The write-skew transaction: a doctor goes off call if another is still on call."""
    on_call = value(conn, f"SELECT count(*) FROM {table} WHERE data.on_call = true")
    assert on_call == 2
    conn.execute(f"UPDATE {table} SET data = jsonb_set(data, '{{on_call}}', 'false') "
                 f"WHERE data.id = {doctor}")


def test_serializable_refuses_write_skew_that_repeatable_read_allows(server):
    levels = {
        "rr": psycopg.IsolationLevel.REPEATABLE_READ,
        "ser": psycopg.IsolationLevel.SERIALIZABLE,
    }
    for table, level in levels.items():
        on_call_doctors(server, table)
        a = psycopg.connect(server.dsn())
        b = psycopg.connect(server.dsn())
        a.isolation_level = b.isolation_level = level
        take_off_call(a, table, 1)
        take_off_call(b, table, 2)
        a.commit()
        if level == psycopg.IsolationLevel.REPEATABLE_READ:
            # Snapshot isolation: both commit, and nobody is on call.
            b.commit()
            assert value(b, f"SELECT count(*) FROM {table} WHERE data.on_call = true") == 0
        else:
            with pytest.raises(psycopg.errors.SerializationFailure) as failure:
                b.commit()
            assert "read/write dependencies" in str(failure.value)
            b.rollback()
            # Run again, it sees a's change and keeps the last doctor on call.
            assert value(b, f"SELECT count(*) FROM {table} WHERE data.on_call = true") == 1
        b.rollback()
        a.close()
        b.close()

    # A point read by key reads only its document: changes of other keys do not fail it.
    with psycopg.connect(server.dsn(), autocommit=True) as c, \
            psycopg.connect(server.dsn(), autocommit=True) as other:
        c.execute("BEGIN ISOLATION LEVEL SERIALIZABLE")
        assert value(c, "SELECT data FROM ser WHERE data.id = 2")["on_call"] is True
        other.execute("UPDATE ser SET data = jsonb_set(data, '{on_call}', 'true') WHERE data.id = 1")
        c.execute("UPDATE ser SET data = jsonb_set(data, '{note}', '\"x\"') WHERE data.id = 2")
        c.execute("COMMIT")
        # A read-only block commits whatever changed since it began.
        c.execute("BEGIN ISOLATION LEVEL SERIALIZABLE READ ONLY")
        assert value(c, "SELECT count(*) FROM ser") == 2
        other.execute("DELETE FROM ser WHERE data.id = 1")
        c.execute("COMMIT")

        # The level can be set before the block's first query, not after it.
        c.execute("BEGIN")
        c.execute("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE")
        assert value(c, "SELECT count(*) FROM ser") == 1
        with pytest.raises(psycopg.errors.ActiveSqlTransaction):
            c.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        c.execute("ROLLBACK")

        # The session's default level (what PgJDBC's setTransactionIsolation sends).
        c.execute("SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL SERIALIZABLE")
        c.execute("BEGIN")
        assert value(c, "SELECT count(*) FROM ser") == 1
        other.execute("INSERT INTO ser VALUES (%s)", (json.dumps({"id": 3, "on_call": True}),))
        c.execute("INSERT INTO ser VALUES (%s)", (json.dumps({"id": 4, "on_call": True}),))
        with pytest.raises(psycopg.errors.SerializationFailure):
            c.execute("COMMIT")
        assert c.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        # SHOW tells the level (what PgJDBC's getTransactionIsolation reads), over the extended
        # protocol here: snapshot isolation is PostgreSQL's repeatable read.
        assert value(c, "SHOW default_transaction_isolation") == "serializable"
        c.execute("BEGIN ISOLATION LEVEL READ COMMITTED")
        assert value(c, "SHOW TRANSACTION ISOLATION LEVEL") == "repeatable read"
        c.execute("COMMIT")
        c.execute("BEGIN")
        assert value(c, "SHOW transaction_isolation") == "serializable"
        c.execute("COMMIT")

    # The default level from the connection's startup options (libpq's PGOPTIONS, as the
    # booking benchmark sets it for pgbench), and from SET.
    for options, setting in (
        ("-c default_transaction_isolation=serializable", None),
        ("", "SET default_transaction_isolation = 'serializable'"),
    ):
        with psycopg.connect(server.dsn(), options=options) as c, \
                psycopg.connect(server.dsn(), autocommit=True) as other:
            if setting:
                c.execute(setting)
                c.commit()
            assert value(c, "SELECT count(*) FROM ser") >= 2
            other.execute("DELETE FROM ser WHERE data.id = 3")
            c.execute("DELETE FROM ser WHERE data.id = 2")
            with pytest.raises(psycopg.errors.SerializationFailure):
                c.commit()
            other.execute("INSERT INTO ser VALUES (%s)", (json.dumps({"id": 3, "on_call": True}),))


def test_a_set_of_the_default_level_in_a_block_lasts_only_if_the_block_commits(server):
    """PostgreSQL undoes a SET made in a transaction that rolls back; one in a failed block is
    refused (25P02)."""
    server.ingest("lvl", ndjson([{"id": 1}]), query="?key=id:integer")
    show = "SHOW default_transaction_isolation"
    with psycopg.connect(server.dsn(), autocommit=True) as c:
        for end, kept in (("ROLLBACK", "repeatable read"), ("COMMIT", "serializable")):
            c.execute("BEGIN")
            c.execute("SET default_transaction_isolation = 'serializable'")
            assert value(c, show) == "serializable"
            c.execute(end)
            assert value(c, show) == kept, end
        c.execute("BEGIN")
        c.execute("SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        with pytest.raises(psycopg.errors.UniqueViolation):
            c.execute("INSERT INTO lvl VALUES (%s)", (json.dumps({"id": 1}),))
        with pytest.raises(psycopg.errors.InFailedSqlTransaction):
            c.execute("SET default_transaction_isolation = 'read committed'")
        c.execute("COMMIT")  # of a failed block: a rollback
        assert value(c, show) == "serializable"
        # ROLLBACK TO a savepoint undoes what was SET after it; RELEASE keeps it.
        c.execute("BEGIN")
        c.execute("SAVEPOINT a")
        c.execute("SET default_transaction_isolation = 'repeatable read'")
        c.execute("SAVEPOINT b")
        c.execute("SET default_transaction_isolation = 'serializable'")
        c.execute("ROLLBACK TO SAVEPOINT b")
        assert value(c, show) == "repeatable read"
        c.execute("ROLLBACK TO SAVEPOINT a")
        assert value(c, show) == "serializable"
        c.execute("SET default_transaction_isolation = 'repeatable read'")
        c.execute("RELEASE a")
        c.execute("COMMIT")
        assert value(c, show) == "repeatable read"


def test_savepoints_undo_part_of_a_block_and_recover_it_from_an_error(server):
    """psycopg's nested transactions (SAVEPOINT, RELEASE, ROLLBACK TO): an inner block that
    raises undoes only its own changes; one whose statement failed is rolled back to its
    savepoint and the outer block goes on and commits; a failed COMMIT leaves the connection
    idle, as in PostgreSQL."""
    server.ingest("c", ndjson([{"id": 1, "n": 0}]), query="?key=id:integer")
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        with conn.transaction():
            conn.execute("INSERT INTO c VALUES (%s)", (json.dumps({"id": 2, "n": 2}),))
            with pytest.raises(RuntimeError):
                with conn.transaction():
                    conn.execute("INSERT INTO c VALUES (%s)", (json.dumps({"id": 3, "n": 3}),))
                    conn.execute("UPDATE c SET data = jsonb_set(data, '{n}', '9') WHERE data.id = 1")
                    assert value(conn, "SELECT count(*) FROM c") == 3
                    raise RuntimeError("undo the inner block")
            assert value(conn, "SELECT count(*) FROM c") == 2
            assert value(conn, "SELECT data->>'n' FROM c WHERE data.id = 1") == "0"
            # A failing statement inside a nested block: rolled back to its savepoint.
            with pytest.raises(psycopg.errors.UniqueViolation):
                with conn.transaction():
                    conn.execute("INSERT INTO c VALUES (%s)", (json.dumps({"id": 4}),))
                    conn.execute("INSERT INTO c VALUES (%s)", (json.dumps({"id": 1}),))
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
            with conn.transaction():  # released: its change stays
                conn.execute("INSERT INTO c VALUES (%s)", (json.dumps({"id": 5, "n": 5}),))
            conn.execute("UPDATE c SET data = jsonb_set(data, '{n}', '1') WHERE data.id = 1")
        assert server.rows("SELECT data.id AS id, data.n AS n FROM c ORDER BY id") == [
            {"id": 1, "n": 1}, {"id": 2, "n": 2}, {"id": 5, "n": 5}]
        # Savepoints by hand: names fold to lower case, the newest of a name wins, errors.
        with pytest.raises(psycopg.errors.NoActiveSqlTransaction):
            conn.execute("SAVEPOINT s")
        conn.execute("BEGIN")
        conn.execute("SAVEPOINT S")
        conn.execute("DELETE FROM c WHERE data.id = 5")
        conn.execute("SAVEPOINT s")
        conn.execute("DELETE FROM c WHERE data.id = 2")
        conn.execute("ROLLBACK TO SAVEPOINT s")
        assert value(conn, "SELECT count(*) FROM c") == 2
        conn.execute("RELEASE s")
        conn.execute("ROLLBACK TO s")
        assert value(conn, "SELECT count(*) FROM c") == 3
        with pytest.raises(psycopg.errors.InvalidSavepointSpecification):
            conn.execute("ROLLBACK TO SAVEPOINT nowhere")
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR
        conn.execute("ROLLBACK")

    # A COMMIT that fails (another commit changed the key first) ends the block: idle after.
    a = psycopg.connect(server.dsn(), autocommit=True)
    b = psycopg.connect(server.dsn(), autocommit=True)
    a.execute("BEGIN")
    b.execute("BEGIN")
    a.execute("UPDATE c SET data = jsonb_set(data, '{n}', '7') WHERE data.id = 1")
    b.execute("UPDATE c SET data = jsonb_set(data, '{n}', '8') WHERE data.id = 1")
    a.execute("COMMIT")
    with pytest.raises(psycopg.errors.SerializationFailure):
        b.execute("COMMIT")
    assert b.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    with b.transaction():
        b.execute("UPDATE c SET data = jsonb_set(data, '{n}', '8') WHERE data.id = 1")
    assert value(b, "SELECT data->>'n' FROM c WHERE data.id = 1") == "8"
    a.close()
    b.close()


def test_psql_runs_a_block_in_one_string(server):
    server.ingest("c", ndjson([{"id": 1, "n": 0}]), query="?key=id:integer")
    psql = subprocess.run(
        ["psql", server.dsn(), "-X", "-c",
         "BEGIN; UPDATE c SET data = jsonb_set(data, '{n}', '5') WHERE data.id = 1; "
         "INSERT INTO c VALUES ('{\"id\": 2, \"n\": 1}'); SELECT count(*) FROM c; COMMIT"],
        capture_output=True, text=True, timeout=60,
    )
    assert psql.returncode == 0, psql.stderr
    assert "COMMIT" in psql.stdout and " 2" in psql.stdout, psql.stdout
    assert server.rows("SELECT data.n AS n FROM c ORDER BY n") == [{"n": 1}, {"n": 5}]


def with_retries(conn, work, stats):
    """Runs `work(conn)` in a transaction until it commits; counts the retries."""
    while True:
        try:
            result = work(conn)
            conn.commit()
            return result
        except psycopg.errors.SerializationFailure:
            conn.rollback()
            stats["retries"] += 1


def test_concurrent_increments_lose_none(server):
    server.ingest("counter", ndjson([{"id": 1, "n": 0}]), query="?key=id:integer")
    clients, increments = 4, 15
    stats = {"retries": 0}
    errors = []

    def increment(conn):
        n = int(value(conn, "SELECT data->>'n' FROM counter WHERE data.id = 1"))
        conn.execute("UPDATE counter SET data = jsonb_set(data, '{n}', %s) WHERE data.id = 1", (str(n + 1),))

    def client():
        try:
            with psycopg.connect(server.dsn()) as conn:
                for _ in range(increments):
                    with_retries(conn, increment, stats)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def single_statements():
        try:
            with psycopg.connect(server.dsn(), autocommit=True) as conn:
                for _ in range(increments):
                    conn.execute(
                        "UPDATE counter SET data = jsonb_set(data, '{n}', "
                        "CAST(CAST(data->>'n' AS BIGINT) + 1 AS VARCHAR)) WHERE data.id = 1")
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    threads.append(threading.Thread(target=single_statements))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert server.rows("SELECT data.n AS n FROM counter") == [{"n": (clients + 1) * increments}], stats
    # With 4 clients on one key, conflicts did happen: the test exercised the retry path.
    assert stats["retries"] > 0


ACCOUNTS, INITIAL = 8, 100


def transfer(conn, rng, transfer_id):
    """Moves a random amount between two random accounts, recording the transfer; False when
    the source cannot pay."""
    source, target = rng.sample(range(ACCOUNTS), 2)
    amount = rng.randint(1, 30)
    balances = dict(conn.execute(
        "SELECT CAST(data->>'id' AS BIGINT), CAST(data->>'balance' AS BIGINT) FROM accounts "
        "WHERE data.id IN (%s, %s)", (source, target)).fetchall())
    if balances[source] < amount:
        conn.rollback()
        return None
    for account, delta in ((source, -amount), (target, amount)):
        conn.execute("UPDATE accounts SET data = jsonb_set(data, '{balance}', %s) WHERE data.id = %s",
                     (str(balances[account] + delta), account))
    conn.execute("INSERT INTO transfers VALUES (%s)", (json.dumps(
        {"id": transfer_id, "from": source, "to": target, "amount": amount}),))
    return (transfer_id, source, target, amount)


def bank_state(dsn):
    with psycopg.connect(dsn) as conn:
        balances = dict(conn.execute(
            "SELECT CAST(data->>'id' AS BIGINT), CAST(data->>'balance' AS BIGINT) FROM accounts").fetchall())
        transfers = conn.execute(
            "SELECT CAST(data->>'id' AS VARCHAR), CAST(data->>'from' AS BIGINT), CAST(data->>'to' AS BIGINT), "
            "CAST(data->>'amount' AS BIGINT) FROM transfers").fetchall()
    return balances, transfers


def check_bank(balances, transfers, acknowledged):
    assert sorted(balances) == list(range(ACCOUNTS)), balances
    assert sum(balances.values()) == ACCOUNTS * INITIAL, balances
    assert min(balances.values()) >= 0, balances
    logged = {t[0] for t in transfers}
    assert len(logged) == len(transfers), "a transfer was recorded twice"
    missing = {a[0] for a in acknowledged} - logged
    assert not missing, f"acknowledged transfers lost: {sorted(missing)[:5]}"
    expected = {a: INITIAL for a in range(ACCOUNTS)}
    for _, source, target, amount in transfers:
        expected[source] -= amount
        expected[target] += amount
    assert balances == expected, "balances differ from the initial ones plus the logged transfers"


def test_bank_transfers_keep_the_total_across_kill_9(tmp_path):
    data_dir = tmp_path / "db"
    server = Server(data_dir).start()
    try:
        server.ingest("accounts", ndjson([{"id": a, "balance": INITIAL} for a in range(ACCOUNTS)]),
                      query="?key=id:integer")
        server.ingest("transfers", ndjson([{"id": "t-seed", "from": 0, "to": 0, "amount": 0}]),
                      query="?key=id")
        acknowledged = []
        totals_seen = []
        stats = {"retries": 0}
        errors = []
        for round_ in range(2):
            stop = threading.Event()

            def writer(w):
                rng = random.Random(round_ * 100 + w)
                n = 0
                try:
                    with psycopg.connect(server.dsn()) as conn:
                        while not stop.is_set():
                            n += 1
                            done = with_retries(conn, lambda c: transfer(c, rng, f"t-{round_}-{w}-{n}"), stats)
                            if done:
                                acknowledged.append(done)
                except psycopg.OperationalError:
                    pass  # the server was killed
                except Exception as e:  # noqa: BLE001
                    errors.append(e)

            def reader():
                try:
                    with psycopg.connect(server.dsn()) as conn:
                        while not stop.is_set():
                            totals_seen.append(value(conn, "SELECT sum(CAST(data->>'balance' AS BIGINT)) FROM accounts"))
                            conn.rollback()
                except psycopg.OperationalError:
                    pass
                except Exception as e:  # noqa: BLE001
                    errors.append(e)

            threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
            threads.append(threading.Thread(target=reader))
            for t in threads:
                t.start()
            time.sleep(6)
            if round_ == 0:
                server.kill()  # kill -9 mid-run: commits in flight die
            stop.set()
            for t in threads:
                t.join(timeout=60)
            assert not errors, errors
            if round_ == 0:
                server = Server(data_dir).start()
            balances, transfers = bank_state(server.dsn())
            check_bank(balances, [t for t in transfers if t[0] != "t-seed"], acknowledged)
        assert totals_seen and set(totals_seen) == {ACCOUNTS * INITIAL}, set(totals_seen)
        assert len(acknowledged) > 10, len(acknowledged)
        server.stop()
        for table in ("accounts", "transfers"):
            check = subprocess.run([strata_bin(), "--data-dir", str(data_dir), "check", table],
                                   capture_output=True, text=True)
            assert check.returncode == 0, check.stdout + check.stderr
    finally:
        if server.proc and server.proc.poll() is None:
            server.kill()


def test_a_block_left_idle_past_the_timeout_is_rolled_back_and_its_connection_closed(tmp_path):
    config = "[limits]\nidle_in_transaction_timeout_secs = 0.5\n"
    with Server(tmp_path / "db", config=config) as server:
        server.ingest("t", ndjson([{"id": 1}]), query="?key=id:integer")
        idle = psycopg.connect(server.dsn())
        busy = psycopg.connect(server.dsn())
        outside = psycopg.connect(server.dsn(), autocommit=True)
        idle.execute("INSERT INTO t VALUES (%s)", (json.dumps({"id": 2}),))
        # A block whose statements keep coming stays open past the timeout.
        for _ in range(8):
            assert value(busy, "SELECT count(*) FROM t") == 1
            time.sleep(0.2)
        busy.rollback()
        time.sleep(1.5)
        with pytest.raises(psycopg.errors.IdleInTransactionSessionTimeout):
            idle.execute("SELECT 1")
        # The server closed the connection: the client finds it so at its next use.
        with pytest.raises((psycopg.OperationalError, psycopg.errors.IdleInTransactionSessionTimeout)):
            idle.rollback()
            idle.execute("SELECT 1")
        assert idle.closed
        # Its insert was rolled back; a connection idle outside a block is left alone.
        assert value(outside, "SELECT count(*) FROM t") == 1
        busy.close()
        outside.close()


@pytest.mark.parametrize("protocol", ["simple", "extended"])
def test_a_commit_waiting_for_its_group_leaves_its_query_slot_to_others(tmp_path, protocol):
    # One query slot, and a group commit that waits (up to 30 s) for transactions with changes
    # buffered: the second block's COMMIT waits for the first block. The first block's next
    # statement must not wait for the slot that COMMIT would hold: it runs, then commits, and
    # only then can the waiting COMMIT end.
    config = "[limits]\nmax_concurrent_queries = 1\n[wal]\ncommit_delay_us = 30000000\n"
    with Server(tmp_path / "db", config=config) as server:
        server.ingest("t", ndjson([{"id": 1}]), query="?key=id:integer")
        first = psycopg.connect(server.dsn())
        second = psycopg.connect(server.dsn())
        first.execute("INSERT INTO t VALUES (%s)", (json.dumps({"id": 2}),))
        second.execute("INSERT INTO t VALUES (%s)", (json.dumps({"id": 3}),))
        order = []

        def commit_second():
            if protocol == "simple":
                second.commit()  # psycopg sends COMMIT as a simple query
            else:
                second.execute("COMMIT", prepare=True)  # a prepared statement: the extended protocol
            order.append("second committed")

        committing = threading.Thread(target=commit_second)
        committing.start()
        time.sleep(0.5)
        assert value(first, "SELECT count(*) FROM t WHERE data->>'id' = '2'") == 1
        order.append("first read")
        first.commit()
        committing.join(timeout=60)
        assert order == ["first read", "second committed"]
        assert value(first, "SELECT count(*) FROM t") == 3
        first.close()
        second.close()
