//! The writer threads and the part files they fill: each writer thread
//! owns its own part file, rejects file and batch-record file, so writers
//! never contend for a file; it commits them at least every
//! `commit_every_s` and at `rows_per_file`, so a killed run resumes from
//! what was committed. A file becomes visible only through the
//! checkpoint's protocol (`segpredict-checkpoint`): streamed whole by its
//! `CommittingParquet` and named in a record its `LogWriter` appends.
//! This crate owns the output's schema (`parts.rs`); the checkpoint never
//! names this crate.

#![warn(missing_docs)]

mod batch_parts;
mod parts;
mod reject_parts;
mod thread;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

pub use parts::output_arrow_schema;
use segpredict_checkpoint::log::LogError;
use segpredict_checkpoint::FileError;
use segpredict_core::exit::{Classify, Failure};
use segpredict_core::message::{IdKind, LiveCounters, Sources};
pub use thread::run_writer;

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
    /// Also write each row's `top_k` most probable classes, most probable
    /// first: `top_labels` (list of UTF-8) and `top_scores` (list of
    /// float32). Default none (no such columns). At most the labels' count.
    #[serde(default)]
    pub top_k: Option<usize>,
    /// Input columns each output row keeps beside its prediction: a list
    /// of names (a file's columns or Hive partition keys), or `"all"`
    /// (every column that is not a model input, then the partition keys).
    /// Typed as read. Default: none.
    #[serde(default)]
    pub carry: segpredict_core::carry::Carry,
}

/// The output's own columns (`top_k`'s included), which no carried column
/// may take.
pub fn output_columns() -> Vec<String> {
    let own = OutputSchema {
        id_kind: IdKind::Str,
        labels: Arc::default(),
        sources: Arc::default(),
        top_k: Some(1),
        carried: None,
        live: Arc::default(),
    };
    parts::output_arrow_schema(&own)
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

/// `[writers] compression`: the codec of the part files (the run's other
/// Parquet files are always zstd).
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// Zstandard at its default level: small files, cheap to read.
    #[default]
    Zstd,
    /// Snappy: faster to write, larger files.
    Snappy,
    /// Gzip at its default level, for readers without zstd.
    Gzip,
    /// Uncompressed.
    None,
}

/// Why a writer thread, or the `[writers]` settings, failed.
#[derive(Debug, thiserror::Error)]
pub enum WriterError {
    /// A part, rejects or batch-record file could not be written or
    /// committed.
    #[error(transparent)]
    File(#[from] FileError),
    /// The commit record naming the files could not be appended, or a
    /// newer attempt fenced this one.
    #[error(transparent)]
    Log(#[from] LogError),
    /// A setting out of range, with what it must be.
    #[error("invalid [writers] section: {0}")]
    Config(String),
    /// `top_k` asks for more classes than the labels file has.
    #[error("invalid [writers] section: top_k = {top_k}, but the labels file {labels} has {n_labels} classes")]
    TopK {
        /// The `top_k` asked for.
        top_k: usize,
        /// The classes the labels file has.
        n_labels: usize,
        /// The labels file.
        labels: PathBuf,
    },
    /// The model answered a class id outside the labels file: the model
    /// and the labels do not belong together.
    #[error("the model returned class {label_id} but the labels file has {n_labels} labels")]
    UnknownLabel {
        /// The class id the model returned.
        label_id: i32,
        /// The labels the labels file has.
        n_labels: usize,
    },
}

impl Classify for WriterError {
    /// Settings and labels stay as they are on a retry; a full disk or a
    /// flaky store may not.
    fn failure(&self) -> Failure {
        match self {
            WriterError::File(e) => e.failure(),
            WriterError::Log(e) => e.failure(),
            WriterError::Config(_)
            | WriterError::TopK { .. }
            | WriterError::UnknownLabel { .. } => Failure::Permanent,
        }
    }
}

/// What every writer needs to know about the run.
#[derive(Debug, Clone)]
pub struct OutputSchema {
    /// The type of the input's id column, which the output's `id` keeps.
    pub id_kind: IdKind,
    /// The class names, indexed by the model's class id.
    pub labels: Arc<Vec<String>>,
    /// The run's input files, indexed by a row's `file_idx`: each row's
    /// `source_file` is its path.
    pub sources: Sources,
    /// `[writers] top_k`: the `top_labels` and `top_scores` columns.
    pub top_k: Option<usize>,
    /// The `[writers] carry` columns as the read plan resolved them; each
    /// prediction's row holds its values in Arrow's row format.
    pub carried: Option<arrow::datatypes::SchemaRef>,
    /// What all writers took so far, read by the progress display and the
    /// live metrics.
    pub live: Arc<LiveCounters>,
}

impl WriterConfig {
    /// The writer threads to start: `threads`, and at least one.
    pub fn effective_threads(&self) -> usize {
        self.threads.max(1)
    }

    /// `commit_every_s` as a duration (a negative value as zero; it is
    /// [`WriterConfig::validate`] that refuses it).
    pub fn commit_every(&self) -> Duration {
        Duration::from_secs_f64(self.commit_every_s.max(0.0))
    }

    /// Checks the settings that need no other file: `rows_per_file` and
    /// `top_k` at least 1, `commit_every_s` a positive number of seconds.
    /// `top_k` against the labels is [`WriterConfig::check_top_k`]'s.
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
        if self.top_k == Some(0) {
            return Err(WriterError::Config("top_k must be at least 1".into()));
        }
        Ok(())
    }

    /// `top_k` against the classes of the labels file `labels`.
    pub fn check_top_k(
        &self,
        top_k: usize,
        n_labels: usize,
        labels: &std::path::Path,
    ) -> Result<(), WriterError> {
        if top_k == 0 {
            return Err(WriterError::Config("top_k must be at least 1".into()));
        }
        match top_k <= n_labels {
            true => Ok(()),
            false => Err(WriterError::TopK {
                top_k,
                n_labels,
                labels: labels.to_path_buf(),
            }),
        }
    }
}
