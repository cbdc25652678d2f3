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
//! A block left idle longer than `limits.idle_in_transaction_timeout_secs` (PostgreSQL's
//! `idle_in_transaction_session_timeout`) is rolled back by the server's sweep
//! ([`OpenSlots::sweep`]), which lets go of its snapshot's read leases (merged-away parts can
//! then be deleted) and its changes; the connection's next statement fails with 25P03 and the
//! connection closes, as in PostgreSQL.
//!
//! Isolation: a block runs at snapshot isolation (PostgreSQL's `REPEATABLE READ`) whatever
//! level it asks for, except `SERIALIZABLE` (by `BEGIN`, by `SET TRANSACTION` before the block's
//! first query, or as the connection's default by `SET SESSION CHARACTERISTICS AS TRANSACTION`),
//! whose reads are checked at commit too (`strata_query::Transaction::set_serializable`). A
//! commit whose keys (or, serializable, whose reads) another commit changed since the snapshot
//! fails with 40001 and ends the block, so clients retry. Statements outside a block run at
//! snapshot isolation, each retried by the server on a write conflict.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use datafusion::sql::parser::{DFParser, Statement as DFStatement};
use datafusion::sql::sqlparser::ast::{
    ContextModifier, Set, Statement, TransactionAccessMode, TransactionIsolationLevel,
    TransactionMode,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use strata_query::Transaction;

/// A transaction-control statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    /// `BEGIN` / `START TRANSACTION`, read-only or not; `serializable`: whether it asked for
    /// `SERIALIZABLE` (Some(false): another level), None when it named no level.
    Begin {
        read_only: bool,
        serializable: Option<bool>,
    },
    /// `COMMIT` / `END`.
    Commit,
    /// `ROLLBACK` / `ABORT`.
    Rollback,
    /// `SET TRANSACTION …`, or with `session` `SET SESSION CHARACTERISTICS AS TRANSACTION …`;
    /// `serializable` as for `Begin` (levels other than `SERIALIZABLE` run as snapshot
    /// isolation; the access mode is not kept).
    SetTransaction {
        session: bool,
        serializable: Option<bool>,
    },
    /// `SAVEPOINT name`.
    Savepoint(String),
    /// `ROLLBACK TO [SAVEPOINT] name`.
    RollbackTo(String),
    /// `RELEASE [SAVEPOINT] name`.
    Release(String),
    /// `SHOW TRANSACTION ISOLATION LEVEL` / `SHOW transaction_isolation` (the block's level, or
    /// the level a block would begin at), or with `default` `SHOW default_transaction_isolation`.
    ShowIsolation { default: bool },
    /// What Strata does not do inside a transaction, with the reason: chained transactions.
    Unsupported(String),
}

/// The transaction-control statement `sql` is (None: another statement).
/// The statement's first word (its leading letters), as transaction control is told by it.
fn first_word(sql: &str) -> &str {
    sql.trim_start()
        .split(|c: char| !c.is_ascii_alphabetic())
        .next()
        .unwrap_or_default()
}

pub fn control_of(sql: &str) -> Option<Control> {
    // Cheap test first: most statements are not transaction control.
    let first = first_word(sql).to_ascii_uppercase();
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
            | "SHOW"
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
        Statement::StartTransaction { modes, .. } => {
            let (read_only, serializable) = modes_of(&modes);
            Control::Begin {
                read_only,
                serializable,
            }
        }
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
        Statement::ShowVariable { variable } => {
            let name: Vec<String> = variable.iter().map(|i| i.value.to_lowercase()).collect();
            match name.join(" ").as_str() {
                "transaction isolation level" | "transaction_isolation" => {
                    Control::ShowIsolation { default: false }
                }
                DEFAULT_ISOLATION => Control::ShowIsolation { default: true },
                _ => return None,
            }
        }
        Statement::Set(Set::SetTransaction { modes, session, .. }) => Control::SetTransaction {
            session,
            serializable: modes_of(&modes).1,
        },
        Statement::Set(Set::SingleAssignment {
            scope: None | Some(ContextModifier::Session),
            variable,
            values,
            ..
        }) if variable.to_string().eq_ignore_ascii_case(DEFAULT_ISOLATION) => {
            let [value] = &values[..] else {
                return None;
            };
            let value = value.to_string();
            Control::SetTransaction {
                session: true,
                serializable: Some(serializable_level(value.trim_matches('\''))?),
            }
        }
        _ => return None,
    })
}

/// A query with no rows whose one column describes what `SHOW` of an isolation level answers
/// (for the extended protocol's Describe); None for other statements.
pub fn isolation_description(sql: &str) -> Option<String> {
    match control_of(sql)? {
        Control::ShowIsolation { default } => Some(format!(
            "SELECT CAST(NULL AS VARCHAR) AS {} WHERE false",
            isolation_column(default)
        )),
        _ => None,
    }
}

/// The column `SHOW` of an isolation level answers in (PostgreSQL's names).
pub fn isolation_column(default: bool) -> &'static str {
    match default {
        true => DEFAULT_ISOLATION,
        false => "transaction_isolation",
    }
}

/// The name PostgreSQL gives the level a block runs at: snapshot isolation is its
/// `repeatable read` (whatever weaker level was asked for).
pub fn isolation_name(serializable: bool) -> &'static str {
    match serializable {
        true => "serializable",
        false => "repeatable read",
    }
}

/// The setting of the isolation level blocks begin at.
const DEFAULT_ISOLATION: &str = "default_transaction_isolation";

/// Whether `level` (a value of `default_transaction_isolation`) is `serializable`; None when it
/// is not a level.
fn serializable_level(level: &str) -> Option<bool> {
    match level.trim().to_ascii_lowercase().as_str() {
        "serializable" => Some(true),
        "repeatable read" | "read committed" | "read uncommitted" => Some(false),
        _ => None,
    }
}

/// Whether a connection's startup `options` (libpq's `PGOPTIONS`: `-c name=value` or
/// `--name=value`, blanks escaped by a backslash) make `default_transaction_isolation`
/// serializable; None when they do not set it.
pub fn serializable_by_options(options: &str) -> Option<bool> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut chars = options.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => word.extend(chars.next()),
            c if c.is_whitespace() => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            c => word.push(c),
        }
    }
    words.extend((!word.is_empty()).then_some(word));
    let mut serializable = None;
    let mut words = words.iter();
    while let Some(word) = words.next() {
        let setting = match word.as_str() {
            "-c" => words.next().map(String::as_str),
            other => other
                .strip_prefix("--")
                .or_else(|| other.strip_prefix("-c")),
        };
        if let Some((name, value)) = setting.and_then(|s| s.split_once('='))
            && name
                .replace('-', "_")
                .eq_ignore_ascii_case(DEFAULT_ISOLATION)
        {
            serializable = serializable_level(value).or(serializable);
        }
    }
    serializable
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
    // Only a first statement that ends a block or rolls back to a savepoint changes what to
    // report, and `control_of` tells those by their first word: every other statement (nearly
    // all) is answered without tokenizing the text to find its first statement.
    let first = first_word(sql.trim_start_matches(|c: char| c.is_whitespace() || c == ';'));
    if !["COMMIT", "END", "ROLLBACK", "ABORT"]
        .iter()
        .any(|word| first.eq_ignore_ascii_case(word))
    {
        return None;
    }
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

/// Whether `modes` ask for a read-only transaction, and whether for `SERIALIZABLE` (None: no
/// level named).
fn modes_of(modes: &[TransactionMode]) -> (bool, Option<bool>) {
    let mut read_only = false;
    let mut serializable = None;
    for mode in modes {
        match mode {
            TransactionMode::IsolationLevel(level) => {
                serializable = Some(*level == TransactionIsolationLevel::Serializable);
            }
            TransactionMode::AccessMode(TransactionAccessMode::ReadOnly) => read_only = true,
            TransactionMode::AccessMode(TransactionAccessMode::ReadWrite) => read_only = false,
        }
    }
    (read_only, serializable)
}

/// Every connection's slot, for the sweep that rolls back blocks left idle.
#[derive(Default)]
pub struct OpenSlots {
    slots: Mutex<Vec<Weak<TransactionSlot>>>,
}

impl OpenSlots {
    pub fn register(&self, slot: &Arc<TransactionSlot>) {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        slots.retain(|slot| slot.strong_count() > 0);
        slots.push(Arc::downgrade(slot));
    }

    /// Rolls back every block idle for `timeout` or longer; returns how many.
    pub fn sweep(&self, timeout: Duration) -> usize {
        let open: Vec<Arc<TransactionSlot>> = {
            let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
            slots.retain(|slot| slot.strong_count() > 0);
            slots.iter().filter_map(Weak::upgrade).collect()
        };
        open.iter()
            .filter(|slot| slot.expire_if_idle(timeout))
            .count()
    }
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
    /// The block was left idle too long and rolled back: the connection ends at its next
    /// statement.
    Expired,
}

/// One connection's block (see the module docs).
#[derive(Default)]
pub struct TransactionSlot {
    block: Mutex<Block>,
    /// When the connection's last statement ended; None while one runs (and before the first).
    /// Taken before `block` when both are.
    idle_since: Mutex<Option<Instant>>,
    /// Blocks begin `SERIALIZABLE` unless they ask otherwise (`SET SESSION CHARACTERISTICS`).
    serializable_by_default: AtomicBool,
    /// The default before the open block first changed it: restored when the block rolls back,
    /// as PostgreSQL undoes a `SET` of a transaction that does not commit.
    default_before_block: Mutex<Option<bool>>,
    /// The default at each savepoint of the open block, oldest first: `ROLLBACK TO` restores it.
    default_at_savepoints: Mutex<Vec<(String, bool)>>,
}

impl TransactionSlot {
    pub fn serializable_by_default(&self) -> bool {
        self.serializable_by_default.load(Ordering::Relaxed)
    }

    /// Sets the connection's default level; inside a block, until the block ends: kept if it
    /// commits, undone if it rolls back ([`TransactionSlot::settle_default`]).
    pub fn set_serializable_by_default(&self, serializable: bool) {
        if self.in_block() {
            let mut before = self.before_block();
            before.get_or_insert(self.serializable_by_default());
        }
        self.serializable_by_default
            .store(serializable, Ordering::Relaxed);
    }

    /// The block ended: its changes of the default level stay when it `committed`, and are
    /// undone otherwise.
    pub fn settle_default(&self, committed: bool) {
        self.savepoint_defaults().clear();
        if let Some(before) = self.before_block().take()
            && !committed
        {
            self.serializable_by_default
                .store(before, Ordering::Relaxed);
        }
    }

    /// `SAVEPOINT name` was set: a `ROLLBACK TO` it restores the default level of now.
    pub fn savepoint_default(&self, name: &str) {
        let now = self.serializable_by_default();
        self.savepoint_defaults().push((name.to_owned(), now));
    }

    /// `RELEASE name`: the savepoint and those set after it are gone.
    pub fn release_default(&self, name: &str) {
        let mut savepoints = self.savepoint_defaults();
        if let Some(at) = savepoints.iter().rposition(|(n, _)| n == name) {
            savepoints.truncate(at);
        }
    }

    /// `ROLLBACK TO name`: the default level goes back to the savepoint's, which stays.
    pub fn rollback_default_to(&self, name: &str) {
        let mut savepoints = self.savepoint_defaults();
        let Some(at) = savepoints.iter().rposition(|(n, _)| n == name) else {
            return;
        };
        if let Some((_, level)) = savepoints.get(at) {
            self.serializable_by_default
                .store(*level, Ordering::Relaxed);
        }
        savepoints.truncate(at + 1);
    }

    fn savepoint_defaults(&self) -> std::sync::MutexGuard<'_, Vec<(String, bool)>> {
        self.default_at_savepoints
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn before_block(&self) -> std::sync::MutexGuard<'_, Option<bool>> {
        self.default_before_block
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub fn in_block(&self) -> bool {
        matches!(*self.lock(), Block::Open { .. } | Block::Failed { .. })
    }

    /// A statement of the connection starts: the block is not idle while it runs.
    pub fn statement_started(&self) {
        *self.idle() = None;
    }

    /// The connection's statement ended (its last row sent, or it failed).
    pub fn statement_ended(&self) {
        *self.idle() = Some(Instant::now());
    }

    /// Rolls the block back when it has been idle for `timeout` (see the module docs); true
    /// when it did.
    fn expire_if_idle(&self, timeout: Duration) -> bool {
        let idle = self.idle();
        if !idle.is_some_and(|since| since.elapsed() >= timeout) {
            return false;
        }
        let mut block = self.lock();
        if !matches!(*block, Block::Open { .. } | Block::Failed { .. }) {
            return false;
        }
        // Dropping the transaction rolls it back and gives its read leases back.
        *block = Block::Expired;
        drop(block);
        self.settle_default(false);
        true
    }

    /// Whether the block expired (the slot is idle again afterwards).
    pub fn take_expired(&self) -> bool {
        let mut block = self.lock();
        if matches!(*block, Block::Expired) {
            *block = Block::Idle;
            return true;
        }
        false
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.idle_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The open transaction and whether it is read-only; Err(()) when the block failed; None
    /// when there is no block.
    pub fn current(&self) -> Option<Result<(Arc<Transaction>, bool), ()>> {
        match &*self.lock() {
            Block::Idle | Block::Expired => None,
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
            Block::Idle | Block::Expired => None,
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
        let begin = |read_only, serializable| {
            Some(Control::Begin {
                read_only,
                serializable,
            })
        };
        assert_eq!(control_of("begin"), begin(false, None));
        assert_eq!(
            control_of("START TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"),
            begin(true, Some(false))
        );
        assert_eq!(
            control_of("BEGIN ISOLATION LEVEL READ COMMITTED;"),
            begin(false, Some(false))
        );
        assert_eq!(
            control_of("BEGIN ISOLATION LEVEL SERIALIZABLE"),
            begin(false, Some(true))
        );
        assert_eq!(
            control_of("begin transaction read only isolation level serializable"),
            begin(true, Some(true))
        );
        assert_eq!(
            control_of("COMMIT AND CHAIN"),
            Some(Control::Unsupported("AND CHAIN is not supported".into()))
        );
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
            Some(Control::SetTransaction {
                session: false,
                serializable: Some(false)
            })
        );
        assert_eq!(
            control_of("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE"),
            Some(Control::SetTransaction {
                session: false,
                serializable: Some(true)
            })
        );
        assert_eq!(
            control_of("SET TRANSACTION READ ONLY"),
            Some(Control::SetTransaction {
                session: false,
                serializable: None
            })
        );
        assert_eq!(
            control_of("SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL SERIALIZABLE"),
            Some(Control::SetTransaction {
                session: true,
                serializable: Some(true)
            })
        );
        assert_eq!(
            control_of("SET default_transaction_isolation = 'serializable'"),
            Some(Control::SetTransaction {
                session: true,
                serializable: Some(true)
            })
        );
        assert_eq!(
            control_of("set session default_transaction_isolation to 'read committed'"),
            Some(Control::SetTransaction {
                session: true,
                serializable: Some(false)
            })
        );
        assert_eq!(control_of("SET default_transaction_isolation = 'x'"), None);
        for show in [
            "SHOW TRANSACTION ISOLATION LEVEL",
            "show transaction_isolation",
        ] {
            assert_eq!(
                control_of(show),
                Some(Control::ShowIsolation { default: false })
            );
        }
        assert_eq!(
            control_of("SHOW default_transaction_isolation;"),
            Some(Control::ShowIsolation { default: true })
        );
        assert_eq!(control_of("SHOW search_path"), None);
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

    #[test]
    fn the_status_before_a_statement_is_told_by_its_first_statement() {
        use pgwire::messages::response::TransactionStatus;
        let slot = TransactionSlot::default();
        for ending in [
            "COMMIT",
            "end transaction",
            " ;; rollback;",
            "ABORT",
            "COMMIT; BEGIN",
        ] {
            assert_eq!(
                status_before(&slot, ending),
                Some(TransactionStatus::Idle),
                "{ending}"
            );
        }
        for other in [
            "BEGIN",
            "INSERT INTO t VALUES ('{\"a\":1}')",
            "SELECT 1; COMMIT",
            "-- COMMIT",
            "ROLLBACK TO SAVEPOINT a",
            "committed",
        ] {
            assert_eq!(status_before(&slot, other), None, "{other}");
        }
    }

    #[test]
    fn an_expired_block_is_told_once_and_a_slot_without_a_block_never_expires() {
        // Blocks that expire hold a transaction: tests/python/test_transactions.py covers them.
        let slots = OpenSlots::default();
        let slot = Arc::new(TransactionSlot::default());
        slots.register(&slot);
        slot.statement_ended();
        assert_eq!(slots.sweep(Duration::ZERO), 0);
        assert!(!slot.in_block() && !slot.take_expired());
        *slot.lock() = Block::Expired;
        assert!(!slot.in_block() && slot.current().is_none());
        assert!(slot.take_expired() && !slot.take_expired());
        assert!(matches!(*slot.lock(), Block::Idle));
        drop(slot);
        assert_eq!(slots.sweep(Duration::ZERO), 0);
        assert!(slots.slots.lock().unwrap().is_empty());
    }

    #[test]
    fn startup_options_set_the_default_isolation() {
        let cases = [
            ("-c default_transaction_isolation=serializable", Some(true)),
            ("--default-transaction-isolation=SERIALIZABLE", Some(true)),
            (
                "-cdefault_transaction_isolation=serializable -c statement_timeout=0",
                Some(true),
            ),
            (
                "-c default_transaction_isolation=repeatable\\ read",
                Some(false),
            ),
            ("-c statement_timeout=5s", None),
            ("", None),
        ];
        for (options, expected) in cases {
            assert_eq!(serializable_by_options(options), expected, "{options}");
        }
    }
}
