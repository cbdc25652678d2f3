"""Elasticsearch-compatible endpoints (issue 15) driven by the official clients, as shippers and
applications use them: the Elasticsearch Python client and OpenSearch's, `helpers.bulk` with and
without `_id`s, per-item errors, deletes, and the probe endpoints. Every line of the real Apache log
(tests/data/SOURCES.md) arrives once."""
import gzip
import json
import re

import pytest
from elasticsearch import Elasticsearch, helpers as es_helpers
from opensearchpy import OpenSearch, helpers as os_helpers

from conftest import DATA
from server import Server

LOG = DATA / "apache_access_2015-05.log"
COMBINED = re.compile(
    r'^(\S+) (\S+) (\S+) \[([^\]]+)\] "([^"]*)" (\d{3}) (\d+|-) "([^"]*)" "([^"]*)"$')


def log_documents():
    """Each line as a shipper would send it: parsed fields when it parses, else the message."""
    docs = []
    for line in LOG.read_text().splitlines():
        m = COMBINED.match(line)
        if m:
            docs.append({"client": m.group(1), "request": m.group(5), "status": int(m.group(6)),
                         "message": line})
        else:
            docs.append({"message": line})
    return docs


@pytest.fixture
def server(tmp_path):
    with Server(tmp_path / "db") as server:
        yield server


def count(server, table):
    return server.rows(f'SELECT count(*) AS n FROM "{table}"')[0]["n"]


def test_the_elasticsearch_client_ships_the_real_log(server):
    es = Elasticsearch(server.url, request_timeout=120)
    info = es.info()
    assert info["version"]["number"] == "8.17.0" and info["tagline"] == "You Know, for Search"
    assert es.cluster.health()["status"] == "green"
    assert not es.indices.exists(index="apache-2015.05")
    docs = log_documents()
    ok, errors = es_helpers.bulk(
        es, ({"_index": "apache-2015.05", "_source": doc} for doc in docs), chunk_size=700)
    assert (ok, errors) == (len(docs), [])
    assert es.indices.exists(index="apache-2015.05")
    assert count(server, "apache-2015.05") == len(docs)
    # Every line once, exactly as sent.
    rows = server.rows('SELECT data.message AS m FROM "apache-2015.05"')
    assert sorted(r["m"] for r in rows) == sorted(LOG.read_text().splitlines())
    statuses = server.rows('SELECT data.status AS s, count(*) AS n FROM "apache-2015.05" '
                           "WHERE data.status = 404 GROUP BY 1")
    assert statuses == [{"s": 404, "n": sum(1 for d in docs if d.get("status") == 404)}]


def test_ids_make_a_resent_batch_harmless(server):
    es = Elasticsearch(server.url, request_timeout=60)
    docs = log_documents()[:500]
    actions = [{"_index": "web", "_id": f"line-{i}", "_source": doc} for i, doc in enumerate(docs)]
    for _ in range(2):  # a shipper that timed out sends the same batch again
        assert es_helpers.bulk(es, actions) == (500, [])
    assert count(server, "web") == 500
    # A newer version of a document replaces the older one.
    es_helpers.bulk(es, [{"_index": "web", "_id": "line-0", "_source": {"message": "v2"}}])
    assert server.rows("SELECT data.message AS m FROM web WHERE data._id = 'line-0'") == [{"m": "v2"}]
    # Deletes by id; a missing id is not found, not an error of the batch.
    ok, errors = es_helpers.bulk(
        es, [{"_op_type": "delete", "_index": "web", "_id": "line-1"},
             {"_op_type": "delete", "_index": "web", "_id": "no-such-id"}],
        raise_on_error=False)
    assert count(server, "web") == 499
    assert [e["delete"]["status"] for e in errors] == [404]


def test_create_of_an_existing_id_is_a_conflict(server):
    """`create` answers 409 for an `_id` the index holds or an earlier action of the request
    wrote, as Elasticsearch does (Logstash and Beats send `create` for data streams), and leaves
    the document as it was; the other items of the request go on."""
    es = Elasticsearch(server.url, request_timeout=60)
    assert es_helpers.bulk(es, [{"_index": "c", "_id": "a", "_source": {"v": 1}}]) == (1, [])
    ok, errors = es_helpers.bulk(es, [
        {"_op_type": "create", "_index": "c", "_id": "a", "_source": {"v": 2}},   # held: 409
        {"_op_type": "create", "_index": "c", "_id": "b", "_source": {"v": 1}},   # new
        {"_op_type": "create", "_index": "c", "_id": "b", "_source": {"v": 2}},   # written above: 409
        {"_op_type": "index", "_index": "c", "_id": "a", "_source": {"v": 3}},    # index replaces
        {"_op_type": "create", "_index": "c", "_source": {"v": 9}},               # generated id
    ], raise_on_error=False)
    assert ok == 3
    assert [(e["create"]["_id"], e["create"]["status"], e["create"]["error"]["type"]) for e in errors] == [
        ("a", 409, "version_conflict_engine_exception"), ("b", 409, "version_conflict_engine_exception")]
    rows = server.rows("SELECT data._id AS id, data.v AS v FROM c ORDER BY data.v")
    assert [(r["id"], r["v"]) for r in rows][:2] == [("b", 1), ("a", 3)] and len(rows) == 3


def test_update_actions_merge_partial_documents(server):
    """`update` actions as Elasticsearch applies them: `doc` merged into the stored document
    (objects field by field, anything else replaced), `doc_as_upsert` and `upsert` for a
    missing one, 404 without, `noop` when nothing changes, the newest version written earlier in
    the same request as the base, scripts refused per item."""
    es = Elasticsearch(server.url, request_timeout=60)
    es_helpers.bulk(es, [{"_index": "u", "_id": "a", "_source": {"n": 1, "user": {"name": "x", "tags": [1, 2]}}}])
    ok, errors = es_helpers.bulk(es, [
        {"_op_type": "update", "_index": "u", "_id": "a", "doc": {"user": {"tags": [3]}, "m": 2}},
        {"_op_type": "update", "_index": "u", "_id": "a", "doc": {"n": 5}},             # on the line above's result
        {"_op_type": "update", "_index": "u", "_id": "b", "doc": {"n": 1}},             # missing: 404
        {"_op_type": "update", "_index": "u", "_id": "c", "doc": {"n": 1}, "doc_as_upsert": True},
        {"_op_type": "update", "_index": "u", "_id": "d", "doc": {"n": 1}, "upsert": {"n": 0}},
        {"_op_type": "update", "_index": "u", "_id": "c", "doc": {"n": 1}},             # noop
        {"_op_type": "update", "_index": "u", "_id": "a", "script": {"source": "ctx._source.n++"}},
    ], raise_on_error=False)
    assert ok == 5
    assert sorted((e["update"]["_id"], e["update"]["status"]) for e in errors) == [("a", 400), ("b", 404)]
    docs = {r["id"]: r for r in server.rows(
        "SELECT data._id AS id, data.n AS n, data.m AS m, data->'user' AS u FROM u ORDER BY 1")}
    assert (docs["a"]["n"], docs["a"]["m"], docs["a"]["u"]) == (5, 2, {"name": "x", "tags": [3]})
    assert (docs["c"]["n"], docs["d"]["n"]) == (1, 0) and "b" not in docs
    # The raw answer: each item's own status and result.
    body = "".join(json.dumps(line) + "\n" for line in [
        {"update": {"_index": "u", "_id": "c"}}, {"doc": {"n": 1}},
        {"update": {"_index": "u", "_id": "c"}}, {"doc": {"n": 2}},
    ]).encode()
    status, _, answer = server.request("POST", "/_bulk", body, headers={"Content-Type": "application/x-ndjson"})
    items = [i["update"] for i in json.loads(answer)["items"]]
    assert [(i["status"], i["result"]) for i in items] == [(200, "noop"), (200, "updated")]


def test_each_item_has_its_own_status(server):
    es = Elasticsearch(server.url, request_timeout=60)
    actions = [
        {"_index": "mixed", "_source": {"n": 1}},
        {"_index": "mixed", "_source": {"_id": "inside", "n": 2}},  # a metadata field: refused
        {"_op_type": "update", "_index": "mixed", "_id": "a", "doc": {"n": 3}},  # no such document
        {"_index": "Bad*Name", "_source": {"n": 4}},
        {"_index": "mixed", "_source": {"n": 5}},
    ]
    ok, errors = es_helpers.bulk(es, actions, raise_on_error=False)
    assert ok == 2
    assert sorted(next(iter(e.values()))["status"] for e in errors) == [400, 400, 404]
    assert count(server, "mixed") == 2
    # The raw answer: compact JSON, one item per action in order (Vector reads `"errors":true`).
    body = "".join(json.dumps(line) + "\n" for line in [
        {"index": {"_index": "mixed"}}, {"n": 6},
        {"index": {"_index": "mixed"}}, [1, 2],
        {"create": {"_index": "mixed", "_type": "_doc"}}, {"n": 7},
    ]).encode()
    status, headers, answer = server.request(
        "POST", "/_bulk", gzip.compress(body),
        headers={"Content-Type": "application/x-ndjson", "Content-Encoding": "gzip"})
    assert status == 200 and headers["x-elastic-product"] == "Elasticsearch"
    assert b'"errors":true' in answer
    items = json.loads(answer)["items"]
    assert [list(i)[0] for i in items] == ["index", "index", "create"]
    assert [next(iter(i.values()))["status"] for i in items] == [201, 400, 201]
    # A broken action line fails the whole request, as Elasticsearch does.
    status, _, answer = server.request("POST", "/_bulk", b'{"index":{"_index":"x"}}\n',
                                       headers={"Content-Type": "application/x-ndjson"})
    assert status == 400 and json.loads(answer)["error"]["type"] == "illegal_argument_exception"


def test_probes_shippers_call_first(server):
    for path, expected in [
        ("/", 200), ("/_license", 200), ("/_xpack", 200), ("/_nodes/http", 200),
        ("/_cluster/health", 200), ("/_index_template/logs", 404), ("/_ingest/pipeline/p", 404),
    ]:
        status, headers, _ = server.request("GET", path)
        assert (path, status) == (path, expected)
        assert headers["x-elastic-product"] == "Elasticsearch"
    status, _, answer = server.request("PUT", "/_index_template/logs", b'{"index_patterns":["logs-*"]}',
                                       headers={"Content-Type": "application/json"})
    assert status == 200 and json.loads(answer)["acknowledged"] is True
    status, _, _ = server.request("HEAD", "/nothing-here")
    assert status == 404


def test_a_time_field_becomes_the_time_column(server):
    es = Elasticsearch(server.url, request_timeout=60)
    docs = [{"@timestamp": f"2024-01-01T00:00:{s:02}Z", "n": s} for s in (5, 1, 3)]
    es_helpers.bulk(es, ({"_index": "events", "_source": d} for d in docs))
    tables = server.request("GET", "/v1/tables")[2].decode()
    assert "@timestamp" in tables
    rows = server.rows('SELECT data.n AS n FROM events ORDER BY data."@timestamp"')
    assert [r["n"] for r in rows] == [1, 3, 5]


def test_the_opensearch_client(server):
    client = OpenSearch(hosts=[server.url], timeout=60)
    assert client.info()["version"]["number"] == "8.17.0"
    docs = log_documents()[:1000]
    ok, errors = os_helpers.bulk(client, ({"_index": "os-logs", "_source": d} for d in docs))
    assert (ok, errors) == (1000, [])
    assert count(server, "os-logs") == 1000


def omelasticsearch_installed():
    import glob
    import shutil
    return shutil.which("rsyslogd") and glob.glob("/usr/lib/*/rsyslog/omelasticsearch.so")


@pytest.mark.skipif(not omelasticsearch_installed(),
                    reason="rsyslog with omelasticsearch is not installed (tests/install-clients.sh)")
def test_rsyslog_ships_the_real_log_once(server, tmp_path):
    """rsyslog tails the Apache log (imfile) and ships it with its Elasticsearch output in bulk
    mode, retrying forever: every line must arrive once, byte for byte."""
    import subprocess
    import time
    work = tmp_path / "rsyslog"
    work.mkdir()
    errors = work / "es-errors.json"
    conf = work / "rsyslog.conf"
    conf.write_text(f"""
global(workDirectory="{work}")
module(load="imfile")
module(load="omelasticsearch")
template(name="doc" type="list" option.json="on") {{
  constant(value="{{\\"message\\":\\"")
  property(name="msg")
  constant(value="\\"}}")
}}
input(type="imfile" File="{LOG}" Tag="apache" ruleset="ship")
ruleset(name="ship") {{
  action(type="omelasticsearch" server="127.0.0.1" serverport="{server.http_port}"
         searchIndex="apache-rsyslog" template="doc" bulkmode="on" maxbytes="1m"
         errorfile="{errors}" queue.type="linkedlist" queue.dequeuebatchsize="1000"
         action.resumeretrycount="-1")
}}
""")
    proc = subprocess.Popen(["rsyslogd", "-n", "-f", str(conf), "-i", str(work / "rsyslog.pid")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = LOG.read_text().splitlines()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            status, _, answer = server.query('SELECT count(*) AS n FROM "apache-rsyslog"')
            if status == 200 and json.loads(answer)["n"] >= len(lines):
                break
            time.sleep(0.5)
        time.sleep(1)  # anything more would be a duplicate
        rows = server.rows('SELECT data.message AS m FROM "apache-rsyslog"')
        assert sorted(r["m"] for r in rows) == sorted(lines)
        assert not errors.exists() or errors.read_text() == ""
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_search_and_count_answer_from_the_same_tables(server):
    """The read subset: query DSL → SQL, hits with _id and _source, sort, terms and
    date_histogram aggregations with metric sub-aggregations — checked against the documents
    computed here."""
    from elasticsearch import BadRequestError

    es = Elasticsearch(server.url, request_timeout=60)
    docs = []
    for i, line in enumerate(LOG.read_text().splitlines()[:2000]):
        m = COMBINED.match(line)
        if not m:
            continue
        day, clock = m.group(4).split(":", 1)[0], m.group(4).split(":", 1)[1].split(" ")[0]
        stamp = f"2015-05-{day[:2]}T{clock}Z"
        docs.append({"@timestamp": stamp, "status": int(m.group(6)), "method": m.group(5).split(" ")[0],
                     "message": line, "length": len(line)})
    es_helpers.bulk(es, ({"_index": "web-2015.05", "_id": str(i), "_source": d}
                         for i, d in enumerate(docs)))
    assert es.count(index="web-*")["count"] == len(docs)
    n404 = sum(1 for d in docs if d["status"] == 404)
    assert es.count(index="web-2015.05", query={"term": {"status": 404}})["count"] == n404
    kibana = sum(1 for d in docs if "kibana" in d["message"].lower())
    assert es.count(index="web-2015.05", query={"match": {"message": "Kibana"}})["count"] == kibana
    not_get = sum(1 for d in docs if d["method"] != "GET" and d["status"] < 400)
    assert es.count(index="web-2015.05", query={"bool": {
        "must_not": [{"term": {"method": "GET"}}], "filter": [{"range": {"status": {"lt": 400}}}]}})["count"] == not_get

    latest = sorted(docs, key=lambda d: d["@timestamp"], reverse=True)[:5]
    result = es.search(index="web-2015.05", size=5, sort=[{"@timestamp": {"order": "desc"}}],
                       query={"range": {"@timestamp": {"gte": "2015-05-17T00:00:00Z"}}},
                       source=["@timestamp", "status"])
    assert result["hits"]["total"]["value"] == len(docs)
    hits = result["hits"]["hits"]
    assert [h["_source"]["@timestamp"] for h in hits] == [d["@timestamp"] for d in latest]
    assert set(hits[0]["_source"]) == {"@timestamp", "status"}
    assert all(h["_id"] is not None and h["_index"] == "web-2015.05" for h in hits)

    phrase = sum(1 for d in docs if "kibana-search" in d["message"])
    assert es.count(index="web-2015.05",
                    query={"query_string": {"query": '"kibana search"'}})["count"] == phrase

    aggs = es.search(index="web-2015.05", size=0, aggs={
        "statuses": {"terms": {"field": "status", "size": 3}},
        "per_hour": {"date_histogram": {"field": "@timestamp", "fixed_interval": "1h"}},
    })["aggregations"]
    from collections import Counter
    top = Counter(d["status"] for d in docs).most_common(3)
    assert [(b["key"], b["doc_count"]) for b in aggs["statuses"]["buckets"]] == top
    hours = Counter(d["@timestamp"][:13] for d in docs)
    buckets = [b for b in aggs["per_hour"]["buckets"] if b["doc_count"]]
    assert {b["key_as_string"][:13]: b["doc_count"] for b in buckets} == dict(hours)

    # Metric aggregations, alone and per bucket (Grafana's and Kibana's panels).
    aggs = es.search(index="web-2015.05", size=0, aggs={
        "mean_length": {"avg": {"field": "length"}},
        "methods": {"cardinality": {"field": "method"}},
        "by_status": {"terms": {"field": "status", "size": 2}, "aggs": {
            "longest": {"max": {"field": "length"}}, "total": {"sum": {"field": "length"}},
            "n": {"value_count": {"field": "length"}}, "shortest": {"min": {"field": "length"}}}},
        "hourly": {"date_histogram": {"field": "@timestamp", "fixed_interval": "1h"},
                   "aggs": {"mean": {"avg": {"field": "length"}}}},
    })["aggregations"]
    lengths = [d["length"] for d in docs]
    assert aggs["mean_length"]["value"] == pytest.approx(sum(lengths) / len(lengths))
    assert aggs["methods"]["value"] == len({d["method"] for d in docs})
    for bucket, (status, count) in zip(aggs["by_status"]["buckets"], top[:2]):
        mine = [d["length"] for d in docs if d["status"] == status]
        assert (bucket["key"], bucket["doc_count"]) == (status, count)
        assert bucket["longest"]["value"] == max(mine) and bucket["shortest"]["value"] == min(mine)
        assert bucket["total"]["value"] == sum(mine) and bucket["n"]["value"] == len(mine)
    for bucket in aggs["hourly"]["buckets"]:
        mine = [d["length"] for d in docs if d["@timestamp"][:13] == bucket["key_as_string"][:13]]
        expected = pytest.approx(sum(mine) / len(mine)) if mine else None
        assert bucket["mean"]["value"] == expected, bucket
    # Buckets inside buckets: the top methods of each status, and each hour's top statuses.
    aggs = es.search(index="web-2015.05", size=0, aggs={
        "by_status": {"terms": {"field": "status", "size": 3}, "aggs": {
            "methods": {"terms": {"field": "method", "size": 1}, "aggs": {
                "mean": {"avg": {"field": "length"}}}}}},
        "hourly": {"date_histogram": {"field": "@timestamp", "fixed_interval": "1h"}, "aggs": {
            "statuses": {"terms": {"field": "status", "size": 2}}}},
    })["aggregations"]
    for bucket, (status, count) in zip(aggs["by_status"]["buckets"], top):
        methods = Counter(d["method"] for d in docs if d["status"] == status)
        (method, n), = sorted(methods.items(), key=lambda kv: (-kv[1], kv[0]))[:1]
        [inner] = bucket["methods"]["buckets"]
        assert (inner["key"], inner["doc_count"]) == (method, n)
        assert bucket["methods"]["sum_other_doc_count"] == count - n
        mine = [d["length"] for d in docs if d["status"] == status and d["method"] == method]
        assert inner["mean"]["value"] == pytest.approx(sum(mine) / len(mine))
    for bucket in aggs["hourly"]["buckets"]:
        statuses = Counter(d["status"] for d in docs if d["@timestamp"][:13] == bucket["key_as_string"][:13])
        expected = sorted(statuses.items(), key=lambda kv: (-kv[1], kv[0]))[:2]
        assert [(b["key"], b["doc_count"]) for b in bucket["statuses"]["buckets"]] == expected, bucket
    # A third level: the top lengths of the top methods of the top statuses.
    aggs = es.search(index="web-2015.05", size=0, aggs={"a": {"terms": {"field": "status", "size": 2}, "aggs": {
        "b": {"terms": {"field": "method", "size": 2}, "aggs": {
            "c": {"terms": {"field": "length", "size": 3}}}}}}})["aggregations"]
    def top_of(counter, n):
        return sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
    assert [b["key"] for b in aggs["a"]["buckets"]] == [status for status, _ in top[:2]]
    for a in aggs["a"]["buckets"]:
        methods = top_of(Counter(d["method"] for d in docs if d["status"] == a["key"]), 2)
        assert [(b["key"], b["doc_count"]) for b in a["b"]["buckets"]] == methods
        for b in a["b"]["buckets"]:
            lengths = Counter(d["length"] for d in docs
                              if d["status"] == a["key"] and d["method"] == b["key"] and "length" in d)
            assert [(c["key"], c["doc_count"]) for c in b["c"]["buckets"]] == top_of(lengths, 3), (a["key"], b["key"])
            assert b["c"]["sum_other_doc_count"] == sum(lengths.values()) - sum(n for _, n in top_of(lengths, 3))

    # What is not supported is named, not approximated.
    with pytest.raises(BadRequestError) as refused:
        es.search(index="web-2015.05", query={"fuzzy": {"message": "kibna"}})
    assert "fuzzy" in str(refused.value)


def test_bulk_into_an_existing_index_commits_through_the_wal(tmp_path):
    """After the request that creates an index, each `_bulk` request is one transaction through
    the server's WAL (ADR 0018): acknowledged once its frame is durable, visible at once, written
    into parts by the checkpoints. Checkpoints are held off here, so a `kill -9` leaves every
    request after the first in the WAL only, and the restart must replay them."""
    config = "[wal]\ncheckpoint_interval_ms = 3600000\n"
    docs = log_documents()[:2000]
    actions = [{"_index": "wal", "_id": f"d{i}", "_source": doc} for i, doc in enumerate(docs)]
    with Server(tmp_path / "db", config=config) as server:
        es = Elasticsearch(server.url, request_timeout=60)
        for start in range(0, len(actions), 100):
            assert es_helpers.bulk(es, actions[start:start + 100]) == (100, [])
        es_helpers.bulk(es, [{"_index": "wal", "_id": "d0", "_source": {"message": "v2"}}])
        assert count(server, "wal") == 2000
        server.kill()
    with Server(tmp_path / "db", config=config) as server:
        replayed = [line for line in server.log if "replayed" in line and "transactions" in line]
        assert replayed and replayed[0].startswith("strata: replayed 20 committed transactions"), server.log
        assert count(server, "wal") == 2000
        assert server.rows("SELECT data.message AS m FROM wal WHERE data._id = 'd0'") == [{"m": "v2"}]
        assert server.rows("SELECT count(*) AS n FROM wal WHERE data._id = 'd1999'") == [{"n": 1}]
