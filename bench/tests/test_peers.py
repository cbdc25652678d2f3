"""End to end on real documents (bench/data, see SOURCES.md): every peer that can run here loads the
sample, answers every query, and its answers equal the reference (DuckDB over the raw file).
Strata takes part when a binary is found (STRATA_BIN, target/release/strata or target/debug/strata)."""
import os
from pathlib import Path

import pytest

from benchlib import datasets, reference, runner
from benchlib.systems import SYSTEMS, NotRunnable
from benchlib.systems.base import Context
from benchlib.workloads import WORKLOADS

BENCH = Path(__file__).resolve().parent.parent
SAMPLES = {"jsonbench": BENCH / "data" / "jetstream_sample.ndjson",
           "gharchive": BENCH / "data" / "gharchive_2015-01-01_sample.ndjson"}


def strata_bin():
    for p in (os.environ.get("STRATA_BIN"), BENCH.parent / "target" / "release" / "strata",
              BENCH.parent / "target" / "debug" / "strata"):
        if p and Path(p).is_file():
            return Path(p)
    return BENCH.parent / "target" / "release" / "strata"


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    return Context(work=tmp_path_factory.mktemp("work"), strata_bin=strata_bin())


@pytest.mark.parametrize("workload", sorted(SAMPLES))
@pytest.mark.parametrize("system", ["strata", "clickhouse", "duckdb", "postgres"])
def test_peer_answers_equal_reference_on_real_sample(ctx, workload, system):
    sys_obj = SYSTEMS[system](ctx)
    try:
        sys_obj.check_runnable()
    except NotRunnable as e:
        pytest.skip(str(e))
    w = WORKLOADS[workload]
    ds = datasets.prepare(w, "sample", ctx.strata_bin, ctx.work, override=SAMPLES[workload])
    ref = reference.compute(ctx, w, ds)
    rec = runner.run_system(sys_obj, w, ds, ref, runs=2)
    assert rec["status"] == "ok", rec.get("error") or {q: v.get("error") for q, v in rec.get("queries", {}).items()}
    assert rec["num_loaded_documents"] == ds.docs
    assert rec["total_size"] > 0 and rec["load_time"] > 0
    for qid, q in rec["queries"].items():
        assert q["matches_reference"], f"{system} {qid}: {q.get('mismatch')}"
        assert len(q["times"]) == 2 and q["hot"] is not None


def test_unavailable_peers_are_reported_not_faked(ctx):
    w = WORKLOADS["jsonbench"]
    ds = datasets.prepare(w, "sample", ctx.strata_bin, ctx.work, override=SAMPLES["jsonbench"])
    for name in ("mongodb", "greptimedb"):
        rec = runner.run_system(SYSTEMS[name](ctx), w, ds, None, runs=1)
        assert rec["status"] == "not run" and "cannot run here" in rec["error"]
        assert "queries" not in rec and "total_size" not in rec


def test_elasticsearch_runs_what_it_can_express(ctx):
    """Elasticsearch (Maven Central's integ-test distribution): supported queries answer; Q3 and Q5
    are recorded as unsupported (no script engine); answers match where every document loaded."""
    es = SYSTEMS["elasticsearch"](ctx)
    try:
        es.check_runnable()
    except NotRunnable as e:
        pytest.skip(str(e))
    for workload in ("jsonbench", "gharchive"):
        w = WORKLOADS[workload]
        ds = datasets.prepare(w, "sample", ctx.strata_bin, ctx.work, override=SAMPLES[workload])
        ref = reference.compute(ctx, w, ds)
        rec = runner.run_system(SYSTEMS["elasticsearch"](ctx), w, ds, ref, runs=2)
        assert rec["status"] == "ok", rec.get("error")
        assert rec["num_loaded_documents"] + rec["rejected"] == ds.docs
        for qid, q in rec["queries"].items():
            if workload == "jsonbench" and qid in ("Q3", "Q5"):
                assert "unsupported" in q
                continue
            assert "error" not in q and q["hot"] is not None, (qid, q.get("error"))
            if rec["rejected"] == 0:
                assert q["matches_reference"], f"{workload} {qid}: {q.get('mismatch')}"


def test_ferretdb_on_real_gharchive_sample(ctx, monkeypatch):
    """FerretDB answers A-C like the reference; D needs $avg, which FerretDB 1.24 lacks. Runs only
    when a ferretdb binary is already built (FERRETDB_BIN or bench/work/bin/ferretdb): building it
    takes minutes."""
    binary = os.environ.get("FERRETDB_BIN") or str(BENCH / "work" / "bin" / "ferretdb")
    if not Path(binary).is_file():
        pytest.skip("no ferretdb binary built yet (bench/run.sh --systems ferretdb builds it)")
    monkeypatch.setenv("FERRETDB_BIN", binary)
    fdb = SYSTEMS["ferretdb"](ctx)
    try:
        fdb.check_runnable()
    except NotRunnable as e:
        pytest.skip(str(e))
    w = WORKLOADS["gharchive"]
    ds = datasets.prepare(w, "sample", ctx.strata_bin, ctx.work, override=SAMPLES["gharchive"])
    rec = runner.run_system(fdb, w, ds, reference.compute(ctx, w, ds), runs=2)
    assert rec["status"] == "ok", rec.get("error")
    assert rec["num_loaded_documents"] + rec["rejected"] == ds.docs
    for qid in ("A", "B", "C"):
        assert rec["queries"][qid]["matches_reference"] or rec["rejected"], rec["queries"][qid].get("mismatch")
    assert "unsupported" in rec["queries"]["D"]


def test_strata_baseline_is_a_second_build_measured_in_the_same_run(ctx, tmp_path):
    w = WORKLOADS["jsonbench"]
    ds = datasets.prepare(w, "sample", ctx.strata_bin, ctx.work, override=SAMPLES["jsonbench"])
    missing = runner.run_system(SYSTEMS["strata-baseline"](ctx), w, ds, None, runs=1)
    assert missing["status"] == "not run" and "--strata-baseline" in missing["error"]
    if not ctx.strata_bin.is_file():
        pytest.skip(f"no Strata binary at {ctx.strata_bin}")
    both = Context(work=tmp_path, strata_bin=ctx.strata_bin, strata_baseline_bin=ctx.strata_bin)
    ref = reference.compute(both, w, ds)
    for name in ("strata-baseline", "strata"):
        rec = runner.run_system(SYSTEMS[name](both), w, ds, ref, runs=2)
        assert rec["status"] == "ok", rec.get("error")
        assert rec["version"] and all(q["matches_reference"] for q in rec["queries"].values())
