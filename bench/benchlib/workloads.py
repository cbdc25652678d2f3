"""The workloads: which dataset each one uses, its table, its sort key, its queries (one file per
system dialect in bench/queries/<workload>/<system>.sql) and which result columns of which query
are approximate by design in which system."""
from dataclasses import dataclass, field
from pathlib import Path

QUERY_DIR = Path(__file__).resolve().parent.parent / "queries"


@dataclass(frozen=True)
class Workload:
    name: str
    title: str
    generator: str  # dataset name for `strata generate`
    table: str
    sort_key: tuple  # JSON paths, dotted
    queries: tuple  # query ids, in file order
    descriptions: dict = field(default_factory=dict)
    # {system: {query_id: {column_index: relative tolerance}}}: only approximate aggregates
    approximate: dict = field(default_factory=dict)

    def query_file(self, system):
        return QUERY_DIR / self.name / f"{system}.sql"

    def queries_for(self, system):
        """The queries of `system`'s dialect, as {query id: SQL}; raises if the file is missing."""
        path = self.query_file(system)
        if not path.exists():
            raise FileNotFoundError(f"no {self.name} queries for {system}: {path} is missing")
        statements = split_sql(path.read_text())
        if len(statements) != len(self.queries):
            raise ValueError(f"{path} has {len(statements)} statements, {self.name} needs "
                             f"{len(self.queries)} ({', '.join(self.queries)})")
        return dict(zip(self.queries, statements))


def split_sql(text):
    """Split a query file into statements: `;` at the end of a line ends one, `--` lines are
    comments, blank lines are ignored."""
    statements, current = [], []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("--"):
            continue
        current.append(stripped)
        if stripped.endswith(";"):
            statements.append(" ".join(current).rstrip(";").strip())
            current = []
    if current:
        statements.append(" ".join(current).rstrip(";").strip())
    return [s for s in statements if s]


JSONBENCH = Workload(
    name="jsonbench",
    title="JSONBench (Bluesky events)",
    generator="bluesky",
    table="bluesky",
    sort_key=("kind", "commit.operation", "commit.collection", "did", "time_us"),
    queries=("Q1", "Q2", "Q3", "Q4", "Q5"),
    descriptions={
        "Q1": "documents per commit.collection, by count desc",
        "Q2": "creates per collection: count and exact distinct did",
        "Q3": "creates of post/repost/like per collection and UTC hour",
        "Q4": "3 earliest first posts per did",
        "Q5": "3 largest post activity spans per did (ms)",
    },
    # cardinality aggregation (HyperLogLog++), precision_threshold 40000
    approximate={"elasticsearch": {"Q2": {2: 0.02}}, "opensearch": {"Q2": {2: 0.02}}},
)

GHARCHIVE = Workload(
    name="gharchive",
    title="GH Archive OLAP (PostgreSQL vs MongoDB study)",
    generator="gharchive",
    table="gharchive",
    sort_key=("type", "repo.name", "created_at"),
    queries=("A", "B", "C", "D"),
    descriptions={
        "A": "repositories by opened issues (top 100)",
        "B": "event types by count",
        "C": "top 10 actors by events",
        "D": "PushEvent repositories by avg payload.issue.comments (top 100)",
    },
)

WORKLOADS = {w.name: w for w in (JSONBENCH, GHARCHIVE)}
