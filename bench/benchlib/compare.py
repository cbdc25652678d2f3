"""Normalising result rows across systems and comparing them with the reference answers.

Normalisation (applied to every system and to the reference alike):
- a row is the list of its values in column order (column names differ between dialects);
- integral numbers (int, Decimal, float with no fraction) become int; other numbers become float;
- timestamps (datetime objects, or strings such as `2024-11-21T16:25:49.000167Z` or
  `2024-11-21 16:25:49.000167+00:00`) become `YYYY-MM-DD HH:MM:SS.ffffff` in UTC;
- the empty string and NULL are the same value: ClickHouse's typed, non-Nullable JSON paths read a
  missing key as '' where the others read NULL (JSONBench Q1's group of documents without a
  collection).

Comparison: same number of rows, same order, each value equal; floats equal within a relative
1e-9 (summation order differs between engines). Columns that a system computes approximately by
design (declared per system and query in workloads.py, e.g. Elasticsearch's cardinality aggregation)
may differ by their declared relative tolerance; nothing else gets a tolerance.
"""
import datetime as _dt
import decimal
import math
import re

TS_RE = re.compile(r"^(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(\.\d{1,9})?(Z|[+-]\d{2}(?::?\d{2})?)?$")
FLOAT_REL_TOL = 1e-9


def normalise_value(v):
    if v is None:
        return None
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        return v
    if isinstance(v, decimal.Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    if isinstance(v, float):
        return int(v) if v.is_integer() and abs(v) < 2**63 else v
    if isinstance(v, _dt.datetime):
        if v.tzinfo is not None:
            v = v.astimezone(_dt.timezone.utc).replace(tzinfo=None)
        return v.strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(v, str):
        if v == "":
            return None
        m = TS_RE.match(v)
        if m:
            return _normalise_ts(m)
        return v
    if isinstance(v, (list, tuple)):
        return [normalise_value(x) for x in v]
    if isinstance(v, dict):
        return {k: normalise_value(x) for k, x in v.items()}
    return str(v)


def _normalise_ts(m):
    date, time, frac, tz = m.groups()
    frac = (frac or ".")[1:]
    micros = int((frac + "000000")[:6])
    ts = _dt.datetime.fromisoformat(f"{date} {time}").replace(microsecond=micros)
    if tz and tz != "Z":
        sign = 1 if tz[0] == "+" else -1
        digits = tz[1:].replace(":", "")
        offset = _dt.timedelta(hours=int(digits[:2]), minutes=int(digits[2:4] or 0))
        ts = ts - sign * offset
    return ts.strftime("%Y-%m-%d %H:%M:%S.%f")


def normalise_rows(rows):
    """Rows (dicts in column order, or sequences) -> lists of normalised values."""
    out = []
    for row in rows or []:
        values = row.values() if isinstance(row, dict) else row
        out.append([normalise_value(v) for v in values])
    return out


def compare(rows, reference, approximate=None):
    """Return (matches: bool, detail: str or None). Both arguments must be normalised rows.

    `approximate` maps a column index to the relative tolerance allowed for that column."""
    approximate = approximate or {}
    if len(rows) != len(reference):
        return False, f"{len(rows)} rows, reference has {len(reference)}"
    for i, (row, ref) in enumerate(zip(rows, reference)):
        if len(row) != len(ref):
            return False, f"row {i + 1}: {len(row)} columns, reference has {len(ref)}"
        for j, (a, b) in enumerate(zip(row, ref)):
            if not _equal(a, b, approximate.get(j)):
                return False, f"row {i + 1} column {j + 1}: {a!r} != reference {b!r}"
    return True, None


def _equal(a, b, tolerance):
    if a == b:
        return True
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        tol = max(tolerance or 0.0, FLOAT_REL_TOL if isinstance(a, float) or isinstance(b, float) else 0.0)
        if tol:
            return math.isclose(a, b, rel_tol=tol)
    return False
