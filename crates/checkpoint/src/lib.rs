//! The output location as the run's checkpoint, and the writer threads
//! that fill it.
//!
//! Everything a run writes goes through a [`store::Store`] (the
//! `segpredict-store` crate); `layout.rs` owns every name; what is visible
//! is what each shard's commit log (`log.rs`) counts; the protocol over
//! them is `checkpoint.rs` (the verdict `run` and `check` share, the lock,
//! an attempt's beginning, its epoch and its undoing) and `commit.rs` (the
//! run's commit). Each writer thread owns its own part
//! file and rejects file, so writers never contend for a file; they commit
//! them at least every `commit_every_s` and at `rows_per_file`, so a killed
//! run resumes from what was committed.

pub mod batch_parts;
pub mod checkpoint;
pub mod commit;
mod committing;
pub mod layout;
pub mod log;
pub mod manifest;
mod parts;
pub mod reject_parts;
mod thread;

use segpredict_core::exit::{Classify, Failure};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

pub use layout::{AttemptNames, OutputLayout, BATCHES};
/// The store crate, under the name the protocol's modules use for it.
pub use segpredict_store as store;
pub use segpredict_store::{open_store, LocalStore, Store, StoreError};
pub use thread::run_writer;

use segpredict_core::message::{IdKind, LiveCounters, Sources};

/// `[writers]`: where predictions go.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriterConfig {
    /// Output directory; created if missing. Required.
    pub dir: PathBuf,
    /// Writer threads, each writing its own part files. Default 2.
    #[serde(default = "default_threads")]
    pub threads: usize,
    /// Rows per part file before a new one starts. Default 1,000,000.
    /// Smaller parts appear sooner; each part costs a file and a footer.
    #[serde(default = "default_rows_per_file")]
    pub rows_per_file: usize,
    /// `zstd` (default), `snappy`, `gzip` or `none`.
    #[serde(default)]
    pub compression: Compression,
    /// Replace another run's output in `dir` (other inputs, another model:
    /// what `_run.json` records). Default false: such a directory is refused,
    /// naming what differs, so a misconfigured job cannot replace last
    /// night's results. The same run's output is never replaced: it is
    /// resumed, or left alone when complete.
    #[serde(default)]
    pub overwrite: bool,
    /// Seconds between commits of each writer's files. Default 60. A crash
    /// loses at most this much work; each commit costs an fsync and, for a
    /// part cut short, a Parquet footer.
    #[serde(default = "default_commit_every_s")]
    pub commit_every_s: f64,
    /// Input columns each output row keeps beside its prediction: a list
    /// of names (a file's columns or Hive partition keys), or `"all"`
    /// (every column that is not a model input, then the partition keys).
    /// Typed as read. Default: none.
    #[serde(default)]
    pub carry: segpredict_core::carry::Carry,
}

/// The output's own columns, which no carried column may take.
pub fn output_columns() -> Vec<String> {
    parts::arrow_schema(IdKind::Str, None)
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect()
}

fn default_commit_every_s() -> f64 {
    60.0
}

fn default_threads() -> usize {
    2
}

fn default_rows_per_file() -> usize {
    1_000_000
}

#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    #[default]
    Zstd,
    Snappy,
    Gzip,
    None,
}

#[derive(Debug, thiserror::Error)]
pub enum WriterError {
    #[error("output directory {path} cannot be used")]
    Dir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Log(#[from] log::LogError),
    #[error("writing {location}")]
    Parquet {
        location: String,
        #[source]
        source: parquet::errors::ParquetError,
    },
    #[error("writing {location}: building the record batch")]
    Arrow {
        location: String,
        #[source]
        source: arrow::error::ArrowError,
    },
    #[error("reading {location}: {problem}")]
    Content { location: String, problem: String },
    #[error("writing {location}: the part is already closed")]
    Closed { location: String },
    #[error("invalid [writers] section: {0}")]
    Config(String),
    #[error("the model returned class {label_id} but the labels file has {n_labels} labels")]
    UnknownLabel { label_id: i32, n_labels: usize },
}

impl Classify for WriterError {
    /// Settings, labels and malformed committed files stay as they are on
    /// a retry; a full disk or a flaky store may not.
    fn failure(&self) -> Failure {
        match self {
            WriterError::Dir { source, .. } => Failure::permanent_if(matches!(
                source.kind(),
                std::io::ErrorKind::NotADirectory
                    | std::io::ErrorKind::PermissionDenied
                    | std::io::ErrorKind::ReadOnlyFilesystem
            )),
            WriterError::Store(e) => e.failure(),
            WriterError::Log(e) => e.failure(),
            WriterError::Parquet { .. }
            | WriterError::Arrow { .. }
            | WriterError::Closed { .. } => Failure::Retryable,
            WriterError::Content { .. }
            | WriterError::Config(_)
            | WriterError::UnknownLabel { .. } => Failure::Permanent,
        }
    }
}

/// What every writer needs to know about the run.
#[derive(Debug, Clone)]
pub struct OutputSchema {
    pub id_kind: IdKind,
    pub labels: Arc<Vec<String>>,
    pub sources: Sources,
    /// The `[writers] carry` columns as the read plan resolved them; each
    /// prediction's row holds its values in Arrow's row format.
    pub carried: Option<arrow::datatypes::SchemaRef>,
    /// What all writers took so far, read by the progress display and the
    /// live metrics.
    pub live: Arc<LiveCounters>,
}

impl WriterConfig {
    pub fn effective_threads(&self) -> usize {
        self.threads.max(1)
    }

    pub fn commit_every(&self) -> Duration {
        Duration::from_secs_f64(self.commit_every_s.max(0.0))
    }

    pub fn validate(&self) -> Result<(), WriterError> {
        if self.rows_per_file == 0 {
            return Err(WriterError::Config(
                "rows_per_file must be at least 1".into(),
            ));
        }
        if !(self.commit_every_s.is_finite() && self.commit_every_s > 0.0) {
            return Err(WriterError::Config(
                "commit_every_s must be a positive number of seconds".into(),
            ));
        }
        Ok(())
    }
}
