//! Input in object storage: footers read once per file (one range request
//! for the tail, a second only for a footer over 64 KiB), and each row
//! group's projected column chunks fetched by byte range ahead of the
//! reader threads, `fetch_concurrency` row groups at a time, so the
//! network's latency hides behind decoding. object_store retries each
//! request with backoff; the bytes held are bounded by the concurrency.
//!
//! Every request is pinned to the object as the run found it (its ETag by
//! `If-Match`, or its version): an object replaced mid-run answers 412 (or
//! is gone), never the new bytes, so no run mixes two versions of a file.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::errors::ParquetError;
use parquet::file::reader::{ChunkReader, Length};
use segpredict_storage::block_on;
use segpredict_storage::object_store::path::Path as ObjectPath;
use segpredict_storage::object_store::{GetOptions, GetRange, ObjectStore};

/// Bytes read from a file's end hoping to get its whole footer at once.
const TAIL_BYTES: u64 = 64 << 10;

/// What every read of an object is pinned to: the object as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Pin {
    /// `If-Match`: the ETag the listing gave.
    ETag(String),
    /// A version id (a store that gave one and no ETag).
    Version(String),
}

impl Pin {
    /// The pin of an input whose recorded version is `version` (see
    /// `discover::object_files`); `None` when the store gave neither.
    pub fn of(version: &str) -> Option<Pin> {
        match version.strip_prefix("version ") {
            _ if version.is_empty() => None,
            Some(id) => Some(Pin::Version(id.to_string())),
            None => Some(Pin::ETag(version.to_string())),
        }
    }

    fn options(pin: Option<&Pin>, range: Range<u64>) -> GetOptions {
        let mut options = GetOptions {
            range: Some(GetRange::Bounded(range)),
            ..GetOptions::default()
        };
        match pin {
            Some(Pin::ETag(tag)) => options.if_match = Some(tag.clone()),
            Some(Pin::Version(id)) => options.version = Some(id.clone()),
            None => {}
        }
        options
    }
}

/// An input object and its footer.
#[derive(Debug)]
pub(crate) struct RemoteFile {
    pub store: Arc<dyn ObjectStore>,
    pub path: ObjectPath,
    pub size: u64,
    /// The object as the run recorded it, which every range read asks for.
    pub pin: Option<Pin>,
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
    #[error("{}", segpredict_storage::one_line(.0))]
    Store(segpredict_storage::object_store::Error),
    /// The object is no longer the one the run recorded: replaced (its
    /// ETag or version no longer matches) or deleted.
    #[error("{}", segpredict_storage::one_line(.0))]
    Changed(segpredict_storage::object_store::Error),
    #[error(transparent)]
    Parquet(#[from] ParquetError),
}

impl From<segpredict_storage::object_store::Error> for RemoteError {
    fn from(error: segpredict_storage::object_store::Error) -> Self {
        use segpredict_storage::object_store::Error::{NotFound, Precondition};
        match error {
            Precondition { .. } => RemoteError::Changed(error),
            NotFound { .. } if !segpredict_storage::is_missing_bucket(&error) => {
                RemoteError::Changed(error)
            }
            _ => RemoteError::Store(error),
        }
    }
}

/// Bytes `range` of the object, pinned to `pin`.
async fn get_pinned(
    store: &Arc<dyn ObjectStore>,
    path: &ObjectPath,
    pin: Option<&Pin>,
    range: Range<u64>,
) -> Result<Bytes, segpredict_storage::object_store::Error> {
    let got = store.get_opts(path, Pin::options(pin, range)).await?;
    got.bytes().await
}

/// Reads an object's footer: its metadata, and the SHA-256 of the footer's
/// bytes (as for a local file).
pub(crate) fn read_footer(
    store: &Arc<dyn ObjectStore>,
    path: &ObjectPath,
    pin: Option<&Pin>,
    size: u64,
) -> Result<(ArrowReaderMetadata, String), RemoteError> {
    block_on(async {
        let tail_start = size.saturating_sub(TAIL_BYTES);
        let mut tail = get_pinned(store, path, pin, tail_start..size).await?;
        let footer_len = footer_length(&tail)?;
        let mut start = tail_start;
        if footer_len + 8 > tail.len() as u64 {
            start = size.saturating_sub(footer_len + 8);
            tail = get_pinned(store, path, pin, start..size).await?;
        }
        let footer = tail.slice(tail.len() - (footer_len as usize + 8).min(tail.len())..);
        let fetched = FetchedBytes {
            ranges: vec![(start, tail)],
            size,
        };
        let metadata = ArrowReaderMetadata::load(&fetched, ArrowReaderOptions::new())?;
        Ok((metadata, crate::hex_sha256(&footer)))
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

/// Fetches one row group's projected column chunks (adjacent ranges merged
/// into one request, as object_store's `get_ranges` does), each request
/// pinned to the object the run recorded.
pub(crate) async fn fetch(
    file: &RemoteFile,
    row_group: usize,
) -> Result<FetchedBytes, RemoteError> {
    let ranges = chunk_ranges(file, row_group, &file.roots);
    let bytes = segpredict_storage::object_store::coalesce_ranges(
        &ranges,
        |range| get_pinned(&file.store, &file.path, file.pin.as_ref(), range),
        segpredict_storage::object_store::OBJECT_STORE_COALESCE_DEFAULT,
    )
    .await?;
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
    fn an_etag_pins_by_if_match_and_a_version_by_its_id() {
        let etag = Pin::of("\"abc\"").unwrap();
        let options = Pin::options(Some(&etag), 4..8);
        assert_eq!(options.if_match.as_deref(), Some("\"abc\""));
        assert_eq!(options.range, Some(GetRange::Bounded(4..8)));
        let version = Pin::of("version 17").unwrap();
        let options = Pin::options(Some(&version), 0..1);
        assert_eq!(
            (options.version.as_deref(), options.if_match),
            (Some("17"), None)
        );
        assert_eq!(Pin::of(""), None);
    }

    /// A one-column Parquet file of `values`, as bytes.
    fn parquet_bytes(values: &[i64]) -> Bytes {
        use arrow::array::{ArrayRef, Int64Array};
        let column = Arc::new(Int64Array::from(values.to_vec())) as ArrayRef;
        let batch = arrow::record_batch::RecordBatch::try_from_iter([("id", column)]).unwrap();
        let mut bytes = Vec::new();
        let mut writer =
            parquet::arrow::ArrowWriter::try_new(&mut bytes, batch.schema(), None).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        bytes.into()
    }

    #[test]
    fn a_read_pinned_to_a_replaced_or_deleted_object_is_changed_never_its_new_bytes() {
        use segpredict_storage::object_store::memory::InMemory;
        use segpredict_storage::object_store::ObjectStoreExt;
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let path = ObjectPath::from("in/a.parquet");
        let bytes = parquet_bytes(&[1, 2, 3]);
        let size = bytes.len() as u64;
        block_on(store.put(&path, bytes.clone().into())).unwrap();
        let etag = block_on(store.head(&path)).unwrap().e_tag.unwrap();
        let pin = Pin::of(&etag);
        let (metadata, _) = read_footer(&store, &path, pin.as_ref(), size).unwrap();
        let file = RemoteFile {
            store: store.clone(),
            path: path.clone(),
            size,
            pin,
            metadata,
            roots: vec![0],
        };
        assert!(fetch_blocking(&file, 0).is_ok());
        // The same bytes uploaded again: another object all the same.
        block_on(store.put(&path, bytes.into())).unwrap();
        let replaced = fetch_blocking(&file, 0).unwrap_err();
        assert!(matches!(replaced, RemoteError::Changed(_)), "{replaced:?}");
        assert!(matches!(
            read_footer(&store, &path, file.pin.as_ref(), size),
            Err(RemoteError::Changed(_))
        ));
        block_on(store.delete(&path)).unwrap();
        let deleted = fetch_blocking(&file, 0).unwrap_err();
        assert!(matches!(deleted, RemoteError::Changed(_)), "{deleted:?}");
    }

    #[test]
    fn a_tail_without_the_magic_is_not_parquet() {
        assert!(footer_length(&Bytes::from_static(b"12345678")).is_err());
        let tail = Bytes::from_static(b"\x10\x00\x00\x00PAR1");
        assert_eq!(footer_length(&tail).unwrap(), 16);
    }
}
