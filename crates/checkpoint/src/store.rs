//! The store the checkpoint is written to: the one seam between the output
//! protocol (`checkpoint.rs`, `commit.rs`, the writers) and where the bytes
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

use segpredict_core::exit::{Classify, Failure};
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;

use crate::layout::temp_key;
use segpredict_core::shard::ShardSpec;

/// A store operation that failed, naming the object.
#[derive(Debug, thiserror::Error)]
#[error("{op} {location}")]
pub struct StoreError {
    pub op: &'static str,
    pub location: String,
    #[source]
    pub source: std::io::Error,
}

impl StoreError {
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
            NotADirectory | IsADirectory | PermissionDenied | ReadOnlyFilesystem | InvalidInput
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

/// A held lock; dropping it (or the process ending) frees the key.
pub trait Lock: Send + Sync + std::fmt::Debug {}

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
    /// Takes the lock `key` for `holder`, or names who holds it.
    fn lock(&self, key: &str, holder: &Holder)
        -> Result<Result<Box<dyn Lock>, Holder>, StoreError>;
}

/// A store on a local (or mounted POSIX) file system.
#[derive(Debug, Clone)]
pub struct LocalStore {
    root: PathBuf,
    tag: String,
}

impl LocalStore {
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

    /// `put_if_absent` one way: `Ok(false)` when the name is taken.
    fn put_if_absent_by(&self, way: Exclusive, key: &str, bytes: &[u8]) -> std::io::Result<bool> {
        let parent = self.parent_of(key).map_err(|e| e.source)?;
        if way == Exclusive::CreateNew {
            return create_new(&self.path(key), bytes).and_then(|created| {
                fsync_dir(&parent)?;
                Ok(created)
            });
        }
        let temp = self.temp_path(key);
        let written = (|| {
            let mut file = File::create(&temp)?;
            file.write_all(bytes)?;
            file.sync_all()?;
            // Closed before its name goes: on NFS an open file's unlink
            // leaves a `.nfs*` file behind.
            drop(file);
            let placed = match way {
                Exclusive::Link => std::fs::hard_link(&temp, self.path(key)),
                _ => rename_no_replace(&temp, &self.path(key)),
            };
            if way == Exclusive::Link || placed.is_err() {
                std::fs::remove_file(&temp)?;
            }
            match placed {
                Ok(()) => fsync_dir(&parent).map(|()| true),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
                Err(e) => Err(e),
            }
        })();
        if written.is_err() {
            let _ = std::fs::remove_file(&temp);
        }
        written
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

/// How a file system is asked to create a name only if it is free. Each
/// is tried in turn while the file system says it cannot (SMB, gcsfuse and
/// blobfuse mounts have no hard links; some have no `RENAME_NOREPLACE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Exclusive {
    /// link(2) of a finished temporary file: atomic, EEXIST when taken.
    Link,
    /// renameat2(2) with `RENAME_NOREPLACE`: atomic, EEXIST when taken.
    RenameNoReplace,
    /// `O_CREAT | O_EXCL` on the name itself, then the bytes: the name is
    /// taken atomically, but a reader may see it before its bytes (markers
    /// are a few hundred bytes, written by one call).
    CreateNew,
}

impl Exclusive {
    const IN_ORDER: [Exclusive; 3] = [
        Exclusive::Link,
        Exclusive::RenameNoReplace,
        Exclusive::CreateNew,
    ];
}

fn unsupported() -> std::io::Error {
    std::io::Error::from(std::io::ErrorKind::Unsupported)
}

/// The file system cannot do this operation here: another way may.
fn is_unsupported(error: &std::io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::EPERM | libc::EOPNOTSUPP | libc::ENOSYS | libc::EINVAL | libc::EXDEV)
    ) || error.kind() == std::io::ErrorKind::Unsupported
}

/// Creates `path` only if it is free, then writes `bytes` into it.
fn create_new(path: &Path, bytes: &[u8]) -> std::io::Result<bool> {
    let mut file = match File::create_new(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(false),
        Err(e) => return Err(e),
    };
    let written = file.write_all(bytes).and_then(|()| file.sync_all());
    if written.is_err() {
        // Not left half-written under the name: the next try may take it.
        let _ = std::fs::remove_file(path);
    }
    written.map(|()| true)
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
        let mut result = Err(unsupported());
        for way in Exclusive::IN_ORDER {
            result = self.put_if_absent_by(way, key, bytes);
            match &result {
                Err(e) if is_unsupported(e) => continue,
                _ => break,
            }
        }
        result.map_err(self.error("writing", key))
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
        // last key gone, its folder goes too (never the root; a folder
        // that is not empty stays).
        if let Some(folder) = path
            .parent()
            .filter(|f| *f != self.root && f.starts_with(&self.root))
        {
            let _ = std::fs::remove_dir(folder);
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
    fn every_way_of_putting_if_absent_takes_a_free_name_once_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::new(dir.path());
        for way in Exclusive::IN_ORDER {
            let key = format!("_progress/marker-{way:?}.json");
            assert!(
                store.put_if_absent_by(way, &key, b"first").unwrap(),
                "{way:?}"
            );
            assert!(
                !store.put_if_absent_by(way, &key, b"second").unwrap(),
                "{way:?}"
            );
            assert_eq!(store.get(&key).unwrap().unwrap(), &b"first"[..], "{way:?}");
        }
        let keys = store.list("").unwrap();
        assert_eq!(keys.len(), 3, "{keys:?}");
        assert!(keys.iter().all(|k| !k.contains("inprogress")), "{keys:?}");
    }

    #[test]
    fn a_file_system_without_a_way_is_told_from_a_taken_name() {
        for errno in [libc::EPERM, libc::EOPNOTSUPP, libc::ENOSYS, libc::EINVAL] {
            assert!(is_unsupported(&std::io::Error::from_raw_os_error(errno)));
        }
        for errno in [libc::EEXIST, libc::ENOSPC, libc::EIO] {
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
            .lock("_progress/lock", &Holder("pid 1".into()))
            .unwrap();
        let first = first.expect("the first holder takes the lock");
        let refused = store
            .lock("_progress/lock", &Holder("pid 2".into()))
            .unwrap();
        assert_eq!(refused.unwrap_err(), Holder("pid 1".into()));
        let asked = store.holder("_progress/lock").unwrap();
        assert_eq!(asked, Some(Holder("pid 1".into())));
        drop(first);
        assert_eq!(store.holder("_progress/lock").unwrap(), None);
        assert!(store
            .lock("_progress/lock", &Holder("pid 3".into()))
            .unwrap()
            .is_ok());
    }
}
