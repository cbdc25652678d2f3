"""Damaged data as a user meets it (issue 11, items 4 and 5): flipped bytes in a part and
hand-edited manifests make `export`, queries, `check` and `tables` fail naming the table and part;
the healthy tables stay listed and readable."""
import json
import subprocess

import duckdb

from conftest import DATA, strata_bin

DISTINCT = "SELECT count(DISTINCT data.did) AS n FROM t"


def setup(strata, tmp_path):
    docs = tmp_path / "bluesky.ndjson"
    subprocess.run(
        [strata_bin(), "generate", "bluesky", "--docs", "30000", "--seed", "11", "-o", str(docs)],
        check=True,
        capture_output=True,
    )
    strata.ingest("t", docs, sort_key="kind,commit.collection")
    strata.ingest("healthy", DATA / "jetstream_sample.ndjson")
    manifest = json.loads((strata.data_dir / "t" / "manifest.json").read_text())
    assert len(manifest["parts"]) == 1
    part = manifest["parts"][0]["file"]
    return part, strata.data_dir / "t" / "parts" / part


def did_chunk_offsets(path):
    """Offsets inside the `did` column's pages (DuckDB reads the footer for us)."""
    rows = duckdb.connect().execute(
        "SELECT coalesce(dictionary_page_offset, data_page_offset), total_compressed_size "
        f"FROM parquet_metadata('{path}') WHERE path_in_schema = 'did'"
    ).fetchall()
    return [start + size // 2 for start, size in rows] + [start + 3 for start, _ in rows]


def assert_fails_naming(proc, *needles):
    err = proc.stderr.decode() + proc.stdout.decode()
    assert proc.returncode != 0, f"exit 0 on damaged data:\n{err}"
    for needle in needles:
        assert needle in err, f"{needle!r} not in:\n{err}"


def test_flipped_bytes_fail_export_query_and_check_naming_the_part(strata, tmp_path):
    part, path = setup(strata, tmp_path)
    clean = path.read_bytes()
    expected_distinct = strata.query_rows(DISTINCT)
    expected_export = strata.run("export", "t").stdout
    size = len(clean)
    offsets = did_chunk_offsets(path) + [size - 300]  # the did pages, the page index/footer
    for offset in offsets:
        damaged = bytearray(clean)
        for i in range(offset, offset + 4):
            damaged[i] ^= 0x5A
        path.write_bytes(bytes(damaged))
        assert_fails_naming(strata.run("export", "t", check=False), part)
        assert_fails_naming(strata.run("query", DISTINCT, check=False), part)
        proc = strata.run("check", check=False)
        assert_fails_naming(proc, part, "DAMAGED")
        out = proc.stdout.decode()
        assert "table healthy: ok" in out and "table t: DAMAGED" in out
    # Anywhere else: an error naming the part, or exactly the clean answer.
    for offset in range(4, size - 8, size // 23):
        damaged = bytearray(clean)
        damaged[offset] ^= 0xFF
        path.write_bytes(bytes(damaged))
        proc = strata.run("query", "--format", "ndjson", DISTINCT, check=False)
        if proc.returncode == 0:
            assert [json.loads(line) for line in proc.stdout.decode().splitlines()] == expected_distinct
        else:
            assert part in proc.stderr.decode()
        assert_fails_naming(strata.run("check", "t", check=False), part)
    path.write_bytes(clean)
    assert strata.run("export", "t").stdout == expected_export
    assert strata.query_rows(DISTINCT) == expected_distinct
    assert "table t: ok" in strata.run("check", "t").stdout.decode()


def edit_manifest(strata, edit):
    path = strata.data_dir / "t" / "manifest.json"
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))


def assert_table_damaged(strata, *needles):
    proc = strata.run("tables", check=False)
    assert proc.returncode != 0
    lines = proc.stdout.decode().splitlines()
    healthy = [l for l in lines if l.startswith("healthy ")]
    assert healthy and "DAMAGED" not in healthy[0] and "152" in healthy[0], lines
    damaged = [l for l in lines if l.startswith("t ")]
    assert damaged and "DAMAGED" in damaged[0], lines
    for needle in needles:
        assert needle in damaged[0], (needle, damaged[0])
    assert_fails_naming(strata.run("query", "SELECT count(*) FROM t", check=False), "t/manifest.json", *needles)
    assert_fails_naming(strata.run("check", check=False), "DAMAGED", *needles)
    assert strata.query_rows("SELECT count(*) AS n FROM healthy") == [{"n": 152}]


def test_edited_row_count(strata, tmp_path):
    part, _ = setup(strata, tmp_path)

    def edit(m):
        m["parts"][0]["rows"] -= 1

    edit_manifest(strata, edit)
    assert_table_damaged(strata, part, "rows")


def test_part_listed_twice(strata, tmp_path):
    part, _ = setup(strata, tmp_path)
    edit_manifest(strata, lambda m: m["parts"].append(dict(m["parts"][0])))
    assert_table_damaged(strata, part, "listed twice")


def test_missing_part(strata, tmp_path):
    part, path = setup(strata, tmp_path)
    path.unlink()
    assert_table_damaged(strata, part, "missing")


def test_garbage_manifest(strata, tmp_path):
    setup(strata, tmp_path)
    (strata.data_dir / "t" / "manifest.json").write_text('{"format_version": 1, "parts": [')
    assert_table_damaged(strata, "invalid manifest")
