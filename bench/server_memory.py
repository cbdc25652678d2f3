"""An idle `strata serve`'s resident memory, split into its anonymous pages and its file pages
(almost all of them the binary's own code), for one or more binaries, runs alternating between
them (issue 15's memory target; ADR 0013).

Each run copies the binary to a fresh file, starts it as a server on an empty data directory,
waits `--settle` seconds and reads `VmRSS`, `RssAnon` and `RssFile` from /proc/PID/status. The
copy's pages are either left in the page cache as writing them put them there (`written`: as a
build or an install leaves a binary) or dropped from it first (`from-disk`, `posix_fadvise
DONTNEED`: the start reads them back, as after a reboot); the kernel maps written pages in larger
pieces, which shows as more `RssFile` (ADR 0013).

Usage: bench/.venv/bin/python bench/server_memory.py --binaries target/release/strata [B ...]
       [--rounds 3] [--settle 3] [--page-cache written|from-disk|both] [--json OUT]
"""
import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from benchlib.procs import evict_from_page_cache, proc_status_bytes  # noqa: E402
from server_load import StrataServer  # noqa: E402

FIELDS = ("VmRSS", "RssAnon", "RssFile")


def resident_parts(pid):
    """VmRSS, RssAnon and RssFile of a process, in bytes."""
    parts = proc_status_bytes(pid, FIELDS)
    missing = [f for f in FIELDS if f not in parts]
    if missing:
        raise RuntimeError(f"/proc/{pid}/status has no {', '.join(missing)}")
    return parts


def idle_server(binary, settle, from_disk):
    """One fresh server's resident memory after `settle` seconds, run from a fresh copy of
    `binary` (so that how its pages are cached does not depend on earlier runs)."""
    work = Path(tempfile.mkdtemp(prefix="strata-idle-"))
    try:
        copy = work / "strata"
        shutil.copy2(binary, copy)
        if from_disk:
            evict_from_page_cache(copy)
        server = StrataServer(copy, work / "data")
        try:
            time.sleep(settle)
            return resident_parts(server.proc.pid)
        finally:
            server.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def measure(binaries, rounds, settle, page_cache):
    """{(binary, page-cache state): [parts of each run]}, the binaries alternating each round."""
    states = {"written": ["written"], "from-disk": ["from-disk"], "both": ["written", "from-disk"]}[page_cache]
    runs = {}
    for _ in range(rounds):
        for binary in binaries:
            for state in states:
                runs.setdefault((str(binary), state), []).append(idle_server(binary, settle, state == "from-disk"))
    return runs


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binaries", nargs="+", required=True, type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--settle", type=float, default=3.0, help="seconds between start and reading")
    parser.add_argument("--page-cache", choices=("written", "from-disk", "both"), default="both")
    parser.add_argument("--json", type=Path, help="write every run's numbers here")
    args = parser.parse_args()
    for binary in args.binaries:
        if not binary.is_file():
            parser.error(f"no binary at {binary}")
    runs = measure(args.binaries, args.rounds, args.settle, args.page_cache)
    print(f"idle strata serve, median of {args.rounds} runs (MB)")
    print(f"{'binary':<40} {'page cache':<10} " + " ".join(f"{f:>8}" for f in FIELDS))
    for (binary, state), parts in runs.items():
        medians = [statistics.median(p[f] for p in parts) / 2**20 for f in FIELDS]
        print(f"{binary:<40} {state:<10} " + " ".join(f"{m:>8.1f}" for m in medians))
    if args.json:
        args.json.write_text(json.dumps([{"binary": b, "page_cache": s, "runs": p} for (b, s), p in runs.items()],
                                        indent=2))


if __name__ == "__main__":
    main()
