"""`strata serve` with its data directory on S3-compatible object storage next to the same server
on local disk (issue 16), side by side in one run.

The S3 server is moto in server mode on loopback, in its own process (PyPI; Python, so its speed,
not S3's, bounds what goes through it). Per side, a fresh server on a fresh data directory:
1. ingest: --docs generated Bluesky events, split into batches of --batch documents, posted by
   --clients concurrent HTTP clients with `?wait=durable` — each answered once its WAL group is
   durable: fsynced locally, and on S3 also stored as an object. Documents/s and
   acknowledgement latency percentiles; then the time until every document is visible;
2. the server's background merges are given time to settle (no merge for --settle seconds);
3. queries: each JSONBench query --runs times over HTTP (`/v1/query`); hot = the fastest of
   runs 2.., first = run 1 (on S3, pages of parts the server wrote are read from its working
   directory; the rest through the block cache).
Both sides must give the same answers. Prints a table with S3 ÷ local ratios and writes
OUT/results.json:

    bench/.venv/bin/python bench/server_object_storage.py --strata-bin target/release/strata \
        [--docs 1000000] [--batch 1000] [--clients 4] [--runs 5]
"""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from benchlib.strata_cli import run, serve_ports  # noqa: E402

BUCKET = "bench"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def percentile(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def start_s3():
    """moto's S3 server in its own process, a bucket in it, and the environment that points
    Strata at it."""
    import boto3

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="bench",
                          aws_secret_access_key="bench")
    deadline = time.monotonic() + 60
    while True:
        try:
            client.create_bucket(Bucket=BUCKET)
            break
        except Exception:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError("moto's S3 server did not start")
            time.sleep(0.2)
    env = dict(os.environ, AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
               AWS_REGION="us-east-1", AWS_ENDPOINT_URL=endpoint, AWS_ALLOW_HTTP="true")
    return proc, env


class Server:
    """`strata serve` on `data_dir` (a path or an s3:// URL), its stderr kept."""

    def __init__(self, binary, data_dir, env):
        self.proc = subprocess.Popen([str(binary), "--data-dir", str(data_dir), "serve", "--http", "127.0.0.1:0",
                                      "--pg", "127.0.0.1:0"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        self.log = []
        self.port = serve_ports(self.proc, self.log)["HTTP"]
        self.last_merge = time.monotonic()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stderr:
            self.log.append(line)
            if "merged" in line:
                self.last_merge = time.monotonic()

    def post(self, path, body):
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=body, method="POST")
        with urllib.request.urlopen(request, timeout=600) as response:
            return response.read()

    def query(self, sql):
        answer = self.post("/v1/query?format=ndjson", sql.encode())
        return [json.loads(line) for line in answer.splitlines()]

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def ingest(server, batches, clients):
    """Posts every batch with `clients` threads; (seconds, acknowledgement latencies in s)."""
    latencies, failures, lock = [], [], threading.Lock()
    pending = list(enumerate(batches))

    def client():
        while True:
            with lock:
                if not pending:
                    return
                _, body = pending.pop()
            started = time.perf_counter()
            try:
                server.post("/v1/ingest/bluesky?wait=durable", body)
            except Exception as e:  # noqa: BLE001 - reported after the run
                with lock:
                    failures.append(repr(e))
                return
            with lock:
                latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise RuntimeError(f"ingest requests failed: {failures[:3]}")
    return time.perf_counter() - started, latencies


def visible(server):
    """Documents a query sees now (0 before the first flush creates the table)."""
    try:
        return server.query("SELECT count(*) AS n FROM bluesky")[0]["n"]
    except urllib.error.HTTPError:
        return 0


def measure(binary, data_dir, env, batches, docs, queries, runs, clients, settle):
    server = Server(binary, data_dir, env)
    try:
        seconds, latencies = ingest(server, batches, clients)
        started = time.perf_counter()
        while visible(server) != docs:
            if time.perf_counter() - started > 600:
                raise RuntimeError("the ingested documents did not become visible in 10 minutes")
            time.sleep(0.1)
        visible_s = time.perf_counter() - started
        deadline = time.monotonic() + 300
        while time.monotonic() - server.last_merge < settle and time.monotonic() < deadline:
            time.sleep(0.5)
        timings, answers = [], []
        for sql in queries:
            times = []
            for _ in range(runs):
                started = time.perf_counter()
                answer = server.query(sql)
                times.append((time.perf_counter() - started) * 1e3)
            timings.append(times)
            answers.append(answer)
        return {"ingest_s": seconds, "docs_per_s": docs / seconds,
                "ack_p50_ms": percentile(latencies, 50) * 1e3, "ack_p95_ms": percentile(latencies, 95) * 1e3,
                "ack_p99_ms": percentile(latencies, 99) * 1e3, "visible_after_s": visible_s,
                "query_ms": timings}, answers
    finally:
        server.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--strata-bin", required=True)
    parser.add_argument("--docs", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--settle", type=float, default=5.0, help="seconds without a merge before queries")
    parser.add_argument("--work", default="bench/work/server-object-storage")
    parser.add_argument("--out", default="bench/results/server-object-storage")
    a = parser.parse_args()
    binary, work, out = a.strata_bin, Path(a.work), Path(a.out)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    out.mkdir(parents=True, exist_ok=True)
    raw = work / "bluesky.ndjson"
    run([binary, "generate", "bluesky", "--docs", a.docs, "--seed", 1, "-o", raw])
    lines = raw.read_bytes().splitlines(keepends=True)
    batches = [b"".join(lines[i:i + a.batch]) for i in range(0, len(lines), a.batch)]
    queries = [s.strip() for s in (BENCH / "queries" / "jsonbench" / "strata.sql").read_text().split(";")
               if s.strip()]
    moto, env = start_s3()
    try:
        local, local_answers = measure(binary, work / "db", dict(os.environ), batches, a.docs, queries,
                                       a.runs, a.clients, a.settle)
        s3_env = dict(env, STRATA_CACHE_DIR=str(work / "cache"))
        s3, s3_answers = measure(binary, f"s3://{BUCKET}/server", s3_env, batches, a.docs, queries,
                                 a.runs, a.clients, a.settle)
    finally:
        moto.kill()
    for i, (mine, theirs) in enumerate(zip(local_answers, s3_answers), start=1):
        if mine != theirs:
            raise SystemExit(f"Q{i}: the server on S3 answers differently from the one on local disk")

    def hot(times):
        return min(times[1:]) if len(times) > 1 else times[0]

    print(f"\n`strata serve`, {a.docs:,} documents in batches of {a.batch:,} from {a.clients} HTTP clients "
          f"(?wait=durable); moto's S3 server on loopback\n")
    print("| | local disk | S3 | S3 ÷ local |")
    print("|---|---:|---:|---:|")
    for label, key, fmt in [("ingest documents/s", "docs_per_s", "{:,.0f}"),
                            ("acknowledgement p50 ms", "ack_p50_ms", "{:,.1f}"),
                            ("acknowledgement p99 ms", "ack_p99_ms", "{:,.1f}"),
                            ("all visible after s", "visible_after_s", "{:,.2f}")]:
        ratio = s3[key] / local[key] if local[key] else float("nan")
        print(f"| {label} | {fmt.format(local[key])} | {fmt.format(s3[key])} | {ratio:.2f} |")
    rows = []
    for i in range(len(queries)):
        row = {"query": f"Q{i + 1}", "local_first_ms": local["query_ms"][i][0], "local_hot_ms": hot(local["query_ms"][i]),
               "s3_first_ms": s3["query_ms"][i][0], "s3_hot_ms": hot(s3["query_ms"][i])}
        row["s3_over_local_hot"] = row["s3_hot_ms"] / row["local_hot_ms"]
        rows.append(row)
        print(f"| {row['query']} hot ms (first) | {row['local_hot_ms']:,.1f} ({row['local_first_ms']:,.1f}) | "
              f"{row['s3_hot_ms']:,.1f} ({row['s3_first_ms']:,.1f}) | {row['s3_over_local_hot']:.2f} |")
    results = {"docs": a.docs, "batch": a.batch, "clients": a.clients, "runs": a.runs, "local": local, "s3": s3,
               "queries": rows, "answers_equal": True}
    (out / "results.json").write_text(json.dumps(results, indent=2))
    print(f"\nwrote {out / 'results.json'}")


if __name__ == "__main__":
    main()
