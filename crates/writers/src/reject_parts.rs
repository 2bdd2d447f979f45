//! One writer thread's rejects file, appended to as rejects arise (never
//! collected in memory for the whole run) and committed with its part
//! files. Its format, and the run's merge of them, are the checkpoint's
//! (`segpredict_checkpoint::rejects`).

use segpredict_checkpoint::committing::streamed_properties;
use segpredict_checkpoint::rejects::{id_type, rejects_batch, rejects_schema};
use segpredict_checkpoint::store::Store;
use segpredict_checkpoint::{CommittingParquet, FileEntry, FileError, FileKind};
use segpredict_core::message::{IdKind, Reject, Sources};

use crate::WriterError;

/// One writer thread's open rejects file.
pub struct RejectPart {
    file: CommittingParquet,
    id_kind: IdKind,
}

impl RejectPart {
    pub fn create(store: &dyn Store, key: &str, id_kind: IdKind) -> Result<Self, WriterError> {
        let props = streamed_properties();
        let schema = rejects_schema(id_type(id_kind));
        Ok(Self {
            file: CommittingParquet::create(store, key, schema, props)?,
            id_kind,
        })
    }

    pub fn write(&mut self, rejects: &[Reject], sources: &Sources) -> Result<(), WriterError> {
        let batch = rejects_batch(rejects, sources, self.id_kind).map_err(|source| {
            WriterError::File(FileError::Arrow {
                location: self.file.location().to_string(),
                source,
            })
        })?;
        for reject in rejects {
            self.file.covers(reject.origin);
        }
        Ok(self.file.write(&batch)?)
    }

    pub fn commit(self) -> Result<FileEntry, WriterError> {
        Ok(self.file.commit()?.entry(FileKind::Rejects))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::StringArray;
    use arrow::datatypes::DataType;
    use arrow::record_batch::RecordBatch;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use segpredict_checkpoint::rejects::merge_rejects;
    use segpredict_core::message::{Origin, RowId, SkippedFile};
    use std::sync::Arc;

    fn reject(file_idx: u32, row_idx: u64) -> Reject {
        Reject {
            id: Some(RowId::Int(row_idx as i64)),
            origin: Origin { file_idx, row_idx },
            kind: segpredict_core::message::RejectKind::NullSegments,
            reason: "bad".into(),
        }
    }

    /// `rows` rows; the last is the skipped file: no id, no row, its path,
    /// kind and reason.
    fn assert_skipped_file_comes_last(batches: &[RecordBatch], rows: usize) {
        assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), rows);
        let last = batches.last().unwrap();
        let last = last.slice(last.num_rows() - 1, 1);
        assert!(last.column(0).is_null(0) && last.column(2).is_null(0));
        let text = |i: usize| {
            let column = last.column(i).as_any().downcast_ref::<StringArray>();
            column.unwrap().value(0).to_string()
        };
        assert_eq!(
            [text(1), text(3), text(4)],
            ["c.parquet", "bad_file", "truncated"]
        );
    }

    #[test]
    fn parts_commit_whole_and_merge_into_one_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = segpredict_checkpoint::LocalStore::new(dir.path());
        let file = |name: &str| segpredict_core::message::InputFile {
            rows: 10,
            row_groups: 1,
            ..segpredict_core::message::InputFile::unplanned(name.into())
        };
        let sources: Sources = Arc::new(vec![file("a.parquet"), file("b.parquet")]);
        let mut finals = Vec::new();
        for (i, rows) in [[0u64, 1], [5, 6]].iter().enumerate() {
            let key = format!("rejects-{i}.parquet");
            let mut part = RejectPart::create(&store, &key, IdKind::Int).unwrap();
            let rejects: Vec<Reject> = rows.iter().map(|&r| reject(i as u32, r)).collect();
            part.write(&rejects, &sources).unwrap();
            let entry = part.commit().unwrap();
            assert_eq!(entry.key, key);
            assert_eq!(entry.covers.len(), 1);
            finals.push(entry);
        }
        // An uncommitted part leaves nothing behind.
        let mut part = RejectPart::create(&store, "x", IdKind::Int).unwrap();
        part.write(&[reject(0, 9)], &sources).unwrap();
        drop(part);
        let keys: Vec<String> = finals.iter().map(|f| f.key.clone()).collect();
        assert_eq!(store.list("").unwrap(), keys);

        let dest = segpredict_checkpoint::layout::REJECTS;
        let skipped = [SkippedFile {
            path: "c.parquet".into(),
            reason: "truncated".into(),
        }];
        assert_eq!(
            merge_rejects(&store, &finals, dest, DataType::Int64, &skipped).unwrap(),
            5
        );
        let file = std::fs::File::open(dir.path().join(dest)).unwrap();
        let builder = ParquetRecordBatchReaderBuilder::try_new(file).unwrap();
        assert_eq!(
            builder.schema().field_with_name("id").unwrap().data_type(),
            &DataType::Int64
        );
        let batches: Vec<RecordBatch> = builder.build().unwrap().map(|b| b.unwrap()).collect();
        assert_skipped_file_comes_last(&batches, 5);
        assert_eq!(
            merge_rejects(&store, &[], dest, DataType::Int64, &[]).unwrap(),
            0
        );
    }
}
