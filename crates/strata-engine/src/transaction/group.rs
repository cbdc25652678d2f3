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

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, PoisonError};

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
}

#[derive(Default)]
struct Group {
    state: Mutex<State>,
    changed: Condvar,
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

/// Commits `writes` (non-empty) with whatever else is committing now (see the module docs).
pub(super) fn submit(
    data_dir: &DataDir,
    writes: BTreeMap<String, TableWrite>,
) -> Result<CommitSummary, EngineError> {
    let group = group();
    let mut state = group.lock();
    let id = state.next_id;
    state.next_id += 1;
    state.queue.push(Queued {
        id,
        data_dir: data_dir.clone(),
        writes,
    });
    let root = data_dir.root().to_owned();
    loop {
        if let Some(outcome) = state.outcomes.remove(&id) {
            return outcome;
        }
        if !state.running.contains(&root) && state.queue.iter().any(|q| q.id == id) {
            // Lead a batch of every commit queued for this directory.
            let (batch, rest): (Vec<Queued>, Vec<Queued>) = std::mem::take(&mut state.queue)
                .into_iter()
                .partition(|q| q.data_dir.root() == root);
            state.queue = rest;
            state.running.push(root.clone());
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
