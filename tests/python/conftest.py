"""Shared fixtures: the real `strata` binary and helpers to run it as a user would."""
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"


def strata_bin() -> str:
    path = os.environ.get("STRATA_BIN") or str(REPO / "target" / "debug" / "strata")
    if not Path(path).exists():
        raise RuntimeError(f"strata binary not found at {path}: run `cargo build` first or set STRATA_BIN")
    return path


class Strata:
    def __init__(self, data_dir: Path):
        self.data_dir = data_dir

    def run(self, *args, input=None, check=True, timeout=600):
        cmd = [strata_bin(), "--data-dir", str(self.data_dir), *map(str, args)]
        proc = subprocess.run(cmd, input=input, capture_output=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"{cmd} failed ({proc.returncode}):\n{proc.stderr.decode()}")
        return proc

    def ingest(self, table, *files, sort_key=None, extra=()):
        args = ["ingest", table, *files, *extra]
        if sort_key:
            args += ["--sort-key", sort_key]
        return self.run(*args)

    def query_rows(self, sql):
        out = self.run("query", "--format", "ndjson", sql).stdout.decode()
        return [json.loads(line) for line in out.splitlines() if line.strip()]


@pytest.fixture
def strata(tmp_path):
    return Strata(tmp_path / "db")


@pytest.fixture(scope="session")
def bluesky_100k(tmp_path_factory):
    """A generated 100k-document Bluesky file (deterministic)."""
    path = tmp_path_factory.mktemp("gen") / "bluesky_100k.ndjson"
    subprocess.run([strata_bin(), "generate", "bluesky", "--docs", "100000", "--seed", "7", "-o", str(path)], check=True)
    return path


def maven_jar(group: str, artifact: str, version: str) -> Path:
    """A jar from Maven Central, cached in tests/.cache and checked against Maven's SHA-1."""
    import hashlib
    import urllib.request

    cache = REPO / "tests" / ".cache"
    cache.mkdir(exist_ok=True)
    jar = cache / f"{artifact}-{version}.jar"
    if not jar.exists():
        url = (f"https://repo1.maven.org/maven2/{group.replace('.', '/')}/{artifact}/{version}/"
               f"{artifact}-{version}.jar")
        data = urllib.request.urlopen(url, timeout=300).read()
        expected = urllib.request.urlopen(url + ".sha1", timeout=60).read().decode().split()[0]
        assert hashlib.sha1(data).hexdigest() == expected, f"{url} does not match its SHA-1"
        partial = jar.with_suffix(".part")
        partial.write_bytes(data)
        partial.rename(jar)
    return jar


def copy_sample(name, dest: Path) -> Path:
    target = dest / name
    shutil.copy(DATA / name, target)
    return target
