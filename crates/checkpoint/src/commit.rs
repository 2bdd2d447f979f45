//! Committing a run: once every shard's done marker is there, check every
//! shard's accounting against the manifest and the committed files, merge
//! the rejects into `_rejects.parquet` and every shard's and attempt's
//! batch records into `_batches.parquet`, write `_report.json`, and write
//! `_SUCCESS` last. The shard that finishes last does this, and so does
//! `segpredict commit DIR` by hand.
//!
//! Two shards finishing at once may both commit: each writes every file
//! whole under a temporary name of its own and renames it, and both write
//! the same content, so the directory is complete whichever rename lands
//! last. Each shard writes its marker before it looks for the others', so
//! of two shards finishing together at least one sees both markers.

use std::path::Path;

use anyhow::{bail, Context, Result};
use arrow::datatypes::DataType;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde_json::json;

use crate::batch_parts::merge_batches;
use crate::checkpoint::{self, ShardDone};
use crate::done::Committed;
use crate::manifest::RunManifest;
use crate::reject_parts::merge_rejects;
use crate::OutputLayout;
use segpredict_core::exit::Permanent;
use segpredict_core::message::{Finished, SkippedFile};

/// Totals over every shard of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Totals {
    pub rows_in: u64,
    pub rows_out: u64,
    pub rows_rejected: u64,
    pub rows_resumed: u64,
    pub attempts: u32,
    /// Input files left out (`on_bad_file = "skip"`).
    pub skipped_files: u64,
}

/// Whether a run could be committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommitState {
    Committed(Totals),
    /// These shards are not done yet.
    Waiting(Vec<u32>),
}

/// Commits the run in `dir` if every shard is done.
pub fn commit_run(dir: &Path) -> Result<CommitState> {
    let manifest = RunManifest::read(dir)?.ok_or_else(|| {
        Permanent(anyhow::anyhow!(
            "{} holds no segpredict run (no _run.json)",
            dir.display()
        ))
    })?;
    let shards = match checkpoint::shards_done(dir, manifest.shards)? {
        Ok(shards) => shards,
        Err(missing) => return Ok(CommitState::Waiting(missing)),
    };
    let mut totals = check_accounting(dir, &manifest, &shards).map_err(Permanent)?;
    let layout = OutputLayout::new(dir);
    let committed = checkpoint::committed_files(dir, None)?;
    let rejects: Vec<_> = committed
        .iter()
        .filter(|c| c.finished == Finished::Rejected)
        .map(|c| c.path.clone())
        .collect();
    // Every shard planned the same input files, so skipped the same ones.
    let skipped = skipped_files(&shards)?;
    totals.skipped_files = skipped.len() as u64;
    merge_rejects(&rejects, &layout.rejects(), id_type(&committed)?, &skipped)?;
    let batch_files = checkpoint::committed_batch_files(dir, None)?;
    merge_batches(&batch_files, &layout.batches())?;
    write_report(&layout, &shards, totals)?;
    checkpoint::publish(&layout.success(), b"")?;
    Ok(CommitState::Committed(totals))
}

/// The input files the run left out (`on_bad_file = "skip"`), as the first
/// shard's report lists them. They become `bad_file` rows of
/// `_rejects.parquet` but are not counted in `rows_rejected`: a skipped
/// file is not in `_run.json`'s inputs, so its rows (which a truncated file
/// cannot even count) are not rows of the run; the accounting below checks
/// the input rows against the committed parts and rejects files, which
/// hold no `bad_file` rows.
fn skipped_files(shards: &[ShardDone]) -> Result<Vec<SkippedFile>> {
    let Some(first) = shards.first() else {
        return Ok(Vec::new());
    };
    match &first.report["skipped_files"] {
        serde_json::Value::Null => Ok(Vec::new()),
        listed => serde_json::from_value(listed.clone())
            .with_context(|| format!("reading shard {}'s skipped files", first.shard)),
    }
}

/// Every shard's rows add up, the shards cover the input, and the committed
/// files hold exactly the rows the markers say (counted from the Parquet
/// footers, not read).
fn check_accounting(dir: &Path, manifest: &RunManifest, shards: &[ShardDone]) -> Result<Totals> {
    let mut totals = Totals::default();
    for shard in shards {
        if shard.rows_out + shard.rows_rejected != shard.rows_in {
            bail!(
                "{}: shard {} accounts for {} + {} rows of its {}",
                dir.display(),
                shard.shard,
                shard.rows_out,
                shard.rows_rejected,
                shard.rows_in
            );
        }
        totals.rows_in += shard.rows_in;
        totals.rows_out += shard.rows_out;
        totals.rows_rejected += shard.rows_rejected;
        totals.rows_resumed += shard.rows_resumed;
        totals.attempts += shard.attempts;
    }
    let input_rows: u64 = manifest.inputs.iter().map(|i| i.rows).sum();
    if totals.rows_in != input_rows {
        bail!(
            "{}: the shards account for {} rows of an input of {}",
            dir.display(),
            totals.rows_in,
            input_rows
        );
    }
    let committed = checkpoint::committed_files(dir, None)?;
    let (mut predicted, mut rejected) = (0u64, 0u64);
    for file in &committed {
        let rows = footer_rows(&file.path)?;
        match file.finished {
            Finished::Predicted => predicted += rows,
            Finished::Rejected => rejected += rows,
        }
    }
    if (predicted, rejected) != (totals.rows_out, totals.rows_rejected) {
        bail!(
            "{}: the committed files hold {} predicted and {} rejected rows, the shards say {} and {}",
            dir.display(),
            predicted,
            rejected,
            totals.rows_out,
            totals.rows_rejected
        );
    }
    Ok(totals)
}

/// The run's id type as its committed files carry it, so `_rejects.parquet`
/// types the id as the parts do (text for a run that committed nothing).
fn id_type(committed: &[Committed]) -> Result<DataType> {
    let Some(first) = committed.first() else {
        return Ok(DataType::Utf8);
    };
    let path = &first.path;
    let file = std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file)
        .with_context(|| format!("reading {}", path.display()))?;
    let field = builder
        .schema()
        .field_with_name("id")
        .with_context(|| format!("reading {}", path.display()))?;
    Ok(field.data_type().clone())
}

fn footer_rows(path: &Path) -> Result<u64> {
    let file = std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let reader = parquet::file::reader::SerializedFileReader::new(file)
        .with_context(|| format!("reading {}", path.display()))?;
    use parquet::file::reader::FileReader;
    Ok(reader.metadata().file_metadata().num_rows().max(0) as u64)
}

/// `_report.json`: the shard's own report for a run of one shard; the
/// totals and every shard's report for several.
fn write_report(layout: &OutputLayout, shards: &[ShardDone], totals: Totals) -> Result<()> {
    let value = match shards {
        [only] => only.report.clone(),
        _ => json!({
            "rows_in": totals.rows_in,
            "rows_out": totals.rows_out,
            "rows_rejected": totals.rows_rejected,
            "rows_resumed": totals.rows_resumed,
            "attempts": totals.attempts,
            "batches": shards.iter().filter_map(|s| s.report["batches"].as_u64()).sum::<u64>(),
            "batches_file": layout.batches().file_name().map(|n| n.to_string_lossy().into_owned()),
            "skipped_files": shards.first().map(|s| s.report["skipped_files"].clone()),
            "shards": shards.iter().map(|s| s.report.clone()).collect::<Vec<_>>(),
        }),
    };
    let text = serde_json::to_string_pretty(&value)?;
    Ok(checkpoint::publish(&layout.report_json(), text.as_bytes())?)
}
