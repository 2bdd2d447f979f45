//! `_rejects.parquet`: every row that did not reach the output, and why.

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use parquet::arrow::ArrowWriter;

use super::{parts, Compression, OutputLayout, WriterError};
use crate::message::{IdKind, Reject, RowId, Sources};

/// Writes all rejects (possibly none: the file's presence says the run
/// checked) sorted by file and row, under a temporary name first.
pub fn write_rejects(
    layout: &OutputLayout,
    rejects: &mut [Reject],
    sources: &Sources,
    id_kind: IdKind,
) -> Result<(), WriterError> {
    rejects.sort_by_key(|r| (r.origin.file_idx, r.origin.row_idx));
    let path = layout.rejects();
    let temp = layout.in_progress(&path);
    let schema = rejects_schema(id_kind);
    let columns = reject_columns(rejects, sources, id_kind);
    let arrow_error = |source| WriterError::Arrow {
        path: path.clone(),
        source,
    };
    let parquet_error = |source| WriterError::Parquet {
        path: path.clone(),
        source,
    };
    let io_error = |source| WriterError::Io {
        path: path.clone(),
        source,
    };
    let batch = RecordBatch::try_new(schema.clone(), columns).map_err(arrow_error)?;
    let file = std::fs::File::create(&temp).map_err(io_error)?;
    let props = super::parts::properties(Compression::Zstd);
    let mut writer = ArrowWriter::try_new(file, schema, Some(props)).map_err(parquet_error)?;
    writer.write(&batch).map_err(parquet_error)?;
    writer.close().map_err(parquet_error)?;
    std::fs::rename(&temp, &path).map_err(io_error)
}

/// The id keeps the type the part files give it, so rejects join back to
/// the input and the output on it.
fn rejects_schema(id_kind: IdKind) -> SchemaRef {
    let id_field = parts::arrow_schema(id_kind)
        .field_with_name("id")
        .map_or_else(
            |_| Field::new("id", DataType::Utf8, true),
            |f| f.clone().with_nullable(true),
        );
    Arc::new(Schema::new(vec![
        id_field,
        Field::new("source_file", DataType::Utf8, false),
        Field::new("source_row", DataType::Int64, false),
        Field::new("kind", DataType::Utf8, false),
        Field::new("reason", DataType::Utf8, false),
    ]))
}

/// Null where the id could not be read.
fn id_column(rejects: &[Reject], id_kind: IdKind) -> ArrayRef {
    match id_kind {
        IdKind::Str => Arc::new(
            rejects
                .iter()
                .map(|r| r.id.as_ref().map(|id| id.to_string()))
                .collect::<StringArray>(),
        ),
        IdKind::Int => Arc::new(
            rejects
                .iter()
                .map(|r| match &r.id {
                    Some(RowId::Int(v)) => Some(*v),
                    // An integer id column yields integer ids only.
                    Some(RowId::Str(_)) | None => None,
                })
                .collect::<Int64Array>(),
        ),
    }
}

fn reject_columns(rejects: &[Reject], sources: &Sources, id_kind: IdKind) -> Vec<ArrayRef> {
    let source_name = |r: &Reject| {
        sources
            .get(r.origin.file_idx as usize)
            .map(|f| f.path.display().to_string())
            .unwrap_or_default()
    };
    vec![
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
    ]
}
