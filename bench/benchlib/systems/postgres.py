"""PostgreSQL (Debian's server package), started by the benchmark: a private cluster (initdb, C
locale, default settings otherwise) in the work directory, run as the `postgres` user on a loopback
port. Documents go into a jsonb column with JSONBench's expression index (DDL in
bench/queries/<workload>/ddl/postgres.sql), loaded with COPY in CSV mode using quote/delimiter
bytes that never occur in JSON text, and `\\u0000` removed first as JSONBench does (jsonb cannot
hold it). A batch that COPY rejects is retried document by document, so one bad line costs one
document, not a batch. Load time covers COPY (index maintained as rows arrive) and VACUUM ANALYZE.

Cold runs restart the server (empty shared buffers) after dropping the OS page cache; each query
session is a new connection, so a new backend process; its peak memory is that backend's VmHWM."""
import glob
import importlib.util
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from ..procs import dir_bytes, drop_page_cache, log, proc_peak_rss
from .base import NotRunnable, System, read_ddl

BATCH_LINES = 100_000
COPY_SQL = "COPY {table} FROM STDIN WITH (FORMAT csv, QUOTE e'\\x01', DELIMITER e'\\x02', ESCAPE e'\\x01')"


def find_bindir():
    """Directory of initdb/pg_ctl/postgres: the newest /usr/lib/postgresql/N/bin, else pg_config's."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name)
                        if Path(p).parent.name.isdigit() else 0, reverse=True)
    for c in candidates:
        if Path(c, "initdb").exists() and Path(c, "pg_ctl").exists():
            return Path(c)
    if shutil.which("pg_config"):
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True).stdout.strip()
        if out and Path(out, "initdb").exists():
            return Path(out)
    return None


def free_port():
    return free_ports(1)[0]


def free_ports(count):
    """`count` distinct free ports: the sockets are held until all are bound (ports taken one after
    another may repeat, and a server given the same port twice answers on the wrong one)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class Postgres(System):
    name = "postgres"
    label = "PostgreSQL"

    def check_runnable(self):
        if importlib.util.find_spec("psycopg") is None:
            raise NotRunnable("the Python package psycopg is not installed (pip install -r bench/requirements.txt)")
        self.bindir = find_bindir()
        if self.bindir is None:
            raise NotRunnable("no PostgreSQL server binaries (apt-get install -y postgresql-15)")
        if os.geteuid() == 0:
            try:
                pwd.getpwnam("postgres")
            except KeyError:
                raise NotRunnable("running as root and there is no `postgres` user to run the server as")

    # --- server lifecycle -------------------------------------------------------------------
    def _as_server_user(self, cmd):
        cmd = [str(c) for c in cmd]
        return ["runuser", "-u", "postgres", "--"] + cmd if os.geteuid() == 0 else cmd

    def _run(self, cmd, what):
        proc = subprocess.run(self._as_server_user(cmd), capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{what} failed: {(proc.stderr or proc.stdout).strip()[-2000:]}")
        return proc

    def _cluster_dir(self):
        """work/postgres when the server user can reach the work dir, else a private dir in /var/tmp."""
        self.ctx.work.mkdir(parents=True, exist_ok=True)
        if os.geteuid() != 0 or subprocess.run(self._as_server_user(["test", "-x", self.ctx.work])).returncode == 0:
            path = self.ctx.work / "postgres"
            shutil.rmtree(path, ignore_errors=True)
            path.mkdir(parents=True)
            return path
        return Path(tempfile.mkdtemp(prefix="strata-bench-postgres-", dir="/var/tmp"))

    def _init_cluster(self):
        self.stop()
        if getattr(self, "dir", None):
            shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = self._cluster_dir()
        self.pgdata = self.dir / "pgdata"
        self.sockdir = self.dir / "sock"
        self.sockdir.mkdir()
        if os.geteuid() == 0:
            pg = pwd.getpwnam("postgres")
            for p in (self.dir, self.sockdir):
                os.chown(p, pg.pw_uid, pg.pw_gid)
        self._run([self.bindir / "initdb", "-D", self.pgdata, "-E", "UTF8", "--locale=C", "-A", "trust",
                   "-U", "postgres"], "initdb")
        self.port = free_port()

    def start(self):
        opts = (f"-c listen_addresses=127.0.0.1 -c port={self.port} "
                f"-c unix_socket_directories={self.sockdir}")
        self._run([self.bindir / "pg_ctl", "-D", self.pgdata, "-l", self.dir / "server.log", "-o", opts,
                   "-w", "-t", "120", "start"], "pg_ctl start")

    def stop(self):
        pgdata = getattr(self, "pgdata", None)
        if pgdata and Path(pgdata, "postmaster.pid").exists():
            subprocess.run(self._as_server_user([self.bindir / "pg_ctl", "-D", pgdata, "-m", "fast", "-w",
                                                 "stop"]), capture_output=True)

    def _connect(self, dbname="bench"):
        import psycopg

        return psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname=dbname,
                               autocommit=True, options="-c TimeZone=UTC")

    # --- benchmark steps --------------------------------------------------------------------
    def load(self, workload, dataset):
        self._init_cluster()
        self.start()
        with self._connect("postgres") as con:
            con.execute("CREATE DATABASE bench")
        con = self._connect()
        try:
            for stmt in read_ddl(workload, self.name):
                con.execute(stmt)
            version = con.execute("SHOW server_version").fetchone()[0]
            started = time.perf_counter()
            rejected = self._copy(con, workload.table, dataset.path)
            con.execute(f"VACUUM ANALYZE {workload.table}")
            seconds = time.perf_counter() - started
            docs = con.execute(f"SELECT count(*) FROM {workload.table}").fetchone()[0]
            total, data, index = con.execute(
                f"SELECT pg_total_relation_size('{workload.table}'), pg_table_size('{workload.table}'), "
                f"pg_indexes_size('{workload.table}')").fetchone()
            peak = proc_peak_rss(con.info.backend_pid)
        finally:
            con.close()
        return {"load_seconds": seconds, "documents": docs, "version": f"PostgreSQL {version}",
                "total_size": total, "data_size": data, "index_size": index,
                "total_size_method": "pg_total_relation_size (heap + TOAST + indexes), as JSONBench",
                "data_dir_bytes": dir_bytes(self.pgdata), "load_peak_rss": peak, "rejected": rejected,
                "peak_rss_method": "VmHWM of the loading backend process"}

    def _copy(self, con, table, path):
        """COPY the file in batches; a failing batch is retried one document at a time."""
        import psycopg

        rejected = 0
        with open(path, "rb") as f:
            while True:
                lines = [line for _, line in zip(range(BATCH_LINES), f)]
                if not lines:
                    break
                batch = b"".join(l.replace(b"\\u0000", b"") for l in lines if l.strip())
                try:
                    with con.transaction(), con.cursor().copy(COPY_SQL.format(table=table)) as cp:
                        cp.write(batch)
                except psycopg.Error:
                    for line in batch.splitlines():
                        try:
                            con.execute(f"INSERT INTO {table} VALUES (%s::jsonb)", (line.decode("utf-8", "replace"),))
                        except psycopg.Error:
                            rejected += 1
        if rejected:
            log(f"postgres: {rejected} documents rejected by jsonb")
        return rejected

    def cold_start(self):
        self.stop()
        method = drop_page_cache()
        self.start()
        return method.replace("fresh process", "server restarted, fresh connection")

    def query(self, workload, sql, runs):
        con = self._connect()
        try:
            times, rows, columns = [], [], []
            for _ in range(runs):
                started = time.perf_counter()
                cur = con.execute(sql)
                rows = cur.fetchall()
                times.append(time.perf_counter() - started)
                columns = [d.name for d in cur.description]
            peak = proc_peak_rss(con.info.backend_pid)
        finally:
            con.close()
        return {"times": times, "columns": columns, "rows": [list(r) for r in rows], "peak_rss": peak}

    def cleanup(self):
        self.stop()
        if getattr(self, "dir", None):
            shutil.rmtree(self.dir, ignore_errors=True)
