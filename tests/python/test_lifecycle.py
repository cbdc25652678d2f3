"""A table's life as a user drives it: exit statuses that say what was committed, tables created
only by a committed ingest, `strata drop` and SQL DROP/ALTER, rejects with the line's text, read
commands on a missing data directory, and a second writer that says what it waits for."""
import gzip
import json
import subprocess
import time

from conftest import strata_bin


def test_every_line_rejected_exits_1_and_creates_nothing(strata, tmp_path):
    bad = tmp_path / "bad.ndjson"
    bad.write_text("not json\n[1, 2]\n")
    proc = strata.run("ingest", "t", bad, "--sort-key", "kind", check=False)
    assert proc.returncode == 1
    err = proc.stderr.decode()
    assert "every one of the 2 lines read was rejected" in err
    assert "nothing was committed" in err
    assert not (strata.data_dir / "t" / "manifest.json").exists()
    assert strata.run("tables").stdout.decode().splitlines()[1:] == []
    # The failed first ingest fixed no sort key.
    good = tmp_path / "good.ndjson"
    good.write_text('{"did": "x"}\n')
    strata.ingest("t", good, sort_key="did")


def test_invalid_sort_key_or_missing_input_changes_nothing(strata, tmp_path):
    good = tmp_path / "good.ndjson"
    good.write_text('{"kind": "a"}\n')
    for key in ["kind,kind", "a..b", ".", ""]:
        proc = strata.run("ingest", "t", good, "--sort-key", key, check=False)
        assert proc.returncode == 1, key
        assert "invalid sort key path" in proc.stderr.decode(), key
        assert not (strata.data_dir / "t").exists(), key
    proc = strata.run("ingest", "t", good, tmp_path / "missing.ndjson", check=False)
    assert proc.returncode == 1
    assert "missing.ndjson" in proc.stderr.decode()
    assert not (strata.data_dir / "t").exists()


def test_a_failed_follow_up_merge_is_a_warning(strata, tmp_path):
    for i in range(7):
        f = tmp_path / f"{i}.ndjson"
        f.write_text(json.dumps({"i": i}) + "\n")
        strata.ingest("t", f, extra=["--no-merge"])
    manifest = json.loads((strata.data_dir / "t" / "manifest.json").read_text())
    # A damaged part (same size, so the manifest still loads): the merge's check refuses it.
    part = strata.data_dir / "t" / "parts" / manifest["parts"][0]["file"]
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0xFF
    part.write_bytes(bytes(data))
    last = tmp_path / "last.ndjson"
    last.write_text('{"i": 7}\n{"i": 8}\n')
    proc = strata.run("ingest", "t", last, check=False)
    err = proc.stderr.decode()
    assert proc.returncode == 0, err
    assert "warning: the automatic merge of small parts failed" in err
    assert "documents are committed" in err
    tables = strata.run("tables").stdout.decode().splitlines()
    assert tables[1].split()[:2] == ["t", "9"]


def test_rejects_record_stdin_lines_with_text_and_offset(strata, tmp_path):
    proc = strata.run("ingest", "t", "-", input=b'{"a": 1}\n{"a": \n\xef\xbb\xbf{"b": 2}\n')
    assert b"rejected <stdin>:2" in proc.stderr
    rejects = [json.loads(line) for line in (strata.data_dir / "t" / "rejects.ndjson").read_text().splitlines()]
    assert [(r["file"], r["line"], r["offset"], r["text"]) for r in rejects] == [
        ("<stdin>", 2, 9, '{"a": '),
        ("<stdin>", 3, 16, '\ufeff{"b": 2}'),
    ]


def test_a_truncated_gzip_loads_what_it_can(strata, tmp_path):
    lines = "".join(json.dumps({"i": i, "pad": "x" * (i % 40)}) + "\n" for i in range(20000))
    data = gzip.compress(lines.encode())
    cut = tmp_path / "cut.ndjson.gz"
    cut.write_bytes(data[: len(data) // 2])
    proc = strata.run("ingest", "t", cut)
    assert b"ends early" in proc.stderr
    [reject] = [json.loads(line) for line in (strata.data_dir / "t" / "rejects.ndjson").read_text().splitlines()]
    loaded = strata.query_rows("SELECT count(*) AS n FROM t")[0]["n"]
    assert 0 < loaded < 20000
    assert reject["line"] == loaded + 1
    assert reject["offset"] == sum(len(l) + 1 for l in lines.splitlines()[:loaded])


def test_read_commands_on_a_missing_data_dir_fail(strata):
    for args in (["tables"], ["export", "t"], ["query", "SELECT 1"]):
        proc = strata.run(*args, check=False)
        assert proc.returncode == 1, args
        assert "does not exist" in proc.stderr.decode(), args
        assert not strata.data_dir.exists()


def test_drop_and_alter(strata, tmp_path):
    f = tmp_path / "in.ndjson"
    f.write_text('{"kind": "a", "x": 1}\n')
    strata.ingest("t", f, sort_key="kind")
    strata.ingest("u", f)
    strata.run("query", "ALTER TABLE t SET (max_columns = 1)")
    assert json.loads((strata.data_dir / "t" / "manifest.json").read_text())["settings"]["max_columns"] == 1
    proc = strata.run("query", "ALTER TABLE t SET (sort_key = 'x')", check=False)
    assert proc.returncode == 1
    assert "cannot change" in proc.stderr.decode()
    proc = strata.run("drop", "t")
    assert "dropped table t" in proc.stderr.decode()
    assert not (strata.data_dir / "t").exists()
    proc = strata.run("drop", "t", check=False)
    assert proc.returncode == 1
    assert 'table "t" does not exist' in proc.stderr.decode()
    strata.run("drop", "t", "--if-exists")
    strata.run("query", "DROP TABLE u")
    assert strata.run("tables").stdout.decode().splitlines()[1:] == []


def test_a_waiting_writer_says_who_holds_the_lock(strata, tmp_path):
    f = tmp_path / "in.ndjson"
    f.write_text('{"a": 1}\n')
    strata.ingest("t", f)
    # An ingest reading stdin holds the lock until its input ends.
    holder = subprocess.Popen(
        [strata_bin(), "--data-dir", str(strata.data_dir), "ingest", "t", "-"],
        stdin=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        holder.stdin.write(b'{"a": 2}\n')
        holder.stdin.flush()
        time.sleep(0.5)
        waiter = subprocess.Popen(
            [strata_bin(), "--data-dir", str(strata.data_dir), "optimize", "t"],
            stderr=subprocess.PIPE,
        )
        first = waiter.stderr.readline().decode()
        assert first.startswith("waiting for table t: another writer holds its lock (ingest by process "), first
        assert f"process {holder.pid}" in first
        assert "fuser -v" in first and ".lock" in first
        assert waiter.poll() is None
        holder.stdin.close()
        assert holder.wait(timeout=60) == 0
        assert waiter.wait(timeout=60) == 0
    finally:
        holder.kill()
    assert strata.run("tables").stdout.decode().splitlines()[1].split()[:2] == ["t", "2"]
