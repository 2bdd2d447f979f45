//! One part file: written under a hidden temporary name, committed whole.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, Float32Array, Int32Array, Int64Array, ListArray, StringArray, StringDictionaryBuilder,
};
use arrow::buffer::OffsetBuffer;
use arrow::datatypes::{DataType, Field, FieldRef, Int32Type, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, SortField};
use parquet::basic::{GzipLevel, ZstdLevel};
use parquet::file::properties::WriterProperties;

use segpredict_checkpoint::rejects::id_type;
use segpredict_checkpoint::store::Store;
use segpredict_checkpoint::{CommittingParquet, FileEntry, FileError, FileKind};

use super::{Compression, OutputSchema, WriterError};
use segpredict_core::message::{IdKind, Predictions, RowId, TopK};

pub struct PartWriter {
    file: CommittingParquet,
    schema: SchemaRef,
    output: OutputSchema,
}

/// The part files' columns, the one place they are decided: the id as
/// read, the prediction, and where the row came from, so any order can be
/// restored by sorting; then, with `[writers] top_k`, the most probable
/// classes. [`PartWriter`] fills them in this order.
pub fn output_arrow_schema(output: &OutputSchema) -> SchemaRef {
    let mut fields = vec![
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
    ];
    if output.top_k.is_some() {
        fields.push(Field::new_list(
            "top_labels",
            top_item(DataType::Utf8),
            false,
        ));
        fields.push(Field::new_list(
            "top_scores",
            top_item(DataType::Float32),
            false,
        ));
    }
    let carried = output
        .carried
        .iter()
        .flat_map(|c| c.fields().iter().cloned());
    Arc::new(Schema::new(
        fields
            .into_iter()
            .map(Arc::new)
            .chain(carried)
            .collect::<Vec<_>>(),
    ))
}

/// The items of the top-k list columns: never null.
fn top_item(data_type: DataType) -> FieldRef {
    Arc::new(Field::new_list_field(data_type, false))
}

/// The label names of class ids, each checked against the labels file.
fn label_names<'a>(labels: &'a [String], ids: &[i32]) -> Result<Vec<&'a str>, WriterError> {
    ids.iter()
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
        .collect()
}

/// `top_labels` and `top_scores`: `k` items per row, most probable first.
fn top_columns(labels: &[String], top: &TopK) -> Result<[ArrayRef; 2], WriterError> {
    let rows = top.label_ids.len() / top.k.max(1);
    let offsets = || OffsetBuffer::from_lengths(std::iter::repeat_n(top.k, rows));
    let names = StringArray::from(label_names(labels, &top.label_ids)?);
    let scores = Float32Array::from(top.scores.clone());
    Ok([
        Arc::new(ListArray::new(
            top_item(DataType::Utf8),
            offsets(),
            Arc::new(names),
            None,
        )),
        Arc::new(ListArray::new(
            top_item(DataType::Float32),
            offsets(),
            Arc::new(scores),
            None,
        )),
    ])
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
        let names = label_names(labels, &p.label_ids)?;
        let ids = id_array(self.output.id_kind, p);
        let mut sources = StringDictionaryBuilder::<Int32Type>::new();
        for row in &p.rows {
            let file = self.output.sources.get(row.origin.file_idx as usize);
            sources.append_value(
                file.map(|f| f.path.display().to_string())
                    .unwrap_or_default(),
            );
        }
        let mut columns: Vec<ArrayRef> = vec![
            ids,
            Arc::new(StringArray::from(names)),
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
        // Asked for and not given, the columns are missing: an error below.
        if let (Some(_), Some(top)) = (self.output.top_k, &p.top) {
            columns.extend(top_columns(labels, top)?);
        }
        if let Some(carried) = &self.output.carried {
            columns.extend(self.carried_columns(carried, p)?);
        }
        let batch = RecordBatch::try_new(self.schema.clone(), columns);
        batch.map_err(|source| {
            WriterError::File(FileError::Arrow {
                location: self.file.location().to_string(),
                source,
            })
        })
    }
}

impl PartWriter {
    /// The rows' carried values, decoded from the row format the readers
    /// encoded them in (a converter over the same fields), each column
    /// cast back to its type as read where the row format gives another
    /// (a dictionary comes back as its values).
    fn carried_columns(
        &self,
        carried: &SchemaRef,
        p: &Predictions,
    ) -> Result<Vec<ArrayRef>, WriterError> {
        let arrow_error = |source| {
            WriterError::File(FileError::Arrow {
                location: self.file.location().to_string(),
                source,
            })
        };
        let fields: Vec<SortField> = carried
            .fields()
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect();
        let converter = RowConverter::new(fields).map_err(arrow_error)?;
        if p.rows.iter().any(|r| r.carried.is_empty()) {
            return Err(arrow_error(arrow::error::ArrowError::InvalidArgumentError(
                "a row came without its carried values".into(),
            )));
        }
        let parser = converter.parser();
        let arrays = converter
            .convert_rows(p.rows.iter().map(|r| parser.parse(&r.carried)))
            .map_err(arrow_error)?;
        arrays
            .into_iter()
            .zip(carried.fields())
            .map(
                |(array, field)| match array.data_type() == field.data_type() {
                    true => Ok(array),
                    false => arrow::compute::cast(&array, field.data_type()).map_err(arrow_error),
                },
            )
            .collect()
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
