//! The output directory checked without touching it, for `segpredict check`:
//! the same refusals as [`WriterConfig::prepare_dir`], but nothing created,
//! cleared or written.

use std::path::Path;

use super::{is_our_output, WriterConfig, WriterError};

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
        let dir_error = |message: String| WriterError::Dir {
            path: dir.clone(),
            message,
        };
        if dir.exists() {
            if !dir.is_dir() {
                return Err(dir_error("it is not a directory".into()));
            }
            let entries = std::fs::read_dir(dir).map_err(|e| dir_error(e.to_string()))?;
            let ours: Vec<String> = entries
                .filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|name| is_our_output(name))
                .collect();
            if !ours.is_empty() && !self.overwrite {
                return Err(WriterError::NotEmpty {
                    path: dir.clone(),
                    found: format!("{} files such as {}", ours.len(), ours[0]),
                });
            }
            return writable(dir).map_err(dir_error);
        }
        // The nearest folder that exists is where the directory would be made.
        let parent = dir
            .ancestors()
            .skip(1)
            .find(|p| p.as_os_str().is_empty() || p.exists())
            .map(|p| {
                if p.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    p
                }
            })
            .unwrap_or(Path::new("."));
        if !parent.is_dir() {
            return Err(dir_error(format!(
                "{} is not a directory",
                parent.display()
            )));
        }
        writable(parent).map_err(|m| dir_error(format!("{}: {m}", parent.display())))
    }
}

/// `access(2)` with write and search permission: asks the kernel without
/// creating anything (and sees a read-only file system too).
fn writable(dir: &Path) -> Result<(), String> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| "the path holds a NUL byte".to_string())?;
    // SAFETY: `path` is a valid NUL-terminated string that outlives the call.
    let status = unsafe { libc::access(path.as_ptr(), libc::W_OK | libc::X_OK) };
    if status == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().to_string())
    }
}
