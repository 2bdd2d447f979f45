//! Size classes warmed before the first row (`[model] warm_size_classes`):
//! on CUDA with padded batches a run sees only these shapes, so running
//! each once up front, largest first, leaves the caching allocator holding
//! the run's peak and every shape's kernels chosen. Without it a class that
//! first appears late (an end-of-input flush) grows reserved memory and
//! pays its first-shape cost mid-run.

use std::time::{Duration, Instant};

use super::calibrate::synthetic_batch;
use super::{alloc, Worker, WorkerError};

impl Worker {
    /// Runs one synthetic batch of each size class, largest first; returns
    /// the time it took. An out-of-memory stops the warm-up, not the run:
    /// the run's own recovery lowers the budget at the batch that needs it.
    pub fn warm_size_classes(&self, classes: &[usize]) -> Result<Duration, WorkerError> {
        let _no_grad = tch::no_grad_guard();
        let started = Instant::now();
        for &size in classes.iter().rev() {
            let batch = synthetic_batch(&self.inputs, size);
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
