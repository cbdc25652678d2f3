"""Ingest at a fixed rate over HTTP, the way a shipper tails a busy log: `rate` lines per second in
batches every TICK seconds, for `seconds`, while the server's CPU time and resident memory are
read from /proc. A batch that takes longer than its tick delays the next ones (the sender never
runs ahead); the rate actually reached is reported next to the target."""
import os
import time
from pathlib import Path

from .procs import proc_peak_rss, proc_status_bytes

TICK = 0.05


def cpu_seconds(pid):
    """User + system CPU time of a process (and its reaped children), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))  # utime, stime, cutime, cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def resident(pid):
    return proc_status_bytes(pid, ("VmRSS",)).get("VmRSS")


def first_lines(path, count):
    lines = []
    with open(path, "rb") as f:
        for line in f:
            line = line.rstrip(b"\r\n")
            if line:
                lines.append(line)
                if len(lines) == count:
                    break
    return lines


def throttled_ingest(send, path, rate, seconds, pid):
    """Calls `send(list of lines)` with the first rate × seconds lines of `path`, rate × TICK per
    call, one call per TICK. Returns the target and reached rates, the server's CPU % (of one
    core) over the run, its peak and final resident memory."""
    per_batch = max(1, int(rate * TICK))
    lines = first_lines(path, int(rate * seconds))
    cpu_before, started = cpu_seconds(pid), time.perf_counter()
    sent = 0
    for n, offset in enumerate(range(0, len(lines), per_batch)):
        delay = started + n * TICK - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        send(lines[offset:offset + per_batch])
        sent += len(lines[offset:offset + per_batch])
    elapsed = time.perf_counter() - started
    return {"target_lines_per_second": rate, "lines": sent, "seconds": elapsed,
            "lines_per_second": sent / elapsed, "cpu_percent": 100 * (cpu_seconds(pid) - cpu_before) / elapsed,
            "peak_rss": proc_peak_rss(pid), "final_rss": resident(pid)}
