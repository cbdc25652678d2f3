"""`kill -9` during an ingest or a merge leaves the table as before or fully after: never a
partial part, never a corrupt table. Real processes, real signals."""
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
