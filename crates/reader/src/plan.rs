//! The read plan: every input file checked up front, and the frozen list of
//! units of work (one row group of one file each) the reader threads share.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use segpredict_storage::object_store::path::Path as ObjectPath;
use segpredict_storage::object_store::ObjectStore;
use segpredict_storage::Location;

use crate::carry::Carried;
use crate::prefetch::{Prefetch, Prefetched};
use crate::remote::{self, Pin, RemoteError, RemoteFile};
use segpredict_core::exit::Classify;

use super::{discover, OnBadFile, ReaderConfig, ReaderError};
use segpredict_core::done::DoneSet;
use segpredict_core::message::{IdKind, InputFile, Origin, SkippedFile, Sources};
use segpredict_core::shard::{deal_units, ShardSpec};

pub use crate::unit::Unit;

/// The checked inputs of a run.
#[derive(Debug, Clone)]
pub struct ReadPlan {
    /// Every input file, frozen in plan order; rows' `file_idx` index it.
    pub sources: Sources,
    /// The id column's type, the same in every file (checked).
    pub id_kind: IdKind,
    /// Rows of every input file: the run's whole input.
    pub total_rows: u64,
    /// Frozen once planned: readers index into it, never add to it.
    units: Box<[Unit]>,
    /// The units this process reads: its shard's, less those an earlier
    /// attempt finished (all of them until [`ReadPlan::select`]).
    selected: Box<[Unit]>,
    /// Rows an earlier attempt finished, skipped as they are read.
    done: Option<Arc<DoneSet>>,
    /// Rows of this process's shard, finished or not (the whole input
    /// until [`ReadPlan::select`]).
    shard_rows: u64,
    /// Files left out (`on_bad_file = "skip"`), with why.
    pub skipped: Vec<SkippedFile>,
    /// Per file (by index), its object and footer when it is in object
    /// storage: read once at planning, used by every unit.
    remote: Arc<Vec<Option<Arc<RemoteFile>>>>,
    /// Per file (by index), its footer as read at planning: every unit of
    /// a local file is decoded with it (the file checked unchanged since).
    footers: Arc<Vec<ArrowReaderMetadata>>,
    /// Row groups of objects fetched ahead of the reader threads.
    fetch_concurrency: usize,
    /// The `[writers] carry` columns, resolved on the first file and
    /// checked on every other; `None` when nothing is carried.
    pub carried: Option<Arc<Carried>>,
}

impl ReadPlan {
    /// Row groups this process reads.
    pub fn row_groups(&self) -> usize {
        self.selected.len()
    }

    /// Every non-empty row group of every file, in file then row-group
    /// order: the frozen list every shard deals from.
    pub fn units(&self) -> &[Unit] {
        &self.units
    }

    /// Keeps the units dealt to `shard` and, of those, the ones with rows
    /// not in `done` (rows in `done` are skipped as they are read). Returns
    /// the rows of the shard's units, done or not.
    pub fn select(&mut self, shard: ShardSpec, done: Arc<DoneSet>) -> u64 {
        let rows: Vec<u64> = self.units.iter().map(|u| u.rows).collect();
        let dealt = deal_units(&rows, shard.count);
        let ours = || {
            self.units
                .iter()
                .zip(&dealt)
                .filter(|(_, &s)| s == shard.index)
        };
        let shard_rows = ours().map(|(u, _)| u.rows).sum();
        self.selected = ours()
            .map(|(u, _)| *u)
            .filter(|u| !done.all_done(u.file_idx, u.first_row, u.rows))
            .collect();
        self.done = Some(done).filter(|d| !d.is_empty());
        self.shard_rows = shard_rows;
        shard_rows
    }

    /// Rows of this process's shard, finished or not.
    pub fn shard_rows(&self) -> u64 {
        self.shard_rows
    }

    /// Rows earlier attempts finished: (predicted, rejected).
    pub fn rows_done(&self) -> (u64, u64) {
        self.done
            .as_ref()
            .map_or((0, 0), |d| (d.predicted(), d.rejected()))
    }

    /// Whether an earlier attempt finished this row.
    pub fn is_done(&self, origin: &Origin) -> bool {
        self.done
            .as_ref()
            .is_some_and(|d| d.contains(origin.file_idx, origin.row_idx))
    }

    /// Whether an earlier attempt finished rows (a resume), so decoded rows
    /// must be checked with [`Self::is_done`].
    pub fn skips_rows(&self) -> bool {
        self.done.is_some()
    }
}

/// The row groups the reader threads share: an index into the plan's frozen
/// unit list, so the queue is bounded by construction and every unit is
/// taken exactly once, in plan order. Objects' row groups come with their
/// bytes, fetched ahead ([`Prefetch`]).
#[derive(Debug)]
pub struct UnitQueue<'a> {
    units: &'a [Unit],
    next: AtomicUsize,
    prefetch: Option<Prefetch>,
}

impl<'a> UnitQueue<'a> {
    /// A queue of the plan's selected units, starting the prefetch of
    /// their bytes when any input is in object storage.
    pub fn new(plan: &'a ReadPlan) -> Self {
        let prefetch = plan.remote.iter().any(Option::is_some).then(|| {
            Prefetch::new(
                plan.selected.to_vec(),
                plan.remote.clone(),
                plan.fetch_concurrency,
            )
        });
        Self {
            units: &plan.selected,
            next: AtomicUsize::new(0),
            prefetch,
        }
    }

    /// The next unit not yet taken by any thread (with its bytes when its
    /// file is an object); `None` when all are.
    pub(crate) fn take(&self) -> Option<Prefetched> {
        if let Some(prefetch) = &self.prefetch {
            return prefetch.take();
        }
        let index = self.next.fetch_add(1, Ordering::Relaxed);
        self.units.get(index).map(|&unit| (unit, None))
    }
}

impl ReadPlan {
    /// The object and footer of file `file_idx`, when it is an object.
    pub(crate) fn remote(&self, file_idx: u32) -> Option<&Arc<RemoteFile>> {
        self.remote.get(file_idx as usize)?.as_ref()
    }

    /// File `file_idx` as the plan found it, and the footer it read.
    pub(crate) fn source(
        &self,
        file_idx: u32,
    ) -> Result<(&InputFile, &ArrowReaderMetadata), ReaderError> {
        let i = file_idx as usize;
        match (self.sources.get(i), self.footers.get(i)) {
            (Some(file), Some(footer)) => Ok((file, footer)),
            _ => Err(ReaderError::Config("unit names an unknown file".into())),
        }
    }
}

/// Top-level field indices a read projects: the mapped columns and the
/// carried ones the file has.
pub(crate) fn projection(
    columns: &crate::ColumnMapping,
    carried: Option<&Carried>,
    schema: &arrow::datatypes::Schema,
) -> Vec<usize> {
    let mut roots = columns.root_indices(schema);
    if let Some(carried) = carried {
        roots.extend(
            carried
                .file_columns()
                .filter_map(|n| schema.index_of(n).ok()),
        );
        roots.sort_unstable();
        roots.dedup();
    }
    roots
}

/// A file left out under `on_bad_file = "skip"`, with why (the error and
/// its causes, in one line).
fn skip(file: &InputFile, error: &ReaderError) -> SkippedFile {
    let mut reason = error.to_string();
    let mut cause = std::error::Error::source(error);
    while let Some(c) = cause {
        reason += &format!(": {c}");
        cause = c.source();
    }
    tracing::warn!(path = %file.path.display(), %reason, "skipping an unreadable input file");
    SkippedFile {
        path: file.path.clone(),
        reason,
    }
}

/// Every file's id column has the first file's kind.
fn check_id_kind(
    first: &mut Option<(IdKind, PathBuf)>,
    kind: IdKind,
    file: &InputFile,
    column: &str,
) -> Result<(), ReaderError> {
    match first {
        None => *first = Some((kind, file.path.clone())),
        Some((expected, first)) if *expected != kind => {
            return Err(ReaderError::IdKindMismatch {
                path: file.path.clone(),
                column: column.to_string(),
                found: kind,
                expected: *expected,
                first: first.clone(),
            })
        }
        Some(_) => {}
    }
    Ok(())
}

fn not_parquet(path: &Path, source: parquet::errors::ParquetError) -> ReaderError {
    ReaderError::NotParquet {
        path: path.to_path_buf(),
        source,
    }
}

/// Opens a local Parquet file and reads its footer, and the hex SHA-256 of
/// the footer's bytes; records the open file's identity (size, times,
/// inode) in `file`, taken before and after the footer was read: a file
/// being written meanwhile is an error (retryable), never a footer of one
/// version beside the identity of another.
fn open_with_footer_hash(
    file: &mut InputFile,
) -> Result<(ParquetRecordBatchReaderBuilder<std::fs::File>, String), ReaderError> {
    let path = file.path.clone();
    let io_error = |source| ReaderError::Io {
        path: path.clone(),
        source,
    };
    let opened = std::fs::File::open(&path).map_err(io_error)?;
    let before = opened.metadata().map_err(io_error)?;
    // The same open file: what is hashed is what the builder read.
    let hashed = opened.try_clone().map_err(io_error)?;
    let builder =
        ParquetRecordBatchReaderBuilder::try_new(opened).map_err(|e| not_parquet(&path, e))?;
    // The builder has checked the footer's length and magic.
    let sha256 = footer_sha256(&hashed).map_err(io_error)?;
    let after = hashed.metadata().map_err(io_error)?;
    let identity = |m: &std::fs::Metadata| {
        (
            m.len(),
            m.modified().ok(),
            segpredict_storage::file_identity(m),
        )
    };
    if identity(&before) != identity(&after) {
        return Err(io_error(std::io::Error::other(
            "the file changed while its footer was read (being written?)",
        )));
    }
    discover::set_identity(file, &after);
    Ok((builder, sha256))
}

/// Hex SHA-256 of a Parquet file's footer: the metadata, its 4-byte length
/// and the `PAR1` magic, the last `8 + length` bytes. Positional reads, so
/// the builder's use of the same file is undisturbed.
fn footer_sha256(file: &std::fs::File) -> std::io::Result<String> {
    use std::os::unix::fs::FileExt;
    let size = file.metadata()?.len();
    let mut tail = [0u8; 8];
    let tail_at = size
        .checked_sub(8)
        .ok_or(std::io::ErrorKind::UnexpectedEof)?;
    file.read_exact_at(&mut tail, tail_at)?;
    let length = u64::from(u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]));
    let footer_at = tail_at
        .checked_sub(length)
        .ok_or(std::io::ErrorKind::UnexpectedEof)?;
    let mut footer = vec![0u8; (length + 8) as usize];
    file.read_exact_at(&mut footer, footer_at)?;
    Ok(crate::hex_sha256(&footer))
}

/// A planned file: its id column's kind, its object (in object storage),
/// its footer.
type PlannedFile = (IdKind, Option<Arc<RemoteFile>>, ArrowReaderMetadata);

/// An object: its bucket's client and its key.
pub(crate) type Object = (Arc<dyn ObjectStore>, ObjectPath);

/// `path` as an object: its bucket's client and key; `None` for a local file.
fn object_of(path: &Path) -> Result<Option<Object>, ReaderError> {
    let text = path.to_string_lossy();
    if !segpredict_storage::is_object_url(&text) {
        return Ok(None);
    }
    match Location::parse(&text) {
        Ok(Location::Object(url)) => Ok(Some((url.store().clone(), url.key("")))),
        Ok(Location::Local(_)) => Ok(None),
        Err(source) => Err(ReaderError::Storage {
            location: text.into_owned(),
            source: Box::new(source),
        }),
    }
}

/// An object's read failure as the reader's error: the network's is
/// retryable, content that does not parse is the file's, an object that
/// is no longer the one recorded is a changed input.
pub(crate) fn remote_error(path: &Path, error: RemoteError) -> ReaderError {
    match error {
        RemoteError::Parquet(source) => ReaderError::NotParquet {
            path: path.to_path_buf(),
            source,
        },
        RemoteError::Changed(e) => ReaderError::Changed {
            path: path.to_path_buf(),
            how: changed_object(&e),
        },
        RemoteError::Store(e) => ReaderError::Io {
            path: path.to_path_buf(),
            source: segpredict_storage::io_error(&e),
        },
    }
}

/// How an object is no longer the one the run recorded.
pub(crate) fn changed_object(error: &segpredict_storage::object_store::Error) -> String {
    match error {
        segpredict_storage::object_store::Error::NotFound { .. } => "it was deleted".into(),
        e => format!(
            "it was replaced: its ETag no longer matches the one recorded ({})",
            segpredict_storage::one_line(e)
        ),
    }
}

/// A file's footer: read from disk, or by range from object storage
/// (pinned to the ETag or version `file` records). A local file's
/// identity is taken again from the file opened.
pub(crate) fn read_footer(
    file: &mut InputFile,
) -> Result<(ArrowReaderMetadata, String, Option<Object>), ReaderError> {
    let Some((store, key)) = object_of(&file.path)? else {
        let (builder, sha256) = open_with_footer_hash(file)?;
        let metadata =
            ArrowReaderMetadata::try_new(builder.metadata().clone(), ArrowReaderOptions::new())
                .map_err(|source| ReaderError::NotParquet {
                    path: file.path.clone(),
                    source,
                })?;
        return Ok((metadata, sha256, None));
    };
    let pin = Pin::of(&file.version);
    let (metadata, sha256) = remote::read_footer(&store, &key, pin.as_ref(), file.size_bytes)
        .map_err(|e| remote_error(&file.path, e))?;
    Ok((metadata, sha256, Some((store, key))))
}

impl ReaderConfig {
    /// Finds the input files and checks every file's columns before any row
    /// is read, so a wrong column fails in seconds, not hours into a night.
    pub fn plan(&self) -> Result<ReadPlan, ReaderError> {
        self.validate()?;
        let found = discover::input_files(&self.path)?;
        let mut files = Vec::with_capacity(found.len());
        let mut skipped = Vec::new();
        let mut units = Vec::new();
        let mut id_kind: Option<(IdKind, PathBuf)> = None;
        let mut remote = Vec::new();
        let mut footers = Vec::new();
        let mut carried = None;
        for mut file in found {
            let file_idx = u32::try_from(files.len())
                .map_err(|_| ReaderError::Config("more than 4 billion input files".into()))?;
            let planned = self.plan_file(&mut file, file_idx, &mut units, &mut carried);
            let kind = match (planned, self.on_bad_file) {
                (Ok((kind, object, footer)), _) => {
                    remote.push(object);
                    footers.push(footer);
                    kind
                }
                // The file's own fault; a read that failed may not fail
                // again, and a file left out here would change the run's
                // inputs (and so refuse its other shards).
                (Err(error), OnBadFile::Skip)
                    if error.is_permanent() && !matches!(error, ReaderError::Carry { .. }) =>
                {
                    skipped.push(skip(&file, &error));
                    continue;
                }
                (Err(error), _) => return Err(error),
            };
            check_id_kind(&mut id_kind, kind, &file, &self.columns.id)?;
            files.push(file);
        }
        let total_rows = files.iter().map(|f| f.rows).sum();
        Ok(ReadPlan {
            total_rows,
            shard_rows: total_rows,
            sources: Arc::new(files),
            id_kind: id_kind.map_or(IdKind::Str, |(k, _)| k),
            selected: units.clone().into_boxed_slice(),
            units: units.into_boxed_slice(),
            done: None,
            skipped,
            remote: Arc::new(remote),
            footers: Arc::new(footers),
            fetch_concurrency: self.fetch_concurrency,
            carried,
        })
    }

    /// Checks one file's columns, records its rows and row groups, and adds
    /// its non-empty row groups to `units`; returns its id column's kind,
    /// its object when it is in object storage, and its footer.
    fn plan_file(
        &self,
        file: &mut InputFile,
        file_idx: u32,
        units: &mut Vec<Unit>,
        carried: &mut Option<Arc<Carried>>,
    ) -> Result<PlannedFile, ReaderError> {
        let (metadata, footer_sha256, object) = read_footer(file)?;
        file.footer_sha256 = footer_sha256;
        let kind = self.columns.check_schema(metadata.schema(), &file.path)?;
        if carried.is_none() && !self.carry.is_nothing() {
            *carried = Carried::resolve(
                &self.carry,
                &self.reserved,
                &self.columns,
                file,
                metadata.schema(),
            )?;
        }
        if let Some(carried) = carried {
            carried.check_file(file, metadata.schema())?;
        }
        let object = object.map(|(store, path)| {
            Arc::new(RemoteFile {
                roots: projection(&self.columns, carried.as_deref(), metadata.schema()),
                store,
                path,
                size: file.size_bytes,
                pin: Pin::of(&file.version),
                metadata: metadata.clone(),
            })
        });
        let mut first_row = 0u64;
        let row_groups = metadata.metadata().row_groups();
        for (row_group, meta) in row_groups.iter().enumerate() {
            let rows = u64::try_from(meta.num_rows()).unwrap_or(0);
            if rows > 0 {
                units.push(Unit {
                    file_idx,
                    row_group,
                    first_row,
                    rows,
                });
            }
            first_row += rows;
        }
        file.rows = first_row;
        file.row_groups = row_groups.len();
        Ok((kind, object, metadata))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::Int64Array;
    use arrow::record_batch::RecordBatch;
    use parquet::arrow::ArrowWriter;
    use sha2::{Digest, Sha256};

    use super::*;

    /// A one-column Parquet file of `values`.
    fn write_ints(path: &Path, values: &[i64]) {
        let batch = RecordBatch::try_from_iter([(
            "id",
            Arc::new(Int64Array::from(values.to_vec())) as arrow::array::ArrayRef,
        )])
        .unwrap();
        let file = std::fs::File::create(path).unwrap();
        let mut writer = ArrowWriter::try_new(file, batch.schema(), None).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
    }

    fn local(path: &Path) -> InputFile {
        InputFile::unplanned(path.to_path_buf())
    }

    fn hash_of(path: &Path) -> String {
        open_with_footer_hash(&mut local(path)).unwrap().1
    }

    #[test]
    fn the_footer_hash_is_of_the_files_last_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.parquet");
        write_ints(&path, &[1, 2, 3]);
        let bytes = std::fs::read(&path).unwrap();
        let n = bytes.len();
        let length = u32::from_le_bytes(bytes[n - 8..n - 4].try_into().unwrap()) as usize;
        let expected: String = Sha256::digest(&bytes[n - 8 - length..])
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(hash_of(&path), expected);
        assert_eq!(expected.len(), 64);
    }

    #[test]
    fn equal_sized_files_with_other_values_have_other_footer_hashes() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.parquet"), dir.path().join("b.parquet"));
        write_ints(&a, &[1, 2, 3]);
        write_ints(&b, &[4, 5, 6]);
        let size = |p: &Path| std::fs::metadata(p).unwrap().len();
        assert_eq!(size(&a), size(&b), "the test needs files of one size");
        assert_ne!(hash_of(&a), hash_of(&b));
        // And the identity the checkpoint compares tells them apart.
        let file = |path: &Path| InputFile {
            path: "in.parquet".into(),
            size_bytes: size(path),
            modified: None,
            rows: 3,
            row_groups: 1,
            footer_sha256: hash_of(path),
            version: String::new(),
            partitions: Vec::new(),
        };
        assert_ne!(file(&a).identity(), file(&b).identity());
    }

    #[test]
    fn not_parquet_is_named_as_such_before_any_hash() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.parquet");
        std::fs::write(&path, b"PAR1 not really").unwrap();
        let error = open_with_footer_hash(&mut local(&path))
            .map(|_| ())
            .unwrap_err();
        assert!(matches!(error, ReaderError::NotParquet { .. }), "{error}");
    }
}
