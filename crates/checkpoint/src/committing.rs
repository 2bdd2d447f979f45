//! A Parquet file streamed to the store and made visible whole, or not at
//! all on every other path: an error, a cancel, a panic unwinding, a full
//! disk (the store's [`Upload`] promise). Its size and SHA-256 are taken
//! as it streams, for the commit record that names it; whoever reads it
//! back checks them ([`read_verified`]).

use std::io::Write;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::basic::ZstdLevel;
use parquet::file::properties::WriterProperties;
use sha2::{Digest, Sha256};

use crate::log::{Coverage, FileEntry, FileKind};
use crate::store::{Store, StoreError, Upload};
use crate::FileError;

/// Rows per row group of the files written as a run goes (rejects, batch
/// records) and of the run's merged files: the Parquet writer holds a row
/// group in memory until it is full, so this, not the commit interval,
/// bounds what they hold.
const STREAMED_ROW_GROUP_ROWS: usize = 64 * 1024;

/// Zstd, in row groups of `STREAMED_ROW_GROUP_ROWS`.
pub fn streamed_properties() -> WriterProperties {
    WriterProperties::builder()
        .set_compression(parquet::basic::Compression::ZSTD(ZstdLevel::default()))
        .set_max_row_group_row_count(Some(STREAMED_ROW_GROUP_ROWS))
        .build()
}

/// One Parquet file being streamed to the store under its final key:
/// visible only after [`CommittingParquet::commit`] (and counted only once
/// a commit record names it); dropped uncommitted, nothing of it remains.
pub struct CommittingParquet {
    writer: Option<ArrowWriter<Hashed>>,
    key: String,
    location: String,
    rows: usize,
    coverage: Coverage,
}

/// An upload that counts and hashes what passes through it.
struct Hashed {
    upload: Box<dyn Upload>,
    sha: Sha256,
    bytes: u64,
}

impl Write for Hashed {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.upload.write(buf)?;
        self.sha.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.upload.flush()
    }
}

/// A file made visible: what its commit record says of it.
#[derive(Debug)]
pub struct Written {
    /// The file's key in the store, relative to the output location.
    pub key: String,
    /// Data rows in the file.
    pub rows: u64,
    /// The file's size in bytes, as uploaded.
    pub bytes: u64,
    /// SHA-256 of the file's bytes, lowercase hex: a reader checks it
    /// ([`read_verified`]).
    pub sha256: String,
    /// The input rows the file holds, which resume skips once it counts.
    pub coverage: Coverage,
}

impl Written {
    /// The commit-log record entry naming this file as a `kind` file.
    pub fn entry(self, kind: FileKind) -> FileEntry {
        FileEntry {
            key: self.key,
            kind,
            bytes: self.bytes,
            rows: self.rows,
            sha256: self.sha256,
            covers: self.coverage.into_covered(),
            batch_totals: None,
        }
    }
}

impl CommittingParquet {
    /// Starts `key` in `store`; it becomes visible on [`Self::commit`].
    pub fn create(
        store: &dyn Store,
        key: &str,
        schema: SchemaRef,
        properties: WriterProperties,
    ) -> Result<Self, FileError> {
        let location = store.locate(key);
        let upload = Hashed {
            upload: store.upload(key)?,
            sha: Sha256::new(),
            bytes: 0,
        };
        let writer = ArrowWriter::try_new(upload, schema, Some(properties)).map_err(|source| {
            FileError::Parquet {
                location: location.clone(),
                source,
            }
        })?;
        Ok(Self {
            writer: Some(writer),
            key: key.to_string(),
            location,
            rows: 0,
            coverage: Coverage::default(),
        })
    }

    /// Notes that the rows written hold input row `origin`.
    pub fn covers(&mut self, origin: segpredict_core::message::Origin) {
        self.coverage.add(origin);
    }

    /// The file's full location, for messages.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// Rows written so far: the writers commit at `rows_per_file`.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Appends `batch` (of the schema given to [`Self::create`]); the
    /// writer holds up to a row group in memory before it uploads it.
    /// Errors once the file is committed.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<(), FileError> {
        let writer = self.writer.as_mut().ok_or_else(|| FileError::Closed {
            location: self.location.clone(),
        })?;
        writer.write(batch).map_err(|source| FileError::Parquet {
            location: self.location.clone(),
            source,
        })?;
        self.rows += batch.num_rows();
        Ok(())
    }

    /// Writes the footer and finishes the upload: the file is whole and
    /// durable under its name (visible to readers of the output once a
    /// commit record names it). On failure nothing is there.
    pub fn commit(mut self) -> Result<Written, FileError> {
        let writer = self.writer.take().ok_or_else(|| FileError::Closed {
            location: self.location.clone(),
        })?;
        // Flushes the last row group and writes the footer.
        let hashed = writer.into_inner().map_err(|source| FileError::Parquet {
            location: self.location.clone(),
            source,
        })?;
        hashed.upload.finish()?;
        Ok(Written {
            key: self.key,
            rows: self.rows as u64,
            bytes: hashed.bytes,
            sha256: hex(&hashed.sha.finalize()),
            coverage: self.coverage,
        })
    }
}

fn hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// The committed file `file` names, checked against its record's size and
/// SHA-256: a file changed or damaged since it was committed is an error
/// naming it, never merged.
pub fn read_verified(store: &dyn Store, file: &FileEntry) -> Result<bytes::Bytes, StoreError> {
    let bytes = store.read(&file.key)?;
    let sha = hex(&Sha256::digest(&bytes));
    match bytes.len() as u64 == file.bytes && sha == file.sha256 {
        true => Ok(bytes),
        false => Err(StoreError {
            op: "checking",
            location: store.locate(&file.key),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "{} bytes with SHA-256 {sha}, its commit record says {} bytes with {}",
                    bytes.len(),
                    file.bytes,
                    file.sha256
                ),
            ),
        }),
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
    parts: &[FileEntry],
    dest: &str,
    schema: SchemaRef,
    extra: &[RecordBatch],
) -> Result<u64, FileError> {
    let props = streamed_properties();
    let mut out = CommittingParquet::create(store, dest, schema.clone(), props)?;
    for part in parts {
        let location = store.locate(&part.key);
        let parquet_error = |source| FileError::Parquet {
            location: location.clone(),
            source,
        };
        let bytes = read_verified(store, part)?;
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
            .and_then(|b| b.with_batch_size(MERGE_BATCH_ROWS).build())
            .map_err(parquet_error)?;
        for batch in reader {
            let arrow_error = |source| FileError::Arrow {
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
    Ok(out.commit()?.rows)
}
