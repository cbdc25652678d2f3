//! Full-text search (issue 15, ADR 0019): the tokenizer every text index and every `matches()`
//! call share, and the query language of `matches(text, query)`.
//!
//! Invariants:
//! - one tokenizer: what the index stores and what a query looks for are tokenized by the same
//!   [`for_each_token`], so a match is never missed for a difference of case or splitting;
//! - [`TextQuery::may_match`] never says no where [`TextQuery::matches`] would say yes for some
//!   text whose tokens the index holds (granule pruning never drops a matching row).

mod query;
mod tokenize;

pub use query::{Matcher, QueryError, TextQuery};
pub use tokenize::{for_each_token, tokens};
