"""The server workload (issue 13): `strata serve` under concurrent HTTP ingest and pgbench queries,
and the same pgbench script against PostgreSQL on the same documents. Loopback only, bounded in
time. Prints a markdown table and writes results.json.

Steps, all on the same JSONBench (Bluesky) dataset:
1. embedded: `strata ingest` of the whole file into a fresh directory (documents/s);
2. HTTP ingest alone: the same file split among --ingest-clients clients posting batches of
   --batch documents to a fresh server (documents/s, request latency percentiles);
3. Q1 idle: pgbench (-M prepared, JSONBench Q1 as a custom script) against that server with
   nothing else running;
4. mixed: for --seconds, the ingest clients keep posting batches (cycling over the file) while
   pgbench runs Q1 with --query-clients clients: both rates, latency percentiles, the server's
   peak RSS, merges done;
5. PostgreSQL: the dataset in a jsonb table (the suite's loader and DDL), the same pgbench
   script with PostgreSQL's Q1, same clients and seconds.

    bench/server_load.sh --strata-bin target/release/strata --scale 1m --seconds 30
"""
import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from benchlib import datasets  # noqa: E402
from benchlib.procs import log, proc_peak_rss  # noqa: E402
from benchlib.systems.base import Context, NotRunnable  # noqa: E402
from benchlib.systems.postgres import Postgres  # noqa: E402
from benchlib.strata_cli import serve_ports  # noqa: E402
from benchlib.workloads import WORKLOADS  # noqa: E402



def percentile(values, p):
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def latency_summary(seconds):
    ms = [s * 1000 for s in seconds]
    return {"count": len(ms), "p50_ms": percentile(ms, 50), "p95_ms": percentile(ms, 95),
            "p99_ms": percentile(ms, 99)}


class StrataServer:
    def __init__(self, strata_bin, data_dir, config=None):
        self.data_dir = Path(data_dir)
        args = [str(strata_bin), "--data-dir", str(data_dir), "serve", "--http", "127.0.0.1:0",
                "--pg", "127.0.0.1:0"]
        if config:
            path = self.data_dir.parent / "server.toml"
            path.write_text(config)
            args += ["--config", str(path)]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        ports = serve_ports(self.proc)
        self.http, self.pg = ports["HTTP"], ports["PostgreSQL"]
        threading.Thread(target=lambda: [None for _ in self.proc.stderr], daemon=True).start()

    def post(self, path, body, raw=False):
        """POSTs `body`; a 503 (the server's queue is full) is retried after its Retry-After, as
        a shipper does. Returns the answer and how many times the request was refused."""
        refused = 0
        while True:
            req = urllib.request.Request(f"http://127.0.0.1:{self.http}{path}", data=body, method="POST")
            try:
                with urllib.request.urlopen(req, timeout=600) as resp:
                    answer = resp.read()
                    return (answer if raw else json.loads(answer)), refused
            except urllib.error.HTTPError as e:
                if e.code != 503 or refused >= 600:
                    raise
                refused += 1
                time.sleep(float(e.headers.get("Retry-After") or 1))

    def get(self, path):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http}{path}", timeout=60) as resp:
            return resp.read()

    def peak_rss(self):
        return proc_peak_rss(self.proc.pid)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return None


def batches_of(path, batch):
    """The file as byte strings of `batch` lines each."""
    out, current = [], []
    with open(path, "rb") as f:
        for line in f:
            current.append(line)
            if len(current) == batch:
                out.append(b"".join(current))
                current = []
    if current:
        out.append(b"".join(current))
    return out


def http_ingest(server, table, batches, clients, query="", stop=None):
    """Posts `batches` from `clients` threads; with `stop`, cycles until it is set. Returns
    (documents, seconds, request latencies, requests that went through the WAL, 503 refusals)."""
    latencies, docs, lock = [], [0, 0, 0], threading.Lock()
    next_batch = [0]

    def client():
        while True:
            with lock:
                i = next_batch[0]
                next_batch[0] += 1
            if stop is None and i >= len(batches):
                return
            if stop is not None and stop.is_set():
                return
            body = batches[i % len(batches)]
            started = time.perf_counter()
            answer, refused = server.post(f"/v1/ingest/{table}{query}", body)
            elapsed = time.perf_counter() - started
            with lock:
                latencies.append(elapsed)
                docs[0] += answer["accepted"]
                docs[1] += "wal_seq" in answer  # went through the write-ahead log
                docs[2] += refused

    started = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return docs[0], time.perf_counter() - started, latencies, docs[1], docs[2]


def http_ingest_until_visible(server, table, batches, sort_key, args):
    """The HTTP-alone phase on a fresh server: rate until every acknowledged document is visible."""
    # The first request creates the table with its sort key (such a request is written straight
    # into parts); the rest are what clients send day to day.
    docs, seconds, latencies, through_wal, refused = http_ingest(server, table, batches[:1], 1,
                                                                 query=f"?sort_key={sort_key}")
    more = http_ingest(server, table, batches[1:], args.ingest_clients, query=f"?wait={args.wait}")
    docs, seconds, latencies, through_wal, refused = (
        docs + more[0], seconds + more[1], latencies + more[2], through_wal + more[3], refused + more[4])
    # The rate counts until every acknowledged document is visible to queries (with wait=durable
    # the last ones are still on their way into parts at the last answer).
    visible_after = seconds + wait_until_visible(server, table, docs)
    return {"documents": docs, "seconds": visible_after, "docs_per_s": docs / visible_after,
            "acknowledged_seconds": seconds, "requests": latency_summary(latencies),
            "through_wal": through_wal, "refused": refused}


def wait_until_visible(server, table, documents, timeout=600):
    """Seconds until `SELECT count(*)` over `table` reaches `documents`."""
    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        answer, _ = server.post("/v1/query?format=ndjson", f"SELECT count(*) AS n FROM {table}".encode(), raw=True)
        if json.loads(answer)["n"] >= documents:
            return time.perf_counter() - started
        time.sleep(0.02)
    raise RuntimeError(f"{documents:,} documents were not visible after {timeout} s")


def merges_done(server):
    metrics = server.get("/metrics").decode()
    done = re.search(r"^strata_merges_total (\d+)$", metrics, re.M)
    return int(done.group(1)) if done else 0


def wait_for_merges(server, quiet=3.0, timeout=120):
    """Until no merge has finished for `quiet` seconds (the server shows no running merges)."""
    deadline = time.monotonic() + timeout
    last, since = merges_done(server), time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - since < quiet:
        time.sleep(0.5)
        now = merges_done(server)
        if now != last:
            last, since = now, time.monotonic()


def pgbench(port, user, dbname, sql, clients, seconds, workdir, env=None):
    """pgbench -M prepared with `sql` as a custom script; per-transaction latencies from its log."""
    run_dir = Path(tempfile.mkdtemp(dir=workdir))
    script = run_dir / "q.sql"
    script.write_text(sql.strip().rstrip(";") + ";\n")
    cmd = ["pgbench", "-n", "-M", "prepared", "-f", str(script), "-c", str(clients), "-j", str(clients),
           "-T", str(seconds), "-l", "--log-prefix", str(run_dir / "log"),
           "-h", "127.0.0.1", "-p", str(port), "-U", user, dbname]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=seconds + 600)
    if proc.returncode != 0:
        raise RuntimeError(f"pgbench failed: {proc.stderr[-2000:]}")
    # pgbench's per-transaction `time` field reads 0 for many fast transactions (it reuses a cached
    # clock); its completion timestamps are exact. A client sends its next statement as soon as
    # the previous one ends, so a latency is the gap between a client's consecutive completions
    # (its first one: the logged time).
    finished = {}
    for log_file in run_dir.glob("log*"):
        for line in log_file.read_text().splitlines():
            fields = line.split()
            if len(fields) >= 6:
                finished.setdefault(fields[0], []).append(
                    (int(fields[1]), int(fields[2]), int(fields[4]) * 1_000_000 + int(fields[5])))
    latencies = []
    for transactions in finished.values():
        transactions.sort()
        previous = None
        for _, logged, done in transactions:
            latencies.append((logged if previous is None else done - previous) / 1e6)
            previous = done
    tps = re.search(r"tps = ([\d.]+)", proc.stdout)
    shutil.rmtree(run_dir, ignore_errors=True)
    return {"tps": float(tps.group(1)) if tps else None, "clients": clients, "seconds": seconds,
            **latency_summary(latencies)}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--strata-bin", default=str(HERE.parent / "target" / "release" / "strata"))
    p.add_argument("--scale", default="1m", help="JSONBench dataset size (100k, 1m, ...)")
    p.add_argument("--seconds", type=int, default=30, help="length of the mixed and PostgreSQL runs")
    p.add_argument("--idle-seconds", type=int, default=10)
    p.add_argument("--ingest-clients", type=int, default=2)
    p.add_argument("--query-clients", type=int, default=4)
    p.add_argument("--batch", type=int, default=5_000,
                   help="documents per HTTP ingest request (5,000 Bluesky events are ~2.4 MB: through the WAL)")
    p.add_argument("--wait", choices=("visible", "durable"), default="visible",
                   help="when ingest requests are answered: once queries see them, or once they are in the WAL")
    p.add_argument("--ingest-rounds", type=int, default=3,
                   help="rounds of embedded and HTTP ingest taking turns (medians are reported)")
    p.add_argument("--no-postgres", action="store_true")
    p.add_argument("--work", default=str(HERE / "work"))
    p.add_argument("--out", default=str(HERE / "results" / "server"))
    args = p.parse_args(argv)

    workload = WORKLOADS["jsonbench"]
    work = Path(args.work)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dataset = datasets.prepare(workload, args.scale, args.strata_bin, work)
    sort_key = ",".join(workload.sort_key)
    q1_strata = workload.queries_for("strata")["Q1"]
    q1_postgres = workload.queries_for("postgres")["Q1"]
    results = {"dataset": dataset.as_json(), "args": vars(args)}
    scratch = Path(tempfile.mkdtemp(prefix="strata-server-load-", dir=work))
    try:
        batches = batches_of(dataset.path, args.batch)
        # The embedded and the HTTP ingest take turns, round after round, and the ratio is the
        # median of the rounds' ratios: the machine is shared and noisy.
        rounds, server = [], None
        try:
            for round_number in range(args.ingest_rounds):
                log(f"round {round_number + 1}/{args.ingest_rounds}, embedded: strata ingest of {dataset.docs:,} documents")
                embedded_dir = scratch / "embedded"
                shutil.rmtree(embedded_dir, ignore_errors=True)
                started = time.perf_counter()
                subprocess.run([args.strata_bin, "--data-dir", str(embedded_dir), "ingest", workload.table,
                                "--sort-key", sort_key, str(dataset.path)], check=True, capture_output=True)
                embedded = {"documents": dataset.docs, "seconds": time.perf_counter() - started}
                embedded["docs_per_s"] = dataset.docs / embedded["seconds"]
                if server is not None:
                    results["server_exit"] = server.stop()
                    shutil.rmtree(server.data_dir, ignore_errors=True)
                server = StrataServer(args.strata_bin, scratch / f"served-{round_number}")
                log(f"round {round_number + 1}/{args.ingest_rounds}, HTTP ingest: {len(batches)} requests of "
                    f"{args.batch:,} documents from {args.ingest_clients} clients")
                http = http_ingest_until_visible(server, workload.table, batches, sort_key, args)
                rounds.append({"embedded": embedded, "http_ingest": http,
                               "ratio": http["docs_per_s"] / embedded["docs_per_s"]})
            results["ingest_rounds"] = rounds
            results["embedded"] = {"documents": dataset.docs,
                                   "docs_per_s": statistics.median(r["embedded"]["docs_per_s"] for r in rounds)}
            results["http_ingest"] = dict(rounds[-1]["http_ingest"],
                                          docs_per_s=statistics.median(r["http_ingest"]["docs_per_s"] for r in rounds),
                                          ratio=statistics.median(r["ratio"] for r in rounds))
            # Idle is measured with one client and with as many clients as the mixed run: with more
            # clients than cores a query also waits for the other queries, which is not ingest's doing.
            log(f"Q1 idle: pgbench 1 client, {args.idle_seconds} s")
            results["q1_idle"] = pgbench(server.pg, "strata", "strata", q1_strata, 1, args.idle_seconds, scratch)
            log(f"Q1 idle: pgbench {args.query_clients} clients, {args.idle_seconds} s")
            results["q1_idle_clients"] = pgbench(server.pg, "strata", "strata", q1_strata, args.query_clients,
                                                 args.idle_seconds, scratch)
            log(f"mixed: {args.ingest_clients} ingest clients + pgbench {args.query_clients} clients, {args.seconds} s")
            stop = threading.Event()
            ingest_result = {}

            def ingest_until_stopped():
                ingest_result["value"] = http_ingest(server, workload.table, batches, args.ingest_clients,
                                                     query=f"?wait={args.wait}", stop=stop)

            ingester = threading.Thread(target=ingest_until_stopped)
            ingester.start()
            results["q1_mixed"] = pgbench(server.pg, "strata", "strata", q1_strata, args.query_clients,
                                          args.seconds, scratch)
            stop.set()
            ingester.join()
            docs, seconds, latencies, through_wal, refused = ingest_result["value"]
            results["ingest_mixed"] = {"documents": docs, "seconds": seconds, "docs_per_s": docs / seconds,
                                       "requests": latency_summary(latencies), "through_wal": through_wal,
                                       "refused": refused}
            # The mixed run grows the table; Q1 idle on the grown table tells how much of the slowdown
            # is the larger table rather than the concurrent ingest. Merges still running are let finish
            # first, as an idle server would.
            wait_for_merges(server)
            log(f"Q1 idle after the mixed run: pgbench {args.query_clients} clients, {args.idle_seconds} s")
            results["q1_idle_after"] = pgbench(server.pg, "strata", "strata", q1_strata, args.query_clients,
                                               args.idle_seconds, scratch)
            metrics = server.get("/metrics").decode()
            merges = re.search(r"^strata_merges_total (\d+)$", metrics, re.M)
            results["server"] = {"peak_rss_bytes": server.peak_rss(), "merges": int(merges.group(1)) if merges else None,
                                 "tables": json.loads(server.get("/v1/tables"))["tables"]}
        finally:
            if server is not None:
                results["server_exit"] = server.stop()

        if not args.no_postgres:
            ctx = Context(work=scratch / "pg", strata_bin=Path(args.strata_bin))
            postgres = Postgres(ctx)
            try:
                postgres.check_runnable()
                log("PostgreSQL: loading the dataset into jsonb")
                results["postgres_load"] = {k: v for k, v in postgres.load(workload, dataset).items()
                                            if k in ("load_seconds", "documents", "version")}
                user = "postgres"
                results["postgres_q1"] = pgbench(postgres.port, user, "bench", q1_postgres, args.query_clients,
                                                 args.seconds, scratch, env=dict(os.environ, PGOPTIONS="-c TimeZone=UTC"))
            except NotRunnable as e:
                results["postgres_q1"] = {"skipped": str(e)}
            finally:
                postgres.cleanup()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    (out / "results.json").write_text(json.dumps(results, indent=2))
    print(render(results))
    (out / "summary.md").write_text(render(results))
    return 0


def refusals(phase):
    """How often the server answered 503 (queue full) and the client retried."""
    refused = phase.get("refused")
    return f"; {refused} answers of 503 retried" if refused else ""


def render(r):
    def ms(v):
        return "–" if v is None else f"{v:.1f}"

    lines = [f"Server workload, JSONBench {r['dataset']['scale']} ({r['dataset']['dataset_size']:,} documents), "
             f"{r['args']['ingest_clients']} HTTP ingest clients × {r['args']['batch']:,}-document batches "
             f"(wait={r['args'].get('wait', 'visible')}), "
             f"pgbench -M prepared Q1 with {r['args']['query_clients']} clients, {r['args']['seconds']} s:", "",
             "| measure | value | target |", "|---|---|---|"]
    emb, http = r["embedded"]["docs_per_s"], r["http_ingest"]["docs_per_s"]
    rounds = r.get("ingest_rounds", [])
    each = ", ".join(f"{x['ratio']:.0%}" for x in rounds)
    lines.append(f"| embedded `strata ingest` | {emb:,.0f} docs/s (median of {len(rounds)} rounds) | |")
    hi = r["http_ingest"]
    ratio = hi.get("ratio", http / emb)
    lines.append(f"| HTTP ingest alone, until visible | {http:,.0f} docs/s (median); **{ratio:.0%} of embedded** "
                 f"(median of the rounds' ratios: {each}); last round's request p50/p99 "
                 f"{ms(hi['requests']['p50_ms'])}/{ms(hi['requests']['p99_ms'])} ms; "
                 f"{hi['through_wal']} of {hi['requests']['count']} requests through the WAL"
                 f"{refusals(hi)} | ≥ 80 % |")
    idle, mixed = r["q1_idle"], r["q1_mixed"]

    def q1_row(label, q):
        return (f"| {label} | {q['tps']:.1f} q/s; p50/p95/p99 "
                f"{ms(q['p50_ms'])}/{ms(q['p95_ms'])}/{ms(q['p99_ms'])} ms")

    def times(a, b):
        return f"{a / b:.1f}" if b else "nan"

    lines.append(q1_row("Q1 idle (1 client)", idle) + " | |")
    same = r.get("q1_idle_clients")
    if same:
        lines.append(q1_row(f"Q1 idle ({same['clients']} clients)", same) + " | |")
    ratios = [f"{times(mixed['p99_ms'], same['p50_ms'])} × idle p50 at {same['clients']} clients"] if same else []
    ratios.append(f"{times(mixed['p99_ms'], idle['p50_ms'])} × idle p50 at 1 client")
    lines.append(q1_row(f"Q1 under ingest ({mixed['clients']} clients)", mixed)
                 + f" (p99 = {'; '.join(ratios)}) | p99 ≤ 10 × idle |")
    after = r.get("q1_idle_after")
    if after:
        lines.append(q1_row(f"Q1 idle after the mixed run, grown table ({after['clients']} clients)", after)
                     + f" (under-ingest p99 = {times(mixed['p99_ms'], after['p50_ms'])} × this p50) | |")
    im = r["ingest_mixed"]
    lines.append(f"| HTTP ingest under queries | {im['docs_per_s']:,.0f} docs/s; request p50/p95/p99 "
                 f"{ms(im['requests']['p50_ms'])}/{ms(im['requests']['p95_ms'])}/{ms(im['requests']['p99_ms'])} ms"
                 f"{refusals(im)} | |")
    s = r["server"]
    lines.append(f"| server peak RSS | {s['peak_rss_bytes'] / 2**20:,.0f} MB | |" if s["peak_rss_bytes"] else "| server peak RSS | – | |")
    lines.append(f"| background merges | {s['merges']} (table now {s['tables'][0]['parts']} parts, "
                 f"{s['tables'][0]['documents']:,} documents) | |")
    pg = r.get("postgres_q1", {})
    if "tps" in pg:
        version = re.search(r"PostgreSQL (\S+)", r["postgres_load"]["version"])
        lines.append(f"| PostgreSQL {version.group(1) if version else ''} Q1 ({pg['clients']} clients, jsonb) | "
                     f"{pg['tps']:.2f} q/s; p50/p99 {ms(pg['p50_ms'])}/{ms(pg['p99_ms'])} ms; "
                     f"Strata under ingest = {mixed['tps'] / pg['tps']:.2f} × | ≥ 10 × |")
    elif pg:
        lines.append(f"| PostgreSQL | skipped: {pg.get('skipped')} | |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
