//! A local input file as the parquet crate reads it, keeping the first I/O
//! error any read met. The arrow reader hands an error met while reading
//! pages on as text (`ArrowError::ParquetError`), so without this a read
//! that failed (EIO on a flaky mount) would look like corrupt data: exit 2,
//! or with `on_bad_file = "skip"` its rows rejected for good, where a rerun
//! would have read them.

//!
//! A local input is also checked to be the file the plan recorded: when a
//! unit opens it and before each chunk of its rows is sent ([`Opened`]).

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ParquetRecordBatchReaderBuilder};
use parquet::errors::{ParquetError, Result};
use parquet::file::reader::{ChunkReader, Length};
use segpredict_core::message::InputFile;

use crate::ReaderError;

/// A local input opened for one unit, with what the plan recorded of it.
#[derive(Debug)]
pub(crate) struct Opened {
    path: PathBuf,
    /// The same open file as the reader's, for `fstat`.
    file: File,
    recorded: (u64, Option<std::time::SystemTime>, String),
    watch: Watch,
}

/// Opens `input` to decode its units with the footer the plan read
/// (`footer`); a file that is no longer the one recorded (another size,
/// modification time, inode or change time) is [`ReaderError::Changed`].
pub(crate) fn open_local(
    input: &InputFile,
    footer: &ArrowReaderMetadata,
) -> std::result::Result<(ParquetRecordBatchReaderBuilder<WatchedFile>, Opened), ReaderError> {
    let path = &input.path;
    let io_error = |source| ReaderError::Io {
        path: path.clone(),
        source,
    };
    let file = File::open(path).map_err(io_error)?;
    let (watched, watch) = WatchedFile::new(file.try_clone().map_err(io_error)?);
    let opened = Opened {
        path: path.clone(),
        file,
        recorded: (input.size_bytes, input.modified, input.version.clone()),
        watch,
    };
    opened.check()?;
    let builder = ParquetRecordBatchReaderBuilder::new_with_metadata(watched, footer.clone());
    Ok((builder, opened))
}

impl Opened {
    /// Whether the open file is still the one the plan recorded.
    pub(crate) fn check(&self) -> std::result::Result<(), ReaderError> {
        let now = self.file.metadata().map_err(|source| ReaderError::Io {
            path: self.path.clone(),
            source,
        })?;
        match changes(&self.recorded, &now) {
            None => Ok(()),
            Some(how) => Err(ReaderError::Changed {
                path: self.path.clone(),
                how,
            }),
        }
    }

    /// `error` as what it was: the file changed under the read (the read
    /// failing then is no fault of the file's content or the disk), else as
    /// [`Watch::explain`] tells it.
    pub(crate) fn explain(&self, error: ReaderError) -> ReaderError {
        match self.check() {
            Err(changed @ ReaderError::Changed { .. }) => changed,
            _ => self.watch.explain(&self.path, error),
        }
    }
}

/// What differs between the recorded identity and the file now, or `None`.
fn changes(
    recorded: &(u64, Option<std::time::SystemTime>, String),
    now: &std::fs::Metadata,
) -> Option<String> {
    let (size, modified, identity) = recorded;
    let mut out = Vec::new();
    if *size != now.len() {
        out.push(format!("size {size} -> {} bytes", now.len()));
    }
    if *modified != now.modified().ok() {
        out.push("modification time changed".to_string());
    }
    let was = segpredict_storage::parse_file_identity(identity);
    let is = segpredict_storage::parse_file_identity(&segpredict_storage::file_identity(now));
    match (was, is) {
        (Some((a, _)), Some((b, _))) if a != b => {
            out.push(format!("inode {a} -> {b}: another file under its name"))
        }
        (Some((_, a)), Some((_, b))) if a != b => out.push("change time (ctime) changed".into()),
        _ => {}
    }
    (!out.is_empty()).then(|| out.join(", "))
}

/// The first I/O error met by the reads of one [`WatchedFile`].
#[derive(Debug, Clone, Default)]
pub(crate) struct Watch(Arc<Mutex<Option<std::io::Error>>>);

impl Watch {
    fn record(&self, error: &std::io::Error) {
        // An interrupted read is retried by its caller, not a failure.
        if error.kind() == std::io::ErrorKind::Interrupted {
            return;
        }
        let mut first = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if first.is_none() {
            // io::Error is not Clone: its errno (or kind) says what failed.
            *first = Some(match error.raw_os_error() {
                Some(errno) => std::io::Error::from_raw_os_error(errno),
                None => std::io::Error::from(error.kind()),
            });
        }
    }

    fn take(&self) -> Option<std::io::Error> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// `error` as what it was: the file system's (retryable) when a read
    /// under it failed, else as it came.
    pub(crate) fn explain(&self, path: &Path, error: ReaderError) -> ReaderError {
        match self.take() {
            Some(source) => ReaderError::Io {
                path: path.to_path_buf(),
                source,
            },
            None => error,
        }
    }
}

/// A local file whose reads report their I/O errors to a [`Watch`].
#[derive(Debug)]
pub(crate) struct WatchedFile {
    file: File,
    watch: Watch,
}

impl WatchedFile {
    pub(crate) fn new(file: File) -> (Self, Watch) {
        let watch = Watch::default();
        let watched = WatchedFile {
            file,
            watch: watch.clone(),
        };
        (watched, watch)
    }

    fn seeked(&self, start: u64) -> std::io::Result<File> {
        let mut file = self.file.try_clone()?;
        file.seek(SeekFrom::Start(start))?;
        Ok(file)
    }

    fn watched<T>(&self, result: std::io::Result<T>) -> Result<T> {
        result.map_err(|e| {
            self.watch.record(&e);
            ParquetError::from(e)
        })
    }
}

impl Length for WatchedFile {
    fn len(&self) -> u64 {
        self.file.len()
    }
}

impl ChunkReader for WatchedFile {
    type T = WatchedRead;

    fn get_read(&self, start: u64) -> Result<WatchedRead> {
        let file = self.watched(self.seeked(start))?;
        Ok(WatchedRead {
            inner: BufReader::new(file),
            watch: self.watch.clone(),
        })
    }

    fn get_bytes(&self, start: u64, length: usize) -> Result<Bytes> {
        let mut buffer = Vec::with_capacity(length);
        let file = self.watched(self.seeked(start))?;
        let read = self.watched(file.take(length as u64).read_to_end(&mut buffer))?;
        if read != length {
            // A short file is its content's fault (truncated), not a read's.
            return Err(ParquetError::EOF(format!(
                "expected to read {length} bytes at {start}, read only {read}"
            )));
        }
        Ok(buffer.into())
    }
}

/// A reader at an offset of a [`WatchedFile`].
pub(crate) struct WatchedRead {
    inner: BufReader<File>,
    watch: Watch,
}

impl Read for WatchedRead {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.inner.read(buf).inspect_err(|e| self.watch.record(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reading `/proc/self/mem` at offset 0 fails with EIO: a real failed
    /// read, as a flaky mount gives.
    fn failing_file() -> File {
        File::open("/proc/self/mem").unwrap()
    }

    #[test]
    fn a_failed_read_is_kept_and_turns_a_decode_error_into_a_retryable_io_error() {
        use segpredict_core::exit::Classify;
        for use_get_read in [false, true] {
            let (file, watch) = WatchedFile::new(failing_file());
            let failed = match use_get_read {
                false => file.get_bytes(0, 16).map(|_| ()),
                true => file
                    .get_read(0)
                    .and_then(|mut r| r.read(&mut [0u8; 16]).map_err(ParquetError::from))
                    .map(|_| ()),
            };
            assert!(failed.is_err());
            let decode = ReaderError::Decode {
                path: "in.parquet".into(),
                row_group: 2,
                source: crate::DecodeError::Corrupt("text only".into()),
            };
            let explained = watch.explain(Path::new("in.parquet"), decode);
            assert!(
                matches!(&explained, ReaderError::Io { source, .. } if source.raw_os_error() == Some(libc::EIO)),
                "{explained:?}"
            );
            assert!(!explained.is_permanent() && !explained.is_bad_data());
        }
    }

    #[test]
    fn without_a_failed_read_the_error_stays_as_it_came() {
        let (_file, watch) = WatchedFile::new(failing_file());
        let corrupt = ReaderError::Decode {
            path: "in.parquet".into(),
            row_group: 2,
            source: crate::DecodeError::Corrupt("page".into()),
        };
        let explained = watch.explain(Path::new("in.parquet"), corrupt);
        assert!(matches!(explained, ReaderError::Decode { .. }));
    }

    #[test]
    fn a_file_truncated_rewritten_or_swapped_is_changed_and_one_left_alone_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.parquet");
        std::fs::write(&path, b"0123456789").unwrap();
        let recorded = |p: &Path| {
            let m = std::fs::metadata(p).unwrap();
            (
                m.len(),
                m.modified().ok(),
                segpredict_storage::file_identity(&m),
            )
        };
        let was = recorded(&path);
        let now = || std::fs::metadata(&path).unwrap();
        assert_eq!(changes(&was, &now()), None);
        // Same bytes, the mtime put back: only the change time tells.
        let mtime = now().modified().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&path, b"0123456789").unwrap();
        File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        assert_eq!(
            changes(&was, &now()).as_deref(),
            Some("change time (ctime) changed")
        );
        // Another file of the same size renamed over it.
        let other = dir.path().join("other.parquet");
        std::fs::write(&other, b"abcdefghij").unwrap();
        std::fs::rename(&other, &path).unwrap();
        let how = changes(&was, &now()).unwrap();
        assert!(how.contains("inode") && !how.contains("size"), "{how}");
        std::fs::write(&path, b"01234").unwrap();
        assert!(changes(&was, &now())
            .unwrap()
            .contains("size 10 -> 5 bytes"));
    }
}
