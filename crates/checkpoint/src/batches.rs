//! The format of the run report's per-batch records: each writer thread
//! (the `segpredict-writers` crate) appends the records it receives to its
//! own file under `_progress/`, committed with its part files under the
//! same rules; earlier attempts' files are read back here, a batch at a
//! time, for the report's totals; the run's commit concatenates every
//! shard's and attempt's into `_segpredict/batches.parquet`
//! ([`crate::layout::BATCHES`]).
//!
//! The one conversion between a [`BatchRecord`] and a row of these files is
//! here, both ways (`records_batch`, `records_of`), and a test in
//! `segpredict-writers` round-trips every field.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, Float64Array, Int64Array, StringArray, StructArray, UInt32Array,
    UInt64Array,
};
use arrow::buffer::NullBuffer;
use arrow::datatypes::{DataType, Field, Fields, Float64Type, Int64Type, Schema, SchemaRef};
use arrow::datatypes::{UInt32Type, UInt64Type};
use arrow::record_batch::RecordBatch;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::committing::{merge_parquet, read_verified};
use crate::layout::AttemptNames;
use crate::log::FileEntry;
use crate::store::Store;
use crate::FileError;
use segpredict_core::message::{BatchRecord, FlushReason, MemoryStats};
use segpredict_core::stats::BatchTotals;

/// Device-memory columns, in [`MemoryStats`]' order.
const MEMORY_FIELDS: [&str; 9] = [
    "allocated",
    "allocated_peak",
    "reserved",
    "reserved_peak",
    "inactive_split",
    "alloc_retries",
    "ooms",
    "device_free",
    "device_total",
];

fn memory_fields() -> Fields {
    MEMORY_FIELDS
        .iter()
        .map(|name| Field::new(*name, DataType::Int64, false))
        .collect()
}

/// `_segpredict/batches.parquet`'s columns: the shard (its 0-based index) and attempt
/// that ran the batch, then the record's fields as `_report.json` used to
/// list them; `device_ms` and `memory` are null on CPU.
pub fn batches_schema() -> SchemaRef {
    let f64_field = |name: &str| Field::new(name, DataType::Float64, false);
    Arc::new(Schema::new(vec![
        Field::new("shard", DataType::UInt32, false),
        Field::new("attempt", DataType::UInt32, false),
        Field::new("seq", DataType::UInt64, false),
        Field::new("rows", DataType::UInt64, false),
        Field::new("segments", DataType::UInt64, false),
        Field::new("padded_segments", DataType::UInt64, false),
        Field::new("flush_reason", DataType::Utf8, false),
        f64_field("queued_at_ms"),
        f64_field("launch_ms"),
        f64_field("done_at_ms"),
        f64_field("wall_ms"),
        Field::new("device_ms", DataType::Float64, true),
        Field::new("split_depth", DataType::UInt32, false),
        Field::new("memory", DataType::Struct(memory_fields()), true),
    ]))
}

fn memory_values(m: &MemoryStats) -> [i64; 9] {
    [
        m.allocated,
        m.allocated_peak,
        m.reserved,
        m.reserved_peak,
        m.inactive_split,
        m.alloc_retries,
        m.ooms,
        m.device_free,
        m.device_total,
    ]
}

fn memory_column(records: &[BatchRecord]) -> Result<ArrayRef, arrow::error::ArrowError> {
    let columns: Vec<ArrayRef> = (0..MEMORY_FIELDS.len())
        .map(|i| {
            let values = records
                .iter()
                .map(|r| r.memory.as_ref().map_or(0, |m| memory_values(m)[i]));
            Arc::new(values.collect::<Int64Array>()) as ArrayRef
        })
        .collect();
    let valid = NullBuffer::from_iter(records.iter().map(|r| r.memory.is_some()));
    Ok(Arc::new(StructArray::try_new(
        memory_fields(),
        columns,
        Some(valid),
    )?))
}

/// Records as one record batch of [`batches_schema`].
pub fn records_batch(
    records: &[BatchRecord],
    names: AttemptNames,
) -> Result<RecordBatch, arrow::error::ArrowError> {
    let u64s = |f: fn(&BatchRecord) -> u64| -> ArrayRef {
        Arc::new(records.iter().map(f).collect::<UInt64Array>())
    };
    let f64s = |f: fn(&BatchRecord) -> f64| -> ArrayRef {
        Arc::new(records.iter().map(f).collect::<Float64Array>())
    };
    let n = records.len();
    let columns: Vec<ArrayRef> = vec![
        Arc::new(UInt32Array::from(vec![names.shard.index; n])),
        Arc::new(UInt32Array::from(vec![names.attempt; n])),
        u64s(|r| r.seq),
        u64s(|r| r.rows as u64),
        u64s(|r| r.segments as u64),
        u64s(|r| r.padded_segments as u64),
        Arc::new(
            records
                .iter()
                .map(|r| Some(r.flush_reason.as_str()))
                .collect::<StringArray>(),
        ),
        f64s(|r| r.queued_at_ms),
        f64s(|r| r.launch_ms),
        f64s(|r| r.done_at_ms),
        f64s(|r| r.wall_ms),
        Arc::new(
            records
                .iter()
                .map(|r| r.device_ms)
                .collect::<Float64Array>(),
        ),
        Arc::new(
            records
                .iter()
                .map(|r| Some(r.split_depth))
                .collect::<UInt32Array>(),
        ),
        memory_column(records)?,
    ];
    RecordBatch::try_new(batches_schema(), columns)
}

/// The records of one record batch of the batch file at `location`.
pub fn records_of(batch: &RecordBatch, location: &str) -> Result<Vec<BatchRecord>, FileError> {
    let content = |problem: String| FileError::Content {
        location: location.to_string(),
        problem,
    };
    let column = |name: &str| {
        batch
            .column_by_name(name)
            .ok_or_else(|| content(format!("no column `{name}`")))
    };
    let u64s = |name: &str| column(name).map(|c| c.as_primitive::<UInt64Type>().clone());
    let f64s = |name: &str| column(name).map(|c| c.as_primitive::<Float64Type>().clone());
    let (seq, rows) = (u64s("seq")?, u64s("rows")?);
    let (segments, padded) = (u64s("segments")?, u64s("padded_segments")?);
    let (queued, launch) = (f64s("queued_at_ms")?, f64s("launch_ms")?);
    let (done, wall, device) = (f64s("done_at_ms")?, f64s("wall_ms")?, f64s("device_ms")?);
    let split = column("split_depth")?.as_primitive::<UInt32Type>().clone();
    let reasons = column("flush_reason")?.as_string::<i32>().clone();
    let memory = column("memory")?.as_struct().clone();
    let memory_columns: Vec<_> = (0..MEMORY_FIELDS.len())
        .map(|i| memory.column(i).as_primitive::<Int64Type>().clone())
        .collect();
    (0..batch.num_rows())
        .map(|i| {
            let flush_reason = FlushReason::parse(reasons.value(i))
                .ok_or_else(|| content(format!("unknown flush_reason {:?}", reasons.value(i))))?;
            let m = |k: usize| memory_columns[k].value(i);
            Ok(BatchRecord {
                seq: seq.value(i),
                rows: rows.value(i) as usize,
                segments: segments.value(i) as usize,
                padded_segments: padded.value(i) as usize,
                flush_reason,
                queued_at_ms: queued.value(i),
                launch_ms: launch.value(i),
                done_at_ms: done.value(i),
                wall_ms: wall.value(i),
                device_ms: device.is_valid(i).then(|| device.value(i)),
                split_depth: split.value(i),
                memory: memory.is_valid(i).then(|| MemoryStats {
                    allocated: m(0),
                    allocated_peak: m(1),
                    reserved: m(2),
                    reserved_peak: m(3),
                    inactive_split: m(4),
                    alloc_retries: m(5),
                    ooms: m(6),
                    device_free: m(7),
                    device_total: m(8),
                }),
            })
        })
        .collect()
}

/// Rows per record batch while reading batch files back.
const READ_BATCH_ROWS: usize = 16 * 1024;

/// Adds committed batch files to `totals`: the totals their commit
/// records carry, or, for a file whose record has none (written before
/// they were carried), its records read back a record batch at a time.
pub fn add_batch_files(
    store: &dyn Store,
    files: &[FileEntry],
    totals: &mut BatchTotals,
) -> Result<(), FileError> {
    for file in files {
        match &file.batch_totals {
            Some(carried) => totals.merge(carried),
            None => add_records_read_back(store, file, totals)?,
        }
    }
    Ok(())
}

fn add_records_read_back(
    store: &dyn Store,
    file: &FileEntry,
    totals: &mut BatchTotals,
) -> Result<(), FileError> {
    let location = store.locate(&file.key);
    let parquet_error = |source| FileError::Parquet {
        location: location.clone(),
        source,
    };
    let bytes = read_verified(store, file)?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
        .and_then(|b| b.with_batch_size(READ_BATCH_ROWS).build())
        .map_err(parquet_error)?;
    for batch in reader {
        let batch = batch.map_err(|source| FileError::Arrow {
            location: location.clone(),
            source,
        })?;
        records_of(&batch, &location)?
            .iter()
            .for_each(|r| totals.add(r));
    }
    Ok(())
}

/// Concatenates committed batch files into `dest` (always written, maybe
/// empty), as `merge_rejects` does for rejects. Returns the records.
pub fn merge_batches(
    store: &dyn Store,
    batch_parts: &[FileEntry],
    dest: &str,
) -> Result<u64, FileError> {
    merge_parquet(store, batch_parts, dest, batches_schema(), &[])
}
