"""Strata's benchmark suite: Strata and real peer systems side by side, in one run, on the same data.

For each workload and scale: generate the dataset with `strata generate` (cached in the work dir),
measure its raw / zstd -1 / zstd -3 sizes, compute the reference answers (DuckDB over the raw
NDJSON), then for each system: load (timed, peak RSS, documents loaded, bytes on disk), and run each
query 3 times in a fresh process after a cold start (run 1 = cold, hot = min of runs 2 and 3),
checking each answer against the reference. A system that fails or cannot run is recorded with the
reason and the rest go on.

    bench/run.sh --systems strata,clickhouse,duckdb,postgres --workloads jsonbench,gharchive --scales 1m,10m
    bench/run.sh --report-only            # re-render summary.md and report.html from results.json

Outputs (schema in bench/README.md): OUT/results.json, OUT/<workload>/<scale>/<system>.json
(JSONBench field names), OUT/summary.md, OUT/report.html.
"""
import argparse
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from benchlib import datasets, reference, results, runner  # noqa: E402
from benchlib.procs import log  # noqa: E402
from benchlib.systems import SYSTEMS  # noqa: E402
from benchlib.systems.base import Context  # noqa: E402
from benchlib.workloads import WORKLOADS  # noqa: E402

REPO = BENCH.parent
DEFAULT_SYSTEMS = "strata,clickhouse,duckdb,postgres,elasticsearch,mongodb,greptimedb"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--systems", default=DEFAULT_SYSTEMS, help=f"comma-separated, of: {', '.join(SYSTEMS)}")
    p.add_argument("--workloads", default="jsonbench", help=f"comma-separated, of: {', '.join(WORKLOADS)}")
    p.add_argument("--scales", default="1m", help="comma-separated document counts: 100k, 1m, 10m, ... "
                   "(only labels for workloads given a --dataset file)")
    p.add_argument("--runs", type=int, default=3, help="runs per query in one process (run 1 is the cold run)")
    p.add_argument("--seed", type=int, default=1, help="seed for `strata generate`")
    p.add_argument("--strata-bin", default=str(REPO / "target" / "release" / "strata"))
    p.add_argument("--strata-baseline", default=None, metavar="PATH",
                   help="another Strata build, measured as system strata-baseline in the same run")
    p.add_argument("--work", default=str(BENCH / "work"), help="scratch dir for datasets and databases")
    p.add_argument("--out", default=str(BENCH / "results"))
    p.add_argument("--dataset", action="append", default=[], metavar="WORKLOAD=FILE",
                   help="use an existing NDJSON file for a workload instead of generating one")
    p.add_argument("--query-timeout", type=float, default=600.0,
                   help="seconds per query run for systems that may not finish (FerretDB); others have no limit")
    p.add_argument("--keep", action="store_true", help="keep each system's database after its run")
    p.add_argument("--no-reference", action="store_true", help="skip the reference answers (no correctness check)")
    p.add_argument("--report-only", action="store_true", help="only re-render the reports from OUT/results.json")
    args = p.parse_args(argv)
    args.systems = _split(args.systems)
    args.workloads = _split(args.workloads)
    args.scales = _split(args.scales)
    unknown = [s for s in args.systems if s not in SYSTEMS] + [w for w in args.workloads if w not in WORKLOADS]
    if unknown:
        p.error(f"unknown system or workload: {', '.join(unknown)}")
    args.dataset = dict(d.split("=", 1) for d in args.dataset)
    for s in args.scales if set(args.workloads) - set(args.dataset) else []:
        try:
            datasets.parse_scale(s)
        except ValueError as e:
            p.error(str(e))
    if args.runs < 1:
        p.error("--runs must be at least 1")
    return args


def _split(text):
    return [x.strip() for x in text.split(",") if x.strip()]


def main(argv=None):
    args = parse_args(argv)
    out = Path(args.out)
    if args.report_only:
        print(results.write(results.load(out / "results.json"), out))
        return 0
    ctx = Context(work=Path(args.work).resolve(), strata_bin=Path(args.strata_bin).resolve(),
                  strata_baseline_bin=Path(args.strata_baseline).resolve() if args.strata_baseline else None,
                  query_timeout=args.query_timeout)
    ctx.work.mkdir(parents=True, exist_ok=True)
    res = results.new(runner.machine_info(), {
        "systems": args.systems, "workloads": args.workloads, "scales": args.scales, "runs": args.runs,
        "seed": args.seed, "strata_bin": str(ctx.strata_bin), "strata_baseline": args.strata_baseline, "query_timeout": args.query_timeout})
    # DuckDB's stored copy runs first among peers so a broken reference shows up early; Strata first of all.
    order = sorted(args.systems, key=lambda s: (s != "strata", s != "duckdb"))
    for wname in args.workloads:
        workload = WORKLOADS[wname]
        for scale in args.scales:
            try:
                dataset = datasets.prepare(workload, scale, ctx.strata_bin, ctx.work, args.seed,
                                           args.dataset.get(wname))
            except Exception as e:
                log(f"{wname} {scale}: no dataset: {e}")
                res["datasets"].append({"workload": wname, "scale": scale, "error": str(e)})
                for s in order:
                    res["runs"].append({"system": s, "label": SYSTEMS[s].label, "workload": wname, "scale": scale,
                                        "status": "failed", "error": f"no dataset: {e}"})
                continue
            res["datasets"].append(dataset.as_json())
            s = dataset.sizes
            log(f"{wname} {scale}: {dataset.docs:,} docs, raw {s['raw']:,} B, zstd -1 {s['zstd_1']:,} B, "
                f"zstd -3 {s['zstd_3']:,} B")
            ref = None
            if not args.no_reference:
                try:
                    ref = reference.compute(ctx, workload, dataset)
                    res["references"].append({"workload": wname, "scale": scale, "engine": ref["engine"],
                                              "seconds": ref["seconds"], "queries": ref["queries"]})
                except Exception as e:
                    log(f"{wname} {scale}: reference answers FAILED: {e}")
                    res["references"].append({"workload": wname, "scale": scale, "error": str(e)})
            for sname in order:
                system = SYSTEMS[sname](ctx)
                res["runs"].append(runner.run_system(system, workload, dataset, ref, args.runs, args.keep))
                results.write(res, out)
    summary = results.write(res, out, final=True)
    print()
    print(summary)
    log(f"results: {out / 'results.json'}, {out / 'summary.md'}, {out / 'report.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
