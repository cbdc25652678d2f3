"""The flight-booking transaction of the PostgreSQL-vs-MongoDB study (../shared/benchmarks.md §4),
on Strata and on PostgreSQL side by side, both driven by the same client and the same script:
`pgbench -M prepared` with a custom script (issue 14).

One transaction, as the study has it:
1. read a random flight schedule joined with its aircraft's capacity;
2. insert a seat (a random user, the schedule, one fixed day);
3. insert a payment for the seat (a random amount: the study's is proportional to the flight
   time, which pgbench's script language cannot read back from step 1);
4. upsert the audit row of (schedule, day): occupied seats + 1 (`INSERT … ON CONFLICT DO
   UPDATE`). The day is fixed, so concurrent transactions collide on audit rows on purpose.

Data: 1,000 schedules over 50 aircraft types, generated here (the study used a real airline
database, not available on these machines); the same documents on both systems. PostgreSQL holds
them in `jsonb` columns with unique expression indexes on the keys (what the statements need);
Strata in tables keyed by the same paths. Runs at each client count for `--seconds`, with
`--max-tries` so that serialization failures (40001) are retried and counted: PostgreSQL at READ
COMMITTED and SERIALIZABLE, Strata at snapshot isolation (what it runs for READ COMMITTED) and
SERIALIZABLE (ADR 0017), both systems set to SERIALIZABLE the same way (libpq's `PGOPTIONS`).

Prints transactions/s, latency p50/p95/p99 (from pgbench's per-transaction log), retries as % of
transactions, failures, and the Strata/PostgreSQL ratio; writes OUT/results.json. Usage:
  bench/.venv/bin/python bench/booking.py --strata-bin BIN [--clients 1,4,16,64] [--seconds 20]
      [--work DIR] [--out DIR]
"""
import argparse
import glob
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib.pgservers import PostgresServer, StrataServer  # noqa: E402

SCHEDULES, AIRCRAFT = 1000, 50
# Each block of a connection made with this environment starts SERIALIZABLE, on both systems.
SERIALIZABLE = {"PGOPTIONS": "-c default_transaction_isolation=serializable"}
DAY = "2026-12-01"

SCRIPT = f"""\\set sid random(1, {SCHEDULES})
\\set uid random(1, 1000000)
\\set amount random(30, 700)
BEGIN;
SELECT s.data->>'minutes', a.data->>'seats' FROM schedules s JOIN aircraft a ON a.data->>'code' = s.data->>'aircraft' WHERE s.data->>'id' = :sid;
INSERT INTO seats VALUES (('{{"schedule": "' || :sid || '", "user": ' || :uid || ', "day": "{DAY}"}}')::jsonb);
INSERT INTO payments VALUES (('{{"user": ' || :uid || ', "schedule": "' || :sid || '", "amount": ' || :amount || '}}')::jsonb);
INSERT INTO audit VALUES (('{{"id": "' || :sid || '-{DAY}", "occupied": 1}}')::jsonb) ON CONFLICT ((data->>'id')) DO UPDATE SET data = jsonb_set(audit.data, '{{occupied}}', to_jsonb((audit.data->>'occupied')::int + 1));
END;
"""

# Tables, their key paths (None: no key) and their first documents.
def tables():
    rng = random.Random(7)
    aircraft = [{"code": f"AC{i:02}", "seats": rng.randint(70, 400)} for i in range(AIRCRAFT)]
    schedules = [{"id": str(i), "aircraft": f"AC{rng.randrange(AIRCRAFT):02}", "minutes": rng.randint(40, 700),
                  "from": f"A{rng.randrange(100)}", "to": f"A{rng.randrange(100)}"} for i in range(1, SCHEDULES + 1)]
    # The tables the transaction inserts into start with one document each (a Strata table
    # exists from its first document).
    return {
        "aircraft": ("code", aircraft),
        "schedules": ("id", schedules),
        "seats": (None, [{"schedule": "0", "user": 0, "day": DAY}]),
        "payments": (None, [{"user": 0, "schedule": "0", "amount": 0}]),
        "audit": ("id", [{"id": "0-" + DAY, "occupied": 0}]),
    }


def pgbench(dsn, script, clients, seconds, work, env_extra=None):
    """Runs the script; returns tx/s, latency percentiles (ms), retried and failed counts."""
    logdir = Path(tempfile.mkdtemp(prefix="pgbench-", dir=work))
    env = dict(os.environ, **(env_extra or {}))
    threads = min(clients, 2)
    proc = subprocess.run(
        ["pgbench", "-n", "-M", "prepared", "-f", str(script), "-c", str(clients), "-j", str(threads),
         "-T", str(seconds), "--max-tries=1000", "--failures-detailed", "-l", "--log-prefix",
         str(logdir / "log"), dsn],
        capture_output=True, text=True, env=env, cwd=logdir)
    if proc.returncode not in (0, 2):  # 2: some transactions failed, reported below
        raise RuntimeError(f"pgbench failed ({proc.returncode}): {proc.stderr[-2000:]}")
    latencies, retried = [], 0
    for path in glob.glob(str(logdir / "log*")):
        for line in Path(path).read_text().splitlines():
            fields = line.split()
            # client tx_no latency_us script epoch_s epoch_us [retries]; "failed"/"skipped" rows
            if len(fields) < 6 or not fields[2].isdigit():
                continue
            latencies.append(int(fields[2]) / 1000)
            if len(fields) >= 7 and fields[6].isdigit():
                retried += int(fields[6]) > 0
    out = proc.stdout
    tps_lines = [line for line in out.splitlines() if line.startswith("tps =")]
    if not tps_lines:
        raise RuntimeError(f"pgbench printed no rate: {out}\n{proc.stderr[-2000:]}")
    tps = float(tps_lines[0].split("=")[1].split()[0])
    failed = next((int(line.split(":")[1].split()[0]) for line in out.splitlines()
                   if line.startswith("number of failed transactions")), 0)
    shutil.rmtree(logdir, ignore_errors=True)
    if not latencies:
        raise RuntimeError(f"pgbench logged no transactions: {out}\n{proc.stderr[-2000:]}")
    latencies.sort()
    pct = lambda p: latencies[min(len(latencies) - 1, int(p / 100 * len(latencies)))]  # noqa: E731
    return {"tps": tps, "p50_ms": statistics.median(latencies), "p95_ms": pct(95), "p99_ms": pct(99),
            "transactions": len(latencies), "retried_pct": 100 * retried / len(latencies), "failed": failed}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--strata-bin", required=True)
    parser.add_argument("--clients", default="1,4,16,64")
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--work", default="bench/work/booking")
    parser.add_argument("--out", default="bench/results/booking")
    args = parser.parse_args()
    if not shutil.which("pgbench"):
        sys.exit("pgbench is not installed (tests/install-clients.sh installs postgresql-client)")
    work, out = Path(args.work).resolve(), Path(args.out)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    out.mkdir(parents=True, exist_ok=True)
    script = work / "booking.sql"
    script.write_text(SCRIPT)
    clients = [int(c) for c in args.clients.split(",")]
    runs = {}
    postgres = PostgresServer(work, tables())
    # Each Strata level on a server of its own: a run leaves parts (and merges) behind, and the
    # level run second on a shared server would meet more of them.
    (work / "si").mkdir()
    (work / "serializable").mkdir()
    strata = StrataServer(Path(args.strata_bin), work / "si", tables())
    strata_serializable = StrataServer(Path(args.strata_bin), work / "serializable", tables())
    try:
        for n in clients:
            # Interleaved per client count, so that both meet the same machine load.
            runs[("strata", n)] = pgbench(strata.dsn, script, n, args.seconds, work)
            runs[("postgres-rc", n)] = pgbench(postgres.dsn, script, n, args.seconds, work)
            runs[("strata-serializable", n)] = pgbench(
                strata_serializable.dsn, script, n, args.seconds, work, SERIALIZABLE)
            runs[("postgres-serializable", n)] = pgbench(
                postgres.dsn, script, n, args.seconds, work, SERIALIZABLE)
            print(f"{n} clients: strata {runs[('strata', n)]['tps']:.0f} tx/s, "
                  f"postgres {runs[('postgres-rc', n)]['tps']:.0f} tx/s", file=sys.stderr, flush=True)
        # Every committed transaction is in the tables, once: seats, payments and audit agree.
        checks = {}
        for name, server in (("strata", strata), ("strata-serializable", strata_serializable),
                             ("postgres", postgres)):
            seats, payments = server.count("seats"), server.count("payments")
            checks[name] = {"seats": seats, "payments": payments}
            if seats != payments:
                raise RuntimeError(f"{name}: {seats} seats but {payments} payments")
    finally:
        strata.stop()
        strata_serializable.stop()
        postgres.stop()

    header = (f"{'system':<24} {'clients':>7} {'tx/s':>9} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} "
              f"{'retried %':>9} {'failed':>6} {'vs PG RC':>8}")
    print(header)
    print("-" * len(header))
    for n in clients:
        base = runs[("postgres-rc", n)]["tps"]
        for system in ("strata", "strata-serializable", "postgres-rc", "postgres-serializable"):
            r = runs[(system, n)]
            print(f"{system:<24} {n:>7} {r['tps']:>9.0f} {r['p50_ms']:>8.2f} {r['p95_ms']:>8.2f} "
                  f"{r['p99_ms']:>8.2f} {r['retried_pct']:>9.1f} {r['failed']:>6} {r['tps'] / base:>8.2f}")
    results = {"seconds": args.seconds, "schedules": SCHEDULES, "aircraft": AIRCRAFT, "checks": checks,
               "runs": [{"system": s, "clients": n, **r} for (s, n), r in runs.items()]}
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwrote {out / 'results.json'}")


if __name__ == "__main__":
    main()
