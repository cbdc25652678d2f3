//! Group commit: transactions that commit at the same moment in this process are committed
//! together, so that N concurrent commits cost about one part write and one manifest commit per
//! table instead of N (the writer locks and fsyncs that would otherwise serialise them).
//!
//! A committer queues its writes and waits. The first waiter that finds no batch running
//! becomes the leader: it takes every queued commit of its data directory, runs
//! [`super::commit_batch`] and hands each its outcome; commits queued meanwhile form the next
//! batch. A transaction's outcome is exactly what committing it alone would give, except that a
//! transaction writing a key an earlier one of its batch wrote fails with a write conflict (it
//! could not have seen that write), and a batch whose writing fails fails every transaction in it.
//!
//! Before it takes the queue, a leader waits up to the commit delay ([`set_commit_delay`]) for
//! the transactions of its directory that have changes buffered and have not committed yet
//! ([`OpenWriter`]): it stops waiting as soon as none is left, so a lone writer never waits.
//! A batch costs about the same whatever its size (a part, a key file and deletion vectors per
//! table, a WAL frame, a live manifest, and at the checkpoint one more input to fold), and
//! without the wait batches held two or three transactions under load (ADR 0017, "Group
//! commit waits for open writers").

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use super::{CommitSummary, TableWrite, commit_batch};
use crate::error::EngineError;
use crate::table::DataDir;

struct Queued {
    id: u64,
    data_dir: DataDir,
    writes: BTreeMap<String, TableWrite>,
}

#[derive(Default)]
struct State {
    queue: Vec<Queued>,
    /// Data directories with a batch running (one batch per directory at a time).
    running: Vec<PathBuf>,
    outcomes: HashMap<u64, Result<CommitSummary, EngineError>>,
    next_id: u64,
    /// Per data directory: the [`OpenWriter`]s alive (transactions with changes buffered that
    /// have not been queued to commit).
    open_writers: HashMap<PathBuf, usize>,
    /// Leaders waiting for open writers (on [`Group::arrived`]).
    waiting_leaders: usize,
}

impl State {
    /// Whether the leader of `root`'s next batch should wait for more commits: some writer of
    /// `root` is still open, and the batch is not full.
    fn expects_more(&self, root: &PathBuf) -> bool {
        self.open_writers.get(root).is_some_and(|open| *open > 0)
            && self
                .queue
                .iter()
                .filter(|q| q.data_dir.root() == root)
                .count()
                < MAX_BATCH
    }

    fn writer_left(&mut self, root: &PathBuf) {
        if let Some(open) = self.open_writers.get_mut(root) {
            *open -= 1;
            if *open == 0 {
                self.open_writers.remove(root);
            }
        }
    }
}

#[derive(Default)]
struct Group {
    state: Mutex<State>,
    /// Outcomes were handed out, or a batch ended: committers look again.
    changed: Condvar,
    /// A commit was queued or an open writer left: waiting leaders look again.
    arrived: Condvar,
}

/// A leader stops waiting for open writers once its batch holds this many commits.
const MAX_BATCH: usize = 256;

/// How long a leader waits for open writers by default: measured on the booking benchmark
/// (`bench/booking.py`), where batches at 16 clients grew from 2.7 transactions to 14
/// (ADR 0017).
pub const DEFAULT_COMMIT_DELAY: Duration = Duration::from_millis(5);

static COMMIT_DELAY_MICROS: AtomicU64 = AtomicU64::new(DEFAULT_COMMIT_DELAY.as_micros() as u64);

/// Sets how long the leader of a group commit waits for open writers (zero: not at all) in
/// this process (the server's `wal.commit_delay_us`).
pub fn set_commit_delay(delay: Duration) {
    let micros = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
    COMMIT_DELAY_MICROS.store(micros, Ordering::Relaxed);
}

fn commit_delay() -> Duration {
    Duration::from_micros(COMMIT_DELAY_MICROS.load(Ordering::Relaxed))
}

/// A transaction of a data directory with changes buffered that has not committed yet. The
/// leader of a group commit waits (a moment at most) while one is alive, so that its commit
/// joins the batch; a transaction takes one with its first change and gives it back when it
/// commits ([`super::commit_announced`]) or when it is dropped (a rollback).
pub struct OpenWriter {
    root: Option<PathBuf>,
}

impl OpenWriter {
    pub fn new(data_dir: &DataDir) -> OpenWriter {
        let root = data_dir.root().to_owned();
        *group().lock().open_writers.entry(root.clone()).or_default() += 1;
        OpenWriter { root: Some(root) }
    }

    /// Leaves the open writers of `state` (the group's lock held); the drop then does nothing.
    fn leave(&mut self, state: &mut State) {
        if let Some(root) = self.root.take() {
            state.writer_left(&root);
        }
    }
}

impl std::fmt::Debug for OpenWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenWriter")
            .field("root", &self.root)
            .finish()
    }
}

impl Drop for OpenWriter {
    fn drop(&mut self) {
        if self.root.is_none() {
            return;
        }
        let group = group();
        let mut state = group.lock();
        self.leave(&mut state);
        if state.waiting_leaders > 0 {
            group.arrived.notify_all();
        }
    }
}

fn group() -> &'static Group {
    static GROUP: OnceLock<Group> = OnceLock::new();
    GROUP.get_or_init(Group::default)
}

impl Group {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Commits `writes` (non-empty) with whatever else is committing now (see the module docs);
/// `writer`, when the transaction announced itself, stops being open as its commit is queued.
pub(super) fn submit(
    data_dir: &DataDir,
    writes: BTreeMap<String, TableWrite>,
    writer: Option<OpenWriter>,
) -> Result<CommitSummary, EngineError> {
    let group = group();
    let mut state = group.lock();
    if let Some(mut writer) = writer {
        writer.leave(&mut state);
    }
    let id = state.next_id;
    state.next_id += 1;
    state.queue.push(Queued {
        id,
        data_dir: data_dir.clone(),
        writes,
    });
    if state.waiting_leaders > 0 {
        group.arrived.notify_all();
    }
    let root = data_dir.root().to_owned();
    loop {
        if let Some(outcome) = state.outcomes.remove(&id) {
            return outcome;
        }
        if !state.running.contains(&root) && state.queue.iter().any(|q| q.id == id) {
            // Lead: wait a moment for the open writers' commits, then take every commit
            // queued for this directory.
            state.running.push(root.clone());
            let deadline = Instant::now() + commit_delay();
            while state.expects_more(&root) {
                let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                    break;
                };
                state.waiting_leaders += 1;
                state = group
                    .arrived
                    .wait_timeout(state, left)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
                state.waiting_leaders -= 1;
            }
            let (batch, rest): (Vec<Queued>, Vec<Queued>) = std::mem::take(&mut state.queue)
                .into_iter()
                .partition(|q| q.data_dir.root() == root);
            state.queue = rest;
            drop(state);
            let ids: Vec<u64> = batch.iter().map(|q| q.id).collect();
            let writes: Vec<BTreeMap<String, TableWrite>> =
                batch.into_iter().map(|q| q.writes).collect();
            // A panic here would strand the waiters: it is turned into each one's error.
            let outcomes = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                commit_batch(data_dir, &writes)
            }))
            .unwrap_or_else(|_| {
                writes
                    .iter()
                    .map(|_| {
                        Err(EngineError::Invalid(
                            "a transaction commit panicked; nothing of its batch is known to be \
                             committed"
                                .into(),
                        ))
                    })
                    .collect()
            });
            state = group.lock();
            state.running.retain(|r| *r != root);
            state.outcomes.extend(ids.into_iter().zip(outcomes));
            group.changed.notify_all();
            continue;
        }
        state = group
            .changed
            .wait(state)
            .unwrap_or_else(PoisonError::into_inner);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::thread::JoinHandle;

    use super::*;
    use crate::transaction::commit_announced;
    use crate::transaction::tests::{keyed_table, upsert};

    /// The commit delay is the process's: tests that set it take turns, and put it back.
    struct Delay {
        _turn: MutexGuard<'static, ()>,
    }

    impl Delay {
        fn set(delay: Duration) -> Delay {
            static TURN: Mutex<()> = Mutex::new(());
            let turn = TURN.lock().unwrap_or_else(PoisonError::into_inner);
            set_commit_delay(delay);
            Delay { _turn: turn }
        }
    }

    impl Drop for Delay {
        fn drop(&mut self) {
            set_commit_delay(DEFAULT_COMMIT_DELAY);
        }
    }

    const LONG: Duration = Duration::from_secs(30);

    /// Commits `writes` on a thread of its own (a deep stack, as commits need).
    fn commit_on_thread(
        data_dir: &DataDir,
        writes: BTreeMap<String, TableWrite>,
        writer: Option<OpenWriter>,
    ) -> JoinHandle<Result<CommitSummary, EngineError>> {
        let data_dir = data_dir.clone();
        std::thread::Builder::new()
            .stack_size(strata_json::DEEP_STACK_BYTES)
            .spawn(move || commit_announced(&data_dir, &writes, writer))
            .unwrap()
    }

    #[test]
    fn a_leader_waits_for_an_open_writer_and_commits_both_in_one_batch() {
        let _delay = Delay::set(LONG);
        let dir = tempfile::tempdir().unwrap();
        let data_dir = DataDir::new(dir.path());
        keyed_table(&data_dir, "a", &[r#"{"id":1,"v":0}"#, r#"{"id":2,"v":0}"#]);
        let before = data_dir.manifest("a").unwrap().version;
        let open = OpenWriter::new(&data_dir);
        let first = commit_on_thread(
            &data_dir,
            upsert(&data_dir, "a", 1, r#"{"id":1,"v":1}"#),
            None,
        );
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            !first.is_finished(),
            "the leader did not wait for the open writer"
        );
        let second = upsert(&data_dir, "a", 2, r#"{"id":2,"v":2}"#);
        let second = commit_on_thread(&data_dir, second, Some(open));
        assert_eq!(first.join().unwrap().unwrap().written, 1);
        assert_eq!(second.join().unwrap().unwrap().written, 1);
        // One batch: one commit of the table for both.
        assert_eq!(data_dir.manifest("a").unwrap().version, before + 1);
    }

    #[test]
    fn a_writer_that_rolls_back_or_commits_alone_is_not_waited_for() {
        let _delay = Delay::set(LONG);
        let dir = tempfile::tempdir().unwrap();
        let data_dir = DataDir::new(dir.path());
        keyed_table(&data_dir, "a", &[r#"{"id":1,"v":0}"#]);
        let started = Instant::now();
        // A rollback: the open writer is dropped while a leader waits for it.
        let open = OpenWriter::new(&data_dir);
        let first = commit_on_thread(
            &data_dir,
            upsert(&data_dir, "a", 1, r#"{"id":1,"v":1}"#),
            None,
        );
        std::thread::sleep(Duration::from_millis(100));
        drop(open);
        first.join().unwrap().unwrap();
        // The only writer: it stops being open as its commit is queued.
        let alone = Some(OpenWriter::new(&data_dir));
        let writes = upsert(&data_dir, "a", 1, r#"{"id":1,"v":2}"#);
        commit_on_thread(&data_dir, writes, alone)
            .join()
            .unwrap()
            .unwrap();
        assert!(started.elapsed() < LONG / 2, "{:?}", started.elapsed());
        // Writers of another data directory are not waited for either.
        let other = tempfile::tempdir().unwrap();
        let _elsewhere = OpenWriter::new(&DataDir::new(other.path()));
        let writes = upsert(&data_dir, "a", 1, r#"{"id":1,"v":3}"#);
        commit_on_thread(&data_dir, writes, None)
            .join()
            .unwrap()
            .unwrap();
        assert!(started.elapsed() < LONG / 2, "{:?}", started.elapsed());
    }
}
