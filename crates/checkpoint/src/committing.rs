//! A Parquet file streamed to the store and made visible whole, or not at
//! all on every other path: an error, a cancel, a panic unwinding, a full
//! disk (the store's [`Upload`] promise).

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;

use super::store::{Store, Upload};
use super::WriterError;

pub struct CommittingParquet {
    writer: Option<ArrowWriter<Box<dyn Upload>>>,
    location: String,
    rows: usize,
}

impl CommittingParquet {
    /// Starts `key` in `store`; it becomes visible on [`Self::commit`].
    pub fn create(
        store: &dyn Store,
        key: &str,
        schema: SchemaRef,
        properties: WriterProperties,
    ) -> Result<Self, WriterError> {
        let location = store.locate(key);
        let upload = store.upload(key)?;
        let writer = ArrowWriter::try_new(upload, schema, Some(properties)).map_err(|source| {
            WriterError::Parquet {
                location: location.clone(),
                source,
            }
        })?;
        Ok(Self {
            writer: Some(writer),
            location,
            rows: 0,
        })
    }

    pub fn location(&self) -> &str {
        &self.location
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn write(&mut self, batch: &RecordBatch) -> Result<(), WriterError> {
        let writer = self.writer.as_mut().ok_or_else(|| WriterError::Closed {
            location: self.location.clone(),
        })?;
        writer.write(batch).map_err(|source| WriterError::Parquet {
            location: self.location.clone(),
            source,
        })?;
        self.rows += batch.num_rows();
        Ok(())
    }

    /// Writes the footer and finishes the upload: the file is visible under
    /// its name, whole and durable. On failure nothing is.
    pub fn commit(mut self) -> Result<String, WriterError> {
        let writer = self.writer.take().ok_or_else(|| WriterError::Closed {
            location: self.location.clone(),
        })?;
        // Flushes the last row group and writes the footer.
        let upload = writer.into_inner().map_err(|source| WriterError::Parquet {
            location: self.location.clone(),
            source,
        })?;
        upload.finish()?;
        Ok(self.location)
    }
}

/// Rows per batch while merging: bounds the merge's memory.
const MERGE_BATCH_ROWS: usize = 16 * 1024;

/// Concatenates committed files of one schema into `dest`, then `extra`
/// (always written, maybe empty: its presence says the run checked), a
/// batch at a time; two shards committing at once each write a whole
/// object. Returns the rows written.
pub fn merge_parquet(
    store: &dyn Store,
    parts: &[String],
    dest: &str,
    schema: SchemaRef,
    extra: &[RecordBatch],
) -> Result<u64, WriterError> {
    let props = super::parts::streamed_properties();
    let mut out = CommittingParquet::create(store, dest, schema.clone(), props)?;
    for part in parts {
        let location = store.locate(part);
        let parquet_error = |source| WriterError::Parquet {
            location: location.clone(),
            source,
        };
        let bytes = store.read(part)?;
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
            .and_then(|b| b.with_batch_size(MERGE_BATCH_ROWS).build())
            .map_err(parquet_error)?;
        for batch in reader {
            let arrow_error = |source| WriterError::Arrow {
                location: location.clone(),
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
    for batch in extra {
        out.write(batch)?;
    }
    let rows = out.rows() as u64;
    out.commit()?;
    Ok(rows)
}
