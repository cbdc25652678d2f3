//! Group commit: transactions that commit at the same moment in this process are committed
//! together, so that N concurrent commits cost about one part write and one manifest commit per
//! table instead of N (the writer locks and fsyncs that would otherwise serialise them).
//!
//! A committer queues its writes with what to do with its outcome ([`Completion`]). The first
//! committer that finds no batch running for its data directory becomes the leader: it takes
//! every queued commit of the directory, runs [`super::commit_batch`] and hands each its
//! outcome, and goes on with the commits queued meanwhile until none is left. The others do not
//! wait on a thread of their own: a server's transaction awaits its outcome as a task, so a
//! commit costs no blocking thread and no thread switch unless it leads.
//!
//! A transaction's outcome is exactly what committing it alone would give, except that a
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
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use super::{CommitSummary, TableWrite, commit_batch};
use crate::error::EngineError;
use crate::table::DataDir;

/// Told the outcome of a queued commit, on the leader's thread (it must not block).
pub type Completion = Box<dyn FnOnce(Result<CommitSummary, EngineError>) + Send>;

struct Queued {
    data_dir: DataDir,
    writes: BTreeMap<String, TableWrite>,
    done: Completion,
}

#[derive(Default)]
struct State {
    queue: Vec<Queued>,
    /// Data directories with a leader (one batch per directory at a time).
    running: Vec<PathBuf>,
    /// Per data directory: the [`OpenWriter`]s alive (transactions with changes buffered that
    /// have not been queued to commit).
    open_writers: HashMap<PathBuf, usize>,
    /// Leaders waiting for open writers (on [`Group::arrived`]).
    waiting_leaders: usize,
}

impl State {
    fn queued_for(&self, root: &PathBuf) -> usize {
        self.queue
            .iter()
            .filter(|q| q.data_dir.root() == root)
            .count()
    }

    /// Whether the leader of `root`'s next batch should wait for more commits: some writer of
    /// `root` is still open, and the batch is not full.
    fn expects_more(&self, root: &PathBuf) -> bool {
        self.open_writers.get(root).is_some_and(|open| *open > 0)
            && self.queued_for(root) < MAX_BATCH
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

/// The duty of committing a data directory's queued batches, handed to the committer that
/// found no batch running: [`Leader::run`] it on a thread with a deep stack (commits shred
/// documents). Dropped without running, it runs where it is dropped, so that the commits it
/// owes are never stranded.
#[must_use = "the queued commits wait until the leader runs"]
pub struct Leader {
    data_dir: Option<DataDir>,
}

impl Leader {
    /// Commits the directory's queued batches until none is left, then stops leading.
    pub fn run(mut self) {
        if let Some(data_dir) = self.data_dir.take() {
            lead(&data_dir);
        }
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        if let Some(data_dir) = self.data_dir.take() {
            lead(&data_dir);
        }
    }
}

/// Queues `writes` (non-empty) to be committed with whatever else commits now (see the module
/// docs), `done` told the outcome; `writer`, when the transaction announced itself, stops being
/// open. Returns the [`Leader`] when no batch of the directory is running.
pub(super) fn enqueue(
    data_dir: &DataDir,
    writes: BTreeMap<String, TableWrite>,
    writer: Option<OpenWriter>,
    done: Completion,
) -> Option<Leader> {
    let group = group();
    let mut state = group.lock();
    if let Some(mut writer) = writer {
        writer.leave(&mut state);
    }
    state.queue.push(Queued {
        data_dir: data_dir.clone(),
        writes,
        done,
    });
    if state.waiting_leaders > 0 {
        group.arrived.notify_all();
    }
    let root = data_dir.root();
    if state.running.iter().any(|r| r == root) {
        return None;
    }
    state.running.push(root.to_owned());
    Some(Leader {
        data_dir: Some(data_dir.clone()),
    })
}

/// Queues `writes` and waits for their outcome on this thread, leading when it must.
pub(super) fn submit(
    data_dir: &DataDir,
    writes: BTreeMap<String, TableWrite>,
    writer: Option<OpenWriter>,
) -> Result<CommitSummary, EngineError> {
    type Slot = (Mutex<Option<Result<CommitSummary, EngineError>>>, Condvar);
    let slot: Arc<Slot> = Arc::default();
    let filled = slot.clone();
    let done: Completion = Box::new(move |outcome| {
        *filled.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(outcome);
        filled.1.notify_all();
    });
    if let Some(leader) = enqueue(data_dir, writes, writer, done) {
        leader.run();
    }
    let mut outcome = slot.0.lock().unwrap_or_else(PoisonError::into_inner);
    loop {
        if let Some(outcome) = outcome.take() {
            return outcome;
        }
        outcome = slot.1.wait(outcome).unwrap_or_else(PoisonError::into_inner);
    }
}

/// Commits `data_dir`'s queued batches until none is left: for each, waits a moment for the
/// open writers' commits, then takes every commit queued for the directory.
fn lead(data_dir: &DataDir) {
    let root = data_dir.root().to_owned();
    let group = group();
    loop {
        let mut state = group.lock();
        if state.queued_for(&root) == 0 {
            state.running.retain(|r| *r != root);
            return;
        }
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
        let (writes, dones): (Vec<BTreeMap<String, TableWrite>>, Vec<Completion>) =
            batch.into_iter().map(|q| (q.writes, q.done)).unzip();
        // A panic here would strand the committers: it is turned into each one's error.
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
        let mut outcomes = outcomes.into_iter();
        for done in dones {
            done(outcomes.next().unwrap_or_else(|| {
                Err(EngineError::Invalid(
                    "a batch commit gave fewer outcomes than it had transactions".into(),
                ))
            }));
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::thread::JoinHandle;

    use super::*;
    use crate::transaction::tests::{keyed_table, upsert};
    use crate::transaction::{commit_announced, queue_commit};

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
    fn queued_commits_are_told_their_outcomes_by_the_one_leader() {
        let _delay = Delay::set(Duration::ZERO);
        let dir = tempfile::tempdir().unwrap();
        let data_dir = DataDir::new(dir.path());
        keyed_table(&data_dir, "a", &[r#"{"id":1,"v":0}"#, r#"{"id":2,"v":0}"#]);
        let before = data_dir.manifest("a").unwrap().version;
        let (told, outcomes) = std::sync::mpsc::channel();
        let done = |n: u32| -> Completion {
            let told = told.clone();
            Box::new(move |outcome| told.send((n, outcome)).unwrap())
        };
        let queue = |n: u32, id: i64, document: &str| {
            queue_commit(
                &data_dir,
                &upsert(&data_dir, "a", id, document),
                None,
                done(n),
            )
        };
        let leader = queue(1, 1, r#"{"id":1,"v":1}"#).expect("the first committer leads");
        let second = queue(2, 2, r#"{"id":2,"v":2}"#);
        assert!(second.is_none(), "a leader is already there");
        assert!(
            outcomes.try_recv().is_err(),
            "nothing commits before the leader runs"
        );
        run_on_thread(leader);
        let mut told: Vec<(u32, u64)> = outcomes
            .try_iter()
            .map(|(n, outcome)| (n, outcome.unwrap().written))
            .collect();
        told.sort();
        assert_eq!(told, [(1, 1), (2, 1)]);
        assert_eq!(
            data_dir.manifest("a").unwrap().version,
            before + 1,
            "one batch"
        );

        // Once the leader found nothing more to commit, the next committer leads.
        let leader = queue(3, 1, r#"{"id":1,"v":3}"#).expect("nobody leads any more");
        run_on_thread(leader);
        assert_eq!(outcomes.try_recv().unwrap().1.unwrap().written, 1);
        // A commit of nothing is told at once, and leads nothing.
        let nothing = queue_commit(&data_dir, &BTreeMap::new(), None, done(4));
        assert!(nothing.is_none());
        assert_eq!(outcomes.try_recv().unwrap().1.unwrap().written, 0);
    }

    /// Runs a leader on a thread with a deep stack, as commits need.
    fn run_on_thread(leader: Leader) {
        std::thread::Builder::new()
            .stack_size(strata_json::DEEP_STACK_BYTES)
            .spawn(move || leader.run())
            .unwrap()
            .join()
            .unwrap();
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
