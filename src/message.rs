//! The messages stages exchange. No stage imports another stage: they share
//! only these types, sent over bounded crossbeam channels.

use std::sync::Arc;

use crate::bucketing::Segmented;

mod done;
mod shard;

pub use done::{DoneError, DoneSet, Duplicate, Finished, OutOfRange};
pub use shard::{deal_units, ShardError, ShardSpec, COMPLETION_INDEX_VAR};

/// Where a row came from: the input file (an index into [`Sources`]) and the
/// row's 0-based index within that file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Origin {
    pub file_idx: u32,
    pub row_idx: u64,
}

/// The input files of a run, indexed by [`Origin::file_idx`].
pub type Sources = Arc<Vec<std::path::PathBuf>>;

/// A row's id as read from the id column; the output keeps its type.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RowId {
    Int(i64),
    Str(String),
}

impl std::fmt::Display for RowId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RowId::Int(v) => write!(f, "{v}"),
            RowId::Str(s) => f.write_str(s),
        }
    }
}

/// What the output keeps of a row once its inputs are on their way to the model.
#[derive(Debug, Clone, PartialEq)]
pub struct RowMeta {
    pub id: RowId,
    pub origin: Origin,
}

/// The element type of a segment as stored in Parquet; the model worker
/// casts on the device, so the host never widens u8 pixels to f32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SegmentDtype {
    U8,
    F16,
    F32,
}

impl SegmentDtype {
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
    pub segment_shape: Vec<usize>,
    pub segment_dtype: SegmentDtype,
    pub extras: Vec<ExtraSpec>,
}

impl InputSpec {
    pub fn segment_bytes(&self) -> usize {
        self.segment_shape.iter().product::<usize>() * self.segment_dtype.size_bytes()
    }
}

/// The kind of one extra input, in the model's argument order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtraSpec {
    Ragged,
    Vector { width: usize },
    Float,
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
    pub meta: RowMeta,
    pub n_segments: usize,
    pub segments: Box<[u8]>,
    pub extras: Vec<ExtraValue>,
}

impl Segmented for Row {
    fn n_segments(&self) -> usize {
        self.n_segments
    }
}

/// Why a row did not reach the output. Every input row ends either in the
/// output or as a `Reject` in `_rejects.parquet`.
#[derive(Debug, Clone, PartialEq)]
pub struct Reject {
    /// The id when it could be read.
    pub id: Option<RowId>,
    pub origin: Origin,
    /// A stable machine-readable kind, e.g. `null_segments`, `oom_single_row`.
    pub kind: &'static str,
    /// A sentence for a person.
    pub reason: String,
}

/// Readers -> bucketing: the rows of one decoded Arrow record batch.
#[derive(Debug, Default)]
pub struct RowChunk {
    pub rows: Vec<Row>,
    pub rejects: Vec<Reject>,
}

/// One extra input assembled for a whole batch, ready to become a tensor.
#[derive(Debug, Clone, PartialEq)]
pub enum BatchExtra {
    /// Values of all rows concatenated, and each row's count.
    Ragged {
        values: Vec<i64>,
        counts: Vec<i64>,
    },
    /// `[n_rows, width]` row-major.
    Vectors {
        values: Vec<f32>,
        width: usize,
    },
    Floats(Vec<f32>),
    Ints(Vec<i64>),
}

/// Bucketing -> model worker: a batch whose segments are concatenated in row
/// order and zero-padded up to `padded_segments`.
#[derive(Debug)]
pub struct Batch {
    pub seq: u64,
    pub rows: Vec<RowMeta>,
    pub segment_counts: Vec<i64>,
    pub n_segments: usize,
    pub padded_segments: usize,
    /// `padded_segments * segment_bytes` bytes.
    pub segments: Vec<u8>,
    pub extras: Vec<BatchExtra>,
    /// Why the batch left its bucket (for the report).
    pub flush_reason: &'static str,
}

/// Model worker -> writers: one prediction per row of a batch.
#[derive(Debug)]
pub struct Predictions {
    pub rows: Vec<RowMeta>,
    pub label_ids: Vec<i32>,
    pub scores: Vec<f32>,
}

/// Model worker -> writers.
#[derive(Debug)]
pub enum WriterMsg {
    Predictions(Predictions),
    Rejects(Vec<Reject>),
}
