//! Transaction blocks over the PostgreSQL protocol: `BEGIN` / `START TRANSACTION`, `COMMIT` /
//! `END`, `ROLLBACK` / `ABORT`, and the state of each connection's block (ADR 0017).
//!
//! Each connection keeps one [`TransactionSlot`] in pgwire's session extensions, which live as
//! long as the connection: a connection that ends inside a block rolls it back (its
//! `strata_query::Transaction` is dropped). The slot is `Idle` (each statement commits on its
//! own), `Open` (statements run in the transaction: its snapshot, its own changes) or `Failed`
//! (a statement failed: everything but `ROLLBACK`/`COMMIT` is refused with 25P02, as
//! PostgreSQL does).
//!
//! Isolation: every block runs at snapshot isolation (PostgreSQL's `REPEATABLE READ`), whatever
//! level it asks for except `SERIALIZABLE`, which is refused (0A000) rather than promised; a
//! commit whose keys another commit changed since the snapshot fails with 40001 and ends the
//! block, so clients retry.

use std::sync::{Arc, Mutex, PoisonError};

use datafusion::sql::parser::{DFParser, Statement as DFStatement};
use datafusion::sql::sqlparser::ast::{
    Set, Statement, TransactionAccessMode, TransactionIsolationLevel, TransactionMode,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use strata_query::Transaction;

/// A transaction-control statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    /// `BEGIN` / `START TRANSACTION`, read-only or not.
    Begin { read_only: bool },
    /// `COMMIT` / `END`.
    Commit,
    /// `ROLLBACK` / `ABORT`.
    Rollback,
    /// `SET TRANSACTION …` (levels other than `SERIALIZABLE` are accepted and run as snapshot
    /// isolation).
    SetTransaction,
    /// What Strata does not do inside a transaction, with the reason: savepoints,
    /// `SERIALIZABLE`, chained transactions.
    Unsupported(String),
}

/// The transaction-control statement `sql` is (None: another statement).
pub fn control_of(sql: &str) -> Option<Control> {
    // Cheap test first: most statements are not transaction control.
    let first = sql
        .trim_start()
        .split(|c: char| !c.is_ascii_alphabetic())
        .next()?
        .to_ascii_uppercase();
    if !matches!(
        first.as_str(),
        "BEGIN"
            | "START"
            | "COMMIT"
            | "END"
            | "ROLLBACK"
            | "ABORT"
            | "SAVEPOINT"
            | "RELEASE"
            | "SET"
    ) {
        return None;
    }
    if first == "ABORT" {
        // PostgreSQL's `ABORT [WORK | TRANSACTION]`, which the parser does not know.
        let rest = sql.trim().trim_end_matches(';').to_ascii_uppercase();
        let words: Vec<&str> = rest.split_whitespace().collect();
        return matches!(words[..], ["ABORT"] | ["ABORT", "WORK" | "TRANSACTION"])
            .then_some(Control::Rollback);
    }
    let mut statements = DFParser::parse_sql_with_dialect(sql, &PostgreSqlDialect {}).ok()?;
    if statements.len() != 1 {
        return None;
    }
    let DFStatement::Statement(statement) = statements.pop_front()? else {
        return None;
    };
    Some(match *statement {
        Statement::StartTransaction { modes, .. } => match modes_of(&modes) {
            Ok(read_only) => Control::Begin { read_only },
            Err(why) => Control::Unsupported(why),
        },
        Statement::Commit { chain: true, .. } | Statement::Rollback { chain: true, .. } => {
            Control::Unsupported("AND CHAIN is not supported".into())
        }
        Statement::Commit { .. } => Control::Commit,
        Statement::Rollback {
            savepoint: Some(_), ..
        }
        | Statement::Savepoint { .. }
        | Statement::ReleaseSavepoint { .. } => {
            Control::Unsupported("savepoints are not supported".into())
        }
        Statement::Rollback { .. } => Control::Rollback,
        Statement::Set(Set::SetTransaction { modes, .. }) => match modes_of(&modes) {
            Ok(_) => Control::SetTransaction,
            Err(why) => Control::Unsupported(why),
        },
        _ => return None,
    })
}

/// The statement `DEALLOCATE [PREPARE] name | ALL` (drivers send it, psycopg after a rollback):
/// `Some(Some(name))`, `Some(None)` for `ALL`, None for other statements.
pub fn deallocate_of(sql: &str) -> Option<Option<String>> {
    let sql = sql.trim().trim_end_matches(';');
    let mut words = sql.split_whitespace();
    if !words.next()?.eq_ignore_ascii_case("DEALLOCATE") {
        return None;
    }
    let mut name = words.next()?;
    if name.eq_ignore_ascii_case("PREPARE") {
        name = words.next()?;
    }
    if words.next().is_some() {
        return None;
    }
    if name.eq_ignore_ascii_case("ALL") {
        return Some(None);
    }
    let name = name
        .strip_prefix('"')
        .and_then(|n| n.strip_suffix('"'))
        .map_or_else(
            || name.to_ascii_lowercase(),
            |quoted| quoted.replace("\"\"", "\""),
        );
    Some(Some(name))
}

/// Whether `modes` ask for a read-only transaction; an error for `SERIALIZABLE`.
fn modes_of(modes: &[TransactionMode]) -> Result<bool, String> {
    let mut read_only = false;
    for mode in modes {
        match mode {
            TransactionMode::IsolationLevel(TransactionIsolationLevel::Serializable) => {
                return Err(
                    "SERIALIZABLE is not supported: Strata's transactions run at snapshot \
                     isolation (REPEATABLE READ), which allows write skew; ask for REPEATABLE \
                     READ"
                        .into(),
                );
            }
            TransactionMode::IsolationLevel(_) => {}
            TransactionMode::AccessMode(TransactionAccessMode::ReadOnly) => read_only = true,
            TransactionMode::AccessMode(TransactionAccessMode::ReadWrite) => read_only = false,
        }
    }
    Ok(read_only)
}

/// The state of one connection's transaction block.
#[derive(Default)]
pub enum Block {
    #[default]
    Idle,
    Open {
        transaction: Arc<Transaction>,
        read_only: bool,
    },
    /// A statement of the block failed; only its end is accepted.
    Failed,
}

/// One connection's block (see the module docs).
#[derive(Default)]
pub struct TransactionSlot {
    block: Mutex<Block>,
}

impl TransactionSlot {
    pub fn in_block(&self) -> bool {
        !matches!(*self.lock(), Block::Idle)
    }

    /// The open transaction and whether it is read-only; Err(()) when the block failed; None
    /// when there is no block.
    pub fn current(&self) -> Option<Result<(Arc<Transaction>, bool), ()>> {
        match &*self.lock() {
            Block::Idle => None,
            Block::Open {
                transaction,
                read_only,
            } => Some(Ok((transaction.clone(), *read_only))),
            Block::Failed => Some(Err(())),
        }
    }

    pub fn open(&self, transaction: Transaction, read_only: bool) {
        *self.lock() = Block::Open {
            transaction: Arc::new(transaction),
            read_only,
        };
    }

    /// Marks the open block failed (its transaction is rolled back now).
    pub fn fail(&self) {
        let mut block = self.lock();
        if !matches!(*block, Block::Idle) {
            *block = Block::Failed;
        }
    }

    /// Ends the block, handing back its transaction when it was open.
    pub fn end(&self) -> Block {
        std::mem::take(&mut *self.lock())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Block> {
        self.block.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_statements_are_recognised() {
        assert_eq!(
            control_of("begin"),
            Some(Control::Begin { read_only: false })
        );
        assert_eq!(
            control_of("START TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"),
            Some(Control::Begin { read_only: true })
        );
        assert_eq!(
            control_of("BEGIN ISOLATION LEVEL READ COMMITTED;"),
            Some(Control::Begin { read_only: false })
        );
        assert!(matches!(
            control_of("BEGIN ISOLATION LEVEL SERIALIZABLE"),
            Some(Control::Unsupported(why)) if why.contains("SERIALIZABLE")
        ));
        assert_eq!(control_of("COMMIT"), Some(Control::Commit));
        assert_eq!(control_of("end transaction"), Some(Control::Commit));
        assert_eq!(control_of("ROLLBACK WORK"), Some(Control::Rollback));
        assert_eq!(control_of("abort"), Some(Control::Rollback));
        assert!(matches!(
            control_of("ROLLBACK TO SAVEPOINT a"),
            Some(Control::Unsupported(_))
        ));
        assert!(matches!(
            control_of("SAVEPOINT a"),
            Some(Control::Unsupported(_))
        ));
        assert_eq!(
            control_of("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"),
            Some(Control::SetTransaction)
        );
        assert_eq!(control_of("SELECT 1"), None);
        assert_eq!(control_of("SET datestyle = 'ISO'"), None);
        assert_eq!(control_of("abort_me"), None);
        assert_eq!(deallocate_of("DEALLOCATE ALL"), Some(None));
        assert_eq!(
            deallocate_of("deallocate prepare \"_pg3_0\";"),
            Some(Some("_pg3_0".into()))
        );
        assert_eq!(deallocate_of("DEALLOCATE Stmt"), Some(Some("stmt".into())));
        assert_eq!(deallocate_of("SELECT 1"), None);
    }
}
