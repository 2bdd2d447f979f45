//! Rejected rows, committed as they arise (never collected in memory for
//! the whole run): each writer thread appends its rejects to its own file
//! under `_progress/`, committed with its part files; the run's commit
//! concatenates them into `_rejects.parquet`, a batch at a time.

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, StringArray, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;

use super::committing::{merge_parquet, CommittingParquet};
use super::store::Store;
use super::{parts, WriterError};
use segpredict_core::message::{IdKind, Reject, RejectKind, RowId, SkippedFile, Sources};

/// `_rejects.parquet`'s columns. The id keeps the type the part files give
/// it, so rejects join back to the input and the output on it; it is null
/// where the id could not be read. `source_row` is null only for a
/// `bad_file` row, which stands for a whole skipped file.
pub fn rejects_schema(id_type: DataType) -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", id_type, true),
        Field::new("source_file", DataType::Utf8, false),
        Field::new("source_row", DataType::Int64, true),
        Field::new("kind", DataType::Utf8, false),
        Field::new("reason", DataType::Utf8, false),
    ]))
}

/// The ids of rejects, typed as the input's id column.
fn id_column(rejects: &[Reject], id_kind: IdKind) -> ArrayRef {
    let ids = rejects.iter().map(|r| r.id.as_ref());
    match id_kind {
        IdKind::Str => Arc::new(
            ids.map(|id| id.map(|id| id.to_string()))
                .collect::<StringArray>(),
        ),
        // An integer id column yields ids of its own kind only.
        IdKind::Int => Arc::new(
            ids.map(|id| match id {
                Some(RowId::Int(v)) => Some(*v),
                _ => None,
            })
            .collect::<Int64Array>(),
        ),
        IdKind::UInt => Arc::new(
            ids.map(|id| match id {
                Some(RowId::UInt(v)) => Some(*v),
                _ => None,
            })
            .collect::<UInt64Array>(),
        ),
    }
}

/// Rejects as one record batch of `_rejects.parquet`'s schema.
fn rejects_batch(
    rejects: &[Reject],
    sources: &Sources,
    id_kind: IdKind,
) -> Result<RecordBatch, arrow::error::ArrowError> {
    let source_name = |r: &Reject| {
        sources
            .get(r.origin.file_idx as usize)
            .map(|f| f.path.display().to_string())
            .unwrap_or_default()
    };
    let columns: Vec<ArrayRef> = vec![
        id_column(rejects, id_kind),
        Arc::new(
            rejects
                .iter()
                .map(|r| Some(source_name(r)))
                .collect::<StringArray>(),
        ),
        Arc::new(
            rejects
                .iter()
                .map(|r| Some(r.origin.row_idx as i64))
                .collect::<Int64Array>(),
        ),
        Arc::new(
            rejects
                .iter()
                .map(|r| Some(r.kind.as_str()))
                .collect::<StringArray>(),
        ),
        Arc::new(
            rejects
                .iter()
                .map(|r| Some(r.reason.as_str()))
                .collect::<StringArray>(),
        ),
    ];
    RecordBatch::try_new(rejects_schema(parts::id_type(id_kind)), columns)
}

/// One writer thread's open rejects file.
pub struct RejectPart {
    file: CommittingParquet,
    id_kind: IdKind,
}

impl RejectPart {
    pub fn create(store: &dyn Store, key: &str, id_kind: IdKind) -> Result<Self, WriterError> {
        let props = parts::streamed_properties();
        let schema = rejects_schema(parts::id_type(id_kind));
        Ok(Self {
            file: CommittingParquet::create(store, key, schema, props)?,
            id_kind,
        })
    }

    pub fn write(&mut self, rejects: &[Reject], sources: &Sources) -> Result<(), WriterError> {
        let batch =
            rejects_batch(rejects, sources, self.id_kind).map_err(|source| WriterError::Arrow {
                location: self.file.location().to_string(),
                source,
            })?;
        for reject in rejects {
            self.file.covers(reject.origin);
        }
        self.file.write(&batch)
    }

    pub fn commit(self) -> Result<crate::log::FileEntry, WriterError> {
        Ok(self.file.commit()?.entry(crate::log::FileKind::Rejects))
    }
}

/// Concatenates committed rejects files into `dest` (always written, maybe
/// empty: its presence says the run checked), under a temporary name no
/// other process uses, so two shards committing at once each write a whole
/// file, then one `bad_file` row per skipped input file. `id_type` is the
/// run's id type (the parts carry it too; it types the file when there are
/// none). Returns the rows written, skipped files included.
pub fn merge_rejects(
    store: &dyn Store,
    reject_parts: &[crate::log::FileEntry],
    dest: &str,
    id_type: DataType,
    skipped: &[SkippedFile],
) -> Result<u64, WriterError> {
    let schema = rejects_schema(id_type);
    let bad_files = bad_file_rows(skipped, &schema).map_err(|source| WriterError::Arrow {
        location: store.locate(dest),
        source,
    })?;
    merge_parquet(store, reject_parts, dest, schema, &[bad_files])
}

/// One row per skipped file: no id, no row, the file's path and why.
fn bad_file_rows(
    skipped: &[SkippedFile],
    schema: &SchemaRef,
) -> Result<RecordBatch, arrow::error::ArrowError> {
    let n = skipped.len();
    let id_type = schema.field(0).data_type();
    let columns: Vec<ArrayRef> = vec![
        arrow::array::new_null_array(id_type, n),
        Arc::new(
            skipped
                .iter()
                .map(|f| Some(f.path.display().to_string()))
                .collect::<StringArray>(),
        ),
        Arc::new(Int64Array::from(vec![None; n])),
        Arc::new(StringArray::from(vec![RejectKind::BadFile.as_str(); n])),
        Arc::new(
            skipped
                .iter()
                .map(|f| Some(f.reason.as_str()))
                .collect::<StringArray>(),
        ),
    ];
    RecordBatch::try_new(schema.clone(), columns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use segpredict_core::message::{Origin, RowId};

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
        let store = crate::store::LocalStore::new(dir.path());
        let file = |name: &str| segpredict_core::message::InputFile {
            path: name.into(),
            size_bytes: 0,
            modified: None,
            rows: 10,
            row_groups: 1,
            footer_sha256: String::new(),
            version: String::new(),
            partitions: Vec::new(),
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

        let dest = "_rejects.parquet";
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
