//! Statements whose results stream: [`Session::stream`] hands back DataFusion's batch stream
//! instead of collecting it, so a reader that writes each batch as it arrives (the CLI's output
//! formats) holds a few batches at a time whatever the size of the result.

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use datafusion::execution::SendableRecordBatchStream;

use crate::{QueryError, Session, with_end_position};

/// The result of one statement as a stream of batches, produced as the reader takes them.
pub struct QueryStream {
    /// The statement's output schema, with the plan's field metadata
    /// ([`crate::JSON_FIELD_METADATA`] on document columns); batches may not carry it.
    pub schema: SchemaRef,
    pub batches: SendableRecordBatchStream,
}

impl Session {
    /// Plans one statement and starts it; its batches arrive as the returned stream is polled.
    /// Dropping the stream cancels the statement: its tasks are aborted and scans stop at their
    /// next batch.
    pub async fn stream(&self, sql: &str) -> Result<QueryStream, QueryError> {
        let changed = match crate::ddl::run(self.context(), sql)? {
            Some(result) => Some(result),
            None if crate::changes_documents(sql) => Some(self.autocommit(sql, false).await?),
            None => None,
        };
        if let Some(result) = changed {
            let batches = futures::stream::iter(result.batches.into_iter().map(Ok));
            return Ok(QueryStream {
                schema: result.schema.clone(),
                batches: Box::pin(
                    datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(
                        result.schema,
                        batches,
                    ),
                ),
            });
        }
        let frame = match self.context().sql(&copy_with_format(sql)?).await {
            Ok(frame) => frame,
            Err(e) => return Err(with_end_position(e, sql)),
        };
        let schema: SchemaRef = Arc::new(frame.schema().as_arrow().clone());
        let batches = frame.execute_stream().await?;
        Ok(QueryStream { schema, batches })
    }
}

/// PostgreSQL's `COPY ... TO 'file' WITH (FORMAT fmt)` as DataFusion's
/// `COPY ... TO 'file' STORED AS fmt`; other statements unchanged. DataFusion's COPY knows no
/// `WITH (...)`, and would report it as a missing `HEADER` keyword. Other PostgreSQL options are
/// refused with a message naming DataFusion's `OPTIONS (...)`.
pub(crate) fn copy_with_format(sql: &str) -> Result<std::borrow::Cow<'_, str>, QueryError> {
    use std::borrow::Cow;

    use datafusion::sql::sqlparser::keywords::Keyword;
    use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
    let dialect = datafusion::sql::sqlparser::dialect::PostgreSqlDialect {};
    let Ok(tokens) = Tokenizer::new(&dialect, sql).tokenize_with_location() else {
        return Ok(Cow::Borrowed(sql));
    };
    let words: Vec<_> = tokens
        .iter()
        .filter(|t| !matches!(t.token, Token::Whitespace(_)))
        .collect();
    let keyword = |i: usize| match words.get(i).map(|t| &t.token) {
        Some(Token::Word(w)) => w.keyword,
        _ => Keyword::NoKeyword,
    };
    if keyword(0) != Keyword::COPY {
        return Ok(Cow::Borrowed(sql));
    }
    let mut depth = 0usize;
    for (i, token) in words.iter().enumerate() {
        match token.token {
            Token::LParen => depth += 1,
            Token::RParen => depth = depth.saturating_sub(1),
            Token::Word(ref w) if depth == 0 && w.keyword == Keyword::WITH => {
                let format = match words.get(i + 3).map(|t| &t.token) {
                    Some(Token::Word(w)) => Some(w.value.clone()),
                    Some(Token::SingleQuotedString(s)) => Some(s.clone()),
                    _ => None,
                };
                let close = words.get(i + 4);
                let (Some(format), true, true, Some(close)) = (
                    format,
                    matches!(words.get(i + 1).map(|t| &t.token), Some(Token::LParen)),
                    keyword(i + 2) == Keyword::FORMAT,
                    close.filter(|t| t.token == Token::RParen),
                ) else {
                    return Err(QueryError::DataFusion(
                        datafusion::error::DataFusionError::Plan(
                            "COPY ... WITH (...) takes only FORMAT, e.g. WITH (FORMAT csv); other \
                             settings go in OPTIONS (...), e.g. OPTIONS ('format.has_header' 'false')"
                                .to_owned(),
                        ),
                    ));
                };
                let start = byte_offset(sql, token.span.start);
                let end = byte_offset(sql, close.span.end);
                let mut rewritten = String::with_capacity(sql.len());
                rewritten.push_str(sql.get(..start).unwrap_or_default());
                rewritten.push_str("STORED AS ");
                rewritten.push_str(&format);
                rewritten.push_str(sql.get(end..).unwrap_or_default());
                return Ok(Cow::Owned(rewritten));
            }
            _ => {}
        }
    }
    Ok(Cow::Borrowed(sql))
}

/// The byte offset in `sql` of a tokenizer location (a line and a character column, from 1).
pub(crate) fn byte_offset(
    sql: &str,
    location: datafusion::sql::sqlparser::tokenizer::Location,
) -> usize {
    let line_start = sql
        .split_inclusive('\n')
        .take((location.line as usize).saturating_sub(1))
        .map(str::len)
        .sum::<usize>();
    let rest = sql.get(line_start..).unwrap_or_default();
    line_start
        + rest
            .char_indices()
            .nth((location.column as usize).saturating_sub(1))
            .map_or(rest.len(), |(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::copy_with_format;

    #[test]
    fn postgres_copy_format_becomes_stored_as() {
        let rewrite = |sql: &str| copy_with_format(sql).map(|s| s.into_owned());
        assert_eq!(
            rewrite("COPY (SELECT 1 AS \"with\") TO '/tmp/a b.csv' WITH (FORMAT csv)").unwrap(),
            "COPY (SELECT 1 AS \"with\") TO '/tmp/a b.csv' STORED AS csv"
        );
        assert_eq!(
            rewrite("copy (WITH x AS (SELECT 1) SELECT * FROM x)\nTO 'é.parquet'\nwith ( format 'parquet' ) ")
                .unwrap(),
            "copy (WITH x AS (SELECT 1) SELECT * FROM x)\nTO 'é.parquet'\nSTORED AS parquet "
        );
        let unchanged = "WITH x AS (SELECT 1) SELECT * FROM x";
        assert_eq!(rewrite(unchanged).unwrap(), unchanged);
        let message = rewrite("COPY (SELECT 1) TO 'a.csv' WITH (HEADER true)")
            .unwrap_err()
            .to_string();
        assert!(message.contains("takes only FORMAT"), "{message}");
    }
}
