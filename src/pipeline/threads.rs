//! The stage threads in one scope: each stage spawned with its channels,
//! all joined, the first error kept.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{Scope, ScopedJoinHandle};

use anyhow::Result;
use crossbeam_channel::bounded;

use crate::bucketing::run_bucketing;
use crate::config::PipelineConfig;
use crate::message::{
    BucketingReport, LiveCounters, ReaderStats, WorkerReport, WriterMsg, WriterReport,
};
use crate::progress::show_progress;
use crate::reader::{self, ReadPlan, UnitQueue};
use crate::report::StageReports;
use crate::worker::Worker;
use crate::writer::{self, OutputLayout, OutputSchema};

/// Channel capacities, in messages. Small: they exist to overlap stages, not
/// to store data, and they bound host memory together with `max_held_rows`.
const CHUNKS_PER_READER: usize = 2;
const BATCHES_IN_FLIGHT: usize = 4;
const WRITER_MESSAGES: usize = 8;

/// What the stage threads share, borrowed for the thread scope.
struct Shared<'a> {
    config: &'a PipelineConfig,
    plan: &'a ReadPlan,
    budget: &'a AtomicUsize,
    cancel: &'a AtomicBool,
    decode_pool: &'a rayon::ThreadPool,
    units: &'a UnitQueue<'a>,
    schema: &'a OutputSchema,
    layout: &'a OutputLayout,
}

pub(super) fn run_stages(
    config: &PipelineConfig,
    plan: &ReadPlan,
    model: Worker,
    budget: &AtomicUsize,
    cancel: &AtomicBool,
    layout: &OutputLayout,
) -> Result<StageReports> {
    let schema = &OutputSchema {
        id_kind: plan.id_kind,
        labels: model.labels(),
        sources: plan.sources.clone(),
        live: Arc::new(LiveCounters::resuming(plan.rows_done())),
    };
    let decode_pool = &config.readers.decode_pool()?;
    let units = &UnitQueue::new(plan);
    let shared = &Shared {
        config,
        plan,
        budget,
        cancel,
        decode_pool,
        units,
        schema,
        layout,
    };
    // Outside the scope so the progress thread may borrow it.
    let stages_done = &AtomicBool::new(false);
    std::thread::scope(|scope| {
        let live = &schema.live;
        let progress = scope.spawn(|| show_progress(plan.shard_rows(), live, stages_done, cancel));
        let reports = spawn_stages(scope, shared, model).join(cancel);
        stages_done.store(true, Ordering::Relaxed);
        let _ = progress.join();
        reports
    })
}

type Stage<'scope, T> = ScopedJoinHandle<'scope, Result<T>>;

/// Runs `stage` on its own thread. Its error cancels the other stages; a
/// stage whose neighbour has gone stops quietly, so the only errors
/// returned are root causes. `keep_open` (a clone of the stage's output
/// channel) is dropped only after the cancel flag is set, so the next stage
/// never sees a clean close from a stage that failed, and never commits as
/// if the input had ended.
fn spawn<'scope, T, E, K>(
    scope: &'scope Scope<'scope, '_>,
    cancel: &'scope AtomicBool,
    keep_open: K,
    stage: impl FnOnce() -> Result<T, E> + Send + 'scope,
) -> Stage<'scope, T>
where
    T: Send + 'scope,
    E: Into<anyhow::Error>,
    K: Send + 'scope,
{
    scope.spawn(move || {
        let result = stage().map_err(|e| {
            cancel.store(true, Ordering::Relaxed);
            e.into()
        });
        drop(keep_open);
        result
    })
}

/// The stage threads, joined by bounded channels.
fn spawn_stages<'scope>(
    scope: &'scope Scope<'scope, '_>,
    shared: &'scope Shared<'scope>,
    model: Worker,
) -> Running<'scope> {
    let Shared {
        config,
        plan,
        budget,
        cancel,
        decode_pool,
        units,
        schema,
        layout,
    } = *shared;
    let n_readers = config
        .readers
        .effective_threads()
        .min(plan.row_groups().max(1));
    let (chunk_tx, chunk_rx) = bounded(CHUNKS_PER_READER * n_readers);
    let (batch_tx, batch_rx) = bounded(BATCHES_IN_FLIGHT);
    let (write_tx, write_rx) = bounded::<WriterMsg>(WRITER_MESSAGES);
    let readers = (0..n_readers)
        .map(|_| {
            let out = chunk_tx.clone();
            spawn(scope, cancel, out.clone(), move || {
                reader::run_reader(&config.readers, plan, decode_pool, units, out, cancel)
            })
        })
        .collect();
    let segment_bytes = config.readers.columns.segments.segment_bytes();
    let (rejects, open) = (write_tx.clone(), (batch_tx.clone(), write_tx.clone()));
    let bucketing = spawn(scope, cancel, open, move || {
        let (c, s) = (&config.bucketing, segment_bytes);
        run_bucketing(c, s, chunk_rx, batch_tx, rejects, budget, cancel)
    });
    let worker = spawn(scope, cancel, write_tx.clone(), move || {
        model.run(batch_rx, write_tx, budget, cancel)
    });
    let writers = (0..config.writers.effective_threads())
        .map(|idx| {
            let messages = write_rx.clone();
            spawn(scope, cancel, (), move || {
                writer::run_writer(layout, idx, &config.writers, schema, messages, cancel)
            })
        })
        .collect();
    // The senders and receivers left here drop now, so each channel closes
    // when the last stage thread using it ends.
    Running {
        readers,
        bucketing,
        worker,
        writers,
    }
}

/// The running stage threads.
struct Running<'scope> {
    readers: Vec<Stage<'scope, ReaderStats>>,
    bucketing: Stage<'scope, BucketingReport>,
    worker: Stage<'scope, WorkerReport>,
    writers: Vec<Stage<'scope, WriterReport>>,
}

impl Running<'_> {
    /// Joins every stage; the first error in join order wins.
    fn join(self, cancel: &AtomicBool) -> Result<StageReports> {
        // Every thread is joined before any error returns.
        let readers: Vec<_> = self
            .readers
            .into_iter()
            .map(|h| joined(h, cancel))
            .collect();
        let bucketing = joined(self.bucketing, cancel);
        let worker = joined(self.worker, cancel);
        let writers: Vec<_> = self
            .writers
            .into_iter()
            .map(|h| joined(h, cancel))
            .collect();
        Ok(StageReports {
            readers: readers.into_iter().collect::<Result<_>>()?,
            bucketing: bucketing?,
            worker: worker?,
            writers: writers.into_iter().collect::<Result<_>>()?,
        })
    }
}

/// A stage's result; a panic cancels the run and becomes an error.
fn joined<T>(stage: Stage<'_, T>, cancel: &AtomicBool) -> Result<T> {
    stage.join().unwrap_or_else(|_| {
        cancel.store(true, Ordering::Relaxed);
        Err(anyhow::anyhow!("a pipeline stage panicked"))
    })
}
