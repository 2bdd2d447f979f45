//! `_rejects.parquet`: every row that did not reach the output, and why.

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use parquet::arrow::ArrowWriter;

use super::{Compression, OutputLayout, WriterError};
use crate::message::{Reject, Sources};

/// Writes all rejects (possibly none: the file's presence says the run
/// checked) sorted by file and row, under a temporary name first.
pub fn write_rejects(
    layout: &OutputLayout,
    rejects: &mut [Reject],
    sources: &Sources,
) -> Result<(), WriterError> {
    rejects.sort_by_key(|r| (r.origin.file_idx, r.origin.row_idx));
    let path = layout.rejects();
    let temp = layout.in_progress(&path);
    let schema = rejects_schema();
    let columns = reject_columns(rejects, sources);
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

fn rejects_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, true),
        Field::new("source_file", DataType::Utf8, false),
        Field::new("source_row", DataType::Int64, false),
        Field::new("kind", DataType::Utf8, false),
        Field::new("reason", DataType::Utf8, false),
    ]))
}

fn reject_columns(rejects: &[Reject], sources: &Sources) -> Vec<ArrayRef> {
    let source_name = |r: &Reject| {
        sources
            .get(r.origin.file_idx as usize)
            .map(|f| f.path.display().to_string())
            .unwrap_or_default()
    };
    vec![
        Arc::new(
            rejects
                .iter()
                .map(|r| r.id.as_ref().map(|id| id.to_string()))
                .collect::<StringArray>(),
        ),
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
