"""FerretDB 1.24 — a MongoDB wire-protocol server that stores documents in PostgreSQL (jsonb) — run
as what it is: `ferretdb --handler=postgresql` on loopback over a private PostgreSQL cluster started
as in postgres.py, driven with pymongo. It is not MongoDB and is reported under its own name.

The binary is the Go module github.com/FerretDB/FerretDB v1.24.0 from the Go module proxy, built
once into WORK/bin (see build()). Load: insert_many (unordered) in batches, with a compound index on
the sort key created first, as JSONBench's MongoDB setup does; rejected documents are counted.
Queries: aggregation pipelines in bench/queries/<workload>/ferretdb.json; an operator FerretDB does
not implement makes the query 'unsupported' with the server's message. Storage: total relation
size (heap + TOAST + indexes) of the tables FerretDB created. Cold runs: FerretDB and PostgreSQL
restarted after dropping the page cache. A query run longer than --query-timeout (default 600 s) is
stopped and recorded as failed with that reason. Peak memory: VmHWM of the FerretDB process (the
PostgreSQL backends it uses are not included)."""
import datetime as dt
import importlib.util
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from ..procs import dir_bytes, log, proc_peak_rss
from ..workloads import QUERY_DIR
from .base import NotRunnable, System, Unsupported
from .postgres import Postgres, free_port

MODULE = "github.com/FerretDB/FerretDB"
VERSION = "v1.24.0"
BATCH = 5000
NOT_IMPLEMENTED = (238, 115)  # NotImplemented, CommandNotSupported


def build(dest):
    """Build ferretdb VERSION from the Go module proxy into `dest`. The proxy's module zip lacks the
    generated build/version/*.txt that FerretDB embeds, so a copy of the module gets them (the
    release tag and commit) and a throwaway main module builds it through a `replace`."""
    if not shutil.which("go"):
        raise NotRunnable("no ferretdb binary and no Go toolchain to build it from the Go module proxy")
    log(f"ferretdb: building {MODULE}@{VERSION} from the Go module proxy (a few minutes)")
    with tempfile.TemporaryDirectory(prefix="strata-bench-ferretdb-") as tmp:
        tmp = Path(tmp)
        info = subprocess.run(["go", "mod", "download", "-json", f"{MODULE}@{VERSION}"], capture_output=True,
                              text=True, cwd=tmp)
        if info.returncode != 0:
            raise NotRunnable(f"go mod download {MODULE}@{VERSION} failed: {(info.stdout + info.stderr)[-500:]}")
        meta = json.loads(info.stdout)
        src = tmp / "src"
        shutil.copytree(meta["Dir"], src)
        for root, dirs, files in os.walk(src):
            for n in dirs + files:
                os.chmod(Path(root) / n, 0o755 if n in dirs else 0o644)
        commit = meta.get("Origin", {}).get("Hash", "unknown")
        for name, text in (("version.txt", VERSION), ("commit.txt", commit), ("branch.txt", VERSION),
                           ("package.txt", "unknown")):
            (src / "build" / "version" / name).write_text(text + "\n")
        main = tmp / "main"
        main.mkdir()
        (main / "go.mod").write_text(f"module strata-bench/ferretdb\n\ngo 1.22\n\nrequire {MODULE} {VERSION}\n\n"
                                     f"replace {MODULE} => ../src\n")
        (main / "tools.go").write_text(f'//go:build tools\n\npackage tools\n\nimport _ "{MODULE}/cmd/ferretdb"\n')
        env = dict(os.environ, GOFLAGS="-p=1")
        for cmd in (["go", "mod", "tidy"], ["go", "build", "-o", str(dest), f"{MODULE}/cmd/ferretdb"]):
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=main, env=env)
            if proc.returncode != 0:
                raise NotRunnable(f"building ferretdb failed at `{' '.join(cmd)}`: {proc.stderr[-800:]}")
    return dest


class FerretDB(System):
    name = "ferretdb"
    label = "FerretDB (on PostgreSQL)"

    def check_runnable(self):
        if importlib.util.find_spec("pymongo") is None:
            raise NotRunnable("the Python package pymongo is not installed (pip install -r bench/requirements.txt)")
        self.pg = Postgres(self.ctx)
        self.pg.check_runnable()
        self.binary = self._find_binary()

    def _find_binary(self):
        local = self.ctx.work / "bin" / "ferretdb"
        for candidate in (os.environ.get("FERRETDB_BIN"), local, shutil.which("ferretdb")):
            if candidate and Path(candidate).is_file():
                out = subprocess.run([str(candidate), "--version"], capture_output=True, text=True).stdout
                if f"version: {VERSION}" in out:
                    return Path(candidate)
        local.parent.mkdir(parents=True, exist_ok=True)
        return build(local)

    # --- servers ---------------------------------------------------------------------------------
    def _start_ferret(self):
        self.mport = free_port()
        url = f"postgres://postgres@127.0.0.1:{self.pg.port}/ferretdb"
        self.state = self.pg.dir / "ferretdb-state"
        self.state.mkdir(exist_ok=True)
        self.out = open(self.pg.dir / "ferretdb.log", "ab")
        self.proc = subprocess.Popen([str(self.binary), "--handler=postgresql", f"--postgresql-url={url}",
                                      f"--listen-addr=127.0.0.1:{self.mport}", f"--debug-addr=127.0.0.1:{free_port()}",
                                      f"--state-dir={self.state}", "--telemetry=disable", "--log-level=WARN"],
                                     stdout=self.out, stderr=subprocess.STDOUT)
        import pymongo

        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ferretdb exited with {self.proc.returncode}: {self._log_tail()}")
            try:
                c = pymongo.MongoClient(f"mongodb://127.0.0.1:{self.mport}/", serverSelectionTimeoutMS=1000)
                c.admin.command("ping")
                c.close()
                return
            except pymongo.errors.PyMongoError:
                time.sleep(0.5)
        raise RuntimeError(f"ferretdb did not answer within 60 s: {self._log_tail()}")

    def _log_tail(self):
        try:
            return (self.pg.dir / "ferretdb.log").read_text(errors="replace")[-1500:]
        except OSError:
            return ""

    def _stop_ferret(self):
        proc = getattr(self, "proc", None)
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            self.out.close()

    def _client(self):
        import pymongo

        return pymongo.MongoClient(f"mongodb://127.0.0.1:{self.mport}/",
                                   socketTimeoutMS=int(self.ctx.query_timeout * 1000) + 5000)

    # --- benchmark steps ---------------------------------------------------------------------------
    def load(self, workload, dataset):
        self.pg._init_cluster()
        self.pg.start()
        with self.pg._connect("postgres") as con:
            con.execute("CREATE DATABASE ferretdb")
        self._start_ferret()
        client = self._client()
        try:
            coll = client["bench"][workload.table]
            coll.create_index([(p, 1) for p in workload.sort_key], name="sort_key")
            started = time.perf_counter()
            rejected, first = self._insert(coll, dataset.path)
            seconds = time.perf_counter() - started
            docs = coll.count_documents({})
            version = client.server_info().get("version", "?")
        finally:
            client.close()
        with self.pg._connect("ferretdb") as con:
            total = con.execute("SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                                "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'bench' "
                                "AND c.relkind = 'r'").fetchone()[0]
        if rejected:
            log(f"ferretdb: {rejected:,} documents rejected, first: {first}")
        return {"load_seconds": seconds, "documents": docs,
                "version": f"FerretDB {VERSION} (reports MongoDB {version}) on PostgreSQL",
                "total_size": int(total), "data_dir_bytes": dir_bytes(self.pg.pgdata),
                "total_size_method": "pg_total_relation_size of FerretDB's tables (heap + TOAST + indexes)",
                "load_peak_rss": proc_peak_rss(self.proc.pid), "rejected": rejected, "first_rejection": first,
                "peak_rss_method": "VmHWM of the ferretdb process (PostgreSQL backends not included)"}

    def _insert(self, coll, path):
        import pymongo

        rejected, first, batch = 0, None, []

        def flush():
            nonlocal rejected, first
            if not batch:
                return
            try:
                coll.insert_many(batch, ordered=False)
            except pymongo.errors.BulkWriteError as e:
                errors = e.details.get("writeErrors", [])
                rejected += len(errors)
                first = first or (errors[0].get("errmsg", "")[:300] if errors else str(e)[:300])
            except (pymongo.errors.PyMongoError, OverflowError) as e:
                for doc in batch:  # one by one: one bad document costs one document
                    try:
                        coll.insert_one(doc)
                    except (pymongo.errors.PyMongoError, OverflowError) as e1:
                        rejected += 1
                        first = first or str(e1)[:300]
                first = first or str(e)[:300]
            batch.clear()

        with open(path, "rb") as f:
            for line in f:
                if not line.strip():
                    continue
                try:
                    batch.append(json.loads(line))
                except ValueError as e:
                    rejected += 1
                    first = first or f"invalid JSON: {e}"
                if len(batch) >= BATCH:
                    flush()
        flush()
        return rejected, first

    def queries(self, workload):
        path = QUERY_DIR / workload.name / "ferretdb.json"
        specs = json.loads(path.read_text())
        return {q: json.dumps(specs[q]) for q in workload.queries}

    def cold_start(self):
        self._stop_ferret()
        method = self.pg.cold_start()
        self._start_ferret()
        return method.replace("server restarted", "FerretDB and PostgreSQL restarted")

    def query(self, workload, sql, runs):
        import pymongo

        spec = json.loads(sql)
        client = self._client()
        try:
            coll = client["bench"][workload.table]
            times, docs = [], []
            for _ in range(runs):
                started = time.perf_counter()
                try:
                    docs = list(coll.aggregate(spec["pipeline"], maxTimeMS=int(self.ctx.query_timeout * 1000)))
                except (pymongo.errors.ExecutionTimeout, pymongo.errors.NetworkTimeout):
                    raise RuntimeError(f"timed out after {self.ctx.query_timeout:.0f} s (--query-timeout); "
                                       f"runs done before: {len(times)}")
                except pymongo.errors.OperationFailure as e:
                    if e.code in NOT_IMPLEMENTED or "not implemented" in str(e).lower() or "not supported" in str(e).lower():
                        raise Unsupported(f"FerretDB {VERSION}: {e.details.get('errmsg', str(e)) if e.details else e}")
                    raise
                times.append(time.perf_counter() - started)
        finally:
            client.close()
        rows = [[_column(c, d) for c in spec["columns"]] for d in docs]
        return {"times": times, "columns": spec["columns"], "rows": rows, "peak_rss": proc_peak_rss(self.proc.pid)}

    def cleanup(self):
        self._stop_ferret()
        if getattr(self, "pg", None):
            self.pg.cleanup()


def _column(spec, doc):
    kind, _, path = spec.rpartition(":")
    value = doc
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if kind == "ts_us" and value is not None:
        return (dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=int(value))).strftime("%Y-%m-%d %H:%M:%S.%f")
    return value
