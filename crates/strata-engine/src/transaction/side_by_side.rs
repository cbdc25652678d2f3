//! Running the per-table work of one commit batch side by side.
//!
//! A batch that changes several tables writes a part, a key file and deletion vectors for each,
//! and the tables share nothing while they are written (each under its own writer lock, into its
//! own directory). Written one after another, a batch of the booking benchmark's three tables
//! kept one core busy while the clients it answers, and the other core, waited (ADR 0017,
//! "Tables of a batch are staged side by side"). The first table runs on the calling thread, the
//! others on a small pool of threads kept for this; the results come back in the order given.
//!
//! The pool's idle threads sleep on a condition variable at once. A rayon pool did the work
//! before, but its idle threads yield in a loop for a while before they sleep, and after every
//! batch that was about 3 % of a busy two-core server's CPU, taken from the statements.
//!
//! Invariants: a job runs wholly on one thread, so that what a job keeps per thread (the
//! deferred durability scope of `strata_format::durability`) sees all of its writes; a job that
//! panics panics the caller of [`map`] (as if it had run there), and its pool thread lives on.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError, mpsc};

type Job = Box<dyn FnOnce() + Send>;

/// The threads that run a batch's other tables, and the jobs waiting for one.
struct Pool {
    waiting: Mutex<VecDeque<Job>>,
    arrived: Condvar,
}

impl Pool {
    fn submit(&self, job: Job) {
        self.waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push_back(job);
        self.arrived.notify_one();
    }

    fn work(&self) {
        loop {
            let job = {
                let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
                loop {
                    match waiting.pop_front() {
                        Some(job) => break job,
                        None => {
                            waiting = self
                                .arrived
                                .wait(waiting)
                                .unwrap_or_else(PoisonError::into_inner)
                        }
                    }
                }
            };
            job();
        }
    }
}

/// As many threads as the machine has cores (the calling thread takes one table itself), each
/// with a stack deep enough to shred any document; None when no thread could be started.
fn pool() -> Option<&'static Pool> {
    static POOL: OnceLock<Option<&'static Pool>> = OnceLock::new();
    *POOL.get_or_init(|| {
        let pool: &'static Pool = Box::leak(Box::new(Pool {
            waiting: Mutex::new(VecDeque::new()),
            arrived: Condvar::new(),
        }));
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
        let mut started = 0;
        for i in 0..threads {
            let spawned = std::thread::Builder::new()
                .name(format!("strata-stage-{i}"))
                .stack_size(strata_json::DEEP_STACK_BYTES)
                .spawn(move || {
                    strata_json::mark_deep_stack();
                    pool.work();
                });
            started += usize::from(spawned.is_ok());
        }
        // Without threads the tables are written one after another.
        (started > 0).then_some(pool)
    })
}

/// `run` applied to every job, the first on this thread and the others on the pool when there
/// are several; the outputs in the order of `jobs`.
pub(super) fn map<J, R, F>(jobs: Vec<J>, run: F) -> Vec<R>
where
    J: Send + 'static,
    R: Send + 'static,
    F: Fn(J) -> R + Send + Sync + 'static,
{
    let pool = match pool() {
        Some(pool) if jobs.len() > 1 => pool,
        _ => return jobs.into_iter().map(run).collect(),
    };
    let run = Arc::new(run);
    let mut jobs = jobs.into_iter();
    let first = jobs.next();
    let (sender, outputs) = mpsc::channel();
    let mut others = 0;
    for (index, job) in jobs.enumerate() {
        let (run, sender) = (run.clone(), sender.clone());
        pool.submit(Box::new(move || {
            let output = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(job)));
            // The caller waits for every job; should it be gone, nobody needs the output.
            let _ = sender.send((index + 1, output));
        }));
        others += 1;
    }
    drop(sender);
    let mut ordered: Vec<Option<R>> = (0..=others).map(|_| None).collect();
    if let (Some(slot), Some(job)) = (ordered.first_mut(), first) {
        *slot = Some(run(job));
    }
    for (index, output) in outputs.iter().take(others) {
        match output {
            Ok(output) => ordered[index] = Some(output),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
    ordered.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn every_job_runs_once_and_outputs_keep_the_order_of_the_jobs() {
        let threads = Arc::new(Mutex::new(HashSet::new()));
        let seen = threads.clone();
        let outputs = map((0..9u64).collect(), move |job| {
            seen.lock().unwrap().insert(std::thread::current().id());
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
    fn a_job_that_panics_panics_the_caller_and_the_pool_goes_on() {
        let panicked = std::panic::catch_unwind(|| {
            map(vec![0, 1, 2], |job: u32| {
                assert!(job != 2, "job {job} fails");
                job
            })
        });
        assert!(panicked.is_err());
        let outputs = map((0..6u32).collect(), |job| job + 1);
        assert_eq!(outputs, [1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn pool_threads_have_a_deep_stack_marked() {
        let on_pool = map((0..8).collect(), |_: i32| {
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
