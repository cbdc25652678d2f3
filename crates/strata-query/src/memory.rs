//! The session's memory pool: DataFusion's `FairSpillPool`, except that `RepartitionExec`'s
//! buffered batches are always granted (counted in the pool's total; every other spilling
//! consumer keeps its fair share, as before, and spills at it).
//!
//! Why: in DataFusion 55, a `RepartitionExec` refused memory writes its batches to a spill pool,
//! and when two input partitions spill at once its reader can wait forever on the older file
//! while the batch it needs is in the newer one — every worker parks and the query neither ends
//! nor fails (apache/datafusion#24883, fixed by #24891 in a later release). Strata's memory-limit
//! test hit it about once in 30 runs of `GROUP BY g, count(DISTINCT user)` under 64 MiB. Granting
//! the repartition's reservations keeps it off that path; what it holds is the batches in flight
//! between two operators, which the consumers downstream drain (they spill instead). Remove this
//! wrapper when the release that carries the fix is taken.

use std::fmt;
use std::sync::Arc;

use datafusion::common::Result;
use datafusion::execution::memory_pool::{
    FairSpillPool, MemoryLimit, MemoryPool, MemoryReservation,
};

/// Consumer names (as DataFusion registers them) that are granted without a limit.
const ALWAYS_GRANTED: &str = "RepartitionExec[";

#[derive(Debug)]
pub struct StrataMemoryPool {
    inner: Arc<FairSpillPool>,
}

impl StrataMemoryPool {
    pub fn new(limit: usize) -> Self {
        StrataMemoryPool {
            inner: Arc::new(FairSpillPool::new(limit)),
        }
    }
}

impl fmt::Display for StrataMemoryPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "strata({})", self.inner)
    }
}

impl MemoryPool for StrataMemoryPool {
    fn name(&self) -> &str {
        "strata"
    }

    fn register(&self, consumer: &datafusion::execution::memory_pool::MemoryConsumer) {
        self.inner.register(consumer);
    }

    fn unregister(&self, consumer: &datafusion::execution::memory_pool::MemoryConsumer) {
        self.inner.unregister(consumer);
    }

    fn grow(&self, reservation: &MemoryReservation, additional: usize) {
        self.inner.grow(reservation, additional);
    }

    fn shrink(&self, reservation: &MemoryReservation, shrink: usize) {
        self.inner.shrink(reservation, shrink);
    }

    fn try_grow(&self, reservation: &MemoryReservation, additional: usize) -> Result<()> {
        if reservation.consumer().name().starts_with(ALWAYS_GRANTED) {
            self.inner.grow(reservation, additional);
            return Ok(());
        }
        self.inner.try_grow(reservation, additional)
    }

    fn reserved(&self) -> usize {
        self.inner.reserved()
    }

    fn memory_limit(&self) -> MemoryLimit {
        self.inner.memory_limit()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::execution::memory_pool::MemoryConsumer;

    #[test]
    fn only_repartition_buffers_pass_the_limit() {
        let pool: Arc<dyn MemoryPool> = Arc::new(StrataMemoryPool::new(1000));
        let repartition = MemoryConsumer::new("RepartitionExec[0]")
            .with_can_spill(true)
            .register(&pool);
        repartition.try_grow(5000).unwrap();
        assert_eq!(pool.reserved(), 5000);
        let aggregate = MemoryConsumer::new("GroupedHashAggregateStream[0]")
            .with_can_spill(true)
            .register(&pool);
        // Its fair share is half the pool, as without the repartition's grant.
        assert!(aggregate.try_grow(600).is_err());
        aggregate.try_grow(400).unwrap();
        assert_eq!(pool.reserved(), 5400);
    }
}
