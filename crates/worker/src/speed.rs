//! The model alone on its device (`segpredict speed`): one synthetic batch
//! uploaded once, then run back to back (queued ahead, unless the model
//! itself waits on the device, as digits-seed's `.item()` sync does); no
//! reading, bucketing, uploads or writing. It is the ceiling a run at that
//! shape can approach, measured through the same loader and backend as the
//! run (TorchScript or an AOTInductor package), so a run's fraction of it
//! says what the pipeline around the model costs.

use std::time::Instant;

use super::alloc::{DeviceEvent, DeviceStream};
use super::calibrate::{synthetic_batch, synthetic_batch_of_rows};
use super::{Worker, WorkerError};
use segpredict_core::message::ModelSpeed;

/// Untimed batches first: kernel selection and the allocator's first
/// reservations are start-up, not speed.
const WARM_BATCHES: usize = 5;

/// Ragged values a row in a batch of `--rows` rows, as in calibration's batches.
const RAGGED_PER_ROW: usize = 2;

impl Worker {
    /// Runs `batches` batches of `segments` segments in `rows` rows (by
    /// default calibration's rows of the median size) after a warm-up, and
    /// returns the rate and the per-batch device time. The segments are
    /// `data`'s bytes, repeated as needed, when given (real inputs: on the
    /// H200 the seed's model took 1.8% longer on the benchmark's digits than
    /// on the byte pattern used otherwise). With `streams` > 1 (CUDA only)
    /// the batches take turns over that many streams of the device's pool,
    /// so one batch's last kernels can overlap the next one's first: the
    /// ceiling's best case, the rate `model_ceiling.py --streams 2` measures
    /// (outputs are dropped, so two batches sharing a model instance at once
    /// changes no work done).
    pub fn speed_alone(
        &self,
        segments: usize,
        rows: Option<usize>,
        batches: usize,
        data: Option<&[u8]>,
        streams: usize,
    ) -> Result<ModelSpeed, WorkerError> {
        let _no_grad = tch::no_grad_guard();
        let _inference = super::alloc::InferenceModeGuard::enter();
        let failed = |source| WorkerError::Speed { segments, source };
        let mut batch = match rows {
            Some(rows) => synthetic_batch_of_rows(&self.inputs, segments, rows, RAGGED_PER_ROW),
            None => synthetic_batch(&self.inputs, segments),
        };
        if let Some(data) = data.filter(|d| !d.is_empty()) {
            fill_cyclically(&mut batch.segments, data);
        }
        let inputs = self.model.inputs(&batch).map_err(failed)?;
        // The inputs were uploaded on the thread's stream: done before others read them.
        self.mark()?.wait()?;
        let lanes = Lanes::new(self.cuda_index(), streams)?;
        // Every lane gets untimed batches: a stream's first batch reserves
        // the allocator's blocks for that stream.
        for i in 0..WARM_BATCHES.max(lanes.count()) {
            lanes.enter(i)?;
            self.model.forward_alone(&inputs).map_err(failed)?;
        }
        let mut marks = self.marks_on_idle_lanes(&lanes)?;
        let started = Instant::now();
        for i in 0..batches {
            let lane = lanes.enter(i)?;
            self.model.forward_alone(&inputs).map_err(failed)?;
            marks[lane].push(self.mark()?);
        }
        for lane in &marks {
            lane.last().map(Mark::wait).transpose()?;
        }
        let seconds = started.elapsed().as_secs_f64();
        let per_batch = batch_ms_sorted(&marks)?;
        Ok(ModelSpeed {
            segments,
            rows: batch.rows.len(),
            batches,
            streams: lanes.count(),
            seconds,
            segments_per_s: (segments * batches) as f64 / seconds,
            batch_ms_median: nearest_rank(&per_batch, 0.5),
            batch_ms_p90: nearest_rank(&per_batch, 0.9),
        })
    }

    /// Waits until every lane has run what was queued on it (the warm-up),
    /// then starts each lane's marks with one recorded on it.
    fn marks_on_idle_lanes(&self, lanes: &Lanes) -> Result<Vec<Vec<Mark>>, WorkerError> {
        let mut marks = Vec::with_capacity(lanes.count());
        for lane in 0..lanes.count() {
            lanes.enter(lane)?;
            self.mark()?.wait()?;
        }
        for lane in 0..lanes.count() {
            lanes.enter(lane)?;
            marks.push(vec![self.mark()?]);
        }
        Ok(marks)
    }

    /// A point in time: a device event on CUDA (each batch's own device
    /// time), the host clock on CPU (where a forward pass has run when it
    /// returns).
    fn mark(&self) -> Result<Mark, WorkerError> {
        Ok(match self.cuda_index() {
            Some(index) => match DeviceEvent::record(index)? {
                Some(event) => Mark::Device(event),
                None => Mark::Host(Instant::now()),
            },
            None => Mark::Host(Instant::now()),
        })
    }
}

/// Milliseconds between consecutive marks of each lane, sorted: a batch's
/// device time on one stream; with more, the time between a stream's
/// batches, the other streams' batches running in between.
fn batch_ms_sorted(marks: &[Vec<Mark>]) -> Result<Vec<f64>, WorkerError> {
    let mut per_batch = marks
        .iter()
        .flat_map(|lane| lane.windows(2))
        .map(|pair| pair[0].ms_until(&pair[1]))
        .collect::<Result<Vec<f64>, _>>()?;
    per_batch.sort_by(f64::total_cmp);
    Ok(per_batch)
}

/// The streams the batches take turns on. One lane, the thread's current
/// stream left as it is, by default; more are streams from the device's
/// pool, and the thread's current stream is put back when this is dropped.
struct Lanes {
    pool: Vec<DeviceStream>,
    previous: Option<DeviceStream>,
}

impl Lanes {
    fn new(cuda_index: Option<usize>, streams: usize) -> Result<Self, WorkerError> {
        if streams <= 1 {
            return Ok(Self {
                pool: Vec::new(),
                previous: None,
            });
        }
        let no_cuda = || WorkerError::StreamsNeedCuda(streams);
        let index = cuda_index.ok_or_else(no_cuda)?;
        let previous = DeviceStream::current(index)?.ok_or_else(no_cuda)?;
        let pool = (0..streams)
            .map(|_| DeviceStream::from_pool(index)?.ok_or_else(no_cuda))
            .collect::<Result<Vec<_>, WorkerError>>()?;
        Ok(Self {
            pool,
            previous: Some(previous),
        })
    }

    fn count(&self) -> usize {
        self.pool.len().max(1)
    }

    /// Makes the `i`th batch's lane current; returns the lane's number.
    fn enter(&self, i: usize) -> Result<usize, WorkerError> {
        let lane = i % self.count();
        if let Some(stream) = self.pool.get(lane) {
            stream.make_current()?;
        }
        Ok(lane)
    }
}

impl Drop for Lanes {
    /// Waits for every lane (a failed batch may leave others queued, still
    /// reading the inputs, which are freed on the thread's stream next),
    /// then puts the thread's stream back.
    fn drop(&mut self) {
        let Some(previous) = &self.previous else {
            return;
        };
        for stream in &self.pool {
            if let Err(error) = stream.synchronize() {
                tracing::warn!(%error, "could not wait for a CUDA stream of `speed`");
            }
        }
        if let Err(error) = previous.make_current() {
            tracing::warn!(%error, "could not restore the worker's CUDA stream");
        }
    }
}

/// Overwrites `out` with `data` repeated; `data` must not be empty.
fn fill_cyclically(out: &mut [u8], data: &[u8]) {
    for (slot, value) in out.iter_mut().zip(data.iter().cycle()) {
        *slot = *value;
    }
}

/// The `q` quantile of sorted values by nearest rank; NaN when empty.
fn nearest_rank(sorted: &[f64], q: f64) -> f64 {
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted
        .get(rank.saturating_sub(1))
        .copied()
        .unwrap_or(f64::NAN)
}

enum Mark {
    Device(DeviceEvent),
    Host(Instant),
}

impl Mark {
    /// Until the device has passed this mark (at once on the host clock).
    fn wait(&self) -> Result<(), WorkerError> {
        if let Mark::Device(event) = self {
            event.synchronize()?;
        }
        Ok(())
    }

    fn ms_until(&self, later: &Mark) -> Result<f64, WorkerError> {
        Ok(match (self, later) {
            (Mark::Device(a), Mark::Device(b)) => a.elapsed_ms(b)?,
            (Mark::Host(a), Mark::Host(b)) => (*b - *a).as_secs_f64() * 1e3,
            // One run records one kind of mark.
            _ => f64::NAN,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::{batch_ms_sorted, fill_cyclically, nearest_rank, Mark};

    #[test]
    fn each_lane_times_its_own_batches() {
        let at = |ms: u64| Mark::Host(Instant::now() + Duration::from_millis(ms));
        // Two lanes, five batches: three on the first, two on the second,
        // each lane's marks starting with the one taken before its first.
        let marks = vec![
            vec![at(0), at(20), at(40), at(60)],
            vec![at(0), at(30), at(50)],
        ];
        let ms = batch_ms_sorted(&marks).unwrap();
        assert_eq!(ms.len(), 5);
        let rounded: Vec<u64> = ms.iter().map(|m| m.round() as u64).collect();
        assert_eq!(rounded, [20, 20, 20, 20, 30]);
    }

    #[test]
    fn data_is_repeated_to_fill_the_batch() {
        let mut out = [0u8; 7];
        fill_cyclically(&mut out, &[1, 2, 3]);
        assert_eq!(out, [1, 2, 3, 1, 2, 3, 1]);
    }

    #[test]
    fn quantiles_by_nearest_rank() {
        let ms: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(nearest_rank(&ms, 0.5), 5.0);
        assert_eq!(nearest_rank(&ms, 0.9), 9.0);
        assert!(nearest_rank(&[], 0.5).is_nan());
    }
}
