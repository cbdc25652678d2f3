//! Error types of the JSON layer: why one document was rejected, and what else can fail.

/// Why a single input document was rejected. Callers add the file and line.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum DocumentError {
    #[error("invalid UTF-8 at byte {offset}")]
    InvalidUtf8 { offset: usize },
    #[error("nesting deeper than {limit} levels at byte {offset}")]
    TooDeep { limit: usize, offset: usize },
    /// A `\uD800`–`\uDFFF` escape without its other half: it names no character, so the
    /// string cannot be stored as text (serde_json's own message does not say so).
    #[error(
        "invalid JSON: lone surrogate escape {escape} at byte {offset} (a UTF-16 surrogate \
         needs its pair: \\uD800-\\uDBFF followed by \\uDC00-\\uDFFF)"
    )]
    LoneSurrogate { escape: String, offset: usize },
    #[error("invalid JSON: {message}")]
    Syntax { message: String },
    #[error("top-level value is {found}, expected an object")]
    NotAnObject { found: &'static str },
    #[error("empty line")]
    Empty,
}

/// Errors of shredding and reconstruction (as opposed to a bad input document).
#[derive(Debug, thiserror::Error)]
pub enum JsonError {
    #[error("arrow error while {context}: {source}")]
    Arrow {
        context: String,
        #[source]
        source: arrow::error::ArrowError,
    },
    #[error("column {column}: {message}")]
    Layout { column: String, message: String },
    #[error("stored JSON text of path {path} is invalid: {message}")]
    StoredJson { path: String, message: String },
}

impl JsonError {
    pub(crate) fn arrow(context: impl Into<String>, source: arrow::error::ArrowError) -> Self {
        JsonError::Arrow {
            context: context.into(),
            source,
        }
    }
}
