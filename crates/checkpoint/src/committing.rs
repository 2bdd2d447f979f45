//! A Parquet file written under a temporary name and committed whole
//! (fsync, rename, directory fsync), or removed on every other path: an
//! error, a cancel, a panic unwinding, a full disk.

use std::fs::File;
use std::path::{Path, PathBuf};

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;

use super::durable::TempGuard;
use super::WriterError;

pub struct CommittingParquet {
    // Declared before the guard: the file is closed before it is removed.
    writer: Option<ArrowWriter<File>>,
    guard: TempGuard,
    final_path: PathBuf,
    rows: usize,
}

impl CommittingParquet {
    /// Creates `temp`; the file becomes `final_path` on [`Self::commit`].
    pub fn create(
        temp: PathBuf,
        final_path: PathBuf,
        schema: SchemaRef,
        properties: WriterProperties,
    ) -> Result<Self, WriterError> {
        let file = File::create(&temp).map_err(|source| WriterError::Io {
            path: temp.clone(),
            source,
        })?;
        let guard = TempGuard::new(temp);
        let writer = ArrowWriter::try_new(file, schema, Some(properties)).map_err(|source| {
            WriterError::Parquet {
                path: guard.path().to_path_buf(),
                source,
            }
        })?;
        Ok(Self {
            writer: Some(writer),
            guard,
            final_path,
            rows: 0,
        })
    }

    pub fn temp_path(&self) -> &Path {
        self.guard.path()
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn write(&mut self, batch: &RecordBatch) -> Result<(), WriterError> {
        let path = self.guard.path();
        let writer = self.writer.as_mut().ok_or_else(|| WriterError::Closed {
            path: path.to_path_buf(),
        })?;
        writer.write(batch).map_err(|source| WriterError::Parquet {
            path: path.to_path_buf(),
            source,
        })?;
        self.rows += batch.num_rows();
        Ok(())
    }

    /// Writes the footer, fsyncs, renames to the final name and fsyncs the
    /// directory. On failure the temporary file is removed.
    pub fn commit(mut self) -> Result<PathBuf, WriterError> {
        let path = self.guard.path().to_path_buf();
        let writer = self
            .writer
            .take()
            .ok_or_else(|| WriterError::Closed { path: path.clone() })?;
        // Flushes the last row group and writes the footer.
        let file = writer.into_inner().map_err(|source| WriterError::Parquet {
            path: path.clone(),
            source,
        })?;
        let final_path = std::mem::take(&mut self.final_path);
        let guard = std::mem::replace(&mut self.guard, TempGuard::disarmed());
        guard
            .commit(file, &final_path)
            .map_err(|source| WriterError::Io { path, source })?;
        Ok(final_path)
    }
}

/// Rows per batch while merging: bounds the merge's memory.
const MERGE_BATCH_ROWS: usize = 16 * 1024;

/// Concatenates committed files of one schema into `dest`, then `extra`
/// (always written, maybe empty: its presence says the run checked), a
/// batch at a time, under a temporary name no other process uses, so two
/// shards committing at once each write a whole file. Returns the rows
/// written.
pub fn merge_parquet(
    parts: &[PathBuf],
    dest: &Path,
    schema: SchemaRef,
    extra: &[RecordBatch],
) -> Result<u64, WriterError> {
    let temp = super::durable::unique_temp_name(dest);
    let props = super::parts::streamed_properties();
    let mut out = CommittingParquet::create(temp, dest.to_path_buf(), schema.clone(), props)?;
    for part in parts {
        let parquet_error = |source| WriterError::Parquet {
            path: part.clone(),
            source,
        };
        let file = File::open(part).map_err(|source| WriterError::Io {
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
    for batch in extra {
        out.write(batch)?;
    }
    let rows = out.rows() as u64;
    out.commit()?;
    Ok(rows)
}
