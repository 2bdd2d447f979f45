//! Turns the `path` setting into a sorted list of Parquet files.

use std::path::{Path, PathBuf};

use super::ReaderError;

/// A file is itself; a directory gives its `*.parquet` files (not hidden,
/// not `_`-prefixed, as Spark and Hive leave markers there); anything with
/// glob characters is a glob. The order is sorted so runs are repeatable.
pub fn input_files(path: &Path) -> Result<Vec<PathBuf>, ReaderError> {
    let text = path.to_string_lossy();
    if text.contains(['*', '?', '[']) && !path.exists() {
        return glob_files(&text);
    }
    if path.is_dir() {
        return dir_files(path);
    }
    if path.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    Err(ReaderError::Missing {
        path: path.to_path_buf(),
    })
}

fn glob_files(pattern: &str) -> Result<Vec<PathBuf>, ReaderError> {
    let paths = glob::glob(pattern).map_err(|e| ReaderError::BadPattern {
        pattern: pattern.to_string(),
        message: e.to_string(),
    })?;
    let mut files: Vec<PathBuf> = paths
        .filter_map(Result::ok)
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(ReaderError::NoMatch {
            pattern: pattern.to_string(),
        });
    }
    Ok(files)
}

fn dir_files(dir: &Path) -> Result<Vec<PathBuf>, ReaderError> {
    let entries = std::fs::read_dir(dir).map_err(|e| ReaderError::Io {
        path: dir.to_path_buf(),
        message: e.to_string(),
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file() && is_data_file(p))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(ReaderError::NoMatch {
            pattern: format!("{}/*.parquet", dir.display()),
        });
    }
    Ok(files)
}

fn is_data_file(path: &Path) -> bool {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    name.ends_with(".parquet") && !name.starts_with('.') && !name.starts_with('_')
}
