//! The output directory as the run's checkpoint: what an attempt finds there
//! before its first row (nothing, an earlier attempt of the same run, a
//! finished run, or another run's output), what it removes, which committed
//! files say which rows are done, and the markers that let the last of
//! several shards commit the whole run. The names are `layout.rs`'s.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::done::Committed;
use super::durable;
use super::layout::{AttemptNames, OutputLayout, MANIFEST, PROGRESS};
use super::manifest::{ManifestError, RunManifest};
use segpredict_core::message::{Finished, ShardSpec};

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("output directory {dir} holds another run's output ({}); pass --overwrite to replace it", differences.join("; "))]
    Refused {
        dir: PathBuf,
        differences: Vec<String>,
    },
    #[error("output directory {dir} already holds segpredict output without a run manifest ({found}); pass --overwrite to replace it")]
    Unmanaged { dir: PathBuf, found: String },
    #[error("output directory {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error("{path} is not a shard marker")]
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
            | CheckpointError::Marker { .. } => true,
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
        layout: OutputLayout,
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

/// What a run would find in its output directory, told by [`inspect_dir`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirState {
    /// No output yet: the run starts from scratch.
    New,
    /// An earlier attempt of this very run: the run resumes it.
    Resumes,
    /// This very run is complete (`_SUCCESS`): nothing would be done.
    Complete,
    /// Other output, replaced because of `overwrite`.
    Replaced,
}

impl std::fmt::Display for DirState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DirState::New => "new",
            DirState::Resumes => "resumes an earlier attempt",
            DirState::Complete => "already complete",
            DirState::Replaced => "replaced (--overwrite)",
        })
    }
}

/// The verdict [`prepare`] would reach on `dir`, with its refusals, reached
/// without creating, clearing or writing anything (`segpredict check`).
pub fn inspect_dir(
    dir: &Path,
    manifest: &RunManifest,
    overwrite: bool,
) -> Result<DirState, CheckpointError> {
    let recorded = match RunManifest::read(dir) {
        Err(ManifestError::Parse { .. }) if overwrite => return Ok(DirState::Replaced),
        other => other?,
    };
    let Some(recorded) = recorded else {
        return match our_files(dir)? {
            ours if ours.is_empty() => Ok(DirState::New),
            _ if overwrite => Ok(DirState::Replaced),
            ours => Err(CheckpointError::Unmanaged {
                dir: dir.to_path_buf(),
                found: format!("{} files such as {}", ours.len(), file_name(&ours[0])),
            }),
        };
    };
    let differences = manifest.differences_from(&recorded);
    match (differences.is_empty(), overwrite) {
        (true, _) if OutputLayout::new(dir).success().exists() => Ok(DirState::Complete),
        (true, _) => Ok(DirState::Resumes),
        (false, true) => Ok(DirState::Replaced),
        (false, false) => Err(CheckpointError::Refused {
            dir: dir.to_path_buf(),
            differences,
        }),
    }
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
    let whole = OutputLayout::new(dir);
    std::fs::create_dir_all(whole.progress()).map_err(io_error(dir))?;
    let recorded = match RunManifest::read(dir) {
        Err(ManifestError::Parse { .. }) if overwrite => None,
        other => other?,
    };
    match recorded {
        Some(recorded) => adopt_recorded(dir, manifest, &recorded, overwrite)?,
        None => adopt_unrecorded(dir, manifest, overwrite)?,
    }
    if whole.success().exists() {
        return Ok(Start::AlreadyComplete);
    }
    let attempt = last_attempt(dir, shard)? + 1;
    let layout = OutputLayout::for_attempt(dir, AttemptNames { shard, attempt });
    // A killed attempt's temporary files, a killed commit's among them
    // (its shard is done: only the commit is left to do).
    remove_leftovers(&layout)?;
    if whole.done_marker(shard).exists() {
        return Ok(Start::ShardDone);
    }
    let marker = layout.attempt_marker();
    let started = serde_json::json!({
        "pid": std::process::id(),
        "started_unix_s": std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    });
    durable::write_atomic(&marker, started.to_string().as_bytes()).map_err(io_error(&marker))?;
    Ok(Start::Predict {
        committed: committed_files(dir, Some(shard))?,
        layout,
    })
}

/// Undoes what [`prepare`] wrote for an attempt whose start-up failed
/// before it predicted anything: its attempt marker, and then, if the
/// directory holds nothing else (no other attempt, nothing committed, no
/// shard done: only the manifest and an empty `_progress`), the manifest
/// and `_progress`, so a rerun with the cause fixed (another model,
/// say) is a new run, not another run's output to refuse.
pub fn abandon_start(layout: &OutputLayout) -> Result<(), CheckpointError> {
    let marker = layout.attempt_marker();
    match std::fs::remove_file(&marker) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io_error(&marker)(e)),
        _ => {}
    }
    let whole = OutputLayout::new(layout.dir());
    let (progress, manifest) = (whole.progress(), whole.manifest());
    let only_manifest = list(layout.dir())?
        .iter()
        .all(|p| *p == progress || *p == manifest);
    if !(only_manifest && list(&progress)?.is_empty()) {
        return Ok(());
    }
    std::fs::remove_file(&manifest).map_err(io_error(&manifest))?;
    // Only if still empty: another shard may have begun meanwhile. The
    // output directory itself stays (it may be a mount); empty, it is new.
    let _ = std::fs::remove_dir(&progress);
    Ok(())
}

/// A directory with a manifest: the same run goes on; another is refused
/// or, with `overwrite`, replaced.
fn adopt_recorded(
    dir: &Path,
    manifest: &RunManifest,
    recorded: &RunManifest,
    overwrite: bool,
) -> Result<(), CheckpointError> {
    let differences = manifest.differences_from(recorded);
    if differences.is_empty() {
        return Ok(());
    }
    if !overwrite {
        return Err(CheckpointError::Refused {
            dir: dir.to_path_buf(),
            differences,
        });
    }
    clear(dir)?;
    Ok(manifest.write(dir)?)
}

/// A directory without a manifest: new, or output this version did not
/// write (refused unless `overwrite`).
fn adopt_unrecorded(
    dir: &Path,
    manifest: &RunManifest,
    overwrite: bool,
) -> Result<(), CheckpointError> {
    let ours = our_files(dir)?;
    // Another shard of this run may have written the manifest (it writes it
    // before any other file) since it was read.
    let appeared = match ours.is_empty() {
        true => None,
        false => RunManifest::read(dir).ok().flatten(),
    };
    match appeared {
        Some(recorded) => adopt_recorded(dir, manifest, &recorded, overwrite),
        None if ours.is_empty() => Ok(manifest.write(dir)?),
        None if overwrite => {
            clear(dir)?;
            Ok(manifest.write(dir)?)
        }
        None => Err(CheckpointError::Unmanaged {
            dir: dir.to_path_buf(),
            found: format!("{} files such as {}", ours.len(), file_name(&ours[0])),
        }),
    }
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

fn our_files(dir: &Path) -> Result<Vec<PathBuf>, CheckpointError> {
    // Another shard's manifest being written is not output: that shard
    // writes the manifest before anything else.
    let manifest_temp = format!(".{MANIFEST}.");
    let mut ours: Vec<PathBuf> = list(dir)?
        .into_iter()
        .filter(|p| {
            let name = file_name(p);
            OutputLayout::is_ours(&name) && name != PROGRESS && !name.starts_with(&manifest_temp)
        })
        .collect();
    ours.extend(list(&dir.join(PROGRESS))?);
    ours.sort();
    Ok(ours)
}

/// Removes everything this program writes, `_progress/` included.
fn clear(dir: &Path) -> Result<(), CheckpointError> {
    for path in list(dir)? {
        if !OutputLayout::is_ours(&file_name(&path)) {
            continue;
        }
        let removed = match path.is_dir() {
            true => std::fs::remove_dir_all(&path),
            false => std::fs::remove_file(&path),
        };
        match removed {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io_error(&path)(e)),
            _ => {}
        }
    }
    std::fs::create_dir_all(dir.join(PROGRESS)).map_err(io_error(dir))?;
    durable::fsync_dir(dir).map_err(io_error(dir))
}

fn remove_leftovers(layout: &OutputLayout) -> Result<(), CheckpointError> {
    for folder in [layout.dir().to_path_buf(), layout.progress()] {
        for path in list(&folder)? {
            if !layout.is_leftover(&file_name(&path)) {
                continue;
            }
            match std::fs::remove_file(&path) {
                Ok(()) => {
                    tracing::info!(path = %path.display(), "removed a killed attempt's temporary file")
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_error(&path)(e)),
            }
        }
    }
    Ok(())
}

fn last_attempt(dir: &Path, shard: ShardSpec) -> Result<u32, CheckpointError> {
    let prefix = format!("attempt-{}-a", shard.tag());
    Ok(list(&dir.join(PROGRESS))?
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

/// The committed parts and rejects files of `shard` (of every shard with
/// `None`), sorted by name.
pub fn committed_files(
    dir: &Path,
    shard: Option<ShardSpec>,
) -> Result<Vec<Committed>, CheckpointError> {
    let mut files = Vec::new();
    for (folder, prefix, finished) in [
        (dir.to_path_buf(), "part", Finished::Predicted),
        (dir.join(PROGRESS), "rejects", Finished::Rejected),
    ] {
        let found = committed_parquet(&folder, prefix, shard)?;
        files.extend(found.into_iter().map(|path| Committed { path, finished }));
    }
    Ok(files)
}

/// The committed batch-record files of `shard` (of every shard with
/// `None`), sorted by name.
pub fn committed_batch_files(
    dir: &Path,
    shard: Option<ShardSpec>,
) -> Result<Vec<PathBuf>, CheckpointError> {
    committed_parquet(&dir.join(PROGRESS), "batches", shard)
}

/// The Parquet files in `folder` named `PREFIX-...` for `shard` (every
/// shard with `None`), sorted by name.
fn committed_parquet(
    folder: &Path,
    prefix: &str,
    shard: Option<ShardSpec>,
) -> Result<Vec<PathBuf>, CheckpointError> {
    let start = match shard {
        Some(shard) if shard.is_sharded() => format!("{prefix}-{}-a", shard.tag()),
        Some(_) => format!("{prefix}-a"),
        None => format!("{prefix}-"),
    };
    let mut found: Vec<PathBuf> = list(folder)?
        .into_iter()
        .filter(|p| {
            let name = file_name(p);
            name.starts_with(&start) && name.ends_with(".parquet")
        })
        .collect();
    found.sort();
    Ok(found)
}

/// Records that `done.shard` finished, durably.
pub fn mark_shard_done(dir: &Path, done: &ShardDone) -> Result<(), CheckpointError> {
    let path = OutputLayout::new(dir).done_marker(done.shard);
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
    let layout = OutputLayout::new(dir);
    let mut done = Vec::new();
    let mut missing = Vec::new();
    for index in 0..count {
        let path = layout.done_marker(ShardSpec { index, count });
        match std::fs::read(&path) {
            Ok(bytes) => done.push(
                serde_json::from_slice(&bytes)
                    .map_err(|source| CheckpointError::Marker { path, source })?,
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => missing.push(index),
            Err(e) => return Err(io_error(&path)(e)),
        }
    }
    Ok(match missing.is_empty() {
        true => Ok(done),
        false => Err(missing),
    })
}

/// Writes `bytes` to `path` whole and durably (`_report.json`, `_SUCCESS`).
pub fn publish(path: &Path, bytes: &[u8]) -> Result<(), CheckpointError> {
    durable::write_atomic(path, bytes).map_err(io_error(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::{Fingerprint, InputRecord, MANIFEST_FORMAT};

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
        let Start::Predict { layout, committed } = start else {
            panic!("{start:?}")
        };
        assert_eq!(layout.names().attempt, 1);
        assert!(committed.is_empty());
        assert_eq!(names(&out), [PROGRESS, MANIFEST]);
        assert_eq!(layout.part(1, 7), out.join("part-a001-01-00007.parquet"));
    }

    #[test]
    fn a_second_attempt_removes_leftovers_and_lists_committed_files() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path();
        prepare(out, &manifest(1), ShardSpec::WHOLE, false).unwrap();
        let first = OutputLayout::new(out);
        std::fs::write(first.part(0, 1), b"").unwrap();
        std::fs::write(first.in_progress(&first.part(0, 2)), b"").unwrap();
        std::fs::write(first.rejects_part(0, 1), b"").unwrap();
        let Start::Predict { layout, committed } =
            prepare(out, &manifest(1), ShardSpec::WHOLE, false).unwrap()
        else {
            panic!()
        };
        assert_eq!(layout.names().attempt, 2);
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
        assert_eq!(names(out), [PROGRESS, MANIFEST]);
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
        assert_eq!(names(dir.path()), [PROGRESS, MANIFEST, "notes.txt"]);
    }

    #[test]
    fn a_finished_run_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        prepare(dir.path(), &manifest(1), ShardSpec::WHOLE, false).unwrap();
        publish(&OutputLayout::new(dir.path()).success(), b"").unwrap();
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
        let other = OutputLayout::for_attempt(
            out,
            AttemptNames {
                shard: shard(1),
                attempt: 1,
            },
        );
        let theirs = other.in_progress(&other.part(0, 1));
        std::fs::write(&theirs, b"").unwrap();
        let Start::Predict { layout, .. } = prepare(out, &manifest(3), shard(2), false).unwrap()
        else {
            panic!()
        };
        assert_eq!(
            layout.part(0, 1),
            out.join("part-s002of003-a001-00-00001.parquet")
        );
        assert!(
            theirs.exists(),
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
