//! The stage threads in one scope: each stage spawned with its channels,
//! all joined, the first error kept.
//!
//! The readers start first, while the model side of start-up (loading,
//! the probe, calibration, warming the size classes) runs on the calling
//! thread: the first row groups are read and decoded by the time the model
//! is ready. Nothing downstream of the readers starts until then, so a
//! model that fails at start-up has predicted, rejected and committed
//! nothing (`pipeline` then undoes the attempt's marker and, for a new
//! run, its manifest); its error is the run's.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::{Scope, ScopedJoinHandle};

use crossbeam_channel::{bounded, Receiver};
use segpredict_core::exit::{Error, Result};

use crate::config::PipelineConfig;
use crate::progress::show_progress;
use segpredict_bucketing::{run_bucketing, BucketingConfig};
use segpredict_checkpoint::checkpoint::Attempt;
use segpredict_core::message::{
    BucketingReport, LiveCounters, ReaderStats, RowChunk, WorkerReport, WriterMsg, WriterReport,
};
use segpredict_reader::{self as reader, ReadPlan, UnitQueue};
use segpredict_report::{RunFacts, StageReports};
use segpredict_worker::Worker;
use segpredict_writers::{self as writer, OutputSchema, WriterConfig};

/// Channel capacities, in messages. Small: they exist to overlap stages, not
/// to store data, and they bound host memory together with `max_held_rows`.
const CHUNKS_PER_READER: usize = 2;
const BATCHES_IN_FLIGHT: usize = 4;
const WRITER_MESSAGES: usize = 8;

/// The model side of start-up, done: the worker, the bucketing settled for
/// its device (and calibrated budget), and what the report knows of it.
pub(super) struct Prepared {
    pub worker: Worker,
    pub bucketing: BucketingConfig,
    /// The segment budget in force at the start (`usize::MAX` for `rows`).
    pub budget: usize,
    pub facts: RunFacts,
}

/// What the stages did, with the run's set-up and the budget in force at
/// the end (`usize::MAX` for the `rows` strategy).
pub(super) struct Ran {
    pub stages: StageReports,
    pub facts: RunFacts,
    pub final_budget: usize,
}

/// What the stages after the readers share, known once the model is ready;
/// it outlives the thread scope so the stage threads may borrow it.
struct Downstream {
    bucketing: BucketingConfig,
    schema: OutputSchema,
}

/// What the stage threads share, borrowed for the thread scope.
#[derive(Clone, Copy)]
struct Shared<'a> {
    config: &'a PipelineConfig,
    budget: &'a AtomicUsize,
    cancel: &'a AtomicBool,
    downstream: &'a Downstream,
    attempt: &'a Attempt,
}

/// Runs the stages; `prepare` (the model side of start-up) runs on this
/// thread while the readers fill their channel.
pub(super) fn run_stages(
    config: &PipelineConfig,
    plan: &ReadPlan,
    prepare: impl FnOnce() -> Result<Prepared>,
    cancel: &AtomicBool,
    attempt: &Attempt,
) -> Result<Ran> {
    let live = Arc::new(LiveCounters::resuming(plan.rows_done()));
    let decode_pool = &config.readers.decode_pool()?;
    let units = &UnitQueue::new(plan);
    let downstream = OnceLock::new();
    let budget = AtomicUsize::new(usize::MAX);
    std::thread::scope(|scope| {
        let (readers, chunks) = spawn_readers(scope, config, plan, decode_pool, units, cancel);
        let prepared = match prepare() {
            Ok(prepared) => prepared,
            Err(error) => {
                // The readers stop at their next chunk; what they read is
                // dropped. A reader's own failure set the cancel flag that
                // may have stopped the start-up: it is the root cause.
                cancel.store(true, Ordering::Relaxed);
                drop(chunks);
                let joined: Vec<_> = readers.into_iter().map(|r| joined(r, cancel)).collect();
                let failed_reader = joined.into_iter().find_map(Result::err);
                return Err(failed_reader.unwrap_or(error));
            }
        };
        // Progress is shown from here: a run that failed to start shows none.
        let live = &live;
        let (stages_done, done) = bounded::<()>(1);
        let total_rows = plan.shard_rows();
        let progress = spawn_progress(scope, total_rows, live, done, cancel);
        let Prepared {
            worker,
            bucketing,
            budget: start_budget,
            facts,
        } = prepared;
        let schema = output_schema(&config.writers, plan, &worker, live);
        let downstream = downstream.get_or_init(|| Downstream { bucketing, schema });
        budget.store(start_budget, Ordering::Relaxed);
        let shared = Shared {
            config,
            budget: &budget,
            cancel,
            downstream,
            attempt,
        };
        let stages = spawn_downstream(scope, shared, readers, chunks, worker).join(cancel);
        drop(stages_done);
        let _ = progress.join();
        Ok(Ran {
            stages: stages?,
            facts,
            final_budget: budget.load(Ordering::Relaxed),
        })
    })
}

/// The progress thread, in the attempt's span like the stages.
fn spawn_progress<'scope>(
    scope: &'scope Scope<'scope, '_>,
    total_rows: u64,
    live: &'scope LiveCounters,
    stages_done: Receiver<()>,
    cancel: &'scope AtomicBool,
) -> ScopedJoinHandle<'scope, ()> {
    let span = tracing::Span::current();
    scope.spawn(move || {
        let _attempt = span.entered();
        show_progress(total_rows, live, &stages_done, cancel)
    })
}

/// The reader threads, and the channel they fill.
fn spawn_readers<'scope>(
    scope: &'scope Scope<'scope, '_>,
    config: &'scope PipelineConfig,
    plan: &'scope ReadPlan,
    decode_pool: &'scope rayon::ThreadPool,
    units: &'scope UnitQueue<'scope>,
    cancel: &'scope AtomicBool,
) -> (Vec<Stage<'scope, ReaderStats>>, Receiver<RowChunk>) {
    let n_readers = config
        .readers
        .effective_threads()
        .min(plan.row_groups().max(1));
    let (chunk_tx, chunk_rx) = bounded(CHUNKS_PER_READER * n_readers);
    let readers = (0..n_readers)
        .map(|idx| {
            let out = chunk_tx.clone();
            let span = tracing::error_span!("reader", reader = idx);
            spawn(scope, cancel, out.clone(), span, move || {
                reader::run_reader(&config.readers, plan, decode_pool, units, out, cancel)
            })
        })
        .collect();
    (readers, chunk_rx)
}

/// What the writers write beside each prediction, from `[writers]` and
/// the input (`segpredict_writers::output_arrow_schema` makes the columns).
fn output_schema(
    writers: &WriterConfig,
    plan: &ReadPlan,
    worker: &Worker,
    live: &Arc<LiveCounters>,
) -> OutputSchema {
    OutputSchema {
        id_kind: plan.id_kind,
        labels: worker.labels(),
        sources: plan.sources.clone(),
        top_k: writers.top_k,
        carried: plan.carried.as_ref().map(|c| c.schema.clone()),
        live: Arc::clone(live),
    }
}

type Stage<'scope, T> = ScopedJoinHandle<'scope, Result<T>>;

/// Runs `stage` on its own thread, inside `span` (made on the spawning
/// thread, so a child of the shard's and attempt's spans: a thread does not
/// inherit its parent's span by itself). Its error cancels the other stages; a
/// stage whose neighbour has gone stops quietly, so the only errors
/// returned are root causes. `keep_open` (a clone of the stage's output
/// channel) is dropped only after the cancel flag is set, so the next stage
/// never sees a clean close from a stage that failed, and never commits as
/// if the input had ended.
fn spawn<'scope, T, E, K>(
    scope: &'scope Scope<'scope, '_>,
    cancel: &'scope AtomicBool,
    keep_open: K,
    span: tracing::Span,
    stage: impl FnOnce() -> Result<T, E> + Send + 'scope,
) -> Stage<'scope, T>
where
    T: Send + 'scope,
    E: Into<Error>,
    K: Send + 'scope,
{
    scope.spawn(move || {
        let _stage = span.entered();
        let result = stage().map_err(|e| {
            cancel.store(true, Ordering::Relaxed);
            e.into()
        });
        drop(keep_open);
        result
    })
}

/// The stages after the readers, joined to them and to each other by
/// bounded channels.
fn spawn_downstream<'scope>(
    scope: &'scope Scope<'scope, '_>,
    shared: Shared<'scope>,
    readers: Vec<Stage<'scope, ReaderStats>>,
    chunks: Receiver<RowChunk>,
    model: Worker,
) -> Running<'scope> {
    let Shared {
        config,
        budget,
        cancel,
        downstream,
        attempt,
        ..
    } = shared;
    let (batch_tx, batch_rx) = bounded(BATCHES_IN_FLIGHT);
    let (write_tx, write_rx) = bounded::<WriterMsg>(WRITER_MESSAGES);
    let segment_bytes = config.readers.columns.segments.segment_bytes();
    let (rejects, open) = (write_tx.clone(), (batch_tx.clone(), write_tx.clone()));
    let span = tracing::error_span!("bucketing");
    let bucketing = spawn(scope, cancel, open, span, move || {
        let (c, s) = (&downstream.bucketing, segment_bytes);
        run_bucketing(c, s, chunks, batch_tx, rejects, budget, cancel)
    });
    let span = tracing::error_span!("worker");
    let worker = spawn(scope, cancel, write_tx.clone(), span, move || {
        model.run(batch_rx, write_tx, budget, cancel)
    });
    let schema = &downstream.schema;
    let writers = (0..config.writers.effective_threads())
        .map(|idx| {
            let messages = write_rx.clone();
            let span = tracing::error_span!("writer", writer = idx);
            spawn(scope, cancel, (), span, move || {
                let (store, layout) = (&*attempt.store, &attempt.layout);
                let log = &attempt.log;
                writer::run_writer(
                    store,
                    layout,
                    log,
                    idx,
                    &config.writers,
                    schema,
                    messages,
                    cancel,
                )
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
        // A bug, not the data's fault (decoder panics on data are caught
        // as bad files); the rerun resumes.
        Err(Error::retryable("a pipeline stage panicked"))
    })
}
