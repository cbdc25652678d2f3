//! PostgreSQL's SQLSTATE codes for Strata's errors, so that HTTP clients and PostgreSQL drivers
//! can tell a typo from a missing table from an overloaded server (Appendix A of the
//! PostgreSQL manual).

use datafusion::error::DataFusionError;
use strata_engine::EngineError;
use strata_query::QueryError;

pub const SYNTAX_ERROR: &str = "42601";
pub const UNDEFINED_TABLE: &str = "42P01";
pub const UNDEFINED_COLUMN: &str = "42703";
pub const INVALID_NAME: &str = "42602";
pub const FEATURE_NOT_SUPPORTED: &str = "0A000";
pub const INSUFFICIENT_RESOURCES: &str = "53000";
pub const OUT_OF_MEMORY: &str = "53200";
pub const TOO_MANY_CONNECTIONS: &str = "53300";
pub const QUERY_CANCELED: &str = "57014";
pub const DATA_EXCEPTION: &str = "22000";
pub const INVALID_PARAMETER: &str = "22023";
pub const INTERNAL_ERROR: &str = "XX000";
pub const INVALID_AUTHORIZATION: &str = "28000";
pub const INVALID_PASSWORD: &str = "28P01";
pub const UNIQUE_VIOLATION: &str = "23505";
pub const SERIALIZATION_FAILURE: &str = "40001";
pub const IN_FAILED_TRANSACTION: &str = "25P02";
pub const IDLE_IN_TRANSACTION_SESSION_TIMEOUT: &str = "25P03";
/// A savepoint statement outside a transaction block.
pub const NO_ACTIVE_SQL_TRANSACTION: &str = "25P01";
pub const READ_ONLY_TRANSACTION: &str = "25006";
/// `PREPARE` of a name the connection has prepared already.
pub const DUPLICATE_PREPARED_STATEMENT: &str = "42P05";
/// `EXECUTE` of a name the connection has not prepared.
pub const INVALID_STATEMENT_NAME: &str = "26000";

/// The code for a statement's error.
pub fn of_query_error(error: &QueryError) -> &'static str {
    match error {
        QueryError::IncompleteStatement { .. } => SYNTAX_ERROR,
        QueryError::Statement { sqlstate, .. } => sqlstate,
        QueryError::Engine(e) => of_engine_error(e),
        QueryError::DataFusion(e) => of_datafusion_error(e),
    }
}

pub fn of_engine_error(error: &EngineError) -> &'static str {
    match error {
        EngineError::NoSuchTable(_) => UNDEFINED_TABLE,
        EngineError::InvalidTableName(_) => INVALID_NAME,
        EngineError::InvalidSortKey { .. }
        | EngineError::InvalidSetting { .. }
        | EngineError::InvalidKey { .. }
        | EngineError::KeyMismatch { .. }
        | EngineError::InvalidTimeColumn { .. }
        | EngineError::TimeColumnMismatch { .. }
        | EngineError::InvalidTextIndex { .. }
        | EngineError::TextIndexMismatch { .. }
        | EngineError::SortKeyMismatch { .. } => INVALID_PARAMETER,
        EngineError::DuplicateKey { .. } => UNIQUE_VIOLATION,
        EngineError::WriteConflict { .. } | EngineError::ReadConflict { .. } => {
            SERIALIZATION_FAILURE
        }
        EngineError::AllRejected { .. } => DATA_EXCEPTION,
        _ => INTERNAL_ERROR,
    }
}

pub fn of_datafusion_error(error: &DataFusionError) -> &'static str {
    match error.find_root() {
        DataFusionError::SQL(..) => SYNTAX_ERROR,
        DataFusionError::NotImplemented(_) => FEATURE_NOT_SUPPORTED,
        DataFusionError::ResourcesExhausted(_) => OUT_OF_MEMORY,
        DataFusionError::SchemaError(..) => UNDEFINED_COLUMN,
        DataFusionError::Plan(message) if message.contains("not found") => {
            if message.contains("table") {
                UNDEFINED_TABLE
            } else {
                UNDEFINED_COLUMN
            }
        }
        DataFusionError::Plan(_) => SYNTAX_ERROR,
        DataFusionError::External(inner) => match inner.downcast_ref::<EngineError>() {
            Some(engine) => of_engine_error(engine),
            None => INTERNAL_ERROR,
        },
        _ => INTERNAL_ERROR,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_by_kind() {
        let missing = QueryError::Engine(EngineError::NoSuchTable("t".into()));
        assert_eq!(of_query_error(&missing), UNDEFINED_TABLE);
        let plan = DataFusionError::Plan("table 'strata.public.nope' not found".into());
        assert_eq!(of_datafusion_error(&plan), UNDEFINED_TABLE);
        let wrapped = DataFusionError::Context("planning".into(), Box::new(plan));
        assert_eq!(of_datafusion_error(&wrapped), UNDEFINED_TABLE);
        let oom = DataFusionError::ResourcesExhausted("pool".into());
        assert_eq!(of_datafusion_error(&oom), OUT_OF_MEMORY);
    }
}
