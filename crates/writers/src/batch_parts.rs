//! One writer thread's file of the run report's per-batch records,
//! committed with its part files under the same rules. Its format, and
//! reading it back, are the checkpoint's (`segpredict_checkpoint::batches`).

use segpredict_checkpoint::batches::{batches_schema, records_batch};
use segpredict_checkpoint::committing::streamed_properties;
use segpredict_checkpoint::layout::AttemptNames;
use segpredict_checkpoint::store::Store;
use segpredict_checkpoint::{CommittingParquet, FileEntry, FileError, FileKind};
use segpredict_core::message::BatchRecord;
use segpredict_core::stats::BatchTotals;

use crate::WriterError;

/// Records a writer holds before it hands them to the Parquet writer, so
/// each is not an Arrow batch of its own.
const PENDING_RECORDS: usize = 256;

/// One writer thread's open batch file.
pub struct BatchPart {
    file: CommittingParquet,
    names: AttemptNames,
    pending: Vec<BatchRecord>,
    /// Of every record written, carried in the file's commit record.
    totals: BatchTotals,
}

impl BatchPart {
    pub fn create(store: &dyn Store, key: &str, names: AttemptNames) -> Result<Self, WriterError> {
        let props = streamed_properties();
        Ok(Self {
            file: CommittingParquet::create(store, key, batches_schema(), props)?,
            names,
            pending: Vec::with_capacity(PENDING_RECORDS),
            totals: BatchTotals::default(),
        })
    }

    pub fn write(&mut self, record: BatchRecord) -> Result<(), WriterError> {
        self.totals.add(&record);
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
        let batch = records_batch(&self.pending, self.names).map_err(|source| {
            WriterError::File(FileError::Arrow {
                location: self.file.location().to_string(),
                source,
            })
        })?;
        self.file.write(&batch)?;
        self.pending.clear();
        Ok(())
    }

    pub fn commit(mut self) -> Result<FileEntry, WriterError> {
        self.flush()?;
        let mut entry = self.file.commit()?.entry(FileKind::Batches);
        entry.batch_totals = Some(self.totals);
        Ok(entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::AsArray;
    use arrow::datatypes::UInt32Type;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use segpredict_checkpoint::batches::{add_batch_files, merge_batches, records_of};
    use segpredict_core::message::{FlushReason, MemoryStats};
    use segpredict_core::shard::ShardSpec;
    use segpredict_core::stats::BatchTotals;

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
        let store = segpredict_checkpoint::LocalStore::new(dir.path());
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

        // The totals the commit record carries are those of the records
        // read back, which a record without them (an older log) costs.
        let carried = entry.batch_totals.clone().expect("carried totals");
        let without = FileEntry {
            batch_totals: None,
            ..entry.clone()
        };
        let mut read_back = BatchTotals::default();
        add_batch_files(&store, std::slice::from_ref(&without), &mut read_back).unwrap();
        assert_eq!(read_back, carried);
        let mut totals = BatchTotals::default();
        add_batch_files(&store, std::slice::from_ref(&entry), &mut totals).unwrap();
        assert_eq!(totals, carried);
        assert_eq!(totals.batches, 600);
        assert_eq!(totals.device_ms_histogram.count(), 300);

        let dest = segpredict_checkpoint::layout::BATCHES;
        assert_eq!(
            merge_batches(&store, &[entry.clone(), entry.clone()], dest).unwrap(),
            1200
        );
        assert_eq!(merge_batches(&store, &[], dest).unwrap(), 0);
        // A committed file changed since its record: refused, naming it.
        std::fs::write(dir.path().join(&committed), b"not what was committed").unwrap();
        let e = add_batch_files(&store, &[without], &mut totals).unwrap_err();
        assert!(e.to_string().contains("batches-1.parquet"), "{e}");
    }
}
