//! A local output folder checked without touching it, for `segpredict
//! check`: whether the run could create and write it. Whether it would
//! accept what is already there is the checkpoint's verdict.

use std::io;
use std::path::Path;

/// Whether `dir` (or the folder it would be created in) is writable, asked
/// without creating anything.
pub fn check_writable(dir: &Path) -> io::Result<()> {
    let target = match dir.exists() {
        true => dir,
        false => nearest_existing_folder(dir),
    };
    writable(target)
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
