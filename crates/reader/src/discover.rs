//! Turns the `path` setting into the run's input locations: a sorted list of
//! Parquet files, each with what identifies it (a local file: its size,
//! modification time, inode and change time; an object: its size and ETag),
//! under one spelling of its path (a local path canonical).

use std::path::{Path, PathBuf};

use super::ReaderError;
use segpredict_core::message::InputFile;

/// A file is itself; a directory gives its `*.parquet` files (not hidden,
/// not `_`-prefixed, as Spark and Hive leave markers there); anything with
/// glob characters is a glob, whose matches are left out the same way when
/// any part of their path below the glob's literal root starts with `_` or
/// `.` (so `out/**/*.parquet` never reads `_batches.parquet` or
/// `_progress/`). The order is sorted so runs are repeatable.
/// Rows, row groups and the footer hash are filled in when the plan reads
/// the footers.
pub fn input_files(path: &Path) -> Result<Vec<InputFile>, ReaderError> {
    let text = path.to_string_lossy();
    if segpredict_storage::is_object_url(&text) {
        return object_files(&text);
    }
    let input = canonical_input(path);
    // Partition folders are those below the folder given (or the glob's
    // literal root); a file named outright has none.
    let root = if is_glob(&input) {
        glob_root(&input)
    } else {
        input.clone()
    };
    input_paths(&input)?
        .into_iter()
        .map(|file| {
            let below = file.strip_prefix(&root).unwrap_or(Path::new(""));
            let partitions = partitions_of(&below.to_string_lossy());
            located(file).map(|f| InputFile { partitions, ..f })
        })
        .collect()
}

/// The Hive partitions of a file's path below the input's root: each
/// folder named `key=value` (not the file's own name), outermost first,
/// the value percent-decoded as Hive and pyarrow write it, and
/// `__HIVE_DEFAULT_PARTITION__` (Hive's null) as `None`. Other folders are
/// no partition.
pub(crate) fn partitions_of(below_root: &str) -> Vec<(String, Option<String>)> {
    let mut parts: Vec<&str> = below_root.split('/').filter(|p| !p.is_empty()).collect();
    parts.pop();
    parts
        .into_iter()
        .filter_map(|part| part.split_once('='))
        .filter(|(key, _)| !key.is_empty())
        .map(|(key, value)| {
            let value = percent_decode(value);
            let value = Some(value).filter(|v| v != "__HIVE_DEFAULT_PARTITION__");
            (percent_decode(key), value)
        })
        .collect()
}

/// `%XX` escapes decoded; anything else (a stray `%`) kept as it is.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The `path` setting in one spelling, so `./in`, `in/`, `file:///data/in`
/// and `/data/in` are one input (and resume one output): a file or folder
/// canonical, a glob with its literal root canonical.
fn canonical_input(path: &Path) -> PathBuf {
    let text = path.to_string_lossy();
    let path = Path::new(text.strip_prefix("file://").unwrap_or(&text));
    if !is_glob(path) {
        return segpredict_storage::canonical_path(path);
    }
    let rest: PathBuf = path
        .components()
        .skip(literal_components(path).count())
        .collect();
    segpredict_storage::canonical_path(&glob_root(path)).join(rest)
}

/// An object-store URL: the object itself when one has exactly that key,
/// else the `*.parquet` objects below the prefix (or matching the glob),
/// left out as for a folder when a part of the key below the prefix starts
/// with `_` or `.`. Identity: the object's size and ETag (every read is
/// pinned to it), or `version ID` where a store gives a version and no ETag.
fn object_files(text: &str) -> Result<Vec<InputFile>, ReaderError> {
    let url = match segpredict_storage::Location::parse(text).map_err(|e| storage_error(text, e))? {
        segpredict_storage::Location::Object(url) => url,
        segpredict_storage::Location::Local(path) => return input_files(&path),
    };
    let objects = segpredict_storage::list_objects(&url).map_err(|e| storage_error(text, e))?;
    let literal = url.prefix().split(['*', '?', '[']).next().unwrap_or("");
    // Markers and partitions are looked for below the prefix, or below a
    // glob's literal folder.
    let root = if segpredict_storage::is_glob(url.prefix()) {
        literal.rsplit_once('/').map_or("", |(root, _)| root)
    } else {
        url.prefix()
    };
    let exact: Vec<_> = objects
        .iter()
        .filter(|o| o.location.as_ref() == url.prefix())
        .collect();
    let chosen: Vec<_> = if exact.is_empty() {
        objects
            .iter()
            .filter(|o| is_data_key(o.location.as_ref(), root))
            .collect()
    } else {
        exact
    };
    if chosen.is_empty() {
        return Err(ReaderError::NoMatch {
            pattern: format!("{text} (*.parquet objects)"),
        });
    }
    Ok(chosen
        .into_iter()
        .map(|o| InputFile {
            partitions: o
                .location
                .as_ref()
                .strip_prefix(root)
                .map(partitions_of)
                .unwrap_or_default(),
            size_bytes: o.size,
            version: o
                .e_tag
                .clone()
                .or_else(|| o.version.as_ref().map(|v| format!("version {v}")))
                .unwrap_or_default(),
            ..InputFile::unplanned(PathBuf::from(url.url_of(&o.location)))
        })
        .collect())
}

/// A `*.parquet` key none of whose parts below `root` starts with `_` or `.`.
fn is_data_key(key: &str, root: &str) -> bool {
    let below = key
        .strip_prefix(root)
        .unwrap_or(key)
        .trim_start_matches('/');
    key.ends_with(".parquet") && !below.split('/').any(|part| part.starts_with(['_', '.']))
}

fn storage_error(location: &str, error: segpredict_storage::StorageError) -> ReaderError {
    ReaderError::Storage {
        location: location.to_string(),
        source: Box::new(error),
    }
}

fn input_paths(path: &Path) -> Result<Vec<PathBuf>, ReaderError> {
    let text = path.to_string_lossy();
    if is_glob(path) {
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

/// The file as it is now: its size, modification time, inode and change
/// time (the plan takes them again from the file it opens).
fn located(path: PathBuf) -> Result<InputFile, ReaderError> {
    let metadata = std::fs::metadata(&path).map_err(|source| ReaderError::Io {
        path: path.clone(),
        source,
    })?;
    let mut file = InputFile::unplanned(path);
    set_identity(&mut file, &metadata);
    Ok(file)
}

/// Records `metadata`'s size, modification time, inode and change time as
/// `file`'s identity.
pub(crate) fn set_identity(file: &mut InputFile, metadata: &std::fs::Metadata) {
    file.size_bytes = metadata.len();
    file.modified = metadata.modified().ok();
    file.version = segpredict_storage::file_identity(metadata);
}

/// Whether the `path` setting is a glob: glob characters in a path that is
/// not itself there.
pub(crate) fn is_glob(path: &Path) -> bool {
    path.to_string_lossy().contains(['*', '?', '[']) && !path.exists()
}

/// The leading components of a glob without glob characters: the folder
/// every match lies in (`.` when the pattern starts with a glob character).
pub(crate) fn glob_root(pattern: &Path) -> PathBuf {
    let root: PathBuf = literal_components(pattern).collect();
    if root.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        root
    }
}

pub(crate) fn literal_components(pattern: &Path) -> impl Iterator<Item = std::path::Component<'_>> {
    pattern
        .components()
        .take_while(|c| !c.as_os_str().to_string_lossy().contains(['*', '?', '[']))
}

/// Whether a match of a glob whose literal root has `root_len` components
/// is a marker or another tool's state rather than input: a component
/// below the root that starts with `_` or `.`.
fn is_hidden_below(path: &Path, root_len: usize) -> bool {
    path.components().skip(root_len).any(|c| {
        let name = c.as_os_str().to_string_lossy();
        name.starts_with('_') || name.starts_with('.')
    })
}

fn glob_files(pattern: &str) -> Result<Vec<PathBuf>, ReaderError> {
    let paths = glob::glob(pattern).map_err(|source| ReaderError::BadPattern {
        pattern: pattern.to_string(),
        source,
    })?;
    // The glob crate yields matches with the pattern's own literal prefix.
    let root_len = literal_components(Path::new(pattern)).count();
    let mut files: Vec<PathBuf> = paths
        .filter_map(Result::ok)
        .filter(|p| p.is_file() && !is_hidden_below(p, root_len))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(ReaderError::NoMatch {
            pattern: pattern.to_string(),
        });
    }
    Ok(files)
}

/// A folder's `*.parquet` files, its sub-folders' too (Hive partitions,
/// `dt=2026-12-05/part-0.parquet`), leaving out every `_`- or `.`-prefixed
/// file and folder below it; sorted by path.
fn dir_files(dir: &Path) -> Result<Vec<PathBuf>, ReaderError> {
    let mut files = Vec::new();
    collect_files(dir, &mut files)?;
    files.sort();
    if files.is_empty() {
        return Err(ReaderError::NoMatch {
            pattern: format!("{}/*.parquet", dir.display()),
        });
    }
    Ok(files)
}

fn collect_files(dir: &Path, files: &mut Vec<PathBuf>) -> Result<(), ReaderError> {
    let entries = std::fs::read_dir(dir).map_err(|source| ReaderError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    for path in entries.filter_map(Result::ok).map(|e| e.path()) {
        let hidden = path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with(['_', '.']));
        if path.is_dir() && !hidden {
            collect_files(&path, files)?;
        } else if path.is_file() && is_data_file(&path) {
            files.push(path);
        }
    }
    Ok(())
}

fn is_data_file(path: &Path) -> bool {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    name.ends_with(".parquet") && !name.starts_with('.') && !name.starts_with('_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(path: &Path) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, b"").unwrap();
    }

    fn names(files: &[PathBuf], root: &Path) -> Vec<String> {
        files
            .iter()
            .map(|f| f.strip_prefix(root).unwrap().display().to_string())
            .collect()
    }

    #[test]
    fn a_recursive_glob_leaves_out_underscore_and_dot_paths_below_its_root() {
        let dir = tempfile::tempdir().unwrap();
        // The root itself may start with `_`: only what lies below it counts.
        let root = dir.path().join("_nightly/out");
        for name in [
            "part-00000.parquet",
            "day=1/part-00001.parquet",
            "_batches.parquet",
            "_rejects.parquet",
            "_progress/part-00002.parquet",
            ".hidden.parquet",
            ".staging/part-00003.parquet",
            "day=1/_tmp/part-00004.parquet",
        ] {
            touch(&root.join(name));
        }
        let found = glob_files(&root.join("**/*.parquet").to_string_lossy()).unwrap();
        assert_eq!(
            names(&found, &root),
            ["day=1/part-00001.parquet", "part-00000.parquet"]
        );
        let flat = input_paths(&root.join("*.parquet")).unwrap();
        assert_eq!(names(&flat, &root), ["part-00000.parquet"]);
        // A directory lists recursively, as the recursive glob; a file
        // named outright is read.
        assert_eq!(
            names(&input_paths(&root).unwrap(), &root),
            ["day=1/part-00001.parquet", "part-00000.parquet"]
        );
        let named = root.join("_rejects.parquet");
        assert_eq!(input_paths(&named).unwrap(), [named]);
    }

    #[test]
    fn hive_folders_below_the_root_are_partitions() {
        let some = |k: &str, v: &str| (k.to_string(), Some(v.to_string()));
        assert_eq!(
            partitions_of("dt=2026-12-05/hour=07/part-0.parquet"),
            [some("dt", "2026-12-05"), some("hour", "07")]
        );
        // Other folders are not; the file's own name never is; values are
        // percent-decoded; Hive's null is null.
        assert_eq!(
            partitions_of("/raw/city=New%20York/x=1.parquet"),
            [some("city", "New York")]
        );
        assert_eq!(
            partitions_of("dt=__HIVE_DEFAULT_PARTITION__/p.parquet"),
            [("dt".to_string(), None)]
        );
        assert!(partitions_of("p.parquet").is_empty());
        assert_eq!(percent_decode("a%2Fb%zz%"), "a/b%zz%");
    }

    #[test]
    fn a_relative_glob_is_filtered_below_its_own_prefix() {
        assert_eq!(glob_root(Path::new("*.parquet")), Path::new("."));
        assert_eq!(glob_root(Path::new("a/_b/c*/d.parquet")), Path::new("a/_b"));
        assert!(!is_hidden_below(Path::new("a/_b/c1/d.parquet"), 2));
        assert!(is_hidden_below(Path::new("a/_b/_c1/d.parquet"), 2));
        assert!(is_hidden_below(Path::new("./a/.x.parquet"), 2));
        assert!(!is_hidden_below(Path::new("./a/x.parquet"), 2));
    }
}
