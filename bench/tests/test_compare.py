"""Normalisation and comparison of result rows (benchlib.compare)."""
import datetime as dt
import decimal

from benchlib.compare import compare, normalise_rows, normalise_value
from benchlib.workloads import WORKLOADS, split_sql


def test_timestamps_of_every_dialect_normalise_to_one_form():
    want = "2024-11-21 16:25:49.000167"
    for v in ("2024-11-21T16:25:49.000167", "2024-11-21 16:25:49.000167", "2024-11-21T16:25:49.000167Z",
              "2024-11-21 17:25:49.000167+01:00", "2024-11-21 16:25:49.000167000",
              dt.datetime(2024, 11, 21, 16, 25, 49, 167),
              dt.datetime(2024, 11, 21, 16, 25, 49, 167, tzinfo=dt.timezone.utc)):
        assert normalise_value(v) == want, v


def test_numbers_and_missing_values():
    assert normalise_value(decimal.Decimal("16")) == 16
    assert normalise_value(16.0) == 16
    assert normalise_value(2.5) == 2.5
    assert normalise_value("") is None  # ClickHouse's typed path of a missing key
    assert normalise_value("007") == "007"  # strings stay strings


def test_rows_from_dicts_and_lists_compare_by_position():
    a = normalise_rows([{"event": "x", "count": 3}, {"event": None, "count": 1}])
    b = normalise_rows([["x", 3], ["", 1]])
    assert compare(a, b) == (True, None)


def test_mismatches_are_described():
    ok, detail = compare([["x", 3]], [["x", 4]])
    assert not ok and "row 1 column 2" in detail
    ok, detail = compare([["x", 3]], [["x", 3], ["y", 1]])
    assert not ok and "1 rows" in detail


def test_tolerance_only_where_declared():
    assert not compare([["x", 101]], [["x", 100]])[0]
    assert compare([["x", 101]], [["x", 100]], {1: 0.02})[0]
    assert compare([[0.1 + 0.2]], [[0.3]])[0]  # float summation order


def test_every_dialect_file_has_every_query():
    for w in WORKLOADS.values():
        for system in ("strata", "clickhouse", "duckdb", "postgres"):
            assert list(w.queries_for(system)) == list(w.queries)


def test_split_sql_skips_comments_and_joins_lines():
    assert split_sql("-- c\nSELECT 1\n  FROM t;\n\nSELECT 2;") == ["SELECT 1 FROM t", "SELECT 2"]
