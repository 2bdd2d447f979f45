//! The store a run's output and checkpoint are written to: the one seam
//! between the output protocol (`segpredict-checkpoint`) and where the bytes
//! live. Keys are `/`-separated names relative to the output location
//! (`part-a001-00-00001.parquet`, `_progress/done-s001of003.json`).
//!
//! What a store must promise for resume and shards to stay exact:
//! - an object under a key is whole: [`Store::put`] and a finished
//!   [`Upload`] replace it atomically, and a failed or dropped upload leaves
//!   nothing under the key;
//! - once [`Store::put`] or [`Upload::finish`] returns, the object survives
//!   a crash of this process or machine (on disk: fsync of the file and of
//!   its directory);
//! - [`Store::list`] after a completed put shows the key (read-after-write);
//! - [`Store::put_if_absent`] is refused, not replaced, when the key exists;
//! - [`Store::lock`] admits one holder per key at a time and frees the key
//!   when the holder dies (on disk: `flock`, released by the kernel; a store
//!   without locks needs a lease with an owner and an expiry).
//!
//! [`LocalStore`] keeps these with a temporary file, fsync, rename and a
//! directory fsync. Nothing above this module names `std::fs` for output.

#![warn(missing_docs)]

pub mod bucket;
pub mod conformance;
pub mod temp;
mod writable;

pub use bucket::BucketStore;
/// Where bytes live (paths, URLs, identities), for the protocol above.
pub use segpredict_storage as storage;

use segpredict_core::exit::{Classify, Failure};
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;

use crate::temp::temp_key;
use segpredict_core::shard::ShardSpec;
use std::sync::Arc;

/// The store of an output location: a local folder (temporary names carry
/// `tag`, the writer's shard), or a prefix in a bucket.
pub fn open_store(
    location: &Path,
    tag: &str,
) -> Result<Arc<dyn Store>, segpredict_storage::StorageError> {
    use segpredict_storage::Location;
    let text = location.to_string_lossy();
    Ok(match Location::parse(&text)? {
        Location::Local(path) => Arc::new(LocalStore::new(path).tagged(tag)),
        Location::Object(url) => Arc::new(BucketStore::new(
            url,
            segpredict_storage::settings().lock_lease,
        )),
    })
}

/// A store operation that failed, naming the object.
#[derive(Debug, thiserror::Error)]
#[error("{op} {location}")]
pub struct StoreError {
    /// What was being done, as a verb phrase for the message
    /// (`"reading"`, `"writing into"`, `"uploading"`).
    pub op: &'static str,
    /// The full path or URL of the object (the store's `locate`), not the
    /// bare key, so the message names where it failed.
    pub location: String,
    /// The underlying failure; object-store errors arrive mapped to an I/O
    /// error kind so callers can match on [`Self::kind`].
    #[source]
    pub source: std::io::Error,
}

impl StoreError {
    /// The failure's I/O kind (`NotFound`, `AlreadyExists`, ...), which
    /// callers test to tell a missing or already-written object from a
    /// real failure.
    pub fn kind(&self) -> std::io::ErrorKind {
        self.source.kind()
    }
}

impl Classify for StoreError {
    /// Whether the same call can succeed later (a full disk, a flaky mount,
    /// a network store's 5xx), or never will (permissions, a file where a
    /// folder should be).
    fn failure(&self) -> Failure {
        use std::io::ErrorKind::*;
        Failure::permanent_if(matches!(
            self.source.kind(),
            NotADirectory
                | IsADirectory
                | PermissionDenied
                | ReadOnlyFilesystem
                | InvalidInput
                | Unsupported
        ))
    }
}

/// Who holds a lock: written into it, shown to the one refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder(pub String);

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Holder {
    /// The holder's text, with how long ago a `since TIME` in it was
    /// (`pid 7 on h, since 2026-12-06T23:01:00Z (12 min ago)`).
    pub fn described(&self) -> String {
        let since = self.0.split_once("since ").and_then(|(_, rest)| {
            let time = rest.split([' ', ',', ')']).next()?;
            humantime::parse_rfc3339(time).ok()
        });
        match since {
            Some(t) => format!("{} ({})", self.0, segpredict_core::time::relative(t)),
            None => self.0.clone(),
        }
    }
}

/// A held lock; dropping it (or the process ending) frees the key.
pub trait Lock: Send + Sync + std::fmt::Debug {
    /// Who took the lock over, if this holder lost it (a lease renewed too
    /// late: the process stalled past it). A kernel lock is never lost.
    fn lost(&self) -> Option<Holder> {
        None
    }
}

/// A flag a lock sets when it is lost (the run's cancel flag).
pub type OnLost = Option<std::sync::Arc<std::sync::atomic::AtomicBool>>;

/// A streamed object (a Parquet part): visible under its key only once
/// [`Upload::finish`] returns; dropped unfinished, it leaves nothing.
pub trait Upload: Write + Send {
    /// Makes the object visible under its key, whole and durable.
    fn finish(self: Box<Self>) -> Result<(), StoreError>;
}

/// Where a run's output and checkpoint live.
pub trait Store: Send + Sync + std::fmt::Debug {
    /// The location itself, as a person names it (a path, later a URL).
    fn location(&self) -> String;
    /// Where `key` is, as a person names it.
    fn locate(&self, key: &str) -> String;
    /// Creates the location if it is missing (a no-op on object stores).
    fn ensure(&self) -> Result<(), StoreError>;
    /// Whether a run could write here, asked without writing (`check`): a
    /// local folder's permissions; a bucket answers by its listing, which
    /// the verdict has made already.
    fn check_writable(&self) -> Result<(), StoreError> {
        Ok(())
    }
    /// Writes `bytes` under `key`, replacing what was there, atomically.
    fn put(&self, key: &str, bytes: &[u8]) -> Result<(), StoreError>;
    /// Writes `bytes` under `key` only if nothing is there: `Ok(false)`
    /// when something is (it is left as it was).
    fn put_if_absent(&self, key: &str, bytes: &[u8]) -> Result<bool, StoreError>;
    /// The object under `key`, or `None`.
    fn get(&self, key: &str) -> Result<Option<Bytes>, StoreError>;
    /// The object under `key`, which a listing showed: gone is an error
    /// naming it (retryable: another process may be replacing it).
    fn read(&self, key: &str) -> Result<Bytes, StoreError> {
        self.get(key)?.ok_or_else(|| StoreError {
            op: "reading",
            location: self.locate(key),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "listed, then gone"),
        })
    }
    /// Every key starting with `prefix`, sorted (objects only: a local
    /// folder is listed through its contents).
    fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError>;
    /// Removes `key`; a missing key is not an error.
    fn delete(&self, key: &str) -> Result<(), StoreError>;
    /// Starts a streamed object under `key`.
    fn upload(&self, key: &str) -> Result<Box<dyn Upload>, StoreError>;
    /// Who holds the lock `key` now, asked without taking it and without
    /// writing anything (`check`).
    fn holder(&self, key: &str) -> Result<Option<Holder>, StoreError>;
    /// Takes the lock `key` for `holder`, or names who holds it; `on_lost`
    /// is set if the lock is lost while held.
    fn lock(
        &self,
        key: &str,
        holder: &Holder,
        on_lost: OnLost,
    ) -> Result<Result<Box<dyn Lock>, Holder>, StoreError>;
}

/// A store on a local (or mounted POSIX) file system.
#[derive(Debug, Clone)]
pub struct LocalStore {
    root: PathBuf,
    tag: String,
}

impl LocalStore {
    /// A store rooted at `root` (created later by `ensure`), tagging its
    /// temporary files as the whole input's; use [`Self::tagged`] for a
    /// shard.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            tag: ShardSpec::WHOLE.tag(),
        }
    }

    /// Temporary files carry `tag` (the shard's, or `commit` for a commit
    /// by hand), so the next attempt of the same writer finds its own
    /// leftovers and no one else's.
    pub fn tagged(mut self, tag: &str) -> Self {
        self.tag = tag.to_string();
        self
    }

    /// The directory every key is relative to.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn path(&self, key: &str) -> PathBuf {
        self.root.join(key)
    }

    fn error(&self, op: &'static str, key: &str) -> impl FnOnce(std::io::Error) -> StoreError {
        let location = self.locate(key);
        move |source| StoreError {
            op,
            location,
            source,
        }
    }

    /// `bytes` in a new temporary file, synced and closed (on NFS an open
    /// file's unlink leaves a `.nfs*` file behind).
    fn write_temp(&self, temp: &Path, bytes: &[u8]) -> std::io::Result<()> {
        let mut file = File::create(temp)?;
        file.write_all(bytes)?;
        file.sync_all()
    }

    /// A temporary path beside `key`'s, unique to this process and call.
    fn temp_path(&self, key: &str) -> PathBuf {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let unique = format!("{}-{}-{n}", self.tag, std::process::id());
        self.path(&temp_key(key, &unique))
    }

    /// The folder `key` lives in, created if missing.
    fn parent_of(&self, key: &str) -> Result<PathBuf, StoreError> {
        let path = self.path(key);
        let parent = path.parent().unwrap_or(&self.root).to_path_buf();
        std::fs::create_dir_all(&parent).map_err(self.error("creating the folder of", key))?;
        Ok(parent)
    }
}

/// Names the file system itself keeps in a folder, never output: a mounted
/// volume's `lost+found` (root's, unreadable to others), NFS's silly-renamed
/// open files and FUSE's hidden ones.
fn is_file_system_own(key: &str) -> bool {
    let name = key.rsplit_once('/').map_or(key, |(_, name)| name);
    key == "lost+found" || name.starts_with(".nfs") || name.starts_with(".fuse_hidden")
}

/// Flushes a directory's entries (a rename or an unlink in it) to disk:
/// without it the rename itself may be lost on power failure (ext4, XFS).
fn fsync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// How a finished temporary file is put under a name only if the name is
/// free. Both are atomic and fail with EEXIST when the name is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Way {
    /// link(2).
    Link,
    /// renameat2(2) with `RENAME_NOREPLACE`, where there are no hard links
    /// (SMB, some FUSE mounts).
    RenameNoReplace,
}

/// Puts `temp` under `target` only if that name is free: `Ok(false)` when
/// it is taken. A file system that can do neither way is an error: an
/// `O_EXCL` create would show a reader the name before its bytes.
fn place_exclusively(temp: &Path, target: &Path) -> std::io::Result<bool> {
    let mut last = std::io::Error::from(std::io::ErrorKind::Unsupported);
    for way in [Way::Link, Way::RenameNoReplace] {
        match place_by(way, temp, target) {
            Err(e) if is_unsupported(&e) => last = e,
            placed => return placed,
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        NoExclusiveCreate(last),
    ))
}

#[derive(Debug, thiserror::Error)]
#[error("this file system can neither hard-link nor rename without replacing, so two writers of one name cannot be told apart: write to the bucket's URL (s3://, gs://, az://) rather than a mount of it")]
struct NoExclusiveCreate(#[source] std::io::Error);

fn place_by(way: Way, temp: &Path, target: &Path) -> std::io::Result<bool> {
    let placed = match way {
        Way::Link => std::fs::hard_link(temp, target),
        Way::RenameNoReplace => rename_no_replace(temp, target),
    };
    match placed {
        Ok(()) => Ok(true),
        // NFS retries a link whose reply was lost and then hears EEXIST
        // about its own link: the temporary file then has two names.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(way == Way::Link
            && std::fs::metadata(temp).is_ok_and(|m| {
                use std::os::unix::fs::MetadataExt;
                m.nlink() == 2
            })),
        Err(e) => Err(e),
    }
}

/// The file system cannot do this here (no hard links, no
/// `RENAME_NOREPLACE`): the other way may.
fn is_unsupported(error: &std::io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::EPERM | libc::EOPNOTSUPP | libc::ENOSYS | libc::EINVAL)
    ) || error.kind() == std::io::ErrorKind::Unsupported
}

fn rename_no_replace(from: &Path, to: &Path) -> std::io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| CString::new(p.as_os_str().as_bytes()).map_err(std::io::Error::other);
    let (from, to) = (c(from)?, c(to)?);
    // SAFETY: two valid NUL-terminated paths; the call only reads them.
    let done = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    match done {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

impl Store for LocalStore {
    fn location(&self) -> String {
        self.root.display().to_string()
    }

    fn locate(&self, key: &str) -> String {
        self.path(key).display().to_string()
    }

    fn check_writable(&self) -> Result<(), StoreError> {
        writable::check_writable(&self.root).map_err(|source| StoreError {
            op: "writing into",
            location: self.location(),
            source,
        })
    }

    fn ensure(&self) -> Result<(), StoreError> {
        std::fs::create_dir_all(&self.root).map_err(self.error("creating", ""))
    }

    fn put(&self, key: &str, bytes: &[u8]) -> Result<(), StoreError> {
        let mut upload = self.upload(key)?;
        upload
            .write_all(bytes)
            .map_err(self.error("writing", key))?;
        upload.finish()
    }

    fn put_if_absent(&self, key: &str, bytes: &[u8]) -> Result<bool, StoreError> {
        let parent = self.parent_of(key)?;
        let temp = self.temp_path(key);
        let placed = self
            .write_temp(&temp, bytes)
            .and_then(|()| place_exclusively(&temp, &self.path(key)));
        // After a link the temporary name is a second name; after a rename
        // it is gone; after a failure it is all there is.
        let _ = std::fs::remove_file(&temp);
        match placed {
            Ok(true) => fsync_dir(&parent).map(|()| true),
            other => other,
        }
        .map_err(self.error("writing", key))
    }

    fn get(&self, key: &str) -> Result<Option<Bytes>, StoreError> {
        let mut bytes = Vec::new();
        match File::open(self.path(key)).and_then(|mut f| f.read_to_end(&mut bytes)) {
            Ok(_) => Ok(Some(Bytes::from(bytes))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.error("reading", key)(e)),
        }
    }

    fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        let (folder, _) = prefix.rsplit_once('/').unwrap_or(("", prefix));
        let entries = match std::fs::read_dir(self.path(folder)) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(self.error("listing", folder)(e)),
        };
        let mut keys = Vec::new();
        for entry in entries {
            let entry = entry.map_err(self.error("listing", folder))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let key = match folder.is_empty() {
                true => name,
                false => format!("{folder}/{name}"),
            };
            if !key.starts_with(prefix) || is_file_system_own(&key) {
                continue;
            }
            match entry.file_type().map(|t| t.is_dir()) {
                Ok(true) => keys.extend(self.list(&format!("{key}/"))?),
                _ => keys.push(key),
            }
        }
        keys.sort();
        Ok(keys)
    }

    fn delete(&self, key: &str) -> Result<(), StoreError> {
        let path = self.path(key);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(self.error("removing", key)(e));
            }
            _ => {}
        }
        // Folders are only where keys live, as in an object store: the
        // last key gone, its folders go too, up to the first that is not
        // empty (never the root).
        let folders = path.ancestors().skip(1);
        for folder in folders.take_while(|f| *f != self.root && f.starts_with(&self.root)) {
            if std::fs::remove_dir(folder).is_err() {
                break;
            }
        }
        Ok(())
    }

    fn upload(&self, key: &str) -> Result<Box<dyn Upload>, StoreError> {
        let parent = self.parent_of(key)?;
        let temp = self.temp_path(key);
        let file = File::create(&temp).map_err(self.error("creating", key))?;
        Ok(Box::new(LocalUpload {
            file: Some(file),
            temp,
            parent,
            target: self.path(key),
            location: self.locate(key),
        }))
    }

    fn holder(&self, key: &str) -> Result<Option<Holder>, StoreError> {
        let mut file = match File::open(self.path(key)) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(self.error("opening the lock", key)(e)),
        };
        use std::os::fd::AsRawFd;
        // SAFETY: `file` is an open descriptor for the duration of the call.
        let free = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
        if free {
            // Released when `file` closes, at once.
            return Ok(None);
        }
        let mut text = String::new();
        let _ = file.read_to_string(&mut text);
        Ok(Some(Holder(text.trim().to_string())))
    }

    fn lock(
        &self,
        key: &str,
        holder: &Holder,
        _on_lost: OnLost,
    ) -> Result<Result<Box<dyn Lock>, Holder>, StoreError> {
        let mut file = loop {
            let (mut file, taken) = self.try_flock(key)?;
            if !taken {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                return Ok(Err(Holder(text.trim().to_string())));
            }
            // A holder that was ending may have removed the file after we
            // opened it: a lock on a name no longer there locks nothing.
            if self.is_still_named(&file, key) {
                break file;
            }
        };
        // The lock is ours: say who holds it, for the one refused next.
        let said = file
            .set_len(0)
            .and_then(|()| file.write_all(holder.0.as_bytes()))
            .and_then(|()| file.flush());
        said.map_err(self.error("writing the lock", key))?;
        Ok(Ok(Box::new(FileLock { _file: file })))
    }
}

impl LocalStore {
    /// Opens (creating) the lock file `key` and tries `flock` on it.
    fn try_flock(&self, key: &str) -> Result<(File, bool), StoreError> {
        self.parent_of(key)?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(self.path(key))
            .map_err(self.error("opening the lock", key))?;
        use std::os::fd::AsRawFd;
        // SAFETY: `file` is an open descriptor for the duration of the call.
        let taken = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
        if !taken {
            let error = std::io::Error::last_os_error();
            if error.kind() != std::io::ErrorKind::WouldBlock {
                return Err(self.error("locking", key)(error));
            }
        }
        Ok((file, taken))
    }

    /// Whether the open `file` is still the one named `key`.
    fn is_still_named(&self, file: &File, key: &str) -> bool {
        use std::os::unix::fs::MetadataExt;
        let (open, named) = (file.metadata(), std::fs::metadata(self.path(key)));
        matches!((open, named), (Ok(a), Ok(b)) if a.dev() == b.dev() && a.ino() == b.ino())
    }
}

/// A `flock` held for as long as the file is open (the kernel drops it when
/// the process dies, kill -9 included).
#[derive(Debug)]
struct FileLock {
    _file: File,
}

impl Lock for FileLock {}

/// A temporary file renamed to its key when finished, removed otherwise.
struct LocalUpload {
    // Closed before the temporary file is removed.
    file: Option<File>,
    temp: PathBuf,
    parent: PathBuf,
    target: PathBuf,
    location: String,
}

impl Write for LocalUpload {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self.file.as_mut() {
            Some(file) => file.write(buf),
            None => Err(std::io::Error::other("the upload is finished")),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.as_mut().map_or(Ok(()), |f| f.flush())
    }
}

impl Upload for LocalUpload {
    fn finish(mut self: Box<Self>) -> Result<(), StoreError> {
        let file = self.file.take();
        let done = (|| {
            if let Some(file) = file {
                file.sync_all()?;
            }
            std::fs::rename(&self.temp, &self.target)?;
            fsync_dir(&self.parent)
        })();
        done.map_err(|source| StoreError {
            op: "writing",
            location: self.location.clone(),
            source,
        })
    }
}

impl Drop for LocalUpload {
    fn drop(&mut self) {
        // Unfinished (an error, a cancel, a panic unwinding): nothing under
        // the key, and no temporary file left behind. After `finish` the
        // rename has moved it, and this removal finds nothing.
        self.file.take();
        let _ = std::fs::remove_file(&self.temp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut n: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        n.sort();
        n
    }

    #[test]
    fn put_replaces_whole_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::new(dir.path());
        store.put("_run.json", b"one").unwrap();
        store.put("_run.json", b"two").unwrap();
        assert_eq!(store.get("_run.json").unwrap().unwrap(), &b"two"[..]);
        assert_eq!(names(dir.path()), ["_run.json"]);
        assert_eq!(store.get("missing").unwrap(), None);
    }

    #[test]
    fn each_way_of_placing_takes_a_free_name_once() {
        let dir = tempfile::tempdir().unwrap();
        for way in [Way::Link, Way::RenameNoReplace] {
            let target = dir.path().join(format!("marker-{way:?}.json"));
            for (bytes, placed) in [(&b"first"[..], true), (&b"second"[..], false)] {
                let temp = dir.path().join(format!(".temp-{way:?}"));
                std::fs::write(&temp, bytes).unwrap();
                assert_eq!(place_by(way, &temp, &target).unwrap(), placed, "{way:?}");
                let _ = std::fs::remove_file(&temp);
            }
            assert_eq!(std::fs::read(&target).unwrap(), b"first", "{way:?}");
        }
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 2, "{left:?}");
    }

    #[test]
    fn a_file_system_without_a_way_is_told_from_a_taken_name() {
        for errno in [libc::EPERM, libc::EOPNOTSUPP, libc::ENOSYS, libc::EINVAL] {
            assert!(is_unsupported(&std::io::Error::from_raw_os_error(errno)));
        }
        for errno in [libc::EEXIST, libc::ENOSPC, libc::EIO, libc::EXDEV] {
            assert!(!is_unsupported(&std::io::Error::from_raw_os_error(errno)));
        }
    }

    #[test]
    fn put_if_absent_refuses_an_existing_key() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::new(dir.path());
        assert!(store.put_if_absent("_progress/m.json", b"first").unwrap());
        assert!(!store.put_if_absent("_progress/m.json", b"second").unwrap());
        assert_eq!(
            store.get("_progress/m.json").unwrap().unwrap(),
            &b"first"[..]
        );
        assert_eq!(names(&dir.path().join("_progress")), ["m.json"]);
    }

    #[test]
    fn an_unfinished_upload_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::new(dir.path());
        let mut upload = store.upload("part.parquet").unwrap();
        upload.write_all(b"half").unwrap();
        drop(upload);
        assert!(names(dir.path()).is_empty());
        let mut upload = store.upload("part.parquet").unwrap();
        upload.write_all(b"whole").unwrap();
        upload.finish().unwrap();
        assert_eq!(names(dir.path()), ["part.parquet"]);
    }

    #[test]
    fn a_failed_finish_removes_its_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::new(dir.path());
        // Renaming a file over a non-empty directory fails after the write.
        std::fs::create_dir_all(dir.path().join("taken/x")).unwrap();
        assert!(store.put("taken", b"data").is_err());
        assert_eq!(names(dir.path()), ["taken"]);
    }

    #[test]
    fn list_finds_keys_by_prefix_through_folders() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::new(dir.path());
        for key in [
            "a.parquet",
            "_progress/done-x.json",
            "_progress/rejects-1",
            "b",
        ] {
            store.put(key, b"").unwrap();
        }
        assert_eq!(
            store.list("").unwrap(),
            [
                "_progress/done-x.json",
                "_progress/rejects-1",
                "a.parquet",
                "b"
            ]
        );
        assert_eq!(store.list("_progress/re").unwrap(), ["_progress/rejects-1"]);
        assert!(store.list("nowhere/").unwrap().is_empty());
    }

    #[test]
    fn a_lock_admits_one_holder_and_names_it_to_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::new(dir.path());
        let first = store
            .lock("_progress/lock", &Holder("pid 1".into()), None)
            .unwrap();
        let first = first.expect("the first holder takes the lock");
        let refused = store
            .lock("_progress/lock", &Holder("pid 2".into()), None)
            .unwrap();
        assert_eq!(refused.unwrap_err(), Holder("pid 1".into()));
        let asked = store.holder("_progress/lock").unwrap();
        assert_eq!(asked, Some(Holder("pid 1".into())));
        drop(first);
        assert_eq!(store.holder("_progress/lock").unwrap(), None);
        assert!(store
            .lock("_progress/lock", &Holder("pid 3".into()), None)
            .unwrap()
            .is_ok());
    }
}
