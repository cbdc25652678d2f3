"""Elasticsearch and OpenSearch in the log benchmark (bench/logs.py): the suite's own servers
(benchlib/systems/elasticsearch.py: Maven Central's integ-test-zip, one node, 1 GB heap, Java 17),
one index per mode, and the study's six queries in the query DSL.

What they are given, and why:
- These distributions carry no ingest-common module (no grok/dissect processor), so they cannot
  parse raw lines themselves. Structured mode sends them the documents Strata's `common` pipeline
  produced (`strata export access`): the same fields, already parsed — their ingest rate is
  therefore an upper bound of what a shipper-side parse plus the server would reach. Full-text
  mode sends `{message, timestamp}` from `strata export lines`, likewise.
- Mappings are explicit: strings as `keyword`, `status`/`bytes` as numbers, `timestamp` as `date`,
  `message` as `text` with the standard analyzer — the only one these distributions have (no
  analysis-common module, so no pattern tokenizer like Strata's and ClickHouse's, which split on
  every non-letter/digit). The full-text keyword queries are therefore written as an
  Elasticsearch user would (`match` of `user GET /path HTTP/1.1 200`, all terms required), and
  their counts, which tokenization changes (`HTTP/1.1` is one term `1.1` there; an IP is one
  term), are reported but not compared with the other systems' (`NOT_COMPARABLE`).
- Index settings as JSONBench's template and the logsdb mode do: 1 shard, no replica,
  best_compression, `_source` kept, index sorted by `timestamp` descending, request cache off.
  After the bulk load: refresh, then force-merge to one segment (the others merge too: Strata's
  `optimize`, ClickHouse's `OPTIMIZE FINAL`); the load time stops at the refresh.

Queries go over HTTP from this process and are timed here (round trip included, as Strata's
times include printing the rows). Cold: OS page cache dropped and the index caches cleared, same
server process. Peak RSS: VmHWM of the server JVM."""
import datetime as dt
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .procs import drop_page_cache, log, proc_peak_rss
from .systems.base import Context
from .throttled import throttled_ingest

BULK_BYTES = 5 << 20
BULK_CLIENTS = 2

# (mode, query index): answers tokenization changes, not compared across systems.
NOT_COMPARABLE = {("full-text", 1): "standard analyzer (no pattern tokenizer in this distribution)",
                  ("full-text", 5): "standard analyzer (no pattern tokenizer in this distribution)"}

INDEX_SETTINGS = {"number_of_shards": 1, "number_of_replicas": 0, "codec": "best_compression",
                  "refresh_interval": "-1", "requests": {"cache": {"enable": False}},
                  "sort": {"field": ["timestamp"], "order": ["desc"]}}

MAPPINGS = {
    "structured": {
        "dynamic_templates": [{"strings": {"match_mapping_type": "string", "mapping": {"type": "keyword"}}}],
        "properties": {"timestamp": {"type": "date"}, "status": {"type": "short"}, "bytes": {"type": "long"},
                       "ip": {"type": "keyword"}, "user": {"type": "keyword"}, "method": {"type": "keyword"},
                       "path": {"type": "keyword"}, "protocol": {"type": "keyword"}},
    },
    "full-text": {
        "dynamic": "false",
        "properties": {"timestamp": {"type": "date"}, "message": {"type": "text"}},
    },
}

INDEX_OF_MODE = {"structured": "access", "full-text": "lines"}


def index_definition(mode):
    return {"settings": {"index": dict(INDEX_SETTINGS)}, "mappings": MAPPINGS[mode]}


def queries(params, mode):
    """The study's six queries as (endpoint, body, kind): kind `count` answers a number, `hits`
    the number of documents returned."""
    lo, mid, hi = params["lo"], params["middle"], params["hi"]
    minute = 60
    fmt = lambda t: t.strftime("%Y-%m-%dT%H:%M:%SZ")  # noqa: E731
    half = {"range": {"timestamp": {"gte": fmt(lo), "lt": fmt(mid)}}}
    window = {"range": {"timestamp": {"gte": fmt(mid), "lt": fmt(mid + _seconds(minute))}}}
    last = {"range": {"timestamp": {"gte": fmt(hi - _seconds(minute))}}}
    if mode == "structured":
        keywords = [{"term": {"user": params["user"]}}, {"term": {"method": "GET"}},
                    {"term": {"path": params["path"]}}, {"term": {"protocol": "HTTP/1.1"}},
                    {"term": {"status": 200}}]
        user = [{"term": {"user": params["user"]}}, {"term": {"status": 200}}]
    else:
        words = f"{params['user']} GET {params['path']} HTTP/1.1 200"
        keywords = [{"match": {"message": {"query": words, "operator": "and"}}}]
        user = [{"match": {"message": {"query": f"{params['user']} 200", "operator": "and"}}}]
    count = lambda filters: ("_count", {"query": {"bool": {"filter": filters}}}, "count")  # noqa: E731
    rows = lambda flt, order: ("_search", {"query": {"bool": {"filter": [flt]}}, "size": 1000,  # noqa: E731
                                           "sort": [{"timestamp": order}], "track_total_hits": False}, "hits")
    return [
        ("_count", None, "count"),
        count(keywords),
        count([half]),
        rows(window, "asc"),
        rows(last, "desc"),
        count(user + [half]),
    ]


def _seconds(n):
    return dt.timedelta(seconds=n)


class SearchEngineLogs:
    """One Elasticsearch or OpenSearch server for the whole log benchmark."""

    def __init__(self, system_class, work):
        self.engine = system_class(Context(work=Path(work), strata_bin=Path("/nonexistent")))
        self.name = self.engine.name

    def check_runnable(self):
        self.engine.check_runnable()

    def start_fresh(self):
        self.engine._install()
        self.engine.start()

    def create_index(self, mode):
        index = INDEX_OF_MODE[mode]
        self.engine._check("index creation", *self.engine.request("PUT", f"/{index}", index_definition(mode)))
        status, body = self.engine.request("GET", f"/_cluster/health/{index}?wait_for_status=yellow&timeout=120s")
        if status != 200 or body.get("timed_out"):
            raise RuntimeError(f"{self.engine.label}: index {index} not ready: {json.dumps(body)[:500]}")
        return index

    def bulk_body(self, docs):
        return b"".join(b'{"index":{}}\n' + d + b"\n" for d in docs)

    def bulk(self, index, body):
        status, answer = self.engine.request("POST", f"/{index}/_bulk", body, "application/x-ndjson")
        self.engine._check("bulk", status, answer)
        if answer.get("errors"):
            first = next(i["index"]["error"] for i in answer["items"] if i.get("index", {}).get("error"))
            raise RuntimeError(f"{self.engine.label} rejected documents: {json.dumps(first)[:500]}")
        return len(answer["items"])

    def load(self, mode, docs_path):
        """Bulk-loads `docs_path` (NDJSON) from BULK_CLIENTS threads; then refresh (timed) and
        force-merge (not timed). Returns load seconds, documents, store bytes, server peak RSS."""
        index = self.create_index(mode)
        started = time.perf_counter()
        loaded = 0
        with ThreadPoolExecutor(BULK_CLIENTS) as pool:
            pending = []
            for body in _batches(docs_path, BULK_BYTES, self.bulk_body):
                pending.append(pool.submit(self.bulk, index, body))
                if len(pending) >= 2 * BULK_CLIENTS:
                    loaded += pending.pop(0).result()
            loaded += sum(f.result() for f in pending)
        self.engine._check("refresh", *self.engine.request("POST", f"/{index}/_refresh"))
        seconds = time.perf_counter() - started
        self.engine._check("force merge", *self.engine.request("POST", f"/{index}/_forcemerge?max_num_segments=1"))
        self.engine._check("refresh", *self.engine.request("POST", f"/{index}/_refresh"))
        count = self.engine._check("count", *self.engine.request("GET", f"/{index}/_count"))["count"]
        if count != loaded:
            raise RuntimeError(f"{self.engine.label}: {loaded} documents sent, {count} in {index}")
        stats = self.engine._check("stats", *self.engine.request("GET", f"/{index}/_stats/store"))
        return {"load_seconds": seconds, "documents": count,
                "bytes": stats["_all"]["primaries"]["store"]["size_in_bytes"],
                "load_peak_rss": proc_peak_rss(self.engine.server_pid()),
                "version": f"{self.engine.label} {self.engine.version}"}

    def run_query(self, mode, query, runs):
        """(cold seconds, hot seconds, answer)."""
        endpoint, body, kind = query
        index = INDEX_OF_MODE[mode]
        drop_page_cache()
        self.engine._check("cache clear", *self.engine.request("POST", f"/{index}/_cache/clear"))
        times, answer = [], None
        for _ in range(runs + 1):
            started = time.perf_counter()
            status, result = self.engine.request("POST" if body else "GET", f"/{index}/{endpoint}", body)
            times.append(time.perf_counter() - started)
            self.engine._check(endpoint, status, result)
            answer = result["count"] if kind == "count" else len(result["hits"]["hits"])
        return times[0], min(times[1:]), answer

    def stop(self):
        self.engine.cleanup()


def _batches(path, limit, render):
    docs, size = [], 0
    with open(path, "rb") as f:
        for line in f:
            line = line.rstrip(b"\r\n")
            if not line:
                continue
            docs.append(line)
            size += len(line)
            if size >= limit:
                yield render(docs)
                docs, size = [], 0
    if docs:
        yield render(docs)


def run_search_engine(system_class, work, docs_by_mode, params, runs, throttle=None):
    """Loads both modes into one fresh server and times the six queries; with `throttle`
    (lines/s, seconds), first measures a throttled bulk ingest on a fresh server per mode."""
    engine = SearchEngineLogs(system_class, work)
    engine.check_runnable()
    results = {}
    try:
        if throttle:
            for mode, docs_path in docs_by_mode.items():
                engine.start_fresh()
                index = engine.create_index(mode)
                results.setdefault(mode, {})["throttled"] = throttled_ingest(
                    lambda lines, index=index: engine.bulk(index, engine.bulk_body(lines)),
                    docs_path, throttle[0], throttle[1], engine.engine.server_pid())
                engine.engine.stop()
        engine.start_fresh()
        for mode, docs_path in docs_by_mode.items():
            log(f"{engine.name}: loading {mode}")
            results.setdefault(mode, {}).update(engine.load(mode, docs_path))
        for mode in docs_by_mode:
            timings = []
            for query in queries(params, mode):
                cold, hot, answer = engine.run_query(mode, query, runs)
                timings.append({"query": json.dumps(query[1]), "cold": cold, "hot": hot, "answer": answer})
            results[mode]["queries"] = timings
    finally:
        engine.stop()
    return results

