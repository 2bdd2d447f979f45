//! The format of rejected rows: each writer thread (the
//! `segpredict-writers` crate) appends its rejects to its own file under
//! `_progress/` as they arise, committed with its part files; the run's
//! commit concatenates them into `_rejects/rejects.parquet`
//! ([`crate::layout::REJECTS`]), a batch at a time.

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, StringArray, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;

use crate::committing::merge_parquet;
use crate::log::FileEntry;
use crate::store::Store;
use crate::FileError;
use segpredict_core::message::{IdKind, Reject, RejectKind, RowId, SkippedFile, Sources};

/// The Arrow type ids of this kind are written as, in parts and rejects.
pub fn id_type(id_kind: IdKind) -> DataType {
    match id_kind {
        IdKind::Str => DataType::Utf8,
        IdKind::Int => DataType::Int64,
        IdKind::UInt => DataType::UInt64,
    }
}

/// `_rejects/rejects.parquet`'s columns. The id keeps the type the part files give
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

/// Rejects as one record batch of `_rejects/rejects.parquet`'s schema.
pub fn rejects_batch(
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
    RecordBatch::try_new(rejects_schema(id_type(id_kind)), columns)
}

/// Concatenates committed rejects files into `dest` (always written, maybe
/// empty: its presence says the run checked), under a temporary name no
/// other process uses, so two shards committing at once each write a whole
/// file, then one `bad_file` row per skipped input file. `id_type` is the
/// run's id type (the parts carry it too; it types the file when there are
/// none). Returns the rows written, skipped files included.
pub fn merge_rejects(
    store: &dyn Store,
    reject_parts: &[FileEntry],
    dest: &str,
    id_type: DataType,
    skipped: &[SkippedFile],
) -> Result<u64, FileError> {
    let schema = rejects_schema(id_type);
    let bad_files = bad_file_rows(skipped, &schema).map_err(|source| FileError::Arrow {
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
