"""Strata's benchmark suite: the JSONBench workload on Strata and on real peers, side by side.

For each scale it generates the Bluesky dataset with `strata generate`, records the raw size and
the `zstd -1` / `zstd -3` sizes, loads it into every selected system (each in its own process, so
peak memory is that process's), then runs Q1–Q5 three times per query in a fresh process: run 1 is
cold (page cache dropped first when the machine allows it, else only a fresh process — recorded in
`cold_method`), hot = min(run 2, run 3). Every answer is compared with DuckDB's over the same file.

    bench/run.sh --systems strata,clickhouse,duckdb --scales 1m,10m

Results: bench/results/results.json (schema in bench/README.md), summary.md, report.html.
"""
import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import report  # noqa: E402

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
SCALES = {"100k": 100_000, "1m": 1_000_000, "10m": 10_000_000, "100m": 100_000_000}
QUERIES = ["Q1", "Q2", "Q3", "Q4", "Q5"]
SORT_KEY = "kind,commit.operation,commit.collection,did,time_us"
PY = sys.executable


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def read_queries(system):
    text = (BENCH / "queries" / "jsonbench" / f"{system}.sql").read_text()
    return [q.strip() for q in text.split(";\n") if q.strip().rstrip(";")]


def run_with_rss(cmd, env=None):
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    out_chunks, err_chunks = [], []
    import threading

    def pump(stream, sink):
        for chunk in iter(lambda: stream.read(65536), b""):
            sink.append(chunk)

    threads = [threading.Thread(target=pump, args=(proc.stdout, out_chunks)),
               threading.Thread(target=pump, args=(proc.stderr, err_chunks))]
    for t in threads:
        t.start()
    _, status, usage = os.wait4(proc.pid, 0)
    for t in threads:
        t.join()
    seconds = time.perf_counter() - started
    code = os.waitstatus_to_exitcode(status)
    return code, b"".join(out_chunks), b"".join(err_chunks), seconds, usage.ru_maxrss * 1024


def drop_caches():
    try:
        subprocess.run(["sync"], check=True)
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return "page cache dropped (echo 3 > /proc/sys/vm/drop_caches), fresh process"
    except OSError:
        return "fresh process; page cache could not be dropped here"


def dir_bytes(path):
    path = Path(path)
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def normalise(rows):
    out = []
    for row in rows:
        norm = []
        for v in (row.values() if isinstance(row, dict) else row):
            if isinstance(v, float):
                v = round(v, 6)
            elif isinstance(v, str):
                v = v.replace("T", " ")
                if re.fullmatch(r"-?\d+", v):
                    v = int(v)
            norm.append(v)
        out.append(norm)
    return out


class Strata:
    name = "strata"

    def __init__(self, binary, work):
        self.binary = binary
        self.dir = work / "strata-db"

    def load(self, ndjson):
        shutil.rmtree(self.dir, ignore_errors=True)
        code, out, err, secs, rss = run_with_rss(
            [self.binary, "--data-dir", str(self.dir), "ingest", "bluesky", "--sort-key", SORT_KEY, str(ndjson)])
        if code != 0:
            raise RuntimeError(err.decode()[-2000:])
        loaded = int(re.search(r"loaded (\d+)", err.decode()).group(1))
        return {"load_seconds": secs, "documents": loaded, "bytes": dir_bytes(self.dir / "bluesky"), "load_peak_rss": rss}

    def query(self, sql, runs):
        script = "; ".join([sql.rstrip(";")] * runs)
        code, out, err, _, rss = run_with_rss(
            [self.binary, "--data-dir", str(self.dir), "query", "--format", "ndjson", "--timing", script])
        if code != 0:
            raise RuntimeError(err.decode()[-2000:])
        times = [float(t) / 1000 for t in re.findall(r"Time: ([0-9.]+) ms", err.decode())]
        lines = [json.loads(l) for l in out.decode().splitlines() if l.strip()]
        per_run = len(lines) // runs
        return {"times": times, "rows": lines[-per_run:] if per_run else [], "peak_rss": rss}


class PythonPeer:
    def __init__(self, name, script, target):
        self.name = name
        self.script = script
        self.target = target

    def load(self, ndjson):
        if Path(self.target).is_dir():
            shutil.rmtree(self.target)
        elif Path(self.target).exists():
            os.remove(self.target)
        code, out, err, secs, rss = run_with_rss([PY, str(BENCH / "peers" / self.script), "load", str(ndjson), str(self.target)])
        if code != 0:
            raise RuntimeError(err.decode()[-2000:])
        result = json.loads(out.decode().strip().splitlines()[-1])
        result["load_peak_rss"] = rss
        result["bytes"] = dir_bytes(self.target)
        return result

    def query(self, sql, runs):
        code, out, err, _, rss = run_with_rss([PY, str(BENCH / "peers" / self.script), "query", str(self.target), sql, str(runs)])
        if code != 0:
            raise RuntimeError(err.decode()[-2000:])
        result = json.loads(out.decode().strip().splitlines()[-1])
        result["peak_rss"] = rss
        return result


def compressed_sizes(ndjson):
    sizes = {"raw": ndjson.stat().st_size}
    for level in (1, 3):
        out = subprocess.run(f"zstd -{level} -T1 -q -c {ndjson} | wc -c", shell=True, capture_output=True, check=True)
        sizes[f"zstd_{level}"] = int(out.stdout.decode().strip())
    return sizes


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--systems", default="strata,clickhouse,duckdb")
    parser.add_argument("--workloads", default="jsonbench", help="jsonbench (gharchive and logs: see README)")
    parser.add_argument("--scales", default="1m,10m")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--strata-bin", default=str(REPO / "target" / "release" / "strata"))
    parser.add_argument("--work", default=str(BENCH / "work"))
    parser.add_argument("--out", default=str(BENCH / "results"))
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]

    results = {
        "machine": {"cpus": os.cpu_count(), "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
                    "platform": platform.platform(), "python": platform.python_version()},
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "peers_not_run": {"mongodb": "cannot run here: no MongoDB server package reaches this machine",
                          "greptimedb": "cannot run here: no GreptimeDB binary reaches this machine"},
        "runs": [],
    }
    for scale in [s.strip() for s in args.scales.split(",")]:
        docs = SCALES[scale]
        ndjson = work / f"bluesky_{scale}.ndjson"
        if not ndjson.exists():
            log(f"generating {docs:,} documents -> {ndjson}")
            subprocess.run([args.strata_bin, "generate", "bluesky", "--docs", str(docs), "--seed", "1", "-o", str(ndjson)], check=True)
        sizes = compressed_sizes(ndjson)
        log(f"{scale}: raw {sizes['raw']:,} B, zstd -1 {sizes['zstd_1']:,} B, zstd -3 {sizes['zstd_3']:,} B")
        reference = {}
        peers = {
            "strata": lambda: Strata(args.strata_bin, work),
            "clickhouse": lambda: PythonPeer("clickhouse", "clickhouse.py", work / "chdb"),
            "duckdb": lambda: PythonPeer("duckdb", "duckdb_peer.py", work / "duck.db"),
        }
        # DuckDB answers are the reference: run it first when selected.
        order = sorted(systems, key=lambda s: s != "duckdb")
        for system in order:
            entry = {"system": system, "workload": "jsonbench", "scale": scale, "dataset_size": docs, "data_sizes": sizes}
            results["runs"].append(entry)
            if system not in peers:
                entry["error"] = f"unknown or not runnable system {system}"
                continue
            peer = peers[system]()
            try:
                log(f"{scale} {system}: loading")
                load = peer.load(ndjson)
                entry.update(load)
                entry["data_quality"] = load["documents"] / docs
                log(f"{scale} {system}: {load['documents']:,} docs in {load['load_seconds']:.1f} s, {load['bytes']:,} B on disk")
                queries = read_queries(system)
                entry["queries"] = {}
                for name, sql in zip(QUERIES, queries):
                    method = drop_caches()
                    result = peer.query(sql, args.runs)
                    times = result["times"]
                    rows = normalise(result["rows"])
                    if system == "duckdb":
                        reference[name] = rows
                    q = {"times": times, "cold": times[0], "hot": min(times[1:]) if len(times) > 1 else times[0],
                         "peak_rss": result.get("peak_rss"), "cold_method": method,
                         "matches_reference": (rows == reference[name]) if name in reference else None, "rows": rows[:5]}
                    entry["queries"][name] = q
                    log(f"{scale} {system} {name}: cold {q['cold']*1000:.1f} ms, hot {q['hot']*1000:.1f} ms, correct={q['matches_reference']}")
            except Exception as e:  # a failed peer is reported, the rest continue
                entry["error"] = str(e)[-2000:]
                log(f"{scale} {system}: FAILED: {entry['error'][:300]}")
    results["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    (out_dir / "results.json").write_text(json.dumps(results, indent=1, default=str))
    summary = report.markdown(results)
    (out_dir / "summary.md").write_text(summary)
    (out_dir / "report.html").write_text(report.html(results))
    print(summary)


if __name__ == "__main__":
    main()
