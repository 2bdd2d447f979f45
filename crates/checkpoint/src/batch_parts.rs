//! The run report's per-batch records, committed as they arise (never
//! held for the whole run): each writer thread appends the records it
//! receives to its own file under `_progress/`, committed with its part
//! files under the same rules; earlier attempts' files are read back, a
//! batch at a time, for the report's totals; the run's commit concatenates
//! every shard's and attempt's into `_batches.parquet`.
//!
//! The one conversion between a [`BatchRecord`] and a row of these files is
//! here, both ways (`records_batch`, `records_of`), and a test round-trips
//! every field.

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

use super::committing::{merge_parquet, CommittingParquet};
use super::layout::AttemptNames;
use super::store::Store;
use super::{parts, WriterError};
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

/// `_batches.parquet`'s columns: the shard (its 0-based index) and attempt
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
fn records_batch(
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

/// The records of one record batch of the batch file `path`.
fn records_of(batch: &RecordBatch, location: &str) -> Result<Vec<BatchRecord>, WriterError> {
    let content = |problem: String| WriterError::Content {
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

/// Records a writer holds before it hands them to the Parquet writer, so
/// each is not an Arrow batch of its own.
const PENDING_RECORDS: usize = 256;

/// One writer thread's open batch file.
pub struct BatchPart {
    file: CommittingParquet,
    names: AttemptNames,
    pending: Vec<BatchRecord>,
}

impl BatchPart {
    pub fn create(store: &dyn Store, key: &str, names: AttemptNames) -> Result<Self, WriterError> {
        let props = parts::streamed_properties();
        Ok(Self {
            file: CommittingParquet::create(store, key, batches_schema(), props)?,
            names,
            pending: Vec::with_capacity(PENDING_RECORDS),
        })
    }

    pub fn write(&mut self, record: BatchRecord) -> Result<(), WriterError> {
        self.pending.push(record);
        match self.pending.len() >= PENDING_RECORDS {
            true => self.flush(),
            false => Ok(()),
        }
    }

    fn flush(&mut self) -> Result<(), WriterError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let batch =
            records_batch(&self.pending, self.names).map_err(|source| WriterError::Arrow {
                location: self.file.location().to_string(),
                source,
            })?;
        self.file.write(&batch)?;
        self.pending.clear();
        Ok(())
    }

    pub fn commit(mut self) -> Result<crate::log::FileEntry, WriterError> {
        self.flush()?;
        Ok(self.file.commit()?.entry(crate::log::FileKind::Batches))
    }
}

/// Rows per record batch while reading batch files back.
const READ_BATCH_ROWS: usize = 16 * 1024;

/// Adds the records of committed batch files to `totals`, a record batch
/// at a time.
pub fn add_batch_files(
    store: &dyn Store,
    files: &[crate::log::FileEntry],
    totals: &mut BatchTotals,
) -> Result<(), WriterError> {
    for file in files {
        let location = store.locate(&file.key);
        let parquet_error = |source| WriterError::Parquet {
            location: location.clone(),
            source,
        };
        let bytes = super::committing::read_verified(store, file)?;
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
            .and_then(|b| b.with_batch_size(READ_BATCH_ROWS).build())
            .map_err(parquet_error)?;
        for batch in reader {
            let batch = batch.map_err(|source| WriterError::Arrow {
                location: location.clone(),
                source,
            })?;
            records_of(&batch, &location)?
                .iter()
                .for_each(|r| totals.add(r));
        }
    }
    Ok(())
}

/// Concatenates committed batch files into `dest` (always written, maybe
/// empty), as `merge_rejects` does for rejects. Returns the records.
pub fn merge_batches(
    store: &dyn Store,
    batch_parts: &[crate::log::FileEntry],
    dest: &str,
) -> Result<u64, WriterError> {
    merge_parquet(store, batch_parts, dest, batches_schema(), &[])
}

#[cfg(test)]
mod tests {
    use super::*;
    use segpredict_core::shard::ShardSpec;

    fn record(seq: u64, memory: bool) -> BatchRecord {
        BatchRecord {
            seq,
            rows: 3,
            segments: 40,
            padded_segments: 64,
            flush_reason: FlushReason::EndOfInput,
            queued_at_ms: 1.5,
            launch_ms: 0.25,
            done_at_ms: 4.0,
            wall_ms: 2.5,
            device_ms: memory.then_some(2.0),
            split_depth: 1,
            memory: memory.then_some(MemoryStats {
                allocated: 1,
                allocated_peak: 2,
                reserved: 3,
                reserved_peak: 4,
                inactive_split: 5,
                alloc_retries: 6,
                ooms: 7,
                device_free: 8,
                device_total: 9,
            }),
        }
    }

    #[test]
    fn records_round_trip_through_committed_files_and_merge() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::LocalStore::new(dir.path());
        let names = AttemptNames {
            shard: ShardSpec::new(2, 3).unwrap(),
            attempt: 2,
        };
        let records: Vec<_> = (0..600).map(|seq| record(seq, seq % 2 == 0)).collect();
        let committed = "batches-1.parquet".to_string();
        let mut part = BatchPart::create(&store, &committed, names).unwrap();
        for r in &records {
            part.write(r.clone()).unwrap();
        }
        let entry = part.commit().unwrap();
        assert_eq!(entry.key, committed);

        let file = std::fs::File::open(dir.path().join(&committed)).unwrap();
        let batches = ParquetRecordBatchReaderBuilder::try_new(file)
            .unwrap()
            .build()
            .unwrap();
        let mut read = Vec::new();
        for batch in batches {
            let batch = batch.unwrap();
            let shards = batch
                .column_by_name("shard")
                .unwrap()
                .as_primitive::<UInt32Type>();
            assert!(shards.values().iter().all(|&s| s == 2));
            read.extend(records_of(&batch, &committed).unwrap());
        }
        assert_eq!(read, records);

        let mut totals = BatchTotals::default();
        add_batch_files(&store, std::slice::from_ref(&entry), &mut totals).unwrap();
        assert_eq!(totals.batches, 600);
        assert_eq!(totals.device_ms_histogram.count(), 300);

        let dest = "_batches.parquet";
        assert_eq!(
            merge_batches(&store, &[entry.clone(), entry.clone()], dest).unwrap(),
            1200
        );
        assert_eq!(merge_batches(&store, &[], dest).unwrap(), 0);
        // A committed file changed since its record: refused, naming it.
        std::fs::write(dir.path().join(&committed), b"not what was committed").unwrap();
        let e = add_batch_files(&store, &[entry], &mut totals).unwrap_err();
        assert!(e.to_string().contains("batches-1.parquet"), "{e}");
    }
}
