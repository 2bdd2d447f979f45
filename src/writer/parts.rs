//! One part file: written under a hidden temporary name, renamed when whole.

use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, Float32Array, Int32Array, Int64Array, StringArray, StringDictionaryBuilder,
};
use arrow::datatypes::{DataType, Field, Int32Type, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use parquet::arrow::ArrowWriter;
use parquet::basic::{GzipLevel, ZstdLevel};
use parquet::file::properties::WriterProperties;

use super::{Compression, OutputLayout, OutputSchema, WriterError};
use crate::message::{IdKind, Predictions, RowId};

pub struct PartWriter {
    temp: PathBuf,
    final_path: PathBuf,
    writer: Option<ArrowWriter<File>>,
    schema: SchemaRef,
    output: OutputSchema,
    rows: usize,
}

/// The output's columns: the id as read, the prediction, and where the row
/// came from, so any order can be restored by sorting.
pub fn arrow_schema(id_kind: IdKind) -> SchemaRef {
    let id_type = match id_kind {
        IdKind::Str => DataType::Utf8,
        IdKind::Int => DataType::Int64,
    };
    Arc::new(Schema::new(vec![
        Field::new("id", id_type, false),
        Field::new("label", DataType::Utf8, false),
        Field::new("label_id", DataType::Int32, false),
        Field::new("score", DataType::Float32, false),
        Field::new(
            "source_file",
            DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
            false,
        ),
        Field::new("source_row", DataType::Int64, false),
    ]))
}

pub fn properties(compression: Compression) -> WriterProperties {
    let codec = match compression {
        Compression::Zstd => parquet::basic::Compression::ZSTD(ZstdLevel::default()),
        Compression::Snappy => parquet::basic::Compression::SNAPPY,
        Compression::Gzip => parquet::basic::Compression::GZIP(GzipLevel::default()),
        Compression::None => parquet::basic::Compression::UNCOMPRESSED,
    };
    WriterProperties::builder().set_compression(codec).build()
}

impl PartWriter {
    pub fn create(
        layout: &OutputLayout,
        writer_idx: usize,
        seq: usize,
        compression: Compression,
        output: &OutputSchema,
    ) -> Result<Self, WriterError> {
        let final_path = layout.part(writer_idx, seq);
        let temp = layout.in_progress(&final_path);
        let file = File::create(&temp).map_err(|source| WriterError::Io {
            path: temp.clone(),
            source,
        })?;
        let schema = arrow_schema(output.id_kind);
        let writer = ArrowWriter::try_new(file, schema.clone(), Some(properties(compression)))
            .map_err(|source| WriterError::Parquet {
                path: temp.clone(),
                source,
            })?;
        Ok(Self {
            temp,
            final_path,
            writer: Some(writer),
            schema,
            output: output.clone(),
            rows: 0,
        })
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn write(&mut self, predictions: &Predictions) -> Result<(), WriterError> {
        let batch = self.record_batch(predictions)?;
        let temp = &self.temp;
        let writer = self
            .writer
            .as_mut()
            .ok_or_else(|| WriterError::Closed { path: temp.clone() })?;
        writer
            .write(&batch)
            .map_err(|source| WriterError::Parquet {
                path: temp.clone(),
                source,
            })?;
        self.rows += predictions.rows.len();
        Ok(())
    }

    /// Closes the file and gives it its final name.
    pub fn finish(mut self) -> Result<PathBuf, WriterError> {
        let path = self.temp.clone();
        if let Some(writer) = self.writer.take() {
            writer.close().map_err(|source| WriterError::Parquet {
                path: path.clone(),
                source,
            })?;
        }
        std::fs::rename(&self.temp, &self.final_path)
            .map_err(|source| WriterError::Io { path, source })?;
        Ok(self.final_path.clone())
    }

    fn record_batch(&self, p: &Predictions) -> Result<RecordBatch, WriterError> {
        let labels = &self.output.labels;
        let label_names = p
            .label_ids
            .iter()
            .map(|&id| {
                usize::try_from(id)
                    .ok()
                    .and_then(|i| labels.get(i))
                    .map(String::as_str)
                    .ok_or(WriterError::UnknownLabel {
                        label_id: id,
                        n_labels: labels.len(),
                    })
            })
            .collect::<Result<Vec<&str>, _>>()?;
        let ids: ArrayRef = match self.output.id_kind {
            IdKind::Str => Arc::new(
                p.rows
                    .iter()
                    .map(|r| Some(r.id.to_string()))
                    .collect::<StringArray>(),
            ),
            IdKind::Int => Arc::new(
                p.rows
                    .iter()
                    .map(|r| match r.id {
                        RowId::Int(v) => Some(v),
                        RowId::Str(_) => None,
                    })
                    .collect::<Int64Array>(),
            ),
        };
        let mut sources = StringDictionaryBuilder::<Int32Type>::new();
        for row in &p.rows {
            let file = self.output.sources.get(row.origin.file_idx as usize);
            sources.append_value(
                file.map(|f| f.path.display().to_string())
                    .unwrap_or_default(),
            );
        }
        let columns: Vec<ArrayRef> = vec![
            ids,
            Arc::new(StringArray::from(label_names)),
            Arc::new(Int32Array::from(p.label_ids.clone())),
            Arc::new(Float32Array::from(p.scores.clone())),
            Arc::new(sources.finish()),
            Arc::new(
                p.rows
                    .iter()
                    .map(|r| r.origin.row_idx as i64)
                    .collect::<Int64Array>(),
            ),
        ];
        RecordBatch::try_new(self.schema.clone(), columns).map_err(|source| WriterError::Arrow {
            path: self.temp.clone(),
            source,
        })
    }
}

impl Drop for PartWriter {
    /// A part dropped before `finish` (error, cancel) leaves no file behind.
    fn drop(&mut self) {
        if self.writer.is_some() {
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}
