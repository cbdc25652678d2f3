//! CPU priority of background work: the server runs ingest and merges at a lower priority than
//! queries, so that a query under heavy ingest waits for the CPU less (ADR 0014).
//!
//! A thread's nice value is its own on Linux, and threads it starts inherit it. Raising it needs
//! no privilege; lowering it back does, so it is only ever raised. Elsewhere this does nothing.

use std::sync::atomic::{AtomicI32, Ordering};

/// The nice value the ingest parse threads take when they start (0: unchanged).
static PARSE_THREADS_NICE: AtomicI32 = AtomicI32::new(0);

/// Makes the ingest parse pool's threads run at `nice` (0–19) once they start; call before the
/// first ingest. Commands leave it at 0.
pub fn set_parse_threads_nice(nice: i32) {
    PARSE_THREADS_NICE.store(nice, Ordering::Relaxed);
}

pub(crate) fn parse_threads_nice() -> i32 {
    PARSE_THREADS_NICE.load(Ordering::Relaxed)
}

/// Sets the calling thread's nice value (0 leaves it alone).
pub fn lower_current_thread(nice: i32) -> std::io::Result<()> {
    if nice == 0 {
        return Ok(());
    }
    #[cfg(target_os = "linux")]
    {
        rustix::process::setpriority_process(Some(rustix::thread::gettid()), nice)
            .map_err(std::io::Error::from)
    }
    #[cfg(not(target_os = "linux"))]
    {
        Ok(())
    }
}
