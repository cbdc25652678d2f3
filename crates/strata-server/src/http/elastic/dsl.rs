//! Elasticsearch's query DSL, the subset `_search` and `_count` answer, as a SQL condition over
//! a table's documents (`data`): `match_all`, `match` (terms, OR unless `operator: and`),
//! `match_phrase`, `term`, `terms`, `range` (with `now-15m`-style date math), `exists`,
//! `prefix`, `query_string` and `simple_query_string` (Strata's `matches()` language, which
//! is Lucene's simple syntax without field names), and `bool` (`must`/`filter` AND, `should` OR
//! — required when there is no `must`/`filter` or with `minimum_should_match` — and
//! `must_not`). Text queries become `matches(field, …)` (ADR 0019), so they use the text index.
//! Anything else is refused with the query's name, never approximated.

use serde_json::{Map, Value};

/// A refusal: the part of the request Strata does not answer, and why.
#[derive(Debug)]
pub struct Unsupported(pub String);

/// The SQL expression reading `field` (a dotted path) from a document.
pub fn field_sql(field: &str) -> String {
    let mut sql = "data".to_owned();
    for segment in field.split('.') {
        sql.push_str(".\"");
        sql.push_str(&segment.replace('"', "\"\""));
        sql.push('"');
    }
    sql
}

/// A SQL string literal.
pub fn string_sql(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// A JSON scalar as a SQL literal; None for arrays, objects and null.
pub fn literal_sql(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(string_sql(s)),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// The SQL condition of a query (None: `match_all`, every document).
pub fn condition(query: &Value) -> Result<Option<String>, Unsupported> {
    let object = query.as_object().filter(|o| o.len() == 1).ok_or_else(|| {
        Unsupported(format!(
            "a query must be an object with one key, not {query}"
        ))
    })?;
    let Some((kind, body)) = object.iter().next() else {
        return Ok(None);
    };
    match kind.as_str() {
        "match_all" => Ok(None),
        "match_none" => Ok(Some("FALSE".to_owned())),
        "match" => match_query(body, false),
        "match_phrase" => match_query(body, true),
        "term" => {
            let (field, value) = single_field(kind, body)?;
            let value = value.get("value").unwrap_or(value);
            let literal = literal_sql(value)
                .ok_or_else(|| Unsupported(format!("term: {value} is not a value")))?;
            Ok(Some(format!("{} = {literal}", field_sql(field))))
        }
        "terms" => {
            let (field, values) = single_field(kind, body)?;
            let values = values
                .as_array()
                .ok_or_else(|| Unsupported("terms: the values must be a list".to_owned()))?;
            if values.is_empty() {
                return Ok(Some("FALSE".to_owned()));
            }
            let literals = values
                .iter()
                .map(|v| literal_sql(v).ok_or_else(|| Unsupported(format!("terms: {v}"))))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Some(format!(
                "{} IN ({})",
                field_sql(field),
                literals.join(", ")
            )))
        }
        "range" => range(body),
        "exists" => {
            let field = body
                .get("field")
                .and_then(Value::as_str)
                .ok_or_else(|| Unsupported("exists needs a field".to_owned()))?;
            Ok(Some(format!("{} IS NOT NULL", field_sql(field))))
        }
        "prefix" => {
            let (field, value) = single_field(kind, body)?;
            let value = value.get("value").unwrap_or(value);
            let text = value
                .as_str()
                .ok_or_else(|| Unsupported(format!("prefix: {value} is not a string")))?;
            let pattern = text
                .replace('\\', "\\\\")
                .replace('%', "\\%")
                .replace('_', "\\_");
            Ok(Some(format!(
                "{} LIKE {} ESCAPE '\\'",
                field_sql(field),
                string_sql(&format!("{pattern}%"))
            )))
        }
        "query_string" | "simple_query_string" => {
            let text = body
                .get("query")
                .and_then(Value::as_str)
                .ok_or_else(|| Unsupported(format!("{kind} needs a query")))?;
            let fields: Vec<&str> = match (body.get("default_field"), body.get("fields")) {
                (Some(Value::String(field)), _) => vec![field.as_str()],
                (_, Some(Value::Array(fields))) => {
                    fields.iter().filter_map(Value::as_str).collect()
                }
                _ => vec![strata_pipeline::MESSAGE_FIELD],
            };
            strata_text::TextQuery::parse(text).map_err(|e| Unsupported(format!("{kind}: {e}")))?;
            let any: Vec<String> = fields
                .iter()
                .map(|field| format!("matches({}, {})", field_sql(field), string_sql(text)))
                .collect();
            Ok(Some(or(any)))
        }
        "bool" => bool_query(body),
        other => Err(Unsupported(format!(
            "the {other} query is not supported (supported: match_all, match, match_phrase, \
             term, terms, range, exists, prefix, query_string, simple_query_string, bool)"
        ))),
    }
}

/// `{"field": value}` (the one field of a term-level query) and its value.
fn single_field<'a>(kind: &str, body: &'a Value) -> Result<(&'a str, &'a Value), Unsupported> {
    body.as_object()
        .and_then(|o| o.iter().find(|(k, _)| !k.starts_with('_') && *k != "boost"))
        .map(|(field, value)| (field.as_str(), value))
        .ok_or_else(|| Unsupported(format!("{kind} needs a field")))
}

fn match_query(body: &Value, phrase: bool) -> Result<Option<String>, Unsupported> {
    let kind = if phrase { "match_phrase" } else { "match" };
    let (field, value) = single_field(kind, body)?;
    let (value, operator) = match value.as_object() {
        Some(options) => (
            options.get("query").unwrap_or(&Value::Null),
            options
                .get("operator")
                .and_then(Value::as_str)
                .unwrap_or("or"),
        ),
        None => (value, "or"),
    };
    let column = field_sql(field);
    let text = match value {
        Value::String(text) => text,
        Value::Number(_) | Value::Bool(_) => {
            return Ok(Some(format!(
                "{column} = {}",
                literal_sql(value).unwrap_or_default()
            )));
        }
        other => return Err(Unsupported(format!("{kind}: {other} is not a value"))),
    };
    let tokens = strata_text::tokens(text);
    if tokens.is_empty() {
        return Ok(Some("FALSE".to_owned()));
    }
    let query = if phrase {
        format!("\"{}\"", tokens.join(" "))
    } else if operator.eq_ignore_ascii_case("and") {
        tokens.join(" AND ")
    } else {
        tokens.join(" OR ")
    };
    Ok(Some(format!("matches({column}, {})", string_sql(&query))))
}

fn range(body: &Value) -> Result<Option<String>, Unsupported> {
    let (field, bounds) = single_field("range", body)?;
    let bounds = bounds
        .as_object()
        .ok_or_else(|| Unsupported("range: the bounds must be an object".to_owned()))?;
    let column = field_sql(field);
    let mut all = Vec::new();
    for (name, operator) in [("gte", ">="), ("gt", ">"), ("lte", "<="), ("lt", "<")] {
        let Some(bound) = bounds.get(name).filter(|b| !b.is_null()) else {
            continue;
        };
        let literal = match bound {
            Value::String(text) => string_sql(&date_math(text)?),
            other => literal_sql(other)
                .ok_or_else(|| Unsupported(format!("range: {other} is not a bound")))?,
        };
        all.push(format!("{column} {operator} {literal}"));
    }
    Ok((!all.is_empty()).then(|| all.join(" AND ")))
}

/// `now`, `now-15m`, `now+1d`, `now-1h/h` (rounded down) as RFC 3339 UTC with milliseconds; any
/// other text as it is.
fn date_math(text: &str) -> Result<String, Unsupported> {
    let Some(rest) = text.strip_prefix("now") else {
        return Ok(text.to_owned());
    };
    let (offset, rounding) = match rest.split_once('/') {
        Some((offset, rounding)) => (offset, Some(rounding)),
        None => (rest, None),
    };
    let unit_seconds = |unit: &str| -> Option<i64> {
        Some(match unit {
            "s" => 1,
            "m" => 60,
            "h" => 3600,
            "d" => 86_400,
            "w" => 604_800,
            _ => return None,
        })
    };
    let invalid = || Unsupported(format!("range: cannot read the date math {text:?}"));
    let mut instant = chrono::Utc::now();
    if !offset.is_empty() {
        let (sign, amount) = offset.split_at(1);
        let unit_at = amount
            .find(|c: char| !c.is_ascii_digit())
            .ok_or_else(invalid)?;
        let (count, unit) = amount.split_at(unit_at);
        let seconds = count.parse::<i64>().map_err(|_| invalid())?
            * unit_seconds(unit).ok_or_else(invalid)?;
        let delta = chrono::Duration::seconds(seconds);
        instant = match sign {
            "-" => instant - delta,
            "+" => instant + delta,
            _ => return Err(invalid()),
        };
    }
    if let Some(unit) = rounding {
        let step = unit_seconds(unit).ok_or_else(invalid)?;
        let seconds = instant.timestamp().div_euclid(step) * step;
        instant = chrono::DateTime::from_timestamp(seconds, 0).ok_or_else(invalid)?;
    }
    Ok(instant.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
}

fn bool_query(body: &Value) -> Result<Option<String>, Unsupported> {
    let body = body
        .as_object()
        .ok_or_else(|| Unsupported("bool must be an object".to_owned()))?;
    let clauses = |name: &str| -> Result<Vec<Option<String>>, Unsupported> {
        match body.get(name) {
            None => Ok(Vec::new()),
            Some(Value::Array(queries)) => queries.iter().map(condition).collect(),
            Some(query) => Ok(vec![condition(query)?]),
        }
    };
    let mut all: Vec<String> = Vec::new();
    let required = [clauses("must")?, clauses("filter")?].concat();
    let has_required = !required.is_empty();
    all.extend(required.into_iter().flatten());
    for not in clauses("must_not")? {
        all.push(match not {
            Some(condition) => format!("NOT COALESCE(({condition}), FALSE)"),
            None => "FALSE".to_owned(),
        });
    }
    let should = clauses("should")?;
    let minimum = minimum_should_match(body.get("minimum_should_match"))?;
    let needs_should = !should.is_empty() && (!has_required || minimum.is_some());
    if needs_should {
        if minimum.unwrap_or(1) > 1 {
            return Err(Unsupported(
                "bool: minimum_should_match above 1 is not supported".to_owned(),
            ));
        }
        if should.iter().any(Option::is_none) {
            // One `should` matches everything.
        } else {
            all.push(or(should.into_iter().flatten().collect()));
        }
    }
    Ok((!all.is_empty()).then(|| {
        all.iter()
            .map(|c| format!("({c})"))
            .collect::<Vec<_>>()
            .join(" AND ")
    }))
}

fn minimum_should_match(value: Option<&Value>) -> Result<Option<u64>, Unsupported> {
    match value {
        None => Ok(None),
        Some(Value::Number(n)) => Ok(n.as_u64()),
        Some(Value::String(s)) => s
            .parse()
            .map(Some)
            .map_err(|_| Unsupported(format!("bool: minimum_should_match {s:?}"))),
        Some(other) => Err(Unsupported(format!("bool: minimum_should_match {other}"))),
    }
}

fn or(any: Vec<String>) -> String {
    match any.len() {
        1 => any.into_iter().next().unwrap_or_default(),
        _ => format!(
            "({})",
            any.iter()
                .map(|c| format!("({c})"))
                .collect::<Vec<_>>()
                .join(" OR ")
        ),
    }
}

/// One `ORDER BY` item: the expression, and whether descending.
pub type SortItem = (String, bool);

/// The `ORDER BY` items of a `sort` (a field, `{field: "desc"}`, `{field: {"order": …}}`, or a
/// list of them); `_score` and `_doc` add nothing (there is no score; documents have no order).
pub fn order_by(sort: &Value) -> Result<Vec<SortItem>, Unsupported> {
    let items: Vec<&Value> = match sort {
        Value::Array(items) => items.iter().collect(),
        other => vec![other],
    };
    let mut order = Vec::new();
    for item in items {
        let (field, direction) = match item {
            Value::String(field) => (field.as_str(), "asc"),
            Value::Object(map) => {
                let Some((field, spec)) = map.iter().next() else {
                    continue;
                };
                let direction = match spec {
                    Value::String(d) => d.as_str(),
                    Value::Object(options) => options
                        .get("order")
                        .and_then(Value::as_str)
                        .unwrap_or("asc"),
                    _ => "asc",
                };
                (field.as_str(), direction)
            }
            other => return Err(Unsupported(format!("sort: {other}"))),
        };
        if matches!(field, "_score" | "_doc") {
            continue;
        }
        order.push((field_sql(field), direction.eq_ignore_ascii_case("desc")));
    }
    Ok(order)
}

/// Keeps the fields `_source` asks for (`true`/`false`, a field, a list, or
/// `{"includes": […], "excludes": […]}`; `*` patterns at the end of a field); None: no source.
pub fn filter_source(source: Map<String, Value>, request: Option<&Value>) -> Option<Value> {
    let (includes, excludes): (Vec<String>, Vec<String>) = match request {
        None | Some(Value::Bool(true)) => (Vec::new(), Vec::new()),
        Some(Value::Bool(false)) => return None,
        Some(Value::String(field)) => (vec![field.clone()], Vec::new()),
        Some(Value::Array(fields)) => (strings(fields), Vec::new()),
        Some(Value::Object(spec)) => (
            spec.get("includes")
                .and_then(Value::as_array)
                .map(|a| strings(a))
                .unwrap_or_default(),
            spec.get("excludes")
                .and_then(Value::as_array)
                .map(|a| strings(a))
                .unwrap_or_default(),
        ),
        Some(_) => (Vec::new(), Vec::new()),
    };
    let selected = |name: &str, patterns: &[String]| {
        patterns
            .iter()
            .any(|pattern| match pattern.strip_suffix('*') {
                Some(prefix) => name.starts_with(prefix),
                None => name == pattern || name.starts_with(&format!("{pattern}.")),
            })
    };
    Some(Value::Object(
        source
            .into_iter()
            .filter(|(name, _)| includes.is_empty() || selected(name, &includes))
            .filter(|(name, _)| !selected(name, &excludes))
            .collect(),
    ))
}

fn strings(values: &[Value]) -> Vec<String> {
    values
        .iter()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sql(query: Value) -> Option<String> {
        condition(&query).unwrap()
    }

    #[test]
    fn queries_become_sql() {
        assert_eq!(sql(json!({"match_all": {}})), None);
        assert_eq!(
            sql(json!({"match": {"message": "Connection RESET"}})).unwrap(),
            r#"matches(data."message", 'connection OR reset')"#
        );
        assert_eq!(
            sql(json!({"match": {"message": {"query": "a b", "operator": "and"}}})).unwrap(),
            r#"matches(data."message", 'a AND b')"#
        );
        assert_eq!(
            sql(json!({"match_phrase": {"msg": "it's reset"}})).unwrap(),
            r#"matches(data."msg", '"it s reset"')"#
        );
        assert_eq!(
            sql(json!({"match": {"status": 404}})).unwrap(),
            r#"data."status" = 404"#
        );
        assert_eq!(
            sql(json!({"term": {"http.method": {"value": "GET"}}})).unwrap(),
            r#"data."http"."method" = 'GET'"#
        );
        assert_eq!(
            sql(json!({"terms": {"status": [200, 304]}})).unwrap(),
            r#"data."status" IN (200, 304)"#
        );
        assert_eq!(
            sql(json!({"range": {"@timestamp": {"gte": "2015-05-17T10:00:00Z", "lt": "2015-05-18"}}}))
                .unwrap(),
            r#"data."@timestamp" >= '2015-05-17T10:00:00Z' AND data."@timestamp" < '2015-05-18'"#
        );
        assert_eq!(
            sql(
                json!({"bool": {"must": [{"match": {"m": "x"}}], "must_not": {"term": {"s": 1}},
                                 "should": [{"term": {"a": 1}}]}})
            )
            .unwrap(),
            r#"(matches(data."m", 'x')) AND (NOT COALESCE((data."s" = 1), FALSE))"#
        );
        assert_eq!(
            sql(json!({"bool": {"should": [{"term": {"a": 1}}, {"term": {"a": 2}}]}})).unwrap(),
            r#"(((data."a" = 1) OR (data."a" = 2)))"#
        );
        assert!(
            condition(&json!({"fuzzy": {"m": "x"}}))
                .unwrap_err()
                .0
                .contains("fuzzy")
        );
        assert!(condition(&json!({"query_string": {"query": "\"open"}})).is_err());
    }

    #[test]
    fn date_math_is_now_relative() {
        let fifteen = date_math("now-15m").unwrap();
        let now = date_math("now").unwrap();
        assert!(fifteen < now && fifteen.ends_with('Z'));
        assert!(date_math("now/d").unwrap().ends_with("T00:00:00.000Z"));
        assert!(date_math("now-3x").is_err());
        assert_eq!(date_math("2024-01-01").unwrap(), "2024-01-01");
    }

    #[test]
    fn sorts_and_sources() {
        assert_eq!(
            order_by(&json!([{"@timestamp": {"order": "desc"}}, "_score", "n"])).unwrap(),
            [
                (r#"data."@timestamp""#.to_owned(), true),
                (r#"data."n""#.to_owned(), false)
            ]
        );
        let source = json!({"a": 1, "b": {"c": 2}, "bc": 3})
            .as_object()
            .unwrap()
            .clone();
        assert_eq!(
            filter_source(source.clone(), Some(&json!(["b"]))),
            Some(json!({"b": {"c": 2}}))
        );
        assert_eq!(
            filter_source(source.clone(), Some(&json!({"excludes": ["b*"]}))),
            Some(json!({"a": 1}))
        );
        assert_eq!(filter_source(source, Some(&json!(false))), None);
    }
}
