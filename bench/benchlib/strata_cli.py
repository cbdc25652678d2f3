"""Driving the `strata` binary from the benchmark scripts: commands, and the per-statement times
`strata query --timing` prints (`Time: N ms` after each statement)."""
import re
import subprocess

LISTENING = re.compile(r"strata: listening for (HTTP|PostgreSQL) on (?:http://)?([\d.]+):(\d+)")


def run(args, **kw):
    """Runs a command (arguments turned into text), capturing its output; fails on a non-zero exit."""
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, check=True, **kw)


def query_runs(binary, data_dir, statements, runs=1, output_format=None):
    """Milliseconds of every run of each statement, all run `runs` times in a row in one
    `strata query` process: a list per statement."""
    script = ";".join(s for s in statements for _ in range(runs))
    fmt = ["--format", output_format] if output_format else []
    proc = run([binary, "--data-dir", data_dir, "query", "--timing", *fmt, script])
    times = [float(t) for t in re.findall(r"Time: ([0-9.]+) ms", proc.stdout + proc.stderr)]
    if len(times) != runs * len(statements):
        raise RuntimeError(f"expected {runs * len(statements)} timings, got {len(times)}")
    return [times[i * runs:(i + 1) * runs] for i in range(len(statements))]


def serve_ports(proc, seen=None):
    """Reads a starting `strata serve`'s stderr (text mode) until both listeners are up: their
    ports by protocol ("HTTP", "PostgreSQL"). Lines read are appended to `seen` when given."""
    ports = {}
    for line in proc.stderr:
        if seen is not None:
            seen.append(line)
        m = LISTENING.search(line)
        if m:
            ports[m.group(1)] = int(m.group(3))
        if len(ports) == 2:
            return ports
    raise RuntimeError(f"strata serve did not start: {''.join(seen or [])[-2000:]}")
