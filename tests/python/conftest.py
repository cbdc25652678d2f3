"""Shared fixtures: the real `strata` binary and helpers to run it as a user would."""
import json
import os
import shutil
import subprocess
import sys
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
    """A jar from Maven Central, cached in tests/.cache (bench/benchlib/maven.py)."""
    sys.path.insert(0, str(REPO / "bench"))
    from benchlib.maven import maven_jar as fetch

    return fetch(REPO / "tests" / ".cache", group, artifact, version)


def copy_sample(name, dest: Path) -> Path:
    target = dest / name
    shutil.copy(DATA / name, target)
    return target
