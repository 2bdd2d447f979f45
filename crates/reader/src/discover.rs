//! Turns the `path` setting into the run's input locations: a sorted list of
//! local Parquet files, each with its size and modification time.

use std::path::{Path, PathBuf};

use super::ReaderError;
use segpredict_core::message::InputFile;

/// A file is itself; a directory gives its `*.parquet` files (not hidden,
/// not `_`-prefixed, as Spark and Hive leave markers there); anything with
/// glob characters is a glob. The order is sorted so runs are repeatable.
/// Rows and row groups are filled in when the plan reads the footers.
pub fn input_files(path: &Path) -> Result<Vec<InputFile>, ReaderError> {
    input_paths(path)?.into_iter().map(located).collect()
}

fn input_paths(path: &Path) -> Result<Vec<PathBuf>, ReaderError> {
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

/// The file as it is now: its size and modification time.
fn located(path: PathBuf) -> Result<InputFile, ReaderError> {
    let metadata = std::fs::metadata(&path).map_err(|source| ReaderError::Io {
        path: path.clone(),
        source,
    })?;
    Ok(InputFile {
        size_bytes: metadata.len(),
        modified: metadata.modified().ok(),
        path,
        rows: 0,
        row_groups: 0,
    })
}

fn glob_files(pattern: &str) -> Result<Vec<PathBuf>, ReaderError> {
    let paths = glob::glob(pattern).map_err(|source| ReaderError::BadPattern {
        pattern: pattern.to_string(),
        source,
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
    let entries = std::fs::read_dir(dir).map_err(|source| ReaderError::Io {
        path: dir.to_path_buf(),
        source,
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
