//! The output directory as the run's checkpoint: what an attempt finds there
//! before its first row (nothing, an earlier attempt of the same run, a
//! finished run, or another run's output), what it removes, which committed
//! files say which rows are done, and the markers that let the last of
//! several shards commit the whole run.
//!
//! Layout (`I` the shard tag when sharded, `A` the attempt):
//!
//! ```text
//! DIR/_run.json                      what the run is (manifest.rs)
//! DIR/part-[I-]aAAA-WW-NNNNN.parquet  committed predictions
//! DIR/.part-….parquet.inprogress     a part being written (never complete)
//! DIR/_progress/rejects-[I-]aAAA-WW-NNNNN.parquet   committed rejects
//! DIR/_progress/attempt-I-aAAA.json  one per attempt of a shard
//! DIR/_progress/done-I.json          a shard's accounting, when it is done
//! DIR/_rejects.parquet, _report.json, _report.svg, _SUCCESS   the commit
//! ```
//!
//! `_progress/` starts with `_` so that Spark, Hive, pyarrow and DuckDB
//! dataset readers skip it, as they skip `_SUCCESS`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::done::Committed;
use super::durable;
use super::manifest::{ManifestError, RunManifest, MANIFEST_NAME};
use crate::message::{Finished, ShardSpec};

pub const PROGRESS_DIR: &str = "_progress";
pub const SUCCESS_NAME: &str = "_SUCCESS";
pub const REJECTS_NAME: &str = "_rejects.parquet";

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("output directory {dir} holds another run's output ({}); pass --overwrite to replace it", differences.join("; "))]
    Refused {
        dir: PathBuf,
        differences: Vec<String>,
    },
    #[error("output directory {dir} already holds segpredict output without a run manifest ({found}); pass --overwrite to replace it")]
    Unmanaged { dir: PathBuf, found: String },
    #[error("output directory {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error("{dir}: cannot commit: {message}")]
    Accounting { dir: PathBuf, message: String },
    #[error("{path} is not a shard marker: {source}")]
    Marker {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

impl CheckpointError {
    /// A retry of the same command fails the same way.
    pub fn is_permanent(&self) -> bool {
        match self {
            CheckpointError::Refused { .. }
            | CheckpointError::Unmanaged { .. }
            | CheckpointError::Marker { .. }
            | CheckpointError::Accounting { .. } => true,
            CheckpointError::Manifest(ManifestError::Parse { .. }) => true,
            // A path that is not a directory, or one this user may not
            // write, stays so however often the job is retried.
            CheckpointError::Io { source, .. } => matches!(
                source.kind(),
                std::io::ErrorKind::NotADirectory
                    | std::io::ErrorKind::IsADirectory
                    | std::io::ErrorKind::PermissionDenied
                    | std::io::ErrorKind::ReadOnlyFilesystem
            ),
            CheckpointError::Manifest(_) => false,
        }
    }
}

fn io_error(path: &Path) -> impl Fn(std::io::Error) -> CheckpointError + '_ {
    move |source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The names one attempt of one shard gives its files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptNames {
    pub shard: ShardSpec,
    pub attempt: u32,
}

impl AttemptNames {
    /// `s001of003-a002` sharded, `a002` not.
    fn stem(self) -> String {
        match self.shard.is_sharded() {
            true => format!("{}-a{:03}", self.shard.tag(), self.attempt),
            false => format!("a{:03}", self.attempt),
        }
    }

    /// A committed part's name in the output directory.
    pub fn part(self, writer_idx: usize, seq: usize) -> String {
        format!("part-{}-{writer_idx:02}-{seq:05}.parquet", self.stem())
    }

    /// A committed rejects file's name in `_progress/`.
    pub fn rejects(self, writer_idx: usize, seq: usize) -> String {
        format!("rejects-{}-{writer_idx:02}-{seq:05}.parquet", self.stem())
    }

    /// The per-batch records' file in `_progress/`.
    pub fn batches(self) -> String {
        format!("batches-{}.jsonl", self.stem())
    }

    fn attempt_marker(self) -> String {
        format!("attempt-{}-a{:03}.json", self.shard.tag(), self.attempt)
    }
}

/// The hidden name a file is written under until it is committed.
pub fn temp_name(final_name: &str) -> String {
    format!(".{final_name}.inprogress")
}

/// What an attempt does, decided before its first row.
#[derive(Debug)]
pub enum Start {
    /// `_SUCCESS` of this very run is there: nothing to do, nothing touched.
    AlreadyComplete,
    /// This shard finished in an earlier attempt (its marker is there); the
    /// run may still wait for other shards.
    ShardDone,
    /// Predict every row not in the committed files.
    Predict {
        names: AttemptNames,
        committed: Vec<Committed>,
    },
}

/// What each shard records when it is done, for the commit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardDone {
    pub shard: ShardSpec,
    /// Rows of the units dealt to this shard.
    pub rows_in: u64,
    pub rows_out: u64,
    pub rows_rejected: u64,
    /// Rows earlier attempts had committed, which the last one skipped.
    pub rows_resumed: u64,
    pub attempts: u32,
    /// The shard's own run report.
    pub report: serde_json::Value,
}

fn progress_dir(dir: &Path) -> PathBuf {
    dir.join(PROGRESS_DIR)
}

fn done_marker(dir: &Path, shard: ShardSpec) -> PathBuf {
    progress_dir(dir).join(format!("done-{}.json", shard.tag()))
}

/// Decides what this attempt does with `dir`, creating it, refusing another
/// run's output (unless `overwrite`), and removing this shard's leftovers
/// (temporary files of a killed attempt). Other shards' files are never
/// touched: they may be writing them right now.
pub fn prepare(
    dir: &Path,
    manifest: &RunManifest,
    shard: ShardSpec,
    overwrite: bool,
) -> Result<Start, CheckpointError> {
    std::fs::create_dir_all(progress_dir(dir)).map_err(io_error(dir))?;
    let recorded = match RunManifest::read(dir) {
        Err(ManifestError::Parse { .. }) if overwrite => None,
        other => other?,
    };
    match recorded {
        Some(recorded) => {
            let differences = manifest.differences_from(&recorded);
            if !differences.is_empty() {
                if !overwrite {
                    return Err(CheckpointError::Refused {
                        dir: dir.to_path_buf(),
                        differences,
                    });
                }
                clear(dir)?;
                manifest.write(dir)?;
            }
        }
        None => {
            let ours = our_files(dir)?;
            // Another shard of this run may have written the manifest (it
            // writes it before any other file) since it was read above.
            let appeared = match ours.is_empty() {
                true => None,
                false => RunManifest::read(dir).ok().flatten(),
            };
            match appeared {
                Some(recorded) if manifest.differences_from(&recorded).is_empty() => {}
                _ if ours.is_empty() => manifest.write(dir)?,
                _ if overwrite => {
                    clear(dir)?;
                    manifest.write(dir)?;
                }
                _ => {
                    return Err(CheckpointError::Unmanaged {
                        dir: dir.to_path_buf(),
                        found: format!("{} files such as {}", ours.len(), file_name(&ours[0])),
                    })
                }
            }
        }
    }
    if dir.join(SUCCESS_NAME).exists() {
        return Ok(Start::AlreadyComplete);
    }
    if done_marker(dir, shard).exists() {
        return Ok(Start::ShardDone);
    }
    remove_leftovers(dir, shard)?;
    let names = AttemptNames {
        shard,
        attempt: last_attempt(dir, shard)? + 1,
    };
    let marker = progress_dir(dir).join(names.attempt_marker());
    let started = serde_json::json!({
        "pid": std::process::id(),
        "started_unix_s": std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    });
    durable::write_atomic(&marker, started.to_string().as_bytes()).map_err(io_error(&marker))?;
    Ok(Start::Predict {
        names,
        committed: committed_files(dir, shard)?,
    })
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn list(dir: &Path) -> Result<Vec<PathBuf>, CheckpointError> {
    match std::fs::read_dir(dir) {
        Ok(entries) => Ok(entries.filter_map(Result::ok).map(|e| e.path()).collect()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(io_error(dir)(e)),
    }
}

/// Names this program gives its output, and so may replace with `overwrite`.
fn is_our_output(name: &str) -> bool {
    (name.starts_with("part-") && name.ends_with(".parquet"))
        || name.starts_with("_report.")
        || name == REJECTS_NAME
        || name == SUCCESS_NAME
        || name == MANIFEST_NAME
        || name == PROGRESS_DIR
        || (name.starts_with('.') && name.ends_with(".inprogress"))
}

fn our_files(dir: &Path) -> Result<Vec<PathBuf>, CheckpointError> {
    // Another shard's manifest being written is not output: that shard
    // writes the manifest before anything else.
    let manifest_temp = format!(".{MANIFEST_NAME}.");
    let mut ours: Vec<PathBuf> = list(dir)?
        .into_iter()
        .filter(|p| {
            let name = file_name(p);
            is_our_output(&name) && name != PROGRESS_DIR && !name.starts_with(&manifest_temp)
        })
        .collect();
    ours.extend(list(&progress_dir(dir))?);
    ours.sort();
    Ok(ours)
}

/// Removes everything this program writes, `_progress/` included.
fn clear(dir: &Path) -> Result<(), CheckpointError> {
    for path in list(dir)? {
        let name = file_name(&path);
        if !is_our_output(&name) {
            continue;
        }
        let removed = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        match removed {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_error(&path)(e)),
        }
    }
    std::fs::create_dir_all(progress_dir(dir)).map_err(io_error(dir))?;
    durable::fsync_dir(dir).map_err(io_error(dir))
}

/// Whether a temporary file belongs to `shard` (unsharded, every one does).
fn is_leftover_of(name: &str, shard: ShardSpec) -> bool {
    if !(name.starts_with('.') && name.ends_with(".inprogress")) {
        return false;
    }
    !shard.is_sharded() || name.contains(&format!("-{}-", shard.tag()))
}

fn remove_leftovers(dir: &Path, shard: ShardSpec) -> Result<(), CheckpointError> {
    for folder in [dir.to_path_buf(), progress_dir(dir)] {
        for path in list(&folder)? {
            if is_leftover_of(&file_name(&path), shard) {
                match std::fs::remove_file(&path) {
                    Ok(()) => {
                        tracing::info!(path = %path.display(), "removed a killed attempt's temporary file")
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(io_error(&path)(e)),
                }
            }
        }
    }
    Ok(())
}

fn last_attempt(dir: &Path, shard: ShardSpec) -> Result<u32, CheckpointError> {
    let prefix = format!("attempt-{}-a", shard.tag());
    Ok(list(&progress_dir(dir))?
        .iter()
        .filter_map(|p| {
            file_name(p)
                .strip_prefix(&prefix)?
                .strip_suffix(".json")?
                .parse::<u32>()
                .ok()
        })
        .max()
        .unwrap_or(0))
}

/// Attempts `shard` has started, this one included.
pub fn attempts(dir: &Path, shard: ShardSpec) -> Result<u32, CheckpointError> {
    last_attempt(dir, shard)
}

/// The committed parts and rejects files of `shard`, sorted by name.
pub fn committed_files(dir: &Path, shard: ShardSpec) -> Result<Vec<Committed>, CheckpointError> {
    let stem = match shard.is_sharded() {
        true => format!("-{}-a", shard.tag()),
        false => "-a".to_string(),
    };
    let mut files = Vec::new();
    for (folder, prefix, finished) in [
        (dir.to_path_buf(), "part", Finished::Predicted),
        (progress_dir(dir), "rejects", Finished::Rejected),
    ] {
        let start = format!("{prefix}{stem}");
        let mut found: Vec<PathBuf> = list(&folder)?
            .into_iter()
            .filter(|p| {
                let name = file_name(p);
                name.starts_with(&start) && name.ends_with(".parquet")
            })
            .collect();
        found.sort();
        files.extend(found.into_iter().map(|path| Committed { path, finished }));
    }
    Ok(files)
}

/// Records that `done.shard` finished, durably.
pub fn mark_shard_done(dir: &Path, done: &ShardDone) -> Result<(), CheckpointError> {
    let path = done_marker(dir, done.shard);
    let text = serde_json::to_vec_pretty(done).map_err(|source| CheckpointError::Marker {
        path: path.clone(),
        source,
    })?;
    durable::write_atomic(&path, &text).map_err(io_error(&path))
}

/// Every shard's marker when all `count` shards are done; otherwise the
/// shards that are not.
pub fn shards_done(
    dir: &Path,
    count: u32,
) -> Result<Result<Vec<ShardDone>, Vec<u32>>, CheckpointError> {
    let mut done = Vec::new();
    let mut missing = Vec::new();
    for index in 0..count {
        let path = done_marker(dir, ShardSpec { index, count });
        match std::fs::read(&path) {
            Ok(bytes) => done.push(
                serde_json::from_slice(&bytes)
                    .map_err(|source| CheckpointError::Marker { path, source })?,
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => missing.push(index),
            Err(e) => return Err(io_error(&path)(e)),
        }
    }
    Ok(if missing.is_empty() {
        Ok(done)
    } else {
        Err(missing)
    })
}

/// Every committed file of every shard: what the commit merges and checks.
pub fn all_committed(dir: &Path) -> Result<Vec<Committed>, CheckpointError> {
    let mut files = Vec::new();
    for (folder, prefix, finished) in [
        (dir.to_path_buf(), "part-", Finished::Predicted),
        (progress_dir(dir), "rejects-", Finished::Rejected),
    ] {
        let mut found: Vec<PathBuf> = list(&folder)?
            .into_iter()
            .filter(|p| {
                let name = file_name(p);
                name.starts_with(prefix) && name.ends_with(".parquet")
            })
            .collect();
        found.sort();
        files.extend(found.into_iter().map(|path| Committed { path, finished }));
    }
    Ok(files)
}

/// Marks the whole run complete, as Spark and Hadoop jobs do: downstream
/// jobs wait for this file rather than guessing from the part files.
pub fn write_success(dir: &Path) -> Result<(), CheckpointError> {
    let path = dir.join(SUCCESS_NAME);
    durable::write_atomic(&path, b"").map_err(io_error(&path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::writer::manifest::{Fingerprint, InputRecord, MANIFEST_FORMAT};

    fn manifest(shards: u32) -> RunManifest {
        RunManifest {
            format: MANIFEST_FORMAT,
            segpredict_version: "test".into(),
            fingerprint: Fingerprint {
                model_sha256: "00".into(),
                labels_sha256: "11".into(),
                columns: "c".into(),
                dtype: "f32".into(),
            },
            inputs: vec![InputRecord {
                path: "in.parquet".into(),
                size: 1,
                mtime_ns: 2,
                rows: 3,
            }],
            shards,
        }
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut n: Vec<String> = list(dir).unwrap().iter().map(|p| file_name(p)).collect();
        n.sort();
        n
    }

    #[test]
    fn a_fresh_directory_gets_a_manifest_and_attempt_one() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let start = prepare(&out, &manifest(1), ShardSpec::WHOLE, false).unwrap();
        let Start::Predict {
            names: n,
            committed,
        } = start
        else {
            panic!("{start:?}")
        };
        assert_eq!(n.attempt, 1);
        assert!(committed.is_empty());
        assert_eq!(names(&out), [PROGRESS_DIR, MANIFEST_NAME]);
        assert_eq!(n.part(1, 7), "part-a001-01-00007.parquet");
    }

    #[test]
    fn a_second_attempt_removes_leftovers_and_lists_committed_files() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path();
        prepare(out, &manifest(1), ShardSpec::WHOLE, false).unwrap();
        let first = AttemptNames {
            shard: ShardSpec::WHOLE,
            attempt: 1,
        };
        std::fs::write(out.join(first.part(0, 1)), b"").unwrap();
        std::fs::write(out.join(temp_name(&first.part(0, 2))), b"").unwrap();
        std::fs::write(out.join(PROGRESS_DIR).join(first.rejects(0, 1)), b"").unwrap();
        let Start::Predict {
            names: n,
            committed,
        } = prepare(out, &manifest(1), ShardSpec::WHOLE, false).unwrap()
        else {
            panic!()
        };
        assert_eq!(n.attempt, 2);
        let committed: Vec<(String, Finished)> = committed
            .iter()
            .map(|c| (file_name(&c.path), c.finished))
            .collect();
        assert_eq!(
            committed,
            [
                (
                    "part-a001-00-00001.parquet".to_string(),
                    Finished::Predicted
                ),
                (
                    "rejects-a001-00-00001.parquet".to_string(),
                    Finished::Rejected
                )
            ]
        );
        assert!(!names(out).iter().any(|n| n.ends_with(".inprogress")));
    }

    #[test]
    fn another_runs_output_is_refused_naming_the_difference_unless_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path();
        prepare(out, &manifest(1), ShardSpec::WHOLE, false).unwrap();
        std::fs::write(out.join("part-a001-00-00001.parquet"), b"").unwrap();
        let mut other = manifest(1);
        other.fingerprint.model_sha256 = "99".into();
        let e = prepare(out, &other, ShardSpec::WHOLE, false).unwrap_err();
        assert!(e.is_permanent());
        assert!(e.to_string().contains("model differs"), "{e}");
        prepare(out, &other, ShardSpec::WHOLE, true).unwrap();
        assert_eq!(names(out), [PROGRESS_DIR, MANIFEST_NAME]);
        assert_eq!(RunManifest::read(out).unwrap(), Some(other));
    }

    #[test]
    fn output_without_a_manifest_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("part-00-00001.parquet"), b"").unwrap();
        std::fs::write(dir.path().join("notes.txt"), b"").unwrap();
        let e = prepare(dir.path(), &manifest(1), ShardSpec::WHOLE, false).unwrap_err();
        assert!(matches!(e, CheckpointError::Unmanaged { .. }), "{e}");
        prepare(dir.path(), &manifest(1), ShardSpec::WHOLE, true).unwrap();
        assert_eq!(
            names(dir.path()),
            [PROGRESS_DIR, MANIFEST_NAME, "notes.txt"]
        );
    }

    #[test]
    fn a_finished_run_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        prepare(dir.path(), &manifest(1), ShardSpec::WHOLE, false).unwrap();
        write_success(dir.path()).unwrap();
        let before = names(dir.path());
        assert!(matches!(
            prepare(dir.path(), &manifest(1), ShardSpec::WHOLE, false).unwrap(),
            Start::AlreadyComplete
        ));
        assert_eq!(names(dir.path()), before);
    }

    #[test]
    fn shards_touch_only_their_own_leftovers_and_the_last_one_sees_all_done() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path();
        let shard = |i| ShardSpec::new(i, 3).unwrap();
        prepare(out, &manifest(3), shard(0), false).unwrap();
        let other = AttemptNames {
            shard: shard(1),
            attempt: 1,
        };
        let theirs = temp_name(&other.part(0, 1));
        std::fs::write(out.join(&theirs), b"").unwrap();
        let Start::Predict { names: n, .. } = prepare(out, &manifest(3), shard(2), false).unwrap()
        else {
            panic!()
        };
        assert_eq!(n.part(0, 1), "part-s002of003-a001-00-00001.parquet");
        assert!(
            out.join(&theirs).exists(),
            "another shard's temporary file was removed"
        );
        assert_eq!(shards_done(out, 3).unwrap(), Err(vec![0, 1, 2]));
        for i in [0, 2] {
            mark_shard_done(
                out,
                &ShardDone {
                    shard: shard(i),
                    rows_in: 1,
                    rows_out: 1,
                    rows_rejected: 0,
                    rows_resumed: 0,
                    attempts: 1,
                    report: serde_json::Value::Null,
                },
            )
            .unwrap();
        }
        assert_eq!(shards_done(out, 3).unwrap(), Err(vec![1]));
        assert!(matches!(
            prepare(out, &manifest(3), shard(2), false).unwrap(),
            Start::ShardDone
        ));
    }
}
