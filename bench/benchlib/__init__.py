"""Strata's benchmark suite: runs Strata and real peer systems side by side on the same data.

Modules:
  procs       running a measured child process (wall time, peak RSS), page-cache drops, disk usage
  workloads   the workloads (JSONBench, GH Archive): tables, sort keys, query files per dialect
  datasets    generating a dataset with `strata generate` and measuring its raw / zstd sizes
  compare     normalising result rows and comparing them with the reference answers
  reference   the reference answers: DuckDB over the raw NDJSON file
  systems/    one module per system (Strata, ClickHouse via chdb, DuckDB, PostgreSQL, ...)
  workers/    the code that runs inside a child process for the in-process engines
  results     the result schema (JSONBench-compatible field names) and writing it to disk
  report/     the Markdown summary and the static HTML report with inline SVG charts
"""
