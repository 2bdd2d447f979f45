//! Committing a run: once every shard's log has a counted `done` record,
//! check every shard's accounting against the manifest and the files its
//! log counts, merge the rejects into `_rejects/rejects.parquet` and every
//! shard's and attempt's batch records into `_segpredict/batches.parquet` (each file checked
//! against the checksum its record gives), write `_report.json`, remove
//! the data files no counted record names (a stalled or killed writer's
//! late uploads), and write `_SUCCESS` last. The shard that finishes last
//! does this, and so does `segpredict commit DIR` by hand.
//!
//! Two shards finishing at once may both commit: each puts every object
//! whole (the store's promise) with the same content, so the output is
//! complete whichever put lands last. Each shard writes its marker before
//! it looks for the others', so of two shards finishing together at least
//! one sees both markers.

use arrow::datatypes::DataType;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use segpredict_core::exit::{content_or_io, Classify, Failure};
use serde::{Deserialize, Serialize};

use crate::batches::merge_batches;
use crate::checkpoint::{self, ShardDone};
use crate::committing::read_verified;
use crate::layout::{self, BATCHES, COMMIT_TAG, REJECTS, REPORT_JSON, SUCCESS};
use crate::log::{remove_uncounted, FileEntry, FileKind, LogState};
use crate::manifest::RunManifest;
use crate::rejects::merge_rejects;
use crate::store::{Store, StoreError};
use crate::FileError;
use segpredict_core::accounting::RowCounts;
use segpredict_core::message::SkippedFile;
use segpredict_core::shard::ShardSpec;
use segpredict_report::RunReport;

/// Totals over every shard of a run: what `_report.json` records of the
/// whole run, read back by a rerun of a finished run for its exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Totals {
    /// The run's rows by outcome, summed over shards and attempts.
    #[serde(flatten)]
    pub rows: RowCounts,
    /// Attempts summed over the shards (a run of one shard resumed once
    /// counts 2).
    pub attempts: u32,
    /// Input files left out (`on_bad_file = "skip"`).
    pub skipped_files: u64,
}

/// Whether a run could be committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommitState {
    /// `_SUCCESS` is written: the run is complete, with these totals.
    Committed(Totals),
    /// These shards are not done yet.
    Waiting(Vec<u32>),
}

/// Why a run could not be committed.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// The location has no run manifest: `segpredict commit` was pointed
    /// at something that is not a run's output.
    #[error("{location} holds no segpredict run (no _run.json)")]
    NoRun {
        /// The output location.
        location: String,
    },
    /// The shards' accounting does not add up against the manifest or
    /// the files their logs count: the run is not committed.
    #[error("{location}: {problem}; the output is incomplete")]
    Accounting {
        /// The output location.
        location: String,
        /// What does not add up, with the numbers, for the message.
        problem: String,
    },
    /// Reading the shards' logs or markers failed.
    #[error(transparent)]
    Checkpoint(#[from] checkpoint::CheckpointError),
    /// Reading back or merging a committed file failed (its checksum
    /// included).
    #[error(transparent)]
    File(#[from] FileError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A committed Parquet file could not be read.
    #[error("reading {location}")]
    Parquet {
        /// The file.
        location: String,
        /// What the Parquet reader said.
        #[source]
        source: parquet::errors::ParquetError,
    },
    /// A committed Parquet file lacks the columns the merge needs.
    #[error("reading {location}")]
    Arrow {
        /// The file.
        location: String,
        /// What Arrow said.
        #[source]
        source: arrow::error::ArrowError,
    },
    /// `_report.json` could not be written, or read back by a rerun.
    #[error("writing {location}")]
    Json {
        /// The `_report.json` location.
        location: String,
        /// What serde_json said.
        #[source]
        source: serde_json::Error,
    },
}

impl Classify for CommitError {
    /// Accounting that does not add up, or a run that is not there, stays
    /// so on a retry; reading and writing may succeed next time.
    fn failure(&self) -> Failure {
        match self {
            CommitError::NoRun { .. } | CommitError::Accounting { .. } => Failure::Permanent,
            CommitError::Parquet { source, .. } => content_or_io(source),
            CommitError::Arrow { source, .. } => content_or_io(source),
            CommitError::Json { .. } => Failure::Permanent,
            CommitError::Checkpoint(e) => e.failure(),
            CommitError::File(e) => e.failure(),
            CommitError::Store(e) => e.failure(),
        }
    }
}

/// The whole run's report in `_report.json`: the shard's own for a run of
/// one shard, the totals and every shard's for several.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RunSummary {
    /// A run of several shards: the totals over them and each one's report.
    Sharded(ShardedSummary),
    /// A run of one shard: its own report, as it is.
    Single(Box<RunReport>),
}

/// `_report.json` of a sharded run: the sums over the shards, then each
/// shard's own report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ShardedSummary {
    /// Rows, attempts and skipped files summed over the shards.
    #[serde(flatten)]
    pub totals: Totals,
    /// Batches summed over the shards.
    pub batches: u64,
    /// The merged batch records, relative to the output location
    /// (`_segpredict/batches.parquet`).
    pub batches_file: String,
    /// Every shard's own report.
    pub shards: Vec<RunReport>,
}

impl RunSummary {
    /// The whole run's totals, whichever form the summary has: what a
    /// rerun of a finished run takes its exit code from.
    pub fn totals(&self) -> Totals {
        match self {
            RunSummary::Sharded(s) => s.totals,
            RunSummary::Single(report) => Totals {
                rows: report.rows,
                attempts: report.attempts,
                skipped_files: report.skipped_files.len() as u64,
            },
        }
    }

    /// The committed run's summary, for a rerun of a finished run.
    pub fn read(store: &dyn Store) -> Result<Option<RunSummary>, CommitError> {
        let Some(bytes) = store.get(REPORT_JSON)? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|source| CommitError::Json {
                location: store.locate(REPORT_JSON),
                source,
            })
    }
}

/// Commits the run in `store` if every shard is done.
pub fn commit_run(store: &dyn Store) -> Result<CommitState, CommitError> {
    let manifest = read_manifest(store)?;
    let shards = match checkpoint::shards_done(store, manifest.shards)? {
        Ok(shards) => shards,
        Err(missing) => return Ok(CommitState::Waiting(missing)),
    };
    let (shards, logs): (Vec<ShardDone>, Vec<LogState>) = shards.into_iter().unzip();
    let files: Vec<FileEntry> = logs.into_iter().flat_map(|log| log.files).collect();
    let mut totals = check_accounting(store, &manifest, &shards, &files)?;
    let of_kind = |kind: FileKind| -> Vec<FileEntry> {
        files.iter().filter(|f| f.kind == kind).cloned().collect()
    };
    // Every shard planned the same input files, so skipped the same ones.
    let skipped: Vec<SkippedFile> = shards
        .first()
        .map(|s| s.report.skipped_files.clone())
        .unwrap_or_default();
    totals.skipped_files = skipped.len() as u64;
    let id_type = id_type(store, &files)?;
    merge_rejects(
        store,
        &of_kind(FileKind::Rejects),
        REJECTS,
        id_type,
        &skipped,
    )?;
    merge_batches(store, &of_kind(FileKind::Batches), BATCHES)?;
    write_report(store, shards, totals)?;
    remove_uncounted(store, &store.list("")?, &files)?;
    store.put(SUCCESS, b"")?;
    Ok(CommitState::Committed(totals))
}

fn read_manifest(store: &dyn Store) -> Result<RunManifest, CommitError> {
    RunManifest::read(store)
        .map_err(checkpoint::CheckpointError::from)?
        .ok_or_else(|| CommitError::NoRun {
            location: store.location(),
        })
}

/// `segpredict commit`: the run's commit by a process of no shard, through
/// a store tagged [`COMMIT_TAG`]. It holds every shard's lock while it
/// commits (refused, naming the holder, while a shard runs or commits), so
/// no other process writes `commit`-tagged temporary files meanwhile, and
/// it removes those a killed `segpredict commit` left.
pub fn commit_by_hand(store: &dyn Store) -> Result<CommitState, CommitError> {
    let count = read_manifest(store)?.shards;
    let shards = (0..count).map(|index| ShardSpec { index, count });
    let _locks = checkpoint::lock_shards(store, shards)?;
    for key in store.list("")? {
        if layout::is_temporary_of(&key, COMMIT_TAG) {
            store.delete(&key)?;
            tracing::info!(file = %store.locate(&key), "removed a killed commit's temporary file");
        }
    }
    commit_run(store)
}

/// Every shard's rows add up, the shards cover the input, and the counted
/// files hold exactly the rows the `done` records say (as their records
/// give them).
fn check_accounting(
    store: &dyn Store,
    manifest: &RunManifest,
    shards: &[ShardDone],
    files: &[FileEntry],
) -> Result<Totals, CommitError> {
    let failed = |problem: String| CommitError::Accounting {
        location: store.location(),
        problem,
    };
    let mut totals = Totals::default();
    for shard in shards {
        let rows = shard.accounting.rows;
        if !rows.balances() {
            return Err(failed(format!("shard {} accounts for {rows}", shard.shard)));
        }
        totals.rows.add(rows);
        totals.attempts += shard.accounting.attempts;
    }
    let input_rows: u64 = manifest.inputs.iter().map(|i| i.rows).sum();
    if totals.rows.rows_in != input_rows {
        return Err(failed(format!(
            "the shards account for {} rows of an input of {input_rows}",
            totals.rows.rows_in
        )));
    }
    let rows_of = |kind: FileKind| -> u64 {
        files
            .iter()
            .filter(|f| f.kind == kind)
            .map(|f| f.rows)
            .sum()
    };
    let (predicted, rejected) = (rows_of(FileKind::Part), rows_of(FileKind::Rejects));
    if (predicted, rejected) != (totals.rows.rows_out, totals.rows.rows_rejected) {
        return Err(failed(format!(
            "the committed files hold {predicted} predicted and {rejected} rejected rows, the shards say {} and {}",
            totals.rows.rows_out, totals.rows.rows_rejected
        )));
    }
    Ok(totals)
}

/// The run's id type as its committed files carry it, so `_rejects/rejects.parquet`
/// types the id as the parts do (text for a run that committed nothing).
fn id_type(store: &dyn Store, files: &[FileEntry]) -> Result<DataType, CommitError> {
    let first = files
        .iter()
        .find(|f| matches!(f.kind, FileKind::Part | FileKind::Rejects));
    let Some(first) = first else {
        return Ok(DataType::Utf8);
    };
    let location = store.locate(&first.key);
    let bytes = read_verified(store, first)?;
    let parquet_error = |source| CommitError::Parquet {
        location: location.clone(),
        source,
    };
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes).map_err(parquet_error)?;
    let field = builder
        .schema()
        .field_with_name("id")
        .map_err(|source| CommitError::Arrow { location, source })?;
    Ok(field.data_type().clone())
}

fn write_report(
    store: &dyn Store,
    shards: Vec<ShardDone>,
    totals: Totals,
) -> Result<(), CommitError> {
    let summary = match shards.len() {
        1 => RunSummary::Single(Box::new(shards.into_iter().next().expect("one").report)),
        _ => RunSummary::Sharded(ShardedSummary {
            totals,
            batches: shards.iter().map(|s| s.report.batches).sum(),
            batches_file: BATCHES.to_string(),
            shards: shards.into_iter().map(|s| s.report).collect(),
        }),
    };
    let text = serde_json::to_string_pretty(&summary).map_err(|source| CommitError::Json {
        location: store.locate(REPORT_JSON),
        source,
    })?;
    Ok(store.put(REPORT_JSON, text.as_bytes())?)
}
