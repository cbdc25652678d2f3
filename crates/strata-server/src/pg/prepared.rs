//! SQL-level prepared statements, per connection as in PostgreSQL: `PREPARE name [(types)] AS
//! statement`, `EXECUTE name [(arguments)]` and `DEALLOCATE [PREPARE] name | ALL` sent as
//! statements (psql, scripts, pgbench's `-M simple` users), apart from the protocol-level
//! statements drivers prepare with Parse (pgwire keeps those).
//!
//! `PREPARE` keeps the statement's text; `EXECUTE` binds each `$n` of it to its argument and the
//! bound text runs as if it had been sent, so it takes the same paths (point reads, changes,
//! transaction blocks) a statement typed in full takes. An argument that is a literal of its
//! parameter's declared kind (a string for a text type, a number for a numeric one) is put in
//! as it is; any other is cast to the declared type, as PostgreSQL coerces it.
//!
//! Invariants: only `$n` placeholder tokens of the kept text are replaced (never text inside a
//! string literal or a comment), and each argument is an expression sqlparser parsed and
//! printed again, so an argument cannot change the statement's structure. The statement is not
//! planned at `PREPARE`: its errors (a missing table) are reported at `EXECUTE`.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use datafusion::sql::sqlparser::ast::{DataType, Expr, Statement, UnaryOperator, Value};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
use pgwire::error::{PgWireError, PgWireResult};

use super::parameters::replace_placeholders;
use super::statements::statement_error;
use super::transactions::{deallocate_of, identifier};
use crate::sqlstate;

/// The SQL-level prepared statements of one connection, by name.
#[derive(Default)]
pub struct PreparedStatements {
    by_name: Mutex<HashMap<String, Prepared>>,
}

struct Prepared {
    /// Declared parameter types, `$1` first; may be fewer than the statement's parameters.
    types: Vec<DataType>,
    /// The statement's text with its `$n` placeholders.
    text: String,
    /// How many arguments `EXECUTE` must give: the highest `$n`, or more types declared.
    parameters: usize,
}

/// What a prepared-statement command asks of the connection.
#[derive(Debug, PartialEq)]
pub enum Command {
    /// `PREPARE`: kept; answered with the tag `PREPARE`.
    Prepared,
    /// `DEALLOCATE`: the name (None for `ALL`), which the protocol-level statements may also use.
    Deallocated(Option<String>),
    /// `EXECUTE`: this statement text to run in its place.
    Run(String),
}

/// Whether `sql` (one statement) is `PREPARE`, `EXECUTE` or `DEALLOCATE`.
pub fn is_command(sql: &str) -> bool {
    sql.split_whitespace().next().is_some_and(|first| {
        ["PREPARE", "EXECUTE", "DEALLOCATE"]
            .iter()
            .any(|command| first.eq_ignore_ascii_case(command))
    })
}

impl PreparedStatements {
    /// What `sql` (one statement) does when it is `PREPARE`, `EXECUTE` or `DEALLOCATE`; None for
    /// any other statement.
    pub fn command(&self, sql: &str) -> PgWireResult<Option<Command>> {
        let Some(first) = sql.split_whitespace().next().filter(|_| is_command(sql)) else {
            return Ok(None);
        };
        if first.eq_ignore_ascii_case("DEALLOCATE") {
            let Some(name) = deallocate_of(sql) else {
                return Err(syntax_error(format!("cannot read the statement: {sql}")));
            };
            let mut by_name = self.lock();
            match &name {
                Some(name) => {
                    by_name.remove(name);
                }
                None => by_name.clear(),
            }
            return Ok(Some(Command::Deallocated(name)));
        }
        let statement = match Parser::parse_sql(&PostgreSqlDialect {}, sql) {
            Ok(mut statements) if statements.len() == 1 => statements.remove(0),
            Ok(_) => return Err(syntax_error(format!("expected one statement: {sql}"))),
            Err(e) => return Err(syntax_error(e.to_string())),
        };
        match statement {
            Statement::Prepare {
                name,
                data_types,
                statement,
            } => {
                self.prepare(identifier(&name), data_types, *statement)?;
                Ok(Some(Command::Prepared))
            }
            Statement::Execute {
                name: Some(name),
                parameters,
                immediate: false,
                into,
                using,
                output: false,
                default: false,
                ..
            } if into.is_empty() && using.is_empty() => {
                let Some(name) = name.0.last().and_then(|part| part.as_ident()) else {
                    return Err(syntax_error(format!(
                        "cannot read the statement name: {sql}"
                    )));
                };
                let name = identifier(name);
                Ok(Some(Command::Run(self.bind(&name, &parameters)?)))
            }
            _ => Err(statement_error(
                sqlstate::FEATURE_NOT_SUPPORTED,
                format!("this form of PREPARE or EXECUTE is not supported: {sql}"),
            )),
        }
    }

    fn prepare(
        &self,
        name: String,
        types: Vec<DataType>,
        statement: Statement,
    ) -> PgWireResult<()> {
        if !matches!(
            statement,
            Statement::Query(_)
                | Statement::Insert(_)
                | Statement::Update { .. }
                | Statement::Delete(_)
        ) {
            return Err(syntax_error(
                "PREPARE takes SELECT, VALUES, INSERT, UPDATE or DELETE".to_owned(),
            ));
        }
        let text = statement.to_string();
        let highest = placeholders(&text)?.into_iter().max().unwrap_or(0);
        let parameters = highest.max(types.len());
        let mut by_name = self.lock();
        if by_name.contains_key(&name) {
            return Err(statement_error(
                sqlstate::DUPLICATE_PREPARED_STATEMENT,
                format!("prepared statement \"{name}\" already exists"),
            ));
        }
        by_name.insert(
            name,
            Prepared {
                types,
                text,
                parameters,
            },
        );
        Ok(())
    }

    /// The text of statement `name` with its parameters bound to `arguments`.
    fn bind(&self, name: &str, arguments: &[Expr]) -> PgWireResult<String> {
        let by_name = self.lock();
        let Some(prepared) = by_name.get(name) else {
            return Err(statement_error(
                sqlstate::INVALID_STATEMENT_NAME,
                format!("prepared statement \"{name}\" does not exist"),
            ));
        };
        if arguments.len() != prepared.parameters {
            return Err(syntax_error(format!(
                "wrong number of parameters for prepared statement \"{name}\": expected {} \
                 parameters but got {}",
                prepared.parameters,
                arguments.len()
            )));
        }
        replace_placeholders(&prepared.text, |name| {
            Ok(parameter_index(name)
                .filter(|index| (1..=arguments.len()).contains(index))
                .map(|index| argument(&arguments[index - 1], prepared.types.get(index - 1))))
        })
        .map_err(syntax_error)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Prepared>> {
        self.by_name.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The parameter numbers `$n` of `text`.
fn placeholders(text: &str) -> PgWireResult<Vec<usize>> {
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, text)
        .tokenize()
        .map_err(|e| syntax_error(e.to_string()))?;
    Ok(tokens
        .iter()
        .filter_map(|token| match token {
            Token::Placeholder(name) => parameter_index(name),
            _ => None,
        })
        .collect())
}

/// The n of a placeholder `$n`.
fn parameter_index(name: &str) -> Option<usize> {
    name.strip_prefix('$')?.parse().ok()
}

/// The text an argument is bound as: as it is when it is a literal of the declared type's kind
/// (so that a bound key comparison is still a point read), otherwise cast to the declared type.
fn argument(value: &Expr, declared: Option<&DataType>) -> String {
    let text = value.to_string();
    let Some(declared) = declared else {
        return if literal(value).is_some() {
            text
        } else {
            format!("({text})")
        };
    };
    let fits = match literal(value) {
        Some(Literal::String) => is_text(declared),
        Some(Literal::Number) => is_number(declared),
        Some(Literal::Boolean) => matches!(declared, DataType::Bool | DataType::Boolean),
        Some(Literal::Null) => false,
        None => false,
    };
    if fits {
        text
    } else {
        format!("CAST(({text}) AS {declared})")
    }
}

enum Literal {
    String,
    Number,
    Boolean,
    Null,
}

fn literal(value: &Expr) -> Option<Literal> {
    match value {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(_) | Value::EscapedStringLiteral(_) => Some(Literal::String),
            Value::Number(..) => Some(Literal::Number),
            Value::Boolean(_) => Some(Literal::Boolean),
            Value::Null => Some(Literal::Null),
            _ => None,
        },
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => match literal(expr) {
            Some(Literal::Number) => Some(Literal::Number),
            _ => None,
        },
        _ => None,
    }
}

fn is_text(declared: &DataType) -> bool {
    matches!(
        declared,
        DataType::Text
            | DataType::Varchar(_)
            | DataType::CharacterVarying(_)
            | DataType::Char(_)
            | DataType::Character(_)
            | DataType::String(_)
    )
}

fn is_number(declared: &DataType) -> bool {
    matches!(
        declared,
        DataType::SmallInt(_)
            | DataType::Int(_)
            | DataType::Integer(_)
            | DataType::BigInt(_)
            | DataType::Int2(_)
            | DataType::Int4(_)
            | DataType::Int8(_)
            | DataType::Numeric(_)
            | DataType::Decimal(_)
            | DataType::Real
            | DataType::Float4
            | DataType::Float8
            | DataType::DoublePrecision
            | DataType::Double(_)
    )
}

fn syntax_error(message: String) -> PgWireError {
    statement_error(sqlstate::SYNTAX_ERROR, message)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn run(statements: &PreparedStatements, sql: &str) -> String {
        match statements.command(sql).unwrap() {
            Some(Command::Run(text)) => text,
            other => panic!("{sql}: {other:?}"),
        }
    }

    fn code(error: PgWireError) -> String {
        match error {
            PgWireError::UserError(info) => info.code,
            other => panic!("{other}"),
        }
    }

    #[test]
    fn execute_binds_arguments_as_literals_or_casts() {
        let statements = PreparedStatements::default();
        assert_eq!(
            statements
                .command("PREPARE p(text) AS SELECT data FROM docs WHERE data->>'id' = $1")
                .unwrap(),
            Some(Command::Prepared)
        );
        // A literal of the declared kind stays a literal: the statement is still a point read.
        assert_eq!(
            run(&statements, "EXECUTE p('42')"),
            "SELECT data FROM docs WHERE data ->> 'id' = '42'"
        );
        assert_eq!(
            run(&statements, "execute P(42)"),
            "SELECT data FROM docs WHERE data ->> 'id' = CAST((42) AS TEXT)"
        );
        // The argument is parsed, so a quote in it cannot end the literal.
        assert_eq!(
            run(&statements, "EXECUTE p('a'' OR 1=1 --')"),
            "SELECT data FROM docs WHERE data ->> 'id' = 'a'' OR 1=1 --'"
        );
        statements
            .command("PREPARE q(bigint, text) AS SELECT '$1', $2 || $1 FROM t WHERE n = $1")
            .unwrap();
        assert_eq!(
            run(&statements, "EXECUTE q(-5, upper('x'))"),
            "SELECT '$1', CAST((upper('x')) AS TEXT) || -5 FROM t WHERE n = -5"
        );
        statements
            .command("PREPARE r AS DELETE FROM t WHERE n = $1")
            .unwrap();
        assert_eq!(
            run(&statements, "EXECUTE r(7)"),
            "DELETE FROM t WHERE n = 7"
        );
    }

    #[test]
    fn errors_are_postgresql_s() {
        let statements = PreparedStatements::default();
        statements.command("PREPARE p(int) AS SELECT $1").unwrap();
        for (sql, expected) in [
            ("PREPARE p AS SELECT 1", "42P05"),
            ("EXECUTE nope(1)", "26000"),
            ("EXECUTE p", "42601"),
            ("EXECUTE p(1, 2)", "42601"),
            ("PREPARE d AS DROP TABLE t", "42601"),
        ] {
            assert_eq!(
                code(statements.command(sql).unwrap_err()),
                expected,
                "{sql}"
            );
        }
        assert_eq!(
            statements.command("DEALLOCATE p").unwrap(),
            Some(Command::Deallocated(Some("p".into())))
        );
        assert_eq!(
            code(statements.command("EXECUTE p(1)").unwrap_err()),
            "26000"
        );
        statements.command("PREPARE p AS SELECT 2").unwrap();
        assert_eq!(
            statements.command("DEALLOCATE ALL").unwrap(),
            Some(Command::Deallocated(None))
        );
        assert_eq!(code(statements.command("EXECUTE p").unwrap_err()), "26000");
        assert_eq!(statements.command("SELECT 1").unwrap(), None);
    }
}
