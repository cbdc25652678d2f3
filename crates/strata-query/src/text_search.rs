//! `matches(text, query)`: full-text search in SQL (issue 15, ADR 0019).
//!
//! `WHERE matches(data.message, 'error AND "connection reset"')` is true for rows whose text has
//! the query's tokens (`strata_text`: the tokenizer and the query language). The function itself
//! decides every row, so its answer never depends on an index; the scan only skips granules the
//! part's text index proves hold no match (`crate::scan::prune::text_index`). NULL text gives
//! NULL; the query must be a constant.

use std::sync::Arc;

use arrow::array::{Array, AsArray, BooleanArray};
use arrow::compute::cast;
use arrow::datatypes::DataType;
use datafusion::common::{Result, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};
use strata_text::TextQuery;

/// The function's SQL name.
pub const MATCHES: &str = "matches";

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Matches {
    signature: Signature,
}

impl Matches {
    pub fn new() -> Self {
        Matches {
            signature: Signature::string(2, Volatility::Immutable),
        }
    }
}

impl Default for Matches {
    fn default() -> Self {
        Self::new()
    }
}

impl ScalarUDFImpl for Matches {
    fn name(&self) -> &str {
        MATCHES
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Boolean)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let Some(query) = crate::udf::scalar_string(&args.args[1]) else {
            return exec_err!(
                "matches(text, query): the query must be a constant string, such as 'error AND \"connection reset\"'"
            );
        };
        let query = match TextQuery::parse(&query) {
            Ok(query) => query,
            Err(e) => return exec_err!("{e}"),
        };
        let texts = args.args[0].to_array(args.number_rows)?;
        let texts = cast(&texts, &DataType::Utf8)?;
        let texts = texts.as_string::<i32>();
        let decided = query
            .matcher()
            .matches_column(texts.value_data(), texts.value_offsets());
        let matched = BooleanArray::new(decided.into_iter().collect(), texts.nulls().cloned());
        Ok(ColumnarValue::Array(Arc::new(matched)))
    }
}

/// The parsed query of a `matches` call whose query is a constant, or None.
pub(crate) fn parse_constant_query(query: &datafusion::logical_expr::Expr) -> Option<TextQuery> {
    use datafusion::common::ScalarValue;
    use datafusion::logical_expr::Expr;
    match query {
        Expr::Literal(
            ScalarValue::Utf8(Some(text))
            | ScalarValue::Utf8View(Some(text))
            | ScalarValue::LargeUtf8(Some(text)),
            _,
        ) => TextQuery::parse(text).ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::StringArray;
    use arrow::datatypes::Field;
    use datafusion::common::ScalarValue;
    use datafusion::config::ConfigOptions;

    fn run(texts: Vec<Option<&str>>, query: &str) -> Result<Vec<Option<bool>>> {
        let rows = texts.len();
        let args = ScalarFunctionArgs {
            args: vec![
                ColumnarValue::Array(Arc::new(StringArray::from(texts))),
                ColumnarValue::Scalar(ScalarValue::Utf8(Some(query.to_owned()))),
            ],
            arg_fields: vec![
                Arc::new(Field::new("t", DataType::Utf8, true)),
                Arc::new(Field::new("q", DataType::Utf8, false)),
            ],
            number_rows: rows,
            return_field: Arc::new(Field::new("m", DataType::Boolean, true)),
            config_options: Arc::new(ConfigOptions::default()),
        };
        let ColumnarValue::Array(out) = Matches::new().invoke_with_args(args)? else {
            panic!("an array");
        };
        Ok(out.as_boolean().iter().collect())
    }

    #[test]
    fn rows_are_decided_by_the_query() {
        assert_eq!(
            run(
                vec![Some("ERROR connection reset"), None, Some("all fine")],
                "error"
            )
            .unwrap(),
            [Some(true), None, Some(false)]
        );
        let error = run(vec![Some("x")], "\"open").unwrap_err().to_string();
        assert!(error.contains("not closed"), "{error}");
    }
}
