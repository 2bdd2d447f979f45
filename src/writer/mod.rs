//! Writers: predictions to Parquet part files in the output directory.
//!
//! Each writer thread owns its own part files, so writers never contend for a
//! file. A part is written under a hidden temporary name and renamed when it
//! is complete: a file under a final name is always whole. Rejected rows are
//! collected and written once, at the end, to `_rejects.parquet`.

mod check;
mod layout;
mod parts;
mod rejects;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::Receiver;
use serde::Deserialize;

pub use layout::OutputLayout;
pub use rejects::write_rejects;

use crate::message::{IdKind, Sources, WriterMsg, WriterReport};
use parts::PartWriter;

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
    /// Replace an earlier run's output in `dir`. Default false: a directory
    /// that already holds segpredict output is an error, so a misconfigured
    /// job cannot silently overwrite last night's results.
    #[serde(default)]
    pub overwrite: bool,
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
    #[error("output directory {path} already holds segpredict output ({found}); set writers.overwrite = true or pass --overwrite")]
    NotEmpty { path: PathBuf, found: String },
    #[error("writing {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("writing {path}")]
    Parquet {
        path: PathBuf,
        #[source]
        source: parquet::errors::ParquetError,
    },
    #[error("writing {path}: building the record batch")]
    Arrow {
        path: PathBuf,
        #[source]
        source: arrow::error::ArrowError,
    },
    #[error("writing {path}: the part is already closed")]
    Closed { path: PathBuf },
    #[error("invalid [writers] section: {0}")]
    Config(String),
    #[error("the model returned class {label_id} but the labels file has {n_labels} labels")]
    UnknownLabel { label_id: i32, n_labels: usize },
}

/// What every writer needs to know about the run.
#[derive(Debug, Clone)]
pub struct OutputSchema {
    pub id_kind: IdKind,
    pub labels: Arc<Vec<String>>,
    pub sources: Sources,
    /// Rows written so far by all writers, read by the progress display.
    pub rows_written: Arc<std::sync::atomic::AtomicU64>,
}

impl WriterConfig {
    pub fn effective_threads(&self) -> usize {
        self.threads.max(1)
    }

    /// The names of this run's output files.
    pub fn layout(&self) -> OutputLayout {
        OutputLayout::new(&self.dir)
    }

    /// Creates the directory, proves it writable, and refuses (or with
    /// `overwrite` clears) an earlier run's output, before any row is read.
    pub fn prepare_dir(&self) -> Result<(), WriterError> {
        if self.rows_per_file == 0 {
            return Err(WriterError::Config(
                "rows_per_file must be at least 1".into(),
            ));
        }
        let dir = &self.dir;
        let dir_error = |source| WriterError::Dir {
            path: dir.clone(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(dir_error)?;
        let ours: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(dir_error)?
            .filter_map(Result::ok)
            .filter(|e| OutputLayout::is_ours(&e.file_name().to_string_lossy()))
            .map(|e| e.path())
            .collect();
        if !ours.is_empty() && !self.overwrite {
            let found = format!(
                "{} files such as {}",
                ours.len(),
                ours[0].file_name().unwrap_or_default().to_string_lossy()
            );
            return Err(WriterError::NotEmpty {
                path: dir.clone(),
                found,
            });
        }
        for path in ours {
            std::fs::remove_file(&path).map_err(dir_error)?;
        }
        let probe = self.layout().write_probe();
        std::fs::write(&probe, b"").map_err(dir_error)?;
        std::fs::remove_file(&probe).map_err(dir_error)
    }
}

/// One writer thread: writes every prediction it receives, keeps the rejects.
/// On cancel or error its unfinished part is removed, never renamed.
pub fn run_writer(
    writer_idx: usize,
    config: &WriterConfig,
    schema: &OutputSchema,
    messages: Receiver<WriterMsg>,
    cancel: &AtomicBool,
) -> Result<WriterReport, WriterError> {
    crate::cpu::lower_this_thread();
    let mut report = WriterReport::default();
    let layout = config.layout();
    let mut part: Option<PartWriter> = None;
    let mut part_seq = 0usize;
    for message in messages {
        if cancel.load(Ordering::Relaxed) {
            return Ok(report);
        }
        let started = Instant::now();
        match message {
            WriterMsg::Rejects(rejects) => report.rejects.extend(rejects),
            WriterMsg::Predictions(predictions) => {
                let writer = match part.as_mut() {
                    Some(w) => w,
                    None => {
                        part_seq += 1;
                        part.insert(PartWriter::create(
                            &layout,
                            writer_idx,
                            part_seq,
                            config.compression,
                            schema,
                        )?)
                    }
                };
                report.rows += predictions.rows.len() as u64;
                schema
                    .rows_written
                    .fetch_add(predictions.rows.len() as u64, Ordering::Relaxed);
                writer.write(&predictions)?;
                if writer.rows() >= config.rows_per_file {
                    if let Some(full) = part.take() {
                        report.files.push(full.finish()?);
                    }
                }
            }
        }
        report.busy += started.elapsed();
    }
    if cancel.load(Ordering::Relaxed) {
        return Ok(report);
    }
    if let Some(last) = part.take() {
        report.files.push(last.finish()?);
    }
    Ok(report)
}

/// Marks a complete run, as Spark and Hadoop jobs do: downstream jobs wait
/// for this file rather than guessing from the part files.
pub fn write_success(layout: &OutputLayout) -> Result<(), WriterError> {
    let path = layout.success();
    std::fs::write(&path, b"").map_err(|source| WriterError::Io { path, source })
}

/// Writes a whole file under its hidden in-progress name, then gives it its
/// final name, so a file under a final name is complete.
pub fn write_whole(layout: &OutputLayout, path: &Path, bytes: &[u8]) -> Result<(), WriterError> {
    let temp = layout.in_progress(path);
    let io_error = |source| WriterError::Io {
        path: path.to_path_buf(),
        source,
    };
    std::fs::write(&temp, bytes).map_err(io_error)?;
    std::fs::rename(&temp, path).map_err(io_error)
}
