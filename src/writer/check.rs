//! The output directory checked without touching it, for `segpredict check`:
//! the same refusals as [`WriterConfig::prepare_dir`], but nothing created,
//! cleared or written.

use std::io;
use std::path::Path;

use super::{OutputLayout, WriterConfig, WriterError};

impl WriterConfig {
    /// Whether `prepare_dir` would succeed: settings valid, no earlier
    /// output unless `overwrite`, and the directory (or the folder it would
    /// be created in) writable.
    pub fn check_dir(&self) -> Result<(), WriterError> {
        if self.rows_per_file == 0 {
            return Err(WriterError::Config(
                "rows_per_file must be at least 1".into(),
            ));
        }
        let dir = &self.dir;
        let dir_error = |source| WriterError::Dir {
            path: dir.clone(),
            source,
        };
        if !dir.exists() {
            return writable(nearest_existing_folder(dir)).map_err(dir_error);
        }
        let ours: Vec<String> = std::fs::read_dir(dir)
            .map_err(dir_error)?
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| OutputLayout::is_ours(name))
            .collect();
        if !ours.is_empty() && !self.overwrite {
            return Err(WriterError::NotEmpty {
                path: dir.clone(),
                found: format!("{} files such as {}", ours.len(), ours[0]),
            });
        }
        writable(dir).map_err(dir_error)
    }
}

/// Where `create_dir_all` would start creating `dir`.
fn nearest_existing_folder(dir: &Path) -> &Path {
    dir.ancestors()
        .skip(1)
        .find(|p| p.as_os_str().is_empty() || p.exists())
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// A directory with write and search permission, asked of the kernel with
/// `access(2)` so nothing is created (a read-only file system shows too).
fn writable(dir: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    if !dir.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::NotADirectory,
            format!("{} is not a directory", dir.display()),
        ));
    }
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: `path` is a valid NUL-terminated string that outlives the call.
    let status = unsafe { libc::access(path.as_ptr(), libc::W_OK | libc::X_OK) };
    if status == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
