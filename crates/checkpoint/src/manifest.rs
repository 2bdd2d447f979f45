//! `_run.json`: what a run is, written before its first row, so that a later
//! attempt can tell whether the output directory holds *this* run's partial
//! output (resume it) or another run's (refuse, naming the difference).
//!
//! It holds only what decides the predictions and which rows exist: the
//! program's version, the model and label map (by content hash), the column
//! mapping, the dtype, the frozen input list and the shard count. Nothing
//! that varies between attempts (start time, host, shard index) is in it, so
//! every shard of a run writes the same bytes and any of them may write it.

use segpredict_core::exit::{Classify, Failure};
use std::io::Read;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::layout::MANIFEST as MANIFEST_NAME;
use super::store::{Store, StoreError};
use segpredict_core::message::InputFile;

/// Bumped when the manifest's meaning changes; a different format is a
/// different run.
/// 3: a local input's identity holds its inode and change time, and input
/// paths are canonical.
/// 4: the run's rejects and batch records moved from `_rejects.parquet` and
/// `_batches.parquet` to `_rejects/rejects.parquet` and
/// `_segpredict/batches.parquet`, so `out/*.parquet` is one table; an
/// output of format 3 is refused (`--overwrite` replaces it).
pub const MANIFEST_FORMAT: u32 = 4;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunManifest {
    pub format: u32,
    pub segpredict_version: String,
    pub fingerprint: Fingerprint,
    /// The frozen input list, in the order rows are numbered.
    pub inputs: Vec<InputRecord>,
    /// How many shards share the directory (1 without shards).
    pub shards: u32,
}

/// Everything that changes a prediction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fingerprint {
    /// SHA-256 of the model file, hex.
    pub model_sha256: String,
    /// SHA-256 of the label map file, hex.
    pub labels_sha256: String,
    /// The column mapping, as canonical text.
    pub columns: String,
    /// The model's dtype (`f32`, `bf16`, `f16`).
    pub dtype: String,
}

/// One input file as the run found it. What identifies it: its path (a
/// local one canonical: absolute, links resolved), size and rows; a local
/// file's modification time, inode and change time (ctime, which `touch`
/// cannot set) and its Parquet footer's hash; an object's ETag (or
/// version). Another file under the name, the same file rewritten (its
/// mtime put back or not), or another object is another input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputRecord {
    pub path: String,
    pub size: u64,
    /// Modification time, nanoseconds since the Unix epoch.
    pub mtime_ns: i64,
    pub rows: u64,
    /// SHA-256 of the file's Parquet footer (its schema, row groups, column
    /// offsets and statistics): a change of content that keeps the size
    /// and the modification time (`cp -p`, `rsync -a`) changes it.
    pub footer_sha256: String,
    /// An object's ETag (or `version ID`): in object storage the identity
    /// of the content, since a bucket's modification time is the upload's;
    /// every read of the object is pinned to it. A local file's inode and
    /// change time (`inode 1234 ctime NS`): a file swapped in under the
    /// name, or rewritten with its size and mtime kept, differs here.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{location} was written by another version of segpredict (manifest format {format}, this one writes {MANIFEST_FORMAT})")]
    OtherFormat { location: String, format: u64 },
    #[error("{location} is not a segpredict run manifest: {source}")]
    Parse {
        location: String,
        #[source]
        source: serde_json::Error,
    },
}

impl Classify for ManifestError {
    /// A manifest that does not parse stays so; a store may recover.
    fn failure(&self) -> Failure {
        match self {
            ManifestError::Store(e) => e.failure(),
            ManifestError::Parse { .. } | ManifestError::OtherFormat { .. } => Failure::Permanent,
        }
    }
}

impl RunManifest {
    /// The manifest of a run of `inputs` over `shards` shards.
    pub fn new(fingerprint: Fingerprint, inputs: &[InputFile], shards: u32) -> Self {
        Self {
            format: MANIFEST_FORMAT,
            segpredict_version: env!("CARGO_PKG_VERSION").to_string(),
            fingerprint,
            inputs: inputs.iter().map(InputRecord::of).collect(),
            shards,
        }
    }

    /// Each input's name as the output's `source_file` holds it, and its rows.
    pub fn input_rows(&self) -> Vec<(String, u64)> {
        self.inputs
            .iter()
            .map(|i| (i.path.clone(), i.rows))
            .collect()
    }

    fn text(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).expect("a manifest serializes");
        text.push('\n');
        text
    }

    /// Writes `_run.json` whole, replacing what was there.
    pub fn write(&self, store: &dyn Store) -> Result<(), ManifestError> {
        Ok(store.put(MANIFEST_NAME, self.text().as_bytes())?)
    }

    /// Writes `_run.json` unless one is there: `Ok(false)` when it is.
    pub fn write_if_absent(&self, store: &dyn Store) -> Result<bool, ManifestError> {
        Ok(store.put_if_absent(MANIFEST_NAME, self.text().as_bytes())?)
    }

    /// `_run.json`, or `None` when the store has none.
    pub fn read(store: &dyn Store) -> Result<Option<Self>, ManifestError> {
        let Some(bytes) = store.get(MANIFEST_NAME)? else {
            return Ok(None);
        };
        // Another format is another run, told as such, before its fields
        // are read as this format's.
        let format = serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|v| v.get("format").and_then(serde_json::Value::as_u64));
        if let Some(format) = format.filter(|&f| f != u64::from(MANIFEST_FORMAT)) {
            return Err(ManifestError::OtherFormat {
                location: store.locate(MANIFEST_NAME),
                format,
            });
        }
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|source| ManifestError::Parse {
                location: store.locate(MANIFEST_NAME),
                source,
            })
    }

    /// What differs from the `recorded` manifest to this one, one sentence
    /// per difference, for a person deciding whether to pass `--overwrite`.
    /// Empty when the two describe the same run.
    pub fn differences_from(&self, recorded: &RunManifest) -> Vec<String> {
        let mut out = Vec::new();
        let mut differs = |what: &str, was: &dyn std::fmt::Display, now: &dyn std::fmt::Display| {
            out.push(format!("{what} differs (was {was}, now {now})"));
        };
        if self.format != recorded.format {
            differs("manifest format", &recorded.format, &self.format);
        }
        if self.segpredict_version != recorded.segpredict_version {
            differs(
                "segpredict version",
                &recorded.segpredict_version,
                &self.segpredict_version,
            );
        }
        let (was, now) = (&recorded.fingerprint, &self.fingerprint);
        if was.model_sha256 != now.model_sha256 {
            differs(
                "model",
                &format!("sha256 {}", short_hash(&was.model_sha256)),
                &format!("sha256 {}", short_hash(&now.model_sha256)),
            );
        }
        if was.labels_sha256 != now.labels_sha256 {
            differs(
                "label map",
                &format!("sha256 {}", short_hash(&was.labels_sha256)),
                &format!("sha256 {}", short_hash(&now.labels_sha256)),
            );
        }
        if was.columns != now.columns {
            differs("column mapping", &was.columns, &now.columns);
        }
        if was.dtype != now.dtype {
            differs("dtype", &was.dtype, &now.dtype);
        }
        if self.shards != recorded.shards {
            differs("shard count", &recorded.shards, &self.shards);
        }
        out.extend(input_differences(&recorded.inputs, &self.inputs));
        out
    }
}

/// Files added, removed or changed, by path; then a change of order, which
/// renumbers rows.
fn input_differences(was: &[InputRecord], now: &[InputRecord]) -> Vec<String> {
    let mut out = Vec::new();
    let find = |list: &'_ [InputRecord], path: &str| -> Option<usize> {
        list.iter().position(|r| r.path == path)
    };
    for old in was {
        match find(now, &old.path) {
            None => out.push(gone(old)),
            Some(i) => {
                let changes = changes(old, &now[i]);
                if !changes.is_empty() {
                    out.push(format!(
                        "input file {} changed since the output was started ({}): put the original back to resume this output",
                        old.path,
                        changes.join(", ")
                    ));
                }
            }
        }
    }
    for new in now {
        if find(was, &new.path).is_none() {
            out.push(format!("input file {} is new", new.path));
        }
    }
    let paths = |list: &[InputRecord]| list.iter().map(|r| r.path.clone()).collect::<Vec<_>>();
    if out.is_empty() && paths(was) != paths(now) {
        out.push("the input files are in another order".into());
    }
    out
}

/// A recorded input this run does not have: missing, or (a local file still
/// there, left out as unreadable under `on_bad_file = "skip"`) changed.
fn gone(old: &InputRecord) -> String {
    let local = !old.path.contains("://");
    match std::fs::metadata(&old.path) {
        Ok(meta) if local && meta.is_file() => {
            let mut changes = Vec::new();
            if meta.len() != old.size {
                changes.push(format!("size {} -> {}", old.size, meta.len()));
            }
            let identity = crate::store::storage::file_identity(&meta);
            if identity != old.version {
                changes.push(format!(
                    "identity {} -> {}",
                    describe_version(&old.version),
                    describe_version(&identity)
                ));
            }
            format!(
                "input file {} changed since the output was started ({}) and no longer reads as Parquet: put the original back to resume this output",
                old.path,
                if changes.is_empty() { "content".into() } else { changes.join(", ") }
            )
        }
        _ => format!("input file {} is no longer in the input", old.path),
    }
}

/// What differs between two records of one path.
fn changes(old: &InputRecord, new: &InputRecord) -> Vec<String> {
    let mut changes = Vec::new();
    if old.size != new.size {
        changes.push(format!("size {} -> {}", old.size, new.size));
    }
    if old.mtime_ns != new.mtime_ns {
        changes.push(format!(
            "modified {} -> {}",
            utc_time(old.mtime_ns),
            utc_time(new.mtime_ns)
        ));
    }
    if old.rows != new.rows {
        changes.push(format!("rows {} -> {}", old.rows, new.rows));
    }
    if old.footer_sha256 != new.footer_sha256 {
        changes.push(format!(
            "content: Parquet footer sha256 {} -> {}",
            short_hash(&old.footer_sha256),
            short_hash(&new.footer_sha256)
        ));
    }
    if old.version != new.version {
        let what = match old.path.contains("://") {
            true => "object ETag/version",
            false => "identity",
        };
        changes.push(format!(
            "{what} {} -> {}",
            describe_version(&old.version),
            describe_version(&new.version)
        ));
    }
    changes
}

/// An input's recorded version for a person: a local file's inode and
/// change time (as a UTC time), an object's ETag as it is.
fn describe_version(version: &str) -> String {
    match crate::store::storage::parse_file_identity(version) {
        Some((inode, ctime_ns)) => format!(
            "inode {inode} changed {}",
            utc_time(i64::try_from(ctime_ns).unwrap_or(i64::MAX))
        ),
        None if version.is_empty() => "none".into(),
        None => version.to_string(),
    }
}

fn short_hash(hex: &str) -> &str {
    hex.get(..12).unwrap_or(hex)
}

/// `2026-12-03T09:41:07.123Z` from nanoseconds since the epoch (UTC).
fn utc_time(ns: i64) -> String {
    segpredict_core::time::rfc3339_ns(ns)
}

/// SHA-256 of a file's content, hex, read in 1 MiB pieces (a model of
/// several GB is never held in memory).
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

impl InputRecord {
    /// An input file as the readers planned it.
    pub fn of(file: &InputFile) -> Self {
        let mtime_ns = file
            .modified
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
        Self {
            path: file.path.display().to_string(),
            size: file.size_bytes,
            mtime_ns,
            rows: file.rows,
            footer_sha256: file.footer_sha256.clone(),
            version: file.version.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::LocalStore;

    fn manifest() -> RunManifest {
        RunManifest {
            format: MANIFEST_FORMAT,
            segpredict_version: "0.1.0".into(),
            fingerprint: Fingerprint {
                model_sha256: "ab".repeat(32),
                labels_sha256: "cd".repeat(32),
                columns: "id=id segments=segments".into(),
                dtype: "f32".into(),
            },
            inputs: vec![
                InputRecord {
                    path: "in/a.parquet".into(),
                    size: 123,
                    mtime_ns: 1_764_754_867_123_000_000,
                    rows: 10,
                    footer_sha256: "aa".repeat(32),
                    version: String::new(),
                },
                InputRecord {
                    path: "in/b.parquet".into(),
                    size: 50,
                    mtime_ns: 0,
                    rows: 5,
                    footer_sha256: "bb".repeat(32),
                    version: String::new(),
                },
            ],
            shards: 1,
        }
    }

    #[test]
    fn the_same_run_has_no_differences_and_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::new(dir.path());
        assert_eq!(RunManifest::read(&store).unwrap(), None);
        let m = manifest();
        assert!(m.write_if_absent(&store).unwrap());
        assert!(!m.write_if_absent(&store).unwrap());
        let back = RunManifest::read(&store).unwrap().unwrap();
        assert_eq!(back, m);
        assert!(m.differences_from(&back).is_empty());
    }

    #[test]
    fn each_difference_is_named_for_a_person() {
        let was = manifest();
        let mut now = manifest();
        now.fingerprint.model_sha256 = "ef".repeat(32);
        now.fingerprint.dtype = "bf16".into();
        now.inputs[0].size = 456;
        now.inputs[0].mtime_ns += 1_000_000_000;
        now.inputs[0].footer_sha256 = "dd".repeat(32);
        now.inputs.remove(1);
        now.inputs.push(InputRecord {
            path: "in/c.parquet".into(),
            size: 1,
            mtime_ns: 0,
            rows: 1,
            footer_sha256: "cc".repeat(32),
            version: String::new(),
        });
        now.shards = 3;
        let diff = now.differences_from(&was);
        assert_eq!(
            diff,
            vec![
                "model differs (was sha256 abababababab, now sha256 efefefefefef)",
                "dtype differs (was f32, now bf16)",
                "shard count differs (was 1, now 3)",
                "input file in/a.parquet changed since the output was started (size 123 -> 456, modified 2025-12-03T09:41:07.123Z -> 2025-12-03T09:41:08.123Z, content: Parquet footer sha256 aaaaaaaaaaaa -> dddddddddddd): put the original back to resume this output",
                "input file in/b.parquet is no longer in the input",
                "input file in/c.parquet is new",
            ]
        );
    }

    #[test]
    fn a_file_swapped_under_its_name_is_changed_by_its_identity() {
        let mut was = manifest();
        was.inputs[0].version = "inode 12 ctime 1764754867123000000".into();
        let mut now = was.clone();
        now.inputs[0].version = "inode 99 ctime 1764754900000000000".into();
        assert_eq!(
            now.differences_from(&was),
            vec!["input file in/a.parquet changed since the output was started (identity inode 12 changed 2025-12-03T09:41:07.123Z -> inode 99 changed 2025-12-03T09:41:40.000Z): put the original back to resume this output"]
        );
    }

    #[test]
    fn a_local_file_left_out_but_still_there_is_changed_not_missing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.parquet");
        std::fs::write(&path, b"PAR1 truncated").unwrap();
        let mut was = manifest();
        was.inputs[0].path = path.display().to_string();
        let mut now = was.clone();
        now.inputs.remove(0);
        let diff = now.differences_from(&was);
        assert_eq!(diff.len(), 1, "{diff:?}");
        assert!(
            diff[0].contains("changed since the output was started (size 123 -> 14")
                && diff[0].contains("put the original back")
                && !diff[0].contains("no longer in the input"),
            "{diff:?}"
        );
    }

    #[test]
    fn a_reordered_input_list_is_a_difference() {
        let was = manifest();
        let mut now = manifest();
        now.inputs.reverse();
        assert_eq!(
            now.differences_from(&was),
            vec!["the input files are in another order"]
        );
    }

    #[test]
    fn a_foreign_file_is_a_parse_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(MANIFEST_NAME), "{\"x\": 1}").unwrap();
        let e = RunManifest::read(&LocalStore::new(dir.path()))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("_run.json") && e.contains("not a segpredict"),
            "{e}"
        );
    }

    #[test]
    fn hashes_a_file_in_pieces() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"abc").unwrap();
        assert_eq!(
            sha256_file(&path).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn utc_times_are_civil() {
        assert_eq!(utc_time(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            utc_time(951_782_400_000_000_000),
            "2000-02-29T00:00:00.000Z"
        );
        assert_eq!(
            utc_time(-1_000_000),
            "1000000 ns before 1970-01-01T00:00:00Z"
        );
    }
}
