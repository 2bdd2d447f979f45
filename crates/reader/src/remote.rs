//! Input in object storage: footers read once per file (one range request
//! for the tail, a second only for a footer over 64 KiB), and each row
//! group's projected column chunks fetched by byte range ahead of the
//! reader threads, `fetch_concurrency` row groups at a time, so the
//! network's latency hides behind decoding. object_store retries each
//! request with backoff; the bytes held are bounded by the concurrency.

use std::ops::Range;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt};
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::errors::ParquetError;
use parquet::file::reader::{ChunkReader, Length};
use segpredict_storage::object_store::path::Path as ObjectPath;
use segpredict_storage::object_store::{ObjectStore, ObjectStoreExt};
use segpredict_storage::{block_on, runtime};

use crate::plan::Unit;

/// Bytes read from a file's end hoping to get its whole footer at once.
const TAIL_BYTES: u64 = 64 << 10;

/// An input object and its footer.
#[derive(Debug)]
pub(crate) struct RemoteFile {
    pub store: Arc<dyn ObjectStore>,
    pub path: ObjectPath,
    pub size: u64,
    pub metadata: ArrowReaderMetadata,
    /// The projected root columns (this file's own order).
    pub roots: Vec<usize>,
}

/// Some byte ranges of one file, served to the Parquet reader as if it were
/// the file: a range asked for that was not fetched is an error (it would
/// be a bug in what was fetched), never a silent extra request.
#[derive(Debug, Clone)]
pub(crate) struct FetchedBytes {
    ranges: Vec<(u64, Bytes)>,
    size: u64,
}

impl FetchedBytes {
    fn slice(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        let end = start + length as u64;
        self.ranges
            .iter()
            .find(|(at, bytes)| *at <= start && end <= at + bytes.len() as u64)
            .map(|(at, bytes)| bytes.slice((start - at) as usize..(end - at) as usize))
            .ok_or_else(|| ParquetError::General(format!("bytes {start}..{end} were not fetched")))
    }
}

impl Length for FetchedBytes {
    fn len(&self) -> u64 {
        self.size
    }
}

impl ChunkReader for FetchedBytes {
    type T = bytes::buf::Reader<Bytes>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        use bytes::Buf;
        let (at, bytes) = self
            .ranges
            .iter()
            .find(|(at, bytes)| *at <= start && start < at + bytes.len() as u64)
            .ok_or_else(|| ParquetError::General(format!("byte {start} was not fetched")))?;
        Ok(bytes.slice((start - at) as usize..).reader())
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        self.slice(start, length)
    }
}

/// What can go wrong reading an input object.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RemoteError {
    #[error(transparent)]
    Store(#[from] segpredict_storage::object_store::Error),
    #[error(transparent)]
    Parquet(#[from] ParquetError),
}

/// Reads an object's footer: its metadata, and the SHA-256 of the footer's
/// bytes (as for a local file).
pub(crate) fn read_footer(
    store: &Arc<dyn ObjectStore>,
    path: &ObjectPath,
    size: u64,
) -> Result<(ArrowReaderMetadata, String), RemoteError> {
    block_on(async {
        let tail_start = size.saturating_sub(TAIL_BYTES);
        let mut tail = store.get_range(path, tail_start..size).await?;
        let footer_len = footer_length(&tail)?;
        let mut start = tail_start;
        if footer_len + 8 > tail.len() as u64 {
            start = size.saturating_sub(footer_len + 8);
            tail = store.get_range(path, start..size).await?;
        }
        let footer = tail.slice(tail.len() - (footer_len as usize + 8).min(tail.len())..);
        let fetched = FetchedBytes {
            ranges: vec![(start, tail)],
            size,
        };
        let metadata = ArrowReaderMetadata::load(&fetched, ArrowReaderOptions::new())?;
        Ok((metadata, crate::plan::hex_sha256(&footer)))
    })
}

/// The footer's length from a file's last 8 bytes (length, `PAR1`).
fn footer_length(tail: &Bytes) -> Result<u64, ParquetError> {
    let n = tail.len();
    if n < 8 || &tail[n - 4..] != b"PAR1" {
        return Err(ParquetError::General(
            "not a Parquet file (no PAR1 magic at its end)".into(),
        ));
    }
    Ok(u64::from(u32::from_le_bytes([
        tail[n - 8],
        tail[n - 7],
        tail[n - 6],
        tail[n - 5],
    ])))
}

/// The byte ranges of `row_group`'s chunks of the columns under `roots`.
fn chunk_ranges(file: &RemoteFile, row_group: usize, roots: &[usize]) -> Vec<Range<u64>> {
    let metadata = file.metadata.metadata();
    let schema = metadata.file_metadata().schema_descr();
    let group = metadata.row_group(row_group);
    (0..schema.num_columns())
        .filter(|&leaf| roots.contains(&schema.get_column_root_idx(leaf)))
        .map(|leaf| {
            let (start, length) = group.column(leaf).byte_range();
            start..start + length
        })
        .collect()
}

/// Fetches one row group's projected column chunks (object_store merges
/// adjacent ranges into one request).
async fn fetch(file: &RemoteFile, row_group: usize) -> Result<FetchedBytes, RemoteError> {
    let ranges = chunk_ranges(file, row_group, &file.roots);
    let bytes = file.store.get_ranges(&file.path, &ranges).await?;
    Ok(FetchedBytes {
        ranges: ranges.iter().map(|r| r.start).zip(bytes).collect(),
        size: file.size,
    })
}

/// [`fetch`] from a stage thread.
pub(crate) fn fetch_blocking(
    file: &RemoteFile,
    row_group: usize,
) -> Result<FetchedBytes, RemoteError> {
    block_on(fetch(file, row_group))
}

/// A unit with its bytes when its file is an object (`None` for a local
/// file, which the reader thread reads itself).
pub(crate) type Prefetched = (Unit, Option<Result<FetchedBytes, RemoteError>>);

/// The units in plan order, each object's row group fetched up to
/// `concurrency` ahead of the reader threads that take them.
pub(crate) struct Prefetch {
    stream: Mutex<BoxStream<'static, Prefetched>>,
}

impl std::fmt::Debug for Prefetch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Prefetch")
    }
}

impl Prefetch {
    pub fn new(
        units: Vec<Unit>,
        files: Arc<Vec<Option<Arc<RemoteFile>>>>,
        concurrency: usize,
    ) -> Self {
        let stream = futures::stream::iter(units)
            .map(move |unit| {
                let file = files.get(unit.file_idx as usize).cloned().flatten();
                // Spawned, so a fetch progresses while the stream waits.
                let fetching =
                    file.map(|f| runtime().spawn(async move { fetch(&f, unit.row_group).await }));
                async move {
                    let fetched = match fetching {
                        None => None,
                        Some(task) => Some(task.await.unwrap_or_else(|e| {
                            Err(RemoteError::Parquet(ParquetError::General(format!(
                                "fetch task: {e}"
                            ))))
                        })),
                    };
                    (unit, fetched)
                }
            })
            .buffered(concurrency.max(1))
            .boxed();
        Self {
            stream: Mutex::new(stream),
        }
    }

    /// The next unit (and its bytes), waiting for its fetch; `None` at the end.
    pub fn take(&self) -> Option<Prefetched> {
        let mut stream = self.stream.lock().unwrap_or_else(|p| p.into_inner());
        block_on(stream.next())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fetched_bytes_serve_only_what_was_fetched() {
        let fetched = FetchedBytes {
            ranges: vec![
                (100, Bytes::from_static(b"abcdef")),
                (200, Bytes::from_static(b"xyz")),
            ],
            size: 1000,
        };
        assert_eq!(fetched.get_bytes(102, 3).unwrap(), &b"cde"[..]);
        assert_eq!(fetched.get_bytes(200, 3).unwrap(), &b"xyz"[..]);
        assert!(fetched.get_bytes(104, 4).is_err(), "past the range's end");
        assert!(fetched.get_bytes(150, 1).is_err(), "between ranges");
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut fetched.get_read(202).unwrap(), &mut rest).unwrap();
        assert_eq!(rest, "z");
        assert_eq!(fetched.len(), 1000);
    }

    #[test]
    fn a_tail_without_the_magic_is_not_parquet() {
        assert!(footer_length(&Bytes::from_static(b"12345678")).is_err());
        let tail = Bytes::from_static(b"\x10\x00\x00\x00PAR1");
        assert_eq!(footer_length(&tail).unwrap(), 16);
    }
}
