-- JSONBench's DuckDB DDL (duckdb/ddl.sql): one JSON column.
CREATE TABLE bluesky (j JSON);
