//! Size classes warmed before the first row (`[model] warm_size_classes`):
//! on CUDA with padded batches a run sees only these shapes, so running
//! each once up front, largest first, leaves the caching allocator holding
//! the run's peak and every shape's kernels chosen. Without it a class that
//! first appears late (an end-of-input flush) grows reserved memory and
//! pays its first-shape cost mid-run.

use std::time::{Duration, Instant};

use tch::{Device, Kind, Tensor};

use super::calibrate::{synthetic_batch_of_rows, SEGMENTS_PER_ROW};
use super::model::Launched;
use super::{alloc, TorchError, Worker, WorkerError};

/// Values per row of each ragged extra in a warm-up batch. A real batch
/// with more, at the row cap, may still reserve a little more memory (a
/// growth event the report counts); the benchmark's tags average 3.
const WARM_RAGGED_PER_ROW: usize = 4;

impl Worker {
    /// Runs synthetic batches of each size class, largest first (see
    /// [`warm_batches`]): besides the activations, which grow with
    /// segments, the per-row tensors grow with rows. Each batch is queued before the
    /// previous one's answers are collected, as [`Worker::run`] keeps one
    /// batch in flight, so the allocator also sees two batches' inputs and
    /// answers alive at once; then small-pool headroom is mapped (see
    /// [`map_small_pool_headroom`]). Returns the time it took. An out-of-memory
    /// stops the warm-up, not the run: the run's own recovery lowers the
    /// budget at the batch that needs it.
    pub fn warm_size_classes(
        &self,
        classes: &[usize],
        max_rows: usize,
    ) -> Result<Duration, WorkerError> {
        let _no_grad = tch::no_grad_guard();
        let started = Instant::now();
        self.model.set_row_cap(max_rows);
        let mut in_flight: Option<(usize, Launched)> = None;
        for (size, rows) in warm_batches(classes, max_rows) {
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
        if let Some((size, Err(error))) = in_flight.map(|(size, l)| (size, l.wait())) {
            return stop_warming(size, error, started);
        }
        let headroom = map_small_pool_headroom(self.model.device);
        tracing::debug!(bytes = headroom, "mapped small-pool headroom");
        Ok(started.elapsed())
    }
}

/// How far past what the warm-up mapped the small pool is mapped.
const SMALL_POOL_HEADROOM: i64 = 4 << 20;
/// The largest allocation libtorch's caching allocator serves from its
/// small pool.
const SMALL_BLOCK: i64 = 1 << 20;
/// At most this many small blocks are held to map the headroom.
const MAX_SMALL_BLOCKS: usize = 256;
/// Below this much free device memory no headroom is mapped.
const MIN_FREE_FOR_HEADROOM: i64 = 256 << 20;

/// Maps [`SMALL_POOL_HEADROOM`] more of the caching allocator's small pool
/// (allocations up to 1 MiB, mapped 2 MiB at a time) than the warm-up
/// needed, and returns how many bytes it mapped. Small allocations are the
/// per-row tensors of typical batches, and their fragmentation depends on
/// the order batches come in, which no warm-up reproduces: in the H200
/// benchmark the first real batch of the 8,192 class still mapped 2 MiB
/// more after a warm-up at two row counts a class, and with this headroom
/// no run grew (benches/gpu/RESULTS.md, session 4). Freed blocks stay
/// mapped, so the run uses the headroom instead of growing. Headroom is a
/// margin, not a need: without statistics, or with little free device
/// memory (an allocation that fails makes the allocator release what the
/// warm-up mapped), it maps nothing. 0 on CPU.
fn map_small_pool_headroom(device: Device) -> i64 {
    let Device::Cuda(index) = device else {
        return 0;
    };
    let reserved = || match alloc::stats(index) {
        Ok(stats) => stats.map(|s| (s.reserved, s.device_free)),
        Err(error) => {
            tracing::debug!(%error, "no allocator statistics for the small-pool headroom");
            None
        }
    };
    let allocate = || Tensor::f_empty([SMALL_BLOCK], (Kind::Uint8, device)).ok();
    map_headroom(reserved, allocate)
}

/// [`map_small_pool_headroom`]'s loop over its two device calls:
/// `reserved` gives reserved and free device bytes, `allocate` one small
/// block. Blocks are held until it returns.
fn map_headroom<B>(
    mut reserved: impl FnMut() -> Option<(i64, i64)>,
    mut allocate: impl FnMut() -> Option<B>,
) -> i64 {
    let Some((before, free)) = reserved() else {
        return 0;
    };
    if free < MIN_FREE_FOR_HEADROOM {
        return 0;
    }
    let mut held = Vec::new();
    let mut now = before;
    while now < before + SMALL_POOL_HEADROOM && held.len() < MAX_SMALL_BLOCKS {
        let Some(block) = allocate() else { break };
        held.push(block);
        match reserved() {
            Some((bytes, _)) => now = bytes,
            None => break,
        }
    }
    now - before
}

/// The warm-up's batches, `(segments, rows)`, largest class first: each
/// class with as many rows as it can hold (`max_rows`, or one segment a
/// row) and with rows of the median size. Per-row tensors of a full batch
/// are large allocations; those of a typical batch are small ones, which
/// libtorch's caching allocator serves from a pool of its own. Warmed at
/// the row cap alone, the H200 benchmark's first real batch of the 8,192
/// class (716 rows) still mapped 2 MiB more (benches/gpu/RESULTS.md,
/// session 4).
fn warm_batches(classes: &[usize], max_rows: usize) -> Vec<(usize, usize)> {
    let mut batches = Vec::with_capacity(classes.len() * 2);
    for &size in classes.iter().rev() {
        let full = size.min(max_rows).max(1);
        let typical = size.div_ceil(SEGMENTS_PER_ROW).clamp(1, full);
        batches.push((size, full));
        if typical != full {
            batches.push((size, typical));
        }
    }
    batches
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_class_is_warmed_full_and_typical_largest_first() {
        assert_eq!(
            warm_batches(&[1024, 16384], 4096),
            [(16384, 4096), (16384, 911), (1024, 1024), (1024, 57)]
        );
    }

    /// A fake allocator: every `per_page` blocks map one more 2 MiB page.
    fn fake_device(
        per_page: i64,
        free: i64,
    ) -> (
        impl FnMut() -> Option<(i64, i64)>,
        impl FnMut() -> Option<()>,
    ) {
        let blocks = std::rc::Rc::new(std::cell::Cell::new(0i64));
        let counted = blocks.clone();
        let reserved = move || Some(((100 << 20) + (counted.get() / per_page) * (2 << 20), free));
        let allocate = move || {
            blocks.set(blocks.get() + 1);
            Some(())
        };
        (reserved, allocate)
    }

    #[test]
    fn headroom_maps_past_the_warm_up_and_stops() {
        let (reserved, allocate) = fake_device(2, 1 << 40);
        assert_eq!(map_headroom(reserved, allocate), SMALL_POOL_HEADROOM);
    }

    #[test]
    fn headroom_gives_up_after_its_block_cap() {
        // Free space in the pool absorbs every block: nothing new is mapped.
        let (reserved, allocate) = fake_device(i64::MAX, 1 << 40);
        assert_eq!(map_headroom(reserved, allocate), 0);
    }

    #[test]
    fn no_headroom_without_statistics_free_memory_or_allocations() {
        let (_, allocate) = fake_device(1, 1 << 40);
        assert_eq!(map_headroom(|| None, allocate), 0);
        let (reserved, allocate) = fake_device(1, MIN_FREE_FOR_HEADROOM - 1);
        assert_eq!(map_headroom(reserved, allocate), 0);
        let (reserved, _) = fake_device(1, 1 << 40);
        assert_eq!(map_headroom(reserved, || None::<()>), 0);
    }

    #[test]
    fn a_class_whose_typical_batch_is_its_full_one_is_warmed_once() {
        assert_eq!(warm_batches(&[64], 2), [(64, 2)]);
        assert_eq!(warm_batches(&[1], 4096), [(1, 1)]);
    }
}
