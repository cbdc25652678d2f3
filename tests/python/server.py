"""Starts `strata serve` as a real process on loopback ports chosen by the OS and talks to it as
clients do: HTTP through urllib, PostgreSQL through psycopg and psql."""
import json
import os
import queue
import re
import signal
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from conftest import strata_bin

LISTENING = re.compile(r"strata: listening for (HTTP|PostgreSQL) on (?:http://)?([\d.]+):(\d+)")


def ndjson(docs):
    """Documents as an NDJSON request body."""
    return "".join(json.dumps(d) + "\n" for d in docs).encode()


def headers_of(response):
    """Header names in lower case (HTTP/1.1 names are case-insensitive)."""
    return {k.lower(): v for k, v in response.headers.items()}


class Server:
    def __init__(self, data_dir: Path | str, config: str | None = None, extra_args=(), tls_ca: Path | None = None,
                 config_dir: Path | None = None):
        # A URL (s3://…) stays a string: a Path would fold its double slash.
        self.data_dir = data_dir if isinstance(data_dir, str) and "://" in data_dir else Path(data_dir)
        self.tls_ca = tls_ca  # HTTPS, trusting this CA certificate
        self.config_path = None
        if config is not None:
            if config_dir is not None:
                self.config_path = Path(config_dir) / "strata.toml"
            else:
                self.config_path = self.data_dir.parent / f"{self.data_dir.name}.toml"
            self.config_path.write_text(config)
        self.extra_args = list(extra_args)
        self.proc = None
        self.lines: "queue.Queue[str]" = queue.Queue()
        self.log: list[str] = []

    def start(self, timeout=60):
        args = [strata_bin(), "--data-dir", str(self.data_dir), "serve",
                "--http", "127.0.0.1:0", "--pg", "127.0.0.1:0", *self.extra_args]
        if self.config_path:
            args += ["--config", str(self.config_path)]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        threading.Thread(target=self._read_stderr, args=(self.proc,), daemon=True).start()
        ports = {}
        deadline = time.monotonic() + timeout
        while len(ports) < 2:
            remaining = deadline - time.monotonic()
            try:
                line = self.lines.get(timeout=max(remaining, 0.01))
            except queue.Empty:
                raise AssertionError(f"server did not start: {self.log}")
            if line is None:
                raise AssertionError(f"server exited: {self.log}")
            m = LISTENING.search(line)
            if m:
                ports[m.group(1)] = int(m.group(3))
        self.http_port, self.pg_port = ports["HTTP"], ports["PostgreSQL"]
        return self

    def _read_stderr(self, proc):
        for line in proc.stderr:
            self.log.append(line.rstrip("\n"))
            self.lines.put(line)
        self.lines.put(None)

    @property
    def url(self):
        scheme = "https" if self.tls_ca else "http"
        return f"{scheme}://127.0.0.1:{self.http_port}"

    def dsn(self, user="strata", password=None):
        dsn = f"host=127.0.0.1 port={self.pg_port} user={user} dbname=strata"
        if password is not None:
            dsn += " password='" + password.replace("\\", "\\\\").replace("'", "\\'") + "'"
        return dsn

    def request(self, method, path, body: bytes | None = None, headers=None, timeout=120):
        """Returns (status, headers, body bytes); HTTP errors are answers too."""
        req = urllib.request.Request(self.url + path, data=body, method=method, headers=headers or {})
        context = ssl.create_default_context(cafile=str(self.tls_ca)) if self.tls_ca else None
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=context) as resp:
                return resp.status, headers_of(resp), resp.read()
        except urllib.error.HTTPError as e:
            return e.code, headers_of(e), e.read()

    def ingest(self, table, body: bytes, headers=None, query=""):
        status, _, answer = self.request("POST", f"/v1/ingest/{table}{query}", body, headers)
        return status, json.loads(answer)

    def query(self, sql, fmt="ndjson", headers=None):
        status, hdrs, answer = self.request(
            "POST", f"/v1/query?format={fmt}", sql.encode(), headers)
        return status, hdrs, answer

    def rows(self, sql, headers=None):
        status, _, answer = self.query(sql, "ndjson", headers)
        assert status == 200, answer
        return [json.loads(line) for line in answer.splitlines()]

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"server did not stop on {sig}: {self.log}")

    def kill(self):
        self.proc.kill()
        self.proc.wait()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
