"""What both reports show, computed once from results.json: sections per (workload, scale), the
runs in each, hot/cold times, ratios to Strata (system time / Strata time, > 1 means Strata is
faster) and geometric means. Nothing here measures; it only reads the results."""
import math
from dataclasses import dataclass, field

STRATA = "strata"
COLORS = {"strata": "#2563eb", "clickhouse": "#f59e0b", "duckdb": "#10b981", "postgres": "#8b5cf6",
          "elasticsearch": "#ef4444", "opensearch": "#0ea5e9", "ferretdb": "#84cc16"}


def geomean(values):
    values = [v for v in values if v is not None and v > 0]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


@dataclass
class Section:
    workload: str
    title: str
    scale: str
    dataset: dict
    reference: dict
    queries: list
    descriptions: dict
    runs: list  # runs with status ok/partial (they have queries)
    others: list = field(default_factory=list)  # not run / failed

    @property
    def strata(self):
        return next((r for r in self.runs if r["system"] == STRATA), None)

    def time(self, run, qid, kind):
        q = run.get("queries", {}).get(qid, {})
        return q.get(kind)

    def ratio(self, run, qid, kind):
        s = self.strata
        if s is None:
            return None
        mine, base = self.time(run, qid, kind), self.time(s, qid, kind)
        return mine / base if mine and base else None

    def answered(self, run, kind):
        """The queries this run has a time for (not failed, not unsupported)."""
        return [q for q in self.queries if self.time(run, q, kind)]

    def geomean_time(self, run, kind):
        """Geometric mean over the queries this run answered (see answered())."""
        return geomean([self.time(run, q, kind) for q in self.answered(run, kind)])

    def geomean_ratio(self, run, kind):
        """Geometric mean of this run's per-query time ÷ Strata's, over the queries both answered."""
        return geomean([self.ratio(run, q, kind) for q in self.queries])

    def storage_ratio(self, run):
        s = self.strata
        if s is None or not s.get("total_size") or not run.get("total_size"):
            return None
        return run["total_size"] / s["total_size"]

    def max_query_rss(self, run):
        values = [q.get("peak_rss") for q in run.get("queries", {}).values() if q.get("peak_rss")]
        return max(values) if values else None

    def correct(self, run):
        """(answers equal to the reference, queries), or None when there was no reference to check."""
        qs = run.get("queries", {})
        if all(q.get("matches_reference") is None for q in qs.values()):
            return None
        return sum(1 for q in qs.values() if q.get("matches_reference")), len(self.queries)


def sections(results):
    from ..workloads import WORKLOADS

    order = []
    for r in results.get("runs", []):
        key = (r["workload"], r["scale"])
        if key not in order:
            order.append(key)
    out = []
    for wname, scale in order:
        w = WORKLOADS.get(wname)
        dataset = next((d for d in results.get("datasets", []) if d.get("workload") == wname and d.get("scale") == scale), {})
        ref = next((d for d in results.get("references", []) if d.get("workload") == wname and d.get("scale") == scale), {})
        runs = [r for r in results["runs"] if r["workload"] == wname and r["scale"] == scale]
        ok = [r for r in runs if r.get("queries")]
        ok.sort(key=lambda r: (r["system"] != STRATA, r["system"]))
        others = [r for r in runs if not r.get("queries")]
        out.append(Section(wname, w.title if w else wname, scale, dataset, ref,
                           list(w.queries) if w else sorted({q for r in ok for q in r["queries"]}),
                           dict(w.descriptions) if w else {}, ok, others))
    return out


def color(system, i=0):
    from .svg import PALETTE

    return COLORS.get(system, PALETTE[i % len(PALETTE)])


def mb(n, digits=1):
    return "—" if n is None else f"{n / 1e6:,.{digits}f}"


def ms(seconds):
    if seconds is None:
        return "—"
    v = seconds * 1000
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}" if v >= 1 else f"{v:.2f}"


def ratio(x):
    return "—" if x is None else f"{x:.2f}×"


def optimize_note(r):
    """For a run that merged its parts after loading (Strata's `optimize`): what the load time
    covers and what the merge cost; None for other runs."""
    if r.get("optimize_seconds") is None:
        return None
    total = r["load_time"] + r["optimize_seconds"]
    return (f"{r.get('label', r['system'])}: load s is `ingest` alone ({r.get('parts_after_ingest')} parts); "
            f"`optimize` then merged them into {r.get('parts')} in {r['optimize_seconds']:.2f} s "
            f"(peak RSS {mb(r.get('optimize_peak_rss'), 0)} MB), and storage and queries are measured after "
            f"it. Ingest + optimize: {total:.2f} s, {r['num_loaded_documents'] / total:,.0f} docs/s.")
