"""Measuring child processes: wall time and peak resident memory of one process, dropping the OS
page cache before a cold run (or one file's pages before a server starts), disk usage of a
directory, and the progress log."""
import os
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path


def log(msg):
    """Progress line on stdout, with a wall-clock timestamp."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


@dataclass
class ProcResult:
    code: int
    stdout: bytes
    stderr: bytes
    seconds: float
    peak_rss: int  # bytes; ru_maxrss of this one child process (not of its own children)

    def check(self, what):
        """Raise a readable error when the process failed."""
        if self.code != 0:
            tail = self.stderr.decode(errors="replace").strip()[-3000:]
            raise RuntimeError(f"{what} exited with status {self.code}: {tail or '(no stderr)'}")
        return self


def run_measured(cmd, env=None, cwd=None, timeout=None):
    """Run `cmd`, capture stdout/stderr, return wall seconds and the child's peak RSS (wait4)."""
    started = time.perf_counter()
    proc = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, cwd=cwd)
    chunks = {"out": [], "err": []}

    def pump(stream, sink):
        for chunk in iter(lambda: stream.read(65536), b""):
            sink.append(chunk)

    threads = [threading.Thread(target=pump, args=(proc.stdout, chunks["out"]), daemon=True),
               threading.Thread(target=pump, args=(proc.stderr, chunks["err"]), daemon=True)]
    for t in threads:
        t.start()
    timer = None
    if timeout:
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
    _, status, usage = os.wait4(proc.pid, 0)
    if timer:
        timer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)  # tell Popen the child is reaped
    for t in threads:
        t.join()
    seconds = time.perf_counter() - started
    return ProcResult(proc.returncode, b"".join(chunks["out"]), b"".join(chunks["err"]), seconds,
                      usage.ru_maxrss * 1024)


_DROP_STATE = {}


def drop_page_cache():
    """Drop the OS page cache (sync; echo 3 > /proc/sys/vm/drop_caches).

    Returns the cold-run method actually used, as recorded in the results."""
    try:
        subprocess.run(["sync"], check=True)
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        _DROP_STATE["ok"] = True
        return "page cache dropped, fresh process"
    except OSError as e:
        if "warned" not in _DROP_STATE:
            log(f"cannot drop the page cache ({e}); cold runs are 'fresh process, page cache not dropped'")
            _DROP_STATE["warned"] = True
        return "fresh process, page cache not dropped"


def evict_from_page_cache(path):
    """Drop one file's clean pages from the OS page cache (posix_fadvise DONTNEED; pages another
    process has mapped stay). A server's resident memory counts the pages of its own binary it
    touches, and how many that is depends on how those pages came into the cache: written (by
    the linker, `cp`) they are mapped in larger folios than when read back from disk (ADR 0013).
    Evicting the binary before a start makes every run read it back the same way. Dirty pages
    (a binary just linked) are written back first: the kernel drops only clean ones."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def dir_bytes(path):
    """Bytes on disk under `path` (a file or a directory tree), counted with os.walk.

    Counts allocated blocks (st_blocks * 512) when available, so sparse files are not overstated,
    and apparent sizes otherwise."""
    path = Path(path)
    if not path.exists():
        return 0
    if path.is_file():
        return _file_bytes(path)
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            p = Path(root) / name
            if not p.is_symlink():
                total += _file_bytes(p)
    return total


def _file_bytes(p):
    st = p.stat()
    blocks = getattr(st, "st_blocks", None)
    return min(st.st_size, blocks * 512) if blocks is not None and blocks > 0 else st.st_size


def proc_status_bytes(pid, names):
    """The memory fields `names` (VmHWM, VmRSS, RssAnon, …) of a running process's
    /proc/PID/status, in bytes; a field the kernel does not show is left out."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in names:
            found[name] = int(value.split()[0]) * 1024
    return found


def proc_peak_rss(pid):
    """Peak resident memory (VmHWM) of a running process, in bytes, or None."""
    try:
        return proc_status_bytes(pid, ("VmHWM",)).get("VmHWM")
    except OSError:
        return None
