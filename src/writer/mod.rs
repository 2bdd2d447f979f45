//! Writers: predictions to Parquet part files in the output directory.
//!
//! Each writer thread owns its own part files, so writers never contend for a
//! file. A part is written under a hidden temporary name and renamed when it
//! is complete: a file under a final name is always whole. Rejected rows are
//! collected and written once, at the end, to `_rejects.parquet`.

mod check;
mod parts;
mod rejects;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use serde::Deserialize;

pub use rejects::write_rejects;

use crate::message::{Reject, Sources, WriterMsg};
use crate::reader::IdKind;
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
    #[error("output directory {path} cannot be used: {message}")]
    Dir { path: PathBuf, message: String },
    #[error("output directory {path} already holds segpredict output ({found}); set writers.overwrite = true or pass --overwrite")]
    NotEmpty { path: PathBuf, found: String },
    #[error("writing {path}: {message}")]
    Write { path: PathBuf, message: String },
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

/// Counts a writer thread reports when it ends, and the rejects it was sent.
#[derive(Debug, Default)]
pub struct WriterReport {
    pub rows: u64,
    pub files: Vec<PathBuf>,
    pub rejects: Vec<Reject>,
    pub busy: Duration,
}

/// Names this program gives its output, and so may replace with `overwrite`.
fn is_our_output(name: &str) -> bool {
    (name.starts_with("part-") && name.ends_with(".parquet"))
        || name.starts_with("_report.")
        || name == "_rejects.parquet"
        || name == "_SUCCESS"
        || (name.starts_with(".part-") && name.ends_with(".inprogress"))
}

impl WriterConfig {
    pub fn effective_threads(&self) -> usize {
        self.threads.max(1)
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
        let dir_error = |e: std::io::Error| WriterError::Dir {
            path: dir.clone(),
            message: e.to_string(),
        };
        std::fs::create_dir_all(dir).map_err(dir_error)?;
        let ours: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(dir_error)?
            .filter_map(Result::ok)
            .filter(|e| is_our_output(&e.file_name().to_string_lossy()))
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
        let probe = dir.join(".segpredict-write-probe");
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
                            &config.dir,
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
pub fn write_success(dir: &Path) -> Result<(), WriterError> {
    let path = dir.join("_SUCCESS");
    std::fs::write(&path, b"").map_err(|e| WriterError::Write {
        path,
        message: e.to_string(),
    })
}
