"""A/B of Strata builds on the server's write workloads (issue 14): the flight booking (pgbench,
bench/booking.py's script) and sysbench's select/update mixes (bench/oltp.py's), each run on a
fresh server per build, the builds taking turns round after round so that the machine's noise
falls on all of them alike (bench/ab.sh does the same for queries).

Prints, per workload and build, each round's rate, their median, the server's CPU per
transaction (user + system time from /proc over the run) and the ratio of the medians to the
first build's. Usage:
  bench/.venv/bin/python bench/ab_server.py BIN_A BIN_B [...] [--workloads booking,50/50]
      [--clients 16] [--seconds 10] [--rounds 3] [--work DIR]
"""
import argparse
import shutil
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import booking  # noqa: E402
import oltp  # noqa: E402
from benchlib.pgservers import StrataServer  # noqa: E402

SYSBENCH_MIXES = {"select": 0, "95/5": 5, "50/50": 50}
SYSBENCH_DOCS = 10_000


def cpu_seconds(pid):
    """User + system CPU time of a process so far, from /proc (clock ticks of 1/100 s)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100


def run_once(binary, workload, clients, seconds, work):
    """One fresh server of `binary` running `workload`: (transactions/s, server CPU ms each)."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    if workload == "booking":
        server = StrataServer(binary, work, booking.tables())
        script = work / "booking.sql"
        script.write_text(booking.SCRIPT)
    else:
        server = StrataServer(binary, work, {"docs": ("id", oltp.documents(SYSBENCH_DOCS))})
    try:
        before = cpu_seconds(server.proc.pid)
        if workload == "booking":
            result = booking.pgbench(server.dsn, script, clients, seconds, work)
            rate, count = result["tps"], result["transactions"]
        else:
            result = oltp.sysbench(server, clients, seconds, SYSBENCH_DOCS, SYSBENCH_MIXES[workload])
            rate, count = result["events_per_s"], result["events_per_s"] * seconds
        cpu = cpu_seconds(server.proc.pid) - before
    finally:
        server.stop()
    return rate, 1000 * cpu / max(count, 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("binaries", nargs="+", type=Path)
    parser.add_argument("--workloads", default="booking,50/50",
                        help="booking, and sysbench's select, 95/5 or 50/50 (comma-separated)")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work", default="bench/work/ab-server", type=Path)
    args = parser.parse_args()
    workloads = args.workloads.split(",")
    for workload in workloads:
        if workload != "booking" and workload not in SYSBENCH_MIXES:
            sys.exit(f"unknown workload {workload!r}: booking, {', '.join(SYSBENCH_MIXES)}")
        tool = "pgbench" if workload == "booking" else "sysbench"
        if not shutil.which(tool):
            sys.exit(f"{tool} is not installed (tests/install-clients.sh installs it)")
    for binary in args.binaries:
        if not binary.is_file():
            sys.exit(f"not a file: {binary}")
    work = args.work.resolve()
    runs = {}
    for round_ in range(args.rounds):
        for workload in workloads:
            for index, binary in enumerate(args.binaries):
                rate, cpu = run_once(binary.resolve(), workload, args.clients, args.seconds, work)
                runs.setdefault((workload, index), []).append((rate, cpu))
                print(f"round {round_ + 1}, {workload}, build {index}: {rate:.0f}/s, {cpu:.3f} ms CPU each",
                      file=sys.stderr, flush=True)
    print(f"{args.clients} clients, {args.seconds} s a run, fresh servers, builds alternating:")
    for workload in workloads:
        base = statistics.median(rate for rate, _ in runs[(workload, 0)])
        for index, binary in enumerate(args.binaries):
            rates = [rate for rate, _ in runs[(workload, index)]]
            cpus = [cpu for _, cpu in runs[(workload, index)]]
            median = statistics.median(rates)
            print(f"{workload:<8} build {index} ({binary}): {' / '.join(f'{r:.0f}' for r in rates)} per s, "
                  f"median {median:.0f} ({median / base:.2f}x), server CPU "
                  f"{statistics.median(cpus):.3f} ms each")


if __name__ == "__main__":
    main()
