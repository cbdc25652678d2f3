//! Transaction blocks over the PostgreSQL protocol: `BEGIN` / `START TRANSACTION`, `COMMIT` /
//! `END`, `ROLLBACK` / `ABORT`, `SAVEPOINT` / `RELEASE` / `ROLLBACK TO`, and the state of
//! each connection's block (ADR 0017).
//!
//! Each connection keeps one [`TransactionSlot`] in pgwire's session extensions, which live as
//! long as the connection: a connection that ends inside a block rolls it back (its
//! `strata_query::Transaction` is dropped). The slot is `Idle` (each statement commits on its
//! own), `Open` (statements run in the transaction: its snapshot, its own changes) or `Failed`
//! (a statement failed: everything but `ROLLBACK`, `COMMIT` and `ROLLBACK TO SAVEPOINT` is
//! refused with 25P02, as PostgreSQL does). `ROLLBACK TO SAVEPOINT` undoes the changes made
//! since the savepoint and opens a failed block again, which is how drivers and ORMs recover
//! from an error inside a block (psycopg's nested `transaction()`, Django's `atomic`).
//!
//! pgwire derives the status each `ReadyForQuery` reports from the responses alone (an error
//! inside a block always means "failed"), so [`status_before`] tells it beforehand what a
//! control statement will leave: idle after `COMMIT`/`ROLLBACK`, whether or not they fail (a
//! failed `COMMIT` ends the block in PostgreSQL too), and in a block again after `ROLLBACK TO`.
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
    /// `SAVEPOINT name`.
    Savepoint(String),
    /// `ROLLBACK TO [SAVEPOINT] name`.
    RollbackTo(String),
    /// `RELEASE [SAVEPOINT] name`.
    Release(String),
    /// What Strata does not do inside a transaction, with the reason: `SERIALIZABLE`, chained
    /// transactions.
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
            savepoint: Some(name),
            ..
        } => Control::RollbackTo(identifier(&name)),
        Statement::Savepoint { name } => Control::Savepoint(identifier(&name)),
        Statement::ReleaseSavepoint { name } => Control::Release(identifier(&name)),
        Statement::Rollback { .. } => Control::Rollback,
        Statement::Set(Set::SetTransaction { modes, .. }) => match modes_of(&modes) {
            Ok(_) => Control::SetTransaction,
            Err(why) => Control::Unsupported(why),
        },
        _ => return None,
    })
}

/// A name as PostgreSQL reads it: folded to lower case unless quoted.
pub(super) fn identifier(ident: &datafusion::sql::sqlparser::ast::Ident) -> String {
    match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_lowercase(),
    }
}

/// The transaction status the `ReadyForQuery` after `sql` must report whatever the responses
/// say, for a connection whose block is `slot` (see the module docs); None: as they say.
pub fn status_before(
    slot: &TransactionSlot,
    sql: &str,
) -> Option<pgwire::messages::response::TransactionStatus> {
    use pgwire::messages::response::TransactionStatus;
    let first = strata_query::split_statements(sql).into_iter().next()?;
    match control_of(&first)? {
        Control::Commit | Control::Rollback => Some(TransactionStatus::Idle),
        Control::RollbackTo(_) if slot.is_failed() => Some(TransactionStatus::Transaction),
        _ => None,
    }
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
    /// A statement of the block failed; only its end, or a return to a savepoint, is
    /// accepted. The transaction is kept for that return.
    Failed {
        transaction: Arc<Transaction>,
        read_only: bool,
    },
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
            Block::Failed { .. } => Some(Err(())),
        }
    }

    pub fn is_failed(&self) -> bool {
        matches!(*self.lock(), Block::Failed { .. })
    }

    /// The block's transaction, open or failed, with whether it is read-only.
    pub fn transaction(&self) -> Option<(Arc<Transaction>, bool)> {
        match &*self.lock() {
            Block::Idle => None,
            Block::Open {
                transaction,
                read_only,
            }
            | Block::Failed {
                transaction,
                read_only,
            } => Some((transaction.clone(), *read_only)),
        }
    }

    /// Opens a failed block again (after `ROLLBACK TO SAVEPOINT`).
    pub fn recover(&self) {
        let mut block = self.lock();
        if let Block::Failed {
            transaction,
            read_only,
        } = &*block
        {
            *block = Block::Open {
                transaction: transaction.clone(),
                read_only: *read_only,
            };
        }
    }

    pub fn open(&self, transaction: Transaction, read_only: bool) {
        *self.lock() = Block::Open {
            transaction: Arc::new(transaction),
            read_only,
        };
    }

    /// Marks the open block failed (its changes stay only for `ROLLBACK TO SAVEPOINT`).
    pub fn fail(&self) {
        let mut block = self.lock();
        if let Block::Open {
            transaction,
            read_only,
        } = &*block
        {
            *block = Block::Failed {
                transaction: transaction.clone(),
                read_only: *read_only,
            };
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
        assert_eq!(
            control_of("ROLLBACK TO SAVEPOINT A"),
            Some(Control::RollbackTo("a".into()))
        );
        assert_eq!(
            control_of("rollback to \"Mixed\""),
            Some(Control::RollbackTo("Mixed".into()))
        );
        assert_eq!(
            control_of("SAVEPOINT _pg3_1"),
            Some(Control::Savepoint("_pg3_1".into()))
        );
        assert_eq!(
            control_of("RELEASE SAVEPOINT b"),
            Some(Control::Release("b".into()))
        );
        assert_eq!(control_of("release b"), Some(Control::Release("b".into())));
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
