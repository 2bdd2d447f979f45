//! One run of the worker over the batch channel ([`Worker::run`]): one
//! batch kept in flight, and the recovery path for a batch that fails.
//!
//! Every function of a run reaches the same four things (the worker, the
//! writers' channel, the segment budget and the report), so they are one
//! context, [`Run`]. A failed batch is split in halves until each half runs
//! or one row is left; what happens to that row depends only on why the
//! batch failed ([`Cause`]).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use crossbeam_channel::Sender;

use super::model::Launched;
use super::split::{reject_rows, split_in_half, unpadded, Split};
use super::{alloc, TorchError, Worker, WorkerError};
use segpredict_core::message::{
    Batch, BatchRecord, MemoryStats, Predictions, RejectKind, WorkerReport, WriterMsg,
};

/// A batch queued on the device whose answers have not been collected.
pub(super) struct InFlight {
    batch: Batch,
    launched: Launched,
    split_depth: u32,
    started: Instant,
    launch_ms: f64,
    memory: Option<MemoryStats>,
}

pub(super) enum Launch {
    Queued(InFlight),
    /// Not queued: over the package's bound, or the model failed while
    /// queueing (an out-of-memory shows here).
    Failed(Batch, Failure),
}

/// Why a batch did not run.
pub(super) enum Failure {
    /// More padded segments than the model's package takes: never given to
    /// `forward` (its kernels' indices would overflow).
    OverTheBound(usize),
    /// The model failed on it.
    Model(TorchError),
}

/// A failure the run recovers from, by splitting the batch in halves; it
/// decides what happens to a lone row that still fails.
enum Cause {
    OverTheBound(usize),
    OutOfMemory(TorchError),
    /// A model error that a row may cause: the row(s) that fail alone are
    /// rejected with the model's own message, the rest is predicted.
    RowError(TorchError),
}

/// The worker's run: what every step of it reads and updates.
pub(super) struct Run<'a> {
    pub worker: &'a Worker,
    pub out: &'a Sender<WriterMsg>,
    /// Lowered after an out-of-memory; the bucketing stage reads it.
    pub budget: &'a AtomicUsize,
    pub report: WorkerReport,
}

impl Run<'_> {
    /// Queues one batch on the device, unless it is over the model's bound.
    /// Memory statistics are read right after: allocations happen when
    /// operations are queued, so the window between the peak reset and the
    /// read covers this batch's.
    pub fn launch(&mut self, batch: Batch, split_depth: u32) -> Result<Launch, WorkerError> {
        if let Some(limit) = self.worker.max_segments() {
            if batch.padded_segments > limit {
                return Ok(Launch::Failed(batch, Failure::OverTheBound(limit)));
            }
        }
        let started = Instant::now();
        self.worker.reset_peaks()?;
        let launched = self.worker.forward(&batch);
        self.report.busy += started.elapsed();
        Ok(match launched {
            Ok(launched) => Launch::Queued(InFlight {
                memory: self.worker.memory_stats()?,
                launch_ms: started.elapsed().as_secs_f64() * 1e3,
                batch,
                launched,
                split_depth,
                started,
            }),
            Err(error) => Launch::Failed(batch, Failure::Model(error)),
        })
    }

    /// Waits for a queued batch's answers and sends them to the writers;
    /// false when the writers have gone.
    pub fn finish(&mut self, flight: InFlight) -> Result<bool, WorkerError> {
        let waiting = Instant::now();
        let answers = flight.launched.wait();
        self.report.busy += waiting.elapsed();
        let batch = flight.batch;
        let predicted = match answers {
            Ok(predicted) => predicted,
            Err(error) => return self.recover(batch, flight.split_depth, Failure::Model(error)),
        };
        let worker = self.worker;
        let record = BatchRecord {
            seq: batch.seq,
            rows: batch.rows.len(),
            segments: batch.n_segments,
            padded_segments: batch.padded_segments,
            flush_reason: batch.flush_reason,
            queued_at_ms: worker.millis_since_epoch(flight.started),
            launch_ms: flight.launch_ms,
            done_at_ms: worker.millis_since_epoch(Instant::now()),
            wall_ms: flight.started.elapsed().as_secs_f64() * 1e3,
            device_ms: predicted.device_ms,
            split_depth: flight.split_depth,
            memory: flight.memory,
        };
        self.report.batches.add(&record);
        self.report.memory.add(&record);
        self.report.plot.add(&record);
        let predictions = Predictions {
            rows: batch.rows,
            label_ids: predicted.label_ids,
            scores: predicted.scores,
            top: predicted.top,
        };
        // The record goes to disk with the rows, not into memory.
        Ok(self.out.send(WriterMsg::Predictions(predictions)).is_ok()
            && self.out.send(WriterMsg::Batch(record)).is_ok())
    }

    /// Predicts one batch start to finish (the recovery path runs its pieces
    /// one at a time); false when the writers have gone.
    fn run_batch(&mut self, batch: Batch, split_depth: u32) -> Result<bool, WorkerError> {
        match self.launch(batch, split_depth)? {
            Launch::Queued(flight) => self.finish(flight),
            Launch::Failed(batch, failure) => self.recover(batch, split_depth, failure),
        }
    }

    /// A batch over the bound, an out-of-memory (when allowed) or a model
    /// error a row may cause is split in halves and retried; any other model
    /// error ends the run, naming the batch.
    pub fn recover(
        &mut self,
        batch: Batch,
        split_depth: u32,
        failure: Failure,
    ) -> Result<bool, WorkerError> {
        let cause = match failure {
            Failure::OverTheBound(limit) => Cause::OverTheBound(limit),
            Failure::Model(error) if self.worker.oom_recovery && error.is_out_of_memory() => {
                Cause::OutOfMemory(error)
            }
            Failure::Model(error) if error.may_be_the_rows() => Cause::RowError(error),
            Failure::Model(source) => {
                return Err(WorkerError::Forward {
                    seq: batch.seq,
                    rows: batch.rows.len(),
                    segments: batch.n_segments,
                    source,
                })
            }
        };
        self.before_the_retry(&batch, &cause)?;
        match split_in_half(batch) {
            Split::Halves(first, second) => self.run_halves([first, second], split_depth),
            Split::Lone(lone) => self.lone_row(lone, split_depth, cause),
        }
    }

    /// What a cause needs before its halves run: after an out-of-memory
    /// the cache is emptied and the budget lowered.
    fn before_the_retry(&mut self, batch: &Batch, cause: &Cause) -> Result<(), WorkerError> {
        match cause {
            Cause::OverTheBound(_) => {}
            Cause::OutOfMemory(_) => {
                self.report.oom_events += 1;
                alloc::empty_cache()?;
                // Padding is the cheapest thing to give up: a lone row is
                // retried unpadded before it is rejected; a batch is split.
                let retry_size = match batch.rows.len() {
                    1 => batch.n_segments,
                    _ => (batch.n_segments / 2).max(1),
                };
                self.budget.fetch_min(retry_size, Ordering::Relaxed);
                tracing::warn!(
                    seq = batch.seq,
                    rows = batch.rows.len(),
                    segments = batch.n_segments,
                    padded_segments = batch.padded_segments,
                    budget = self.budget.load(Ordering::Relaxed),
                    "out of memory; retrying smaller and lowering the segment budget"
                );
            }
            Cause::RowError(error) => {
                tracing::warn!(seq = batch.seq, rows = batch.rows.len(), %error,
                    "the model failed on a batch; looking for the row(s) that fail alone");
            }
        }
        Ok(())
    }

    /// A row that failed alone: out of memory, it is retried without its
    /// padding first; otherwise it is rejected, saying why.
    fn lone_row(
        &mut self,
        lone: Batch,
        split_depth: u32,
        cause: Cause,
    ) -> Result<bool, WorkerError> {
        let (kind, reason) = match cause {
            Cause::OutOfMemory(_) if lone.padded_segments > lone.n_segments => {
                return self.run_batch(unpadded(lone), split_depth + 1);
            }
            Cause::OutOfMemory(error) => (
                RejectKind::OomSingleRow,
                format!(
                    "out of memory on a row of {} segments alone: {error}",
                    lone.n_segments
                ),
            ),
            Cause::OverTheBound(limit) => (
                RejectKind::TooManySegments,
                format!(
                    "{} segments, more than the {limit} a batch this model takes (its package's segpredict.max_segments, or a size-class bundle's largest class when it has no dynamic model)",
                    lone.n_segments
                ),
            ),
            Cause::RowError(error) => (
                RejectKind::ModelError,
                format!("the model failed on this row: {}", error.cause()),
            ),
        };
        Ok(reject_rows(lone, kind, &reason, self.out))
    }

    /// Runs the two halves of a split batch one after the other.
    fn run_halves(&mut self, halves: [Batch; 2], split_depth: u32) -> Result<bool, WorkerError> {
        for half in halves {
            if !self.run_batch(half, split_depth + 1)? {
                return Ok(false);
            }
        }
        Ok(true)
    }
}
