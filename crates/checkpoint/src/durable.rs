//! Committing a file so that a crash at any moment leaves either the whole
//! file under its final name or nothing there: write a temporary file, fsync
//! it, rename it, fsync the directory (without the last step the rename
//! itself may be lost on power failure, on ext4 and XFS alike).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Flushes a directory's entries (a rename or an unlink in it) to disk.
pub fn fsync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Gives a complete, fsynced temporary file its final name, durably.
pub fn commit(temp: &Path, final_path: &Path) -> std::io::Result<()> {
    std::fs::rename(temp, final_path)?;
    fsync_dir(final_path.parent().unwrap_or(Path::new(".")))
}

/// A temporary name beside `path` that no other process or thread uses:
/// shards writing one directory may write the same marker at once.
pub fn unique_temp_name(path: &Path) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    path.with_file_name(format!(".{name}.{}-{n}.inprogress", std::process::id()))
}

/// Writes `bytes` to `path` atomically and durably. Two processes writing
/// the same path at once each commit a whole file; the later rename wins.
/// On any failure (a full disk included) the temporary file is removed.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let temp = unique_temp_name(path);
    let written = (|| {
        let mut file = File::create(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        commit(&temp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written
}

/// A temporary file that is removed when dropped unless it was committed,
/// so that every failure path (an error, a panic unwinding, a full disk)
/// cleans up after itself.
#[derive(Debug)]
pub struct TempGuard {
    path: PathBuf,
    armed: bool,
}

impl TempGuard {
    pub fn new(path: PathBuf) -> Self {
        Self { path, armed: true }
    }

    /// A guard that guards nothing (a placeholder once a file is committed).
    pub fn disarmed() -> Self {
        Self {
            path: PathBuf::new(),
            armed: false,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// fsyncs `file` (the temporary file's handle), renames it to
    /// `final_path` and fsyncs the directory; the guard is then disarmed.
    pub fn commit(mut self, file: File, final_path: &Path) -> std::io::Result<()> {
        file.sync_all()?;
        drop(file);
        commit(&self.path, final_path)?;
        self.armed = false;
        Ok(())
    }
}

impl Drop for TempGuard {
    fn drop(&mut self) {
        if self.armed {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_leaves_only_the_final_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("_run.json");
        write_atomic(&path, b"one").unwrap();
        write_atomic(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("_run.json")]);
    }

    #[test]
    fn a_failed_write_removes_its_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        // Renaming a file over a non-empty directory fails after the write.
        let path = dir.path().join("taken");
        std::fs::create_dir(&path).unwrap();
        std::fs::write(path.join("x"), b"").unwrap();
        assert!(write_atomic(&path, b"data").is_err());
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("taken")]);
    }

    #[test]
    fn an_uncommitted_guard_removes_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let temp = dir.path().join(".part.inprogress");
        std::fs::write(&temp, b"half").unwrap();
        drop(TempGuard::new(temp.clone()));
        assert!(!temp.exists());
        std::fs::write(&temp, b"whole").unwrap();
        let guard = TempGuard::new(temp.clone());
        let file = File::open(guard.path()).unwrap();
        let final_path = dir.path().join("part.parquet");
        guard.commit(file, &final_path).unwrap();
        assert!(!temp.exists());
        assert_eq!(std::fs::read(final_path).unwrap(), b"whole");
    }
}
