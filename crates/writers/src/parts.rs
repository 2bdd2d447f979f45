//! One part file: written under a hidden temporary name, committed whole.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, Float32Array, Int32Array, Int64Array, StringArray, StringDictionaryBuilder,
};
use arrow::datatypes::{DataType, Field, Int32Type, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use parquet::basic::{GzipLevel, ZstdLevel};
use parquet::file::properties::WriterProperties;

use segpredict_checkpoint::rejects::id_type;
use segpredict_checkpoint::store::Store;
use segpredict_checkpoint::{CommittingParquet, FileEntry, FileError, FileKind};

use super::{Compression, OutputSchema, WriterError};
use segpredict_core::message::{IdKind, Predictions, RowId};

pub struct PartWriter {
    file: CommittingParquet,
    schema: SchemaRef,
    output: OutputSchema,
}

/// The part files' columns, the one place they are decided: the id as
/// read, the prediction, and where the row came from, so any order can be
/// restored by sorting.
pub fn output_arrow_schema(output: &OutputSchema) -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", id_type(output.id_kind), false),
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
    /// Starts the part `key`, visible only once committed.
    pub fn create(
        store: &dyn Store,
        key: &str,
        compression: Compression,
        output: &OutputSchema,
    ) -> Result<Self, WriterError> {
        let schema = output_arrow_schema(output);
        let file = CommittingParquet::create(store, key, schema.clone(), properties(compression))?;
        Ok(Self {
            file,
            schema,
            output: output.clone(),
        })
    }

    pub fn rows(&self) -> usize {
        self.file.rows()
    }

    pub fn write(&mut self, predictions: &Predictions) -> Result<(), WriterError> {
        let batch = self.record_batch(predictions)?;
        for row in &predictions.rows {
            self.file.covers(row.origin);
        }
        Ok(self.file.write(&batch)?)
    }

    /// Puts the part under its name, whole, for a commit record to name;
    /// on failure nothing is left behind.
    pub fn finish(self) -> Result<FileEntry, WriterError> {
        Ok(self.file.commit()?.entry(FileKind::Part))
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
        let ids = id_array(self.output.id_kind, p);
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
        let batch = RecordBatch::try_new(self.schema.clone(), columns);
        batch.map_err(|source| {
            WriterError::File(FileError::Arrow {
                location: self.file.location().to_string(),
                source,
            })
        })
    }
}

/// The ids of the rows, in the id column's type as the input had it.
fn id_array(kind: IdKind, p: &Predictions) -> ArrayRef {
    match kind {
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
                    _ => None,
                })
                .collect::<Int64Array>(),
        ),
        IdKind::UInt => Arc::new(
            p.rows
                .iter()
                .map(|r| match r.id {
                    RowId::UInt(v) => Some(v),
                    _ => None,
                })
                .collect::<arrow::array::UInt64Array>(),
        ),
    }
}
