//! The messages stages exchange. No stage imports another stage: they share
//! only these types, sent over bounded crossbeam channels.

use crate::stats::{BatchTotals, MemoryTrack, PlotSample};
// What one batch measured lives in `record` (which `stats` sums) and is
// re-exported here, so `stats` and `message` do not import each other.
pub use crate::record::{BatchRecord, FlushReason, MemoryStats};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::Serialize;

/// Anything with a segment count can be bucketed.
pub trait Segmented {
    /// The row's segments: what it costs against the segment budget.
    fn n_segments(&self) -> usize;
    /// Host bytes the row holds while it waits in a bucket (its segments
    /// and carried values), for bucketing's `max_held_bytes`.
    fn held_bytes(&self) -> usize {
        0
    }
}

/// The type of the id column: the readers find it, the writers keep it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdKind {
    /// A string column (utf8, large or view, or a dictionary of them).
    Str,
    /// Any other integer column (signed, or unsigned narrower than 64
    /// bits), kept as `i64`.
    Int,
    /// Unsigned 64-bit ids, kept unsigned: values above `i64::MAX` exist.
    UInt,
}

impl std::fmt::Display for IdKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            IdKind::Str => "a string",
            IdKind::Int => "an integer",
            IdKind::UInt => "an unsigned 64-bit integer",
        })
    }
}

/// Where a row came from: the input file (an index into [`Sources`]) and the
/// row's 0-based index within that file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Origin {
    /// The input file's index in the run's frozen input list.
    pub file_idx: u32,
    /// The row's index within that file, from 0, counting every row of
    /// every row group (skipped ones included).
    pub row_idx: u64,
}

/// One input file as the readers found and planned it: where it is and what
/// it was when the run planned it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputFile {
    /// The file's path, or its object URL for an object store.
    pub path: std::path::PathBuf,
    /// The file's size in bytes when planned.
    pub size_bytes: u64,
    /// Last modification, where the file system keeps it.
    pub modified: Option<std::time::SystemTime>,
    /// Rows in the file, from its Parquet footer.
    pub rows: u64,
    /// Row groups in the file, from its footer: each is one unit of work.
    pub row_groups: usize,
    /// Hex SHA-256 of the file's Parquet footer (metadata, its length and
    /// the magic: the file's last bytes), read when the plan reads the
    /// footer. Content rewritten with size and mtime kept changes it: the
    /// footer holds every column chunk's offsets, sizes and statistics.
    pub footer_sha256: String,
    /// An object's ETag, or its version where the store keeps versions:
    /// what changes when it is rewritten. Empty for a local file.
    pub version: String,
    /// Hive partition keys and values of the folders between the input's
    /// root and the file (`dt=2026-12-05/`), outermost first; a value is
    /// `None` for `__HIVE_DEFAULT_PARTITION__` (null). Part of the path,
    /// so of the identity too.
    pub partitions: Vec<(String, Option<String>)>,
}

impl InputFile {
    /// A file found at `path` and not yet planned: nothing of its footer or
    /// identity known (the plan fills them in when it opens the file).
    pub fn unplanned(path: std::path::PathBuf) -> Self {
        Self {
            path,
            size_bytes: 0,
            modified: None,
            rows: 0,
            row_groups: 0,
            footer_sha256: String::new(),
            version: String::new(),
            partitions: Vec::new(),
        }
    }

    /// The same for the same file, unchanged, in every run: its path, size,
    /// modification time (nanoseconds since the epoch, 0 if unknown) and
    /// footer hash.
    pub fn identity(&self) -> String {
        let modified_ns = self
            .modified
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        format!(
            "{}|{}|{}|{}|{}",
            self.path.display(),
            self.size_bytes,
            modified_ns,
            self.footer_sha256,
            self.version
        )
    }
}

/// The input files of a run, indexed by [`Origin::file_idx`].
pub type Sources = Arc<Vec<InputFile>>;

/// An input file the run left out (`[readers] on_bad_file = "skip"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct SkippedFile {
    /// The file's path or object URL, as listed.
    pub path: std::path::PathBuf,
    /// Why, as one line.
    pub reason: String,
}

/// A row's id as read from the id column; the output keeps its type.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RowId {
    /// From a signed integer id column.
    Int(i64),
    /// From a `uint64` id column.
    UInt(u64),
    /// From a string id column.
    Str(String),
}

impl std::fmt::Display for RowId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RowId::Int(v) => write!(f, "{v}"),
            RowId::UInt(v) => write!(f, "{v}"),
            RowId::Str(s) => f.write_str(s),
        }
    }
}

/// What the output keeps of a row once its inputs are on their way to the model.
#[derive(Debug, Clone, PartialEq)]
pub struct RowMeta {
    /// The row's id, written to the output beside its predictions.
    pub id: RowId,
    /// Where the row was read: what the done set and rejects record.
    pub origin: Origin,
    /// The row's `[writers] carry` columns in Arrow's row format (the
    /// readers encode, the writers decode, both from the plan's carried
    /// schema); empty when nothing is carried.
    pub carried: Box<[u8]>,
}

impl RowMeta {
    /// Row `i` of file 0 with id `i`, nothing carried: a row made up by
    /// the program itself (the calibration's probes), not read.
    pub fn numbered(i: u64) -> Self {
        Self {
            id: RowId::Int(i as i64),
            origin: Origin {
                file_idx: 0,
                row_idx: i,
            },
            carried: Box::default(),
        }
    }
}

/// The element type of a segment as stored in Parquet; the model worker
/// casts on the device, so the host never widens u8 pixels to f32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SegmentDtype {
    /// Unsigned bytes (pixels); `dtype = "u8"`.
    U8,
    /// IEEE half floats; `dtype = "f16"`.
    F16,
    /// IEEE single floats; `dtype = "f32"`.
    F32,
}

impl SegmentDtype {
    /// Bytes of one element: 1, 2 or 4.
    pub fn size_bytes(self) -> usize {
        match self {
            SegmentDtype::U8 => 1,
            SegmentDtype::F16 => 2,
            SegmentDtype::F32 => 4,
        }
    }
}

/// What the model is fed, as the pipeline's columns declare it: the readers
/// produce it, the model worker builds tensors (and calibration batches) by it.
#[derive(Debug, Clone, PartialEq)]
pub struct InputSpec {
    /// The shape of one segment (e.g. `[1, 28, 28]`), without the batch
    /// dimension.
    pub segment_shape: Vec<usize>,
    /// The element type segments are stored and sent in.
    pub segment_dtype: SegmentDtype,
    /// The extra inputs after the segments, in the model's argument order.
    pub extras: Vec<ExtraSpec>,
}

impl InputSpec {
    /// Bytes of one segment: its elements times the dtype's size; a row's
    /// segment bytes are this times its segment count.
    pub fn segment_bytes(&self) -> usize {
        self.segment_shape.iter().product::<usize>() * self.segment_dtype.size_bytes()
    }
}

/// The kind of one extra input, in the model's argument order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtraSpec {
    /// A variable-length list of integers per row ([`ExtraValue::Ragged`]).
    Ragged,
    /// A float vector of the same length in every row.
    Vector {
        /// The vector's length; a row with another length is rejected.
        width: usize,
    },
    /// One float per row.
    Float,
    /// One integer per row.
    Int,
}

/// One extra model input of one row, beside the segments.
#[derive(Debug, Clone, PartialEq)]
pub enum ExtraValue {
    /// A variable-length integer list (tag ids, token ids, ...).
    Ragged(Vec<i64>),
    /// A fixed-length float vector.
    Vector(Vec<f32>),
    /// One float.
    Float(f32),
    /// One integer.
    Int(i64),
}

/// One decoded input row: its segments as raw little-endian bytes in the
/// column's dtype, `n_segments * segment_bytes` long, and its extra inputs in
/// the pipeline's declared order.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// What the output keeps of the row (id, origin, carried values).
    pub meta: RowMeta,
    /// The row's segment count (may be 0).
    pub n_segments: usize,
    /// The segments' bytes, `n_segments * segment_bytes` long.
    pub segments: Box<[u8]>,
    /// One value per [`InputSpec::extras`] entry, in that order.
    pub extras: Vec<ExtraValue>,
}

impl Segmented for Row {
    fn n_segments(&self) -> usize {
        self.n_segments
    }

    fn held_bytes(&self) -> usize {
        self.segments.len() + self.meta.carried.len()
    }
}

/// Why a row was rejected, as the rejects file's (`_rejects/rejects.parquet`) `kind` column names
/// it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RejectKind {
    /// The id is null.
    NullId,
    /// The segments list is null.
    NullSegments,
    /// The segments list is empty.
    NoSegments,
    /// One segment is null or holds a null value.
    NullSegment,
    /// A binary segment's byte length does not match the declared shape.
    BadSegmentSize,
    /// An extra input is null or holds a null value.
    NullInput,
    /// A vector extra input has the wrong number of values.
    BadInputWidth,
    /// The device ran out of memory on this row alone, unpadded.
    OomSingleRow,
    /// The model failed on this row alone (e.g. a tag id outside its
    /// embedding); the reason holds the model's own message.
    ModelError,
    /// More segments than `[bucketing] max_segments_per_row` allows.
    TooManySegments,
    /// A whole input file left out (`on_bad_file = "skip"`): one row per
    /// file in `_rejects/rejects.parquet`, with no `source_row`. Not an input row:
    /// a file that cannot be read has no rows the run could count.
    BadFile,
    /// A row of a row group that failed to decode mid-run (a corrupt page)
    /// under `on_bad_file = "skip"`: its file and row are named, its id is
    /// null (it could not be read), the reason is the decoder's error.
    BadRowGroup,
    /// An encoded image segment that does not decode (corrupt, truncated,
    /// empty, not PNG/JPEG/WebP, not 8-bit) or is larger than `max_pixels`;
    /// the reason names the segment's index and the decoder's words.
    BadImage,
}

impl RejectKind {
    /// The stable machine-readable name written to `_rejects/rejects.parquet`.
    pub fn as_str(self) -> &'static str {
        match self {
            RejectKind::NullId => "null_id",
            RejectKind::NullSegments => "null_segments",
            RejectKind::NoSegments => "no_segments",
            RejectKind::NullSegment => "null_segment",
            RejectKind::BadSegmentSize => "bad_segment_size",
            RejectKind::NullInput => "null_input",
            RejectKind::BadInputWidth => "bad_input_width",
            RejectKind::OomSingleRow => "oom_single_row",
            RejectKind::ModelError => "model_error",
            RejectKind::TooManySegments => "too_many_segments",
            RejectKind::BadFile => "bad_file",
            RejectKind::BadRowGroup => "bad_row_group",
            RejectKind::BadImage => "bad_image",
        }
    }
}

impl std::fmt::Display for RejectKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a row did not reach the output. Every input row ends either in the
/// output or as a `Reject` in `_rejects/rejects.parquet`.
#[derive(Debug, Clone, PartialEq)]
pub struct Reject {
    /// The id when it could be read.
    pub id: Option<RowId>,
    /// Where the row was read: the done set marks it finished there.
    pub origin: Origin,
    /// The reason's class, for counting and filtering.
    pub kind: RejectKind,
    /// A sentence for a person.
    pub reason: String,
}

/// Readers -> bucketing: the rows of one decoded Arrow record batch.
#[derive(Debug, Default)]
pub struct RowChunk {
    /// Rows that decoded, in file order, for bucketing.
    pub rows: Vec<Row>,
    /// Rows that did not; bucketing passes them straight to the writers.
    pub rejects: Vec<Reject>,
}

/// One extra input assembled for a whole batch, ready to become a tensor.
#[derive(Debug, Clone, PartialEq)]
pub enum BatchExtra {
    /// Values of all rows concatenated, and each row's count.
    Ragged {
        /// Every row's list, one after another, in row order.
        values: Vec<i64>,
        /// Each row's list length, in row order; they sum to
        /// `values.len()`.
        counts: Vec<i64>,
    },
    /// `[n_rows, width]` row-major.
    Vectors {
        /// `n_rows * width` floats, row after row.
        values: Vec<f32>,
        /// Floats per row.
        width: usize,
    },
    /// One float per row, in row order.
    Floats(Vec<f32>),
    /// One integer per row, in row order.
    Ints(Vec<i64>),
}

/// How rows are grouped into batches (`[bucketing] strategy`); the report
/// names it too.
#[derive(Debug, Clone, Copy, Default, serde::Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum BatchingStrategy {
    /// Log2 buckets by segment count, each batch under the segment budget.
    #[default]
    SegmentBudget,
    /// A fixed number of rows per batch in arrival order (the seed's way).
    Rows,
}

/// Bucketing -> model worker: a batch whose segments are concatenated in row
/// order and zero-padded up to `padded_segments`.
#[derive(Debug)]
pub struct Batch {
    /// The batch's number in this attempt, from 0, in the order bucketing
    /// sent batches; batch records and errors name it.
    pub seq: u64,
    /// What the output keeps of each row, in the batch's row order.
    pub rows: Vec<RowMeta>,
    /// Each row's segment count, in row order: the model's per-row input
    /// that tells which segments belong to which row.
    pub segment_counts: Vec<i64>,
    /// Real segments: `segment_counts` summed.
    pub n_segments: usize,
    /// Segments in `segments`, padding included: the model's batch
    /// dimension.
    pub padded_segments: usize,
    /// `padded_segments * segment_bytes` bytes.
    pub segments: Vec<u8>,
    /// One assembled value per [`InputSpec::extras`] entry, in that order.
    pub extras: Vec<BatchExtra>,
    /// Why the batch left its bucket (for the report).
    pub flush_reason: FlushReason,
}

/// Model worker -> writers: one prediction per row of a batch.
#[derive(Debug)]
pub struct Predictions {
    /// The batch's rows, in its order; the vectors below are parallel to it.
    pub rows: Vec<RowMeta>,
    /// The top-1 class and its probability, per row.
    pub label_ids: Vec<i32>,
    /// The top-1 class's probability, per row.
    pub scores: Vec<f32>,
    /// The `k` most probable classes per row (`[writers] top_k`), or `None`.
    pub top: Option<TopK>,
}

/// The `k` most probable classes of each row of a batch, row-major: row
/// `r`'s are `label_ids[r * k..(r + 1) * k]`, most probable first; its
/// first is the row's top-1.
#[derive(Debug, Clone, PartialEq)]
pub struct TopK {
    /// Classes kept per row.
    pub k: usize,
    /// `n_rows * k` class ids.
    pub label_ids: Vec<i32>,
    /// `n_rows * k` probabilities, parallel to `label_ids`.
    pub scores: Vec<f32>,
}

/// Model worker -> writers.
#[derive(Debug)]
pub enum WriterMsg {
    /// One batch's predictions, for a part file.
    Predictions(Predictions),
    /// Rows rejected (by the readers, via bucketing, or by the model), for
    /// the rejects file.
    Rejects(Vec<Reject>),
    /// What one forward pass measured, for the run's batch files.
    Batch(BatchRecord),
}

// What each stage reports when it ends: the run report is assembled from
// these (`report::RunReport::from_stages`), so no stage's own types leak
// into the report's output.

/// Counts a reader thread reports when it ends.
#[derive(Debug, Default, Clone, Copy)]
pub struct ReaderStats {
    /// Rows it read and sent on, rejects included (rows an earlier attempt
    /// finished are not counted).
    pub rows: u64,
    /// Of those, rows it rejected.
    pub rejects: u64,
    /// Wall time reading and decoding units, not waiting to send them.
    pub busy: std::time::Duration,
    /// Segments of the rows decoded (rejected rows' segments included).
    pub segments: u64,
    /// Decode-pool CPU time spent turning rows into segment bytes (Arrow
    /// values copied, or images decoded and resized): each thread's own
    /// clock (`CLOCK_THREAD_CPUTIME_ID`), summed over the pool's threads.
    pub decode_busy: std::time::Duration,
}

/// Counts the bucketing stage reports when it ends.
#[derive(Debug, Default, Clone)]
pub struct BucketingReport {
    /// Rows it took from the readers and planned into batches.
    pub rows: u64,
    /// Readers' rejects it passed on to the writers.
    pub rejects: u64,
    /// Batches it sent to the model worker.
    pub batches: u64,
    /// Real segments in those batches.
    pub segments: u64,
    /// Segments in those batches, padding included.
    pub padded_segments: u64,
    /// Batches of one row over the segment budget, sent alone.
    pub oversized_batches: u64,
    /// The size classes in force at the end (fewer after a lowered budget).
    pub size_classes: Vec<usize>,
    /// Time spent planning and laying out batches, not waiting on channels.
    pub busy: std::time::Duration,
}

/// What the run has done so far, for the progress display and live
/// metrics: the writers count each message as they take it (the batch
/// records pass through them on their way to disk), so no stage shares
/// more than these counters.
#[derive(Debug, Default)]
pub struct LiveCounters {
    rows_written: AtomicU64,
    rows_rejected: AtomicU64,
    batches: AtomicU64,
    segments: AtomicU64,
    padded_segments: AtomicU64,
    /// Forward passes of pieces split after an out-of-memory.
    split_batches: AtomicU64,
    /// Highest allocator peaks seen in any batch (bytes; 0 on CPU).
    allocated_peak: AtomicU64,
    /// Highest reserved peak seen in any batch (bytes; 0 on CPU).
    reserved_peak: AtomicU64,
}

/// A copy of [`LiveCounters`] at one moment.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LiveSnapshot {
    /// Rows predicted, earlier attempts' included.
    pub rows_written: u64,
    /// Rows rejected, earlier attempts' included.
    pub rows_rejected: u64,
    /// Forward passes in this attempt.
    pub batches: u64,
    /// Real segments in those passes.
    pub segments: u64,
    /// Segments in those passes, padding included.
    pub padded_segments: u64,
    /// Forward passes of pieces split after an out-of-memory.
    pub split_batches: u64,
    /// Highest allocated peak of any batch, in bytes; `None` on CPU: no
    /// batch carried allocator statistics.
    pub allocated_peak: Option<u64>,
    /// Highest reserved peak of any batch, in bytes; `None` on CPU.
    pub reserved_peak: Option<u64>,
}

impl LiveCounters {
    /// Counters that start from what earlier attempts finished, so a
    /// resumed run's progress and metrics count the whole shard.
    pub fn resuming((predicted, rejected): (u64, u64)) -> Self {
        let counters = Self::default();
        counters.rows_written.store(predicted, Ordering::Relaxed);
        counters.rows_rejected.store(rejected, Ordering::Relaxed);
        counters
    }

    /// Counts rows predicted (a `Predictions` message taken).
    pub fn add_rows(&self, rows: usize) {
        self.rows_written.fetch_add(rows as u64, Ordering::Relaxed);
    }

    /// Counts rows rejected (a `Rejects` message taken).
    pub fn add_rejects(&self, rows: usize) {
        self.rows_rejected.fetch_add(rows as u64, Ordering::Relaxed);
    }

    /// Counts one forward pass: its segments, whether it was a split's
    /// piece, and its allocator peaks.
    pub fn add_batch(&self, record: &BatchRecord) {
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.segments
            .fetch_add(record.segments as u64, Ordering::Relaxed);
        self.padded_segments
            .fetch_add(record.padded_segments as u64, Ordering::Relaxed);
        if record.split_depth > 0 {
            self.split_batches.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(memory) = &record.memory {
            let bytes = |v: i64| u64::try_from(v).unwrap_or(0);
            self.allocated_peak
                .fetch_max(bytes(memory.allocated_peak), Ordering::Relaxed);
            self.reserved_peak
                .fetch_max(bytes(memory.reserved_peak), Ordering::Relaxed);
        }
    }

    /// Rows predicted or rejected so far: the progress display's count.
    pub fn rows_finished(&self) -> u64 {
        self.rows_written.load(Ordering::Relaxed) + self.rows_rejected.load(Ordering::Relaxed)
    }

    /// Reads every counter. Each is read on its own (relaxed), so the
    /// snapshot may straddle a message; fine for display and metrics.
    pub fn snapshot(&self) -> LiveSnapshot {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let peak = |counter: &AtomicU64| Some(load(counter)).filter(|&v| v > 0);
        LiveSnapshot {
            rows_written: load(&self.rows_written),
            rows_rejected: load(&self.rows_rejected),
            batches: load(&self.batches),
            segments: load(&self.segments),
            padded_segments: load(&self.padded_segments),
            split_batches: load(&self.split_batches),
            allocated_peak: peak(&self.allocated_peak),
            reserved_peak: peak(&self.reserved_peak),
        }
    }
}

/// What the model worker reports when it ends: its batches summed, not
/// listed (they are in the batch files).
#[derive(Debug, Default)]
pub struct WorkerReport {
    /// Totals over every forward pass it ran.
    pub batches: BatchTotals,
    /// Device memory over its batches: shapes seen and reserved highs.
    pub memory: MemoryTrack,
    /// An evenly spaced sample of its batch records, for the report's plot.
    pub plot: PlotSample,
    /// Out-of-memory errors it recovered from (by emptying the cache and
    /// splitting or unpadding the batch).
    pub oom_events: u64,
    /// Time queueing batches and waiting for their answers.
    pub busy: std::time::Duration,
    /// Which model ran the batches of each segment total (a size-class
    /// bundle of AOTInductor packages); empty for any other model.
    pub model_paths: Vec<ModelPath>,
}

/// The batches of one segment total that one path of a size-class bundle
/// ran: `ran` is `dynamic` (the bundle's dynamic model), `static` (the
/// class's own model), `static+graph` (its CUDA graph replayed), or
/// `static` with why no graph ran or which larger class it was padded to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ModelPath {
    /// The segment total of the batches this entry counts.
    pub segments: usize,
    /// Which path ran them, as described above.
    pub ran: String,
    /// How many batches of that total took this path.
    pub batches: u64,
}

/// Counts a writer thread reports when it ends. Rejects are counted, not
/// kept: they are on disk as they arrive.
#[derive(Debug, Default)]
pub struct WriterReport {
    /// Rows of predictions it wrote.
    pub rows: u64,
    /// Where the files it committed are, as the store names them.
    pub files: Vec<String>,
    /// Rejected rows it wrote.
    pub rejects: u64,
    /// Those rejects, counted by kind.
    pub reject_kinds: std::collections::HashMap<RejectKind, u64>,
    /// Batch records it wrote to its batch files.
    pub batch_records: u64,
    /// Time handling messages and committing files, not waiting for
    /// messages.
    pub busy: std::time::Duration,
}

/// One measured segment total of a calibration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CalibrationPoint {
    /// The synthetic batch's segment total.
    pub segments: usize,
    /// Peak bytes reserved from the device while it ran.
    pub peak_reserved: i64,
    /// Peak bytes allocated to tensors while it ran.
    pub peak_allocated: i64,
}

/// `reserved ≈ intercept + slope * segments`, in bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinearFit {
    /// Bytes reserved whatever the batch (weights, workspace).
    pub intercept: f64,
    /// Bytes reserved per segment of the batch.
    pub slope: f64,
}

/// The model alone on its device at one batch shape (`segpredict speed`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct ModelSpeed {
    /// Segments a batch (the shape's first dimension).
    pub segments: usize,
    /// Rows a batch: the segments are shared among them.
    pub rows: usize,
    /// Batches timed, after an untimed warm-up.
    pub batches: usize,
    /// CUDA streams the batches took turns on.
    pub streams: usize,
    /// Wall time from the first timed batch queued to the last one done,
    /// all streams together.
    pub seconds: f64,
    /// Segments of the timed batches over `seconds`.
    pub segments_per_s: f64,
    /// Per batch: device time on CUDA (events), host time on CPU; over
    /// more than one stream, the time between a stream's batches.
    pub batch_ms_median: f64,
    /// The 90th percentile of the same per-batch times.
    pub batch_ms_p90: f64,
}

/// The segment budget the model worker measured for a device-memory target.
#[derive(Debug, Clone)]
pub struct Calibration {
    /// The memory target (`gpu_memory`), in bytes.
    pub target_bytes: u64,
    /// The segment totals it ran and what each reserved.
    pub points: Vec<CalibrationPoint>,
    /// Reserved memory against segments, fitted to `points`.
    pub fit: LinearFit,
    /// The chosen segment budget: the fit's budget for the target, shrunk
    /// while a measured batch of it still reserved more than the target.
    pub max_segments: usize,
    /// The size classes for that budget.
    pub size_classes: Vec<usize>,
    /// Peak reserved measured at the chosen budget.
    pub measured_peak_reserved: i64,
}
