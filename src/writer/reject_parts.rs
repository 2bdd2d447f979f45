//! Rejected rows, committed as they arise (never collected in memory for
//! the whole run): each writer thread appends its rejects to its own file
//! under `_progress/`, committed with its part files; the run's commit
//! concatenates them into `_rejects.parquet`, a batch at a time.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, StringArray, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::committing::CommittingParquet;
use super::{durable, parts, Compression, WriterError};
use crate::message::{IdKind, Reject, RowId, Sources};

/// `_rejects.parquet`'s columns. The id keeps the type the part files give
/// it, so rejects join back to the input and the output on it; it is null
/// where the id could not be read.
pub fn rejects_schema(id_type: DataType) -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", id_type, true),
        Field::new("source_file", DataType::Utf8, false),
        Field::new("source_row", DataType::Int64, false),
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
    pub fn create(
        temp: PathBuf,
        final_path: PathBuf,
        id_kind: IdKind,
    ) -> Result<Self, WriterError> {
        let props = parts::properties(Compression::Zstd);
        let schema = rejects_schema(parts::id_type(id_kind));
        Ok(Self {
            file: CommittingParquet::create(temp, final_path, schema, props)?,
            id_kind,
        })
    }

    pub fn write(&mut self, rejects: &[Reject], sources: &Sources) -> Result<(), WriterError> {
        let batch =
            rejects_batch(rejects, sources, self.id_kind).map_err(|source| WriterError::Arrow {
                path: self.file.temp_path().to_path_buf(),
                source,
            })?;
        self.file.write(&batch)
    }

    pub fn commit(self) -> Result<PathBuf, WriterError> {
        self.file.commit()
    }
}

/// Rows per batch while merging: bounds the merge's memory.
const MERGE_BATCH_ROWS: usize = 16 * 1024;

/// Concatenates committed rejects files into `dest` (always written, maybe
/// empty: its presence says the run checked), under a temporary name no
/// other process uses, so two shards committing at once each write a whole
/// file. `id_type` is the run's id type (the parts carry it too; it types
/// the file when there are none). Returns the rows written.
pub fn merge_rejects(
    reject_parts: &[PathBuf],
    dest: &Path,
    id_type: DataType,
) -> Result<u64, WriterError> {
    let temp = durable::unique_temp_name(dest);
    let props = parts::properties(Compression::Zstd);
    let schema = rejects_schema(id_type);
    let mut out = CommittingParquet::create(temp, dest.to_path_buf(), schema.clone(), props)?;
    for part in reject_parts {
        let parquet_error = |source| WriterError::Parquet {
            path: part.clone(),
            source,
        };
        let file = std::fs::File::open(part).map_err(|source| WriterError::Io {
            path: part.clone(),
            source,
        })?;
        let reader = ParquetRecordBatchReaderBuilder::try_new(file)
            .and_then(|b| b.with_batch_size(MERGE_BATCH_ROWS).build())
            .map_err(parquet_error)?;
        for batch in reader {
            let arrow_error = |source| WriterError::Arrow {
                path: part.clone(),
                source,
            };
            // The same columns under the canonical schema, whatever
            // metadata the file's copy of it carries.
            let batch = batch.map_err(arrow_error)?;
            let batch = RecordBatch::try_new(schema.clone(), batch.columns().to_vec())
                .map_err(arrow_error)?;
            out.write(&batch)?;
        }
    }
    let rows = out.rows() as u64;
    out.commit()?;
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{Origin, RowId};

    fn reject(file_idx: u32, row_idx: u64) -> Reject {
        Reject {
            id: Some(RowId::Int(row_idx as i64)),
            origin: Origin { file_idx, row_idx },
            kind: crate::message::RejectKind::NullSegments,
            reason: "bad".into(),
        }
    }

    #[test]
    fn parts_commit_whole_and_merge_into_one_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str| crate::message::InputFile {
            path: name.into(),
            size_bytes: 0,
            modified: None,
            rows: 10,
            row_groups: 1,
        };
        let sources: Sources = Arc::new(vec![file("a.parquet"), file("b.parquet")]);
        let mut finals = Vec::new();
        for (i, rows) in [[0u64, 1], [5, 6]].iter().enumerate() {
            let final_path = dir.path().join(format!("rejects-{i}.parquet"));
            let mut part = RejectPart::create(
                dir.path().join(format!(".rejects-{i}.inprogress")),
                final_path.clone(),
                IdKind::Int,
            )
            .unwrap();
            let rejects: Vec<Reject> = rows.iter().map(|&r| reject(i as u32, r)).collect();
            part.write(&rejects, &sources).unwrap();
            finals.push(part.commit().unwrap());
        }
        // An uncommitted part leaves nothing behind.
        let dropped = dir.path().join(".rejects-2.inprogress");
        let mut part =
            RejectPart::create(dropped.clone(), dir.path().join("x"), IdKind::Int).unwrap();
        part.write(&[reject(0, 9)], &sources).unwrap();
        drop(part);
        assert!(!dropped.exists());

        let dest = dir.path().join("_rejects.parquet");
        assert_eq!(merge_rejects(&finals, &dest, DataType::Int64).unwrap(), 4);
        let file = std::fs::File::open(&dest).unwrap();
        let builder = ParquetRecordBatchReaderBuilder::try_new(file).unwrap();
        assert_eq!(
            builder.schema().field_with_name("id").unwrap().data_type(),
            &DataType::Int64
        );
        let rows: usize = builder
            .build()
            .unwrap()
            .map(|b| b.unwrap().num_rows())
            .sum();
        assert_eq!(rows, 4);
        assert_eq!(merge_rejects(&[], &dest, DataType::Int64).unwrap(), 0);
    }
}
