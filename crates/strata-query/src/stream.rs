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
        let frame = match self.context().sql(sql).await {
            Ok(frame) => frame,
            Err(e) => return Err(with_end_position(e, sql)),
        };
        let schema: SchemaRef = Arc::new(frame.schema().as_arrow().clone());
        let batches = frame.execute_stream().await?;
        Ok(QueryStream { schema, batches })
    }
}
