"""Raw log lines in through pipelines (issue 15), through the real binary: `strata ingest
--pipeline` and `POST /v1/ingest/{table}?pipeline=`, on the real Apache log (tests/data/SOURCES.md),
whose line 8,899 is truncated. Every line arrives once: parsed into typed fields, or kept whole as
`message` and counted."""
import gzip
import json
import re
from collections import Counter

from conftest import DATA, Strata
from server import Server

LOG = DATA / "apache_access_2015-05.log"
COMBINED = re.compile(
    r'^(\S+) (\S+) (\S+) \[([^\]]+)\] "([^"]*)" (\d{3}) (\d+|-) "([^"]*)" "([^"]*)"$')


def expected_statuses():
    """Status counts and unparsed lines by an independent parser (Python's re)."""
    statuses, unparsed = Counter(), []
    for line in LOG.read_text().splitlines():
        m = COMBINED.match(line)
        if m:
            statuses[int(m.group(6))] += 1
        else:
            unparsed.append(line)
    return statuses, unparsed


def test_cli_pipeline_parses_every_line_or_keeps_it(strata: Strata):
    proc = strata.ingest("access", str(LOG), extra=["--pipeline", "nginx"])
    stderr = proc.stderr.decode()
    assert "read 10000 documents, loaded 10000, rejected 0" in stderr
    assert "1 lines did not parse with pipeline combined" in stderr
    statuses, unparsed = expected_statuses()
    rows = strata.query_rows(
        "SELECT data.status AS status, count(*) AS n FROM access "
        "WHERE data.status IS NOT NULL GROUP BY 1")
    assert {r["status"]: r["n"] for r in rows} == dict(statuses)
    kept = strata.query_rows("SELECT data.message AS m, data.pipeline_error AS e FROM access "
                             "WHERE data.pipeline_error IS NOT NULL")
    assert [r["m"] for r in kept] == unparsed
    assert "does not match" in kept[0]["e"]
    # Typed fields, times in UTC, time-ordered table.
    first = strata.query_rows(
        "SELECT data FROM access WHERE data.timestamp = '2015-05-17T10:05:03Z' "
        "AND data.path LIKE '%kibana-search.png'")[0]["data"]
    assert first["bytes"] == 203023 and first["method"] == "GET" and first["protocol"] == "HTTP/1.1"
    assert "sort key" in strata.run("tables").stdout.decode()
    assert "timestamp" in strata.run("tables").stdout.decode()


def test_user_pipeline_from_the_config_file(strata: Strata, tmp_path):
    config = tmp_path / "strata.toml"
    config.write_text(
        "[pipelines.app]\n"
        "dissect = '%{date} %{+date} %{level} %{message}'\n"
        "append_separator = ' '\n"
        "time = { field = 'date', format = '%Y-%m-%d %H:%M:%S', zone = 'Asia/Tokyo' }\n"
        "rename = { date = 'ts' }\n")
    log = tmp_path / "app.log"
    log.write_text("2024-08-01 09:00:00 INFO started\n\n"
                   "2024-08-01 09:00:01 ERROR disk full: /var\n"
                   "garbage\n")
    proc = strata.ingest("app", str(log), extra=["--pipeline", "app", "--config", str(config)])
    assert "loaded 3" in proc.stderr.decode()
    rows = strata.query_rows("SELECT data FROM app ORDER BY data.ts")
    docs = [r["data"] for r in rows]
    assert docs[:2] == [
        {"ts": "2024-08-01T00:00:00Z", "level": "INFO", "message": "started"},
        {"ts": "2024-08-01T00:00:01Z", "level": "ERROR", "message": "disk full: /var"},
    ]
    # The unparsed line has its ingest time, so it sorts last.
    assert docs[2]["message"] == "garbage" and "pipeline_error" in docs[2]
    # A pipeline that is not declared, and a broken declaration, are named.
    bad = strata.run("ingest", "app", str(log), "--pipeline", "nope", check=False)
    assert bad.returncode != 0 and "unknown pipeline 'nope'" in bad.stderr.decode()
    config.write_text("[pipelines.x]\nregex = '(unclosed'\n")
    bad = strata.run("ingest", "x", str(log), "--pipeline", "x", "--config", str(config), check=False)
    assert bad.returncode != 0 and "pipeline 'x'" in bad.stderr.decode()


def test_http_ingest_through_a_pipeline(tmp_path):
    with Server(tmp_path / "db") as server:
        status, answer = server.ingest(
            "access", gzip.compress(LOG.read_bytes()),
            headers={"Content-Encoding": "gzip"}, query="?pipeline=combined")
        assert status == 200, answer
        assert (answer["accepted"], answer["unparsed"], answer["rejected"]) == (10000, 1, 0)
        statuses, _ = expected_statuses()
        rows = server.rows("SELECT data.status AS s, count(*) AS n FROM access "
                           "WHERE data.status IS NOT NULL GROUP BY 1")
        assert {r["s"]: r["n"] for r in rows} == dict(statuses)
        status, answer = server.ingest("other", b"x\n", query="?pipeline=nginz")
        assert status == 400 and "unknown pipeline" in answer["error"]


def test_http_ingest_with_keyword_postings(tmp_path):
    """`?keyword_index=` on the request that creates a table (ADR 0025): its parts keep each
    status's rows, equality counts agree with an independent parser's, and a frequent status is
    counted from the postings without reading the part."""
    with Server(tmp_path / "db") as server:
        status, answer = server.ingest("access", LOG.read_bytes(),
                                       query="?pipeline=combined&keyword_index=status,method")
        assert status == 200, answer
        manifest = json.loads((tmp_path / "db" / "access" / "manifest.json").read_text())
        assert manifest["settings"]["keyword_index"] == ["status", "method"]
        assert all(p["text_index"]["keyword_columns"] == ["status", "method"]
                   for p in manifest["parts"])
        statuses, _ = expected_statuses()
        for code, count in statuses.items():
            rows = server.rows(f"SELECT count(*) AS n FROM access WHERE data.status = {code}")
            assert rows == [{"n": count}], code
        plan = json.dumps(server.rows(
            "EXPLAIN ANALYZE SELECT count(*) FROM access WHERE data.status = 200"))
        assert "rows_counted_from_keyword_postings=" in plan, plan
        status, answer = server.ingest("other", b'{"a": 1}\n', query="?keyword_index=a..b")
        assert status == 400 and "keyword_index" in answer["error"], answer
