//! `TypeComparisonsByLiteral`: the analyzer rule that types comparisons of dotted paths by the
//! literal they are compared with, so that their answers never depend on unrelated documents.
//!
//! The planner types `data.k` by what the whole table stores (ADR 0003): one document holding a
//! number where every other holds a string turns the path into mixed text. A comparison's
//! meaning must not follow: `data.k = '007'` matches the string values `"007"`, and
//! `data.id = 9007199254740993` the numbers equal to that integer, whatever else the path holds.
//! So, for a dotted path compared with a literal (`=`, `<>`, `<`, `<=`, `>`, `>=`, `IN`,
//! `BETWEEN`, `LIKE`):
//! - a string literal compares the path's string values (mode `string`; other kinds are NULL);
//! - a boolean literal compares its booleans;
//! - an integer literal on a path of integers only compares the integer column directly; any
//!   other number comparison is exact on the numbers' text (`strata_compare_number` over mode
//!   `number`), never through a double;
//! - a cast of a path that mixes integers and floats (`data.id::BIGINT`, `::DECIMAL(38,0)`)
//!   casts the numbers' exact text, not their double.
//!
//! `->` and `->>` are PostgreSQL's JSON and text operators and keep their meaning. The rule runs
//! before `read_paths_from_columns`, which turns the re-typed calls into column reads.

use std::sync::Arc;

use arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::expr::{InList, Like, ScalarFunction};
use datafusion::logical_expr::{Between, BinaryExpr, Expr, LogicalPlan, Operator, ScalarUDF, lit};
use datafusion::optimizer::AnalyzerRule;

use crate::number::float_text;
use crate::paths::PathMode;
use crate::rule::rewrite_expressions_keeping_names;
use crate::udf::{CompareNumber, StrataPath};

#[derive(Debug)]
pub struct TypeComparisonsByLiteral {
    compare_number: Arc<ScalarUDF>,
}

impl Default for TypeComparisonsByLiteral {
    fn default() -> Self {
        TypeComparisonsByLiteral {
            compare_number: Arc::new(ScalarUDF::new_from_impl(CompareNumber::new())),
        }
    }
}

/// What a literal is, as far as typing a comparison goes.
#[derive(Debug, Clone)]
enum LiteralKind {
    String,
    Bool,
    /// An integer, with its exact text.
    Int(String),
    /// Any other number, with text that denotes the literal's value exactly.
    Float(String),
}

fn literal_kind(expr: &Expr) -> Option<LiteralKind> {
    match expr {
        Expr::Literal(value, _) => Some(match value {
            ScalarValue::Utf8(Some(_))
            | ScalarValue::Utf8View(Some(_))
            | ScalarValue::LargeUtf8(Some(_)) => LiteralKind::String,
            ScalarValue::Boolean(Some(_)) => LiteralKind::Bool,
            ScalarValue::Int8(Some(_))
            | ScalarValue::Int16(Some(_))
            | ScalarValue::Int32(Some(_))
            | ScalarValue::Int64(Some(_))
            | ScalarValue::UInt8(Some(_))
            | ScalarValue::UInt16(Some(_))
            | ScalarValue::UInt32(Some(_))
            | ScalarValue::UInt64(Some(_)) => LiteralKind::Int(value.to_string()),
            ScalarValue::Float64(Some(f)) => LiteralKind::Float(float_text(*f)?),
            ScalarValue::Float32(Some(f)) => LiteralKind::Float(float_text(f64::from(*f))?),
            ScalarValue::Decimal128(Some(_), _, _) => LiteralKind::Float(value.to_string()),
            _ => return None,
        }),
        Expr::Negative(inner) => match literal_kind(inner)? {
            LiteralKind::Int(text) => Some(LiteralKind::Int(negate(&text))),
            LiteralKind::Float(text) => Some(LiteralKind::Float(negate(&text))),
            _ => None,
        },
        _ => None,
    }
}

fn negate(text: &str) -> String {
    match text.strip_prefix('-') {
        Some(positive) => positive.to_owned(),
        None => format!("-{text}"),
    }
}

/// The mode of a dotted `strata_path` call; None for anything else.
fn dotted_mode(expr: &Expr) -> Option<PathMode> {
    let Expr::ScalarFunction(f) = expr else {
        return None;
    };
    if f.func.name() != StrataPath::NAME {
        return None;
    }
    match f.args.get(2) {
        Some(Expr::Literal(ScalarValue::Utf8(Some(mode)), _)) => {
            PathMode::parse(mode).filter(|m| m.is_dotted())
        }
        _ => None,
    }
}

/// The same `strata_path` call reading another mode.
fn with_mode(call: &Expr, mode: PathMode) -> Expr {
    match call {
        Expr::ScalarFunction(f) => {
            let mut args = f.args.clone();
            if let Some(slot) = args.get_mut(2) {
                *slot = lit(mode.as_str());
            }
            Expr::ScalarFunction(ScalarFunction::new_udf(f.func.clone(), args))
        }
        other => other.clone(),
    }
}

fn mirrored(op: Operator) -> Operator {
    match op {
        Operator::Lt => Operator::Gt,
        Operator::LtEq => Operator::GtEq,
        Operator::Gt => Operator::Lt,
        Operator::GtEq => Operator::LtEq,
        other => other,
    }
}

fn operator_text(op: Operator) -> Option<&'static str> {
    Some(match op {
        Operator::Eq => "=",
        Operator::NotEq => "<>",
        Operator::Lt => "<",
        Operator::LtEq => "<=",
        Operator::Gt => ">",
        Operator::GtEq => ">=",
        _ => return None,
    })
}

impl TypeComparisonsByLiteral {
    /// `call op literal`, typed by the literal; None when it stays as planned.
    fn compare(&self, call: &Expr, op: Operator, literal: &Expr) -> Option<Expr> {
        let mode = dotted_mode(call)?;
        let op_text = operator_text(op)?;
        let typed = |target: PathMode| {
            Expr::BinaryExpr(BinaryExpr::new(
                Box::new(with_mode(call, target)),
                op,
                Box::new(literal.clone()),
            ))
        };
        let exact = |text: String| {
            Expr::ScalarFunction(ScalarFunction::new_udf(
                self.compare_number.clone(),
                vec![with_mode(call, PathMode::Number), lit(op_text), lit(text)],
            ))
        };
        match literal_kind(literal)? {
            LiteralKind::String if mode == PathMode::String => None,
            LiteralKind::String => Some(typed(PathMode::String)),
            LiteralKind::Bool if mode == PathMode::Bool => None,
            LiteralKind::Bool => Some(typed(PathMode::Bool)),
            LiteralKind::Int(_) if mode == PathMode::Int => None,
            LiteralKind::Int(text) | LiteralKind::Float(text) => Some(exact(text)),
        }
    }

    /// `expr [NOT] IN (literals)`: one typed comparison per element unless every literal keeps
    /// the list's type (strings, booleans, or integers on an integer path).
    fn in_list(&self, list: &InList) -> Option<Expr> {
        let mode = dotted_mode(&list.expr)?;
        let kinds: Vec<LiteralKind> = list.list.iter().map(literal_kind).collect::<Option<_>>()?;
        let all = |f: fn(&LiteralKind) -> bool| kinds.iter().all(f);
        let uniform = if all(|k| matches!(k, LiteralKind::String)) {
            Some(PathMode::String)
        } else if all(|k| matches!(k, LiteralKind::Bool)) {
            Some(PathMode::Bool)
        } else if mode == PathMode::Int && all(|k| matches!(k, LiteralKind::Int(_))) {
            Some(PathMode::Int)
        } else {
            None
        };
        if let Some(target) = uniform {
            if target == mode {
                return None;
            }
            return Some(Expr::InList(InList::new(
                Box::new(with_mode(&list.expr, target)),
                list.list.clone(),
                list.negated,
            )));
        }
        let any_equal = list
            .list
            .iter()
            .map(|literal| {
                self.compare(&list.expr, Operator::Eq, literal)
                    .unwrap_or_else(|| list.expr.as_ref().clone().eq(literal.clone()))
            })
            .reduce(Expr::or)?;
        Some(if list.negated {
            Expr::Not(Box::new(any_equal))
        } else {
            any_equal
        })
    }

    fn between(&self, between: &Between) -> Option<Expr> {
        dotted_mode(&between.expr)?;
        literal_kind(&between.low)?;
        literal_kind(&between.high)?;
        let bound = |op: Operator, literal: &Expr| {
            self.compare(&between.expr, op, literal).unwrap_or_else(|| {
                Expr::BinaryExpr(BinaryExpr::new(
                    between.expr.clone(),
                    op,
                    Box::new(literal.clone()),
                ))
            })
        };
        let within = bound(Operator::GtEq, &between.low).and(bound(Operator::LtEq, &between.high));
        Some(if between.negated {
            Expr::Not(Box::new(within))
        } else {
            within
        })
    }

    /// Re-types one expression node (its children are already done).
    fn retype(&self, expr: &Expr) -> Option<Expr> {
        match expr {
            Expr::BinaryExpr(b) => self
                .compare(&b.left, b.op, &b.right)
                .or_else(|| self.compare(&b.right, mirrored(b.op), &b.left)),
            Expr::InList(list) => self.in_list(list),
            Expr::Between(between) => self.between(between),
            Expr::Like(like) | Expr::SimilarTo(like) => {
                let mode = dotted_mode(&like.expr)?;
                if mode == PathMode::String
                    || !matches!(literal_kind(&like.pattern)?, LiteralKind::String)
                {
                    return None;
                }
                let typed = Like {
                    expr: Box::new(with_mode(&like.expr, PathMode::String)),
                    ..like.clone()
                };
                Some(match expr {
                    Expr::SimilarTo(_) => Expr::SimilarTo(typed),
                    _ => Expr::Like(typed),
                })
            }
            // A float column holds integers beyond 2^53 as their nearest double; a cast to
            // anything but a float reads the numbers' exact text instead.
            Expr::Cast(cast) if casts_exactly_from_text(cast.field.data_type()) => {
                (dotted_mode(&cast.expr)? == PathMode::Float).then(|| {
                    let mut cast = cast.clone();
                    cast.expr = Box::new(with_mode(&cast.expr, PathMode::Number));
                    Expr::Cast(cast)
                })
            }
            Expr::TryCast(cast) if casts_exactly_from_text(cast.field.data_type()) => {
                (dotted_mode(&cast.expr)? == PathMode::Float).then(|| {
                    let mut cast = cast.clone();
                    cast.expr = Box::new(with_mode(&cast.expr, PathMode::Number));
                    Expr::TryCast(cast)
                })
            }
            _ => None,
        }
    }
}

fn casts_exactly_from_text(target: &DataType) -> bool {
    !matches!(
        target,
        DataType::Float16 | DataType::Float32 | DataType::Float64
    )
}

impl AnalyzerRule for TypeComparisonsByLiteral {
    fn name(&self) -> &str {
        "type_comparisons_by_literal"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        let rewritten = plan.transform_up_with_subqueries(|node| {
            rewrite_expressions_keeping_names(node, |e| {
                Ok(match self.retype(&e) {
                    Some(typed) => Transformed::yes(typed),
                    None => Transformed::no(e),
                })
            })
        })?;
        Ok(rewritten.data)
    }
}
