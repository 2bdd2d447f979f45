//! Size classes warmed before the first row (`[model] warm_size_classes`):
//! on CUDA with padded batches a run sees only these shapes, so running
//! each once up front, largest first, leaves the caching allocator holding
//! the run's peak and every shape's kernels chosen. Without it a class that
//! first appears late (an end-of-input flush) grows reserved memory and
//! pays its first-shape cost mid-run.

use std::time::{Duration, Instant};

use super::calibrate::synthetic_batch_of_rows;
use super::model::Launched;
use super::{alloc, TorchError, Worker, WorkerError};

/// Values per row of each ragged extra in a warm-up batch. A real batch
/// with more, at the row cap, may still reserve a little more memory (a
/// growth event the report counts); the benchmark's tags average 3.
const WARM_RAGGED_PER_ROW: usize = 4;

impl Worker {
    /// Runs one synthetic batch of each size class, largest first, each with
    /// as many rows as a batch of that class can hold (`max_rows`, or one
    /// segment a row): besides the activations, which grow with segments,
    /// the per-row tensors grow with rows. Each class is queued before the
    /// previous one's answers are collected, as [`Worker::run`] keeps one
    /// batch in flight, so the allocator also sees two batches' inputs and
    /// answers alive at once. Returns the time it took. An out-of-memory
    /// stops the warm-up, not the run: the run's own recovery lowers the
    /// budget at the batch that needs it.
    pub fn warm_size_classes(
        &self,
        classes: &[usize],
        max_rows: usize,
    ) -> Result<Duration, WorkerError> {
        let _no_grad = tch::no_grad_guard();
        let started = Instant::now();
        let mut in_flight: Option<(usize, Launched)> = None;
        for &size in classes.iter().rev() {
            let rows = size.min(max_rows);
            let batch = synthetic_batch_of_rows(&self.inputs, size, rows, WARM_RAGGED_PER_ROW);
            let launched = self.model.launch(&batch);
            let previous = in_flight.take().map(|(size, l)| (size, l.wait()));
            if let Some((size, Err(error))) = previous {
                return stop_warming(size, error, started);
            }
            match launched {
                Ok(launched) => in_flight = Some((size, launched)),
                Err(error) => return stop_warming(size, error, started),
            }
        }
        if let Some((size, launched)) = in_flight {
            if let Err(error) = launched.wait() {
                return stop_warming(size, error, started);
            }
        }
        Ok(started.elapsed())
    }
}

/// Ends the warm-up at a failed class: an out-of-memory is logged and the
/// run goes on (its own recovery lowers the budget), anything else is the
/// run's error.
fn stop_warming(size: usize, error: TorchError, started: Instant) -> Result<Duration, WorkerError> {
    if !error.is_out_of_memory() {
        return Err(WorkerError::Warm {
            segments: size,
            source: error,
        });
    }
    tracing::warn!(size, %error, "out of memory warming a size class; the run will lower its budget when it needs to");
    alloc::empty_cache()?;
    Ok(started.elapsed())
}
