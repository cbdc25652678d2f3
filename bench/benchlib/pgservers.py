"""The two servers that the transaction benchmarks (booking.py, oltp.py) drive with the same
PostgreSQL clients: `strata serve` on a data directory loaded with `strata ingest`, and a private
PostgreSQL cluster (benchlib.systems.postgres) with each table a `jsonb` column and a unique
expression index on its key. `tables` maps a table name to (key path or None, documents)."""
import json
import shutil
import socket
import subprocess
import time
from pathlib import Path

from .systems.base import Context
from .systems.postgres import Postgres, free_ports


def wait_for_port(port, proc, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"strata serve exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("strata serve did not listen")


class StrataServer:
    def __init__(self, binary, work, tables):
        self.binary, self.data_dir = binary, work / "strata"
        shutil.rmtree(self.data_dir, ignore_errors=True)
        for name, (key, docs) in tables.items():
            path = work / f"{name}.ndjson"
            path.write_text("".join(json.dumps(d) + "\n" for d in docs))
            args = [binary, "--data-dir", self.data_dir, "ingest", name, path]
            if key:
                args += ["--key", key]
            subprocess.run([str(a) for a in args], check=True, capture_output=True)
        self.port, http_port = free_ports(2)
        # The server's messages (merges, checkpoints, their failures) stay beside its data.
        self.log = work / "strata-serve.log"
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen([str(binary), "--data-dir", str(self.data_dir), "serve", "--pg",
                                          f"127.0.0.1:{self.port}", "--http", f"127.0.0.1:{http_port}"],
                                         stdout=subprocess.DEVNULL, stderr=log)
        wait_for_port(self.port, self.proc)
        self.user, self.database = "strata", "strata"
        self.dsn = f"host=127.0.0.1 port={self.port} user=strata dbname=strata"

    def count(self, table):
        return int(self.execute(f"SELECT count(*) FROM {table}").strip())

    def execute(self, sql):
        """Runs one statement through psql; returns its unaligned output (a failure names the
        statement and what psql said)."""
        proc = subprocess.run(["psql", self.dsn, "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            server = self.log.read_text(errors="replace").splitlines()[-5:]
            raise RuntimeError(f"psql failed ({proc.returncode}) on {sql!r}: {proc.stderr.strip()}; "
                               f"the server's last messages ({self.log}): {server}")
        return proc.stdout

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=120)


class PostgresServer:
    def __init__(self, work, tables):
        self.system = Postgres(Context(work=work / "pg", strata_bin=Path("/dev/null")))
        self.system.check_runnable()
        self.system._init_cluster()
        self.system.start()
        with self.system._connect("postgres") as con:
            con.execute("CREATE DATABASE bench")
        with self.system._connect() as con:
            for name, (key, docs) in tables.items():
                con.execute(f"CREATE TABLE {name} (data jsonb NOT NULL)")
                if key:
                    con.execute(f"CREATE UNIQUE INDEX ON {name} ((data->>'{key}'))")
                with con.cursor().copy(f"COPY {name} (data) FROM STDIN") as copy:
                    for doc in docs:
                        copy.write_row([json.dumps(doc)])
            con.execute("VACUUM ANALYZE")
        self.port, self.user, self.database = self.system.port, "postgres", "bench"
        self.dsn = f"host=127.0.0.1 port={self.system.port} user=postgres dbname=bench"

    def count(self, table):
        with self.system._connect() as con:
            return con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]

    def execute(self, sql):
        with self.system._connect() as con:
            con.execute(sql)
            con.execute("ANALYZE")

    def stop(self):
        self.system.stop()
