"""Elasticsearch, the distribution Maven Central carries (org.elasticsearch.distribution.integ-test-zip,
8.19.21): one node on loopback, security off, 1 GB heap, Debian's Java 17, run as an unprivileged
user (setpriv --reuid=65534) when the suite runs as root.

That distribution holds the server and x-pack-core/security only: no ES|QL (which JSONBench's
Elasticsearch queries use), no SQL, no script engine (painless) and no `aggregations` module
(bucket_sort). Queries are therefore written in the query DSL (bench/queries/<workload>/
elasticsearch.json); a query that needs a script or bucket_sort is recorded as unsupported with
the reason, never approximated on the client. Index settings follow JSONBench's template (1 shard,
no replica, best_compression, index sort on the sort key, strings as keyword, _source kept); the
shard request cache is off so hot runs are not served from a result cache.

Load: _bulk in ~5 MB batches from the NDJSON file; documents the index rejects (e.g. a path mapped
as an object that later holds a string) are counted and show up in data quality. Storage: the
index's primary store size (_stats/store). Cold runs: OS page cache dropped and the index caches
cleared (_cache/clear) — the server is not restarted. Peak memory: VmHWM of the server JVM (the
load's after the load; the queries' since a restart between load and queries)."""
import datetime as dt
import http.client
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import zipfile
from pathlib import Path

from ..procs import dir_bytes, drop_page_cache, log, proc_peak_rss
from ..workloads import QUERY_DIR
from .base import NotRunnable, System, Unsupported
from .postgres import free_ports

NOBODY = 65534
HEAP = "1g"
BULK_BYTES = 5 << 20
INDEX = "bench"


def find_java17():
    for home in ("/usr/lib/jvm/java-17-openjdk-amd64", "/usr/lib/jvm/java-17-openjdk-arm64"):
        if Path(home, "bin/java").exists():
            return home
    return None


class Elasticsearch(System):
    name = "elasticsearch"
    label = "Elasticsearch"
    product = "elasticsearch"  # artifact id, directory prefix, start script, env var prefix
    group = "org.elasticsearch.distribution.integ-test-zip"
    version = "8.19.21"
    env_prefix = "ES"
    extra_settings = ("xpack.security.enabled: false",)
    query_file = "elasticsearch.json"  # the same query DSL serves OpenSearch

    @property
    def artifact(self):
        return f"{self.group}:{self.product}:{self.version}:zip"

    @property
    def zip(self):
        return (Path.home() / ".m2/repository" / self.group.replace(".", "/") / self.product / self.version /
                f"{self.product}-{self.version}.zip")

    def check_runnable(self):
        self.java_home = find_java17()
        if not self.java_home:
            raise NotRunnable("no Java 17 runtime (apt-get install -y openjdk-17-jre-headless)")
        if not self.zip.exists():
            if not shutil.which("mvn"):
                raise NotRunnable(f"{self.zip} is missing and Maven is not installed to fetch {self.artifact}")
            log(f"{self.name}: fetching {self.artifact} from Maven Central")
            proc = subprocess.run(["mvn", "-q", "dependency:get", f"-Dartifact={self.artifact}"], capture_output=True,
                                  text=True)
            if proc.returncode != 0 or not self.zip.exists():
                raise NotRunnable(f"could not fetch {self.artifact}: {(proc.stdout + proc.stderr).strip()[-500:]}")
        if os.geteuid() == 0 and not shutil.which("setpriv"):
            raise NotRunnable("running as root and setpriv (util-linux) is missing to run Elasticsearch unprivileged")

    # --- installation and server lifecycle ----------------------------------------------------
    def _base_dir(self):
        """work/elasticsearch when the unprivileged user can reach it, else a private dir in /var/tmp."""
        self.ctx.work.mkdir(parents=True, exist_ok=True)
        if os.geteuid() != 0 or self._as_user_ok(self.ctx.work):
            return self.ctx.work / self.name
        return Path(tempfile.mkdtemp(prefix=f"strata-bench-{self.name}-", dir="/var/tmp"))

    def _as_user_ok(self, path):
        return subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "test", "-x",
                               str(path)]).returncode == 0

    def _install(self):
        self.stop()
        if getattr(self, "base", None):
            shutil.rmtree(self.base, ignore_errors=True)
        self.base = self._base_dir()
        shutil.rmtree(self.base, ignore_errors=True)
        self.base.mkdir(parents=True)
        with zipfile.ZipFile(self.zip) as z:
            for info in z.infolist():
                path = Path(z.extract(info, self.base))
                mode = (info.external_attr >> 16) & 0o777
                if mode and not info.is_dir():
                    path.chmod(mode)
        self.home = self.base / f"{self.product}-{self.version}"
        self.port, self.transport = free_ports(2)
        for d in ("data", "logs", "tmp"):
            (self.base / d).mkdir()
        (self.home / "config" / f"{self.product}.yml").write_text("\n".join([
            "cluster.name: strata-bench", "node.name: node-1", f"path.data: {self.base / 'data'}",
            f"path.logs: {self.base / 'logs'}", "network.host: 127.0.0.1", f"http.port: {self.port}",
            f"transport.port: {self.transport}", "discovery.type: single-node", *self.extra_settings,
            "search.max_buckets: 2000000", "action.destructive_requires_name: false",
            # A shared machine's disk is often past the 85/90/95 % watermarks by the server's
            # reckoning (used = total - available, reserved blocks included); with them on, the
            # index's only shard stays unassigned and every search fails with 503.
            "cluster.routing.allocation.disk.threshold_enabled: false", ""]))
        if os.geteuid() == 0:
            for root, dirs, files in os.walk(self.base):
                for n in dirs + files:
                    os.chown(Path(root) / n, NOBODY, NOBODY, follow_symlinks=False)
            os.chown(self.base, NOBODY, NOBODY)

    def start(self):
        p = self.env_prefix
        env = dict(os.environ, HOME=str(self.base), **{f"{p}_JAVA_HOME": self.java_home,
                                                       f"{p}_JAVA_OPTS": f"-Xms{HEAP} -Xmx{HEAP}",
                                                       f"{p}_TMPDIR": str(self.base / "tmp")})
        env.pop("JAVA_HOME", None)
        cmd = [str(self.home / "bin" / self.product)]
        if os.geteuid() == 0:
            cmd = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"] + cmd
        self.log_file = open(self.base / "server.out", "ab")
        self.proc = subprocess.Popen(cmd, cwd=self.home, env=env, stdout=self.log_file, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.time() + 240
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.label} exited with {self.proc.returncode}: {self._log_tail()}")
            try:
                status, body = self.request("GET", "/_cluster/health?wait_for_status=yellow&timeout=1s")
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(1)
        raise RuntimeError(f"{self.label} did not answer within 240 s: {self._log_tail()}")

    def _log_tail(self):
        try:
            return (self.base / "server.out").read_text(errors="replace")[-1500:]
        except OSError:
            return ""

    def stop(self):
        proc = getattr(self, "proc", None)
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)  # the process group this object started
            proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        except ProcessLookupError:
            pass
        self.log_file.close()

    def server_pid(self):
        """The server JVM: the descendant of our process with the largest resident memory."""
        children, best = {}, (None, -1)
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                try:
                    ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
                children.setdefault(ppid, []).append(int(d.name))
        stack = [self.proc.pid]
        while stack:
            pid = stack.pop()
            rss = proc_peak_rss(pid) or 0
            if rss > best[1]:
                best = (pid, rss)
            stack.extend(children.get(pid, []))
        return best[0]

    def request(self, method, path, body=None, content_type="application/json", timeout=3600):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
            conn.request(method, path, body=data, headers={"Content-Type": content_type} if data else {})
            resp = conn.getresponse()
            raw = resp.read()
            return resp.status, (json.loads(raw) if raw else None)
        finally:
            conn.close()

    def _check(self, what, status, body):
        if status >= 300:
            raise RuntimeError(f"{self.label} {what} failed ({status}): {json.dumps(body)[:1500]}")
        return body

    # --- benchmark steps ------------------------------------------------------------------------
    def load(self, workload, dataset):
        self._install()
        self.start()
        index_def = json.loads((QUERY_DIR / workload.name / "ddl" / self.query_file).read_text())
        self._check("index creation", *self.request("PUT", f"/{INDEX}", index_def))
        self._wait_for_shard()
        started = time.perf_counter()
        rejected, first_error = self._bulk(dataset.path)
        self._check("refresh", *self.request("POST", f"/{INDEX}/_refresh"))
        self._check("flush", *self.request("POST", f"/{INDEX}/_flush"))
        seconds = time.perf_counter() - started
        docs = self._check("count", *self.request("GET", f"/{INDEX}/_count"))["count"]
        stats = self._check("stats", *self.request("GET", f"/{INDEX}/_stats/store"))
        store = stats["_all"]["primaries"]["store"]["size_in_bytes"]
        peak = proc_peak_rss(self.server_pid())
        if rejected:
            log(f"{self.name}: {rejected:,} documents rejected, first: {first_error}")
        # Restart so the queries' peak memory is theirs, not the load's.
        self.stop()
        self.start()
        return {"load_seconds": seconds, "documents": docs, "version": f"{self.label} {self.version} (integ-test-zip)",
                "total_size": store, "total_size_method": "primary store size of the index (_stats/store), after refresh + flush",
                "data_dir_bytes": dir_bytes(self.base / "data"), "load_peak_rss": peak, "rejected": rejected,
                "first_rejection": first_error, "peak_rss_method": "VmHWM of the server JVM (1 GB heap)"}

    def _wait_for_shard(self):
        """Bulk requests against an unassigned shard time out one by one; fail early, saying why."""
        status, body = self.request("GET", f"/_cluster/health/{INDEX}?wait_for_status=yellow&timeout=120s")
        if status == 200 and not body.get("timed_out"):
            return
        _, why = self.request("GET", "/_cluster/allocation/explain")
        raise RuntimeError(f"{self.label}: the index's shard was not assigned within 120 s: {json.dumps(why)[:1500]}")

    def _bulk(self, path):
        rejected, first_error, batch, size = 0, None, [], 0

        def flush():
            nonlocal rejected, first_error
            if not batch:
                return
            status, body = self.request("POST", f"/{INDEX}/_bulk", b"".join(batch), "application/x-ndjson")
            self._check("bulk", status, body)
            if body.get("errors"):
                for item in body["items"]:
                    err = item.get("index", {}).get("error")
                    if err:
                        rejected += 1
                        first_error = first_error or f"{err.get('type')}: {err.get('reason')}"[:300]
            batch.clear()

        with open(path, "rb") as f:
            for line in f:
                if not line.strip():
                    continue
                batch.append(b'{"index":{}}\n' + line.rstrip(b"\r\n") + b"\n")
                size += len(line)
                if size >= BULK_BYTES:
                    flush()
                    size = 0
        flush()
        return rejected, first_error

    def queries(self, workload):
        path = QUERY_DIR / workload.name / self.query_file
        specs = json.loads(path.read_text())
        missing = [q for q in workload.queries if q not in specs]
        if missing:
            raise ValueError(f"{path} lacks {', '.join(missing)}")
        return {q: json.dumps(specs[q]) for q in workload.queries}

    def cold_start(self):
        method = drop_page_cache()
        self._check("cache clear", *self.request("POST", f"/{INDEX}/_cache/clear"))
        return method.replace("fresh process", "index caches cleared (_cache/clear), same server process")

    def query(self, workload, sql, runs):
        spec = json.loads(sql)
        if "unsupported" in spec:
            raise Unsupported(spec["unsupported"])
        times, body = [], None
        for _ in range(runs):
            started = time.perf_counter()
            status, body = self.request("POST", f"/{INDEX}/_search", spec["body"])
            times.append(time.perf_counter() - started)
            self._check("search", status, body)
        rows = flatten(body.get("aggregations", {}), spec["rows"]["path"], spec["rows"]["columns"])
        return {"times": times, "columns": spec["rows"]["columns"], "rows": rows, "took_ms": body.get("took"),
                "peak_rss": proc_peak_rss(self.server_pid())}

    def cleanup(self):
        self.stop()
        if getattr(self, "base", None):
            shutil.rmtree(self.base, ignore_errors=True)


def flatten(aggs, path, columns):
    """Rows from nested bucket aggregations named by `path`. Columns: `key:AGG` (the bucket key at
    that level), `count` (doc_count of the innermost bucket), `value:METRIC` (a metric of the
    innermost bucket), `ts_us:METRIC` (a metric holding epoch microseconds, as a UTC timestamp)."""
    rows = []

    def walk(node, level, keys):
        for bucket in node[path[level]]["buckets"]:
            k = dict(keys, **{path[level]: bucket["key"]})
            if level + 1 < len(path):
                walk(bucket, level + 1, k)
            else:
                rows.append([_column(c, k, bucket) for c in columns])

    walk(aggs, 0, {})
    return rows


def _column(spec, keys, bucket):
    kind, _, name = spec.partition(":")
    if kind == "key":
        return keys[name]
    if kind == "count":
        return bucket["doc_count"]
    if kind == "value":
        return bucket[name]["value"]
    if kind == "ts_us":
        micros = int(bucket[name]["value"])
        return (dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=micros)).strftime("%Y-%m-%d %H:%M:%S.%f")
    raise ValueError(f"unknown column spec {spec!r}")


class OpenSearch(Elasticsearch):
    """OpenSearch 2.19.1 from Maven Central (org.opensearch.distribution.integ-test-zip): like the
    Elasticsearch peer, the server with transport only (no painless, no security plugin), the same
    query DSL, index definition and method."""

    name = "opensearch"
    label = "OpenSearch"
    product = "opensearch"
    group = "org.opensearch.distribution.integ-test-zip"
    version = "2.19.1"
    env_prefix = "OPENSEARCH"
    extra_settings = ()
