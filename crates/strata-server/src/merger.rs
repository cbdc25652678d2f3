//! Background merges: the server merges parts by itself, so its users never run `optimize`.
//!
//! Policy (ADR 0014), the rules of `strata ingest`'s automatic merge and of `strata optimize`:
//! - after a table commits an ingest, its small parts are merged once one size tier holds
//!   enough of them ([`MergeScope::Tiered`]);
//! - a table that has had no ingest for `merge.idle_secs` gets the full `optimize` merge
//!   ([`MergeScope::All`]) once, until its next ingest.
//!
//! Merges run on one thread of their own with a deep stack (the re-shredding fallback rebuilds
//! documents), one at a time, so they take at most one merge's memory and one core. A merge
//! writes new parts without the table's writer lock (flushes keep committing meanwhile) and
//! swaps them in with one manifest commit under it; running statements keep reading
//! the parts of their snapshot (read leases), so they never see a merge half done.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use strata_engine::{DataDir, MergeOptions, MergeScope, merge_parts};

use crate::config::MergePolicy;
use crate::metrics::Metrics;

enum Event {
    Ingested(String),
    Stop,
}

/// The running merge thread.
pub struct Merger {
    events: Sender<Event>,
    thread: Option<JoinHandle<()>>,
}

/// Tells the merge thread about commits.
#[derive(Clone)]
pub struct MergerHandle {
    events: Sender<Event>,
}

impl MergerHandle {
    pub fn ingested(&self, table: &str) {
        // A stopped merger only means no more merges; the ingest itself is committed.
        let _ = self.events.send(Event::Ingested(table.to_owned()));
    }
}

/// Starts the merge thread at `nice` (see `Limits::background_nice`).
pub fn start(data_dir: DataDir, policy: MergePolicy, nice: i32, metrics: Arc<Metrics>) -> Merger {
    let (events, receiver) = channel();
    let thread = if policy.enabled {
        std::thread::Builder::new()
            .name("strata-merge".into())
            .stack_size(strata_json::DEEP_STACK_BYTES)
            .spawn(move || {
                crate::lower_priority(nice);
                run(&data_dir, &policy, &metrics, &receiver)
            })
            .map_err(|e| {
                eprintln!("strata: background merges are off: cannot start their thread: {e}")
            })
            .ok()
    } else {
        None
    };
    Merger { events, thread }
}

impl Merger {
    pub fn handle(&self) -> MergerHandle {
        MergerHandle {
            events: self.events.clone(),
        }
    }

    /// Waits for a running merge to end; starts no other.
    pub fn stop(mut self) {
        let _ = self.events.send(Event::Stop);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Per table: when it last committed an ingest, and whether its full merge is still owed.
struct TableState {
    last_ingest: Instant,
    small_merge_due: bool,
    full_merge_due: bool,
}

impl TableState {
    fn just_ingested() -> Self {
        TableState {
            last_ingest: Instant::now(),
            small_merge_due: true,
            full_merge_due: true,
        }
    }
}

fn run(data_dir: &DataDir, policy: &MergePolicy, metrics: &Metrics, events: &Receiver<Event>) {
    let interval = Duration::from_secs_f64(policy.interval_secs);
    let idle = Duration::from_secs_f64(policy.idle_secs);
    let mut tables: HashMap<String, TableState> = HashMap::new();
    // Tables that were there before the server started get their full merge when idle too.
    for name in data_dir.table_names().unwrap_or_default() {
        tables.insert(
            name,
            TableState {
                last_ingest: Instant::now(),
                small_merge_due: false,
                full_merge_due: true,
            },
        );
    }
    loop {
        match events.recv_timeout(interval) {
            Ok(Event::Stop) | Err(RecvTimeoutError::Disconnected) => return,
            Ok(Event::Ingested(table)) => {
                tables.insert(table, TableState::just_ingested());
                // Take every queued notice before merging: one merge covers many commits.
                loop {
                    match events.try_recv() {
                        Ok(Event::Ingested(table)) => {
                            tables.insert(table, TableState::just_ingested());
                        }
                        Ok(Event::Stop) => return,
                        Err(_) => break,
                    }
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
        }
        for (table, state) in tables.iter_mut() {
            if state.small_merge_due {
                state.small_merge_due = false;
                merge(data_dir, table, MergeScope::Tiered, metrics);
            }
            if state.full_merge_due && state.last_ingest.elapsed() >= idle {
                state.full_merge_due = false;
                merge(data_dir, table, MergeScope::All, metrics);
            }
            expire(data_dir, table);
        }
        tables.retain(|table, _| data_dir.table_exists(table).unwrap_or(false));
    }
}

/// Drops the table's parts older than its TTL (`strata_engine::retention`).
fn expire(data_dir: &DataDir, table: &str) {
    match strata_engine::drop_expired(data_dir, table, strata_engine::table::unix_now()) {
        Ok(summary) if summary.parts_dropped > 0 => eprintln!(
            "strata: dropped {} parts of {table} ({} documents) older than its ttl",
            summary.parts_dropped, summary.rows_dropped
        ),
        Ok(_) | Err(strata_engine::EngineError::NoSuchTable(_)) => {}
        Err(e) => eprintln!("strata: retention of {table} failed (will retry): {e}"),
    }
}

fn merge(data_dir: &DataDir, table: &str, scope: MergeScope, metrics: &Metrics) {
    let options = MergeOptions {
        scope,
        ..MergeOptions::default()
    };
    match merge_parts(data_dir, table, &options) {
        Ok(summary) if summary.inputs_merged > 0 => {
            metrics.merges.fetch_add(1, Ordering::Relaxed);
            metrics
                .merged_parts
                .fetch_add(summary.inputs_merged as u64, Ordering::Relaxed);
            eprintln!(
                "strata: merged {} parts of {table} into {} ({} parts now)",
                summary.inputs_merged, summary.outputs_written, summary.parts_after
            );
            // A merge's buffers are the server's largest allocations while it ingests; without
            // this their memory stays resident in the merging thread's arena (ADR 0013).
            strata_malloc::release_free_memory();
        }
        Ok(_) => {}
        // A table dropped meanwhile has nothing to merge.
        Err(strata_engine::EngineError::NoSuchTable(_)) => {}
        Err(e) => {
            metrics.merge_failures.fetch_add(1, Ordering::Relaxed);
            eprintln!(
                "strata: background merge of {table} failed (will retry after its next ingest): {e}"
            );
        }
    }
}
