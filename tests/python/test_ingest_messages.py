"""What ingest says about documents it changes or refuses: a lone surrogate escape is named with
its place; duplicate keys keep the last value (ADR 0002) and are counted in the summary."""
import json


def test_lone_surrogate_is_named_with_its_offset(strata, tmp_path):
    src = tmp_path / "s.ndjson"
    src.write_text('{"ok": "\\ud83d\\ude00"}\n{"a": "x\\ud800y"}\n{"b": "\\udc00"}\n')
    proc = strata.ingest("t", src)
    err = proc.stderr.decode()
    assert "loaded 1, rejected 2" in err
    assert "s.ndjson:2: invalid JSON: lone surrogate escape \\ud800 at byte 8" in err
    assert "s.ndjson:3: invalid JSON: lone surrogate escape \\udc00 at byte 7" in err
    rejects = [json.loads(r) for r in (strata.data_dir / "t" / "rejects.ndjson").read_text().splitlines()]
    assert "lone surrogate escape \\ud800" in rejects[0]["reason"]
    assert strata.query_rows("SELECT data.ok AS ok FROM t") == [{"ok": "\U0001F600"}]


def test_duplicate_keys_keep_the_last_value_and_are_counted(strata, tmp_path):
    src = tmp_path / "d.ndjson"
    src.write_text('{"a": 1, "a": 2}\n'
                   '{"a": 3, "o": {"k": "x", "k": "y"}}\n'
                   '{"a": 4, "arr": [{"k": 1, "k": 2}]}\n'
                   '{"a": 5}\n')
    err = strata.ingest("t", src).stderr.decode()
    assert "3 documents had a key twice in one object; the last value of each was kept" in err
    docs = sorted((json.loads(line) for line in strata.run("export", "t").stdout.decode().splitlines()),
                  key=lambda d: d["a"])
    assert docs == [{"a": 2}, {"a": 3, "o": {"k": "y"}}, {"a": 4, "arr": [{"k": 2}]}, {"a": 5}]
    # No duplicates, no line about them.
    clean = tmp_path / "c.ndjson"
    clean.write_text('{"a": 1}\n')
    assert "twice" not in strata.ingest("t", clean).stderr.decode()
