//! Document changes prepared once and executed many times (a driver's prepared `INSERT … VALUES
//! ($1)`): the statement is parsed once with its `$n` placeholders, and each execution binds its
//! values into a copy of the tree instead of parsing its text again (the parse was about 5 % of
//! a flight booking's CPU on the server, three changes per booking).
//!
//! Invariant: a bound statement is the statement its text with the values written in as SQL
//! literals would parse to — each value is given as the expression its literal parses to
//! ([`literal_expression`]), and a template whose placeholders the tree does not all show
//! (counted at [`PreparedChange::parse`]) is not prepared, so its executions bind text as before.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    Expr, Statement, Value, visit_expressions, visit_expressions_mut,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

/// An `INSERT`, `UPDATE` or `DELETE` parsed with its placeholders (see the module docs).
#[derive(Debug, Clone)]
pub struct PreparedChange {
    statement: Statement,
}

impl PreparedChange {
    /// `sql`, a document change whose text holds `placeholders` `$n` tokens, parsed; None when it
    /// is not one document change the parser reads, or when its tree does not show every
    /// placeholder.
    pub fn parse(sql: &str, placeholders: usize) -> Option<PreparedChange> {
        let statement = crate::dml::parse_one_uncached(sql)?;
        if !matches!(
            statement,
            Statement::Insert(_) | Statement::Update(_) | Statement::Delete(_)
        ) {
            return None;
        }
        let mut seen = 0usize;
        let _ = visit_expressions(&statement, |expr| {
            if placeholder_of(expr).is_some() {
                seen += 1;
            }
            ControlFlow::<()>::Continue(())
        });
        (seen == placeholders).then_some(PreparedChange { statement })
    }

    /// The statement with each placeholder replaced by what `value` gives for its name (`"$1"`),
    /// or the first error it gives.
    pub fn bind<E>(&self, mut value: impl FnMut(&str) -> Result<Expr, E>) -> Result<Statement, E> {
        let mut statement = self.statement.clone();
        let outcome = visit_expressions_mut(&mut statement, |expr| {
            if let Some(name) = placeholder_of(expr) {
                match value(name) {
                    Ok(bound) => *expr = bound,
                    Err(e) => return ControlFlow::Break(e),
                }
            }
            ControlFlow::Continue(())
        });
        match outcome {
            ControlFlow::Break(e) => Err(e),
            ControlFlow::Continue(()) => Ok(statement),
        }
    }
}

/// The name of the `$n` placeholder `expr` is, if it is one.
fn placeholder_of(expr: &Expr) -> Option<&str> {
    match expr {
        Expr::Value(value) => match &value.value {
            Value::Placeholder(name) if name.starts_with('$') => Some(name),
            _ => None,
        },
        _ => None,
    }
}

/// The expression the SQL literal `text` parses to (`'it''s'`, `-5`, `1.5e3`, `NULL`, `true`), or
/// why `text` is not one whole expression.
pub fn literal_expression(text: &str) -> Result<Expr, String> {
    let dialect = PostgreSqlDialect {};
    let mut parser = Parser::new(&dialect)
        .try_with_sql(text)
        .map_err(|e| e.to_string())?;
    let expr = parser.parse_expr().map_err(|e| e.to_string())?;
    match parser.peek_token().token {
        datafusion::sql::sqlparser::tokenizer::Token::EOF => Ok(expr),
        other => Err(format!("{text:?} is not one literal: {other} follows it")),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn bound_text(template: &str, values: &[&str]) -> String {
        let prepared = PreparedChange::parse(template, template.matches('$').count()).unwrap();
        prepared
            .bind(|name| {
                let index: usize = name[1..].parse().unwrap();
                literal_expression(values[index - 1])
            })
            .unwrap()
            .to_string()
    }

    fn parsed_text(sql: &str) -> String {
        crate::dml::parse_one_uncached(sql).unwrap().to_string()
    }

    #[test]
    fn a_bound_change_is_what_its_text_with_the_literals_parses_to() {
        let cases: [(&str, &[&str], &str); 4] = [
            (
                "INSERT INTO t VALUES (('{\"a\": ' || $1 || ', \"b\": ' || $2 || '}')::jsonb)",
                &["-5", "'it''s'"],
                "INSERT INTO t VALUES (('{\"a\": ' || -5 || ', \"b\": ' || 'it''s' || '}')::jsonb)",
            ),
            (
                "UPDATE t SET data = jsonb_set(data, '{n}', to_jsonb($2)) WHERE data->>'id' = $1",
                &["'7'", "1.5e3"],
                "UPDATE t SET data = jsonb_set(data, '{n}', to_jsonb(1.5e3)) WHERE data->>'id' = '7'",
            ),
            (
                "DELETE FROM t WHERE data.id = $1 OR data.id IS NOT DISTINCT FROM $1",
                &["NULL"],
                "DELETE FROM t WHERE data.id = NULL OR data.id IS NOT DISTINCT FROM NULL",
            ),
            (
                "INSERT INTO audit VALUES ($1::jsonb) ON CONFLICT ((data->>'id')) DO UPDATE \
                 SET data = jsonb_set(audit.data, '{ok}', to_jsonb($2))",
                &["'{\"id\": \"x\"}'", "true"],
                "INSERT INTO audit VALUES ('{\"id\": \"x\"}'::jsonb) ON CONFLICT ((data->>'id')) \
                 DO UPDATE SET data = jsonb_set(audit.data, '{ok}', to_jsonb(true))",
            ),
        ];
        for (template, values, text) in cases {
            assert_eq!(
                bound_text(template, values),
                parsed_text(text),
                "{template}"
            );
        }
    }

    #[test]
    fn what_is_not_a_change_or_hides_a_placeholder_is_not_prepared() {
        assert!(PreparedChange::parse("SELECT $1", 1).is_none());
        assert!(PreparedChange::parse("INSERT INTO t VALUES ($1)", 1).is_some());
        // The text holds two placeholders, the tree one: bound as text instead.
        assert!(PreparedChange::parse("INSERT INTO t VALUES ($1) -- $2", 2).is_none());
        assert!(literal_expression("1 2").is_err());
        assert!(literal_expression("'a'; DROP TABLE t").is_err());
    }
}
