"""Shipper-style `_bulk` ingest into `strata serve` (issue 15): how many documents per second
small Elasticsearch bulk requests get into an index that exists, and the server CPU they cost.

Lines of a generated nginx log (`strata generate nginx`) are sent as `{"message": line}` documents
in `index` actions without `_id` (as Filebeat and Vector send them by default), `--batch`
documents per request, from `--clients` concurrent connections for `--seconds`, after one request
that creates the index. Each build given (`--strata-bin`, and `--baseline-bin` to compare two
builds) runs every (clients, batch) cell on a fresh server, the builds alternating cell by cell
(this machine's load drifts). Prints documents/s, server CPU per 1,000 documents (from /proc), the
documents the index holds afterwards (checked against those acknowledged) and its parts after the
server stopped; writes OUT/results.json. Usage:
  bench/.venv/bin/python bench/bulk.py --strata-bin BIN [--baseline-bin BIN] [--clients 1,4]
      [--batch 50,200,1000] [--seconds 10] [--lines 200000] [--work DIR] [--out DIR]
"""
import argparse
import http.client
import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib.pgservers import wait_for_port  # noqa: E402
from benchlib.systems.postgres import free_ports  # noqa: E402

INDEX = "logs"


def bodies(lines, batch):
    out = []
    for start in range(0, len(lines), batch):
        docs = [b'{"index":{}}\n' + json.dumps({"message": line}).encode() + b"\n"
                for line in lines[start:start + batch]]
        out.append(b"".join(docs))
    return out


def post(conn, body):
    conn.request("POST", f"/{INDEX}/_bulk", body, {"Content-Type": "application/x-ndjson"})
    response = conn.getresponse()
    answer = json.loads(response.read())
    if response.status != 200 or answer.get("errors"):
        raise RuntimeError(f"_bulk failed ({response.status}): {json.dumps(answer)[:500]}")
    return len(answer["items"])


def cpu_seconds(pid):
    fields = Path(f"/proc/{pid}/stat").read_text().split()
    return (int(fields[13]) + int(fields[14])) / 100


def run_cell(binary, work, lines, clients, batch, seconds):
    data_dir = work / "db"
    shutil.rmtree(data_dir, ignore_errors=True)
    (port,) = free_ports(1)
    with (work / "serve.log").open("wb") as log:
        proc = subprocess.Popen([str(binary), "--data-dir", str(data_dir), "serve", "--http", f"127.0.0.1:{port}"],
                                stdout=subprocess.DEVNULL, stderr=log)
    try:
        wait_for_port(port, proc)
        requests = bodies(lines, batch)
        sent = [post(http.client.HTTPConnection("127.0.0.1", port, timeout=120), requests[0])]
        acknowledged = [0] * clients
        errors = []
        stop = time.monotonic() + seconds

        def client(k):
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
                i = 1 + k
                while time.monotonic() < stop:
                    acknowledged[k] += post(conn, requests[i % len(requests)])
                    i += clients
            except Exception as e:  # reported below: a failed cell is not a number
                errors.append(e)

        cpu_before, started = cpu_seconds(proc.pid), time.monotonic()
        threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed, cpu = time.monotonic() - started, cpu_seconds(proc.pid) - cpu_before
        if errors:
            raise RuntimeError(f"a client failed: {errors[0]}")
        documents = sum(acknowledged)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        conn.request("POST", "/v1/query", f"SELECT count(*) AS n FROM {INDEX}".encode())
        held = json.loads(conn.getresponse().read().decode().strip())[0]["n"]
        if held != documents + sent[0]:
            raise RuntimeError(f"{documents + sent[0]} documents acknowledged, {held} in the index")
    finally:
        proc.terminate()
        proc.wait(timeout=120)
    tables = subprocess.run([str(binary), "--data-dir", str(data_dir), "tables"],
                            capture_output=True, text=True, check=True).stdout
    row = next(line.split() for line in tables.splitlines() if line.startswith(INDEX + " "))
    return {"clients": clients, "batch": batch, "documents": documents, "seconds": elapsed,
            "documents_per_s": documents / elapsed, "cpu_ms_per_1000": 1e6 * cpu / max(documents, 1),
            "parts": int(row[2])}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--strata-bin", required=True)
    parser.add_argument("--baseline-bin", help="a second build, run in turns with the first")
    parser.add_argument("--clients", default="1,4")
    parser.add_argument("--batch", default="50,200,1000")
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--work", default=str(Path(__file__).resolve().parent / "work" / "bulk"))
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "bulk"))
    args = parser.parse_args()
    work, out = Path(args.work), Path(args.out)
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    builds = {"strata": Path(args.strata_bin)}
    if args.baseline_bin:
        builds["baseline"] = Path(args.baseline_bin)
    log = work / "access.log"
    subprocess.run([str(builds["strata"]), "generate", "nginx", "--docs", str(args.lines), "--seed", "1",
                    "-o", str(log)], check=True, capture_output=True)
    lines = log.read_text().splitlines()
    runs = []
    for clients in [int(c) for c in args.clients.split(",")]:
        for batch in [int(b) for b in args.batch.split(",")]:
            for name, binary in builds.items():
                cell = run_cell(binary, work, lines, clients, batch, args.seconds)
                cell["build"] = name
                runs.append(cell)
                print(f"{name}: {clients} clients x {batch}: {cell['documents_per_s']:,.0f} documents/s", flush=True)
    print(f"\n{'build':<10}{'clients':>8}{'batch':>7}{'documents/s':>13}{'CPU ms/1000':>13}{'parts':>7}")
    for r in runs:
        print(f"{r['build']:<10}{r['clients']:>8}{r['batch']:>7}{r['documents_per_s']:>13,.0f}"
              f"{r['cpu_ms_per_1000']:>13.1f}{r['parts']:>7}")
    (out / "results.json").write_text(json.dumps({"seconds": args.seconds, "lines": args.lines, "runs": runs},
                                                 indent=2) + "\n")
    print(f"\nwrote {out / 'results.json'}")


if __name__ == "__main__":
    main()
