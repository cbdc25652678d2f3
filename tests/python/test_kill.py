"""`kill -9` during an ingest or a merge leaves the table as before or fully after: never a
partial part, never a corrupt table. Real processes, real signals."""
import json
import os
import random
import signal
import subprocess
import time

from conftest import strata_bin


def count(strata, table):
    proc = strata.run("query", "--format", "ndjson", f"SELECT count(*) AS n FROM {table}", check=False)
    if proc.returncode != 0:
        return 0  # the table does not exist yet
    return int(proc.stdout.decode().split(":")[1].strip(" }\n"))


def export_count(strata, table):
    proc = strata.run("export", table, check=False)
    return len(proc.stdout.splitlines()) if proc.returncode == 0 else 0


def test_kill_during_ingest_and_merge(strata, bluesky_100k):
    rng = random.Random(42)
    committed = 0
    for attempt in range(6):
        proc = subprocess.Popen(
            [strata_bin(), "--data-dir", str(strata.data_dir), "ingest", "bluesky", str(bluesky_100k),
             "--sort-key", "kind,did", "--no-merge"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        time.sleep(rng.uniform(0.05, 2.0))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        n = count(strata, "bluesky")
        assert n in (committed, committed + 100_000), f"attempt {attempt}: {n} rows after kill"
        assert export_count(strata, "bluesky") == n
        committed = n
    # At least one complete ingest so that merges have inputs.
    while committed < 300_000:
        strata.ingest("bluesky", bluesky_100k, extra=["--no-merge"])
        committed += 100_000
    parts_dir = strata.data_dir / "bluesky" / "parts"
    for attempt in range(4):
        proc = subprocess.Popen(
            [strata_bin(), "--data-dir", str(strata.data_dir), "optimize", "bluesky"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        time.sleep(rng.uniform(0.05, 1.5))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert count(strata, "bluesky") == committed, f"merge attempt {attempt}"
        assert export_count(strata, "bluesky") == committed
    strata.run("optimize", "bluesky")
    assert count(strata, "bluesky") == committed
    # Garbage of killed writers was collected by the last writer.
    assert not [p for p in os.listdir(parts_dir) if p.endswith(".tmp")]


def versions_by_key(strata, table):
    """{key: version} of every exported document; fails if a key is exported twice."""
    proc = strata.run("export", table, check=False)
    if proc.returncode != 0:
        return {}
    seen = {}
    for line in proc.stdout.decode().splitlines():
        doc = json.loads(line)
        assert doc["id"] not in seen, f"key {doc['id']} is live twice"
        seen[doc["id"]] = doc["v"]
    return seen


def test_kill_during_keyed_upserts_and_merges(strata, tmp_path):
    """Each keyed ingest replaces every document: after a kill the table holds every key once,
    all of one version (the last committed ingest's) — never a mix, never a key twice."""
    keys = 60_000
    files = []
    for version in range(1, 4):
        path = tmp_path / f"v{version}.ndjson"
        with path.open("w") as f:
            for k in range(keys):
                f.write(json.dumps({"id": f"k{k:06d}", "v": version, "pad": "x" * 40,
                                    "kind": f"k{k % 5}"}) + "\n")
        files.append(path)
    strata.run("ingest", "t", str(files[0]), "--key", "id", "--sort-key", "kind")
    rng = random.Random(7)
    committed = 1
    for attempt in range(6):
        version = attempt % 3 + 1
        proc = subprocess.Popen(
            [strata_bin(), "--data-dir", str(strata.data_dir), "ingest", "t", str(files[version - 1])],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        time.sleep(rng.uniform(0.05, 1.5))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        got = versions_by_key(strata, "t")
        assert len(got) == keys, f"attempt {attempt}: {len(got)} keys"
        assert set(got.values()) in ({committed}, {version}), f"attempt {attempt}: a mix {set(got.values())}"
        committed = next(iter(got.values()))
        print(f"attempt {attempt}: ingest of version {version} killed, table at version {committed}")
        proc = subprocess.Popen([strata_bin(), "--data-dir", str(strata.data_dir), "optimize", "t"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.05, 1.0))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert versions_by_key(strata, "t") == got, f"merge attempt {attempt}"
    assert strata.run("check", "t", check=False).returncode == 0
