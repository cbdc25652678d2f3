"""The systems under test. Each module owns one system: how to tell whether it can run here, how to
load a dataset into it, how to run one query N times in a fresh process, and how big its storage is.

`SYSTEMS` maps the names accepted by `--systems` to their classes."""
from .base import NotRunnable, System, Unsupported  # noqa: F401
from .clickhouse import ClickHouse
from .duckdb import DuckDB
from .elasticsearch import Elasticsearch, OpenSearch
from .ferretdb import FerretDB
from .postgres import Postgres
from .strata import Strata, StrataBaseline
from .unavailable import GreptimeDB, MongoDB

SYSTEMS = {cls.name: cls for cls in (Strata, StrataBaseline, ClickHouse, DuckDB, Postgres, Elasticsearch, OpenSearch, FerretDB, MongoDB,
                                          GreptimeDB)}
