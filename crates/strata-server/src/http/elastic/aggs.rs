//! `aggs` / `aggregations` of `_search`, answered by one SQL `GROUP BY` (or one aggregate) each:
//!
//! - bucket aggregations: `terms` (`field`, `size`: the most frequent values, with
//!   `sum_other_doc_count`) and `date_histogram` (`field`, `fixed_interval` or
//!   `calendar_interval` up to a day; empty buckets between the first and the last are filled,
//!   as Elasticsearch's `min_doc_count: 0` does);
//! - metric aggregations, at the top or as sub-aggregations of a bucket aggregation (what
//!   Grafana's and Kibana's panels send: a histogram with the average or the maximum of a field
//!   per bucket): `avg`, `sum`, `min`, `max` (numbers, answered as doubles), `value_count` and
//!   `cardinality` (exact here: Elasticsearch's is approximate);
//! - bucket aggregations inside each other, to any depth (top values over time, a histogram per
//!   value, the top paths of the top users per hour): the buckets of each deeper level under
//!   every bucket above come from one more `GROUP BY` of the keys of all levels down to it,
//!   restricted to the outermost keys listed, and are regrouped by the keys above;
//! - not supported (400 naming it): two bucket aggregations side by side inside one, other
//!   kinds.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use super::EsError;
use super::dsl::{Unsupported, field_sql, literal_sql};
use super::search::{bad_request, sql_rows, total};
use crate::Shared;

/// A metric aggregation: its name, its SQL aggregate, and its value in an empty bucket.
struct Metric {
    name: String,
    sql: String,
    empty: Value,
}

/// The metric aggregation `spec` asks for, if it is one.
fn metric_of(name: &str, spec: &Map<String, Value>) -> Result<Option<Metric>, EsError> {
    for kind in ["avg", "sum", "min", "max", "value_count", "cardinality"] {
        let Some(body) = spec.get(kind) else {
            continue;
        };
        let column = field_sql(agg_field(name, body)?);
        let (sql, empty) = match kind {
            "avg" | "min" | "max" => (format!("CAST({kind}({column}) AS DOUBLE)"), Value::Null),
            "sum" => (format!("CAST(sum({column}) AS DOUBLE)"), json!(0.0)),
            "value_count" => (format!("count({column})"), json!(0)),
            _ => (format!("count(DISTINCT {column})"), json!(0)),
        };
        return Ok(Some(Metric {
            name: name.to_owned(),
            sql,
            empty,
        }));
    }
    Ok(None)
}

/// A bucket aggregation: how it groups, and the metrics of each bucket.
struct Bucketing {
    name: String,
    /// The field's SQL (must not be NULL for a document to fall in a bucket).
    column: String,
    /// The bucket key's SQL.
    key_sql: String,
    grouping: Grouping,
    metrics: Vec<Metric>,
}

/// A bucket sub-aggregation as written: its name and spec.
type SubBucketing<'a> = (&'a str, &'a Map<String, Value>);

enum Grouping {
    /// The `size` most frequent values.
    Terms { size: u64 },
    /// Every `step` milliseconds, empty buckets between the first and the last included.
    Histogram { step: i64 },
}

impl Bucketing {
    /// The bucket aggregation `spec` asks for, with its metric sub-aggregations, and its bucket
    /// sub-aggregation (its name and spec) if it has one.
    fn of<'a>(
        name: &str,
        spec: &'a Map<String, Value>,
    ) -> Result<Option<(Bucketing, Option<SubBucketing<'a>>)>, EsError> {
        let (grouping, body) = if let Some(terms) = spec.get("terms") {
            let size = terms.get("size").and_then(Value::as_u64).unwrap_or(10);
            (Grouping::Terms { size }, terms)
        } else if let Some(histogram) = spec.get("date_histogram") {
            let interval = histogram
                .get("fixed_interval")
                .or_else(|| histogram.get("calendar_interval"))
                .or_else(|| histogram.get("interval"))
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    bad_request(format!(
                        "date_histogram [{name}] needs fixed_interval or calendar_interval"
                    ))
                })?;
            let step = interval_ms(interval).ok_or_else(|| {
                Unsupported(format!(
                    "date_histogram [{name}]: interval {interval:?} (use s, m, h or d units, or \
                     second, minute, hour, day)"
                ))
            })?;
            (Grouping::Histogram { step }, histogram)
        } else {
            return Ok(None);
        };
        let column = field_sql(agg_field(name, body)?);
        let key_sql = match grouping {
            Grouping::Terms { .. } => column.clone(),
            Grouping::Histogram { step } => {
                format!("(CAST(to_timestamp_millis({column}) AS BIGINT) / {step}) * {step}")
            }
        };
        let mut metrics = Vec::new();
        let mut inner = None;
        if let Some(subs) = spec.get("aggs").or_else(|| spec.get("aggregations")) {
            let subs = subs.as_object().ok_or_else(|| {
                bad_request(format!("aggregation [{name}]: aggs must be an object"))
            })?;
            for (sub, sub_spec) in subs {
                let sub_spec = object(sub, sub_spec)?;
                if let Some(metric) = metric_of(sub, sub_spec)? {
                    metrics.push(metric);
                } else if inner.is_none() {
                    inner = Some((sub.as_str(), sub_spec));
                } else {
                    return Err(Unsupported(format!(
                        "aggregation [{name}]: one bucket aggregation per level (with any \
                         number of metrics)"
                    ))
                    .into());
                }
            }
        }
        Ok(Some((
            Bucketing {
                name: name.to_owned(),
                column,
                key_sql,
                grouping,
                metrics,
            },
            inner,
        )))
    }

    /// The answer of this aggregation for the SQL `rows` of its buckets (`key`, `doc_count`, the
    /// metrics), ordered as its query orders them; `total`: documents with the field (terms).
    fn answer(&self, rows: Vec<Map<String, Value>>, total: u64) -> Map<String, Value> {
        let mut answer = Map::new();
        match self.grouping {
            Grouping::Terms { size } => {
                let listed: Vec<Map<String, Value>> =
                    rows.into_iter().take(size as usize).collect();
                let counted: u64 = listed
                    .iter()
                    .filter_map(|r| r.get("doc_count").and_then(Value::as_u64))
                    .sum();
                answer.insert("doc_count_error_upper_bound".into(), json!(0));
                answer.insert(
                    "sum_other_doc_count".into(),
                    json!(total.saturating_sub(counted)),
                );
                let buckets = listed
                    .into_iter()
                    .map(|row| Value::Object(bucket_of(row, &self.metrics)))
                    .collect();
                answer.insert("buckets".into(), Value::Array(buckets));
            }
            Grouping::Histogram { step } => {
                let buckets = filled_buckets(rows, step, &self.metrics);
                answer.insert("buckets".into(), Value::Array(buckets));
            }
        }
        answer
    }
}

/// The select list of `metrics` (`, <aggregate> AS m<i>`).
fn metric_columns(metrics: &[Metric]) -> String {
    metrics
        .iter()
        .enumerate()
        .map(|(i, m)| format!(", {} AS m{i}", m.sql))
        .collect()
}

/// Moves the metric columns of a SQL row into a bucket, as `{"<name>": {"value": v}}`.
fn bucket_of(mut row: Map<String, Value>, metrics: &[Metric]) -> Map<String, Value> {
    for (i, metric) in metrics.iter().enumerate() {
        let value = row
            .remove(&format!("m{i}"))
            .unwrap_or_else(|| metric.empty.clone());
        row.insert(metric.name.clone(), json!({ "value": value }));
    }
    row
}

pub(super) async fn aggregation(
    shared: &Shared,
    relation: &str,
    condition: &Option<String>,
    name: &str,
    spec: &Value,
) -> Result<Value, EsError> {
    let spec = object(name, spec)?;
    let filter = |columns: &[&str]| {
        let mut conjuncts: Vec<String> = condition.iter().map(|c| format!("({c})")).collect();
        conjuncts.extend(columns.iter().map(|c| format!("{c} IS NOT NULL")));
        if conjuncts.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", conjuncts.join(" AND "))
        }
    };
    if let Some(metric) = metric_of(name, spec)? {
        let rows = sql_rows(
            shared,
            &format!("SELECT {} AS m0 FROM {relation}{}", metric.sql, filter(&[])),
        )
        .await?;
        let value = rows
            .into_iter()
            .next()
            .and_then(|mut row| row.remove("m0"))
            .unwrap_or(metric.empty);
        return Ok(json!({ "value": value }));
    }
    let Some((outer, inner)) = Bucketing::of(name, spec)? else {
        return Err(Unsupported(format!(
            "aggregation [{name}]: the kinds supported are terms, date_histogram, avg, sum, \
             min, max, value_count and cardinality"
        ))
        .into());
    };
    // The bucket aggregations nested in this one, outermost first, one per level.
    let mut levels = vec![outer];
    let mut names = vec![name.to_owned()];
    let mut next = inner;
    while let Some((inner_name, inner_spec)) = next {
        names.push(inner_name.to_owned());
        let Some((level, deeper)) = Bucketing::of(inner_name, inner_spec)? else {
            return Err(Unsupported(format!(
                "aggregation [{}]: the kinds supported are terms, date_histogram, avg, sum, \
                 min, max, value_count and cardinality",
                names.join("] > [")
            ))
            .into());
        };
        levels.push(level);
        next = deeper;
    }
    let outer = &levels[0];
    let order = match outer.grouping {
        Grouping::Terms { size } => format!(" ORDER BY 2 DESC, 1 ASC LIMIT {size}"),
        Grouping::Histogram { .. } => " ORDER BY 1".to_owned(),
    };
    let outer_filter = filter(&[&outer.column]);
    let rows = sql_rows(
        shared,
        &format!(
            "SELECT {} AS key, count(*) AS doc_count{} FROM {relation}{outer_filter} GROUP BY 1{order}",
            outer.key_sql,
            metric_columns(&outer.metrics)
        ),
    )
    .await?;
    let outer_total = match outer.grouping {
        Grouping::Terms { .. } => total(shared, relation, &outer_filter).await?,
        Grouping::Histogram { .. } => 0,
    };
    let keys: Vec<Value> = rows.iter().filter_map(|r| r.get("key").cloned()).collect();
    let mut answer = outer.answer(rows, outer_total);
    // Each deeper level: the buckets under every bucket of the level above in one statement
    // grouped by the keys of all levels down to it (restricted to the outermost keys listed),
    // regrouped by the keys above it.
    for depth in 1..levels.len() {
        let level = &levels[depth];
        let columns: Vec<&str> = levels[..=depth].iter().map(|l| l.column.as_str()).collect();
        let mut level_filter = filter(&columns);
        if let Grouping::Terms { .. } = outer.grouping {
            let listed: Vec<String> = keys.iter().filter_map(literal_sql).collect();
            if listed.is_empty() {
                level_filter.push_str(" AND FALSE");
            } else {
                level_filter.push_str(&format!(" AND {} IN ({})", outer.column, listed.join(", ")));
            }
        }
        let above: Vec<String> = (0..depth)
            .map(|i| format!("{} AS k{i}", levels[i].key_sql))
            .collect();
        let prefix_order: Vec<String> = (1..=depth).map(|i| i.to_string()).collect();
        let (key_at, count_at) = (depth + 1, depth + 2);
        let level_order = match level.grouping {
            Grouping::Terms { .. } => format!("{count_at} DESC, {key_at} ASC"),
            Grouping::Histogram { .. } => key_at.to_string(),
        };
        let grouped: Vec<String> = (1..=depth + 1).map(|i| i.to_string()).collect();
        let rows = sql_rows(
            shared,
            &format!(
                "SELECT {}, {} AS key, count(*) AS doc_count{} FROM {relation}{level_filter} \
                 GROUP BY {} ORDER BY {}, {level_order}",
                above.join(", "),
                level.key_sql,
                metric_columns(&level.metrics),
                grouped.join(", "),
                prefix_order.join(", "),
            ),
        )
        .await?;
        let mut by_prefix: HashMap<String, Vec<Map<String, Value>>> = HashMap::new();
        for mut row in rows {
            let prefix: Vec<String> = (0..depth)
                .map(|i| {
                    row.remove(&format!("k{i}"))
                        .unwrap_or(Value::Null)
                        .to_string()
                })
                .collect();
            by_prefix.entry(prefix.join("\u{1}")).or_default().push(row);
        }
        attach(
            &mut answer,
            &names[1..depth],
            &mut Vec::new(),
            level,
            &mut by_prefix,
        );
    }
    Ok(Value::Object(answer))
}

/// Puts `level`'s answer into every bucket `path` levels below `answer` (the names of the
/// levels between), from the rows of its buckets by the keys of the buckets above (`prefix`).
fn attach(
    answer: &mut Map<String, Value>,
    path: &[String],
    prefix: &mut Vec<String>,
    level: &Bucketing,
    by_prefix: &mut HashMap<String, Vec<Map<String, Value>>>,
) {
    let Some(Value::Array(buckets)) = answer.get_mut("buckets") else {
        return;
    };
    for bucket in buckets.iter_mut() {
        let Value::Object(bucket) = bucket else {
            continue;
        };
        prefix.push(
            bucket
                .get("key")
                .cloned()
                .unwrap_or(Value::Null)
                .to_string(),
        );
        match path.split_first() {
            None => {
                let rows = by_prefix.remove(&prefix.join("\u{1}")).unwrap_or_default();
                let with_field = rows
                    .iter()
                    .filter_map(|r| r.get("doc_count").and_then(Value::as_u64))
                    .sum();
                bucket.insert(
                    level.name.clone(),
                    Value::Object(level.answer(rows, with_field)),
                );
            }
            Some((child, deeper)) => {
                if let Some(Value::Object(child)) = bucket.get_mut(child) {
                    attach(child, deeper, prefix, level, by_prefix);
                }
            }
        }
        prefix.pop();
    }
}

fn object<'a>(name: &str, spec: &'a Value) -> Result<&'a Map<String, Value>, EsError> {
    spec.as_object()
        .ok_or_else(|| bad_request(format!("aggregation [{name}] must be an object")))
}

fn agg_field<'a>(name: &str, spec: &'a Value) -> Result<&'a str, EsError> {
    spec.get("field")
        .and_then(Value::as_str)
        .map(|field| field.strip_suffix(".keyword").unwrap_or(field))
        .ok_or_else(|| bad_request(format!("aggregation [{name}] needs a field")))
}

/// Milliseconds of `30s`, `5m`, `1h`, `1d`, or `second`/`minute`/`hour`/`day` (also `1m` …).
fn interval_ms(interval: &str) -> Option<i64> {
    let unit_ms = |unit: &str| -> Option<i64> {
        Some(match unit {
            "ms" => 1,
            "s" | "second" => 1_000,
            "m" | "minute" => 60_000,
            "h" | "hour" => 3_600_000,
            "d" | "day" => 86_400_000,
            _ => return None,
        })
    };
    if let Some(ms) = unit_ms(interval) {
        return Some(ms);
    }
    let at = interval.find(|c: char| !c.is_ascii_digit())?;
    let (count, unit) = interval.split_at(at);
    let count: i64 = count.parse().ok().filter(|c| *c > 0)?;
    Some(count * unit_ms(unit)?)
}

/// Buckets every `step` ms from the first key to the last, with `key_as_string`; empty ones
/// hold each metric's empty value.
fn filled_buckets(rows: Vec<Map<String, Value>>, step: i64, metrics: &[Metric]) -> Vec<Value> {
    let found: Vec<(i64, Map<String, Value>)> = rows
        .into_iter()
        .filter_map(|row| Some((row.get("key")?.as_i64()?, row)))
        .collect();
    let (Some(first), Some(last)) = (
        found.first().map(|(k, _)| *k),
        found.last().map(|(k, _)| *k),
    ) else {
        return Vec::new();
    };
    // A pathological range (years in milliseconds) is not filled beyond what was found.
    let fill = (last - first) / step <= 100_000;
    let mut buckets = Vec::new();
    let mut next = found.into_iter().peekable();
    let mut key = first;
    while key <= last {
        let row = match next.peek() {
            Some((k, _)) if *k == key => next.next().map(|(_, row)| row),
            _ => None,
        };
        if row.is_some() || fill {
            let mut bucket = match row {
                Some(row) => bucket_of(row, metrics),
                None => bucket_of(
                    json!({"key": key, "doc_count": 0})
                        .as_object()
                        .cloned()
                        .unwrap_or_default(),
                    metrics,
                ),
            };
            let text = chrono::DateTime::from_timestamp_millis(key)
                .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
                .unwrap_or_default();
            bucket.insert("key_as_string".into(), Value::String(text));
            buckets.push(Value::Object(bucket));
        }
        key = match (fill, next.peek()) {
            (true, _) => key + step,
            (false, Some((k, _))) => *k,
            (false, None) => break,
        };
    }
    buckets
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals() {
        assert_eq!(interval_ms("30s"), Some(30_000));
        assert_eq!(interval_ms("1m"), Some(60_000));
        assert_eq!(interval_ms("hour"), Some(3_600_000));
        assert_eq!(interval_ms("1M"), None);
    }

    #[test]
    fn histogram_gaps_are_filled_with_empty_metrics() {
        let rows: Vec<Map<String, Value>> = [(0, 2, 1.5), (120_000, 1, 4.0)]
            .iter()
            .map(|(k, c, m)| {
                json!({"key": k, "doc_count": c, "m0": m, "m1": c})
                    .as_object()
                    .unwrap()
                    .clone()
            })
            .collect();
        let metrics = [
            Metric {
                name: "mean".into(),
                sql: String::new(),
                empty: Value::Null,
            },
            Metric {
                name: "n".into(),
                sql: String::new(),
                empty: json!(0),
            },
        ];
        let buckets = filled_buckets(rows, 60_000, &metrics);
        let counts: Vec<u64> = buckets
            .iter()
            .map(|b| b["doc_count"].as_u64().unwrap())
            .collect();
        assert_eq!(counts, [2, 0, 1]);
        assert_eq!(buckets[1]["key_as_string"], "1970-01-01T00:01:00.000Z");
        assert_eq!(buckets[0]["mean"], json!({"value": 1.5}));
        assert_eq!(buckets[1]["mean"], json!({"value": null}));
        assert_eq!(buckets[1]["n"], json!({"value": 0}));
        assert!(buckets[0].get("m0").is_none());
    }
}
