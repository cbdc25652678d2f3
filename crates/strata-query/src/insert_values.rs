//! The rows of `INSERT INTO t VALUES (…)` computed without planning a query, when every row is
//! one text built from literals: `'…'` strings, integers, `||`, parentheses, and casts to
//! `json`, `jsonb` or a text type. That is what drivers and `pgbench` send once their parameters
//! are bound as literals (`strata-server`'s `pg::parameters`), and planning the `VALUES` in
//! DataFusion costs about a millisecond, twice in a booking transaction.
//!
//! Invariant: a row taken here is the text the planned `VALUES` gives for it (`crate::dml`'s
//! `documents_of`, whose rows are read as text): a cast to a JSON or text type keeps the text as
//! it is (the document is checked afterwards as every inserted one is), `||` of two texts is
//! their concatenation, and an integer literal (canonical digits, within `i64`) reads as its
//! digits. Anything else — NULL, fractions, signs, functions, a `||` with a JSON operand (a
//! document merge), escape or dollar-quoted strings, a query around the `VALUES` — leaves the
//! whole statement to the planner (None).

use datafusion::sql::sqlparser::ast::{
    BinaryOperator, CastKind, DataType, Expr, Query, SetExpr, Value,
};

/// Each row's text, or None when any row is not of the shape described in the module docs.
pub(crate) fn literal_rows(source: &Query) -> Option<Vec<String>> {
    let plain = source.with.is_none()
        && source.order_by.is_none()
        && source.limit_clause.is_none()
        && source.fetch.is_none()
        && source.locks.is_empty()
        && source.for_clause.is_none()
        && source.settings.is_none()
        && source.format_clause.is_none()
        && source.pipe_operators.is_empty();
    let SetExpr::Values(values) = source.body.as_ref() else {
        return None;
    };
    if !plain || values.explicit_row || values.value_keyword {
        return None;
    }
    values
        .rows
        .iter()
        .map(|row| match &row.content[..] {
            [expression] => row_text(expression),
            _ => None,
        })
        .collect()
}

/// A row's one expression: a text, possibly cast once to a JSON or text type.
fn row_text(expression: &Expr) -> Option<String> {
    if let Expr::Nested(inner) = expression {
        return row_text(inner);
    }
    match plain_cast(expression) {
        Some((inner, data_type)) if keeps_text(data_type) => row_text(inner),
        _ => text(expression),
    }
}

/// `CAST(inner AS type)` or `inner::type`, without a format or an array.
fn plain_cast(expression: &Expr) -> Option<(&Expr, &DataType)> {
    match expression {
        Expr::Cast {
            kind: CastKind::Cast | CastKind::DoubleColon,
            expr,
            data_type,
            array: false,
            format: None,
        } => Some((expr, data_type)),
        _ => None,
    }
}

/// The text `expression` evaluates to, when it is made of text and integer literals joined by
/// `||` (casts to text types allowed inside; a JSON cast inside makes `||` a document merge).
fn text(expression: &Expr) -> Option<String> {
    match expression {
        Expr::Nested(inner) => text(inner),
        Expr::Value(value) => match &value.value {
            Value::SingleQuotedString(s) => Some(s.clone()),
            // A number token carries no sign: canonical digits are a key's integer text.
            Value::Number(digits, false)
                if strata_json::KeyValue::integer_from_text(digits).is_some() =>
            {
                Some(digits.clone())
            }
            _ => None,
        },
        Expr::BinaryOp {
            left,
            op: BinaryOperator::StringConcat,
            right,
        } => {
            let mut joined = text(left)?;
            joined.push_str(&text(right)?);
            Some(joined)
        }
        cast => match plain_cast(cast) {
            Some((inner, data_type)) if is_text_type(data_type) => text(inner),
            _ => None,
        },
    }
}

/// Types a row's text may be cast to without changing it (the planned cast to Strata's JSON
/// types keeps the text; the document is checked after).
fn keeps_text(data_type: &DataType) -> bool {
    matches!(data_type, DataType::JSON | DataType::JSONB) || is_text_type(data_type)
}

fn is_text_type(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Text | DataType::Varchar(None) | DataType::String(None)
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use datafusion::sql::sqlparser::ast::{SetExpr, Statement};
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    use super::*;

    fn source(sql: &str) -> Query {
        let statement = Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .unwrap()
            .pop()
            .unwrap();
        match statement {
            Statement::Insert(insert) => *insert.source.unwrap(),
            other => panic!("not an INSERT: {other}"),
        }
    }

    /// The planned `VALUES` of `source`, read as text as `crate::dml` reads inserted rows.
    async fn planned(session: &crate::Session, source: &Query) -> Vec<Option<String>> {
        let SetExpr::Values(_) = source.body.as_ref() else {
            panic!("not VALUES");
        };
        let batches = session
            .context()
            .sql(&source.to_string())
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        batches
            .iter()
            .flat_map(|batch| crate::dml::texts_of(batch, 0).unwrap())
            .collect()
    }

    #[tokio::test]
    async fn rows_taken_without_planning_equal_the_planned_values() {
        let dir = tempfile::tempdir().unwrap();
        let session = crate::Session::open(dir.path()).unwrap();
        let taken = [
            r#"INSERT INTO t VALUES ('{"a": 1}')"#,
            r#"INSERT INTO t VALUES ('{"b":  2, "a": [1, 2.50, "x"]}'::jsonb)"#,
            r#"INSERT INTO t VALUES ('{"b":  2,"a":1}'::json), (CAST('{"c": 3}' AS JSONB))"#,
            r#"INSERT INTO t VALUES (('{"schedule": "' || '17' || '", "user": ' || 42 || ', "day": "2026-11-27"}')::jsonb)"#,
            r#"INSERT INTO t VALUES ('{"it''s": "' || ('a' || 'b')::text || '"}')"#,
            r#"INSERT INTO t VALUES ('{"n": ' || 9223372036854775807 || '}'::varchar)"#,
            r#"INSERT INTO t (data) VALUES ('{"ü": "😀 \n"}')"#,
        ];
        for sql in taken {
            let source = source(sql);
            let rows = literal_rows(&source).unwrap_or_else(|| panic!("not taken: {sql}"));
            let expected = planned(&session, &source).await;
            assert_eq!(
                rows.into_iter().map(Some).collect::<Vec<_>>(),
                expected,
                "{sql}"
            );
        }
        let planned_only = [
            r#"INSERT INTO t VALUES (NULL)"#,
            r#"INSERT INTO t VALUES ('{"a": ' || 1.50 || '}')"#,
            r#"INSERT INTO t VALUES ('{"a": ' || -1 || '}')"#,
            r#"INSERT INTO t VALUES ('{"a": ' || 007 || '}')"#,
            r#"INSERT INTO t VALUES ('{"a": 1}'::jsonb || '{"b": 2}'::jsonb)"#,
            r#"INSERT INTO t VALUES (E'{"a": "\t"}')"#,
            r#"INSERT INTO t VALUES ($${"a": 1}$$)"#,
            r#"INSERT INTO t VALUES (concat('{"a": ', 1, '}'))"#,
            r#"INSERT INTO t VALUES ('{"a": 1}', '{"b": 2}')"#,
            r#"INSERT INTO t SELECT '{"a": 1}'"#,
            r#"INSERT INTO t VALUES ('{"a": 1}') ORDER BY 1"#,
            r#"INSERT INTO t VALUES ('{"a": 1}'::int)"#,
        ];
        for sql in planned_only {
            assert_eq!(literal_rows(&source(sql)), None, "{sql}");
        }
    }
}
