//! Pruning: deciding, before any data page is read, which parts, row groups, pages and rows
//! cannot satisfy the pushed-down filters. Each level is a module; `access_plan` combines them.

pub(super) mod key_runs;
pub(super) mod page;
pub(super) mod part;
pub(super) mod row_group;

use std::fmt;

use arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{Expr, Operator};
use serde_json::Value;
use strata_format::{Manifest, PartEntry};
use strata_json::Kind;

use crate::paths::{PathColumn, PathMode};

/// A comparison that can be decided from min/max statistics.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Bound {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Predicate {
    Compare {
        column: PathColumn,
        op: Operator,
        value: Bound,
    },
    In {
        column: PathColumn,
        values: Vec<Bound>,
    },
    IsNotNull {
        column: PathColumn,
    },
}

impl Predicate {
    pub(super) fn column(&self) -> &PathColumn {
        match self {
            Predicate::Compare { column, .. }
            | Predicate::In { column, .. }
            | Predicate::IsNotNull { column } => column,
        }
    }
}

impl fmt::Display for Predicate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Predicate::Compare { column, op, value } => {
                write!(f, "{} {op} {value:?}", column.column_name())
            }
            Predicate::In { column, values } => {
                write!(f, "{} IN ({} values)", column.column_name(), values.len())
            }
            Predicate::IsNotNull { column } => write!(f, "{} IS NOT NULL", column.column_name()),
        }
    }
}

pub(super) fn split_conjunction(expr: &Expr) -> Vec<&Expr> {
    match expr {
        Expr::BinaryExpr(b) if b.op == Operator::And => {
            let mut out = split_conjunction(&b.left);
            out.extend(split_conjunction(&b.right));
            out
        }
        other => vec![other],
    }
}

fn column_of(expr: &Expr, columns: &[PathColumn]) -> Option<PathColumn> {
    let Expr::Column(c) = strip_cast(expr) else {
        return None;
    };
    columns
        .iter()
        .find(|p| {
            p.column_name() == c.name
                && matches!(
                    p.mode,
                    PathMode::String | PathMode::Int | PathMode::Float | PathMode::Bool
                )
        })
        .cloned()
}

fn strip_cast(expr: &Expr) -> &Expr {
    match expr {
        Expr::Cast(c)
            if matches!(
                c.field.data_type(),
                DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8
            ) =>
        {
            strip_cast(&c.expr)
        }
        other => other,
    }
}

fn bound_of(expr: &Expr) -> Option<Bound> {
    let Expr::Literal(value, _) = strip_cast(expr) else {
        return None;
    };
    Some(match value {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::Utf8View(Some(s))
        | ScalarValue::LargeUtf8(Some(s)) => Bound::Str(s.clone()),
        ScalarValue::Int64(Some(i)) => Bound::Int(*i),
        ScalarValue::Int32(Some(i)) => Bound::Int(i64::from(*i)),
        ScalarValue::UInt32(Some(i)) => Bound::Int(i64::from(*i)),
        ScalarValue::Float64(Some(f)) => Bound::Float(*f),
        ScalarValue::Boolean(Some(b)) => Bound::Bool(*b),
        _ => return None,
    })
}

/// Whether the scan applies `filter` exactly in every part of `manifest`, so that DataFusion
/// needs no filter above it: an equality or IN list of strings on a string path that every
/// part holds in a typed string column and indexes in its key runs. Run values are exact and
/// the scan reads only the runs that match (see `run_selection`), so the rows it returns are
/// exactly the rows satisfying the filter.
pub(crate) fn filter_is_exact(filter: &Expr, columns: &[PathColumn], manifest: &Manifest) -> bool {
    let Some(predicate) = predicate_from_expr(filter, columns) else {
        return false;
    };
    let string_values = match &predicate {
        Predicate::Compare {
            op: Operator::Eq,
            value: Bound::Str(_),
            ..
        } => true,
        Predicate::In { values, .. } => values.iter().all(|v| matches!(v, Bound::Str(_))),
        _ => false,
    };
    let column = predicate.column();
    string_values
        && column.mode == PathMode::String
        && manifest.parts.iter().all(|part| {
            part.columns.get(&column.path) == Some(&Kind::String)
                && part
                    .key_runs
                    .as_ref()
                    .is_some_and(|runs| runs.paths.contains(&column.path))
        })
}

pub(super) fn predicate_from_expr(expr: &Expr, columns: &[PathColumn]) -> Option<Predicate> {
    match expr {
        // DataFusion rewrites short IN lists to OR chains of equalities; fold them back.
        Expr::BinaryExpr(b) if b.op == Operator::Or => {
            let equal_values = |p: Predicate| match p {
                Predicate::Compare {
                    column,
                    op: Operator::Eq,
                    value,
                } => Some((column, vec![value])),
                Predicate::In { column, values } => Some((column, values)),
                _ => None,
            };
            let (left_column, mut values) = equal_values(predicate_from_expr(&b.left, columns)?)?;
            let (right_column, right_values) =
                equal_values(predicate_from_expr(&b.right, columns)?)?;
            if left_column != right_column {
                return None;
            }
            values.extend(right_values);
            Some(Predicate::In {
                column: left_column,
                values,
            })
        }
        Expr::BinaryExpr(b) => {
            let flipped = |op: Operator| match op {
                Operator::Lt => Operator::Gt,
                Operator::LtEq => Operator::GtEq,
                Operator::Gt => Operator::Lt,
                Operator::GtEq => Operator::LtEq,
                other => other,
            };
            if !matches!(
                b.op,
                Operator::Eq | Operator::Lt | Operator::LtEq | Operator::Gt | Operator::GtEq
            ) {
                return None;
            }
            if let (Some(column), Some(value)) = (column_of(&b.left, columns), bound_of(&b.right)) {
                Some(Predicate::Compare {
                    column,
                    op: b.op,
                    value,
                })
            } else if let (Some(column), Some(value)) =
                (column_of(&b.right, columns), bound_of(&b.left))
            {
                Some(Predicate::Compare {
                    column,
                    op: flipped(b.op),
                    value,
                })
            } else {
                None
            }
        }
        Expr::InList(list) if !list.negated => {
            let column = column_of(&list.expr, columns)?;
            let values: Option<Vec<Bound>> = list.list.iter().map(bound_of).collect();
            Some(Predicate::In {
                column,
                values: values?,
            })
        }
        Expr::IsNotNull(inner) => Some(Predicate::IsNotNull {
            column: column_of(inner, columns)?,
        }),
        _ => None,
    }
}

/// Column kinds whose values a typed mode reads.
pub(super) fn kind_feeds_mode(kind: Kind, mode: PathMode) -> bool {
    matches!(
        (kind, mode),
        (Kind::String, PathMode::String)
            | (Kind::Int, PathMode::Int)
            | (
                Kind::Int | Kind::Float | Kind::Number,
                PathMode::Float | PathMode::Number
            )
            | (Kind::Bool, PathMode::Bool)
    )
}

pub(super) fn remainder_feeds(entry: &PartEntry, path: &str, mode: PathMode) -> bool {
    entry.remainder_paths_truncated
        || entry
            .remainder_paths
            .get(path)
            .is_some_and(|kinds| kinds.iter().any(|k| kind_feeds_mode(*k, mode)))
}

fn bound_from_json(value: &Value) -> Option<Bound> {
    match value {
        Value::String(s) => Some(Bound::Str(s.clone())),
        Value::Bool(b) => Some(Bound::Bool(*b)),
        Value::Number(n) => n
            .as_i64()
            .map(Bound::Int)
            .or_else(|| n.as_str().parse().ok().map(Bound::Float)),
        _ => None,
    }
}

fn compare(a: &Bound, b: &Bound) -> Option<std::cmp::Ordering> {
    match (a, b) {
        (Bound::Str(x), Bound::Str(y)) => Some(x.as_bytes().cmp(y.as_bytes())),
        (Bound::Int(x), Bound::Int(y)) => Some(x.cmp(y)),
        (Bound::Float(x), Bound::Float(y)) => x.partial_cmp(y),
        (Bound::Int(x), Bound::Float(y)) => (*x as f64).partial_cmp(y),
        (Bound::Float(x), Bound::Int(y)) => x.partial_cmp(&(*y as f64)),
        (Bound::Bool(x), Bound::Bool(y)) => Some(x.cmp(y)),
        _ => None,
    }
}

/// Whether any value in [min, max] can satisfy the predicate (true when unsure).
fn range_may_match(predicate: &Predicate, min: &Bound, max: &Bound) -> bool {
    use std::cmp::Ordering::*;
    let within = |v: &Bound| {
        !matches!(compare(v, min), Some(Less)) && !matches!(compare(v, max), Some(Greater))
    };
    match predicate {
        Predicate::IsNotNull { .. } => true,
        Predicate::In { values, .. } => values.iter().any(within),
        Predicate::Compare { op, value, .. } => match op {
            Operator::Eq => within(value),
            Operator::Lt => !matches!(compare(min, value), Some(Greater | Equal)),
            Operator::LtEq => !matches!(compare(min, value), Some(Greater)),
            Operator::Gt => !matches!(compare(max, value), Some(Less | Equal)),
            Operator::GtEq => !matches!(compare(max, value), Some(Less)),
            _ => true,
        },
    }
}
