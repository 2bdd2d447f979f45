//! Size classes warmed before the first row (`[model] warm_size_classes`):
//! on CUDA with padded batches a run sees only these shapes, so running
//! each once up front, largest first, leaves the caching allocator holding
//! the run's peak and every shape's kernels chosen. Without it a class that
//! first appears late (an end-of-input flush) grows reserved memory and
//! pays its first-shape cost mid-run.

use std::time::{Duration, Instant};

use super::calibrate::synthetic_batch_of_rows;
use super::{alloc, Worker, WorkerError};

/// Values per row of each ragged extra in a warm-up batch. A real batch
/// with more, at the row cap, may still reserve a little more memory (a
/// growth event the report counts); the benchmark's tags average 3.
const WARM_RAGGED_PER_ROW: usize = 4;

impl Worker {
    /// Runs one synthetic batch of each size class, largest first, each with
    /// as many rows as a batch of that class can hold (`max_rows`, or one
    /// segment a row): besides the activations, which grow with segments,
    /// the per-row tensors grow with rows. That did not remove the H200
    /// benchmark's one growth event (+2 MiB at the first real batch of the
    /// 8,192 class, benches/gpu/RESULTS.md session 3): a real batch's
    /// allocation pattern can still map one more page. Returns the time it
    /// took. An out-of-memory stops the
    /// warm-up, not the run: the run's own recovery lowers the budget at the
    /// batch that needs it.
    pub fn warm_size_classes(
        &self,
        classes: &[usize],
        max_rows: usize,
    ) -> Result<Duration, WorkerError> {
        let _no_grad = tch::no_grad_guard();
        let started = Instant::now();
        for &size in classes.iter().rev() {
            let rows = size.min(max_rows);
            let batch = synthetic_batch_of_rows(&self.inputs, size, rows, WARM_RAGGED_PER_ROW);
            let answered = self.model.launch(&batch).and_then(|l| l.wait());
            match answered {
                Ok(_) => {}
                Err(error) if error.is_out_of_memory() => {
                    tracing::warn!(size, %error, "out of memory warming a size class; the run will lower its budget when it needs to");
                    alloc::empty_cache()?;
                    break;
                }
                Err(source) => {
                    return Err(WorkerError::Warm {
                        segments: size,
                        source,
                    })
                }
            }
        }
        Ok(started.elapsed())
    }
}
