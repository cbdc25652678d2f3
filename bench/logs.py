"""The log benchmark of issue 15 (the GreptimeDB/ClickHouse/Elasticsearch study, benchmarks.md §3):
nginx access-log lines generated here (`strata generate nginx`, the study's format), in both modes —

- structured: each line parsed into fields (Strata: `--pipeline common`, sorted by time;
  ClickHouse: MergeTree with the study's key (user, path, status) and a minmax index on time,
  loaded with its own Regexp input format);
- full-text: the line as `message` with its time and a text index (Strata: `--pipeline text`;
  ClickHouse 26.9 through chdb: `INDEX … TYPE text(tokenizer = splitByNonAlpha)`);

and per system and mode: unthrottled ingest (lines/s, peak RSS of the loading process), bytes on
disk after merging as a share of the raw file, and the study's six queries — count all; keyword
match on user, method, path, protocol and status; count over the first half of the time range; the
minute in the middle, 1000 rows; the last minute, 1000 rows newest first; keyword + time range —
cold (a new process after the OS page cache is dropped, when run as root) and hot (the fastest of
`--runs` runs in one process). Counts must agree between systems in each mode (the script fails
otherwise).

Elasticsearch and OpenSearch (benchlib/logsearch.py: the suite's servers, explicit mappings, the
queries in the query DSL) are given the documents Strata's pipelines produced, since their
distributions here cannot parse lines; that and their other settings are described there.

Throttled ingest (`--throttle-rate` lines/s for `--throttle-seconds`, 0 to skip): a fresh
`strata serve` receives the raw lines over HTTP (`POST /v1/ingest/TABLE?pipeline=…`), and a
fresh Elasticsearch/OpenSearch the documents over `_bulk`, in batches every 50 ms; the server's
CPU % and peak RSS are reported (Strata's binary is dropped from the page cache before its server
starts: how its pages came into the cache changes its RSS, ADR 0013). ClickHouse runs embedded
here (chdb) and has no server to send to.

`--text-postings`: Strata's full-text table keeps every token's rows in its text index as well
(`strata ingest --text-postings`, ADR 0019), which answers keyword counts from the postings.
`--structured-sort-key user,path,status,timestamp`: Strata's structured table sorted as
ClickHouse's is (then by time) instead of by time alone — keyword lookups become key ranges,
time windows lose their order; the throttled ingest is unchanged.
`--structured-keyword-index user,method,path,protocol,status`: Strata's structured table keeps,
for those paths, each whole value's rows (`strata ingest --keyword-index`, ADR 0025), which
answers the keyword queries' equalities and counts from the postings; the table stays in time
order. The throttled ingest is given the same paths.

Usage:
  bench/.venv/bin/python bench/logs.py --strata-bin BIN [--lines 1000000] [--runs 3]
      [--systems strata,clickhouse,elasticsearch,opensearch] [--throttle-rate 20000]
      [--throttle-seconds 60] [--text-postings] [--structured-sort-key PATHS]
      [--structured-keyword-index PATHS] [--work DIR] [--out DIR]
Prints a table and writes OUT/results.json.
"""
import argparse
import datetime as dt
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from benchlib.logsearch import NOT_COMPARABLE, run_search_engine  # noqa: E402
from benchlib.procs import dir_bytes, drop_page_cache, evict_from_page_cache, log, run_measured  # noqa: E402
from benchlib.systems.base import NotRunnable  # noqa: E402
from benchlib.systems.elasticsearch import Elasticsearch, OpenSearch  # noqa: E402
from benchlib.throttled import throttled_ingest  # noqa: E402
from server_load import StrataServer  # noqa: E402

TIME_RE = re.compile(r"Time:\s*([0-9.]+)\s*ms")
SEARCH_ENGINES = ("elasticsearch", "opensearch")
MODES = {"structured": ("access", "common"), "full-text": ("lines", "text")}
QUERY_NAMES = ["count", "keywords", "half range", "middle minute", "last minute", "keyword+range"]
# Queries whose answer is a count (compared between systems); the others return 1000 rows.
COUNTED = {0, 1, 2, 5}


def strata(binary, data_dir, *args):
    return run_measured([binary, "--data-dir", data_dir, *args])


def parameters(binary, data_dir):
    """The keyword values and time bounds, read from the loaded structured table: the most frequent
    (user, path) with method GET, HTTP/1.1 and status 200; the time range and its middle."""
    proc = strata(binary, data_dir, "query", "--format", "ndjson",
                  "SELECT data.user AS user, data.path AS path, count(*) AS n FROM access "
                  "WHERE data.user IS NOT NULL AND data.method = 'GET' AND data.protocol = 'HTTP/1.1' "
                  "AND data.status = 200 GROUP BY 1, 2 ORDER BY 3 DESC, 1, 2 LIMIT 1").check("parameters")
    top = json.loads(proc.stdout.decode().splitlines()[0])
    proc = strata(binary, data_dir, "query", "--format", "ndjson",
                  "SELECT min(data.timestamp) AS lo, max(data.timestamp) AS hi FROM access").check("range")
    bounds = json.loads(proc.stdout.decode().splitlines()[0])
    lo = dt.datetime.fromisoformat(bounds["lo"].replace("Z", "+00:00"))
    hi = dt.datetime.fromisoformat(bounds["hi"].replace("Z", "+00:00"))
    middle = lo + (hi - lo) / 2
    middle = middle.replace(microsecond=0)
    return {"user": top["user"], "path": top["path"], "lo": lo, "hi": hi, "middle": middle}


def iso(t, millis):
    text = t.strftime("%Y-%m-%dT%H:%M:%S")
    return text + (".000Z" if millis else "Z")


def strata_queries(p, mode):
    millis = mode == "full-text"
    lo, mid, hi = p["lo"], p["middle"], p["hi"]
    minute = dt.timedelta(minutes=1)
    half = f"data.timestamp >= '{iso(lo, millis)}' AND data.timestamp < '{iso(mid, millis)}'"
    window = f"data.timestamp >= '{iso(mid, millis)}' AND data.timestamp < '{iso(mid + minute, millis)}'"
    last = f"data.timestamp >= '{iso(hi - minute, millis)}'"
    if mode == "structured":
        table = "access"
        keywords = (f"data.user = '{p['user']}' AND data.method = 'GET' AND data.path = '{p['path']}' "
                    "AND data.protocol = 'HTTP/1.1' AND data.status = 200")
        user = f"data.user = '{p['user']}' AND data.status = 200"
    else:
        table = "lines"
        tokens = " AND ".join(tokens_of(p))
        keywords = f"matches(data.message, '{tokens}')"
        user = f"matches(data.message, '{p['user']} AND 200')"
    return [
        f"SELECT count(*) FROM {table}",
        f"SELECT count(*) FROM {table} WHERE {keywords}",
        f"SELECT count(*) FROM {table} WHERE {half}",
        f"SELECT data FROM {table} WHERE {window} ORDER BY data.timestamp LIMIT 1000",
        f"SELECT data FROM {table} WHERE {last} ORDER BY data.timestamp DESC LIMIT 1000",
        f"SELECT count(*) FROM {table} WHERE {user} AND {half}",
    ]


def tokens_of(p):
    """The keyword query's tokens: user, GET, the path's words, HTTP/1.1, 200 (letters and digits,
    as both systems' tokenizers split them)."""
    words = [p["user"], "GET", *re.findall(r"[A-Za-z0-9]+", p["path"]), "HTTP", "1", "200"]
    seen = []
    for w in words:
        if w not in seen:
            seen.append(w)
    return seen


def clickhouse_queries(p, mode):
    lo, mid, hi = p["lo"], p["middle"], p["hi"]
    minute = dt.timedelta(minutes=1)
    fmt = "%Y-%m-%d %H:%M:%S"
    half = f"ts >= '{lo.strftime(fmt)}' AND ts < '{mid.strftime(fmt)}'"
    window = f"ts >= '{mid.strftime(fmt)}' AND ts < '{(mid + minute).strftime(fmt)}'"
    last = f"ts >= '{(hi - minute).strftime(fmt)}'"
    if mode == "structured":
        table = "access"
        keywords = (f"user = '{p['user']}' AND method = 'GET' AND path = '{p['path']}' "
                    "AND protocol = 'HTTP/1.1' AND status = 200")
        user = f"user = '{p['user']}' AND status = 200"
    else:
        table = "lines"
        keywords = "hasAllTokens(message, [" + ", ".join(f"'{t}'" for t in tokens_of(p)) + "])"
        user = f"hasAllTokens(message, ['{p['user']}', '200'])"
    return [
        f"SELECT count() FROM {table}",
        f"SELECT count() FROM {table} WHERE {keywords}",
        f"SELECT count() FROM {table} WHERE {half}",
        f"SELECT * FROM {table} WHERE {window} ORDER BY ts LIMIT 1000",
        f"SELECT * FROM {table} WHERE {last} ORDER BY ts DESC LIMIT 1000",
        f"SELECT count() FROM {table} WHERE {user} AND {half}",
    ]


def first_value(row):
    return next(iter(row.values())) if row else None


def time_strata(binary, data_dir, sql, runs):
    """(cold seconds, hot seconds, rows of the last run): a new process after dropping the page
    cache for the cold run, then `runs` runs in one process for the hot one."""
    drop_page_cache()
    cold = strata(binary, data_dir, "query", "--format", "ndjson", "--timing", sql).check("strata query")
    cold_seconds = float(TIME_RE.findall(cold.stderr.decode())[-1]) / 1000
    script = "; ".join([sql] * runs)
    hot = strata(binary, data_dir, "query", "--format", "ndjson", "--timing", script).check("strata query")
    times = [float(t) / 1000 for t in TIME_RE.findall(hot.stderr.decode())]
    rows = [json.loads(line) for line in hot.stdout.decode().splitlines() if line.strip()]
    per_run = len(rows) // runs if runs else 0
    return cold_seconds, min(times), rows[len(rows) - per_run:]


def run_strata(binary, work, log_file, params_out, runs, throttle, text_postings=False,
               structured_sort_key=None, structured_keyword_index=None):
    data_dir = work / "strata"
    shutil.rmtree(data_dir, ignore_errors=True)
    results = {}
    for mode, (table, pipeline) in MODES.items():
        postings = text_postings and mode == "full-text"
        extra = ["--text-postings"] if postings else []
        if structured_sort_key and mode == "structured":
            extra = ["--sort-key", structured_sort_key]
        keywords = structured_keyword_index if mode == "structured" else None
        if keywords:
            extra += ["--keyword-index", keywords]
        load = strata(binary, data_dir, "ingest", table, "--pipeline", pipeline, *extra,
                      log_file).check("strata ingest")
        optimize = strata(binary, data_dir, "optimize", table).check("strata optimize")
        results[mode] = {"load_seconds": load.seconds, "load_peak_rss": load.peak_rss,
                         "optimize_seconds": optimize.seconds,
                         "bytes": dir_bytes(data_dir / table)}
        if throttle:
            results[mode]["throttled"] = strata_throttled(binary, work / "strata-served", table, pipeline,
                                                          log_file, throttle, postings, keywords)
    params_out.update(parameters(binary, data_dir))
    for mode in results:
        timings = []
        for sql in strata_queries(params_out, mode):
            cold, hot, rows = time_strata(binary, data_dir, sql, runs)
            answer = first_value(rows[0]) if rows and len(rows) == 1 else len(rows)
            timings.append({"sql": sql, "cold": cold, "hot": hot, "answer": answer})
        results[mode]["queries"] = timings
    return results


def strata_throttled(binary, data_dir, table, pipeline, log_file, throttle, text_postings=False,
                     keyword_index=None):
    """Raw lines at the throttled rate into a fresh `strata serve` over HTTP, its binary read back
    from disk (not from the pages the linker wrote) so that its resident memory compares run to
    run."""
    shutil.rmtree(data_dir, ignore_errors=True)
    evict_from_page_cache(binary)
    server = StrataServer(binary, data_dir)
    query = f"pipeline={pipeline}" + ("&text_postings=true" if text_postings else "")
    if keyword_index:
        query += f"&keyword_index={keyword_index}"
    try:
        def send(lines):
            answer, _ = server.post(f"/v1/ingest/{table}?{query}", b"\n".join(lines) + b"\n")
            if answer.get("accepted") != len(lines):
                raise RuntimeError(f"strata serve accepted {answer.get('accepted')} of {len(lines)} lines: {answer}")
        return throttled_ingest(send, log_file, throttle[0], throttle[1], server.proc.pid)
    finally:
        server.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


def export_documents(binary, data_dir, work):
    """Each mode's table exported as NDJSON: the documents the search engines are sent."""
    paths = {}
    for mode, (table, _) in MODES.items():
        path = work / f"{table}.ndjson"
        with open(path, "wb") as out:
            subprocess.run([binary, "--data-dir", data_dir, "export", table], stdout=out, check=True)
        paths[mode] = path
    return paths


CLICKHOUSE_WORKER = r"""
import json, sys, time, resource
from chdb import session
job = json.loads(sys.argv[1])
s = session.Session(job["dir"])
out = {}
if job["action"] == "load":
    started = time.perf_counter()
    for ddl in job["ddl"]:
        s.query(ddl)
    s.query(job["insert"])
    out["load_seconds"] = time.perf_counter() - started
    s.query(f"OPTIMIZE TABLE {job['table']} FINAL")
    out["bytes"] = int(s.query(f"SELECT sum(bytes_on_disk) FROM system.parts WHERE active AND table = '{job['table']}'", "CSV").bytes().decode().strip() or 0)
    out["version"] = s.query("SELECT version()", "CSV").bytes().decode().strip().strip('"')
else:
    times = []
    for _ in range(job["runs"]):
        started = time.perf_counter()
        result = s.query(job["sql"], "JSONEachRow")
        times.append(time.perf_counter() - started)
    rows = [json.loads(l) for l in result.bytes().decode().splitlines() if l.strip()]
    out["times"] = times
    out["rows"] = len(rows)
    out["first"] = rows[0] if rows else None
out["peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps(out))
"""


def clickhouse(job):
    proc = run_measured([sys.executable, "-c", CLICKHOUSE_WORKER, json.dumps(job)])
    proc.check("chdb worker")
    return json.loads(proc.stdout.decode().strip().splitlines()[-1])


def run_clickhouse(work, log_file, params, runs):
    data_dir = work / "clickhouse"
    shutil.rmtree(data_dir, ignore_errors=True)
    data_dir.mkdir(parents=True)
    regexp = r'^(\\S+) (\\S+) (\\S+) \\[([^\\]]+)\\] \"(\\S+) (\\S+) (\\S+)\" (\\d+) (\\d+)$'
    loads = {
        "structured": {
            "table": "access",
            "ddl": ["CREATE TABLE access (ip String, user String, ts DateTime, method LowCardinality(String), "
                    "path String, protocol LowCardinality(String), status UInt16, bytes UInt64, "
                    "INDEX ts_index ts TYPE minmax GRANULARITY 1) "
                    "ENGINE = MergeTree ORDER BY (user, path, status)"],
            "insert": "INSERT INTO access SELECT ip, user, parseDateTime(ts, '%d/%b/%Y:%H:%i:%s %z'), method, "
                      "path, protocol, status, bytes FROM file('" + str(log_file) + "', 'Regexp', "
                      "'ip String, ident String, user String, ts String, method String, path String, "
                      "protocol String, status UInt16, bytes UInt64') SETTINGS format_regexp = '"
                      + regexp + "', format_regexp_skip_unmatched = 0",
        },
        "full-text": {
            "table": "lines",
            "ddl": ["CREATE TABLE lines (ts DateTime, message String, "
                    "INDEX message_index message TYPE text(tokenizer = splitByNonAlpha) GRANULARITY 1) "
                    "ENGINE = MergeTree ORDER BY ts"],
            "insert": "INSERT INTO lines SELECT parseDateTime(extract(line, '\\\\[([^\\\\]]+)\\\\]'), "
                      "'%d/%b/%Y:%H:%i:%s %z'), line FROM file('" + str(log_file) + "', 'LineAsString', 'line String')",
        },
    }
    results = {}
    for mode, load in loads.items():
        r = clickhouse({"action": "load", "dir": str(data_dir), **load})
        results[mode] = {"load_seconds": r["load_seconds"], "load_peak_rss": r["peak_rss"],
                         "bytes": r["bytes"], "version": r["version"]}
    for mode in results:
        timings = []
        for sql in clickhouse_queries(params, mode):
            drop_page_cache()
            cold = clickhouse({"action": "query", "dir": str(data_dir), "sql": sql, "runs": 1})
            hot = clickhouse({"action": "query", "dir": str(data_dir), "sql": sql, "runs": runs + 1})
            answer = first_value(hot["first"]) if hot["rows"] == 1 else hot["rows"]
            timings.append({"sql": sql, "cold": cold["times"][0], "hot": min(hot["times"][1:] or hot["times"]),
                            "answer": answer})
        results[mode]["queries"] = timings
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--strata-bin", required=True)
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--systems", default="strata,clickhouse,elasticsearch,opensearch")
    parser.add_argument("--throttle-rate", type=int, default=20_000, help="lines/s of the throttled HTTP ingest")
    parser.add_argument("--throttle-seconds", type=float, default=60, help="0 skips the throttled ingest")
    parser.add_argument("--text-postings", action="store_true",
                        help="Strata's full-text table keeps token postings (strata ingest --text-postings)")
    parser.add_argument("--structured-sort-key",
                        help="Strata's structured table sorted by these paths instead of its time column "
                             "(e.g. user,path,status,timestamp, ClickHouse's key then time)")
    parser.add_argument("--structured-keyword-index",
                        help="Strata's structured table keeps keyword postings of these paths "
                             "(e.g. user,method,path,protocol,status; strata ingest --keyword-index)")
    parser.add_argument("--work", default=str(BENCH / "work" / "logs"))
    parser.add_argument("--out", default=str(BENCH / "results" / "logs"))
    args = parser.parse_args()
    work, out = Path(args.work), Path(args.out)
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]

    log_file = work / "access.log"
    subprocess.run([args.strata_bin, "generate", "nginx", "--docs", str(args.lines), "--seed", "1",
                    "-o", str(log_file)], check=True, capture_output=True)
    raw = log_file.stat().st_size
    params = {}
    throttle = (args.throttle_rate, args.throttle_seconds) if args.throttle_seconds > 0 else None
    results = {"lines": args.lines, "raw_bytes": raw, "runs": args.runs, "systems": {},
               "cold_runs_drop_page_cache": os.geteuid() == 0, "throttle": throttle, "not_measured": {},
               "strata_text_postings": args.text_postings,
               "strata_structured_sort_key": args.structured_sort_key,
               "strata_structured_keyword_index": args.structured_keyword_index}
    results["systems"]["strata"] = run_strata(args.strata_bin, work, log_file, params, args.runs, throttle,
                                              args.text_postings, args.structured_sort_key,
                                              args.structured_keyword_index)
    if "clickhouse" in systems:
        try:
            import chdb  # noqa: F401
            results["systems"]["clickhouse"] = run_clickhouse(work, log_file, params, args.runs)
        except ImportError:
            results["not_measured"]["clickhouse"] = "chdb is not installed (pip install -r bench/requirements.txt)"
    engines = [cls for cls in (Elasticsearch, OpenSearch) if cls.name in systems]
    if engines:
        docs = export_documents(args.strata_bin, work / "strata", work)
        for cls in engines:
            log(f"{cls.name}: starting")
            try:
                results["systems"][cls.name] = run_search_engine(cls, work / cls.name, docs, params,
                                                                 args.runs, throttle)
            except NotRunnable as e:
                results["not_measured"][cls.name] = str(e)
        for path in docs.values():
            path.unlink()
    results["parameters"] = {k: (v.isoformat() if isinstance(v, dt.datetime) else v) for k, v in params.items()}

    # Answers must agree between systems, mode by mode.
    disagreements = []
    results["not_compared"] = {f"{name} {mode} {QUERY_NAMES[i]}": why for (mode, i), why in NOT_COMPARABLE.items()
                               for name in results["systems"] if name in SEARCH_ENGINES}
    for mode in ("structured", "full-text"):
        answers = {name: [q["answer"] for q in r[mode]["queries"]] for name, r in results["systems"].items()}
        for i in range(len(QUERY_NAMES)):
            seen = {name: a[i] for name, a in answers.items()
                    if not (name in SEARCH_ENGINES and (mode, i) in NOT_COMPARABLE)}
            if len(set(map(str, seen.values()))) > 1:
                disagreements.append(f"{mode} {QUERY_NAMES[i]}: {seen}")
    results["disagreements"] = disagreements

    (out / "results.json").write_text(json.dumps(results, indent=2, default=str))
    print_table(results)
    if disagreements:
        print("answers differ:\n  " + "\n  ".join(disagreements))
        sys.exit(1)


def print_table(results):
    raw, lines = results["raw_bytes"], results["lines"]
    print(f"\n{lines:,} nginx lines, {raw / 1e6:.1f} MB raw; hot = fastest of {results['runs']} runs, "
          f"cold = new process{' after dropping the page cache' if results['cold_runs_drop_page_cache'] else ''}")
    for mode in ("structured", "full-text"):
        print(f"\n{mode}")
        header = f"{'':<22}" + "".join(f"{name:>26}" for name in results["systems"])
        print(header)
        row = lambda label, f: print(f"{label:<22}" + "".join(f"{f(r[mode]):>26}" for r in results["systems"].values()))
        row("ingest lines/s", lambda r: f"{lines / r['load_seconds']:,.0f}")
        row("ingest peak RSS MB", lambda r: f"{r['load_peak_rss'] / 1e6:,.0f}")
        row("disk % of raw", lambda r: f"{100 * r['bytes'] / raw:.1f}")
        if results.get("throttle"):
            rate = f"{results['throttle'][0] / 1000:g}k/s"
            row(f"{rate} HTTP CPU %", lambda r: f"{r['throttled']['cpu_percent']:.0f}" if "throttled" in r else "—")
            row(f"{rate} HTTP RSS MB", lambda r: f"{r['throttled']['peak_rss'] / 1e6:,.0f}" if "throttled" in r else "—")
        for i, name in enumerate(QUERY_NAMES):
            row(f"{name} ms", lambda r, i=i: f"{r['queries'][i]['cold'] * 1000:.0f} / {r['queries'][i]['hot'] * 1000:.1f}")
    print("\n(query cells: cold / hot ms; HTTP: server CPU % of one core and peak RSS while ingesting at the "
          "throttled rate — ClickHouse runs embedded, '—')")
    for name, why in results["not_measured"].items():
        print(f"{name}: not measured ({why})")
    for what, why in results.get("not_compared", {}).items():
        print(f"{what}: answer not compared with the others ({why})")


if __name__ == "__main__":
    main()
