//! The bounded queue in front of pipeline runs: `max_running` at once, `max_queued` waiting,
//! and a 429 with Retry-After for anything beyond, so that overload sheds load instead of
//! growing memory and latency without bound.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::{ApiError, Metrics};
use crate::error::ErrorKind;

/// Admission to the pipeline.
pub struct RunGate {
    running: Arc<Semaphore>,
    max_running: usize,
    capacity: usize,
    admitted: AtomicUsize,
    /// Recent run time, milliseconds (a moving average), for Retry-After.
    typical_ms: AtomicU64,
    metrics: Arc<Metrics>,
}

/// A place in the queue; the place is given back when this is dropped.
pub struct Ticket {
    gate: Arc<RunGate>,
    waiting: bool,
}

/// The right to run, held for the whole run (also by a run whose client has gone).
pub struct Slot {
    _permit: OwnedSemaphorePermit,
    ticket: Ticket,
    started: Instant,
}

impl RunGate {
    /// A gate running `max_running` at once with `max_queued` waiting.
    pub fn new(max_running: usize, max_queued: usize, metrics: Arc<Metrics>) -> RunGate {
        RunGate {
            running: Arc::new(Semaphore::new(max_running)),
            max_running,
            capacity: max_running + max_queued,
            admitted: AtomicUsize::new(0),
            typical_ms: AtomicU64::new(10_000),
            metrics,
        }
    }

    /// A place in the queue, or 429 when it is full.
    pub fn admit(self: &Arc<Self>) -> Result<Ticket, ApiError> {
        let before = self.admitted.fetch_add(1, Ordering::SeqCst);
        if before >= self.capacity {
            self.admitted.fetch_sub(1, Ordering::SeqCst);
            self.metrics.rejected.inc();
            // Roughly when a place frees up: the runs ahead of a newcomer, max_running at a time.
            let rounds = (before / self.max_running).max(1) as u64;
            let wait_s = (self.typical_ms.load(Ordering::Relaxed) * rounds).div_ceil(1000).clamp(1, 3600);
            return Err(ApiError {
                kind: ErrorKind::Overloaded,
                message: format!("the appliance is busy ({before} questions running or waiting); try again in {wait_s} s"),
                retry_after: Some(wait_s),
            });
        }
        self.metrics.queued.inc();
        Ok(Ticket { gate: self.clone(), waiting: true })
    }
}

impl Ticket {
    /// Waits for a free slot.
    pub async fn wait(mut self) -> Result<Slot, ApiError> {
        let permit = self.gate.running.clone().acquire_owned().await.map_err(|_| ApiError::internal("the appliance is shutting down"))?;
        self.waiting = false;
        self.gate.metrics.queued.dec();
        self.gate.metrics.running.inc();
        Ok(Slot { _permit: permit, ticket: self, started: Instant::now() })
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.gate.admitted.fetch_sub(1, Ordering::SeqCst);
        if self.waiting {
            self.gate.metrics.queued.dec();
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let gate = &self.ticket.gate;
        let ms = self.started.elapsed().as_millis() as u64;
        let old = gate.typical_ms.load(Ordering::Relaxed);
        gate.typical_ms.store((old * 3 + ms) / 4, Ordering::Relaxed);
        gate.metrics.running.dec();
        gate.metrics.run_seconds.observe(Duration::from_millis(ms).as_secs_f64());
    }
}

impl Drop for RunGate {
    fn drop(&mut self) {
        self.running.close();
    }
}
