//! Running the per-table work of one commit batch side by side.
//!
//! A batch that changes several tables writes a part, a key file and deletion vectors for each,
//! and the tables share nothing while they are written (each under its own writer lock, into its
//! own directory). Written one after another, a batch of the booking benchmark's three tables
//! kept one core busy while the clients it answers, and the other core, waited (ADR 0017,
//! "Tables of a batch are staged side by side"). The first table runs on the calling thread, the
//! others on a small pool of threads kept for this; the results come back in the order given.
//!
//! Invariant: a job runs wholly on one thread, so that what a job keeps per thread (the
//! deferred durability scope of `strata_format::durability`) sees all of its writes.

use std::sync::OnceLock;

/// The threads that run a batch's other tables: as many as the machine has cores (the calling
/// thread takes one table itself), each with a stack deep enough to shred any document.
fn pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(std::thread::available_parallelism().map_or(2, |n| n.get()))
            .stack_size(strata_json::DEEP_STACK_BYTES)
            .thread_name(|i| format!("strata-stage-{i}"))
            .start_handler(|_| strata_json::mark_deep_stack())
            .build()
            // Without threads the tables are written one after another, as before.
            .ok()
    })
    .as_ref()
}

/// `run` applied to every job, the first on this thread and the others on the pool when there
/// are several; the outputs in the order of `jobs`.
pub(super) fn map<J, R>(jobs: Vec<J>, run: impl Fn(J) -> R + Sync) -> Vec<R>
where
    J: Send,
    R: Send,
{
    let pool = match pool() {
        Some(pool) if jobs.len() > 1 => pool,
        _ => return jobs.into_iter().map(run).collect(),
    };
    let mut outputs: Vec<Option<R>> = jobs.iter().map(|_| None).collect();
    let mut jobs = jobs.into_iter();
    let run = &run;
    pool.in_place_scope(|scope| {
        let (first_output, other_outputs) = outputs.split_at_mut(1);
        let first_job = jobs.next();
        for (output, job) in other_outputs.iter_mut().zip(jobs) {
            scope.spawn(move |_| *output = Some(run(job)));
        }
        if let (Some(output), Some(job)) = (first_output.first_mut(), first_job) {
            *output = Some(run(job));
        }
    });
    // Every job ran: a panic in one is raised again by the scope before this point.
    outputs.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::collections::HashSet;
    use std::sync::Mutex;

    use super::*;

    #[test]
    fn every_job_runs_once_and_outputs_keep_the_order_of_the_jobs() {
        let threads = Mutex::new(HashSet::new());
        let outputs = map((0..9u64).collect(), |job| {
            threads.lock().unwrap().insert(std::thread::current().id());
            // Long enough that the pool's threads take some of the jobs.
            std::thread::sleep(std::time::Duration::from_millis(20));
            job * 10
        });
        assert_eq!(outputs, (0..9u64).map(|j| j * 10).collect::<Vec<_>>());
        assert!(
            threads.lock().unwrap().len() > 1,
            "the jobs ran on one thread"
        );
    }

    #[test]
    fn a_single_job_runs_on_the_calling_thread() {
        let caller = std::thread::current().id();
        assert_eq!(map(vec![()], |()| std::thread::current().id()), [caller]);
    }

    #[test]
    fn pool_threads_have_a_deep_stack_marked() {
        let on_pool = map((0..8).collect(), |_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            let here = std::thread::current();
            let pooled = here.name().is_some_and(|n| n.starts_with("strata-stage-"));
            // Shredding on a pool thread must not start a thread per document.
            let id = here.id();
            let stayed =
                strata_json::run_with_deep_stack(move || std::thread::current().id() == id);
            pooled.then_some(stayed)
        });
        let pooled: Vec<bool> = on_pool.into_iter().flatten().collect();
        assert!(!pooled.is_empty(), "no job ran on the pool");
        assert!(pooled.iter().all(|stayed| *stayed));
    }
}
